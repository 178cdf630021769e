"""Heads that start alike (issue 53): does random initialisation break the heads' symmetry, and what keeps it?

model.init_heads=identical: after the usual init (attention.init_projection), every head of a layer gets head 0's
slices of W^Q, W^K and W^V (and their biases) and head 0's block of W^O, so every head computes the same function.
With grouped key/value heads (kv_heads < h) the kv heads are made identical too: each query head then reads the
same keys and values whatever group it is in, and every group has h / kv_heads members, so the kv heads' summed
gradients stay equal as well.

W^O is scaled by 1 / sqrt(h). Independent heads add through their own W^O blocks in quadrature: the sublayer's
output variance is the mean of the heads' (each block's fan-in share is 1 / h of W^O's). h identical heads add
coherently, h times one head through h equal blocks: sqrt(h) times the RMS. The factor brings the sublayer's
output back to the base's at init (the init check's attention / residual ratio, diagnostics.expected_ratios, whose
closed form multiplies by `coherence` for it), at the price of a W^O whose own gain is 1 / sqrt(h) on purpose.

model.init_heads_noise: a perturbation after making the heads identical, N(0, (noise x the projection's std)^2)
on every weight of W^Q, W^K, W^V and W^O (each head its own draw), to break the symmetry a little at init.

What keeps them identical while training: every head's slices see the same input and, its W^O block being the
same, the same gradient from above; Adam's update is per element, so the heads move together. What breaks it:
anything drawn per head (attention dropout's mask on each head's weights, head dropout, hard-concrete gates'
noise). Residual dropout and label smoothing act after W^O, on all heads' sum, and do not.

Plain PyTorch: the parameters are reached by their state_dict names (q_proj.weight or q_heads.<i>.weight, ...).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

INIT_HEADS = ("independent", "identical")
PROJECTIONS = ("q", "k", "v")


def check_init_heads(init_heads: str, noise: float, heads: int, fixed_heads: dict | None) -> None:
    """One line (a ValueError, its message starting with the key) for a setting that cannot work."""
    if init_heads not in INIT_HEADS:
        raise ValueError(
            f"init_heads={init_heads!r}: use one of {', '.join(INIT_HEADS)} (identical: every head of a layer "
            "starts as head 0)"
        )
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not math.isfinite(noise) or noise < 0:
        raise ValueError(f"init_heads_noise={noise!r}: use a finite number >= 0 (0.01: 1% of the init's std)")
    if init_heads == "independent":
        if noise:
            raise ValueError(
                f"init_heads_noise={noise} perturbs identical heads, but init_heads=independent: set "
                "model.init_heads=identical, or model.init_heads_noise=0.0"
            )
        return
    if heads < 2:
        raise ValueError(
            f"init_heads=identical with heads={heads}: one head per layer has nothing to be identical to; use "
            "model.heads >= 2, or model.init_heads=independent"
        )
    fixed = {k: n for k, n in (fixed_heads or {}).items() if n}
    if fixed:
        raise ValueError(
            f"init_heads=identical with fixed_heads={fixed}: a fixed head attends by a positional pattern and has no "
            "W^Q or W^K to copy, so its layer's heads cannot start alike; set model.fixed_heads=null, or "
            "model.init_heads=independent"
        )


def head_blocks(m: nn.Module, kind: str = "weight") -> dict[str, list[Tensor]]:
    """{q, k, v: one view per head of the projection's `kind` (weight (d, d_model) or bias (d,)); o: W^O's
    block per head, (d_model, d_v), weights only}, in either layout. Views of the parameters: writing into
    them (under no_grad) writes the model."""
    params = dict(m.named_parameters())
    out = {}
    for which in PROJECTIONS:
        n = m.proj_heads[which]
        if n == 0:  # every head fixed: no W^Q, W^K
            continue
        if f"{which}_proj.{kind}" in params:  # fused: the heads are consecutive blocks of rows
            out[which] = list(params[f"{which}_proj.{kind}"].unflatten(0, (n, -1)).unbind(0))
        elif f"{which}_heads.0.{kind}" in params:  # per_head
            out[which] = [params[f"{which}_heads.{i}.{kind}"] for i in range(n)]
    if kind == "weight":  # Concat(head_1, ..., head_h) W^O: head i meets W^O's columns i*d_v .. (i+1)*d_v
        out["o"] = list(params["out_proj.weight"].unflatten(1, (m.heads, -1)).unbind(1))
    return out


def whole_weights(m: nn.Module) -> list[Tensor]:
    """W^Q, W^K, W^V (each head's, in the per_head layout) and W^O, the parameters themselves."""
    return [p for name, p in m.named_parameters() if name.endswith("weight") and name.split(".")[0] != "concrete"]


@torch.no_grad()
def make_identical(m: nn.Module, noise: float = 0.0) -> None:
    """Every head of attention module m as head 0 (W^O's blocks scaled by 1 / sqrt(h)), then the perturbation."""
    for kind in ("weight", "bias"):
        for which, blocks in head_blocks(m, kind).items():
            if which == "o":
                blocks[0].mul_(m.heads**-0.5)  # coherent sum of h equal heads: the base's output RMS
            for b in blocks[1:]:
                b.copy_(blocks[0])
    if noise:
        for w in whole_weights(m):
            w.add_(torch.randn_like(w) * (noise * w.std()))


def apply_init_heads(modules: list[nn.Module], init_heads: str, noise: float) -> None:
    """model.init_heads on these attention modules (nothing to do for independent heads: the usual init)."""
    if init_heads == "identical":
        for m in modules:
            make_identical(m, noise)


def coherence(init_heads: str, heads: int) -> float:
    """How much larger the attention output's RMS is than independent heads through the same W^O gain: h
    identical heads add coherently (sqrt(h)), independent ones in quadrature (1)."""
    return math.sqrt(heads) if init_heads == "identical" else 1.0


def head_vectors(m: nn.Module) -> dict[str, Tensor | None]:
    """{qkv: (n, ...) each learned query head's W^Q slice with the W^K and W^V slices it reads, flattened and
    concatenated; o: (h, d_model * d_v) each head's W^O block}; qkv None without learned heads."""
    w = head_blocks(m)
    group = m.heads // m.kv_heads  # query head i reads key/value head i // group (fixed heads: none here)
    qkv = None
    if "q" in w and m.n_fixed == 0:
        qkv = torch.stack(
            [
                torch.cat([w["q"][i].flatten(), w["k"][i // group].flatten(), w["v"][i // group].flatten()])
                for i in range(len(w["q"]))
            ]
        )
    return {"qkv": qkv, "o": torch.stack([b.flatten() for b in w["o"]])}


def mean_pairwise_cosine(x: Tensor) -> float:
    """The mean over pairs i < j of cos(x_i, x_j), rows of x (n, d); nan for fewer than two rows."""
    n = x.size(0)
    if n < 2:
        return float("nan")
    u = nn.functional.normalize(x.detach().double(), dim=1)
    c = u @ u.T
    return ((c.sum() - c.diagonal().sum()) / (n * (n - 1))).item()
