#!/usr/bin/env python3
"""Times causal scaled-dot-product attention (forward + backward, bf16) per SDPA backend for the
attention shapes of fp8train's LLaMA configs, and compares each backend's output and gradients with
the flash backend's (the one LibTorch's default priority order picks on these shapes).

fp8train calls at::scaled_dot_product_attention, which dispatches to the same ATen kernels as
torch.nn.functional.scaled_dot_product_attention here, so the times carry over. A backend that
refuses a shape (or is not built) is reported as unavailable with the reason.

  python3 scripts/attention_bench.py                  # every preset, every backend
  python3 scripts/attention_bench.py --shapes llama3-8b --repeats 20 --json attn.json

Output: one line per shape and backend (median ms of forward + backward over --repeats, model
TFLOP/s of the causal attention: 4 x B x H x T^2 x D x 3.5 / 2 per forward + backward, max
relative difference against flash), and with --json the same as JSON.
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# B, query heads, K/V heads, T, head dim: configs/llama3-{1b,3b,8b}.yaml at their bench micro-batch,
# and the 8B at sequence 8192.
SHAPES = {
    "llama3-1b": (8, 32, 8, 2048, 64),
    "llama3-3b": (4, 24, 8, 2048, 128),
    "llama3-8b": (2, 32, 8, 2048, 128),
    "llama3-8b-t8192": (1, 32, 8, 8192, 128),
}
BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}


def run_once(backend, q, k, v, dy, gqa):
    with sdpa_kernel([backend]):
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        y.backward(dy)
    return y


def time_backend(backend, q, k, v, dy, gqa, repeats):
    for t in (q, k, v):
        t.grad = None
    run_once(backend, q, k, v, dy, gqa)  # warm-up (and the reference outputs)
    times = []
    for _ in range(repeats):
        for t in (q, k, v):
            t.grad = None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        y = run_once(backend, q, k, v, dy, gqa)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), min(times), max(times), y.detach(), [t.grad.detach() for t in (q, k, v)]


def rel_diff(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30)).item()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma list of " + ", ".join(SHAPES))
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--json", default="")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("attention_bench.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    results = []
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    for name in a.shapes.split(","):
        B, H, KV, T, D = SHAPES[name]
        torch.manual_seed(0)
        q = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(B, KV, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(B, KV, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)
        flops = 4 * B * H * T * T * D * 3.5 / 2
        ref = None
        for bname, backend in BACKENDS.items():
            row = {"shape": name, "B": B, "H": H, "KV": KV, "T": T, "D": D, "backend": bname}
            try:
                med, lo, hi, y, grads = time_backend(backend, q, k, v, dy, KV != H, a.repeats)
            except RuntimeError as e:
                row["unavailable"] = str(e).splitlines()[0][:200]
                print(f"{name:16} {bname:9} unavailable: {row['unavailable']}")
                results.append(row)
                continue
            if ref is None and bname == "flash":
                ref = (y, grads)
            row.update(ms=med, ms_min=lo, ms_max=hi, tflops=flops / med / 1e9)
            if ref is not None:
                row["max_rel_diff_vs_flash"] = max([rel_diff(y, ref[0])] + [rel_diff(g, r) for g, r in zip(grads, ref[1])])
            print(f"{name:16} {bname:9} {med:8.3f} ms ({lo:.3f}-{hi:.3f}) {row['tflops']:6.1f} TFLOP/s"
                  + (f"  max rel diff vs flash {row['max_rel_diff_vs_flash']:.2e}" if "max_rel_diff_vs_flash" in row else ""))
            results.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                       "device": torch.cuda.get_device_name(), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
