"""Per-matrix learning rates (issue 54, `module.lr_scaling: none | mup`): each weight matrix's Adam rate scaled by
base fan-in / fan-in where its fan-in moves with the ablated sizes, so that a matrix's output moves as far per
step in every cell as in the sweep's base cell.

Why: Adam moves each weight by about the learning rate per step whatever its size, so a matrix's output moves in
proportion to its fan-in (Yang et al. 2022, Tensor Programs V, Table 3: under Adam a weight whose fan-in grows
needs a rate proportional to 1 / fan-in). At d_model fixed, the fan-ins that move are W^O's (h * d_v; kv_heads
and fixed heads do not change it) and the FFN's second matrix's (d_ff). W^Q, W^K, W^V and the FFN's first
matrix read d_model, and the embeddings (shared with the readout) and norms do not grow with the ablated sizes:
factor 1. Biases: factor 1; a bias is added once per output coordinate, so its update moves the output by the
rate whatever the fan-in (mup treats it as vector-like, unscaled, too).

mup (Microsoft, mup 1.0.0: set_base_shapes, MuAdam) divides the rate by the fan-in multiplier only for a weight
with two "infinite" dimensions; W^O here grows in its fan-in alone (fan-out d_model is fixed), which mup reads
as a vector-like (readout) weight and leaves at the full rate, relying on MuReadout's output multiplier instead.
So the rule is written here as parameter groups: on a hidden matrix whose fan-in and fan-out both grow, it gives
MuAdam's rates (tests/test_lr_scaling.py holds them equal); for W^O it divides by the fan-in multiplier although
the fan-out is fixed, the Adam row of Tensor Programs V's Table 3 for a growing fan-in.

The base: `lr_base`, the base cell's fan-ins {w_o: h * d_v, ff_w2: d_ff}; `make sweep` sets it on every job from
the sweep's base cell (the first cell of the same d_model). A run with lr_scaling mup and no base stops with one
line: a run's own sizes as its base would make every factor 1, per-matrix rates in name only.

Plain PyTorch: no Hydra, Lightning or W&B here.
"""

from __future__ import annotations

from torch import nn

SCALINGS = ("none", "mup")
BASE_KEYS = ("w_o", "ff_w2")  # lr_base's keys: the base cell's fan-in of W^O and of the FFN's W_2
# Which parameter has which moving fan-in, by its name's ending (the model's parameter names).
ROLES = {"_attn.out_proj.weight": "w_o", "ff.w2.weight": "ff_w2"}  # not the readout, out_proj.weight when untied


def check_scaling(lr_scaling: str, lr_base: dict | None) -> None:
    """One line for a scaling that does not exist, or per-matrix rates with no base cell to scale from."""
    if lr_scaling not in SCALINGS:
        raise ValueError(
            f"module.lr_scaling={lr_scaling!r} does not exist: use none (one rate for every weight) or mup "
            "(each matrix's rate scaled by base fan-in / fan-in)"
        )
    if lr_scaling == "none":
        return
    if lr_base is None:
        raise ValueError(
            "module.lr_scaling=mup has no base cell to scale from (module.lr_base is null): run it in a sweep, "
            "which sets module.lr_base from its base cell, or give the base's fan-ins, e.g. "
            "module.lr_base={w_o:256,ff_w2:1024} (h * d_v and d_ff of h 8, d_v 32, d_ff 1024)"
        )
    keys = sorted(dict(lr_base))
    bad = [k for k in BASE_KEYS if not (isinstance(lr_base.get(k), int) and lr_base[k] >= 1)]
    if keys != sorted(BASE_KEYS) or bad:
        raise ValueError(
            f"module.lr_base={dict(lr_base)}: give the base cell's fan-ins as whole numbers >= 1 under exactly "
            f"the keys {', '.join(BASE_KEYS)}, e.g. module.lr_base={{w_o:256,ff_w2:1024}}"
        )


def role(name: str) -> str | None:
    """The lr_base key of a parameter whose fan-in moves with the ablated sizes; None for any other."""
    return next((r for end, r in ROLES.items() if name.endswith(end)), None)


def lr_factors(net: nn.Module, lr_scaling: str, lr_base: dict | None) -> dict[str, float]:
    """{parameter name: factor on the peak rate}: base fan-in / fan-in (a weight's shape[1]) for W^O and the
    FFN's W_2 under mup, 1 for every other parameter and under none."""
    check_scaling(lr_scaling, lr_base)
    out = {}
    for name, p in net.named_parameters():
        r = role(name) if lr_scaling == "mup" else None
        out[name] = 1.0 if r is None else lr_base[r] / p.shape[1]
    return out


def param_groups(named: list[tuple[str, nn.Parameter]], factors: dict[str, float], lr: float) -> list[dict]:
    """Adam parameter groups, one per factor (in first-seen order), each at lr * factor; `lr_factor` is kept in
    the group so that a reader (the update check, a test) sees it."""
    groups: dict[float, dict] = {}
    for name, p in named:
        f = factors.get(name, 1.0)
        groups.setdefault(f, {"params": [], "lr": lr * f, "lr_factor": f})["params"].append(p)
    return list(groups.values())


def cell_factors(flat: dict) -> dict[str, float]:
    """{w_o, ff_w2: factor} of a flattened config (store.flatten_config: d_v resolved), from its sizes alone;
    every factor 1 under none or without a base."""
    if flat.get("module.lr_scaling", "none") != "mup" or flat.get("module.lr_base.w_o") is None:
        return {k: 1.0 for k in BASE_KEYS}
    fan_in = {"w_o": flat["model.heads"] * flat["model.d_v"], "ff_w2": flat["model.d_ff"]}
    return {k: flat[f"module.lr_base.{k}"] / fan_in[k] for k in BASE_KEYS}


def is_identity(flat: dict) -> bool:
    """Whether per-matrix rates change nothing in this config: none, or every factor 1 (the base cell itself,
    or a cell whose fan-ins equal the base's): then it is the same experiment as lr_scaling none."""
    return all(f == 1.0 for f in cell_factors(flat).values())


def base_fan_ins(flat: dict) -> dict[str, int]:
    """The fan-ins a base cell gives per-matrix rates (its flattened config: d_v resolved)."""
    return {"w_o": int(flat["model.heads"] * flat["model.d_v"]), "ff_w2": int(flat["model.d_ff"])}
