"""The model, in plain PyTorch (nothing of Hydra, Lightning, W&B or the rest of headsweep): config (the
settings and their checks) -> attention -> transformer, plus the fused output loss and greedy/beam decoding."""

from headsweep.model.attention import KVCache, MultiHeadAttention, attention_param_count, convert_impl
from headsweep.model.config import (
    ATTENTION_KINDS,
    AttentionConfig,
    HeadSizes,
    TransformerConfig,
    head_sizes,
    resolve_heads,
)
from headsweep.model.transformer import (
    LayerCache,
    Transformer,
    attention_switches,
    count_parameters,
    kv_cache_bytes,
    reorder_cache,
)

__all__ = [
    "ATTENTION_KINDS",
    "AttentionConfig",
    "HeadSizes",
    "KVCache",
    "LayerCache",
    "MultiHeadAttention",
    "Transformer",
    "TransformerConfig",
    "attention_param_count",
    "attention_switches",
    "convert_impl",
    "count_parameters",
    "head_sizes",
    "kv_cache_bytes",
    "reorder_cache",
    "resolve_heads",
]
