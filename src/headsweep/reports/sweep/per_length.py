"""A sweep over lengths (data.join, sweeps/long_sequences.yaml) read one length at a time: BLEU over joined pairs
is another test set at each length, so the best h, and the order of the cells over training, are each length's
own. A sweep that joins nothing has one length, and these words say nothing."""

from __future__ import annotations

import math
import statistics

from headsweep.reporting.markdown import p_words
from headsweep.reporting.stats import contrast, holm
from headsweep.reports.pages.verdicts import ALPHA, class_of

LENGTH = "data.join"  # sentence pairs per example; runs from before the setting joined nothing (1)


def length_of(cell) -> int:
    """Sentence pairs per example. Only 1 is the paper's data: a cell at another length, a sweep's base too,
    has no Table 3 row."""
    return cell.runs[0].flat.get(LENGTH, 1)


def same_length(cells: list, base) -> list:
    """The cells at the base's length (all of them where there is no base or one length)."""
    return [c for c in cells if base is None or length_of(c) == length_of(base)]


def best_per_length(cells: list) -> list[str]:
    """At each length whose cells vary h, the h with the highest mean test BLEU, with its verdict against its
    length's base where it is not the base: the page's answer to "which h is best?", per length."""
    if len({length_of(c) for c in cells}) < 2:
        return []
    lines = []
    for k in sorted({length_of(c) for c in cells}):
        at = [c for c in cells if length_of(c) == k and c.row.get("test_bleu") is not None]
        if len({c.runs[0].flat.get("model.heads") for c in at}) < 2:
            continue
        best = max(at, key=lambda c: c.row["test_bleu"])
        r, h = best.row, best.runs[0].flat.get("model.heads")
        seeds = f"{len(best.runs)} seed{'s' if len(best.runs) != 1 else ''}"
        if r.get("delta") is None:
            how = "the base at this length: no cell's mean is above it"
        else:
            how = f"{r['delta']:+.2f} against the base at this length, {r.get('verdict') or 'not compared'}"
        lines.append(
            f"Best h at join {k} by mean test BLEU: h {h} ({r['test_bleu']:.2f}, {seeds}; {how}); "
            f"{len(at)} cells of h at this length."
        )
    return lines


def _model(cell) -> dict:
    return {k: v for k, v in cell.runs[0].flat.items() if k.startswith("model.")}


def length_interactions(cells: list, base) -> list[str]:
    """Does a cell's gap to the base change with length? For each cell of h at a longer length whose h also ran
    at the base's length: (its mean - its length's base) - (the same h at the base's length - the base), test
    BLEU over seeds, with a 95% Welch-Satterthwaite interval (reporting.stats.contrast) and Holm's p across these
    lines; a direction only where Holm p < ALPHA. One machine class, as every verdict."""
    if base is None or len({length_of(c) for c in cells}) < 2:
        return []
    k0 = length_of(base)

    def at(like, k):  # the cell of like's model at length k
        return next((c for c in cells if length_of(c) == k and _model(c) == _model(like)), None)

    found = []
    for c in cells:
        k = length_of(c)
        if k == k0 or _model(c) == _model(base) or (b_k := at(base, k)) is None or (c0 := at(c, k0)) is None:
            continue
        four = [c, b_k, c0, base]
        classes = {class_of(r) for x in four for r in x.runs}
        stat = (
            contrast(list(zip((1, -1, -1, 1), (_metric(x, "test/bleu") for x in four)))) if len(classes) == 1 else None
        )
        found.append((c, k, four, stat, classes))
    adjusted = holm([s["p"] if s else None for *_, s, _ in found])
    lines = []
    for (c, k, four, stat, classes), p_holm in zip(found, adjusted):
        head = f"h {c.runs[0].flat.get('model.heads')}: its Δ at join {k} minus its Δ at join {k0}"
        if stat is None:
            lines.append(f"{head}: not computed, its four cells span machine classes ({', '.join(sorted(classes))}).")
            continue
        seeds = ", ".join(str(len(x.runs)) for x in four)
        if stat["lo"] is None:
            lines.append(f"{head}: {stat['estimate']:+.2f} BLEU; no interval ({seeds} seeds: 2 needed in each cell).")
            continue
        word = ("lower" if stat["estimate"] < 0 else "higher") if p_holm < ALPHA else None
        said = f"its Δ is {word} at join {k}" if word else f"no change with length shown (Holm p >= {ALPHA:g})"
        lines.append(
            f"{head}: {stat['estimate']:+.2f} BLEU (95% CI [{stat['lo']:+.2f}, {stat['hi']:+.2f}], Welch-Satterthwaite "
            f"over seeds, {p_words(stat['p'])}, Holm {p_words(p_holm)}; seeds {seeds}): {said}."
        )
    return lines


