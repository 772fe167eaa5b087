"""The training pieces of scripts/reference_bench.py's PyTorch peer that a careful PyTorch user
writes for a large vocabulary: the output head and its cross-entropy in row chunks, and the
global-norm clip with the AdamW step under torch.compile.

- ChunkedHeadLoss: head GEMM + FP32 log-softmax loss for `rows` rows at a time; the gradients of
  each chunk (the hidden states' and the head weight's, accumulated in FP32) are computed in the
  forward, so the [tokens x vocab] logits never exist whole (fp8train's chunked head does the same;
  its chunk is train.loss_chunk_mib MiB of logits, 512 by default).
- make_optimizer_step: clip_grad_norm_ + AdamW.step, eagerly (fused AdamW) or under torch.compile
  (foreach AdamW with a tensor learning rate, capturable on CUDA: torch's compiled-optimizer
  pattern, one graph of fused kernels for the clip and the update).
"""
import torch


def chunk_rows(vocab, chunk_mib, dtype_bytes=2):
    """Rows per chunk so that one chunk's logits take chunk_mib MiB (at least 1 row)."""
    return max(1, int(chunk_mib * 2**20 // (vocab * dtype_bytes)))


class ChunkedHeadLoss(torch.autograd.Function):
    """mean cross-entropy of (h @ weight.T) against targets, chunk by chunk.

    h: [N, D] final hidden states; weight: [V, D] head weight (FP32 master, or any dtype);
    targets: [N] int64; rows: rows per chunk; dtype: the GEMMs' dtype (bf16 under autocast, as
    autocast would run the head; the loss itself is FP32). Returns the FP32 scalar loss."""

    @staticmethod
    def forward(ctx, h, weight, targets, rows, dtype):
        n = h.shape[0]
        w = weight.to(dtype)
        dw = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        dh = torch.empty(h.shape, dtype=h.dtype, device=h.device)
        loss = torch.zeros((), dtype=torch.float32, device=h.device)
        for start in range(0, n, rows):
            hc = h[start:start + rows].to(dtype)
            tc = targets[start:start + rows]
            logits = (hc @ w.t()).float()
            lse = torch.logsumexp(logits, dim=-1)
            loss = loss + (lse - logits.gather(1, tc.unsqueeze(1)).squeeze(1)).sum()
            # d(mean loss)/d logits = (softmax - onehot) / N, in the GEMMs' dtype for the two GEMMs.
            g = torch.exp(logits - lse.unsqueeze(1))
            g.scatter_add_(1, tc.unsqueeze(1), torch.full_like(lse, -1.0).unsqueeze(1))
            g = (g / n).to(dtype)
            dh[start:start + rows] = (g @ w).to(h.dtype)
            dw += (g.t() @ hc).float()
        ctx.save_for_backward(dh, dw)
        ctx.weight_dtype = weight.dtype
        return loss / n

    @staticmethod
    def backward(ctx, grad_loss):
        dh, dw = ctx.saved_tensors
        return dh * grad_loss.to(dh.dtype), (dw * grad_loss).to(ctx.weight_dtype), None, None, None


def chunked_head_loss(h, weight, targets, rows, dtype):
    """ChunkedHeadLoss over flattened rows: h [..., D], targets [...]."""
    return ChunkedHeadLoss.apply(h.reshape(-1, h.shape[-1]), weight, targets.reshape(-1), rows, dtype)


def make_adamw(params, compiled, device):
    """fp8train's AdamW settings; fused for the eager step; for the compiled one a tensor lr (the
    compiled step neither recompiles nor syncs on it), foreach + capturable on CUDA (torch allows a
    tensor lr with foreach only when capturable, and capturable only on accelerators)."""
    kw = dict(betas=(0.9, 0.95), weight_decay=0.1)
    if not compiled:
        return torch.optim.AdamW(params, lr=3e-4, fused=device.type == "cuda", **kw)
    return torch.optim.AdamW(params, lr=torch.tensor(3e-4, device=device), foreach=device.type == "cuda",
                             capturable=device.type == "cuda", **kw)


def make_optimizer_step(params, opt, compiled, clip=1.0):
    """A function that clips the gradients to global norm `clip` and steps `opt`; compiled: both
    inside torch.compile (graph breaks allowed: fullgraph=False)."""
    params = list(params)

    def step():
        torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
        opt.step()

    return torch.compile(step, fullgraph=False) if compiled else step
