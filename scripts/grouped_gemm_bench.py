#!/usr/bin/env python3
"""FP8 expert GEMMs two ways on one GPU: one grouped GEMM (torch._scaled_grouped_mm, the kernel
fp8train's Fp8GroupedLinear calls through LibTorch) against one cuBLASLt GEMM per expert
(torch._scaled_mm in a loop, which needs every expert's token count on the host). Row-wise FP32
scales and E4M3 operands on both sides, BF16 out; the experts' token counts equal (forced-balanced
routing). Times are CUDA-event medians over --repeat runs of --iters calls, after --warmup calls.

  python3 scripts/grouped_gemm_bench.py                      # OLMoE-1B-7B: 64 experts, d 2048, F 1024
  python3 scripts/grouped_gemm_bench.py --experts 16 --d-model 512 --d-ff 512 --tokens 65536 --top-k 2
Prints one row per GEMM of an expert layer (fc: d -> 2F, proj: F -> d; fprop, dgrad, wgrad) and
writes --json.
"""
import argparse
import json
import statistics
import sys

import torch


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--d-model", type=int, default=2048)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--tokens", type=int, default=8192, help="tokens of one micro-batch (before top-k)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", default="grouped_gemm_bench.json")
    return p.parse_args()


def e4m3_rowwise(x):
    """x [rows, K] -> (codes e4m3 [rows, K], the dequantization factors [rows] float32)."""
    amax = x.abs().amax(dim=1).float().clamp(min=1e-12)
    scale = 448.0 / amax
    codes = (x.float() * scale[:, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    return codes, (1.0 / scale).contiguous()


def time_ms(fn, warmup, iters, repeat):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        runs.append(start.elapsed_time(end) / iters)
    return statistics.median(runs), min(runs), max(runs)


def case(name, groups, m_per_group, k, n, a):
    """out[g] = A_g [m, k] . B_g [n, k]^T for every group, grouped along the rows (fprop, dgrad)."""
    dev = "cuda"
    A, sa = e4m3_rowwise(torch.randn(groups * m_per_group, k, device=dev))
    Bw = torch.randn(groups * n, k, device=dev)
    B, sb = e4m3_rowwise(Bw)
    offs = torch.arange(1, groups + 1, device=dev, dtype=torch.int32) * m_per_group
    B3 = B.view(groups, n, k).transpose(1, 2)
    grouped = lambda: torch._scaled_grouped_mm(A, B3, sa, sb.view(groups, n), offs, out_dtype=torch.bfloat16,
                                               use_fast_accum=True)
    As = [A[g * m_per_group:(g + 1) * m_per_group] for g in range(groups)]
    sas = [sa[g * m_per_group:(g + 1) * m_per_group, None] for g in range(groups)]
    Bs = [B[g * n:(g + 1) * n].t() for g in range(groups)]
    sbs = [sb[None, g * n:(g + 1) * n] for g in range(groups)]

    def per_expert():
        for g in range(groups):
            torch._scaled_mm(As[g], Bs[g], scale_a=sas[g], scale_b=sbs[g], out_dtype=torch.bfloat16,
                             use_fast_accum=True)

    g_ms = time_ms(grouped, a.warmup, a.iters, a.repeat)
    l_ms = time_ms(per_expert, a.warmup, a.iters, a.repeat)
    flops = 2.0 * groups * m_per_group * k * n
    return {"gemm": name, "groups": groups, "rows_per_group": m_per_group, "k": k, "n": n,
            "grouped_ms": g_ms, "per_expert_ms": l_ms, "grouped_tflops": flops / g_ms[0] / 1e9,
            "per_expert_tflops": flops / l_ms[0] / 1e9, "per_expert_over_grouped": l_ms[0] / g_ms[0]}


def main():
    a = parse()
    if not torch.cuda.is_available():
        print("grouped_gemm_bench.py: needs a CUDA GPU (Hopper: torch._scaled_grouped_mm)", file=sys.stderr)
        return 2
    m = a.tokens * a.top_k // a.experts
    d, f, e = a.d_model, a.d_ff, a.experts
    rows = [case("fc fprop", e, m, d, 2 * f, a), case("fc dgrad", e, m, 2 * f, d, a),
            case("proj fprop", e, m, f, d, a), case("proj dgrad", e, m, d, f, a)]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {e} experts x {m} rows each "
          f"({a.tokens} tokens x top-{a.top_k}); median (min-max) ms over {a.repeat} runs of {a.iters}")
    print(f"{'GEMM':12} {'grouped ms':>22} {'per-expert ms':>22} {'per-expert/grouped':>19} {'grouped TFLOP/s':>16}")
    for r in rows:
        g, l = r["grouped_ms"], r["per_expert_ms"]
        print(f"{r['gemm']:12} {g[0]:8.3f} ({g[1]:.3f}-{g[2]:.3f}) {l[0]:8.3f} ({l[1]:.3f}-{l[2]:.3f}) "
              f"{r['per_expert_over_grouped']:19.2f} {r['grouped_tflops']:16.0f}")
    with open(a.json, "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
