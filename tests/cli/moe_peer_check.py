"""CPU checks of the MoE peer (scripts/peer_moe.py, reference_bench.py's MoE presets); run by
tests/cli/test_moe_peer_cpu.sh.

  routing  forced-balanced routing sends pair t*k+j to expert (t*k+j) mod E (equal counts when E
           divides T*k, within 1 otherwise); learned routing picks the top-k scores; the dispatch
           plan puts every pair in its expert's group, in token order, groups aligned to 16 rows and
           at least 16, the last ending at round_up(T*k, 16) + 16*E.
  layer    the MoE layer (grouped GEMMs over the padded buffer) against a per-token loop written with
           plain matmuls: output, and the gradients of the input, router and experts with the
           balancing loss's gradient added (FP32: 1e-5 of each tensor's largest entry); an expert
           that gets no token has gradients exactly 0; the bf16 path within 3e-2.
  count    the OLMoE-1B-7B preset (built on the meta device) has 6.92B parameters, 1.28B active
           (configs/olmoe-1b-7b.yaml, fp8train --dry-run); moe-tiny's FLOPs per token equal the
           formula written out by hand.
  torchao  torchao 0.18's MoE training on the peer: quantize_ with Float8TrainingOpConfig wraps the
           experts' weights only (router, head, norms stay plain), convert_to_float8_training the
           attention Linears only; the layer's two grouped GEMMs reach torchao's FP8 grouped GEMM
           (its entry point replaced by a recorder: no GPU here) with the operand layouts its kernel
           asserts, and give the unconverted layer's output and gradients; an AdamW step keeps the
           wrapped weights wrapped.
Prints what it compared; exits 1 on a failed check.
"""
import argparse
import copy
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.environ["FP8T_SOURCE_DIR"], "scripts"))
import peer_moe  # noqa: E402
import reference_bench as rb  # noqa: E402


def tiny_args(*extra):
    sys.argv = ["reference_bench.py", "--model", "moe-tiny", "--device", "cpu", "--mode", "eager"] + list(extra)
    return rb.parse_args()


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    return ok


def plan_ok(experts, counts, tokens, k):
    rows_of, offsets, rows = peer_moe.plan_dispatch(experts, counts)
    E = counts.numel()
    good = check(rows == (tokens * k + 15) // 16 * 16 + 16 * E and offsets.dtype == torch.int32
                 and offsets[-1].item() == rows, f"buffer of {rows} rows, offsets int32 ending there")
    ends = offsets.long().tolist()
    starts = [0] + ends[:-1]
    sizes = [e - s for s, e in zip(starts, ends)]
    good &= check(all(n % 16 == 0 and n >= max(16, c) for n, c in zip(sizes, counts.tolist())),
                  f"group sizes {sizes[:4]}...: multiples of 16, at least 16 and the count")
    good &= check(len(set(rows_of.tolist())) == tokens * k, "every pair has its own row")
    flat = experts.reshape(-1).tolist()
    for e in range(E):
        mine = [rows_of[p].item() for p in range(tokens * k) if flat[p] == e]  # in token order
        if mine != list(range(starts[e], starts[e] + len(mine))):
            return check(False, f"expert {e}'s pairs are not rows {starts[e]}.. in token order: {mine}")
    return good & check(True, "each expert's pairs fill its group from its start, in token order")


def check_routing():
    torch.manual_seed(0)
    good = True
    for tokens, k, E in ((24, 2, 8), (5, 3, 4), (40, 8, 64)):
        x = torch.randn(tokens, 32)
        experts, weights, scores, counts = peer_moe.route(x, torch.randn(E, 32), k, True, False)
        want = torch.arange(tokens * k).remainder(E).view(tokens, k)
        good &= check(torch.equal(experts, want), f"T={tokens} k={k} E={E}: forced pair t*k+j -> (t*k+j) mod E")
        spread = counts.max().item() - counts.min().item()
        good &= check(counts.sum().item() == tokens * k and spread == (0 if tokens * k % E == 0 else 1),
                      f"  counts {counts.tolist()[:8]}...: equal (within 1 when E does not divide T*k)")
        good &= check(torch.equal(weights, scores.gather(1, want)), "  weights are the chosen experts' scores")
        good &= plan_ok(experts, counts, tokens, k)
    x = torch.randn(24, 32)
    experts, weights, scores, counts = peer_moe.route(x, torch.randn(8, 32), 2, False, True)
    good &= check(torch.equal(experts.sort(-1).values, scores.topk(2, -1).indices.sort(-1).values),
                  "learned routing: the top-k scores")
    good &= check(torch.allclose(weights.sum(-1), torch.ones(24)), "norm_topk: the chosen weights sum to 1")
    return good & plan_ok(experts, counts, 24, 2)


