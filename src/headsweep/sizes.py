"""The sizes runs are compared by, resolved from a run's config: d_k and d_v per head, key/value heads where
the model has them (their nulls resolved by headsweep.model.resolve_heads, the one place), parameters by part,
the attention FLOPs per token (headsweep.identity names runs by them). Arithmetic on plain dicts: the config a run
logs to W&B and the report both use it."""

from __future__ import annotations

import copy

from headsweep.model import HeadSizes, resolve_heads

# Tokens of context the attention FLOPs are counted at, per sentence pair an example joins (data.join): about
# twice a Multi30k sentence, whose length the run does not record. The FLOPs that depend on it are also logged
# per context token.
FLOPS_CONTEXT = 32


def model_sizes(model) -> HeadSizes:
    """d_k, d_v and kv_heads of a model config (a dict or DictConfig with d_model and heads) as the model uses them."""
    return resolve_heads(model["d_model"], model["heads"], model.get("d_k"), model.get("d_v"), model.get("kv_heads"))


def shares_kv(model) -> bool:
    """Whether a model config's query heads share key/value heads (kv_heads resolved below h)."""
    return resolve_heads(None, model["heads"], kv_heads=model.get("kv_heads")).kv_heads != model["heads"]


def model_of(flat: dict) -> dict:
    """The model config of a flattened one (model.heads -> heads, ...)."""
    return {k.removeprefix("model."): v for k, v in flat.items() if k.startswith("model.")}


def resolved_sizes(model: dict) -> dict:
    """d_k, d_v (and kv_heads, when the model config has the key) as the model uses them."""
    resolved = model_sizes(model)
    sizes = {"d_k": resolved.d_k, "d_v": resolved.d_v}
    if "kv_heads" in model:  # grouped-query attention
        sizes["kv_heads"] = resolved.kv_heads
    return sizes


def attention_flops(model: dict, context: int = FLOPS_CONTEXT) -> dict:
    """Forward FLOPs of all attention sublayers (encoder self, decoder self, cross: 3 per layer) per
    token with `context` tokens to attend to, counted as Hoffmann et al. (2022, appendix F) do: 2 per
    multiply-add in the Q, K, V and output projections, in QK^T and in the weighted sum of the values,
    and 3 per attention weight for the softmax. Row A keeps h * d_k fixed, so only the softmax term (h)
    moves its count; rows B and C and key/value heads move the projections."""
    d_model, h = model["d_model"], model["heads"]
    sizes = resolved_sizes(model)
    d_k, d_v, kv = sizes["d_k"], sizes["d_v"], sizes.get("kv_heads", h)
    projections = 2 * d_model * (h * d_k + kv * (d_k + d_v)) + 2 * h * d_v * d_model
    per_context_token = 2 * h * d_k + 3 * h + 2 * h * d_v
    sublayers = 3 * model["n_layers"]
    return {
        "attention_per_token": sublayers * (projections + per_context_token * context),
        "attention_projections_per_token": sublayers * projections,
        "attention_per_context_token": sublayers * per_context_token,
        "context": context,
    }


def flops_context(config: dict) -> int:
    """Tokens of context a run's attention FLOPs are counted at: FLOPS_CONTEXT for each sentence pair its examples
    join (data.join; runs from before the setting joined nothing), so a join 2 cell costs what it attends to."""
    return FLOPS_CONTEXT * int((config.get("data") or {}).get("join") or 1)


def comparison_config(config: dict, params: dict | None = None) -> dict:
    """A run's resolved config as it is compared: model.d_k and model.d_v (and module.model's copy)
    resolved, plus `params` (parameters by part) and `flops` (attention_flops at flops_context), top-level keys that W&B
    shows as params.total, flops.attention_per_token, ..."""
    out = copy.deepcopy(config)
    for model in (out["model"], out.get("module", {}).get("model")):
        if isinstance(model, dict):
            model.update(resolved_sizes(model))
    if params:
        out["params"] = dict(params)
    out["flops"] = attention_flops(out["model"], flops_context(out))
    return out
