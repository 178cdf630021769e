"""Confounds at init, found before a sweep trains (issue 42): every cell's model is built on the CPU and measured
(headsweep.model.diagnostics: each attention projection's gain, the attention output against the residual), and
a cell that differs from its base by more than TOLERANCE in a quantity it does not vary on purpose gets one line
saying which cell, which quantity, both values and the likely cause. The same measurements as a markdown table
for a sweep's report (reports.sweep.checks), from each run's results.json (`init_check`), or for runs recorded
before it, from their config.

The base of a cell is the sweep's first cell of the same d_model (heads_by_width has one per width; a width
with no cell of its own base, as table3_c's d_model 128, is its own). Quantities a cell varies on purpose
(ON_PURPOSE) are not compared: a mirror cell's K/V gain, fixed heads' attention, learned positions.

The update check (issue 54), beside it: each cell's attention output change in its first Adam steps at its rate
(headsweep.training.update_check), against its base's; a cell outside [1/(1+m), 1+m] of the base's in a kind it
does not vary on purpose (UPDATE_ON_PURPOSE) gets one line (`update_lines`; `make sweep UPDATE_MARGIN=m`, 0.5
unless given), each run records its own (results.json `update_check`), and the report shows the table
(reports.sweep.checks). At one rate W^O's fan-in h * d_v sets how far the attention moves: h 32 at d_k 32
moves 2.0-2.3x the base's; per-matrix rates (module.lr_scaling mup) bring it to 1.02-1.24x.
"""

from __future__ import annotations

import functools
import json
import math

import torch

from headsweep.identity import follows_heads, varied_model_keys
from headsweep.model import TransformerConfig
from headsweep.model.config import resolve_heads
from headsweep.model.diagnostics import differences, init_check
from headsweep.reporting.markdown import table as markdown_table
from headsweep.training.update_check import VOCAB, measure_update  # noqa: F401  (planning and tests import them here)

TOLERANCE = 0.10  # `make sweep`'s line; the test of the shipped sweeps holds them to 5%
# A setting a cell varies, and the quantities it changes by design (prefixes of diagnostics.quantities' names).
ON_PURPOSE = {
    "model.init_kv_gain": ("gain W^K", "gain W^V", "attn/residual"),  # the mirror cell scales K/V on purpose
    "model.fixed_heads.enc_self": ("attn/residual enc_self",),  # a fixed head attends to one token or a few
    "model.fixed_heads.dec_self": ("attn/residual dec_self",),
    "model.positions": ("attn/residual",),  # learned positions are another residual stream
    "model.norm_first": ("attn/residual",),
    "model.init": ("gain", "attn/residual"),  # (a sweep never mixes inits: planning.check_cells)
    "model.init_heads": ("gain W^O",),  # identical heads: W^O / sqrt(h), so that the attention output is the base's
    # the residual outputs' starting scale (model.residual_init): W^O's gain, and with it the attention's output
    "model.init_wo": ("gain W^O", "attn/residual"),
    "model.init_wo_gain": ("gain W^O", "attn/residual"),
    "model.init_ff2_gain": ("gain W_2",),
}
SIZE_NAMES = {"model.heads": "h", "model.d_k": "d_k", "model.d_v": "d_v", "model.kv_heads": "kv_heads"}


@functools.lru_cache(maxsize=512)
def _measured(model_json: str, seed: int) -> str:
    """init_check of one model config (JSON), cached: tests and `make sweep --dry` plan the same cells often."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensors: threads only add overhead (and contention on a shared machine)
    try:
        cfg = TransformerConfig(**{**json.loads(model_json), "vocab_size": VOCAB})
        return json.dumps(init_check(cfg, seed))
    finally:
        torch.set_num_threads(threads)


def measure(model: dict, seed: int = 1, first_layer: bool = False) -> dict:
    """init_check of a model config (conf/model keys, plain values) built with `seed`. `first_layer`: of its
    first layer alone (n_layers 1), which is all that the comparison reads (the gains' distribution is every
    layer's, the ratio is the first layer's) at a fraction of the cost (table3_*_paper have N = 6)."""
    model = {**model, "n_layers": 1} if first_layer else model
    return json.loads(_measured(json.dumps(model, sort_keys=True), seed))


def bases(flats: list[dict]) -> list[int]:
    """The index of each cell's base: the first cell of its d_model."""
    first: dict = {}
    return [first.setdefault(f["model.d_model"], i) for i, f in enumerate(flats)]


