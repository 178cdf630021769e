"""Fixed heads (model.fixed_heads; headsweep.model.patterns) in the head analysis: which heads are fixed
positional patterns, and how the record, tables, plots and summary name them.

They are analysed like every other head (importance, ablation, pruning, roles, redundancy), which is what
the analysis should do; but a fixed head's role is set by construction, not learned, and two layers' copies
of one pattern are identical by construction, so a reader must be able to tell them apart from learned
heads. A model without fixed heads gets an empty record here, and every label below is then unchanged.
"""

from __future__ import annotations

import math
import statistics

from headsweep.analysis.importance import KIND_NAMES
from headsweep.model import ATTENTION_KINDS
from headsweep.reporting.markdown import table

# The line under the tables' header saying what the label means (only written when a model has fixed heads).
LEGEND = (
    "Heads labelled `(pattern, fixed)` attend by that fixed positional pattern (`model.fixed_heads`, "
    "headsweep.model.patterns), not by learned queries and keys; they are measured like every other head, "
    "so their role is theirs by construction. The heat maps hatch them, the importance-vs-confidence plot "
    "rings them."
)


def fixed_heads(net) -> dict[str, dict[str, str]]:
    """{kind: {head index: pattern}} for the attention kinds with fixed heads, e.g. {"enc_self": {"0": "cur",
    "1": "prev"}}; the same heads in every layer of a kind (TransformerConfig.fixed), so no layer index. The
    index is a string because analysis.json's keys are. Empty for a model without fixed heads."""
    return {
        kind: {str(h): p for h, p in enumerate(net.cfg.fixed(kind))} for kind in ATTENTION_KINDS if net.cfg.fixed(kind)
    }


def pattern_of(fixed: dict | None, kind: str, head: int) -> str | None:
    """The pattern of a fixed head, None for a learned one."""
    return (fixed or {}).get(kind, {}).get(str(head))


def head_label(fixed: dict | None, kind: str, head: int, prefix: str = "") -> str:
    """A head as the tables name it: "3", or "0 (prev, fixed)" for a fixed head (`prefix`: "h" gives "h3")."""
    pattern = pattern_of(fixed, kind, head)
    return f"{prefix}{head}" + (f" ({pattern}, fixed)" if pattern else "")


def name_label(fixed: dict | None, kind: str, name: str, short: bool = False) -> str:
    """A head named "L<layer>H<head>" (headsweep.analysis.redundancy.head_names), its pattern added when fixed:
    near-duplicate groups of fixed heads are duplicates by construction. `short`: "L0H1 (prev)", for a plot's
    tick labels, which have no room for more."""
    pattern = pattern_of(fixed, kind, int(name.rsplit("H", 1)[1]))
    return name if not pattern else f"{name} ({pattern})" if short else f"{name} ({pattern}, fixed)"


def fixed_words(fixed: dict | None, n_heads: int) -> list[str]:
    """One sentence per kind with fixed heads: "enc_self heads 0-3 of every layer are fixed patterns (cur,
    prev, next, left3); the learned heads are 4-7". The fixed heads are the first n (MultiHeadAttention)."""
    span = lambda a, b: str(a) if a == b else f"{a}-{b}"  # noqa: E731
    words = []
    for kind, heads in (fixed or {}).items():
        n = len(heads)
        patterns = ", ".join(heads[str(h)] for h in range(n))
        which = (
            f"heads {span(0, n - 1)} of every layer are fixed patterns"
            if n > 1
            else "head 0 of every layer is a fixed pattern"
        )
        learned = (
            "no head is learned"
            if n >= n_heads
            else f"the learned head is {n}"
            if n == n_heads - 1
            else f"the learned heads are {span(n, n_heads - 1)}"
        )
        words.append(f"{kind} {which} ({patterns}); {learned}")
    return words


# ----------------------------------------------------------------------------- fixed against learned heads, per cell

# (key, column, format): what `fixed_vs_learned` measures on each side
SIDE_MEASURES = (
    ("importance_share", "share of importance", "{:.0%}"),
    ("distance", "mean distance (tokens)", "{:.2f}"),
    ("entropy", "entropy (nats)", "{:.2f}"),
    ("confidence", "confidence", "{:.2f}"),
    ("with_role", "with a role", "{:.0%}"),
)


def fixed_vs_learned(a: dict, kind: str) -> dict[str, dict[str, float] | None]:
    """One analysed run's heads of one attention kind split into its fixed and its learned ones:
    {"fixed": {measure: value}, "learned": {...}}, None for a side without a head (no fixed heads: all learned).

    importance_share: per layer, the side's importance over the layer's total, averaged over the layers, so
    each layer counts alike whatever its gradient scale. From importance_raw: `importance` is raw / the
    layer's l2 norm (its squares sum to 1, not the values), which gives the same per-layer shares.
    distance, entropy (nats), confidence: the mean over the side's heads of every layer (roles.py; nan where
    undefined, e.g. distance in cross-attention). with_role: the share of the side's heads with a role
    (role != "-": positional or rare), which a fixed positional head has by construction.
    """
    fixed = {int(h) for h in (a.get("fixed_heads") or {}).get(kind, {})}
    heads = [h for h in a["roles"]["heads"] if h["kind"] == kind]
    totals: dict[int, float] = {}
    for h in heads:
        totals[h["layer"]] = totals.get(h["layer"], 0.0) + h["importance_raw"]
    out: dict[str, dict[str, float] | None] = {}
    for side, mine in (
        ("fixed", [h for h in heads if h["head"] in fixed]),
        ("learned", [h for h in heads if h["head"] not in fixed]),
    ):
        if not mine:
            out[side] = None
            continue
        shares = [
            sum(h["importance_raw"] for h in mine if h["layer"] == layer) / total if total > 0 else math.nan
            for layer, total in totals.items()
        ]
        out[side] = {
            "importance_share": statistics.fmean(shares),
            **{m: _mean([h[m] for h in mine]) for m in ("distance", "entropy", "confidence")},
            "with_role": statistics.fmean(h["role"] != "-" for h in mine),
        }
    return out