def reference(layer, x, coef):
    """The layer token by token with plain matmuls (FP32), and its balancing loss."""
    E, k = layer.router.shape[0], layer.top_k
    fc, proj = layer.experts.fc, layer.experts.proj
    scores = (x @ layer.router.t()).softmax(-1)
    experts = (torch.arange(x.shape[0] * k).remainder(E).view(-1, k) if layer.force_balance
               else scores.detach().topk(k, -1).indices)
    weights = scores.gather(1, experts)
    rows = []
    for t in range(x.shape[0]):
        acc = torch.zeros(x.shape[1])
        for j in range(k):
            gate, up = (fc[experts[t, j]] @ x[t]).chunk(2)
            acc = acc + weights[t, j] * (proj[experts[t, j]] @ (F.silu(gate) * up))
        rows.append(acc)
    f = torch.bincount(experts.reshape(-1), minlength=E).float() / experts.numel()
    return torch.stack(rows), coef * E * (f * scores.mean(0)).sum()


def layer_grads(layer, x, g, coef=None):
    layer.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_()
    if coef is None:
        out = layer(x)
        (out.float() * g).sum().backward()
    else:
        out, aux = reference(layer, x, coef)
        ((out * g).sum() + aux).backward()
    named = {"x": x, "router": layer.router, "fc": layer.experts.fc, "proj": layer.experts.proj}
    grads = {n: t.grad if t.grad is not None else torch.zeros_like(t) for n, t in named.items()}  # none: 0
    return out.detach().float(), grads


def check_layer():
    good = True
    for force, label in ((True, "forced-balanced"), (False, "learned, expert 7 never chosen")):
        a = tiny_args("--d-model", "32", "--d-ff", "16", *([] if force else ["--no-force-balance"]))
        torch.manual_seed(1)
        layer = peer_moe.MoeFeedForward(a).train()
        torch.nn.init.normal_(layer.router, std=0.5)
        x = torch.randn(24, 32).abs()
        if not force:  # positive inputs: the lowest score, always, for an expert of negative weights
            with torch.no_grad():
                layer.router[7] = -layer.router[7].abs() - 1.0
        g = torch.randn(24, 32)
        layer.compute_dtype = torch.float32
        out, got = layer_grads(layer, x, g)
        ref, want = layer_grads(layer, x, g, coef=a.aux_loss_coef)
        d_out = rel(out, ref)
        d_grad = max(rel(got[n], want[n]) for n in want)
        good &= check(d_out <= 1e-5 and d_grad <= 1e-5, f"{label}, FP32: output {d_out:.1e}, largest gradient "
                      f"difference {d_grad:.1e} of the tensor's largest entry (tolerance 1e-5)")
        if not force:
            empty = [got["fc"][7], got["proj"][7]]
            good &= check(all(torch.equal(t, torch.zeros_like(t)) for t in empty),
                          "  the expert without tokens: gradients exactly 0")
        without = copy.deepcopy(layer)
        without.aux_loss_coef = 0.0
        _, plain = layer_grads(without, x, g)
        moved = rel(got["router"], plain["router"])
        if force:  # equal loads f_e = 1/E: the loss is coef * sum_e P_e = coef, whatever the router
            good &= check(moved <= 1e-5, f"  balanced loads: the balancing loss adds no router gradient ({moved:.1e})")
        else:
            good &= check(moved > 1e-3, f"  the balancing loss moves the router's gradient ({moved:.1e}): not dropped")
        layer.compute_dtype = torch.bfloat16
        out16, got16 = layer_grads(layer, x, g)
        d16 = max([rel(out16, ref)] + [rel(got16[n], want[n]) for n in want])
        good &= check(d16 <= 3e-2, f"  bf16 path: largest difference {d16:.1e} of the FP32 reference (tolerance 3e-2)")
    return good


