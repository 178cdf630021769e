"""A run's identity, in one place: its cell's name and its run name (h8-dk32-dv32[-<part>...][-s<seed>]), the
cell a run belongs to (its `cell-<label>` tag, else its name unseeded), its heads as the model uses them (so that
null and its meaning compare equal), and which settings a cell varies. Training names its runs with it, sweeps
name their cells with it, the store flattens a record's heads with it, and the reports group runs with it: one
rule each, so a run is known by the same name everywhere. Arithmetic on plain dicts (and DictConfigs)."""

from __future__ import annotations

import re

from headsweep.model import TransformerConfig, resolve_heads
from headsweep.model.config import FIXED_KINDS
from headsweep.model.patterns import DEFAULT_PATTERNS
from headsweep.sizes import model_of, model_sizes, shares_kv

# Table 3's columns as config keys: (config key, Table 3 column, short name in run and cell names).
TABLE3_KEYS = (
    ("model.n_layers", "N", "N"),
    ("model.d_model", "d_model", "dm"),
    ("model.d_ff", "d_ff", "ff"),
    ("model.heads", "h", "h"),
    ("model.d_k", "d_k", "dk"),
    ("model.d_v", "d_v", "dv"),
    ("model.dropout", "P_drop", "drop"),
    ("module.label_smoothing", "eps_ls", "ls"),
    ("model.positions", "pos", "pos"),
)
COLUMNS = {key: column for key, column, _ in TABLE3_KEYS}
ALIASES = {key: alias for key, _, alias in TABLE3_KEYS}

# Cell-name parts of settings outside Table 3 (label_part): h8-dk32-dv32-kv2, ...-fixed_enc7.
LABEL_ALIASES = {
    "model.kv_heads": "kv",
    "model.init_kv_gain": "kvgain",
    "model.attn_dropout": "attndrop",
    "model.init_heads": "init",
    "model.init_heads_noise": "noise",
    "model.init_wo": "wo",
    "model.init_wo_gain": "wog",
    "model.init_ff2_gain": "ff2g",
    **{f"model.fixed_heads.{kind}": f"fixed_{kind.split('_')[0]}" for kind in FIXED_KINDS},
}


# -- names -----------------------------------------------------------------------------------------------------


def run_name(heads: int, d_k: int, d_v: int, parts=(), seed=None) -> str:
    """h8-dk32-dv32[-<part>...][-s<seed>]: a cell's label, and with its seed a run's name. The one builder of
    both: a training's default run name (default_run_name) and a sweep's cell labels (cell_labels)."""
    return "-".join([f"h{heads}-dk{d_k}-dv{d_v}", *parts, *([f"s{seed}"] if seed is not None else [])])


def default_run_name(cfg) -> str:
    """The name of a run started without one: its sizes as the model uses them, shared K/V heads and fixed heads
    where it has them, its seed."""
    m = cfg.model
    d_k, d_v, kv = model_sizes(m)
    shared = [f"kv{kv}"] if shares_kv(m) else []
    fixed = [f"fixed_{kind.split('_')[0]}{n}" for kind, n in (m.get("fixed_heads") or {}).items() if n]
    return run_name(m.heads, d_k, d_v, shared + fixed, cfg.seed)


def cell_tag(tags) -> str | None:
    """The cell a `cell-<label>` tag names (`make sweep` sets one per job), else None."""
    return next((t[len("cell-") :] for t in tags or () if str(t).startswith("cell-")), None)


def default_cell(run_name: str, tags=()) -> str:
    """A run's grid cell: its `cell-<label>` tag, else the run name without its seed."""
    return cell_tag(tags) or re.sub(r"-s\d+$", "", run_name)


def label_part(key: str, value) -> str:
    """A setting's part of a cell name: drop0.1, kv2, init-identical."""
    alias = ALIASES.get(key) or LABEL_ALIASES.get(key) or key.rsplit(".", 1)[-1]
    text = f"{value:g}" if isinstance(value, float) else str(value)
    part = f"{alias}{text}" if isinstance(value, (int, float)) else f"{alias}-{text}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", part)


