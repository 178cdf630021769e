"""Label-smoothed cross-entropy of the output projection, fused so the logits are never stored.

On the 2-core CPU this project targets, the (tokens x vocab) logits of one batch are ~100 MB in fp32,
and every elementwise pass over them (cast, log-softmax, its backward, the label-smoothing sum) is
memory-bound: the unfused `F.cross_entropy(h @ W.T)` took ~370 ms of a ~1.35 s training step (profile
in `make bench`). Working through the rows in cache-sized chunks and computing the gradient in the same
pass took it to ~220 ms, with the same loss and gradients (tests/test_losses.py).
"""

from __future__ import annotations

import torch
from torch import Tensor


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, h: Tensor, weight: Tensor, target: Tensor, smoothing: float, chunk: int, grad_enabled: bool
    ) -> Tensor:
        n, vocab = h.size(0), weight.size(0)
        w = weight.to(h.dtype)
        acc = torch.promote_types(h.dtype, torch.float32)  # fp32 softmax for bf16 inputs
        # needs_input_grad says which inputs require grad, not whether a backward can happen: under
        # no_grad / inference_mode (validation, test) it stays true for the weight, and the gradient pass
        # would cost two more (tokens x vocab) matmuls per batch. forward() runs with grad disabled, so ask
        # the caller's mode, which linear_cross_entropy passes in.
        need_grad = grad_enabled and (ctx.needs_input_grad[0] or ctx.needs_input_grad[1])
        grad_h = torch.empty_like(h) if need_grad else None
        grad_w = torch.zeros(weight.shape, dtype=acc, device=h.device) if need_grad else None
        total = torch.zeros((), dtype=acc, device=h.device)
        for s in range(0, n, chunk):
            hc, tc = h[s : s + chunk], target[s : s + chunk]
            x = (hc @ w.t()).to(acc)  # (c, vocab) logits of this chunk
            lse = torch.logsumexp(x, dim=-1)
            nll = lse - x.gather(1, tc[:, None]).squeeze(1)  # -log p(target)
            uniform = lse - x.mean(dim=-1)  # -mean_j log p(j)
            total += ((1 - smoothing) * nll + smoothing * uniform).sum()
            if need_grad:  # d loss / d logits = softmax - (1 - eps) onehot - eps / vocab
                g = x.sub_(lse[:, None]).exp_().sub_(smoothing / vocab)
                g.scatter_add_(1, tc[:, None], g.new_full((tc.size(0), 1), -(1 - smoothing)))
                g = g.to(h.dtype)
                grad_h[s : s + chunk] = g @ w
                grad_w += g.t() @ hc
        ctx.save_for_backward(grad_h, grad_w)
        ctx.n, ctx.weight_dtype = n, weight.dtype
        return total / max(n, 1)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        grad_h, grad_w = ctx.saved_tensors
        scale = grad_out / max(ctx.n, 1)
        return (grad_h * scale).to(grad_h.dtype), (grad_w * scale).to(ctx.weight_dtype), None, None, None, None


def linear_cross_entropy(h: Tensor, weight: Tensor, target: Tensor, smoothing: float = 0.0, chunk: int = 256) -> Tensor:
    """Mean label-smoothed cross-entropy of logits h @ weight.T against target.

    h (N, d) hidden states of the tokens to score (padding already removed), weight (vocab, d),
    target (N,). Equals F.cross_entropy(h @ weight.T, target, label_smoothing=smoothing).
    """
    if torch.is_autocast_enabled(h.device.type):  # e.g. a LayerNorm's fp32 output under bf16 autocast
        h = h.to(torch.get_autocast_dtype(h.device.type))
    return _LinearCrossEntropy.apply(h, weight, target, smoothing, chunk, torch.is_grad_enabled())
