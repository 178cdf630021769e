"""Encoder-decoder Transformer (Vaswani et al. 2017) built on headsweep's MultiHeadAttention.

Plain PyTorch: no Hydra, Lightning or W&B here. One config object, `TransformerConfig`.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from headsweep.model.attention import (
    IMPLS,
    INITS,
    KERNELS,
    HeadSizes,
    KVCache,
    MultiHeadAttention,
    check_head_sharing,
    check_init,
    projection_heads,
    resolve_heads,
)
from headsweep.model.head_init import INIT_HEADS, apply_init_heads, check_init_heads
from headsweep.model.patterns import DEFAULT_PATTERNS, LOOKS_AHEAD, parse_pattern
from headsweep.model.residual_init import WO_SCALINGS, check_residual_init, scale_residual_outputs
from headsweep.schema import choice, flag, integer, items, mapping, nullable, number, share, text

POSITIONS = ("sinusoidal", "learned")
ATTENTION_KINDS = ("enc_self", "dec_self", "cross")
FIXED_KINDS = ("enc_self", "dec_self")  # fixed patterns are positions in the sentence attended over
# Settings whose default changed: the value a saved config without the key was built with (issue 42: every
# model before `init` existed was initialised by xavier).
OLD_DEFAULTS = {"init": "xavier"}

# What each model setting (conf/model/) may hold, checked before any data is read (training.schema). The upper
# bounds are far beyond anything trained here (about 10x Transformer big): a value above one is a typo.
# Relations between them (heads dividing d_model, kv_heads dividing heads, fixed heads) are
# TransformerConfig's own checks below.
MODEL_SETTINGS = {
    "d_model": integer(1, 16384, fix="e.g. model.d_model=256 (the default) or 512 (the paper's base)"),
    "n_layers": integer(1, 64, fix="e.g. model.n_layers=3 (the default) or 6 (the paper's)"),
    "heads": integer(1, 1024, fix="e.g. model.heads=8"),
    "d_k": nullable(integer(1, 4096, fix="e.g. 32, or null for d_model / heads")),
    "d_v": nullable(integer(1, 4096, fix="e.g. 32, or null for d_model / heads")),
    "d_ff": integer(1, 65536, fix="e.g. model.d_ff=1024 (4 x d_model)"),
    "dropout": share(fix="e.g. model.dropout=0.1 (the paper's P_drop)"),
    "attn_dropout": share(),
    "head_dropout": share(),
    "concrete_gates": flag(),
    "norm_first": flag(),
    "positions": choice(*POSITIONS),
    "max_len": integer(2, 65536, fix="e.g. model.max_len=256; it must hold the longest sentence plus BOS/EOS"),
    "tie_embeddings": flag(),
    "impl": choice(*IMPLS),
    "kernel": choice(*KERNELS),
    # 0 and negative values are within the type's range here so that TransformerConfig's own check names the
    # divisors of heads that would work
    "kv_heads": nullable(integer(0, 1024)),
    "fixed_heads": nullable(mapping(fix="e.g. model.fixed_heads={enc_self:7}")),
    "fixed_patterns": nullable(items(text())),
    "init": choice(*INITS),
    "init_kv_gain": number(0.0, 100.0, lo_open=True),
    "init_heads": choice(*INIT_HEADS),
    "init_heads_noise": number(0.0, 10.0, fix="e.g. model.init_heads_noise=0.01 (1% of the init's std)"),
    "init_wo": choice(*WO_SCALINGS),
    "init_wo_base": nullable(integer(1, 1 << 20, fix="e.g. model.init_wo_base=256 (h * d_v of the base cell)")),
    "init_wo_gain": number(0.0, 100.0, fix="e.g. model.init_wo_gain=0.5 (0: W^O starts at zero)"),
    "init_ff2_gain": number(0.0, 100.0, fix="e.g. model.init_ff2_gain=0.5 (0: the FFN's W_2 starts at zero)"),
}


@dataclass
class TransformerConfig:
    vocab_size: int = 8000
    d_model: int = 256
    n_layers: int = 3  # N: layers in the encoder and in the decoder
    heads: int = 8
    d_k: int | None = None  # query/key size per head; None = d_model / heads
    d_v: int | None = None  # value size per head; None = d_model / heads
    d_ff: int = 1024
    dropout: float = 0.1  # P_drop: on sublayer outputs and embedding sums
    attn_dropout: float = 0.0  # on attention weights
    head_dropout: float = 0.0  # drop whole heads per sentence during training
    concrete_gates: bool = False  # a learned hard-concrete gate per head (L0 pruning, Voita et al. 2019)
    norm_first: bool = False  # False: post-norm as in the paper; True: pre-norm
    positions: str = "sinusoidal"  # or "learned" (Table 3 row E)
    max_len: int = 256  # longest sequence the model has positions for
    tie_embeddings: bool = True  # one joint source/target embedding, also the output projection
    pad_id: int = 0
    impl: str = "fused"  # attention layout: "fused" or "per_head"
    kernel: str = "auto"  # attention kernel: "auto", "math" or "sdpa"
    kv_heads: int | None = None  # key/value heads, each shared by heads / kv_heads query heads; None = heads
    fixed_heads: dict | None = None  # {kind: n}: the first n heads of each layer of that kind are fixed patterns
    fixed_patterns: list | None = None  # the patterns of fixed heads 1, 2, ...; None = patterns.DEFAULT_PATTERNS
    init: str = "fan_in"  # attention projections: "fan_in" (gain 1 whatever the head sizes) or "xavier" (earlier runs)
    init_kv_gain: float = 1.0  # multiplies the init bound of W^K and W^V
    init_heads: str = "independent"  # or "identical": every head of a layer starts as head 0 (head_init)
    init_heads_noise: float = 0.0  # identical heads perturbed by this share of each projection's std
    # The residual branches' output matrices (headsweep.model.residual_init): W^O's std times
    # sqrt(init_wo_base / (h * d_v)) under init_wo "mup" (muP's output-weight init), then times init_wo_gain;
    # the FFN's W_2 times init_ff2_gain. Gains 1 and "fan_in": the init every run before 2026-11-28 had; the
    # default 1/sqrt(6) was chosen on the base's validation loss (conf/model/small.yaml, docs/init.md).
    init_wo: str = "fan_in"
    init_wo_base: int | None = None  # W^O's fan-in h * d_v in the sweep's base cell (init_wo mup needs it)
    init_wo_gain: float = 0.4082482904638631
    init_ff2_gain: float = 0.4082482904638631

    def __post_init__(self):
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {self.positions!r}")
        for name in ("vocab_size", "d_model", "n_layers", "heads", "d_ff", "max_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("dropout", "attn_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        try:
            check_init(self.init, self.init_kv_gain)
        except ValueError as e:
            raise ValueError(f"model.{e}") from None
        try:
            check_residual_init(self.init_wo, self.init_wo_base, self.init_wo_gain, self.init_ff2_gain)
        except ValueError as e:
            raise ValueError(f"model.{e}") from None
        self._check_heads()
        try:
            check_init_heads(self.init_heads, self.init_heads_noise, self.heads, self.fixed_heads)
        except ValueError as e:
            raise ValueError(f"model.{e}") from None

    def _check_heads(self) -> None:
        """kv_heads and fixed heads: one line naming the key for a value that cannot work."""
        if self.kv_heads is not None:
            try:
                check_head_sharing(self.heads, self.kv_heads, 0)
            except ValueError as e:
                raise ValueError(f"model.{e}") from None
        for kind, n in (self.fixed_heads or {}).items():
            if kind not in FIXED_KINDS:
                raise ValueError(
                    f"model.fixed_heads.{kind}: fixed heads go in {' or '.join(FIXED_KINDS)} (positions "
                    "within one sentence; cross-attention's queries and keys are two sentences)"
                )
            if not isinstance(n, int) or n < 0:
                raise ValueError(f"model.fixed_heads.{kind}={n!r}: give a number of heads per layer, >= 0")
            try:
                check_head_sharing(self.heads, self.kv_heads, n)
            except ValueError as e:
                raise ValueError(f"model.fixed_heads.{kind}: {e}") from None
        patterns = self.patterns()
        for name in patterns:
            try:
                parse_pattern(name)
            except ValueError as e:
                raise ValueError(f"model.fixed_patterns: {e}") from None
        for kind, n in (self.fixed_heads or {}).items():
            if n > len(patterns):
                raise ValueError(
                    f"model.fixed_heads.{kind}={n} but model.fixed_patterns lists {len(patterns)} "
                    "patterns: list one pattern per fixed head"
                )
            ahead = [p for p in patterns[:n] if parse_pattern(p)[0] in LOOKS_AHEAD]
            if kind == "dec_self" and ahead:
                raise ValueError(
                    f"model.fixed_heads.dec_self: patterns {ahead} look at later tokens, which the "
                    "decoder may not see: reorder model.fixed_patterns so its first "
                    f"{n} use only cur, prev, leftN and first"
                )

    @property
    def sizes(self) -> HeadSizes:
        """d_k, d_v and kv_heads as the model uses them (null resolved: resolve_heads)."""
        return resolve_heads(self.d_model, self.heads, self.d_k, self.d_v, self.kv_heads)

    def patterns(self) -> tuple[str, ...]:
        return tuple(DEFAULT_PATTERNS if self.fixed_patterns is None else self.fixed_patterns)

    def fixed(self, kind: str) -> tuple[str, ...]:
        """The patterns of the fixed heads of each layer of one attention kind (heads 0 .. n-1)."""
        return self.patterns()[: (self.fixed_heads or {}).get(kind, 0)]


@dataclass
class LayerCache:
    """Incremental-decoding state of one decoder layer."""

    self_attn: KVCache = field(default_factory=KVCache)
    cross_attn: KVCache = field(default_factory=KVCache)


def sinusoidal_positions(n: int, d: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)); (n, d)."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    inv = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(pos * inv)
    pe[:, 1::2] = torch.cos(pos * inv)[:, : d // 2]
    return pe


class Dropout(nn.Module):
    """Dropout with its mask drawn from random bytes on CPU.

    torch's CPU dropout draws its mask with bernoulli_, which took ~12% of a training step here
    (make bench --profile); comparing random bytes to a threshold is ~2x cheaper. The rate is
    rounded to a multiple of 1/256 (0.1 -> 26/256) and the kept values are rescaled exactly.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p, self.threshold = p, round(p * 256)

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.threshold == 0:
            return x
        if x.device.type != "cpu":
            return F.dropout(x, self.p, training=True)
        keep = torch.empty(x.shape, dtype=torch.uint8, device=x.device).random_().ge_(self.threshold)
        return x * keep * (256 / (256 - self.threshold))

    def extra_repr(self) -> str:
        return f"p={self.threshold}/256"


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (no dropout inside: the paper drops only sublayer outputs)."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w1, self.w2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(torch.relu(self.w1(x)))


