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
gate z_i (headsweep.model.gates; Voita et al. 2019 prune heads with it while training). Vaswani et al. 2017, Table 3, rows A and B vary h, d_k and d_v.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from headsweep.model.gates import HardConcreteGate
from headsweep.model.patterns import FixedPatterns

IMPLS = ("fused", "per_head")
KERNELS = ("auto", "math", "sdpa")
# Initialisations of the attention projections (init_projection): fan_in keeps every projection's gain at 1
# whatever h, d_k, d_v and kv_heads; xavier, the earlier default, moves with them (it depends on fan-out).
INITS = ("fan_in", "xavier")
_LAYOUT = {"fused": "proj", "per_head": "heads"}  # attribute suffix of the Q/K/V projections


@dataclass
class KVCache:
    """Keys and values already projected, (B, kv_heads, T, d_k) and (B, kv_heads, T, d_v) (fixed heads
    need values but no keys: kv_heads - n key heads).

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
    """softmax(q k^T / sqrt(d_k)) over keys, (B, h, Tq, Tk); mask is boolean, True = may attend. k may have
    fewer heads than q: each serves h / its heads consecutive query heads."""
    scores = per_group(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, h, Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1)


def per_group(a: Tensor, b: Tensor) -> Tensor:
    """a (B, h, T, m) @ b (B, g, m, n) -> (B, h, T, n), query head i with b's head i // (h / g). The h query
    heads are viewed as (g, h / g) so the g shared heads broadcast: no copy of b per query head."""
    h, g = a.size(1), b.size(1)
    if g == h:
        return a @ b
    return (a.unflatten(1, (g, h // g)) @ b.unsqueeze(2)).flatten(1, 2)


def projection_heads(heads: int, kv_heads: int | None = None, fixed: int = 0) -> dict[str, int]:
    """Heads of each projection: W^Q for the h - n learned query heads, W^K for the kv_heads - n key heads
    they use, W^V for all kv_heads value heads (fixed heads have values but neither queries nor keys)."""
    kv = heads if kv_heads is None else kv_heads
    return {"q": heads - fixed, "k": kv - fixed, "v": kv}


class MultiHeadAttention(nn.Module):
    """Multi-head attention with h heads of query/key size d_k and value size d_v.

    impl="fused": one projection each for Q, K and V, split into heads (the usual form).
    impl="per_head": a separate small projection per head, as the paper's equations are written.
    Both have the same parameters, laid out differently; `convert_impl` maps one to the other.
    kv_heads (default h) key/value heads, each shared by h / kv_heads query heads; `fixed`: the patterns
    of the first len(fixed) heads (headsweep.model.patterns), which then have no query/key projection.
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
        kv_heads: int | None = None,
        fixed=(),
        init: str = "fan_in",
        init_kv_gain: float = 1.0,
    ):
        super().__init__()
        check_init(init, init_kv_gain)
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
        fixed = tuple(fixed or ())
        check_head_sharing(heads, kv_heads, len(fixed))
        self.d_model, self.heads = d_model, heads
        self.kv_heads = heads if kv_heads is None else kv_heads
        self.d_k, self.d_v = head_sizes(d_model, heads, d_k, d_v)
        if self.d_k < 1 or self.d_v < 1:
            raise ValueError(f"d_k and d_v must be positive, got d_k={self.d_k} d_v={self.d_v}")
        self.impl, self.kernel, self.dropout, self.head_dropout = impl, kernel, dropout, head_dropout
        self.init, self.init_kv_gain = init, float(init_kv_gain)
        self.fixed = FixedPatterns(fixed) if len(fixed) else None
        self.n_fixed = len(fixed)
        self.proj_heads = projection_heads(heads, self.kv_heads, self.n_fixed)
        sizes = {"q": self.d_k, "k": self.d_k, "v": self.d_v}
        for which, n in self.proj_heads.items():  # none where every head is fixed (W^Q, W^K of 0 heads)
            if impl == "fused":
                setattr(self, f"{which}_proj", nn.Linear(d_model, n * sizes[which], bias=bias) if n else None)
            else:
                setattr(
                    self, f"{which}_heads", nn.ModuleList(nn.Linear(d_model, sizes[which], bias=bias) for _ in range(n))
                )
        self.out_proj = nn.Linear(heads * self.d_v, d_model, bias=bias)
        self.concrete = HardConcreteGate(heads) if concrete_gates else None  # z: learned, L0-penalised
        # Analysis hooks, not training state: a default gate xi used when forward() gets none, and
        # a switch that makes forward() keep its attention weights in `last_weights`.
        self.gate: Tensor | None = None
        self.record_weights = False
        self.last_weights: Tensor | None = None
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        # One uniform_ per projection, in module order (init_projection); W^K and W^V times init_kv_gain.
        for name, m in self.named_modules():  # the concrete gates' log alpha keeps its own init
            if isinstance(m, nn.Linear):
                gain = self.init_kv_gain if name.split(".")[0] in KV_PROJECTIONS else 1.0
                init_projection(m.weight, self.init, gain)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def _project(self, x: Tensor, which: str) -> Tensor:
        """(B, T, d_model) -> (B, heads, T, d) for which in {q, k, v} (heads: see projection_heads)."""
        B, T, _ = x.shape
        n, d = self.proj_heads[which], self.d_v if which == "v" else self.d_k
        if n == 0:
            return x.new_empty(B, 0, T, d)
        if self.impl == "fused":
            y = getattr(self, f"{which}_proj")(x)  # (B, T, heads*d)
            return y.view(B, T, n, d).transpose(1, 2)
        return torch.stack([p(x) for p in getattr(self, f"{which}_heads")], dim=1)  # (B, heads, T, d)

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
        if self.fixed is not None and memory is not None:
            raise ValueError("fixed heads are positions within one sentence: they need self-attention (memory=None)")
        q, k, v = self._queries_keys_values(x, memory, cache)  # (B, h-n, Tq, d_k), (B, kv-n, Tk, d_k), (B, kv, Tk, d_v)
        need = need_weights or self.record_weights
        heads, weights = self._learned(q, k, v[:, self.n_fixed :], key_padding_mask, causal, need)  # (B, h-n, Tq, d_v)
        if self.fixed is not None:  # head_i = A_i V_i for the first n heads
            a = self.fixed(Tq, v.size(2), key_padding_mask, causal, v.dtype, v.device)  # A: (B or 1, n, Tq, Tk)
            p = F.dropout(a, self.dropout, self.training) if self.dropout else a
            heads = torch.cat([p @ v[:, : self.n_fixed], heads], dim=1)  # (B, h, Tq, d_v)
            weights = torch.cat([a.expand(B, -1, -1, -1), weights], dim=1) if need else None
        if self.record_weights:
            self.last_weights = weights.detach()
        gate = self._gate(gate, B, x)  # xi: (h,) or (B, h)
        if gate is not None:
            heads = heads * gate.view(-1, self.heads, 1, 1)  # xi_i head_i
        out = self.out_proj(heads.transpose(1, 2).reshape(B, Tq, self.heads * self.d_v))  # Concat(...) W^O
        return out, (weights if need_weights else None)

    def _learned(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool, need: bool):
        """The learned heads (B, h-n, Tq, d_v) and, when `need`, their weights (B, h-n, Tq, Tk)."""
        Tq, Tk = q.size(2), k.size(2)
        if causal and key_padding_mask is None and Tq == Tk and Tq > 1 and not need and self._use_sdpa(q):
            # the whole square causal pattern: SDPA's is_causal builds no mask and may pick a faster kernel
            return self._sdpa(q, k, v, None, is_causal=True), None
        mask = attention_mask(key_padding_mask, causal, Tq, Tk, q.device)
        return self._attend(q, k, v, mask, need)

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
        p = F.dropout(weights, self.dropout, self.training) if self.dropout else weights
        return per_group(p, v), (weights if need_weights else None)

    def _sdpa(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool = False) -> Tensor:
        dropout = self.dropout if self.training else 0.0
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal, enable_gqa=k.size(1) != q.size(1)
        )

    def _use_sdpa(self, x: Tensor) -> bool:
        # Measured (make bench): on CPU under bf16 autocast the plain matmul-softmax-matmul path is
        # several times faster than scaled_dot_product_attention at h >= 8 (SDPA's CPU kernel upcasts
        # and loops over heads); in fp32 they are close. On a GPU SDPA's fused kernels win.
        if x.size(1) == 0:  # every head is fixed
            return False
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
        shared = f", kv_heads={self.kv_heads}" if self.kv_heads != self.heads else ""
        return f"heads={self.heads}, d_k={self.d_k}, d_v={self.d_v}{shared}, impl={self.impl}"


