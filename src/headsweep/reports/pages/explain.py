"""One view across sweeps: which size carries the BLEU cost, the number of heads h, the query/key width per
head d_k, or the model width d_model? Every finished cell of the named sweeps (or of every sweep in
results/) at one budget, test BLEU against d_k coloured by h and marked by d_model, and a least-squares fit

    BLEU = b0 + b_h log2 h + b_dk log2 d_k + b_dm log2 d_model + e

on the runs (seeds as replicates of their cell), with 95% confidence intervals; where the sweeps ran in
different precisions (a sweep never mixes them) the fit adds an offset for bf16 rather than assume none.
The fit is repeated with each cell left out in turn, to show how far one cell moves each coefficient.

    python -m headsweep.reports.pages.explain [--sweeps table3_a,table3_b,heads_fixed_dk,heads_by_width]
                                            [--root results] [--out reports]

It also answers "how does the best h change with model size": at each d_model, row A's cells there (d_k =
d_v = d_model / h, so only h varies) side by side, the best h, and which h a Welch test over the seeds
cannot tell apart from it.

Only cells that differ from the default model in these sizes enter the fit, each at its width's default
learning rate, all under one training protocol (model.init, module.decay_by: the one most runs share, or
--init's); a cell with another change (head dropout, fixed heads, another protocol, ...) is listed as left
out. Reads only results/.
"""

from __future__ import annotations

import argparse
import functools
import math
import re
import statistics
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from headsweep.config import compose
from headsweep.data.files import atomic_write  # a page killed mid-write leaves the previous one whole
from headsweep.reporting.html import page
from headsweep.reporting.markdown import figure as md_figure
from headsweep.reporting.markdown import first_heading, fmt_p, with_back_link, with_footer
from headsweep.reporting.plots import pyplot, save_figure
from headsweep.reporting.stats import mean_sd, ols, seed_test
from headsweep.reports.sweep.cells import ReportError, load_runs
from headsweep.sizes import model_of, shares_kv
from headsweep.store import RUNS, flatten_config, model_key

SIZES = ("model.heads", "model.d_k", "model.d_v", "model.d_model", "model.d_ff")
# May differ between the cells of the fit: the sizes, what follows from them, and how a run was recorded.
FREE = (*SIZES, "model.kv_heads", "module.peak_lr", "trainer.precision", "trainer.max_time", "threads")
SETTINGS = ("model.", "module.", "trainer.max_steps", "data.max_tokens", "average_last")


@dataclass
class Point:
    sweep: str
    run: str
    h: int
    d_k: int
    d_v: int
    d_model: int
    precision: str
    bleu: float


def _settings(flat: dict) -> dict:
    return {
        k: v for k, v in flat.items() if k.startswith(SETTINGS) and k not in FREE and not k.startswith("module.model.")
    }


def read(root: Path, sweeps: list[str]) -> dict[str, tuple[list, list]]:
    """Each sweep's finished runs and the runs left out (load_runs), read once."""
    out = {}
    for sweep in sweeps:
        if not (root / sweep).is_dir():
            raise ReportError(f"no {root / sweep}: run `make sweep SWEEP={sweep}` first, or drop it from --sweeps")
        out[sweep] = load_runs(root / sweep)
    return out


@functools.cache
def default_lr(d_model: int) -> float:
    """The peak learning rate a cell of this width gets unless told otherwise (conf/module: width-scaled)."""
    return float(compose(["budget=ablation", f"model.d_model={d_model}"]).module.peak_lr)


# The training protocol (issue 42): how attention is initialised and what the schedule follows. The fit takes
# one protocol, never a mix: the init changes what the sizes cost (xavier's scale moves with h, d_k, d_v).
PROTOCOL = ("model.init", "module.decay_by")


def protocol_of(loaded: dict[str, tuple[list, list]], init: str | None = None) -> dict:
    """The protocol most runs of the view trained under, or the most common one with model.init `init`."""
    counts = Counter(
        tuple(r.flat.get(k) for k in PROTOCOL)
        for runs, _ in loaded.values()
        for r in runs
        if init is None or r.flat.get("model.init") == init
    )
    if not counts:
        raise ReportError(f"no run of the view trained with model.init={init}: drop --init, or run such a sweep")
    return dict(zip(PROTOCOL, counts.most_common(1)[0][0]))