class Residual(nn.Module):
    """x + Dropout(sublayer(x)) with LayerNorm after (post-norm, the paper) or before (pre-norm)."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool):
        super().__init__()
        self.norm, self.dropout, self.norm_first = nn.LayerNorm(d_model), Dropout(dropout), norm_first

    def forward(self, x: Tensor, sublayer) -> Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


def _attention(cfg: TransformerConfig, kind: str) -> MultiHeadAttention:
    return MultiHeadAttention(
        cfg.d_model,
        cfg.heads,
        cfg.d_k,
        cfg.d_v,
        dropout=cfg.attn_dropout,
        impl=cfg.impl,
        kernel=cfg.kernel,
        head_dropout=cfg.head_dropout,
        concrete_gates=cfg.concrete_gates,
        kv_heads=cfg.kv_heads,
        fixed=cfg.fixed(kind),
        init=cfg.init,
        init_kv_gain=cfg.init_kv_gain,
    )


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.self_attn, self.ff = _attention(cfg, "enc_self"), FeedForward(cfg.d_model, cfg.d_ff)
        self.res_attn = Residual(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.res_ff = Residual(cfg.d_model, cfg.dropout, cfg.norm_first)

    def forward(self, x: Tensor, src_pad: Tensor) -> Tensor:
        x = self.res_attn(x, lambda y: self.self_attn(y, key_padding_mask=src_pad)[0])
        return self.res_ff(x, self.ff)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.self_attn, self.cross_attn = _attention(cfg, "dec_self"), _attention(cfg, "cross")
        self.ff = FeedForward(cfg.d_model, cfg.d_ff)
        self.res_self = Residual(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.res_cross = Residual(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.res_ff = Residual(cfg.d_model, cfg.dropout, cfg.norm_first)

    def forward(self, x: Tensor, memory: Tensor, src_pad: Tensor, cache: LayerCache | None = None) -> Tensor:
        self_cache, cross_cache = (cache.self_attn, cache.cross_attn) if cache else (None, None)
        x = self.res_self(x, lambda y: self.self_attn(y, causal=True, cache=self_cache)[0])
        x = self.res_cross(x, lambda y: self.cross_attn(y, memory, key_padding_mask=src_pad, cache=cross_cache)[0])
        return self.res_ff(x, self.ff)


class Transformer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, d, padding_idx=cfg.pad_id)
        # Untied: separate target embedding and output projection (three matrices, as without sharing).
        self.tgt_embed = None if cfg.tie_embeddings else nn.Embedding(cfg.vocab_size, d, padding_idx=cfg.pad_id)
        self.out_proj = None if cfg.tie_embeddings else nn.Linear(d, cfg.vocab_size, bias=False)
        if cfg.positions == "learned":
            self.pos = nn.Embedding(cfg.max_len, d)
        else:
            self.register_buffer("pe", sinusoidal_positions(cfg.max_len, d), persistent=False)
        self.dropout = Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layers))
        # Pre-norm leaves the residual stream unnormalised: normalise each stack's output once.
        self.enc_norm = nn.LayerNorm(d) if cfg.norm_first else nn.Identity()
        self.dec_norm = nn.LayerNorm(d) if cfg.norm_first else nn.Identity()
        for emb in (self.embed, self.tgt_embed):
            if emb is not None:  # N(0, d^-1/2): after the sqrt(d) scale, unit-variance inputs
                nn.init.normal_(emb.weight, 0.0, d**-0.5)
                with torch.no_grad():
                    emb.weight[cfg.pad_id].zero_()
        # last, so that the embeddings get the base's draws (init_heads_noise draws after them)
        attention = [m for kind in ATTENTION_KINDS for m in self.attention_layers(kind)]
        # scales only (no draws): every other weight is bit for bit the unit-gain model's
        scale_residual_outputs(self, cfg)
        apply_init_heads(attention, cfg.init_heads, cfg.init_heads_noise)

    def _embed(self, tokens: Tensor, emb: nn.Embedding, start: int = 0) -> Tensor:
        """Token embeddings scaled by sqrt(d_model) plus positions; (B, T) -> (B, T, d_model)."""
        T = tokens.size(1)
        if start + T > self.cfg.max_len:
            raise ValueError(f"sequence of {start + T} tokens exceeds model.max_len={self.cfg.max_len}")
        pos = self.pos.weight[start : start + T] if self.cfg.positions == "learned" else self.pe[start : start + T]
        return self.dropout(emb(tokens) * math.sqrt(self.cfg.d_model) + pos)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src (B, S) -> memory (B, S, d_model) and its padding mask (B, S), True at padding."""
        src_pad = src.eq(self.cfg.pad_id)
        x = self._embed(src, self.embed)
        for layer in self.encoder:
            x = layer(x, src_pad)
        return self.enc_norm(x), src_pad

    def decode(self, tgt_in: Tensor, memory: Tensor, src_pad: Tensor, cache: list[LayerCache] | None = None) -> Tensor:
        """tgt_in (B, T) -> logits (B, T, vocab). With a cache, tgt_in holds only the new step(s)."""
        return self.logits(self.decode_hidden(tgt_in, memory, src_pad, cache))

    def decode_hidden(
        self, tgt_in: Tensor, memory: Tensor, src_pad: Tensor, cache: list[LayerCache] | None = None
    ) -> Tensor:
        """The decoder's output states (B, T, d_model), before the output projection."""
        start = 0
        if cache is not None and cache[0].self_attn.k is not None:
            start = cache[0].self_attn.k.size(2)
        x = self._embed(tgt_in, self.tgt_embed or self.embed, start)
        for i, layer in enumerate(self.decoder):
            x = layer(x, memory, src_pad, cache[i] if cache is not None else None)
        return self.dec_norm(x)

    @property
    def output_weight(self) -> Tensor:
        """(vocab, d_model): the output projection, which is the embedding when tied."""
        return self.out_proj.weight if self.out_proj is not None else self.embed.weight

    def logits(self, x: Tensor) -> Tensor:
        return x @ self.output_weight.t()

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        memory, src_pad = self.encode(src)
        return self.decode(tgt_in, memory, src_pad)

    def new_cache(self) -> list[LayerCache]:
        return [LayerCache() for _ in self.decoder]

    def attention_layers(self, kind: str) -> list[MultiHeadAttention]:
        """The attention modules of one kind ("enc_self", "dec_self" or "cross"), layer by layer."""
        if kind == "enc_self":
            return [layer.self_attn for layer in self.encoder]
        if kind == "dec_self":
            return [layer.self_attn for layer in self.decoder]
        if kind == "cross":
            return [layer.cross_attn for layer in self.decoder]
        raise ValueError(f"attention kind must be one of {ATTENTION_KINDS}, got {kind!r}")

    def expected_open_heads(self) -> Tensor:
        """The L0 penalty: sum over every head of P(its hard-concrete gate is open); 0 without gates."""
        gates = [m.concrete for kind in ATTENTION_KINDS for m in self.attention_layers(kind) if m.concrete is not None]
        return sum((g.open_probability().sum() for g in gates), self.output_weight.new_zeros(()))

    def open_heads(self) -> dict[str, list[list[bool]]] | None:
        """{kind: per layer, per head: is its deterministic gate above zero}; None without gates."""
        if not self.cfg.concrete_gates:
            return None
        return {
            kind: [(m.concrete.deterministic() > 0).tolist() for m in self.attention_layers(kind)]
            for kind in ATTENTION_KINDS
        }