KV_PROJECTIONS = ("k_proj", "v_proj", "k_heads", "v_heads")  # W^K and W^V in either layout


def check_init(init: str, init_kv_gain: float) -> None:
    if init not in INITS:
        raise ValueError(
            f"init={init!r}: use one of {', '.join(INITS)} (fan_in: every attention projection at gain "
            "1 whatever the head sizes; xavier: the earlier runs' init)"
        )
    if not (
        isinstance(init_kv_gain, (int, float))
        and not isinstance(init_kv_gain, bool)
        and math.isfinite(init_kv_gain)
        and init_kv_gain > 0
    ):
        raise ValueError(
            f"init_kv_gain={init_kv_gain!r} multiplies the init bound of W^K and W^V: use a finite "
            "number > 0 (1.0: no change)"
        )


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


def check_head_sharing(heads: int, kv_heads: int | None, fixed: int) -> None:
    """kv_heads divides h; at most h fixed heads, and not together with shared key/value heads."""
    if kv_heads is not None and (kv_heads < 1 or heads % kv_heads):
        divisors = ", ".join(str(d) for d in range(1, heads + 1) if heads % d == 0)
        raise ValueError(
            f"kv_heads={kv_heads} must divide heads={heads} (each key/value head serves heads / "
            f"kv_heads query heads): use one of {divisors}, or null for heads"
        )
    if fixed > heads:
        raise ValueError(f"{fixed} fixed heads but heads={heads}: at most {heads}")
    if fixed and kv_heads not in (None, heads):
        raise ValueError(
            f"fixed heads with kv_heads={kv_heads} < heads={heads}: a fixed head keeps its own value "
            "head, so use fixed heads or shared key/value heads, not both"
        )