def on_purpose(varied: list[str]) -> tuple[str, ...]:
    return tuple(q for key in varied for q in ON_PURPOSE.get(key, ()))


def confounds(flat: dict, base: dict, check: dict, base_check: dict, tolerance: float = TOLERANCE):
    """(quantity, cell's value, base's value) where the cell differs from the base by more than `tolerance` in a
    quantity it does not vary on purpose, largest first."""
    skip = on_purpose(varied_model_keys(flat, base))
    if flat.get("model.init_wo") == "mup":  # muP's W^O init moves W^O's scale with its fan-in h * d_v on purpose
        skip += ON_PURPOSE["model.init_wo"]
    found = [d for d in differences(check, base_check, tolerance) if not d[0].startswith(skip)]
    return sorted(found, key=lambda d: -abs(d[1] / d[2] - 1))


def likely_cause(flat: dict, base: dict, found: list[tuple[str, float, float]]) -> str:
    # kv_heads that follows h is no setting of its own
    varied = [k for k in varied_model_keys(flat, base) if not follows_heads(k, [flat, base])]
    sizes = [SIZE_NAMES[k] for k in varied if k in SIZE_NAMES]
    moved = ", ".join(sizes or [k.removeprefix("model.") for k in varied]) or "nothing in the model config"
    what = "init scale" if any(q.startswith("gain") for q, _, _ in found) else "the attention at init"
    return f"{what} moves with {moved} (model.init={flat.get('model.init')})"


def _span(values: list[float]) -> str:
    low, high = f"{min(values):.2f}", f"{max(values):.2f}"
    return low if low == high else f"{low}-{high}"


def grouped(found: list[tuple[str, float, float]]) -> list[str]:
    """'gain W^O 0.47 (base 1.00) in every kind': a quantity once over the attention kinds where it differs; gains
    first (where they differ they are the cause), then by the largest difference."""
    groups: dict[str, list[tuple[str, float, float]]] = {}
    for q, v, w in sorted(found, key=lambda d: (not d[0].startswith("gain"), -abs(d[1] / d[2] - 1))):
        name, kind = q.rsplit(" ", 1)
        groups.setdefault(name, []).append((kind, v, w))
    return [
        f"{name} {_span([v for _, v, _ in g])} (base {_span([w for _, _, w in g])}) in "
        + ("every kind" if len(g) == 3 else ", ".join(k for k, _, _ in g))
        for name, g in groups.items()
    ]


def confound_lines(
    sweep: str, labels: list[str], flats: list[dict], checks: list[dict], tolerance: float = TOLERANCE
) -> list[str]:
    """One line per cell that differs from its base at init in what it does not vary on purpose."""
    lines = []
    for i, b in enumerate(bases(flats)):
        if i == b:
            continue
        found = confounds(flats[i], flats[b], checks[i], checks[b], tolerance)
        if found:
            parts = grouped(found)
            more = f"; and {len(parts) - 3} more" if len(parts) > 3 else ""
            lines.append(
                f"init check: {sweep} cell {labels[i]} differs from {labels[b]} by more than {tolerance:.0%}: "
                f"{'; '.join(parts[:3])}{more}; likely cause: {likely_cause(flats[i], flats[b], found)}"
            )
    return lines


