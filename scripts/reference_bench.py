#!/usr/bin/env python3
"""Same-shape PyTorch reference for `fp8train bench`: a plain PyTorch GPT or LLaMA, trained as people
usually train it, timed the way fp8train bench times its steps.

The model (--model picks the shape of one of configs/*.yaml; the flags below override it):
- gpt: nanoGPT-style (learned positions, LayerNorm without bias, tanh GELU, fused q/k/v, tied head);
- llama: RoPE, grouped-query attention through scaled_dot_product_attention's enable_gqa, RMSNorm,
  SwiGLU, no biases, tied or untied head.
Training: FP32 weights under BF16 autocast, fused AdamW, global-norm clip 1.0, one micro-batch per
step on random tokens. --mode picks eager, torch.compile, or torchao's float8 training (every Linear
but the head converted; --float8-recipe: tensorwise = dynamic scaling of each tensor by its own amax,
the peer of fp8train's `current` recipe; rowwise = one scale per row, the nearest to `block`) with
torch.compile. --compile-mode is torch.compile's mode: default and max-autotune-no-cudagraphs launch
kernels one by one, reduce-overhead and max-autotune replay the compiled forward and backward as CUDA
graphs (fp8train replays its whole step as one); the output names the mode and whether CUDA graphs
were on. The figures are references beside fp8train's own bf16 and fp8 rows; fp8train does not depend
on this script.

Reports the median step time, tokens/s, model TFLOP/s (fp8train's formula: 6 x non-embedding
parameters + 12 x n_layer x seq_len x d_model per token; a tied head counts as the head GEMM) and
the peak CUDA memory, as text and (with --json) JSON. Exit 2 when --mode float8 lacks torchao.
--wait-for FILE compiles and warms up first, then waits until FILE exists before the timed steps (a
caller can compile while the GPU is busy elsewhere and time when it is free).

  python3 scripts/reference_bench.py --model gpt-1.3b --mode compile
  python3 scripts/reference_bench.py --model gpt-1.3b --mode float8 --json ref-1.3b-float8.json
  python3 scripts/reference_bench.py --model llama3-1b --mode compile
  python3 scripts/reference_bench.py --model llama3-1b --mode float8 --compile-mode reduce-overhead
  .venv/bin/python scripts/reference_bench.py --model gpt2-124m --n-layer 2 --d-model 128 --n-head 4 \
      --vocab 512 --seq-len 64 --micro-batch 2 --mode eager --device cpu
"""
import argparse
import json
import os
import statistics
import sys
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


