"""Multi-head attention with independent head count h, query/key size d_k and value size d_v.

    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)         W^Q, W^K: d_model -> d_k,  W^V: d_model -> d_v
    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V
    MultiHead(Q, K, V) = Concat(xi_1 head_1, ..., xi_h head_h) W^O      W^O: h*d_v -> d_model

xi are the head gates of Michel et al. 2019 (all ones unless set): xi_i = 0 removes head i, and
dL/dxi_i is head i's importance. With concrete_gates, xi is also multiplied by a learned hard-concrete
gate z_i (headsweep.model.gates; Voita et al. 2019 prune heads with it while training). Vaswani et al. 2017, Table 3, rows A and B vary h, d_k and d_v.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from headsweep.model.gates import HardConcreteGate

IMPLS = ("fused", "per_head")
KERNELS = ("auto", "math", "sdpa")
_LAYOUT = {"fused": "proj", "per_head": "heads"}  # attribute suffix of the Q/K/V projections


@dataclass
class KVCache:
    """Keys and values already projected, (B, h, T, d_k) and (B, h, T, d_v).

    Decoder self-attention appends one step at a time; cross-attention fills it once per
    sentence from the encoder output and reuses it for every step.
    """

    k: Tensor | None = None
    v: Tensor | None = None

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search keeps the surviving hypotheses, or drops finished sentences)."""
        if self.k is not None:
            self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)


def head_sizes(d_model: int, heads: int, d_k: int | None = None, d_v: int | None = None) -> tuple[int, int]:
    """(d_k, d_v) per head; an unset size is d_model / h, the paper's default."""
    return (d_k if d_k is not None else d_model // heads), (d_v if d_v is not None else d_model // heads)


def attention_mask(key_padding_mask: Tensor | None, causal: bool, Tq: int, Tk: int, device) -> Tensor | None:
    """Boolean (B or 1, 1, Tq or 1, Tk), True = may attend: no padding keys, and with `causal` no key
    after the query (keys already in a decoding cache precede the Tq queries)."""
    mask = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]
    if causal and Tq > 1:
        allowed = torch.ones(Tq, Tk, dtype=torch.bool, device=device).tril(diagonal=Tk - Tq)
        mask = allowed if mask is None else mask & allowed
    return mask