def run_check(results: dict) -> dict:
    """A finished run's init check: its results.json's `init_check`, or for a run recorded before there was one,
    measured from its config (settings added since at their old values: model.init xavier) and seed."""
    from headsweep.store import ADDED_SETTINGS  # the old runs' init

    recorded = results.get("init_check")
    model = results["config"]["model"]
    # a check recorded before the residual outputs' gains were measured drew W^O unscaled in its ratio: measured
    # again from the config where those settings move anything (the gain sweep's first runs)
    moved = (
        model.get("init_wo", "fan_in") != "fan_in"
        or model.get("init_wo_gain", 1.0) != 1.0
        or model.get("init_ff2_gain", 1.0) != 1.0
    )
    if recorded and ("gain_ff2" in recorded or not moved):
        return recorded

    model = dict(results["config"]["model"])
    for key, value in ADDED_SETTINGS.items():
        if key.startswith("model.") and key.count(".") == 1:
            model.setdefault(key.split(".", 1)[1], value)
    return measure(model, results["config"].get("seed", 1))


def _kinds(values: list[float | None]) -> str:
    """enc_self / dec_self / cross values: one number where they agree within sampling noise (0.02)."""
    known = [v for v in values if v is not None]
    if len(known) == len(values) and max(known) - min(known) <= 0.02:
        return f"{sum(known) / len(known):.2f}"
    return " / ".join("-" if v is None else f"{v:.2f}" for v in values)


def init_check_table(
    labels: list[str], flats: list[dict], checks: list[dict], tolerance: float = TOLERANCE
) -> list[str]:
    """Markdown table lines: per cell its init, each projection's gain and the attention/residual ratio (encoder
    self / decoder self / cross where they differ; "-": no such projection, every head fixed), and what differs
    from its base beyond `tolerance` in what the cell does not vary on purpose."""
    kinds = ("enc_self", "dec_self", "cross")
    header = [
        "cell",
        "init",
        "gain W^Q",
        "gain W^K",
        "gain W^V",
        "gain W^O",
        "gain W_2",
        "attn / residual",
        "differs from base",
    ]
    rows = []
    for i, b in enumerate(bases(flats)):
        gains = checks[i]["gain"]
        found = [] if i == b else confounds(flats[i], flats[b], checks[i], checks[b], tolerance)
        differs = "; ".join(grouped(found)) or ("(base)" if i == b else "")
        rows.append(
            [
                labels[i],
                _init_text(flats[i]),
                *[_kinds([gains[k].get(w) for k in kinds]) for w in "qkvo"],
                _ff2_text(checks[i].get("gain_ff2")),
                _kinds([checks[i]["ratio"][k] for k in kinds]),
                differs,
            ]
        )
    return markdown_table(header, rows)


def _ff2_text(gains: dict | None) -> str:
    """W_2's gain, encoder / decoder where they differ; "-" for a run recorded before it was measured."""
    if not gains:
        return "-"
    enc, dec = gains["enc"], gains["dec"]
    return f"{enc:.2f}" if abs(enc - dec) <= 0.02 else f"{enc:.2f} / {dec:.2f}"


def _init_text(flat: dict) -> str:
    """The init column: model.init, then what else sets a scale at init."""
    kv_gain = flat.get("model.init_kv_gain", 1.0)
    parts = [str(flat.get("model.init"))]
    parts += [f"K/V x{kv_gain:.3g}"] if kv_gain != 1.0 else []
    parts += ["identical heads"] if flat.get("model.init_heads") == "identical" else []
    parts += ["W^O muP"] if flat.get("model.init_wo", "fan_in") == "mup" else []
    for key, name in (("model.init_wo_gain", "W^O"), ("model.init_ff2_gain", "W_2")):
        g = flat.get(key, 1.0)
        parts += [f"{name} x{g:.3g}"] if g != 1.0 else []
    return ", ".join(parts)


