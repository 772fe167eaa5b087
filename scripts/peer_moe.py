"""The mixture-of-experts feed-forward part of scripts/reference_bench.py's PyTorch peer: fp8train's MoE
layer (lib/model/moe_layer.cpp, moe_router.cpp) written the way a PyTorch user writes it, with the
experts as grouped GEMMs (torch._grouped_mm).

- Router: an FP32 weight [E, d] applied to the block's normed input rounded to the compute dtype
  and upcast to FP32 (autocast off); softmax over the experts; the top k scores, or with
  force_balance round robin (pair t*k + j goes to expert (t*k + j) mod E, fp8train's
  moe.force_balance); the chosen experts' scores weigh their outputs (renormalised only with
  norm_topk).
- Dispatch, dropless: every (token, choice) pair gets a row of one zero-padded buffer; expert e's
  rows start at a multiple of 16 and hold its pairs in token order, its group padded with zero rows
  to a multiple of 16 and to at least 16; the last group runs to the end of the buffer, whose rows
  are round_up(T*k, 16) + 16*E. The plan is computed on the device (no host read), so the step
  compiles without graph breaks.
- Experts: SwiGLU; per expert a gate/up weight [2F, d] (rows [gate | up]) and a down weight [d, F],
  stored as 3-D FP32 parameters [E, 2F, d] and [E, d, F] and applied as two grouped GEMMs over the
  buffer: torch._grouped_mm(buffer, W.transpose(-2, -1), offs=group ends as int32), the weights
  cast to the compute dtype first (bf16; autocast does not cover _grouped_mm everywhere).
- Combine: out[t] = sum_j weight[t, j] * y[row of (t, j)], one batched GEMM in the compute dtype.
- Auxiliary loss (aux_loss_coef > 0, training): coef * E * sum_e f_e P_e (f_e: the fraction of
  pairs routed to e, P_e: the mean score of e), passed to the router through the backward only
  (the returned loss stays the cross-entropy, as fp8train logs it), gradient scale 1 (one
  micro-batch per step).

torchao (to_float8_experts): quantize_ with Float8TrainingOpConfig (recipe
Float8TrainingRecipe.FP8_ROWWISE, torchao.prototype.moe_training 0.18) on the GroupedExperts
modules only: their two 3-D weights become Float8TrainingWeightWrapperTensor parameters, whose
torch._grouped_mm (2-D input, 3-D weight, offs as a keyword) runs torchao's FP8 rowwise grouped
GEMMs for the forward, dgrad and wgrad (E4M3, power-of-2 scales, per-group scales for wgrad, fast
accumulation in all three: torchao 0.18 passes use_fast_accum=True and has no setting for it). The
router keeps plain FP32 (it is not in a GroupedExperts module: the wrapper would also turn its
F.linear into an FP8 GEMM).
"""
import torch
import torch.nn.functional as F
from torch import nn

GROUP_ALIGN = 16  # rows: the FP8 grouped GEMM's alignment, fp8train's kGroupRowAlign


def round_up(n, m):
    return (n + m - 1) // m * m


def buffer_rows(pairs, experts):
    """The dispatch buffer's rows for `pairs` (tokens x top_k) over `experts`: room for every group's
    padding and its minimum of one aligned block, whatever the counts (fp8train's padded_rows)."""
    return round_up(pairs, GROUP_ALIGN) + GROUP_ALIGN * experts


def route(x, router_weight, top_k, force_balance, norm_topk):
    """x [T, d] (any float dtype) -> (experts int64 [T, k], weights FP32 [T, k], scores FP32 [T, E],
    counts int64 [E]). The router runs in FP32 with autocast off."""
    tokens, num_experts = x.shape[0], router_weight.shape[0]
    with torch.autocast(x.device.type, enabled=False):
        scores = F.linear(x.float(), router_weight.float()).softmax(-1)
    if force_balance:
        experts = torch.arange(tokens * top_k, device=x.device).remainder(num_experts).view(tokens, top_k)
    else:
        experts = scores.detach().topk(top_k, -1).indices
    weights = scores.gather(1, experts)
    if norm_topk:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    flat = experts.reshape(-1)
    counts = torch.zeros(num_experts, dtype=torch.long, device=x.device).index_add_(0, flat, torch.ones_like(flat))
    return experts, weights, scores, counts


def plan_dispatch(experts, counts):
    """(rows_of int64 [T*k]: the buffer row of pair t*k + j, offsets int32 [E]: each group's end row,
    rows: the buffer's rows), all on the device."""
    num_experts, pairs = counts.numel(), experts.numel()
    rows = buffer_rows(pairs, num_experts)
    padded = ((counts + GROUP_ALIGN - 1) // GROUP_ALIGN * GROUP_ALIGN).clamp_min(GROUP_ALIGN)
    ends = padded.cumsum(0)
    last = torch.arange(num_experts, device=counts.device) == num_experts - 1
    offsets = torch.where(last, torch.full_like(ends, rows), ends).to(torch.int32)
    # A stable sort keeps each expert's pairs in token order; a pair's place in its group is its
    # sorted position minus the start of its expert's run.
    flat = experts.reshape(-1)
    expert_of, order = flat.sort(stable=True)
    run_starts = counts.cumsum(0) - counts
    rank = torch.arange(pairs, device=flat.device) - run_starts[expert_of]
    rows_of = torch.empty_like(flat).index_copy_(0, order, (ends - padded)[expert_of] + rank)
    return rows_of, offsets, rows


def aux_loss(scores, counts, top_k, coef):
    """coef * E * sum_e f_e P_e (Switch Transformer's balancing loss, OLMoE's and fp8train's)."""
    tokens, num_experts = scores.shape
    f = counts.float() / (tokens * top_k)
    return (f * scores.mean(0)).sum() * (coef * num_experts)


class AuxLossGradient(torch.autograd.Function):
    """Returns `out` unchanged; the backward gives `aux` the gradient 1 (fp8train's AuxLossGradient at
    one micro-batch per step): the balancing loss trains the router without entering the loss value."""

    @staticmethod
    def forward(ctx, out, aux):
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):
        return grad, torch.ones((), dtype=torch.float32, device=grad.device)


