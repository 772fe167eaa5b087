#!/usr/bin/env python3
"""Checks that includes between the folders of lib/ (and apps/, kernels/) flow downward.

Usage: scripts/check_layering.py [--edges] [--root DIR]

kernels/ may include only the floor, lib/numerics/ (the host/device math). A folder is
lib/<name>, or lib/fp8/<room> for lib/fp8's rooms (lib/fp8 itself holds the rewrite, above its
rooms). LAYERS lists them top to bottom, as docs/architecture.md draws them;
folders on one line are peers and must not include each other. Every `#include "lib/..."` and
`#include "apps/..."` line of every source file is read; an include of a folder on the same
line or above is reported with its file and line, and the exit code is 1. --edges prints the
folder graph that was found (how often each folder includes each other one). --root checks
another tree laid out like this one (default: the checkout this script is in); ctest runs the
check (`layering`) and a test that it fails on a planted upward include
(tests/scripts/test_check_layering.py).
"""
import argparse, collections, pathlib, re, sys

LAYERS = [
    ["apps/fp8train"],
    ["lib/report", "lib/bench"],
    ["lib/train"],
    ["lib/step", "lib/checkpoint"],  # peers: a step needs no checkpoint, a checkpoint no step
    ["lib/optim"],
    ["lib/plan", "lib/run"],
    ["lib/dist", "lib/data"],
    ["lib/fp8"],
    ["lib/fp8/layers"],
    ["lib/model"],
    ["lib/fp8/recipes"],
    ["lib/fp8/backends"],
    ["lib/ops"],
    ["lib/gemm"],
    ["lib/config"],
    ["lib/util"],
    ["lib/numerics"],  # the floor: host/device math, includes nothing of lib/
]
# kernels/ is CUDA only: of lib/ it may include the floor's headers and nothing else.
KERNELS_MAY_INCLUDE = re.compile(r"^lib/numerics/[a-z0-9_]+\.h$")
RANK = {folder: i for i, line in enumerate(LAYERS) for folder in line}
INCLUDE = re.compile(r'^\s*#\s*include\s+"((?:lib|apps|kernels)/[^"]+)"')
SOURCES = ("*.h", "*.cpp", "*.cu", "*.cuh", "*.h.in")


def folder_of(path: str) -> str:
    parts = pathlib.PurePosixPath(path).parts
    if parts[0] == "lib" and len(parts) > 3 and parts[1] == "fp8":
        return "/".join(parts[:3])
    if parts[0] == "lib" and len(parts) > 3 and parts[1] == "run":
        return "lib/run"  # lib/run/tensorboard/ is part of the run folder's room
    if parts[0] in ("lib", "apps"):
        return "/".join(parts[:2])
    return parts[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--edges", action="store_true", help="print the folder graph")
    parser.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent.parent,
                        help="the tree to check (default: this checkout)")
    args = parser.parse_args()
    root = args.root.resolve()
    if not (root / "lib").is_dir():
        print(f"check_layering: {root} has no lib/ folder", file=sys.stderr)
        return 2
    edges = collections.Counter()
    problems = []
    unknown = set()
    for top in ("apps", "lib", "kernels"):
        for pattern in SOURCES:
            for f in sorted((root / top).rglob(pattern)):
                rel = f.relative_to(root).as_posix()
                src = folder_of(rel)
                for n, line in enumerate(f.read_text().splitlines(), 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    dst = folder_of(m.group(1))
                    if dst == src:
                        continue
                    if src == "kernels":
                        edges[(src, dst)] += 1
                        if not KERNELS_MAY_INCLUDE.match(m.group(1)):
                            problems.append(f"{rel}:{n}: kernels/ includes {m.group(1)} (only lib/numerics/)")
                        continue
                    edges[(src, dst)] += 1
                    for folder in (src, dst):
                        if folder not in RANK:
                            unknown.add(folder)
                    if src in RANK and dst in RANK and RANK[dst] <= RANK[src]:
                        problems.append(f"{rel}:{n}: {src} includes {m.group(1)} ({dst} is not below it)")
    if args.edges:
        for (src, dst), count in sorted(edges.items(), key=lambda e: (RANK.get(e[0][0], 99), RANK.get(e[0][1], 99))):
            print(f"{src:18} -> {dst:18} {count}")
    for folder in sorted(unknown):
        problems.append(f"{folder}: not in scripts/check_layering.py's LAYERS")
    for p in problems:
        print(p)
    folders = {f for e in edges for f in e}
    if problems:
        print(f"layering: {len(problems)} upward or unknown include(s)")
        return 1
    print(f"layering: {sum(edges.values())} includes between {len(folders)} folders, all downward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
