"""The two attention kernels, softmax(Q K^T / sqrt(d_k)) V per head, chosen once per layer
(MultiHeadAttention.__init__): `attention`, written out (the math path, and the one that returns the weights),
and torch's fused scaled_dot_product_attention (`sdpa_attention`). Both take the keys' padding mask and the
causal flag and build what they need from them; k and v may have fewer heads than q (shared key/value heads).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

KERNELS = ("auto", "math", "sdpa")


def attention(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool, dropout_p: float = 0.0):
    """softmax(Q K^T / sqrt(d_k)) V: q (B, h, Tq, d_k), k (B, g, Tk, d_k), v (B, g, Tk, d_v) ->
    ((B, h, Tq, d_v), weights (B, h, Tq, Tk) before dropout)."""
    mask = attention_mask(key_padding_mask, causal, q.size(2), k.size(2), q.device)  # (B or 1, 1, Tq or 1, Tk)
    scores = per_group(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, h, Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    p = F.dropout(weights, dropout_p) if dropout_p else weights
    return per_group(p, v), weights  # (B, h, Tq, d_v)


def sdpa_attention(
    q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool, dropout_p: float = 0.0
):
    """The same by torch's fused kernel, which does not return the weights: ((B, h, Tq, d_v), None)."""
    Tq, Tk = q.size(2), k.size(2)
    # the whole square causal pattern: SDPA's is_causal builds no mask and may pick a faster kernel
    square_causal = causal and key_padding_mask is None and Tq == Tk and Tq > 1
    mask = None if square_causal else attention_mask(key_padding_mask, causal, Tq, Tk, q.device)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=square_causal, enable_gqa=k.size(1) != q.size(1)
    )
    return out, None


def pick_kernel(kernel: str, learned_heads: int):
    """The kernel a layer uses. auto: SDPA where a GPU is, else the math path. Measured (make bench): on CPU
    under bf16 autocast matmul-softmax-matmul is several times faster than SDPA at h >= 8 (SDPA's CPU kernel
    upcasts and loops over heads), in fp32 they are close; on a GPU SDPA's fused kernels win. With every
    head fixed there is nothing for SDPA to do (0 heads)."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if kernel == "auto":
        kernel = "sdpa" if torch.cuda.is_available() else "math"
    return sdpa_attention if kernel == "sdpa" and learned_heads > 0 else attention


def attention_mask(key_padding_mask: Tensor | None, causal: bool, Tq: int, Tk: int, device) -> Tensor | None:
    """Boolean (B or 1, 1, Tq or 1, Tk), True = may attend: no padding keys, and with `causal` no key
    after the query (keys already in a decoding cache precede the Tq queries)."""
    mask = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]
    if causal and Tq > 1:
        allowed = torch.ones(Tq, Tk, dtype=torch.bool, device=device).tril(diagonal=Tk - Tq)
        mask = allowed if mask is None else mask & allowed
    return mask


def per_group(a: Tensor, b: Tensor) -> Tensor:
    """a (B, h, T, m) @ b (B, g, m, n) -> (B, h, T, n), query head i with b's head i // (h / g). The h query
    heads are viewed as (g, h / g) so the g shared heads broadcast: no copy of b per query head."""
    h, g = a.size(1), b.size(1)
    if g == h:
        return a @ b
    return (a.unflatten(1, (g, h // g)) @ b.unsqueeze(2)).flatten(1, 2)