# -- the update check (issue 54) ---------------------------------------------------------------------------
# Beside the init check: from its init each cell takes training.update_check.STEPS Adam steps at its rate on
# the same synthetic batches, and each attention kind's output change (RMS of the change over RMS at init, on
# a fixed batch) is compared with its base's. A cell is flagged when the ratio is outside [1/(1+m), 1+m] in a
# kind it does not vary on purpose (a fixed head's kind, or settings that change the whole attention).

UPDATE_MARGIN = 0.5  # m: `make sweep UPDATE_MARGIN=`; h 32 at d_k 32 moves 2.0-2.3x the base's at one rate
MARGIN_RANGE = (0.0, 10.0)  # open
KINDS = ("enc_self", "dec_self", "cross")
UPDATE_ON_PURPOSE = {
    "model.fixed_heads.enc_self": ("enc_self",),
    "model.fixed_heads.dec_self": ("dec_self",),
    "model.init_kv_gain": KINDS,
    "model.positions": KINDS,
    "model.norm_first": KINDS,
    "model.init": KINDS,
    # The change is pooled over a kind's N layers, and the layers nearest the loss move most (the base's cross-
    # attention 2.2 / 2.5 / 3.9 from the bottom up at 2e-3): N 1 is its top layer alone, 1.96x the pooled base.
    "model.n_layers": KINDS,
    # relative to a smaller starting output, the same step is a larger change (none at all from zero)
    "model.init_wo": KINDS,
    "model.init_wo_gain": KINDS,
}


def check_margin(margin) -> float:
    """The update check's margin: a number in (0, 10), else one line saying what to give."""
    lo, hi = MARGIN_RANGE
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not lo < margin < hi:  # NaN fails too
        raise ValueError(
            f"update check margin {margin!r}: give a number between {lo:g} and {hi:g} (exclusive), the relative "
            f"difference from the base's attention update above which a cell is flagged, e.g. {UPDATE_MARGIN}"
        )
    return float(margin)


def update_settings(flat: dict) -> dict:
    """What the update check of a cell needs from its flattened settings: its rate, Adam's betas and eps, and
    its per-matrix rates."""
    scaling = flat.get("module.lr_scaling") or "none"
    base = {k: flat.get(f"module.lr_base.{k}") for k in ("w_o", "ff_w2")}
    return {
        "lr": float(flat["module.peak_lr"]),
        "betas": [float(b) for b in flat.get("module.betas", (0.9, 0.98))],
        "eps": float(flat.get("module.eps", 1e-9)),
        "lr_scaling": scaling,
        "lr_base": base if None not in base.values() else None,
    }


def update_differences(flat: dict, base: dict, check: dict, base_check: dict, margin: float):
    """(kind, the cell's change, the base's) where the ratio is outside [1/(1+margin), 1+margin], in the kinds
    the cell does not vary on purpose, largest first."""
    skip = {k for key in varied_model_keys(flat, base) for k in UPDATE_ON_PURPOSE.get(key, ())}
    found = []
    for kind in KINDS:
        v, w = check["change"].get(kind), base_check["change"].get(kind)
        if kind in skip or v is None or not w:
            continue
        if not 1 / (1 + margin) <= v / w <= 1 + margin:
            found.append((kind, v, w))
    return sorted(found, key=lambda d: -abs(math.log(d[1] / d[2])))


def _rate(flat: dict, check: dict) -> str:
    f = check.get("factors") or {}
    scaled = ", ".join(f"{k} x{v:.3g}" for k, v in f.items() if v != 1.0)
    return f"lr {check['lr']:g}" + (f" ({scaled})" if scaled else "") + f", lr_scaling {check.get('lr_scaling')}"