def collect(
    root: Path, sweeps: list[str], loaded: dict | None = None, protocol: dict | None = None
) -> tuple[list[Point], list[str]]:
    """Each run of the sweeps that fits the view (the default model under `protocol`, by default the most
    common one), and one line per run left out (and why)."""
    loaded = loaded or read(root, sweeps)
    protocol = protocol or protocol_of(loaded)
    default = _settings(flatten_config(compose(["budget=ablation", *(f"{k}={v}" for k, v in protocol.items())])))
    points, left_out, seen = [], [], {}
    for sweep in sweeps:
        runs, unfinished = loaded[sweep]
        left_out += [f"{sweep}/{d.name}: {why}" for d, why in unfinished]
        for r in runs:
            other = {k: v for k, v in _settings(r.flat).items() if repr(default.get(k)) != repr(v)}
            if other:
                k = next(iter(other))
                left_out.append(f"{sweep}/{r.dir.name}: {k} = {other[k]!r} (default {default.get(k)!r})")
                continue
            f = r.flat
            lr, width_lr = f.get("module.peak_lr"), default_lr(f["model.d_model"])
            if isinstance(lr, (int, float)) and not math.isclose(lr, width_lr, rel_tol=1e-9):
                left_out.append(f"{sweep}/{r.dir.name}: module.peak_lr = {lr:g} (the width's default {width_lr:g})")
                continue
            if shares_kv(model_of(f)):  # shared K/V heads: another question
                left_out.append(f"{sweep}/{r.dir.name}: model.kv_heads = {f['model.kv_heads']} (not h)")
                continue
            same = model_key(r.results["config"])  # a run shown in several sweeps (or analysed twice) counts once
            if same in seen:
                left_out.append(f"{sweep}/{r.dir.name}: the same run as {seen[same]}")
                continue
            seen[same] = f"{sweep}/{r.dir.name}"
            points.append(
                Point(
                    sweep,
                    r.dir.name,
                    f["model.heads"],
                    f["model.d_k"],
                    f["model.d_v"],
                    f["model.d_model"],
                    str(f.get("trainer.precision")),
                    r.results["metrics"]["test/bleu"],
                )
            )
    return points, left_out


def check_budget(loaded: dict[str, tuple[list, list]]) -> int:
    """The one number of training steps every run of the view has; one line naming the odd sweep if not."""
    steps = {}
    for sweep, (runs, _) in loaded.items():
        for r in runs:
            steps.setdefault(r.flat["trainer.max_steps"], f"{sweep}/{r.dir.name}")
    if len(steps) > 1:
        found = ", ".join(f"{n} steps ({run})" for n, run in steps.items())
        raise ReportError(
            f"the sweeps ran different budgets: {found}; compare sweeps of one budget (drop the others from --sweeps)"
        )
    return next(iter(steps), 0)


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