def convert_impl(mha: MultiHeadAttention, impl: str) -> MultiHeadAttention:
    """A copy of `mha` in the other layout (fused <-> per_head) computing the same function."""
    bias = mha.out_proj.bias is not None
    new = MultiHeadAttention(
        mha.d_model,
        mha.heads,
        mha.d_k,
        mha.d_v,
        mha.dropout,
        bias,
        impl,
        mha.kernel,
        mha.head_dropout,
        mha.concrete is not None,
        mha.kv_heads,
        mha.fixed.patterns if mha.fixed is not None else (),
        mha.init,
        mha.init_kv_gain,
    ).to(mha.out_proj.weight)
    with torch.no_grad():
        new.out_proj.load_state_dict(mha.out_proj.state_dict())
        if mha.concrete is not None:
            new.concrete.load_state_dict(mha.concrete.state_dict())
        for which, n in mha.proj_heads.items():
            if n == 0:
                continue
            if impl == mha.impl:
                src, dst = getattr(mha, f"{which}_{_LAYOUT[impl]}"), getattr(new, f"{which}_{_LAYOUT[impl]}")
                dst.load_state_dict(src.state_dict())
            elif impl == "per_head":  # split the fused (n*d, d_model) weight into n blocks of rows
                fused, heads = getattr(mha, f"{which}_proj"), getattr(new, f"{which}_heads")
                for i, head in enumerate(heads):
                    head.weight.copy_(fused.weight.chunk(n, 0)[i])
                    if bias:
                        head.bias.copy_(fused.bias.chunk(n, 0)[i])
            else:  # stack the per-head weights back into one
                heads, fused = getattr(mha, f"{which}_heads"), getattr(new, f"{which}_proj")
                fused.weight.copy_(torch.cat([p.weight for p in heads], 0))
                if bias:
                    fused.bias.copy_(torch.cat([p.bias for p in heads], 0))
    return new


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
