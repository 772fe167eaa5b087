#!/usr/bin/env python3
"""Where each run's GPU time goes, side by side: the kernel profiles of `fp8train bench --profile N
--json F` rows and of `scripts/reference_bench.py --profile N --json F` peers, grouped into the same
categories by kernel name, in ms per step.

  scripts/kernel_breakdown.py bench-llama3-1b.json peer-float8_reduce-overhead.json
  scripts/kernel_breakdown.py --kernels 12 bench.json peer.json   # also each column's longest kernels

Every JSON file gives one column per profiled row (a bench file: each row with a "profile"; a peer
file: the run). The categories are name patterns (CATEGORIES below, the first match wins); a
compiled peer's fused Triton kernels are split by the operations in their names where those say
(amax, silu, rsqrt, ...), else counted as "fused elementwise (Triton)". Output: a Markdown table,
and with --json the same numbers.
"""
import argparse
import json
import re
import sys

# (category, pattern on the lower-cased kernel name), first match wins. Attention (flash, cuDNN
# *sdpa*) comes before the GEMMs, whose cuBLAS(Lt) kernels are named sm90_xmma_*, nvjet_*,
# cutlass*, *gemm*.
CATEGORIES = [
    ("attention", r"flash|fmha|attn|sdpa"),
    ("GEMMs (cuBLAS/cuBLASLt)", r"gemm|nvjet|xmma|cutlass|cublas"),
    ("SwiGLU (incl. its fused casts and amax passes)", r"swiglu|silu"),
    ("FP8 amax passes", r"amax"),
    ("FP8 casts, transposes, scales", r"cast|quantiz|transpose_codes|scal(e|ing)|_to_copy.*clamp|clamp.*_to_copy"),
    ("optimizer, grad norm", r"adam|multi_tensor|foreach|_amp_|grad_norm|l2norm|clip"),
    ("norms (incl. residual add)", r"norm|rsqrt"),
    ("cross-entropy", r"cross_entropy|log_softmax|nll|logsumexp"),
    ("RoPE", r"rope|rotary|_cos(_|$)|_sin(_|$)"),
    ("copies, fills", r"memcpy|memset|copy|fill|concat|_cat(_|$)"),
    ("fused elementwise (Triton)", r"^triton_"),
]


def category(name):
    low = name.lower()
    for cat, pat in CATEGORIES:
        if re.search(pat, low):
            return cat
    return "other"


def columns_of(path):
    """[(label, profile dict)] of one JSON file."""
    with open(path) as f:
        data = json.load(f)
    cols = []
    if isinstance(data.get("results"), list):  # fp8train bench
        for row in data["results"]:
            if row.get("profile"):
                label = row.get("precision", "?") + (":" + row["recipe"] if row.get("recipe") else "")
                cols.append(("fp8train " + label, row["profile"]))
    elif data.get("profile"):  # reference_bench.py
        mode = data.get("mode", "?")
        if mode == "float8":
            mode = "torchao " + (data.get("float8_recipe") or "float8")
        cols.append((f"{mode} ({data.get('compile_mode') or 'eager'})", data["profile"]))
    if not cols:
        sys.exit(f"kernel_breakdown.py: {path} has no profiled row (run with --profile N)")
    return cols


def breakdown(profile):
    totals = {}
    for k in profile["kernels"]:
        c = category(k["name"])
        totals[c] = totals.get(c, 0.0) + k["ms_per_step"]
    return totals


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="+", help="JSON files of fp8train bench and/or reference_bench.py")
    p.add_argument("--kernels", type=int, default=0, help="also list each column's N longest kernels")
    p.add_argument("--json", default="", help="also write the table here")
    a = p.parse_args()
    cols = [c for f in a.files for c in columns_of(f)]
    sums = [breakdown(prof) for _, prof in cols]
    cats = [c for c, _ in CATEGORIES] + ["other"]
    cats = [c for c in cats if any(s.get(c, 0.0) > 0 for s in sums)]
    print("| GPU ms per step | " + " | ".join(label for label, _ in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for c in cats:
        print(f"| {c} | " + " | ".join(f"{s.get(c, 0.0):.2f}" for s in sums) + " |")
    print("| **all kernels** | " + " | ".join(f"**{prof['device_ms_per_step']:.2f}**" for _, prof in cols) + " |")
    for label, prof in cols if a.kernels > 0 else []:
        print(f"\n{label}: the {a.kernels} longest kernels (ms per step, calls per step)")
        for k in prof["kernels"][:a.kernels]:
            print(f"  {k['ms_per_step']:8.3f} {k['calls_per_step']:6.0f}  [{category(k['name'])}] {k['name'][:110]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"columns": [label for label, _ in cols], "ms_per_step": dict(zip([l for l, _ in cols], sums))},
                      f, indent=2)


if __name__ == "__main__":
    main()