class GptBlock(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.h, self.hd = a.n_head, a.d_model // a.n_head
        self.ln_1 = nn.LayerNorm(a.d_model, bias=False)
        self.c_attn = nn.Linear(a.d_model, 3 * a.d_model, bias=False)
        self.c_proj = nn.Linear(a.d_model, a.d_model, bias=False)
        self.ln_2 = nn.LayerNorm(a.d_model, bias=False)
        self.c_fc = nn.Linear(a.d_model, a.d_ff, bias=False)
        self.mlp_proj = nn.Linear(a.d_ff, a.d_model, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.h, self.hd).transpose(1, 2) for z in self.c_attn(self.ln_1(x)).split(c, -1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class LanguageModel(nn.Module):
    """Token embedding, blocks, final norm, head (tied or not) and the mean cross-entropy."""

    def __init__(self, a, blocks, norm, positions=None):
        super().__init__()
        self.wte = nn.Embedding(a.vocab, a.d_model)
        self.wpe = positions
        self.blocks = nn.ModuleList(blocks)
        self.ln_f = norm
        self.lm_head = nn.Linear(a.d_model, a.vocab, bias=False)
        if a.tied:
            self.lm_head.weight = self.wte.weight
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def llama(a):
    rotary = Rotary(a.seq_len, a.d_model // a.n_head, a.rope_theta)
    return LanguageModel(a, [Block(a, rotary) for _ in range(a.n_layer)], nn.RMSNorm(a.d_model, eps=1e-5))


def gpt(a):
    return LanguageModel(a, [GptBlock(a) for _ in range(a.n_layer)], nn.LayerNorm(a.d_model, bias=False),
                         positions=nn.Embedding(a.seq_len, a.d_model))


# torch.compile's modes, and whether each replays the compiled graphs as CUDA graphs.
COMPILE_MODES = {"default": False, "reduce-overhead": True, "max-autotune": True, "max-autotune-no-cudagraphs": False}

# The shapes of configs/*.yaml (bench: one micro-batch of micro_batch_size sequences per step).
PRESETS = {
    "gpt2-124m": dict(arch="gpt", n_layer=12, d_model=768, n_head=12, n_kv_head=12, d_ff=3072, vocab=50304,
                      seq_len=1024, micro_batch=16, tied=True),
    "gpt-1.3b": dict(arch="gpt", n_layer=24, d_model=2048, n_head=16, n_kv_head=16, d_ff=8192, vocab=50304,
                     seq_len=2048, micro_batch=8, tied=True),
    "llama3-1b": dict(arch="llama", n_layer=16, d_model=2048, n_head=32, n_kv_head=8, d_ff=8192, vocab=128256,
                      seq_len=2048, micro_batch=8, tied=True, rope_theta=500000.0),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=sorted(PRESETS), default="llama3-1b", help="the shape (configs/NAME.yaml)")
    p.add_argument("--mode", choices=["eager", "compile", "float8"], default="compile",
                   help="BF16 autocast eager, + torch.compile, or torchao float8 training + torch.compile")
    p.add_argument("--compile-mode", choices=sorted(COMPILE_MODES), default="default",
                   help="torch.compile's mode (reduce-overhead and max-autotune replay CUDA graphs)")
    p.add_argument("--float8-recipe", choices=["tensorwise", "rowwise", "rowwise_with_gw_hp"], default="tensorwise",
                   help="torchao's float8 recipe (--mode float8): tensorwise is fp8train's `current` peer")
    p.add_argument("--wait-for", default="", help="compile and warm up, then wait for this file before timing")
    for name in ("n-layer", "d-model", "n-head", "n-kv-head", "d-ff", "vocab", "seq-len", "micro-batch"):
        p.add_argument("--" + name, type=int, default=None, help="override the preset")
    p.add_argument("--rope-theta", type=float, default=None)
    p.add_argument("--untied", dest="tied", action="store_false", default=None, help="separate output head")
    p.add_argument("--steps", type=int, default=10, help="timed optimizer steps (median reported)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation happens here)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--json", default="", help="also write the results here")
    p.add_argument("--profile", type=int, default=0,
                   help="then profile N more steps (torch.profiler) and add each GPU kernel's time per step to "
                        "the JSON, as `fp8train bench --profile N` does (scripts/kernel_breakdown.py groups both)")
    a = p.parse_args()
    for k, v in PRESETS[a.model].items():
        if getattr(a, k, None) is None:
            setattr(a, k, v)
    if a.rope_theta is None:
        a.rope_theta = 10000.0
    return a


def to_float8(model, recipe):
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError:
        print("reference_bench.py: --mode float8 needs torchao (pip install torchao)", file=sys.stderr)
        sys.exit(2)
    # The head stays in BF16, as in fp8train's configs (fp8.skip_layers: [lm_head]).
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe),
                               module_filter_fn=lambda m, fqn: fqn != "lm_head"
                               and m.in_features % 16 == 0 and m.out_features % 16 == 0)


def wait_for(path):
    """Announces readiness (PATH.ready) and waits for PATH; the cached free GPU memory is returned first,
    so that a waiting run holds only what it keeps (weights, optimizer state, CUDA-graph pools)."""
    if not path:
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    open(path + ".ready", "w").close()
    while not os.path.exists(path):
        time.sleep(0.2)


def train_step(step_fn, model, opt, x, y, dev, graphs):
    if graphs:
        torch.compiler.cudagraph_mark_step_begin()  # a new iteration: the last replay's outputs may go
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        loss = step_fn(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def profile_kernels(run_step, steps, sync):
    """GPU time per step of every kernel (and memcpy/memset) name over `steps` profiled steps,
    longest first, in the schema of fp8train bench's JSON: name, ms_per_step, calls_per_step."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            run_step()
        sync()
    totals = {}
    for e in prof.events():
        if e.device_type != DeviceType.CUDA:
            continue
        t = totals.setdefault(e.name, [0.0, 0])
        t[0] += e.time_range.elapsed_us()
        t[1] += 1
    kernels = [{"name": n, "ms_per_step": us / 1e3 / steps, "calls_per_step": c / steps}
               for n, (us, c) in totals.items()]
    kernels.sort(key=lambda k: -k["ms_per_step"])
    return {"steps": steps, "device_ms_per_step": sum(k["ms_per_step"] for k in kernels), "kernels": kernels}


def main():
    a = parse_args()
    dev = torch.device(a.device)
    torch.manual_seed(0)
    model = (gpt(a) if a.arch == "gpt" else llama(a)).to(dev)
    if a.mode == "float8":
        to_float8(model, a.float8_recipe)
    n_params = sum(t.numel() for t in model.parameters())
    embeddings = (0 if a.tied else model.wte.weight.numel()) + (model.wpe.weight.numel() if a.arch == "gpt" else 0)
    dense = n_params - embeddings
    flops_per_token = 6 * dense + 12 * a.n_layer * a.seq_len * a.d_model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=dev.type == "cuda")
    compiled = a.mode != "eager"
    graphs = compiled and COMPILE_MODES[a.compile_mode] and dev.type == "cuda"
    step_fn = torch.compile(model, mode=None if a.compile_mode == "default" else a.compile_mode) if compiled else model
    tokens = torch.randint(0, a.vocab, (a.micro_batch, a.seq_len + 1), device=dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    # Peak memory from the first step on: CUDA-graph replays allocate nothing, their pool is
    # counted while the graphs are recorded (the warm-up).
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t_compile = time.perf_counter()
    for _ in range(a.warmup):
        loss = train_step(step_fn, model, opt, x, y, dev, graphs)
    sync()
    compile_s = time.perf_counter() - t_compile
    wait_for(a.wait_for)
    times = []
    for _ in range(a.steps):
        sync()
        t0 = time.perf_counter()
        loss = train_step(step_fn, model, opt, x, y, dev, graphs)
        sync()
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    tok = a.micro_batch * a.seq_len
    framework = f"pytorch {torch.__version__} bf16 autocast"
    if a.mode == "float8":
        framework += f" + torchao float8 ({a.float8_recipe})"
    if compiled:
        framework += f" + torch.compile ({a.compile_mode}, CUDA graphs {'on' if graphs else 'off'})"
    res = {
        "framework": framework, "model": a.model, "mode": a.mode,
        "compile_mode": a.compile_mode if compiled else None, "cuda_graphs": graphs,
        "float8_recipe": a.float8_recipe if a.mode == "float8" else None,
        "micro_batch": a.micro_batch, "seq_len": a.seq_len,
        "params": n_params, "flops_per_token": flops_per_token, "tokens_per_step": tok,
        "step_ms": 1e3 * step_s, "tokens_per_s": tok / step_s,
        "model_tflops": flops_per_token * tok / step_s / 1e12,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else None,
        "warmup_s": compile_s, "final_loss": loss.item(),
        "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
    }
    print(f"{res['framework']} on {res['device']}: {n_params / 1e9:.3f}B params, {a.micro_batch} x {a.seq_len} "
          f"tokens/step: {res['step_ms']:.1f} ms/step, {res['tokens_per_s']:.0f} tokens/s, "
          f"{res['model_tflops']:.1f} TFLOP/s, peak {res['peak_memory_gib'] or 0:.2f} GiB, loss {res['final_loss']:.3f} "
          f"(warm-up {compile_s:.0f} s)")
    if a.profile > 0 and dev.type == "cuda":
        try:
            res["profile"] = profile_kernels(lambda: train_step(step_fn, model, opt, x, y, dev, graphs), a.profile,
                                             sync)
        except Exception as e:  # the timing stands without it
            print(f"reference_bench.py: --profile failed ({e}); the timed figures are written without it",
                  file=sys.stderr)
    if "profile" in res:
        print(f"profiled {a.profile} steps: {res['profile']['device_ms_per_step']:.2f} ms of GPU kernels per step, "
              f"{len(res['profile']['kernels'])} kernel names")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