# what follows h in row A (d_k = d_v = d_model / h): a slope over h compares cells that differ in nothing else
_FOLLOW_H = ("model.heads", "model.d_k", "model.d_v")
SLOPE_METRICS = (("test/bleu", "Test BLEU", "BLEU", 2), ("val/loss", "Final val loss", "nats", 3))


def length_slopes(cells: list, base) -> list[str]:
    """One test over every h, where the per-h lines (length_interactions) each pay Holm for the others: the
    least-squares slope of a metric's cell means on log2 h (per doubling of h) at each length, and at the
    longer length minus at the base's, over the h run at both lengths with 2 seeds or more, as one contrast of
    the cells' seeds (weights (log2 h - its mean) / its sum of squares; reporting.stats.contrast,
    Welch-Satterthwaite). The base takes part as h 8; its subtraction cancels (the weights sum to 0).
    Bhojanapalli et al. 2020 predict a steeper fall with h at the longer length (d_k = d_model / h below n).
    Test BLEU and final val loss (the validation split joined as the test split is)."""
    if base is None or len({length_of(c) for c in cells}) < 2:
        return []
    k0 = length_of(base)
    like = [c for c in cells if _rest(c) == _rest(base)]  # row A's cells: only h (and what follows it) varies
    lines = []
    for k in sorted({length_of(c) for c in like} - {k0}):
        by_h = {j: {c.runs[0].flat["model.heads"]: c for c in like if length_of(c) == j} for j in (k0, k)}
        both = sorted(set(by_h[k0]) & set(by_h[k]))
        # an interval needs 2 seeds in every cell: an h with fewer at either length waits, named
        hs = [h for h in both if min(len(by_h[j][h].runs) for j in (k0, k)) >= 2]
        waiting = [h for h in both if h not in hs]
        if len(hs) < 3:
            continue
        classes = {class_of(r) for h in hs for j in (k0, k) for r in by_h[j][h].runs}
        if len(classes) != 1:
            lines.append(
                f"Slope on log2 h at join {k} against join {k0}: not computed, its cells span machine classes "
                f"({', '.join(sorted(classes))})."
            )
            continue
        x = [math.log2(h) for h in hs]
        w = [v - statistics.fmean(x) for v in x]
        w = [v / sum(u * u for u in w) for v in w]
        for metric, name, unit, digits in SLOPE_METRICS:
            values = {(j, h): _metric(by_h[j][h], metric) for j in (k0, k) for h in hs}
            if not all(values.values()):
                continue
            at = {j: contrast([(a, values[(j, h)]) for a, h in zip(w, hs)]) for j in (k0, k)}
            diff = contrast([(s * a, values[(j, h)]) for s, j in ((1, k), (-1, k0)) for a, h in zip(w, hs)])
            if diff["p"] is not None and diff["p"] < ALPHA:  # BLEU falling faster, or loss rising faster: steeper
                said = f"{'steeper' if (diff['estimate'] < 0) == (metric == 'test/bleu') else 'flatter'} at join {k}"
            elif diff["p"] is not None:
                said = f"no change with length shown (p >= {ALPHA:g})"
            else:
                said = "no interval"
            over = ", ".join(map(str, hs))
            left = f"; h {', '.join(map(str, waiting))} left out, under 2 seeds at a length" if waiting else ""
            lines.append(
                f"{name} per doubling of h (least-squares slope over h {over}{left}; {unit}; 95% CI, "
                f"Welch-Satterthwaite over seeds): at join {k0} {_slope(at[k0], digits)}; at join {k} "
                f"{_slope(at[k], digits)}; join {k} minus join {k0} {_slope(diff, digits)}: {said} (one test "
                "over every h for this metric, no Holm)."
            )
    return lines


def _rest(cell) -> dict:
    """The model settings but h and what follows it (kv_heads too where it equals h: plain multi-head)."""
    m = _model(cell)
    follow = _FOLLOW_H + ("model.kv_heads",) * (m.get("model.kv_heads") == m.get("model.heads"))
    return {k: v for k, v in m.items() if k not in follow}


def _metric(cell, metric: str) -> list[float]:
    return [r.results["metrics"][metric] for r in cell.runs if metric in r.results["metrics"]]


def _slope(s: dict, digits: int) -> str:
    v = f"{s['estimate']:+.{digits}f}"
    if s["lo"] is None:
        return f"{v} (no interval: the seeds do not vary)"
    return f"{v} [{s['lo']:+.{digits}f}, {s['hi']:+.{digits}f}], {p_words(s['p'])}"
