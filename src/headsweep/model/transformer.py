"""Encoder-decoder Transformer (Vaswani et al. 2017) built on headsweep's MultiHeadAttention.

Plain PyTorch: no Hydra, Lightning or W&B here. One config object, `TransformerConfig` (headsweep.model.config),
which gives each attention layer its own (`cfg.attention(kind)`).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from headsweep.model.attention import KVCache, MultiHeadAttention
from headsweep.model.config import ATTENTION_KINDS, TransformerConfig, projection_heads
from headsweep.model.head_init import apply_init_heads
from headsweep.model.residual_init import scale_residual_outputs


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


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.attention("enc_self"))
        self.ff = FeedForward(cfg.d_model, cfg.d_ff)
        self.res_attn = Residual(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.res_ff = Residual(cfg.d_model, cfg.dropout, cfg.norm_first)

    def forward(self, x: Tensor, src_pad: Tensor) -> Tensor:
        x = self.res_attn(x, lambda y: self.self_attn(y, key_padding_mask=src_pad)[0])
        return self.res_ff(x, self.ff)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.attention("dec_self"))
        self.cross_attn = MultiHeadAttention(cfg.attention("cross"))
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
