"""Confounds at init, found before a sweep trains (issue 42): every cell's model is built on the CPU and measured
(headsweep.model.diagnostics: each attention projection's gain, the attention output against the residual), and
a cell that differs from its base by more than TOLERANCE in a quantity it does not vary on purpose gets one line
saying which cell, which quantity, both values and the likely cause. The same measurements as a markdown table
for a sweep's report (`init_check_section`), from each run's results.json (`init_check`), or for runs recorded
before it, from their config.

The base of a cell is the sweep's first cell of the same d_model (heads_by_width has one per width; a width
with no cell of its own base, as table3_c's d_model 128, is its own). Quantities a cell varies on purpose
(ON_PURPOSE) are not compared: a mirror cell's K/V gain, fixed heads' attention, learned positions.
"""

from __future__ import annotations

import functools
import json

import torch

from headsweep.model import TransformerConfig
from headsweep.model.diagnostics import differences, init_check
from headsweep.reporting.markdown import table as markdown_table
from headsweep.sizes import model_of, shares_kv

TOLERANCE = 0.10  # `make sweep`'s line; the test of the shipped sweeps holds them to 5%
VOCAB = 1024  # the vocabulary planning builds with: the gains and ratios do not depend on it (diagnostics.ID_RANGE)
# A setting a cell varies, and the quantities it changes by design (prefixes of diagnostics.quantities' names).
ON_PURPOSE = {
    "model.init_kv_gain": ("gain W^K", "gain W^V", "attn/residual"),  # the mirror cell scales K/V on purpose
    "model.fixed_heads.enc_self": ("attn/residual enc_self",),  # a fixed head attends to one token or a few
    "model.fixed_heads.dec_self": ("attn/residual dec_self",),
    "model.positions": ("attn/residual",),  # learned positions are another residual stream
    "model.norm_first": ("attn/residual",),
    "model.init": ("gain", "attn/residual"),  # (a sweep never mixes inits: planning.check_cells)
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


def varied_keys(flat: dict, base: dict) -> list[str]:
    """The model settings in which a cell differs from its base."""
    return [
        k
        for k in sorted(flat.keys() | base.keys())
        if k.startswith("model.") and repr(flat.get(k)) != repr(base.get(k))
    ]


def confounds(flat: dict, base: dict, check: dict, base_check: dict, tolerance: float = TOLERANCE):
    """(quantity, cell's value, base's value) where the cell differs from the base by more than `tolerance` in a
    quantity it does not vary on purpose, largest first."""
    skip = on_purpose(varied_keys(flat, base))
    found = [d for d in differences(check, base_check, tolerance) if not d[0].startswith(skip)]
    return sorted(found, key=lambda d: -abs(d[1] / d[2] - 1))


def likely_cause(flat: dict, base: dict, found: list[tuple[str, float, float]]) -> str:
    varied = [
        k
        for k in varied_keys(flat, base)  # kv_heads that follows h is no setting of its own
        if not (k == "model.kv_heads" and not any(shares_kv(model_of(f)) for f in (flat, base)))
    ]
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
    if results.get("init_check"):
        return results["init_check"]
    from headsweep.store import ADDED_SETTINGS  # the old runs' init

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
    header = ["cell", "init", "gain W^Q", "gain W^K", "gain W^V", "gain W^O", "attn / residual", "differs from base"]
    rows = []
    for i, b in enumerate(bases(flats)):
        gains = checks[i]["gain"]
        found = [] if i == b else confounds(flats[i], flats[b], checks[i], checks[b], tolerance)
        differs = "; ".join(grouped(found)) or ("(base)" if i == b else "")
        kv_gain = flats[i].get("model.init_kv_gain", 1.0)
        rows.append(
            [
                labels[i],
                f"{flats[i].get('model.init')}" + (f", K/V x{kv_gain:.3g}" if kv_gain != 1.0 else ""),
                *[_kinds([gains[k].get(w) for k in kinds]) for w in "qkvo"],
                _kinds([checks[i]["ratio"][k] for k in kinds]),
                differs,
            ]
        )
    return markdown_table(header, rows)


def init_check_section(cells) -> str:
    """The report's section (cells: headsweep.reports.cells.Cell, base first): each cell's check, from its
    first run (seed 1 where it has one)."""
    labels, flats, checks = [], [], []
    for c in cells:
        run = min(c.runs, key=lambda r: r.seed)
        labels.append(c.label)
        flats.append(run.flat)
        checks.append(run_check(run.results))
    note = (
        f"Each attention projection's gain (sqrt(fan_in) x weight std; 1.00 keeps a unit-variance input's "
        f"scale) and the attention output's RMS against the residual stream's (first layer, a synthetic batch, "
        f"mean of {checks[0].get('draws', '')} weight draws) at init, seed "
        f"{min(r.seed for r in cells[0].runs)} (runs recorded before issue 42: measured from their config, "
        f"model.init xavier). A cell that differs from its base by more than {TOLERANCE:.0%} in something it "
        "does not vary on purpose carries a confound of the protocol, not of the attention setting."
    )
    return "\n".join(["## At init", "", note, "", *init_check_table(labels, flats, checks), ""])