@contextmanager
def attention_switches(net: Transformer, gates: dict[str, list[Tensor]] | None = None, record: bool = False):
    """Analysis settings of every attention module inside the block, restored on exit: the default head
    gates xi ({kind: one gate per layer}, each (h,) or (B, h)) and recording of attention weights
    (each module's `last_weights`)."""
    modules = [(kind, layer, m) for kind in ATTENTION_KINDS for layer, m in enumerate(net.attention_layers(kind))]
    saved = [(m, m.gate, m.record_weights) for _, _, m in modules]
    for kind, layer, m in modules:
        if gates is not None:
            m.gate = gates[kind][layer]
        m.record_weights = record
    try:
        yield
    finally:
        for m, gate, rec in saved:
            m.gate, m.record_weights, m.last_weights = gate, rec, None


def reorder_cache(cache: list[LayerCache], index: Tensor, cross_index: Tensor | None = None) -> None:
    """Beam search's step: self-attention keys/values follow each surviving hypothesis (`index`). The
    cross-attention ones are the same for every beam of a sentence, so they change only when sentences
    leave the batch (`cross_index`, the rows kept; None: all stay)."""
    for layer in cache:
        layer.self_attn.reorder(index)
        if cross_index is not None:
            layer.cross_attn.reorder(cross_index)


