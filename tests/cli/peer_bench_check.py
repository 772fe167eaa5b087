"""CPU checks of scripts/reference_bench.py's peer options (tests/cli/test_peer_bench_cpu.sh runs it).

  loss      the chunked head + loss (peer_train.ChunkedHeadLoss) against the full logits: loss and
            every gradient of a tiny LLaMA, in FP32 and under BF16 autocast, with chunks that do not
            divide the rows.
  optimizer clip + AdamW: the compiled step (tensor lr) against the eager one, 3 steps.
Prints the largest differences; exits 1 on a difference over the tolerance.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.environ["FP8T_SOURCE_DIR"], "scripts"))
import reference_bench as rb  # noqa: E402
from peer_train import make_adamw, make_optimizer_step  # noqa: E402

TINY = ["--model", "llama3-1b", "--n-layer", "2", "--d-model", "64", "--n-head", "4", "--n-kv-head", "2",
        "--d-ff", "128", "--vocab", "512", "--seq-len", "16", "--micro-batch", "3", "--device", "cpu", "--mode", "eager"]


def tiny_model(loss, rows=5):
    sys.argv = ["reference_bench.py"] + TINY + ["--loss", loss]
    a = rb.parse_args()
    model = rb.build(a, torch.device("cpu"))
    model.loss_rows = rows  # 48 rows in chunks of 5: ten chunks, the last one of 3 rows
    return a, model


def batch(a):
    g = torch.Generator().manual_seed(1)
    t = torch.randint(0, a.vocab, (a.micro_batch, a.seq_len + 1), generator=g)
    return t[:, :-1].contiguous(), t[:, 1:].contiguous()


def loss_and_grads(loss, autocast):
    a, model = tiny_model(loss)
    model.loss_dtype = torch.bfloat16 if autocast else torch.float32
    x, y = batch(a)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        value = model(x, y)
    value.backward()
    return value.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def check_loss():
    # Tolerances: FP32, the same sums in another order: 1e-5 relative (loss and gradients).
    # BF16 autocast: both sides' logits are the same BF16 GEMM, the loss FP32 from them: 1e-4
    # relative; the gradients go through BF16 GEMMs on both sides, but the full path rounds the
    # head's weight gradient to BF16 once over all rows where the chunked path sums chunks in
    # FP32, and every earlier gradient inherits that: 2e-2 relative to each tensor's largest
    # entry (BF16's unit roundoff is 2^-8 = 3.9e-3; a few roundings compound through 2 layers).
    worst = 0.0
    for autocast, loss_tol, grad_tol in ((False, 1e-5, 1e-5), (True, 1e-4, 2e-2)):
        full, g_full = loss_and_grads("full", autocast)
        chunked, g_chunked = loss_and_grads("chunked", autocast)
        d_loss = abs(full - chunked) / abs(full)
        d_grad = max(rel(g_chunked[n], g_full[n]) for n in g_full)
        label = "bf16 autocast" if autocast else "fp32"
        print(f"loss {label}: full {full:.6f} chunked {chunked:.6f} (rel {d_loss:.1e}, tolerance {loss_tol:g}); "
              f"largest gradient difference {d_grad:.1e} of the tensor's largest entry (tolerance {grad_tol:g})")
        if d_loss > loss_tol or d_grad > grad_tol:
            return 1
        worst = max(worst, d_grad)
    return 0


def optimizer_run(compiled_builder, compiled_step):
    """3 steps of clip + AdamW on the tiny model's fixed gradients (scaled so the clip bites)."""
    a, model = tiny_model("full")
    x, y = batch(a)
    params = list(model.parameters())
    opt = make_adamw(params, compiled_builder, torch.device("cpu"))
    step = make_optimizer_step(params, opt, compiled_step)
    for _ in range(3):
        model(x, y).mul(50.0).backward()
        step()
        opt.zero_grad(set_to_none=True)
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def check_optimizer(compiled):
    # Tolerance: FP32 updates of the same formulas (the compiled/foreach kernels sum the global
    # norm in another order): 1e-5 relative to each tensor's largest entry after 3 steps.
    tol = 1e-5
    ref = optimizer_run(False, False)
    got = optimizer_run(True, compiled)
    moved = max(rel(got[n], ref[n]) for n in ref)
    print(f"optimizer (compiled vs eager): largest parameter "
          f"difference after 3 steps {moved:.1e} of the tensor's largest entry (tolerance {tol:g})")
    return 0 if moved <= tol else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["loss", "optimizer"])
    what = p.parse_args().what
    torch.manual_seed(0)
    if what == "loss":
        return check_loss()
    return check_optimizer(True)


if __name__ == "__main__":
    sys.exit(main())