def cell_labels(flats: list[dict]) -> list[str]:
    """h8-dk32-dv32, plus each other setting that differs between the cells (N3-dm256-..., drop0.1-...)."""
    varied = [
        k
        for k in flats[0]
        if len({repr(f.get(k)) for f in flats}) > 1
        and k not in ("model.heads", "model.d_k", "model.d_v")
        and not follows_heads(k, flats)
        and not follows_join(k, flats)
    ]
    varied.sort(key=lambda k: list(ALIASES).index(k) if k in ALIASES else len(ALIASES))  # Table 3's order
    return [
        run_name(f["model.heads"], f["model.d_k"], f["model.d_v"], [label_part(k, f[k]) for k in varied]) for f in flats
    ]


# -- heads as used ---------------------------------------------------------------------------------------------


def heads_as_used(model: dict) -> dict[str, object]:
    """The settings that decide the shapes and roles of a layer's heads, as the model uses them: kv_heads = h
    is null (no sharing, whatever h: another h is resume's own check), no fixed heads is "none"."""
    c = TransformerConfig(**model)
    fixed = {kind: c.fixed(kind) for kind in FIXED_KINDS if c.fixed(kind)}
    return {
        "model.kv_heads": c.kv_heads if c.sizes.kv_heads != c.heads else "null (= heads)",
        "model.fixed_heads": ", ".join(f"{kind} {len(p)} ({' '.join(p)})" for kind, p in fixed.items()) or "none",
    }


def flat_heads_as_used(out: dict) -> None:
    """In a flattened config (store.flatten_config), kv_heads, fixed heads and their patterns as the model uses
    them, so that null and its meaning compare equal: kv_heads null is h; fixed_heads {kind: n} becomes one count
    per kind (0 where unset); null patterns are the default list."""
    out["model.kv_heads"] = resolve_heads(None, out["model.heads"], kv_heads=out["model.kv_heads"]).kv_heads
    out.pop("model.fixed_heads", None)  # a dict was walked into model.fixed_heads.<kind> leaves
    for kind in FIXED_KINDS:
        out.setdefault(f"model.fixed_heads.{kind}", 0)
    if out["model.fixed_patterns"] is None:
        out["model.fixed_patterns"] = DEFAULT_PATTERNS


# -- what a cell varies ----------------------------------------------------------------------------------------


def follows_heads(key: str, flats: list[dict]) -> bool:
    """kv_heads that equals h in every run is no setting of its own (no head shares its keys and values):
    no column or name part for it where h varies."""
    return key == "model.kv_heads" and not any(shares_kv(model_of(f)) for f in flats)


def follows_join(key: str, flats: list[dict]) -> bool:
    """data.max_len set by data.join alone (one value per join: longer examples need a longer limit, the
    sweep's lengths) is no setting of its own: the name says join8, not join8-max_len256."""
    if key != "data.max_len":
        return False
    joins = {f.get("data.join", 1) for f in flats}
    return len(joins) > 1 and len({(f.get("data.join", 1), f.get(key)) for f in flats}) == len(joins)


def follows_width(key: str, flats: list[dict]) -> bool:
    """A peak learning rate scaled by d_model^-0.5 in every run (conf/module: width_scaled_lr, the paper's
    schedule) moves with the model size, not as a setting of its own: Table 3 has no column for it."""
    if key != "module.peak_lr":
        return False
    scaled = {round(f[key] * f["model.d_model"] ** 0.5, 9) for f in flats if f.get(key) is not None}
    return len(scaled) == 1 and all(f.get(key) is not None for f in flats)


def varied_model_keys(flat: dict, base: dict) -> list[str]:
    """The model settings in which a cell differs from its base."""
    return [
        k
        for k in sorted(flat.keys() | base.keys())
        if k.startswith("model.") and repr(flat.get(k)) != repr(base.get(k))
    ]