def attention_weights(q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
    """softmax(q k^T / sqrt(d_k)) over keys; mask is boolean, True = may attend."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, h, Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with h heads of query/key size d_k and value size d_v.

    impl="fused": one projection each for Q, K and V, split into heads (the usual form).
    impl="per_head": a separate small projection per head, as the paper's equations are written.
    Both have the same parameters, laid out differently; `convert_impl` maps one to the other.
    """

    def __init__(
        self,
        d_model: int,
        heads: int,
        d_k: int | None = None,
        d_v: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        impl: str = "fused",
        kernel: str = "auto",
        head_dropout: float = 0.0,
        concrete_gates: bool = False,
    ):
        super().__init__()
        if heads < 1:
            raise ValueError(f"heads must be >= 1, got {heads}")
        if (d_k is None or d_v is None) and d_model % heads:
            raise ValueError(
                f"heads={heads} does not divide d_model={d_model}: set d_k and d_v explicitly "
                f"(e.g. model.d_k={max(1, d_model // heads)} model.d_v={max(1, d_model // heads)})"
            )
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        if not 0.0 <= head_dropout < 1.0:
            raise ValueError(f"head_dropout must be in [0, 1), got {head_dropout}")
        self.d_model, self.heads = d_model, heads
        self.d_k, self.d_v = head_sizes(d_model, heads, d_k, d_v)
        if self.d_k < 1 or self.d_v < 1:
            raise ValueError(f"d_k and d_v must be positive, got d_k={self.d_k} d_v={self.d_v}")
        self.impl, self.kernel, self.dropout, self.head_dropout = impl, kernel, dropout, head_dropout
        h, dk, dv = heads, self.d_k, self.d_v
        if impl == "fused":
            self.q_proj = nn.Linear(d_model, h * dk, bias=bias)
            self.k_proj = nn.Linear(d_model, h * dk, bias=bias)
            self.v_proj = nn.Linear(d_model, h * dv, bias=bias)
        else:
            self.q_heads = nn.ModuleList(nn.Linear(d_model, dk, bias=bias) for _ in range(h))
            self.k_heads = nn.ModuleList(nn.Linear(d_model, dk, bias=bias) for _ in range(h))
            self.v_heads = nn.ModuleList(nn.Linear(d_model, dv, bias=bias) for _ in range(h))
        self.out_proj = nn.Linear(h * dv, d_model, bias=bias)
        self.concrete = HardConcreteGate(h) if concrete_gates else None  # z: learned, L0-penalised
        # Analysis hooks, not training state: a default gate xi used when forward() gets none, and
        # a switch that makes forward() keep its attention weights in `last_weights`.
        self.gate: Tensor | None = None
        self.record_weights = False
        self.last_weights: Tensor | None = None
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        # Xavier-uniform on each projection, as torch.nn.MultiheadAttention does on its packed weight.
        for m in self.modules():  # the concrete gates' log alpha keeps its own init
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def _project(self, x: Tensor, which: str) -> Tensor:
        """(B, T, d_model) -> (B, h, T, d) for which in {q, k, v}."""
        B, T, _ = x.shape
        if self.impl == "fused":
            y = getattr(self, f"{which}_proj")(x)  # (B, T, h*d)
            return y.view(B, T, self.heads, -1).transpose(1, 2)
        return torch.stack([p(x) for p in getattr(self, f"{which}_heads")], dim=1)  # (B, h, T, d)

    def _project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K and V of the same input. The fused layout does it in one matmul with the three weights
        stacked: one large GEMM beats three small ones on CPU (the gap shows at h = 1 in make bench)."""
        if self.impl != "fused":
            return self._project(x, "q"), self._project(x, "k"), self._project(x, "v")
        B, T, _ = x.shape
        projs = (self.q_proj, self.k_proj, self.v_proj)
        weight = torch.cat([p.weight for p in projs])
        bias = torch.cat([p.bias for p in projs]) if self.q_proj.bias is not None else None
        q, k, v = F.linear(x, weight, bias).split([p.out_features for p in projs], dim=-1)
        return tuple(t.view(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
        gate: Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from x (B, Tq, d_model) to memory (B, Tk, d_model), or to x itself if memory is None.

        key_padding_mask: (B, Tk) bool, True at padding (torch's convention).
        causal: position i attends to keys <= i (offset by what the cache already holds).
        gate: head gates xi, shape (h,) or (B, h); defaults to self.gate.
        cache: self-attention appends this step's keys/values; cross-attention computes them once.
        Returns (output (B, Tq, d_model), weights (B, h, Tq, Tk) or None).
        """
        B, Tq, _ = x.shape
        q, k, v = self._queries_keys_values(x, memory, cache)  # (B, h, Tq, d_k), (B, h, Tk, d_k), (B, h, Tk, d_v)
        need = need_weights or self.record_weights
        if causal and key_padding_mask is None and Tq == k.size(2) and Tq > 1 and not need and self._use_sdpa(q):
            # the whole square causal pattern: SDPA's is_causal builds no mask and may pick a faster kernel
            heads, weights = self._sdpa(q, k, v, None, is_causal=True), None
        else:
            mask = attention_mask(key_padding_mask, causal, Tq, k.size(2), x.device)
            heads, weights = self._attend(q, k, v, mask, need)  # head_i: (B, h, Tq, d_v)
        gate = self._gate(gate, B, x)  # xi: (h,) or (B, h)
        if gate is not None:
            heads = heads * gate.view(-1, self.heads, 1, 1)  # xi_i head_i
        out = self.out_proj(heads.transpose(1, 2).reshape(B, Tq, self.heads * self.d_v))  # Concat(...) W^O
        return out, weights

    def _queries_keys_values(self, x: Tensor, memory: Tensor | None, cache: KVCache | None):
        """Q = x W^Q; K = m W^K and V = m W^V with m = x (self-attention: appended to what the cache
        holds) or the encoder output (cross-attention: computed once per sentence when cached)."""
        if memory is None:
            q, k, v = self._project_qkv(x)
            if cache is not None:
                if cache.k is not None:
                    k, v = torch.cat([cache.k, k], dim=2), torch.cat([cache.v, v], dim=2)
                cache.k, cache.v = k, v
            return q, k, v
        q = self._project(x, "q")
        if cache is not None and cache.k is not None:
            return q, cache.k, cache.v
        k, v = self._project(memory, "k"), self._project(memory, "v")
        if cache is not None:
            cache.k, cache.v = k, v
        return q, k, v

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, need_weights: bool):
        """softmax(Q K^T / sqrt(d_k)) V per head, with the weights when asked for (the kernel is chosen in
        _use_sdpa; torch's fused kernel does not return them)."""
        if not need_weights and self._use_sdpa(q):
            return self._sdpa(q, k, v, mask), None
        weights = attention_weights(q, k, mask)  # (B, h, Tq, Tk)
        if self.record_weights:
            self.last_weights = weights.detach()
        p = F.dropout(weights, self.dropout, self.training) if self.dropout else weights
        return p @ v, (weights if need_weights else None)

    def _sdpa(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool = False) -> Tensor:
        dropout = self.dropout if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal)

    def _use_sdpa(self, x: Tensor) -> bool:
        # Measured (make bench): on CPU under bf16 autocast the plain matmul-softmax-matmul path is
        # several times faster than scaled_dot_product_attention at h >= 8 (SDPA's CPU kernel upcasts
        # and loops over heads); in fp32 they are close. On a GPU SDPA's fused kernels win.
        if self.kernel != "auto":
            return self.kernel == "sdpa"
        return x.device.type == "cuda"

    def _gate(self, gate: Tensor | None, B: int, x: Tensor) -> Tensor | None:
        """The gate xi for this call: the given one (or self.gate), times the hard-concrete gate z and head
        dropout when they are on."""
        gate = self.gate if gate is None else gate
        if self.concrete is not None:
            z = self.concrete(B)  # (B, h) sampled in training, (h,) deterministic in eval
            gate = z if gate is None else gate * z
        if self.training and self.head_dropout > 0:
            # Drop whole heads per sentence, rescaled so the expected output is unchanged.
            keep = 1.0 - self.head_dropout
            drop = torch.empty(B, self.heads, device=x.device).bernoulli_(keep) / keep
            gate = drop if gate is None else gate * drop
        return gate

    def extra_repr(self) -> str:
        return f"heads={self.heads}, d_k={self.d_k}, d_v={self.d_v}, impl={self.impl}"


