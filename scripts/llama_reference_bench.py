#!/usr/bin/env python3
"""Same-shape PyTorch reference for `fp8train bench --config configs/llama3-1b.yaml`.

A plain PyTorch LLaMA (RoPE, grouped-query attention through scaled_dot_product_attention's
enable_gqa, RMSNorm, SwiGLU, no biases, tied or untied head) trained with FP32 weights under BF16
autocast, fused AdamW and torch.compile: the usual way to train this shape in BF16. It is a
reference figure beside fp8train's own bf16 and fp8 rows, not a dependency of fp8train.

Reports the median step time, tokens/s, model TFLOP/s (fp8train's formula: 6 x non-embedding
parameters + 12 x n_layer x seq_len x d_model per token; a tied head counts as the head GEMM) and
the peak CUDA memory, as text and (with --json) JSON.

  .venv/bin/python scripts/llama_reference_bench.py                    # the llama3-1b shape
  .venv/bin/python scripts/llama_reference_bench.py --n-layer 2 --d-model 128 --n-head 4 \
      --n-kv-head 2 --d-ff 256 --vocab 512 --seq-len 64 --micro-batch 2 --no-compile --device cpu
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn


class Rotary(nn.Module):
    def __init__(self, seq_len, head_dim, theta):
        super().__init__()
        inv = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        ang = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv)
        full = torch.cat([ang, ang], -1)
        self.register_buffer("cos", full.cos().float(), persistent=False)
        self.register_buffer("sin", full.sin().float(), persistent=False)

    def forward(self, x):  # [B, H, T, D], rotated in FP32 (as fp8train), back in x's dtype
        t, half = x.shape[-2], x.shape[-1] // 2
        xf = x.float()
        rot = torch.cat([-xf[..., half:], xf[..., :half]], -1)
        return (xf * self.cos[:t] + rot * self.sin[:t]).to(x.dtype)


class Block(nn.Module):
    def __init__(self, a, rotary):
        super().__init__()
        self.h, self.kv, self.hd = a.n_head, a.n_kv_head, a.d_model // a.n_head
        self.rotary = rotary
        self.ln_1 = nn.RMSNorm(a.d_model, eps=1e-5)
        self.c_attn = nn.Linear(a.d_model, a.d_model + 2 * self.kv * self.hd, bias=False)
        self.c_proj = nn.Linear(a.d_model, a.d_model, bias=False)
        self.ln_2 = nn.RMSNorm(a.d_model, eps=1e-5)
        self.c_fc = nn.Linear(a.d_model, 2 * a.d_ff, bias=False)
        self.mlp_proj = nn.Linear(a.d_ff, a.d_model, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split([c, self.kv * self.hd, self.kv * self.hd], -1)
        q = self.rotary(q.view(b, t, self.h, self.hd).transpose(1, 2))
        k = self.rotary(k.view(b, t, self.kv, self.hd).transpose(1, 2))
        v = v.view(b, t, self.kv, self.hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.h)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
        gate, up = self.c_fc(self.ln_2(x)).chunk(2, -1)
        return x + self.mlp_proj(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte = nn.Embedding(a.vocab, a.d_model)
        rotary = Rotary(a.seq_len, a.d_model // a.n_head, a.rope_theta)
        self.blocks = nn.ModuleList(Block(a, rotary) for _ in range(a.n_layer))
        self.ln_f = nn.RMSNorm(a.d_model, eps=1e-5)
        self.lm_head = nn.Linear(a.d_model, a.vocab, bias=False)
        if a.tied:
            self.lm_head.weight = self.wte.weight
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx)
        for b in self.blocks:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--d-model", type=int, default=2048)
    p.add_argument("--n-layer", type=int, default=16)
    p.add_argument("--n-head", type=int, default=32)
    p.add_argument("--n-kv-head", type=int, default=8)
    p.add_argument("--d-ff", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--untied", dest="tied", action="store_false", help="separate output head (8B shape)")
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=10, help="timed optimizer steps (median reported)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation happens here)")
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument("--device", default="cuda")
    p.add_argument("--json", default="", help="also write the results here")
    a = p.parse_args()
    dev = torch.device(a.device)
    torch.manual_seed(0)
    model = Llama(a).to(dev)
    n_params = sum(t.numel() for t in model.parameters())
    dense = n_params - (0 if a.tied else model.wte.weight.numel())
    flops_per_token = 6 * dense + 12 * a.n_layer * a.seq_len * a.d_model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=dev.type == "cuda")
    step_fn = torch.compile(model) if a.compile else model
    tokens = torch.randint(0, a.vocab, (a.micro_batch, a.seq_len + 1), device=dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    times = []
    for i in range(a.warmup + a.steps):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    tok = a.micro_batch * a.seq_len
    res = {
        "framework": f"pytorch {torch.__version__} bf16 autocast" + (" + torch.compile" if a.compile else ""),
        "params": n_params, "flops_per_token": flops_per_token, "tokens_per_step": tok,
        "step_ms": 1e3 * step_s, "tokens_per_s": tok / step_s,
        "model_tflops": flops_per_token * tok / step_s / 1e12,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else None,
        "final_loss": loss.item(), "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
    }
    print(f"{res['framework']} on {res['device']}: {n_params / 1e9:.3f}B params, {a.micro_batch} x {a.seq_len} "
          f"tokens/step: {res['step_ms']:.1f} ms/step, {res['tokens_per_s']:.0f} tokens/s, "
          f"{res['model_tflops']:.1f} TFLOP/s, peak {res['peak_memory_gib'] or 0:.1f} GiB, loss {res['final_loss']:.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