def count_parameters(model: Transformer) -> dict[str, int]:
    """Parameters by part: embeddings (tied matrices once), attention by kind, feed-forward, norms."""
    parts = dict.fromkeys(["embeddings", "attn_enc_self", "attn_dec_self", "attn_cross", "ffn", "norms"], 0)
    seen: set[int] = set()
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:  # a tied weight counts once
            continue
        seen.add(id(p))
        if name.startswith(("embed.", "tgt_embed.", "out_proj.", "pos.")):
            part = "embeddings"
        elif ".self_attn." in name:
            part = "attn_enc_self" if name.startswith("encoder.") else "attn_dec_self"
        elif ".cross_attn." in name:
            part = "attn_cross"
        elif ".ff." in name:
            part = "ffn"
        elif "norm" in name:
            part = "norms"
        else:
            raise AssertionError(f"parameter {name} belongs to no part")
        parts[part] += p.numel()
    parts["attention"] = parts["attn_enc_self"] + parts["attn_dec_self"] + parts["attn_cross"]
    parts["total"] = sum(p.numel() for p in model.parameters())
    parts["non_embedding"] = parts["total"] - parts["embeddings"]
    return parts


def kv_cache_bytes(cfg: TransformerConfig, bytes_per_value: int = 4) -> dict[str, int]:
    """Closed form of the decoding cache, summed over the decoder's layers: self-attention keeps
    (kv_heads - n) d_k + kv_heads d_v values per layer for every target token so far (n: its fixed heads,
    which need no keys), cross-attention the same for every source token; kv_heads = h without sharing."""
    d_k, d_v, _ = cfg.sizes
    size = {}
    for kind in ("dec_self", "cross"):
        n = projection_heads(cfg.heads, cfg.kv_heads, len(cfg.fixed(kind)))
        size[kind] = cfg.n_layers * (n["k"] * d_k + n["v"] * d_v) * bytes_per_value
    return {"self_per_target_token": size["dec_self"], "cross_per_source_token": size["cross"]}