def convert_impl(mha: MultiHeadAttention, impl: str) -> MultiHeadAttention:
    """A copy of `mha` in the other layout (fused <-> per_head) computing the same function."""
    bias = mha.out_proj.bias is not None
    new = MultiHeadAttention(
        mha.d_model, mha.heads, mha.d_k, mha.d_v, mha.dropout, bias, impl, mha.kernel, mha.head_dropout,
        mha.concrete is not None,
    ).to(mha.out_proj.weight)
    h = mha.heads
    with torch.no_grad():
        new.out_proj.load_state_dict(mha.out_proj.state_dict())
        if mha.concrete is not None:
            new.concrete.load_state_dict(mha.concrete.state_dict())
        for which in "qkv":
            if impl == mha.impl:
                src, dst = getattr(mha, f"{which}_{_LAYOUT[impl]}"), getattr(new, f"{which}_{_LAYOUT[impl]}")
                dst.load_state_dict(src.state_dict())
            elif impl == "per_head":  # split the fused (h*d, d_model) weight into h blocks of rows
                fused, heads = getattr(mha, f"{which}_proj"), getattr(new, f"{which}_heads")
                for i, head in enumerate(heads):
                    head.weight.copy_(fused.weight.chunk(h, 0)[i])
                    if bias:
                        head.bias.copy_(fused.bias.chunk(h, 0)[i])
            else:  # stack the per-head weights back into one
                heads, fused = getattr(mha, f"{which}_heads"), getattr(new, f"{which}_proj")
                fused.weight.copy_(torch.cat([p.weight for p in heads], 0))
                if bias:
                    fused.bias.copy_(torch.cat([p.bias for p in heads], 0))
    return new


def attention_param_count(d_model: int, heads: int, d_k: int, d_v: int, bias: bool = True) -> int:
    """Closed form: h*d_model*(2 d_k + d_v) for W^Q, W^K, W^V, plus h*d_v*d_model for W^O (+ biases)."""
    n = heads * d_model * (2 * d_k + d_v) + heads * d_v * d_model
    if bias:
        n += heads * (2 * d_k + d_v) + d_model
    return n
