"""The explain page's fit and what it reads from it: test BLEU on log2 h, d_k and d_model over every run (OLS),
the fit again without each cell (which cell moves the answer), the best h at each width with its test against the
others, and the figures."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from headsweep.reporting.markdown import fmt_p
from headsweep.reporting.plots import pyplot, save_figure
from headsweep.reporting.stats import mean_sd, ols, seed_test
from headsweep.reports.pages.explain_data import Point
from headsweep.reports.sweep.cells import ReportError


def fit(points: list[Point]) -> dict:
    """Ordinary least squares on every run; coefficients with 95% CIs (t with n - p degrees of freedom).
    A size that does not vary among the runs is left out of the model."""
    cols = {
        "log2 h": [math.log2(p.h) for p in points],
        "log2 d_k": [math.log2(p.d_k) for p in points],
        "log2 d_model": [math.log2(p.d_model) for p in points],
        # sweeps of different precisions (a sweep never mixes them): the offset is estimated, not assumed 0
        "bf16 (vs fp32)": [float(p.precision.startswith("bf16")) for p in points],
    }
    used = {t: v for t, v in cols.items() if len(set(v)) > 1}
    if len(points) <= len(used) + 1:
        raise ReportError(f"{len(points)} runs cannot fit {len(used) + 1} coefficients: finish more cells first")
    return ols(used, [p.bleu for p in points])


def cell_of(p: Point) -> tuple:
    return p.h, p.d_k, p.d_v, p.d_model, p.precision


def cell_label(cell: tuple) -> str:
    h, d_k, d_v, d_model, precision = cell
    return f"h {h}, d_k {d_k}, d_v {d_v}, d_model {d_model}, {precision}"


def fit_without_each_cell(points: list[Point]) -> dict[str, dict]:
    """How far one cell moves the fit: for each size term, its coefficient on every run and the lowest and
    highest it takes when the runs of one cell (all its seeds) are left out, each with that cell. A fit whose
    coefficient changes sign or loses its CI when one cell goes is read through that cell, not the sizes."""
    full = fit(points)["terms"]
    drops = []
    for cell in sorted({cell_of(p) for p in points}):
        rest = [p for p in points if cell_of(p) != cell]
        try:
            drops.append((cell, fit(rest)["terms"]))
        except ReportError:  # too few runs left: that cell is not one to drop
            continue
    out = {}
    for term in full:
        if term == "intercept":
            continue
        moved = [(t[term], cell) for cell, t in drops if term in t]  # a term the drop leaves constant goes
        if not moved:
            continue
        low, high = min(moved, key=lambda m: m[0]["coef"]), max(moved, key=lambda m: m[0]["coef"])
        out[term] = {
            "coef": full[term]["coef"],
            "low": low[0],
            "low_cell": low[1],
            "high": high[0],
            "high_cell": high[1],
        }
    return out


def influence_lines(moves: dict[str, dict]) -> list[str]:
    if not moves:
        return []
    lines = [
        "",
        "## How far one cell moves the fit",
        "",
        "Each size term fitted again with the runs of one cell (all its seeds) left out, for every cell in "
        "turn: the lowest and highest coefficient it takes, with its 95% CI and the cell left out. Where "
        "the range crosses zero, or the CI excludes zero at one end only, one cell decides the reading.",
        "",
        "| term | every run | lowest (cell left out) | highest (cell left out) |",
        "|---|---:|---|---|",
    ]

    def one(t: dict, cell: tuple) -> str:
        return f"{t['coef']:+.2f} [{t['lo']:+.2f}, {t['hi']:+.2f}] ({cell_label(cell)})"

    for term, m in moves.items():
        lines.append(
            f"| {term} | {m['coef']:+.2f} | {one(m['low'], m['low_cell'])} | {one(m['high'], m['high_cell'])} |"
        )
    return lines


def best_h_by_width(points: list[Point], alpha: float = 0.05) -> list[dict]:
    """At each d_model, row A's cells (d_k = d_v = d_model / h) in one precision (the one with the most of
    them: a width's cells are compared within one precision), the best h by mean test BLEU, and each other h
    with Welch's p against the best (None with fewer than 2 seeds on a side); `level`: the h whose p is at
    least alpha or None, which the seeds cannot tell from the best."""
    out = []
    for dm in sorted({p.d_model for p in points}):
        row_a = [p for p in points if p.d_model == dm and p.d_k == p.d_v == dm // p.h and p.h * p.d_k == dm]
        by_precision: dict[str, dict[int, list[float]]] = {}
        for p in row_a:
            by_precision.setdefault(p.precision, {}).setdefault(p.h, []).append(p.bleu)
        if not by_precision:
            continue
        precision, cells = max(sorted(by_precision.items()), key=lambda kv: len(kv[1]))
        if len(cells) < 2:
            continue
        best = max(cells, key=lambda h: statistics.fmean(cells[h]))
        p_vs_best = {h: seed_test(cells[best], v) for h, v in cells.items() if h != best}
        out.append(
            {
                "d_model": dm,
                "precision": precision,
                "best": best,
                "cells": {
                    h: {"mean": mean_sd(v)[0], "sd": mean_sd(v)[1], "n": len(v)} for h, v in sorted(cells.items())
                },
                "p_vs_best": p_vs_best,
                "level": sorted(h for h, p in p_vs_best.items() if p is None or p >= alpha),
                "others": sorted(by_precision.keys() - {precision}),
            }
        )
    return out


def best_h_lines(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    hs = sorted({h for r in rows for h in r["cells"]})
    lines = [
        "## The best h at each width (row A: d_k = d_v = d_model / h)",
        "",
        "Test BLEU, mean ± sd (seeds); each width in one precision; p: Welch's t-test over the seeds of each h "
        "against the best h of its width; level: the h whose seeds it cannot tell from the best.",
        "",
        "| d_model | precision | " + " | ".join(f"h = {h}" for h in hs) + " | best h (d_k) | h level with the best "
        "(p ≥ 0.05) |",
        "|---:|---|" + "---:|" * len(hs) + "---|---|",
    ]
    for r in rows:
        cells = []
        for h in hs:
            c = r["cells"].get(h)
            p = r["p_vs_best"].get(h)
            cells.append(
                "—"
                if c is None
                else f"{c['mean']:.2f} ± {c['sd']:.2f} ({c['n']})"
                + ("" if h == r["best"] or p is None else f"<br>p {fmt_p(p)}")
            )  # two lines: fits the page
        level = ", ".join(map(str, r["level"])) or "none"
        lines.append(
            f"| {r['d_model']} | {r['precision']} | "
            + " | ".join(cells)
            + f" | **{r['best']}** ({r['d_model'] // r['best']}) | {level} |"
        )
    skipped = [f"d_model {r['d_model']}: {', '.join(r['others'])}" for r in rows if r["others"]]
    if skipped:
        lines += [
            "",
            "Row A cells in another precision, left out of this table (not of the fit): " + "; ".join(skipped) + ".",
        ]
    return [""] + lines


def best_h_figure(rows: list[dict], path: Path) -> Path:
    """Row A at each width: test BLEU against h (log axis), one line per d_model, the best h ringed."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for r in rows:
        hs = list(r["cells"])
        means, sds = [r["cells"][h]["mean"] for h in hs], [r["cells"][h]["sd"] or 0.0 for h in hs]
        line = ax.errorbar(
            hs, means, yerr=sds, marker="o", capsize=3, label=f"d_model {r['d_model']} ({r['precision']})"
        )
        ax.plot([r["best"]], [r["cells"][r["best"]]["mean"]], "o", ms=13, mfc="none", color=line[0].get_color())
    ax.set_xscale("log", base=2)
    ax.set_xlabel("heads h (d_k = d_v = d_model / h)")
    ax.set_ylabel("test BLEU (beam 4), mean ± sd over seeds")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def figure(points: list[Point], path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    hs = sorted({p.h for p in points})
    cmap = plt.get_cmap("viridis", max(len(hs), 2))
    markers = dict(zip(sorted({p.d_model for p in points}), "os^Dv"))
    cells: dict[tuple, list[float]] = {}
    for p in points:
        cells.setdefault((p.h, p.d_k, p.d_model), []).append(p.bleu)
    for (h, dk, dm), vals in sorted(cells.items()):
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        ax.errorbar(dk, statistics.mean(vals), yerr=sd, fmt=markers[dm], color=cmap(hs.index(h)), capsize=3, ms=7)
    for h in hs:
        ax.plot([], [], "o", color=cmap(hs.index(h)), label=f"h = {h}")
    for dm, m in markers.items():
        ax.plot([], [], m, color="grey", label=f"d_model {dm}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("query/key width per head d_k (log scale)")
    ax.set_ylabel("test BLEU (beam 4), mean ± sd over seeds")
    ax.legend(fontsize=8, ncol=2, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path