def fan_in_cause(flat: dict, base: dict, check: dict) -> str:
    """Which fan-in moves against the base, and whether per-matrix rates already scale it."""
    fans = {
        "W^O's fan-in h * d_v": lambda f: f["model.heads"] * f["model.d_v"],
        "W_2's fan-in d_ff": lambda f: f["model.d_ff"],
    }
    moved = [f"{name} {fan(flat)} (base {fan(base)})" for name, fan in fans.items() if fan(flat) != fan(base)]
    if not moved and flat.get("model.init_heads") == "identical" != base.get("model.init_heads"):
        return (
            f"no fan-in moves; the {flat['model.heads']} heads start identical and get the same gradient, so their "
            f"W^O blocks (each 1/sqrt(h) of the base's scale) take the same Adam step together: one head whose W^O "
            f"moves sqrt(h) times as far relative to its size"
        )
    if not moved:
        kv, base_kv = (
            resolve_heads(None, f["model.heads"], kv_heads=f.get("model.kv_heads")).kv_heads for f in (flat, base)
        )
        if kv != base_kv:  # no fan-in moves, but one K/V head's step reaches every query head that shares it
            return (
                f"no fan-in moves; W^K and W^V are shared by {flat['model.heads'] // kv} query heads (base "
                f"{base['model.heads'] // base_kv}), so one step of theirs moves that many heads' logits and values "
                "alike: the heads' changes add up rather than averaging out"
            )
        return "no fan-in moves (h, d_v and d_ff give the base's): the attention itself takes other steps"
    if check.get("lr_scaling") == "mup":
        return f"{', '.join(moved)}, already scaled by module.lr_scaling=mup: something else moves"
    return f"{', '.join(moved)}; module.lr_scaling=mup scales those rates by base fan-in / fan-in"


def update_lines(
    sweep: str, labels: list[str], flats: list[dict], checks: list[dict], margin: float = UPDATE_MARGIN
) -> list[str]:
    """One line per cell whose attention moves in its first steps more than `margin` off its base's."""
    lines = []
    for i, b in enumerate(bases(flats)):
        if i == b:
            continue
        found = update_differences(flats[i], flats[b], checks[i], checks[b], margin)
        if found:
            parts = "; ".join(f"{k} {v / w:.2f}x ({v:.3f} vs {w:.3f})" for k, v, w in found)
            lines.append(
                f"update check: {sweep} cell {labels[i]} moves its attention in {checks[i]['steps']} steps "
                f"outside [{1 / (1 + margin):.2f}x, {1 + margin:.2f}x] of {labels[b]}'s: {parts}; at "
                f"{_rate(flats[i], checks[i])}; likely cause: {fan_in_cause(flats[i], flats[b], checks[i])}"
            )
    return lines


def update_check_table(
    labels: list[str], flats: list[dict], checks: list[dict | None], margin: float = UPDATE_MARGIN
) -> list[str]:
    """Markdown lines: per cell its rate, each kind's change and its ratio to the base's, and what is flagged."""
    header = ["cell", "rate", "change enc_self", "change dec_self", "change cross", "x base", "flagged"]
    rows = []
    for i, b in enumerate(bases(flats)):
        c, bc = checks[i], checks[b]
        if c is None:
            rows.append([labels[i], "", "-", "-", "-", "-", "not measured (run recorded before the update check)"])
            continue
        ratios = (
            "" if bc is None or i == b else _kinds([_ratio(c["change"].get(k), bc["change"].get(k)) for k in KINDS])
        )
        found = [] if bc is None or i == b else update_differences(flats[i], flats[b], c, bc, margin)
        rows.append(
            [
                labels[i],
                _rate(flats[i], c),
                *[_change_text(c, k) for k in KINDS],
                ratios or ("(base)" if i == b else "-"),
                ", ".join(f"{k} {v / w:.2f}x" for k, v, w in found),
            ]
        )
    return markdown_table(header, rows)


def _ratio(v, w):
    return None if v is None or not w else v / w


def _change_text(check: dict, kind: str) -> str:
    """The relative change, or where the branch started at zero (W^O at gain 0) its absolute size."""
    v = check["change"].get(kind)
    if v is not None:
        return f"{v:.3f}"
    a = (check.get("change_abs") or {}).get(kind)
    return "from 0" if a is None else f"{a:.3f} (abs, from 0)"