def write(root: Path, sweeps: list[str], out: Path, loaded: dict | None = None, init: str | None = None) -> Path:
    loaded = loaded or read(root, sweeps)
    steps = check_budget(loaded)
    protocol = protocol_of(loaded, init)
    points, left_out = collect(root, sweeps, loaded, protocol)
    why = (
        f"--init {init}" if init else "the protocol most runs of the view share"
    ) + "; `make explain ARGS='--init xavier'` or `'--init fan_in'` fits one"
    result = fit(points)
    out.mkdir(parents=True, exist_ok=True)
    png = figure(points, out / "explain-bleu-dk.png")
    precisions = sorted({p.precision for p in points})
    lines = [
        f"# Heads or head width? Every cell at {steps} steps",
        "",
        f"Sweeps read ({len(sweeps)}): {', '.join(sweeps)}.",
        "",
        f"{result['n']} runs in {len({(p.h, p.d_k, p.d_model) for p in points})} cells, every one trained under "
        f"{', '.join(f'{k} {v}' for k, v in protocol.items())} ({why}; runs of another protocol are left out, "
        "below); "
        f"precision {', '.join(precisions)}"
        + (
            " (mixed across sweeps, never within one: the fit has a term for it; see docs/throughput.md)"
            if len(precisions) > 1
            else ""
        ),
        "",
        md_figure(
            png.name,
            "Figure 1. Test BLEU (beam 4) of each cell, mean ± sd over its seeds, against the "
            "query/key width per head; coloured by h, marked by d_model.",
        ),
        "",
        "Least squares on every run (seeds as replicates): BLEU = b0 + b_h log2 h + b_dk log2 d_k + "
        "b_dm log2 d_model (+ b_bf16 where the sweeps' precisions differ); a size that does not vary is left "
        "out.",
        "",
        "| term | coefficient (BLEU per doubling; bf16: offset) | 95% CI | p |",
        "|---|---:|---:|---:|",
    ]
    for name, t in result["terms"].items():
        lines.append(f"| {name} | {t['coef']:+.2f} | [{t['lo']:+.2f}, {t['hi']:+.2f}] | {fmt_p(t['p'])} |")
    lines += ["", f"R² {result['r2']:.2f}, residual sd {result['sigma']:.2f} BLEU, {result['dof']} degrees of freedom."]
    lines += influence_lines(fit_without_each_cell(points))
    best, best_protocol = best_h_by_width(points), protocol
    if not best:
        # row A at several widths ran under another protocol only (xavier): its best h, said to be that protocol's
        for other in sorted({r.flat.get("model.init") for runs, _ in loaded.values() for r in runs} - {None}):
            if other == protocol.get("model.init"):
                continue
            best_protocol = protocol_of(loaded, other)
            best = best_h_by_width(collect(root, sweeps, loaded, best_protocol)[0])
            if best:
                lines += [
                    "",
                    f"No row A cells at several widths under {words(protocol)}: the best h below is under "
                    f"{words(best_protocol)}, the protocol those cells ran with.",
                ]
                break
    lines += best_h_lines(best)
    if best:
        png_h = best_h_figure(best, out / "explain-best-h.png")
        lines += [
            "",
            md_figure(
                png_h.name,
                "Figure 2. Row A at each width: test BLEU against h (d_k = d_model / h), "
                f"mean ± sd over seeds; the best h ringed; under {words(best_protocol)}.",
            ),
        ]
    if left_out:
        lines += ["", *left_out_summary(left_out)]
    path = out / "explain.md"
    md = with_footer(with_back_link("\n".join(lines) + "\n"), __spec__.name)
    atomic_write(path, md)
    atomic_write(path.with_suffix(".html"), page(first_heading(md, "explain"), md))
    return path


def words(protocol: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in protocol.items())


def left_out_summary(left_out: list[str]) -> list[str]:
    """The runs left out, one line per sweep with each reason counted (the reasons repeat per seed: a line per
    run made the page end in hundreds of lines), the full list folded."""
    by_sweep: dict[str, Counter] = {}
    for line in left_out:
        where, _, why = line.partition(": ")
        why = re.sub(r"the same run as \S+", "the same run as another sweep's, counted there", why)
        by_sweep.setdefault(where.split("/", 1)[0], Counter())[why] += 1
    lines = [f"## Left out ({len(left_out)} runs)", ""]
    for sweep, reasons in by_sweep.items():
        lines.append(f"- {sweep}: " + "; ".join(f"{why} ({n})" for why, n in reasons.most_common()))
    folded = ["<details><summary>Every run left out</summary>", "", *[f"- {x}" for x in left_out], "", "</details>"]
    return [*lines, "", *folded]


def at_the_ablation_budget(root: Path) -> tuple[dict[str, tuple[list, list]], list[str]]:
    """Every sweep in root whose finished runs trained the ablation budget's steps, as read(), and one line
    naming each other sweep and its steps (the default view: the 2x-budget sweeps are `make budget`'s)."""
    steps = compose(["budget=ablation"]).trainer.max_steps
    names = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != RUNS)  # runs/: the store, no sweep
    keep, other = {}, []
    for name, (runs, unfinished) in read(root, names).items():
        odd = sorted({r.flat["trainer.max_steps"] for r in runs} - {steps})
        if odd:
            other.append(f"{name} ({', '.join(map(str, odd))} steps)")
        else:
            keep[name] = (runs, unfinished)
    return keep, ([f"left out, not at the ablation budget's {steps} steps: {', '.join(other)}"] if other else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sweeps",
        default="",
        help="comma-separated sweeps (default: every sweep in --root at the ablation budget's steps)",
    )
    parser.add_argument("--root", type=Path, default=Path("results"))
    parser.add_argument("--out", type=Path, default=Path("reports"))
    parser.add_argument(
        "--init",
        choices=["xavier", "fan_in"],
        default=None,
        help="fit the runs of this model.init (default: the protocol most runs share)",
    )
    args = parser.parse_args(argv)
    try:
        named = [s for s in args.sweeps.split(",") if s]
        loaded, said = (read(args.root, named), []) if named else at_the_ablation_budget(args.root)
        for line in said:
            print(line)
        path = write(args.root, list(loaded), args.out, loaded, args.init)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
