#!/usr/bin/env python3
"""scripts/check_layering.py fails on an upward include and passes without one.

Each case copies the checkout's apps/, lib/ and kernels/ into a temporary folder, plants one
#include line in the first source file of one folder there (the checkout is never edited) and runs the check with --root
on the copy: exit 1 with the planted file and line named, or exit 0 for a downward include.
The unplanted copy must pass first, so a failure is the planted line's doing.

Usage: tests/scripts/test_check_layering.py [SOURCE_DIR]   (default: this checkout)
"""
import pathlib, shutil, subprocess, sys, tempfile

SOURCE = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
CHECK = SOURCE / "scripts" / "check_layering.py"

# (folder, file pattern: the first such file is planted in; include line; expected exit code;
# what the case shows). The included file need not exist: the check reads paths.
CASES = [
    ("lib/numerics", "*.h", '#include "lib/util/error.h"', 1, "the floor includes nothing of lib/"),
    ("kernels", "*.cu", '#include "lib/util/error.h"', 1, "a .cu of kernels/ includes only the floor"),
    ("kernels", "*.cuh", '#include "lib/optim/adamw_step.h"', 1, "kernels/ includes nothing of lib/optim"),
    ("lib/config", "*.h", '#include "lib/fp8/recipes/scaling.h"', 1, "config includes nothing of lib/fp8"),
    ("lib/util", "*.cpp", '#include "lib/config/experiment.h"', 1, "util is below config"),
    ("lib/optim", "*.cpp", '#include "lib/train/run_setup.h"', 1, "an include two layers up"),
    ("lib/plan", "*.cpp", '#include "lib/run/metrics.h"', 1, "peers on one line"),
    ("lib/train", "*.cpp", '#include "lib/numerics/format.h"', 0, "a downward include passes"),
    ("kernels", "*.cu", '#include "lib/numerics/block_math.h"', 0, "kernels may include the floor"),
]


def run_check(root: pathlib.Path):
    out = subprocess.run([sys.executable, str(CHECK), "--root", str(root)], capture_output=True, text=True)
    return out.returncode, out.stdout + out.stderr


def plant(root: pathlib.Path, rel: str, line: str) -> int:
    """Inserts `line` after the file's first #include (or at its top); returns its line number."""
    path = root / rel
    lines = path.read_text().split("\n")
    at = next((i + 1 for i, text in enumerate(lines) if text.startswith("#include")), 0)
    lines.insert(at, line)
    path.write_text("\n".join(lines))
    return at + 1


def main() -> int:
    failures = []
    with tempfile.TemporaryDirectory(prefix="layering.") as tmp:
        clean = pathlib.Path(tmp) / "clean"
        for top in ("apps", "lib", "kernels"):
            shutil.copytree(SOURCE / top, clean / top)
        code, out = run_check(clean)
        if code != 0:
            print(f"FAIL: the unplanted copy does not pass (exit {code}):\n{out}")
            return 1
        for n, (folder, pattern, line, want, why) in enumerate(CASES):
            root = pathlib.Path(tmp) / f"case{n}"
            shutil.copytree(clean, root)
            files = sorted((root / folder).glob(pattern))
            if not files:
                failures.append(f"{folder}/{pattern}: no such file in the checkout (update this test's CASES)")
                continue
            rel = files[0].relative_to(root).as_posix()
            at = plant(root, rel, line)
            code, out = run_check(root)
            named = f"{rel}:{at}:" in out
            ok = code == want and (named if want == 1 else True)
            print(f"{'ok  ' if ok else 'FAIL'} {rel}:{at} {line}: exit {code} (want {want}; {why})")
            if not ok:
                failures.append(f"{rel}:{at}: exit {code}, want {want}{'' if named or want == 0 else ', line not named'}\n{out}")
    for f in failures:
        print("FAIL:", f)
    print(f"check_layering: {len(CASES) - len(failures)} of {len(CASES)} planted cases as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
