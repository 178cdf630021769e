"""Multi-head attention with independent head count h, query/key size d_k and value size d_v, key/value
heads shared between query heads, and fixed (position-only) heads.

    head_i = Attention(Q W_i^Q, K W_g(i)^K, V W_g(i)^V)    W^Q, W^K: d_model -> d_k,  W^V: d_model -> d_v
    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V
    MultiHead(Q, K, V) = Concat(xi_1 head_1, ..., xi_h head_h) W^O      W^O: h*d_v -> d_model

g(i) = i // (h / kv_heads): with kv_heads < h, each key/value head serves h / kv_heads consecutive query
heads (kv_heads = 1: multi-query attention, Shazeer 2019; 1 < kv_heads < h: grouped-query attention,
Ainslie et al. 2023), and a decoding cache holds kv_heads heads instead of h. With `fixed` patterns the
first n heads are head_i = A_i V W_i^V, A_i a fixed positional pattern (headsweep.model.patterns,
Raganato et al. 2020): no W_i^Q or W_i^K.

xi are the head gates of Michel et al. 2019 (all ones unless set): xi_i = 0 removes head i, and
dL/dxi_i is head i's importance. With concrete_gates, xi is also multiplied by a learned hard-concrete
gate z_i (headsweep.model.gates; Voita et al. 2019 prune heads with it while training).
Vaswani et al. 2017, Table 3, rows A and B vary h, d_k and d_v.

forward: project -> attend -> gate -> W^O. The kernels are in headsweep.model.kernels, the decoding cache in
headsweep.model.kv_cache, the per-head layout (the tests' reference) in headsweep.model.per_head.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from headsweep.model.config import AttentionConfig, projection_heads
from headsweep.model.gates import HeadGating
from headsweep.model.kernels import KERNELS, attention, attention_mask, per_group, pick_kernel, sdpa_attention
from headsweep.model.kv_cache import KVCache
from headsweep.model.patterns import FixedPatterns
from headsweep.model.per_head import PerHeadLinear, convert_impl

__all__ = [
    "KERNELS",
    "AttentionConfig",
    "KVCache",
    "MultiHeadAttention",
    "attention",
    "attention_mask",
    "attention_param_count",
    "convert_impl",
    "init_projection",
    "per_group",
    "sdpa_attention",
]


class MultiHeadAttention(HeadGating, nn.Module):
    """Multi-head attention with h heads of query/key size d_k and value size d_v, built from one
    AttentionConfig (headsweep.model.config), kept as `.config`: MultiHeadAttention(AttentionConfig(d_model, h)).

    impl="fused": one projection each for Q, K and V, split into heads (the usual form).
    impl="per_head": a separate small projection per head, as the paper's equations are written
    (headsweep.model.per_head). Both have the same parameters, laid out differently; `convert_impl` maps one
    to the other. kv_heads (default h) key/value heads, each shared by h / kv_heads query heads; `fixed`: the
    patterns of the first len(fixed) heads (headsweep.model.patterns), which then have no query/key projection.
    The kernel (headsweep.model.kernels) is fixed here; need_weights takes the math path, which returns them.
    Head gates, hard-concrete gates, head dropout and the analysis hooks: HeadGating (headsweep.model.gates).
    """

    def __init__(self, config: AttentionConfig):
        super().__init__()
        if not isinstance(config, AttentionConfig):  # the old form, MultiHeadAttention(d_model, heads, ...)
            raise TypeError(
                f"MultiHeadAttention takes one AttentionConfig, got {config!r}: "
                "use MultiHeadAttention(AttentionConfig(d_model, heads, ...))"
            )
        self.config = config  # checked when built (AttentionConfig.__post_init__); convert_impl rebuilds from it
        self.d_model, self.heads, self.impl, self.dropout = config.d_model, config.heads, config.impl, config.dropout
        self.d_k, self.d_v, self.kv_heads = config.sizes
        self.fixed = FixedPatterns(config.fixed) if config.fixed else None
        self.n_fixed = len(config.fixed)
        self.proj_heads = projection_heads(self.heads, self.kv_heads, self.n_fixed)
        self.head_dims = {"q": self.d_k, "k": self.d_k, "v": self.d_v}
        for which, n in self.proj_heads.items():  # none where every head is fixed (W^Q, W^K of 0 heads)
            d = self.head_dims[which]
            if self.impl == "fused":
                setattr(self, f"{which}_proj", nn.Linear(self.d_model, n * d, bias=config.bias) if n else None)
            else:
                setattr(self, f"{which}_heads", PerHeadLinear(self.d_model, n, d, config.bias))
        self.out_proj = nn.Linear(self.heads * self.d_v, self.d_model, bias=config.bias)
        self.init_gating(self.heads, config.head_dropout, config.concrete_gates)
        self.attend_learned = pick_kernel(config.kernel, self.proj_heads["q"])  # SDPA or the math path, once
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        # One uniform_ per projection, in module order (init_projection); W^K and W^V times init_kv_gain.
        for name, m in self.named_modules():  # the concrete gates' log alpha keeps its own init
            if isinstance(m, nn.Linear):
                gain = self.config.init_kv_gain if name.split(".")[0] in KV_PROJECTIONS else 1.0
                init_projection(m.weight, self.config.init, gain)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

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
        q, k, v = self.project(x, memory, cache)  # (B, h-n, Tq, d_k), (B, kv-n, Tk, d_k), (B, kv, Tk, d_v)
        need = need_weights or self.record_weights
        heads, weights = self.attend(q, k, v, key_padding_mask, causal, need)  # (B, h, Tq, d_v), (B, h, Tq, Tk)
        heads = self.gate_heads(heads, weights, gate)  # xi_i head_i: (B, h, Tq, d_v)
        out = self.out_proj(heads.transpose(1, 2).reshape(B, Tq, self.heads * self.d_v))  # Concat(...) W^O
        return out, (weights if need_weights else None)

    def project(self, x: Tensor, memory: Tensor | None, cache: KVCache | None) -> tuple[Tensor, Tensor, Tensor]:
        """Q = x W^Q; K = m W^K and V = m W^V with m = x (self-attention: appended to what the cache
        holds) or the encoder output (cross-attention: computed once per sentence when cached)."""
        if memory is None:
            q, k, v = self._project_qkv(x)
            return (q, k, v) if cache is None else (q, *cache.append(k, v))
        if self.fixed is not None:
            raise ValueError("fixed heads are positions within one sentence: they need self-attention (memory=None)")

        def keys_values() -> tuple[Tensor, Tensor]:
            return self._project(memory, "k"), self._project(memory, "v")

        q = self._project(x, "q")
        return (q, *(keys_values() if cache is None else cache.once(keys_values)))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool, need: bool):
        """Every head's softmax(Q K^T / sqrt(d_k)) V (B, h, Tq, d_v), the fixed heads' A_i V first, and when
        `need` the weights (B, h, Tq, Tk), which only the math path returns."""
        dropout_p = self.dropout if self.training else 0.0
        kernel = attention if need else self.attend_learned
        heads, weights = kernel(q, k, v[:, self.n_fixed :], key_padding_mask, causal, dropout_p)  # learned heads
        weights = weights if need else None
        if self.fixed is None:
            return heads, weights
        a = self.fixed(q.size(2), v.size(2), key_padding_mask, causal, v.dtype, v.device)  # A: (B or 1, n, Tq, Tk)
        p = F.dropout(a, dropout_p) if dropout_p else a
        heads = torch.cat([p @ v[:, : self.n_fixed], heads], dim=1)  # (B, h, Tq, d_v)
        return heads, (torch.cat([a.expand(q.size(0), -1, -1, -1), weights], dim=1) if need else None)

    def _project(self, x: Tensor, which: str) -> Tensor:
        """(B, T, d_model) -> (B, heads, T, d) for which in {q, k, v} (heads: see projection_heads)."""
        B, T, _ = x.shape
        n, d = self.proj_heads[which], self.head_dims[which]
        if n == 0:
            return x.new_empty(B, 0, T, d)
        if self.impl == "per_head":
            return getattr(self, f"{which}_heads")(x)  # (B, heads, T, d)
        return getattr(self, f"{which}_proj")(x).view(B, T, n, d).transpose(1, 2)

    def _project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K and V of the same input. The fused layout does it in one matmul with the three weights
        stacked: one large GEMM beats three small ones on CPU (the gap shows at h = 1 in make bench)."""
        if self.impl != "fused" or self.q_proj is None:
            return self._project(x, "q"), self._project(x, "k"), self._project(x, "v")
        B, T, _ = x.shape
        projs = (self.q_proj, self.k_proj, self.v_proj)
        weight = torch.cat([p.weight for p in projs])
        bias = torch.cat([p.bias for p in projs]) if self.q_proj.bias is not None else None
        q, k, v = F.linear(x, weight, bias).split([p.out_features for p in projs], dim=-1)
        return tuple(t.view(B, T, self.proj_heads[w], -1).transpose(1, 2) for w, t in zip("qkv", (q, k, v)))

    def extra_repr(self) -> str:
        shared = f", kv_heads={self.kv_heads}" if self.kv_heads != self.heads else ""
        return f"heads={self.heads}, d_k={self.d_k}, d_v={self.d_v}{shared}, impl={self.impl}"