class GroupedExperts(nn.Module):
    """E SwiGLU experts as two grouped GEMMs over a padded buffer of routed rows."""

    def __init__(self, num_experts, d_model, d_ff):
        super().__init__()
        self.fc = nn.Parameter(torch.empty(num_experts, 2 * d_ff, d_model))  # rows [gate | up]
        self.proj = nn.Parameter(torch.empty(num_experts, d_model, d_ff))
        for p in (self.fc, self.proj):
            nn.init.normal_(p, std=0.02)

    def forward(self, buffer, offsets):
        # offs by keyword: torchao's weight wrapper intercepts _grouped_mm only with offs given so.
        h = torch._grouped_mm(buffer, self.fc.to(buffer.dtype).transpose(-2, -1), offs=offsets)
        gate, up = h.chunk(2, -1)
        return torch._grouped_mm(F.silu(gate) * up, self.proj.to(buffer.dtype).transpose(-2, -1), offs=offsets)


class MoeFeedForward(nn.Module):
    """A block's MLP as a mixture of experts: x [B, T, d] -> [B, T, d] in the compute dtype."""

    def __init__(self, a):
        super().__init__()
        self.top_k, self.force_balance, self.norm_topk = a.top_k, a.force_balance, a.norm_topk
        self.aux_loss_coef = a.aux_loss_coef
        self.compute_dtype = torch.bfloat16  # the experts' GEMMs (fp8train: the autocast dtype)
        self.router = nn.Parameter(torch.empty(a.experts, a.d_model))  # FP32; N(0, 0.02) by the model
        self.experts = GroupedExperts(a.experts, a.d_model, a.d_ff)

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).to(self.compute_dtype)
        experts, weights, scores, counts = route(x2, self.router, self.top_k, self.force_balance, self.norm_topk)
        rows_of, offsets, rows = plan_dispatch(experts, counts)
        tokens, k, d = x2.shape[0], self.top_k, x2.shape[1]
        pairs = x2.unsqueeze(1).expand(tokens, k, d).reshape(tokens * k, d)
        buffer = x2.new_zeros(rows, d).index_copy(0, rows_of, pairs)
        picked = self.experts(buffer, offsets).index_select(0, rows_of).view(tokens, k, d)
        out = torch.bmm(weights.unsqueeze(1).to(picked.dtype), picked).squeeze(1)
        if self.training and self.aux_loss_coef > 0 and torch.is_grad_enabled():
            out = AuxLossGradient.apply(out, aux_loss(scores, counts, k, self.aux_loss_coef))
        return out.view(shape)


def moe_layers(model):
    return [m for m in model.modules() if isinstance(m, MoeFeedForward)]


def expert_params(model):
    """The experts' parameters (every expert of every MoE block)."""
    return sum(p.numel() for m in model.modules() if isinstance(m, GroupedExperts) for p in m.parameters())


def active_expert_params(a):
    """The expert parameters a token passes through: top_k experts' 3 d x F matrices per block."""
    return a.n_layer * a.top_k * 3 * a.d_model * a.d_ff


def check_moe_args(p, a):
    """reference_bench.py's MoE arguments; p.error (exit 2) names the flag."""
    if not 1 <= a.top_k <= a.experts:
        p.error(f"--top-k must be in [1, --experts = {a.experts}], got {a.top_k}")
    if a.mode == "float8":
        if a.float8_recipe != "rowwise":
            p.error(f"--float8-recipe {a.float8_recipe}: a MoE model's torchao FP8 recipe is rowwise (torchao 0.18's "
                    "MoE training has Float8TrainingRecipe.FP8_ROWWISE only)")
        if not a.device.startswith("cuda"):
            p.error(f"--mode float8 with --model {a.model} needs --device cuda (torchao's FP8 grouped GEMM kernels), "
                    f"got --device {a.device}")
        if a.d_model % 16 or a.d_ff % 16:
            p.error(f"--mode float8: --d-model ({a.d_model}) and --d-ff ({a.d_ff}) must be multiples of 16")


def moe_summary(a, model):
    """The JSON's MoE record: the routing and what ran in FP8 (--mode float8)."""
    n_params = sum(t.numel() for t in model.parameters())
    return {"experts": a.experts, "top_k": a.top_k, "d_ff": a.d_ff, "force_balance": a.force_balance,
            "norm_topk": a.norm_topk, "aux_loss_coef": a.aux_loss_coef, "layers": len(moe_layers(model)),
            "active_params": n_params - expert_params(model) + active_expert_params(a),
            "float8_attention": a.float8_attention == "on" if a.mode == "float8" else None}


def to_float8_experts(model):
    """torchao's MoE FP8 rowwise training on the GroupedExperts modules; returns how many. Exit 2
    (by the caller) when torchao or its names are missing."""
    from torchao.prototype.moe_training.config import Float8TrainingOpConfig, Float8TrainingRecipe
    from torchao.quantization import quantize_
    config = Float8TrainingOpConfig.from_recipe(Float8TrainingRecipe.FP8_ROWWISE)
    quantize_(model, config, filter_fn=lambda m, fqn: isinstance(m, GroupedExperts))
    return sum(isinstance(m, GroupedExperts) for m in model.modules())
