#!/usr/bin/env python3
"""fp8train's bench rows against their like-for-like PyTorch peers (scripts/peer-bench.sh writes the
inputs): each fp8train row is compared with the fastest measured run of its peer recipe, and the
table names both sides' recipe, compile mode and CUDA graphs.

Peers: bf16 <-> PyTorch bf16 autocast + torch.compile; fp8 `current` <-> torchao float8 tensorwise
(dynamic scaling from each tensor's own amax, E4M3 forward / E5M2 gradients, fast accumulation in
the forward GEMM only: fp8train's current recipe with its default keys); fp8 `delayed` <-> the same
torchao tensorwise run, the nearest there is (torchao 0.18 has no delayed scaling); fp8 `block` <->
torchao rowwise (one scale per row, the nearest to 1x128 / 128x128 blocks), when it was run; fp8
`rowwise` (fp8train's row-wise recipe) <-> the same torchao rowwise run, the recipe it follows.

  python3 scripts/peer_table.py --bench bench-llama3-1b.json --peers peer-*.json [--markdown]
  python3 scripts/peer_table.py --curve DIR [DIR...]   # scripts/curve-bench.sh's folders (curve_table.py)
"""
import argparse
import json
import sys

import curve_table

PEER_OF = {"bf16": ("compile", None), "fp8:current": ("float8", "tensorwise"), "fp8:delayed": ("float8", "tensorwise"),
           "fp8:block": ("float8", "rowwise"), "fp8:rowwise": ("float8", "rowwise"), "fp8": ("float8", "tensorwise")}
NEAREST = {"fp8:delayed": "nearest: torchao has no delayed scaling", "fp8:block": "nearest: rowwise scales",
           "fp8": "the config's recipe"}


def measured(p):
    """A peer that ran; scripts/peer-bench.sh writes {"not_run": reason, ...} for one that did not."""
    return "not_run" not in p


def same_recipe(p, mode, recipe):
    return p["mode"] == mode and p.get("float8_recipe") == recipe


def best_peer(peers, mode, recipe):
    runs = [p for p in peers if measured(p) and same_recipe(p, mode, recipe)]
    return max(runs, key=lambda p: p["tokens_per_s"]) if runs else None


def peer_name(p):
    name = "PyTorch bf16" if p["mode"] == "compile" else f"torchao float8 {p['float8_recipe']}"
    return f"{name} + torch.compile {p['compile_mode']} (CUDA graphs {'on' if p['cuda_graphs'] else 'off'})"


def not_run_note(p):
    secs = p.get("seconds_since_start")
    return f"not run: {p['not_run']}" + (f" ({secs} s after it started)" if secs is not None else "")


def unmeasured_modes(peers, mode, recipe):
    """'; not run: max-autotune (why)' for the peer recipe's modes that gave no result."""
    missing = [p for p in peers if not measured(p) and same_recipe(p, mode, recipe)]
    return "".join(f"; {p['compile_mode']} {not_run_note(p)}" for p in missing)


def rows(bench, peers):
    out = []
    for r in bench["results"]:
        label = r["precision"] + (":" + r["recipe"] if r.get("recipe") else "")
        mode, recipe = PEER_OF.get(label, (None, None))
        p = best_peer(peers, mode, recipe) if mode else None
        gib = r["peak_memory_bytes"] / 2**30
        name = peer_name(p) + (f" [{NEAREST[label]}]" if label in NEAREST else "") if p else "none measured"
        out.append({
            "row": f"fp8train {label} (CUDA graphs {'on' if r.get('cuda_graph') else 'off'})",
            "step_ms": r["median_step_ms"], "tokens_per_s": r["tokens_per_s"], "peak_gib": gib,
            "peer": name + (unmeasured_modes(peers, mode, recipe) if mode else ""),
            "speed_ratio": r["tokens_per_s"] / p["tokens_per_s"] if p else None,
            "memory_ratio": gib / p["peak_memory_gib"] if p and p.get("peak_memory_gib") else None,
        })
    for p in sorted(peers, key=lambda p: (p["mode"], str(p.get("float8_recipe")), p["compile_mode"] or "")):
        if not measured(p):
            out.append({"row": peer_name(p), "step_ms": None, "tokens_per_s": None, "peak_gib": None,
                        "peer": not_run_note(p), "speed_ratio": None, "memory_ratio": None})
            continue
        out.append({"row": peer_name(p), "step_ms": p["step_ms"], "tokens_per_s": p["tokens_per_s"],
                    "peak_gib": p["peak_memory_gib"], "peer": "", "speed_ratio": None, "memory_ratio": None})
    return out


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--bench", help="fp8train bench --json output")
    a.add_argument("--curve", nargs="*", default=None,
                   help="scripts/curve-bench.sh output folders (each holds MODEL/ folders): the curve table, "
                        "with repeats (median and range) instead of --bench/--peers")
    a.add_argument("--peers", nargs="*", default=[], help="reference_bench.py --json outputs")
    a.add_argument("--markdown", action="store_true")
    a.add_argument("--json", default="", help="also write the table here")
    args = a.parse_args()
    if args.curve is not None:
        return curve_table.main(args.curve, args.json)
    if not args.bench:
        a.error("--bench (or --curve) is required")
    with open(args.bench) as f:
        bench = json.load(f)
    peers = []
    for path in args.peers:
        try:
            with open(path) as f:
                peers.append(json.load(f))
        except (OSError, json.JSONDecodeError) as e:
            print(f"peer_table.py: skipping {path}: {e}", file=sys.stderr)
    table = rows(bench, peers)
    fmt = (lambda v, spec: format(v, spec) if v is not None else "-")
    if args.markdown:
        print("| run | step ms | tokens/s | peak GiB | peer (its best measured mode) | speed vs peer | memory vs peer |")
        print("|---|---|---|---|---|---|---|")
    for t in table:
        cells = [t["row"], fmt(t["step_ms"], ".2f"), fmt(t["tokens_per_s"], ",.0f"), fmt(t["peak_gib"], ".2f"),
                 t["peer"], fmt(t["speed_ratio"], ".3f") + ("x" if t["speed_ratio"] else ""),
                 fmt(t["memory_ratio"], ".3f") + ("x" if t["memory_ratio"] else "")]
        print("| " + " | ".join(cells) + " |" if args.markdown else "  ".join(cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
