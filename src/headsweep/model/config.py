"""The model's settings and their checks, in one place: `TransformerConfig`, one per model (what conf/model/
holds), and `AttentionConfig`, one per attention layer, built from it (`TransformerConfig.attention`). Each
checks its values when built: a bad one is one line saying what to do. Plain Python, no torch modules.
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass
from typing import NamedTuple

from headsweep.model.head_init import INIT_HEADS, check_init_heads
from headsweep.model.kernels import KERNELS
from headsweep.model.patterns import DEFAULT_PATTERNS, LOOKS_AHEAD, parse_pattern
from headsweep.model.residual_init import WO_SCALINGS, check_residual_init
from headsweep.schema import choice, flag, integer, items, mapping, nullable, number, share, text

IMPLS = ("fused", "per_head")
# Initialisations of the attention projections (attention.init_projection): fan_in keeps every projection's
# gain at 1 whatever h, d_k, d_v and kv_heads; xavier, the earlier default, moves with them (it depends on fan-out).
INITS = ("fan_in", "xavier")


class HeadSizes(NamedTuple):
    d_k: int  # query/key size per head
    d_v: int  # value size per head
    kv_heads: int  # key/value heads, each shared by heads / kv_heads query heads


def resolve_heads(
    d_model: int | None, heads: int, d_k: int | None = None, d_v: int | None = None, kv_heads: int | None = None
) -> HeadSizes:
    """The sizes a config's nulls stand for, the one place they are resolved: d_k, d_v null = d_model / h (the
    paper's default), kv_heads null = h (no sharing). d_model may be None where only kv_heads is wanted."""
    per_head = None if d_model is None else d_model // heads
    return HeadSizes(
        per_head if d_k is None else d_k, per_head if d_v is None else d_v, heads if kv_heads is None else kv_heads
    )


def head_sizes(d_model: int, heads: int, d_k: int | None = None, d_v: int | None = None) -> tuple[int, int]:
    """(d_k, d_v) per head (resolve_heads)."""
    return resolve_heads(d_model, heads, d_k, d_v)[:2]


def projection_heads(heads: int, kv_heads: int | None = None, fixed: int = 0) -> dict[str, int]:
    """Heads of each projection: W^Q for the h - n learned query heads, W^K for the kv_heads - n key heads
    they use, W^V for all kv_heads value heads (fixed heads have values but neither queries nor keys)."""
    kv = resolve_heads(None, heads, kv_heads=kv_heads).kv_heads
    return {"q": heads - fixed, "k": kv - fixed, "v": kv}


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
    if fixed and resolve_heads(None, heads, kv_heads=kv_heads).kv_heads != heads:
        raise ValueError(
            f"fixed heads with kv_heads={kv_heads} < heads={heads}: a fixed head keeps its own value "
            "head, so use fixed heads or shared key/value heads, not both"
        )


@dataclass(frozen=True)
class AttentionConfig:
    """The settings of one MultiHeadAttention layer, checked here once. The layer keeps it whole as `.config`
    and convert_impl rebuilds it from it by name (dataclasses.replace), never by position: a field added or
    moved here reaches every copy. Frozen, so a layer's config cannot drift from the layer it built.
    After d_v the fields are keyword-only: a positional value cannot land in the wrong setting."""

    d_model: int
    heads: int
    d_k: int | None = None  # query/key size per head; None = d_model / heads
    d_v: int | None = None  # value size per head; None = d_model / heads
    _: KW_ONLY
    dropout: float = 0.0  # on the attention weights
    bias: bool = True
    impl: str = "fused"  # "fused" (one projection split into heads) or "per_head" (headsweep.model.per_head)
    kernel: str = "auto"  # "auto", "math" or "sdpa" (headsweep.model.kernels)
    head_dropout: float = 0.0  # whole heads dropped per sentence while training
    concrete_gates: bool = False  # a learned hard-concrete gate per head (headsweep.model.gates)
    kv_heads: int | None = None  # key/value heads, each shared by heads / kv_heads query heads; None = heads
    fixed: tuple[str, ...] = ()  # the patterns of the first len(fixed) heads (headsweep.model.patterns)
    init: str = "fan_in"  # one of INITS
    init_kv_gain: float = 1.0  # multiplies the init bound of W^K and W^V

    def __post_init__(self):
        # a list from a config file becomes a tuple: the config stays hashable and comparable
        object.__setattr__(self, "fixed", tuple(str(p) for p in (self.fixed or ())))
        check_init(self.init, self.init_kv_gain)
        object.__setattr__(self, "init_kv_gain", float(self.init_kv_gain))
        if self.heads < 1:
            raise ValueError(f"heads must be >= 1, got {self.heads}")
        if (self.d_k is None or self.d_v is None) and self.d_model % self.heads:
            guess = max(1, resolve_heads(self.d_model, self.heads).d_k)
            raise ValueError(
                f"heads={self.heads} does not divide d_model={self.d_model}: set d_k and d_v explicitly "
                f"(e.g. model.d_k={guess} model.d_v={guess})"
            )
        if self.impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {self.impl!r}")
        if self.kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {self.kernel!r}")
        check_head_sharing(self.heads, self.kv_heads, len(self.fixed))
        for name in self.fixed:
            parse_pattern(name)
        d_k, d_v, _ = self.sizes
        if d_k < 1 or d_v < 1:
            raise ValueError(f"d_k and d_v must be positive, got d_k={d_k} d_v={d_v}")
        for name in ("dropout", "head_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")

    @property
    def sizes(self) -> HeadSizes:
        """d_k, d_v and kv_heads as the layer uses them (nulls resolved: resolve_heads)."""
        return resolve_heads(self.d_model, self.heads, self.d_k, self.d_v, self.kv_heads)


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

    def attention(self, kind: str) -> AttentionConfig:
        """The settings of every attention layer of one kind (ATTENTION_KINDS): they differ only in their
        fixed heads. The one place the model's settings are mapped to the attention layer's."""
        return AttentionConfig(
            self.d_model,
            self.heads,
            self.d_k,
            self.d_v,
            dropout=self.attn_dropout,
            impl=self.impl,
            kernel=self.kernel,
            head_dropout=self.head_dropout,
            concrete_gates=self.concrete_gates,
            kv_heads=self.kv_heads,
            fixed=self.fixed(kind),
            init=self.init,
            init_kv_gain=self.init_kv_gain,
        )