def check_count():
    sys.argv = ["reference_bench.py", "--model", "olmoe-1b-7b", "--device", "meta", "--mode", "eager"]
    a = rb.parse_args()
    with torch.device("meta"):
        model = rb.llama(a)
    total = sum(p.numel() for p in model.parameters())
    active = peer_moe.moe_summary(a, model)["active_params"]
    good = check(round(total / 1e9, 2) == 6.92 and round(active / 1e9, 2) == 1.28,
                 f"OLMoE-1B-7B: {total / 1e9:.3f}B parameters, {active / 1e9:.3f}B active (6.92B, 1.28B)")
    a = tiny_args()
    model = rb.build(a, torch.device("cpu"))
    d, L, T, V, E, k, F_ = a.d_model, a.n_layer, a.seq_len, a.vocab, a.experts, a.top_k, a.d_ff
    per_block = 3 * d * d + d * d + 4 * d + E * d + k * 3 * d * F_  # q/k/v, c_proj, 4 norms, router, k experts
    want = 6 * (L * per_block + d + V * d) + 12 * L * T * d  # + ln_f, the untied head; attention
    got = rb.flops_per_token(a, model)
    return good & check(got == want, f"moe-tiny: {got} FLOPs per token, by hand {want}")


def check_torchao():
    import torchao.prototype.moe_training.tensor as ao_tensor
    from torchao.float8.float8_linear import Float8Linear
    calls = []

    def recorder(A, B_t, offs=None, config=None, bias=None):
        E, K, N = B_t.shape
        calls.append((A.is_contiguous() and B_t.stride() == (K * N, 1, K) and offs.dtype == torch.int32
                      and A.dtype == torch.bfloat16, type(config).__name__))
        return torch._grouped_mm(A, B_t, offs=offs)

    ao_tensor._quantize_then_scaled_grouped_mm = recorder
    a = tiny_args()
    model = rb.build(a, torch.device("cpu"))
    plain_layer = copy.deepcopy(model.blocks[0].mlp)
    rb.to_float8(model, "rowwise")
    n = peer_moe.to_float8_experts(model)
    wrapped = {name for name, p in model.named_parameters() if isinstance(p, ao_tensor.TrainingWeightWrapperBaseTensor)}
    want = {f"blocks.{i}.mlp.experts.{w}" for i in range(a.n_layer) for w in ("fc", "proj")}
    good = check(n == a.n_layer and wrapped == want, f"quantize_ wrapped the experts' weights only: {sorted(wrapped)}")
    f8 = {name for name, m in model.named_modules() if isinstance(m, Float8Linear)}
    good &= check(f8 == {f"blocks.{i}.{w}" for i in range(a.n_layer) for w in ("c_attn", "c_proj")},
                  f"float8 Linears: the attention's only ({sorted(f8)}; head and router stay)")
    layer = model.blocks[0].mlp
    x = torch.randn(a.micro_batch, a.seq_len, a.d_model)
    g = torch.randn_like(x)
    outs, grads = [], []
    for m in (layer, plain_layer):
        xi = x.clone().requires_grad_()
        out = m(xi)
        (out.float() * g).sum().backward()
        outs.append(out)
        grads.append([xi.grad, m.router.grad, m.experts.fc.grad, m.experts.proj.grad])
    good &= check(len(calls) == 2 and all(ok and cfg == "Float8TrainingOpConfig" for ok, cfg in calls),
                  f"both grouped GEMMs went to torchao's FP8 grouped GEMM with its operand layouts: {calls}")
    good &= check(torch.equal(outs[0], outs[1]) and all(torch.equal(p, q) for p, q in zip(*grads)),
                  "the wrapped layer's output and gradients equal the plain layer's")
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-2)
    before = layer.experts.fc.detach().clone()
    opt.step()
    good &= check(isinstance(layer.experts.fc, ao_tensor.TrainingWeightWrapperBaseTensor)
                  and not torch.equal(layer.experts.fc.detach(), before), "AdamW updates the wrapped weights in place")
    return good


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["routing", "layer", "count", "torchao"])
    what = p.parse_args().what
    ok = {"routing": check_routing, "layer": check_layer, "count": check_count, "torchao": check_torchao}[what]()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
