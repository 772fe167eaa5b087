#!/usr/bin/env python3
"""Same-shape PyTorch reference for `fp8train bench`: a plain PyTorch GPT or LLaMA, trained as people
usually train it, timed the way fp8train bench times its steps.

The model (--model picks the shape of one of configs/*.yaml; the flags below override it):
- gpt: nanoGPT-style (learned positions, LayerNorm without bias, tanh GELU, fused q/k/v, tied head);
- llama: RoPE, grouped-query attention through scaled_dot_product_attention's enable_gqa, RMSNorm,
  SwiGLU, no biases, tied or untied head;
- moe (olmoe-1b-7b, moe-tiny): fp8train's MoE family (lib/model/moe_*): the llama block with q/k
  RMSNorms over the projections' full width before RoPE and a mixture of experts as its MLP
  (scripts/peer_moe.py: FP32 router, softmax, top-k or --force-balance's round robin, dropless
  groups padded to 16 rows, SwiGLU experts as two torch._grouped_mm GEMMs, the auxiliary loss's
  gradient), untied head. Routing is forced-balanced by default (fp8train's --set
  moe.force_balance=true), so that both sides route the same tokens to the same experts.
Training: FP32 weights under BF16 autocast, AdamW, global-norm clip 1.0, one micro-batch per step on
random tokens. --loss chunked (the default; scripts/peer_train.py) runs the head and its FP32
cross-entropy in chunks of --loss-chunk-mib MiB of logits, computing each chunk's gradients in the
forward, as fp8train's chunked head does; --loss full builds the [tokens x vocab] logits and upcasts
them (the earlier peer). --optimizer compiled (the default when the model is compiled) runs the clip
and a foreach AdamW with a tensor learning rate under torch.compile; eager: fused AdamW outside it.
--mode picks eager, torch.compile, or torchao's float8 training (every Linear
but the head converted; --float8-recipe: tensorwise = dynamic scaling of each tensor by its own amax,
the peer of fp8train's `current` recipe; rowwise = one scale per row, the nearest to `block`) with
torch.compile. On a MoE model --mode float8 is torchao's MoE training (torchao.prototype.moe_training,
Float8TrainingRecipe.FP8_ROWWISE: the experts' three grouped GEMMs in FP8 rowwise, E4M3) and, with
--float8-attention on (the default), torchao float8 rowwise for the attention's Linears (c_attn,
c_proj), since fp8train's FP8 rewrite converts those too; off leaves them in bf16 (torchao's MoE
recipe alone, the experts' GEMMs only). The router (FP32) and the head (bf16) stay out of FP8 on
both sides; rowwise is the only FP8 recipe of torchao 0.18's MoE training, so MoE takes no other
--float8-recipe. --compile-mode is torch.compile's mode: default and max-autotune-no-cudagraphs launch
kernels one by one, reduce-overhead and max-autotune replay the compiled forward and backward as CUDA
graphs (fp8train replays its whole step as one); the output names the mode and whether CUDA graphs
were on. The figures are references beside fp8train's own bf16 and fp8 rows; fp8train does not depend
on this script.

Reports the median step time, tokens/s, model TFLOP/s (fp8train's formula: 6 x non-embedding
parameters + 12 x n_layer x seq_len x d_model per token; a tied head counts as the head GEMM; MoE:
active parameters only, 6 x (non-embedding parameters - every expert weight + n_layer x top_k x 3 x
d_model x d_ff) + the same attention term, as fp8train's MoeGpt::flops_per_token) and
the peak CUDA memory, as text and (with --json) JSON. Exit 2 when --mode float8 lacks torchao.
--wait-for FILE compiles and warms up first, then waits until FILE exists before the timed steps (a
caller can compile while the GPU is busy elsewhere and time when it is free). --rounds N times N
rounds of --steps steps, round r > 1 waiting for FILE.r (scripts/curve-bench.sh interleaves fp8train
between them); the JSON, written after every round, holds each round's figures and the versions
(torch, CUDA, torchao, the card, --commit).

  python3 scripts/reference_bench.py --model gpt-1.3b --mode compile
  python3 scripts/reference_bench.py --model gpt-1.3b --mode float8 --json ref-1.3b-float8.json
  python3 scripts/reference_bench.py --model llama3-1b --mode compile
  python3 scripts/reference_bench.py --model llama3-3b --mode compile --loss full --optimizer eager  # the earlier peer
  python3 scripts/reference_bench.py --model llama3-1b --mode float8 --compile-mode reduce-overhead
  python3 scripts/reference_bench.py --model olmoe-1b-7b --n-layer 8 --mode float8   # torchao MoE FP8 rowwise
  .venv/bin/python scripts/reference_bench.py --model moe-tiny --mode eager --device cpu --steps 2
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

from peer_moe import MoeFeedForward, active_expert_params, check_moe_args, expert_params, moe_summary, \
    to_float8_experts
from peer_train import chunk_rows, chunked_head_loss, make_adamw, make_optimizer_step


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
    """LLaMA's block; MoE (arch moe): q/k RMSNorms over the projections' full width before RoPE
    (OLMoE, fp8train's model.qk_norm) and a mixture of experts as the MLP (scripts/peer_moe.py)."""

    def __init__(self, a, rotary):
        super().__init__()
        self.h, self.kv, self.hd = a.n_head, a.n_kv_head, a.d_model // a.n_head
        self.rotary = rotary
        self.ln_1 = nn.RMSNorm(a.d_model, eps=1e-5)
        self.c_attn = nn.Linear(a.d_model, a.d_model + 2 * self.kv * self.hd, bias=False)
        self.c_proj = nn.Linear(a.d_model, a.d_model, bias=False)
        self.q_norm = self.k_norm = self.mlp = None
        if a.arch == "moe":
            self.q_norm = nn.RMSNorm(a.d_model, eps=1e-5)
            self.k_norm = nn.RMSNorm(self.kv * self.hd, eps=1e-5)
        self.ln_2 = nn.RMSNorm(a.d_model, eps=1e-5)
        if a.arch == "moe":
            self.mlp = MoeFeedForward(a)
        else:
            self.c_fc = nn.Linear(a.d_model, 2 * a.d_ff, bias=False)
            self.mlp_proj = nn.Linear(a.d_ff, a.d_model, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split([c, self.kv * self.hd, self.kv * self.hd], -1)
        if self.q_norm is not None:
            q, k = self.q_norm(q.float()).to(q.dtype), self.k_norm(k.float()).to(k.dtype)
        q = self.rotary(q.view(b, t, self.h, self.hd).transpose(1, 2))
        k = self.rotary(k.view(b, t, self.kv, self.hd).transpose(1, 2))
        v = v.view(b, t, self.kv, self.hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.h)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
        if self.mlp is not None:
            return x + self.mlp(self.ln_2(x))
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

    # The head and loss: "full" builds the [tokens x vocab] logits and upcasts them; "chunked"
    # (scripts/peer_train.py) runs them `loss_rows` rows at a time in `loss_dtype` (set by main).
    loss = "full"
    loss_rows = 0
    loss_dtype = torch.bfloat16

    def forward(self, idx, targets):
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for b in self.blocks:
            x = b(x)
        if self.loss == "chunked":
            return chunked_head_loss(self.ln_f(x), self.lm_head.weight, targets, self.loss_rows, self.loss_dtype)
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
    "llama3-3b": dict(arch="llama", n_layer=28, d_model=3072, n_head=24, n_kv_head=8, d_ff=8192, vocab=128256,
                      seq_len=2048, micro_batch=4, tied=True, rope_theta=500000.0),
    "llama3-8b": dict(arch="llama", n_layer=32, d_model=4096, n_head=32, n_kv_head=8, d_ff=14336, vocab=128256,
                      seq_len=2048, micro_batch=1, tied=False, rope_theta=500000.0),
    # MoE: d_ff is each expert's SwiGLU width (moe.d_ff, or model.d_ff when 0).
    "olmoe-1b-7b": dict(arch="moe", n_layer=16, d_model=2048, n_head=16, n_kv_head=16, d_ff=1024, vocab=50304,
                        seq_len=4096, micro_batch=2, tied=False, rope_theta=10000.0, experts=64, top_k=8),
    "moe-tiny": dict(arch="moe", n_layer=2, d_model=64, n_head=4, n_kv_head=4, d_ff=64, vocab=64, seq_len=32,
                     micro_batch=8, tied=False, rope_theta=10000.0, experts=8, top_k=2),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=sorted(PRESETS), default="llama3-1b", help="the shape (configs/NAME.yaml)")
    p.add_argument("--mode", choices=["eager", "compile", "float8"], default="compile",
                   help="BF16 autocast eager, + torch.compile, or torchao float8 training + torch.compile")
    p.add_argument("--compile-mode", choices=sorted(COMPILE_MODES), default="default",
                   help="torch.compile's mode (reduce-overhead and max-autotune replay CUDA graphs)")
    p.add_argument("--float8-recipe", choices=["tensorwise", "rowwise", "rowwise_with_gw_hp"], default=None,
                   help="torchao's float8 recipe (--mode float8): tensorwise (the default for dense models) is "
                        "fp8train's `current` peer; MoE models take rowwise only (the default there)")
    p.add_argument("--loss", choices=["chunked", "full"], default="chunked",
                   help="head + cross-entropy: chunked (scripts/peer_train.py: never the whole logits) or full "
                        "(the [tokens x vocab] logits, upcast to FP32)")
    p.add_argument("--loss-chunk-mib", type=float, default=512,
                   help="--loss chunked: MiB of logits per chunk (fp8train's train.loss_chunk_mib)")
    p.add_argument("--optimizer", choices=["auto", "compiled", "eager"], default="auto",
                   help="clip + AdamW step: compiled (torch.compile, foreach AdamW, tensor lr) or eager (fused "
                        "AdamW); auto: compiled when the model is")
    p.add_argument("--wait-for", default="", help="compile and warm up, then wait for this file before timing")
    p.add_argument("--rounds", type=int, default=1,
                   help="timed rounds of --steps steps; with --wait-for, round r > 1 waits for FILE.r (a caller "
                        "interleaves other timings between rounds); each round starts with 2 untimed steps")
    p.add_argument("--commit", default=os.environ.get("FP8T_COMMIT", ""), help="recorded in the JSON")
    for name in ("n-layer", "d-model", "n-head", "n-kv-head", "d-ff", "vocab", "seq-len", "micro-batch", "experts",
                 "top-k"):
        p.add_argument("--" + name, type=int, default=None,
                       help="override the preset (MoE: --d-ff is an expert's width)")
    p.add_argument("--force-balance", action=argparse.BooleanOptionalAction, default=True,
                   help="MoE: route pair t*k+j to expert (t*k+j) mod E, as fp8train's --set moe.force_balance=true "
                        "(default; --no-force-balance: the router's top k, as fp8train's default)")
    p.add_argument("--norm-topk", action="store_true", help="MoE: renormalise the chosen scores (moe.norm_topk)")
    p.add_argument("--aux-loss-coef", type=float, default=0.01, help="MoE: the balancing loss's weight, 0: none")
    p.add_argument("--float8-attention", choices=["on", "off"], default="on",
                   help="MoE with --mode float8: the attention's Linears in torchao float8 rowwise too (on, as "
                        "fp8train's rewrite does) or in bf16 (off: only the experts' GEMMs in FP8)")
    p.add_argument("--rope-theta", type=float, default=None)
    p.add_argument("--untied", dest="tied", action="store_false", default=None, help="separate output head")
    p.add_argument("--steps", type=int, default=10, help="timed optimizer steps per round (median reported)")
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
    if a.optimizer == "auto":
        a.optimizer = "eager" if a.mode == "eager" else "compiled"
    if a.rounds < 1 or a.steps < 1:
        p.error("--rounds and --steps must be at least 1")
    if a.float8_recipe is None:
        a.float8_recipe = "rowwise" if a.arch == "moe" else "tensorwise"
    if a.arch == "moe":
        check_moe_args(p, a)
    elif a.experts is not None or a.top_k is not None:
        p.error(f"--experts and --top-k: --model {a.model} is dense (the MoE presets: olmoe-1b-7b, moe-tiny)")
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


def gate_of(path, r):
    """The file round r (1-based) waits for: PATH for the first (peer-bench.sh's gate), PATH.r after."""
    return path if r == 1 else f"{path}.{r}"


def train_step(step_fn, opt_step, opt, x, y, dev, graphs):
    if graphs:
        torch.compiler.cudagraph_mark_step_begin()  # a new iteration: the last replay's outputs may go
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        loss = step_fn(x, y)
    loss.backward()
    opt_step()
    opt.zero_grad(set_to_none=True)
    return loss


def versions(a, dev):
    """torch, CUDA, torchao (where importable), the card and the commit, for every result."""
    try:
        import torchao
        torchao_version = torchao.__version__
    except ImportError:
        torchao_version = None
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "torchao": torchao_version,
            "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "commit": a.commit or None}


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


def build(a, dev):
    """The model (FP32 master weights, torchao float8 Linears for --mode float8) with its head + loss."""
    torch.manual_seed(0)
    with dev:  # initialized where it trains (built on the CPU, a 3B peer spent 46 s before its warm-up)
        model = gpt(a) if a.arch == "gpt" else llama(a)  # llama: also moe (Block reads a.arch)
    model.loss = a.loss
    model.loss_rows = chunk_rows(a.vocab, a.loss_chunk_mib)
    if a.mode == "float8" and (a.arch != "moe" or a.float8_attention == "on"):
        to_float8(model, a.float8_recipe)
    if a.mode == "float8" and a.arch == "moe":
        try:
            to_float8_experts(model)
        except ImportError as e:
            print(f"reference_bench.py: --mode float8 with --model {a.model} needs torchao's MoE training "
                  f"(torchao.prototype.moe_training, torchao 0.18): {e}", file=sys.stderr)
            sys.exit(2)
    return model


def flops_per_token(a, model):
    """fp8train's model FLOPs per token (Gpt::flops_per_token, MoeGpt's for MoE): 6 x the non-embedding
    parameters a token passes through + 12 x n_layer x seq_len x d_model for attention."""
    n_params = sum(t.numel() for t in model.parameters())
    embeddings = (0 if a.tied else model.wte.weight.numel()) + (model.wpe.weight.numel() if a.arch == "gpt" else 0)
    active = n_params - embeddings
    if a.arch == "moe":
        active += active_expert_params(a) - expert_params(model)
    return 6 * active + 12 * a.n_layer * a.seq_len * a.d_model


def time_round(run_step, steps, sync):
    """Two untimed steps (the allocator regrows after a gate's empty_cache), then `steps` timed ones."""
    for _ in range(2):
        run_step()
    times = []
    for _ in range(steps):
        sync()
        t0 = time.perf_counter()
        loss = run_step()
        sync()
        times.append(time.perf_counter() - t0)
    return times, loss


def describe(a, graphs):
    framework = f"pytorch {torch.__version__} bf16 autocast"
    if a.arch == "moe":
        framework += (f", MoE {a.experts} experts top-{a.top_k} ({'forced-balanced' if a.force_balance else 'learned'}"
                      " routing) as torch._grouped_mm")
    if a.mode == "float8" and a.arch == "moe":
        framework += " + torchao MoE FP8 rowwise grouped GEMMs" + (
            " + torchao float8 rowwise attention Linears" if a.float8_attention == "on" else " (attention in bf16)")
    elif a.mode == "float8":
        framework += f" + torchao float8 ({a.float8_recipe})"
    if a.mode != "eager":
        framework += f" + torch.compile ({a.compile_mode}, CUDA graphs {'on' if graphs else 'off'})"
    return framework + f"; {a.loss} head + loss, {a.optimizer} clip + AdamW"


def round_result(times, tok, flops):
    step_s = statistics.median(times)
    return {"step_ms": 1e3 * step_s, "min_step_ms": 1e3 * min(times), "max_step_ms": 1e3 * max(times),
            "tokens_per_s": tok / step_s, "model_tflops": flops * tok / step_s / 1e12}


def main():
    a = parse_args()
    dev = torch.device(a.device)
    model = build(a, dev)
    n_params = sum(t.numel() for t in model.parameters())
    flops = flops_per_token(a, model)
    opt = make_adamw(model.parameters(), a.optimizer == "compiled", dev)
    opt_step = make_optimizer_step(model.parameters(), opt, a.optimizer == "compiled")
    compiled = a.mode != "eager"
    graphs = compiled and COMPILE_MODES[a.compile_mode] and dev.type == "cuda"
    step_fn = torch.compile(model, mode=None if a.compile_mode == "default" else a.compile_mode) if compiled else model
    tokens = torch.randint(0, a.vocab, (a.micro_batch, a.seq_len + 1), device=dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    run_step = lambda: train_step(step_fn, opt_step, opt, x, y, dev, graphs)  # noqa: E731
    # Peak memory from the first step on: CUDA-graph replays allocate nothing, their pool is
    # counted while the graphs are recorded (the warm-up).
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t_compile = time.perf_counter()
    first_loss = None
    for _ in range(a.warmup):
        loss = run_step()
        first_loss = loss.item() if first_loss is None else first_loss
    sync()
    compile_s = time.perf_counter() - t_compile
    tok = a.micro_batch * a.seq_len
    res = {
        "framework": describe(a, graphs), "model": a.model, "arch": a.arch, "n_layer": a.n_layer, "mode": a.mode,
        "compile_mode": a.compile_mode if compiled else None, "cuda_graphs": graphs,
        "float8_recipe": a.float8_recipe if a.mode == "float8" else None,
        "loss": a.loss, "loss_chunk_rows": model.loss_rows if a.loss == "chunked" else None,
        "optimizer": a.optimizer, "micro_batch": a.micro_batch, "seq_len": a.seq_len,
        "params": n_params, "flops_per_token": flops, "tokens_per_step": tok, "first_loss": first_loss,
        "moe": moe_summary(a, model) if a.arch == "moe" else None,
        "timed_steps": a.steps, "warmup_steps": a.warmup, "warmup_s": compile_s,
        "versions": versions(a, dev), "rounds": [],
    }
    all_times = []
    for r in range(1, a.rounds + 1):
        if a.wait_for:
            wait_for(gate_of(a.wait_for, r))
        times, loss = time_round(run_step, a.steps, sync)
        all_times += times
        res["rounds"].append(round_result(times, tok, flops))
        # Every round's figures are on disk before the caller's next timing (a later round may be cut off).
        res.update(round_result(all_times, tok, flops))
        res["step_ms_over_rounds"] = [q["step_ms"] for q in res["rounds"]]
        res["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else None
        res["final_loss"] = loss.item()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=2)
        print(f"{res['framework']} on {res['versions']['device']}: {n_params / 1e9:.3f}B params, {a.micro_batch} x "
              f"{a.seq_len} tokens/step: round {r}/{a.rounds}: {res['rounds'][-1]['step_ms']:.1f} ms/step, "
              f"{res['rounds'][-1]['tokens_per_s']:.0f} tokens/s, {res['rounds'][-1]['model_tflops']:.1f} TFLOP/s, "
              f"peak {res['peak_memory_gib'] or 0:.2f} GiB, loss {res['final_loss']:.3f} (warm-up {compile_s:.0f} s)",
              flush=True)
    if a.profile > 0 and dev.type == "cuda":
        try:
            res["profile"] = profile_kernels(run_step, a.profile, sync)
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
