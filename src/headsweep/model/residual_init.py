"""The starting scale of the residual branches' output matrices: W^O of every attention layer and W_2 of every
feed-forward layer, the two matrices whose outputs are added to the residual stream.

    W^O <- g_o * sqrt(base / (h d_v)) * W^O    (init_wo "mup"; "fan_in": the factor is 1)
    W_2 <- g_2 * W_2

Why a gain: a post-norm Transformer whose residual branches start large trains slowly or not at all (Liu et al.
2020, Admin); GPT-2 and nanoGPT scale each residual output projection by 1 / sqrt(2N) (N layers, two branches a
layer), T-Fixup and DeepNet scale the same matrices. A gain of 0 starts the branch at zero (its output matrix
still learns from the first step: its gradient is the branch's input, not 0).

Why "mup" for W^O: at a fixed d_model, growing h (or d_v) grows W^O's fan-in h d_v while its fan-out stays
d_model, so under muP (Yang et al. 2022, Tensor Programs V, Table 3) W^O is an output-like weight whose init
variance scales as 1 / fan_in^2 (std as 1 / fan_in), not the 1 / fan_in of `init: fan_in`; relative to the
base cell that is the factor sqrt(base / fan_in) on fan_in's std. mup's MuReadout divides the layer's output by
the width multiplier to the same end. W^Q, W^K, W^V read d_model (fan-in fixed): unchanged.

Each factor multiplies the weights drawn by the usual init: no random draw is added or moved, so every other
weight of the model is bit for bit the unit-gain model's, and a gain of 1 is the unit-gain model itself.

Plain PyTorch: no Hydra, Lightning or W&B here.
"""

from __future__ import annotations

import math

import torch
from torch import nn

WO_SCALINGS = ("fan_in", "mup")


def _gain_ok(g) -> bool:
    return isinstance(g, (int, float)) and not isinstance(g, bool) and math.isfinite(g) and g >= 0


def check_residual_init(init_wo: str, init_wo_base, init_wo_gain, init_ff2_gain) -> None:
    """One line for an unknown W^O scaling, mup without its base, or a gain that is negative or not finite."""
    if init_wo not in WO_SCALINGS:
        raise ValueError(
            f"init_wo={init_wo!r} does not exist: use fan_in (W^O at gain 1 whatever h * d_v) or mup (W^O's std "
            "times sqrt(base fan-in / fan-in), muP's output-weight init)"
        )
    if init_wo == "mup" and init_wo_base is None:
        raise ValueError(
            "init_wo=mup has no base cell to scale from (model.init_wo_base is null): run it in a sweep, which "
            "sets it from its base cell, or give the base's W^O fan-in h * d_v, e.g. model.init_wo_base=256"
        )
    if init_wo_base is not None and not (
        isinstance(init_wo_base, int) and not isinstance(init_wo_base, bool) and init_wo_base >= 1
    ):
        raise ValueError(f"init_wo_base={init_wo_base!r}: give the base cell's W^O fan-in h * d_v, a whole number >= 1")
    for name, g in (("init_wo_gain", init_wo_gain), ("init_ff2_gain", init_ff2_gain)):
        if not _gain_ok(g):
            raise ValueError(
                f"{name}={g!r} multiplies the init std of its matrix: use a finite number >= 0 "
                "(1.0: no change; 0: the matrix starts at zero)"
            )


def wo_factor(fan_in: int, init_wo: str, init_wo_base: int | None, init_wo_gain: float) -> float:
    """What W^O's drawn weights are multiplied by: init_wo_gain, times sqrt(base / fan_in) under mup."""
    mup = math.sqrt(init_wo_base / fan_in) if init_wo == "mup" else 1.0
    return float(init_wo_gain) * mup


@torch.no_grad()
def scale_wo(m: nn.Module, cfg) -> float:
    """Scale one attention module's W^O as the model does (for a sublayer re-drawn on its own, as the init check
    re-draws one); returns the factor."""
    f = wo_factor(m.out_proj.in_features, cfg.init_wo, cfg.init_wo_base, cfg.init_wo_gain)
    m.out_proj.weight.mul_(f)
    return f


# The parameters scaled, by their names' endings (the model's names; lr_scaling's ROLES name the same two)
WO, FF2 = "_attn.out_proj.weight", ".ff.w2.weight"


@torch.no_grad()
def scale_residual_outputs(net: nn.Module, cfg) -> dict[str, float]:
    """Scale W^O of every attention module and W_2 of every feed-forward layer in place; their biases are left
    as drawn (W^O's start at zero, W_2's as torch draws them). Returns {parameter name: factor} for those whose
    factor is not 1."""
    out = {}
    for name, p in net.named_parameters():
        if name.endswith(WO):
            f = wo_factor(p.shape[1], cfg.init_wo, cfg.init_wo_base, cfg.init_wo_gain)
        elif name.endswith(FF2):
            f = float(cfg.init_ff2_gain)
        else:
            continue
        if f != 1.0:
            p.mul_(f)
            out[name] = f
    return out