KV_PROJECTIONS = ("k_proj", "v_proj", "k_heads", "v_heads")  # W^K and W^V in either layout


def init_projection(weight: Tensor, init: str, gain: float = 1.0) -> Tensor:
    """U(-a, a) on a (fan_out, fan_in) weight, a = gain * sqrt(3) * sqrt(2 / (fan_in + fan_out)) (xavier: torch's
    xavier_uniform_, Glorot & Bengio 2010) or with fan_out replaced by fan_in (fan_in: a = gain * sqrt(3 / fan_in),
    LeCun et al. 1998's variance 1 / fan_in, i.e. kaiming_uniform_ with the linear gain). fan_in gives every
    projection unit gain, sqrt(fan_in) * std = 1: its output keeps its input's scale whatever h, d_k, d_v or
    kv_heads, which set fan_out (W^Q, W^K, W^V) or fan_in (W^O). xavier's scale moves with them (kv_heads 1
    makes W^K, W^V 4/3 times kv_heads 8's at d_model 256). Written as xavier_uniform_ computes it, so that for a
    square weight (fan_in == fan_out) both are the same single uniform_ call, bit for bit."""
    fan_out, fan_in = weight.shape
    std = gain * math.sqrt(2.0 / float(fan_in + (fan_in if init == "fan_in" else fan_out)))
    a = math.sqrt(3.0) * std
    return nn.init.uniform_(weight, -a, a)


def attention_param_count(
    d_model: int, heads: int, d_k: int, d_v: int, bias: bool = True, kv_heads: int | None = None, fixed: int = 0
) -> int:
    """Closed form: d_model*((h - n) d_k + (kv - n) d_k + kv d_v) for W^Q, W^K, W^V, plus h*d_v*d_model for
    W^O (+ biases); kv = kv_heads (default h), n fixed heads. With kv = h, n = 0: h*d_model*(2 d_k + d_v)."""
    n = projection_heads(heads, kv_heads, fixed)
    width = n["q"] * d_k + n["k"] * d_k + n["v"] * d_v  # output size of W^Q, W^K and W^V together
    count = d_model * width + heads * d_v * d_model
    if bias:
        count += width + d_model
    return count