def _mean(values: list) -> float:
    known = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.fmean(known) if known else math.nan


def _over_seeds(runs: list[dict], kind: str) -> dict[str, dict[str, list[float]] | None]:
    """{side: {measure: the runs' values, nan left out}}, None for a side no run has."""
    per_run = [fixed_vs_learned(a, kind) for a in runs]
    return {
        side: None
        if any(r[side] is None for r in per_run)
        else {key: [v for v in (r[side][key] for r in per_run) if not math.isnan(v)] for key, *_ in SIDE_MEASURES}
        for side in ("fixed", "learned")
    }


def _text(values: list[float], fmt: str, sd: bool = True) -> str:
    """mean ± sd over seeds (sd from two seeds on), "–" for nothing measured; `sd` False: the mean alone."""
    if not values:
        return "–"
    spread = f" ± {fmt.format(statistics.stdev(values))}" if sd and len(values) > 1 else ""
    return fmt.format(statistics.fmean(values)) + spread


def fixed_vs_learned_lines(groups: dict[str, list[dict]], base_name: str | None) -> list[str]:
    """The report's table of fixed against learned heads, per cell and attention kind that any run has fixed
    heads in, mean ± sd over the cell's seeds, and one sentence per cell and kind; [] when no run has fixed
    heads. groups: {cell name: its analyses}; a cell without fixed heads of a kind (the base) shows all its
    heads of that kind as learned. base_name: the group whose learned heads the sentences set beside every
    other cell's (None: no yardstick)."""
    kinds = [k for k in ATTENTION_KINDS if any(k in (a.get("fixed_heads") or {}) for rs in groups.values() for a in rs)]
    if not kinds:
        return []
    rows, words = [], []
    for kind in kinds:
        base = _over_seeds(groups[base_name], kind)["learned"] if base_name in groups else None
        for name, runs in groups.items():
            sides, n_heads = _over_seeds(runs, kind), runs[0]["model"]["heads"]
            n_fixed = len((runs[0].get("fixed_heads") or {}).get(kind, {}))
            for side, n in (("fixed", n_fixed), ("learned", n_heads - n_fixed)):
                if sides[side] is not None:
                    rows.append(
                        [
                            name,
                            KIND_NAMES[kind],
                            side,
                            f"{n} of {n_heads}",
                            len(runs),
                            *[_text(sides[side][key], fmt) for key, _, fmt in SIDE_MEASURES],
                        ]
                    )
            words.append(
                _side_words(
                    KIND_NAMES[kind],
                    name,
                    len(runs),
                    n_fixed,
                    n_heads,
                    sides,
                    None if name == base_name or base is None else (base_name, base),
                )
            )
    header = ["cell", "attention", "heads", "per layer", "runs", *[col for _, col, _ in SIDE_MEASURES]]
    return [
        "**Fixed and learned heads.** Per cell and attention kind with fixed heads, the fixed and the learned "
        "heads apart: their share of the importance (per layer, the heads' summed importance over the "
        "layer's, averaged over layers), the mean attention distance, entropy and confidence over their heads "
        "of every layer, and the share of them with a role (positional or rare; a fixed positional head has "
        "one by construction). Mean ± sd over seeds; a cell without fixed heads shows all its heads as "
        "learned.",
        "",
        *table(header, rows),
        "",
        *[f"- {w}" for w in words],
        "",
    ]


def _side_words(
    kind: str, name: str, n_runs: int, n_fixed: int, n_heads: int, sides: dict, base: tuple[str, dict] | None
) -> str:
    """One sentence: what the fixed heads carry, what the learned ones do, and the base's heads beside them."""

    def what(side: dict) -> str:
        mean = {key: _text(side[key], fmt, sd=False) for key, _, fmt in SIDE_MEASURES}
        return (
            f"mean distance {mean['distance']} tokens, entropy {mean['entropy']} nats, confidence "
            f"{mean['confidence']}, {mean['with_role']} with a role"
        )

    head = f"{kind}, {n_fixed} fixed of {n_heads} ({name}, n = {n_runs})"
    if sides["fixed"] is None:
        return f"{head}: its heads attend at {what(sides['learned'])}."
    said = (
        f"{head}: the fixed heads carry {_text(sides['fixed']['importance_share'], '{:.0%}', False)} of the "
        f"importance ({n_fixed / n_heads:.0%} of the heads)"
    )
    if sides["learned"] is None:
        return said + "; no head is learned."
    said += f"; the learned heads attend at {what(sides['learned'])}"
    if base is not None:
        said += f", the learned heads of {base[0]} at {what(base[1])}"
    return said + "."
