"""Table 3 as the paper lays it out, every row beside the paper's own numbers: `make table3-report`.

    python -m headsweep.reports.table3 [--root results] [--out reports] [--paper CSV] [--suffix _h100]

Writes reports/table3.md, .html and table3.png. Reads only what runs wrote (results/<sweep>/, the sweeps of
headsweep.sweeps.table3.ROWS) and the paper's Table 3 (a CSV; default the one shipped with the package, the
same file as ../shared/paper/vaswani2017_table3.csv). Every statistic is the sweep report's own
(reports.report.summarize: Δ against the base, Welch's t-test over seeds, sacreBLEU's paired bootstrap;
report_stuck's flags; report_convergence's share of the val-loss drop in the last third).

A row counts only runs of today's protocol (PROTOCOL: fan_in init, a decay by the step alone, the ablation
budget's steps, a peak rate chosen per cell on validation from the LR grid); any other finished run of its
sweeps is named and left out, never mixed in. Per row, the verdict: does each cell move BLEU the way the
paper's does (the sign of Δ), and do the cells rank as the paper's do (Spearman's rho of the Δs)? A row is the
CPU's sweeps unless only a card finished it (<sweep>_<card>, all runs on a GPU): then every cell of it, its base
too, is the card's, its Δs against the card's own base, and the page says so. A cell of
the opposite sign whose Δ is inside seed noise (Welch p >= ALPHA, or one seed) is no disagreement.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

from headsweep.data.files import atomic_write
from headsweep.reporting.html import page
from headsweep.reporting.markdown import figure, fmt_p, with_back_link
from headsweep.reporting.markdown import table as markdown_table
from headsweep.reports import report_convergence
from headsweep.reports.cells import Cell, ReportError, group_cells, load_runs
from headsweep.reports.report import SIZES, early_pool, paper_row, settings, stuck_runs, summarize
from headsweep.reports.report_lr import choices, edge_section, split_grid_runs
from headsweep.reports.report_stuck import gap_words
from headsweep.sweeps.lr_select import LR_KEY
from headsweep.sweeps.paper import FLOAT_COLUMNS, INT_COLUMNS
from headsweep.sweeps.table3 import BUDGET, ROWS, SEEDS, grid_words

PAPER_CSV = Path(__file__).resolve().parents[1] / "resources" / "vaswani2017_table3.csv"
ALPHA = 0.05
# Today's protocol (issue 42 and the per-cell rate): what a run must have been trained with to count.
PROTOCOL = {"model.init": "fan_in", "module.decay_by": "steps", "trainer.max_steps": 1150}
PROTOCOL_WORDS = (
    f"model.init fan_in, the learning rate decayed by the step alone, the {BUDGET} budget (1,150 steps), a peak "
    f"rate chosen per cell on seed 1's validation loss from {grid_words()} (widened past an edge that won), "
    f"{SEEDS} seeds at it"
)
# Rows shipped under the earlier protocol: their own reports, never rows of this table.
EARLIER = {
    "A": "The earlier protocol's row A (results/table3_a: xavier init, a decay by the step or the time, one peak "
    "rate for every cell) keeps its own report, [table3_a](table3_a.md); none of its runs is in this table.",
    "B": "The earlier protocol's row B (results/table3_b) keeps its own report, [table3_b](table3_b.md).",
}
SETTING_COLUMNS = ("N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls", "pos")
ROW_COLOURS = {"A": "tab:blue", "B": "tab:orange", "C": "tab:green", "D": "tab:red", "E": "tab:purple"}


def read_paper(path: Path) -> list[dict]:
    """The paper's Table 3 rows from a CSV (headsweep/resources/vaswani2017_table3.csv's columns)."""
    if not Path(path).is_file():
        raise ReportError(f"paper CSV {path} not found: pass --paper with Vaswani et al.'s Table 3 as CSV")
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                for key in INT_COLUMNS:
                    row[key] = int(row[key])
                for key in FLOAT_COLUMNS:
                    row[key] = float(row[key]) if row[key] else None
            except (KeyError, TypeError, ValueError) as e:
                raise ReportError(f"paper CSV {path}: not Table 3's columns ({type(e).__name__}: {e})") from None
            rows.append(row)
    if not any(r["row"] == "base" for r in rows):
        raise ReportError(f"paper CSV {path}: no row named base")
    return rows


def off_protocol(run) -> str | None:
    """Why a run is not of today's protocol, in a few words; None when it is."""
    for key, want in PROTOCOL.items():
        if run.flat.get(key) != want:
            return f"{key} {run.flat.get(key)} (today's: {want})"
    lr = run.results["config"].get("lr_select") or {}
    if not lr.get("grid"):
        return "one peak rate for every cell (no learning-rate grid)"
    return None


def row_runs(root: Path, names: list[str]) -> dict:
    """A row's usable runs of today's protocol, its grid runs, and what was left out (with why)."""
    out = {"runs": [], "grid": [], "left_out": [], "sweeps": [], "missing": []}
    for name in names:
        d = root / name
        if not d.is_dir():
            out["missing"].append(name)
            continue
        out["sweeps"].append(name)
        runs, left = load_runs(d, name)
        out["left_out"] += [(f"{name}/{p.name}", why) for p, why in left]
        runs, grid = split_grid_runs(runs)
        for r in [*runs, *grid]:
            if why := off_protocol(r):
                out["left_out"].append((f"{name}/{r.dir.name}", f"another protocol: {why}"))
        out["runs"].append([r for r in runs if not off_protocol(r)])
        out["grid"] += [r for r in grid if not off_protocol(r)]
    return out


def merged_cells(runs_by_sweep: list[list]) -> list[Cell]:
    """One row's cells: the first sweep's, then each later sweep's but its base (the same run: row D's two
    sweeps share it). The base first."""
    cells: list[Cell] = []
    for runs in runs_by_sweep:
        if not runs:
            continue
        for c in group_cells(runs):
            if c.base and any(x.base for x in cells):
                continue
            cells.append(c)
    return sorted(cells, key=lambda c: not c.base)


def sign(x: float | None, eps: float = 1e-9) -> int | None:
    return None if x is None else (x > eps) - (x < -eps)


def spearman(a: list[float], b: list[float]) -> float | None:
    from scipy.stats import spearmanr

    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    return float(spearmanr(a, b).statistic)


def judge(cells: list[Cell]) -> dict:
    """Sign agreement per cell with a paper Δ, the rank correlation, and the disagreements named."""
    judged, agree, disagree, noise = [], [], [], []
    for c in cells:
        r = c.row
        if c.base or r.get("paper_delta") is None or r.get("delta") is None:
            continue
        judged.append(c)
        ours, theirs = sign(r["delta"]), sign(r["paper_delta"])
        inside_noise = r.get("p_seeds") is None or r["p_seeds"] >= ALPHA
        if ours == theirs or (theirs == 0 and inside_noise):
            agree.append(c)
        elif inside_noise:
            noise.append(c)
        else:
            disagree.append(c)
    rho = spearman([c.row["paper_delta"] for c in judged], [c.row["delta"] for c in judged])
    return {"judged": judged, "agree": agree, "noise": noise, "disagree": disagree, "rho": rho}


def add_paper(cells: list[Cell], paper: list[dict]) -> None:
    """Each cell's paper row from `paper` (sizes relative to the base: d_model 128 at 256 is the paper's 256 at
    512), and the paper's Δ PPL and Δ BLEU against its base."""
    base = next((c for c in cells if c.base), None)
    paper_base = next(r for r in paper if r["row"] == "base")
    scale = settings(base.runs[0].flat) if base else None
    for c in cells:
        p = paper_row(settings(c.runs[0].flat), scale, paper)
        c.row["paper"] = p
        same = p is not None and p is paper_base
        c.row["paper_delta"] = None if p is None or same else p["dev_bleu"] - paper_base["dev_bleu"]
        c.row["paper_dppl"] = None if p is None or same else p["dev_ppl"] - paper_base["dev_ppl"]
        c.row["dppl"] = None if base is None or c is base else c.row["val_ppl"] - base.row["val_ppl"]


def paper_settings(p: dict, paper: list[dict], base: Cell) -> dict:
    """A paper cell's Table 3 columns in our units: sizes scaled by our base over the paper's (its N 2 at 6 is
    our N 1 at 3), every other setting as printed."""
    paper_base = next(r for r in paper if r["row"] == "base")
    ours = settings(base.runs[0].flat)
    out = {}
    for k in SETTING_COLUMNS:
        v = p[k] * ours[k] / paper_base[k] if k in SIZES else p[k]
        out[k] = int(round(v)) if k in SIZES else v
    return out


def unrun_cells(row: str, cells: list[Cell], paper: list[dict]) -> list[dict]:
    """The paper's cells of `row` that none of ours matches (add_paper), in the paper's order."""
    matched = {id(c.row["paper"]) for c in cells if c.row.get("paper") is not None}
    return [p for p in paper if p["row"] == row and id(p) not in matched]


def unrun_name(p: dict, paper: list[dict], base: Cell | None) -> str:
    """'eps_ls 0', 'N 1': where a paper cell differs from the base, in our units where we have a base."""
    ref = settings(base.runs[0].flat) if base else next(r for r in paper if r["row"] == "base")
    mine = paper_settings(p, paper, base) if base else {k: p[k] for k in SETTING_COLUMNS}
    return ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in mine.items() if v != ref[k])


def unrun_row(row: str, p: dict, paper: list[dict], base: Cell, status: str) -> list[str]:
    """The table's line for a paper cell we have not run: its settings in our units, the paper's numbers."""
    return [
        row,
        *setting_strings(paper_settings(p, paper, base), settings(base.runs[0].flat)),
        f(p.get("dev_ppl")),
        f(p.get("dev_bleu"), "{:.1f}"),
        f(p.get("params_M"), "{:.0f}"),
        status,
        *[""] * (len(HEADER) - 5 - len(SETTING_COLUMNS)),
    ]


def f(x, fmt="{:.2f}", none="—") -> str:
    return none if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def mean_text(r: dict) -> str:
    sd = f" ± {r['test_bleu_sd']:.2f}" if r.get("test_bleu_sd") is not None else ""
    return f"{r['test_bleu']:.2f}{sd} (n={r['n']})"


def setting_strings(ours: dict, ref: dict | None) -> list[str]:
    """Table 3's layout: a setting is printed where it differs from `ref` (every one where ref is None)."""
    out = []
    for k in SETTING_COLUMNS:
        v = ours[k]
        out.append("" if ref is not None and ref[k] == v else f"{v:g}" if isinstance(v, float) else str(v))
    return out


def setting_cells(c: Cell, base: Cell | None) -> list[str]:
    """A cell's settings where they differ from the base (the base row prints all)."""
    return setting_strings(settings(c.runs[0].flat), settings(base.runs[0].flat) if base and c is not base else None)


def rate_text(c: Cell) -> str:
    rates = sorted({r.flat.get(LR_KEY) for r in c.runs})
    return " / ".join(f"{v:g}" for v in rates if v is not None) or "—"


def stuck_text(c: Cell) -> str:
    stuck = c.row.get("stuck_seeds") or []
    return "seed " + ", ".join(map(str, stuck)) if stuck else ""


HEADER = [
    "",
    *SETTING_COLUMNS,
    "paper PPL (dev)",
    "paper BLEU (dev)",
    "paper params ×10⁶",
    "our val PPL",
    "our test BLEU",
    "our params ×10⁶",
    "Δ PPL paper / ours",
    "Δ BLEU paper / ours",
    "Welch p",
    "bootstrap p",
    "stuck",
    "rate",
]


def table_row(row: str, c: Cell, base: Cell | None, label: str | None = None) -> list[str]:
    r, p = c.row, c.row.get("paper") or {}
    partial = " (partial)" if r["n"] < SEEDS else ""
    return [
        label or ("base" if c.base else row),
        *setting_cells(c, base),
        f(p.get("dev_ppl")),
        f(p.get("dev_bleu"), "{:.1f}"),
        f(p.get("params_M"), "{:.0f}"),
        f(r.get("val_ppl")),
        mean_text(r) + partial,
        f(r.get("params_M"), "{:.1f}"),
        "" if c.base else f"{f(r.get('paper_dppl'), '{:+.2f}')} / {f(r.get('dppl'), '{:+.2f}')}",
        "" if c.base else f"{f(r.get('paper_delta'), '{:+.1f}')} / {f(r.get('delta'), '{:+.2f}')}",
        "" if c.base else fmt_p(r.get("p_seeds")),
        "" if c.base else fmt_p(r.get("p"), r.get("p_bound", False)),
        stuck_text(c),
        rate_text(c),
    ]


def verdict_lines(row: str, j: dict) -> list[str]:
    if not j["judged"]:
        return [f"- Verdict: no cell of row {row} has both our Δ and the paper's (the paper prints no such cell)."]
    n = len(j["judged"])
    rho = "—" if j["rho"] is None else f"{j['rho']:+.2f}"
    lines = [
        f"- Verdict: {len(j['agree'])} of {n} cells move BLEU the paper's way (sign of Δ); Spearman's rho of our Δ "
        f"against the paper's over the row's cells: {rho}"
        + (" (fewer than 3 cells or ties: not computed)" if j["rho"] is None else "")
        + "."
    ]
    if j["disagree"]:
        lines.append(
            "- Disagree (opposite sign, or a change where the paper's Δ is 0; beyond seed noise, Welch p < 0.05): "
            + "; ".join(
                f"{c.label} (ours {c.row['delta']:+.2f}, paper {c.row['paper_delta']:+.1f})" for c in j["disagree"]
            )
            + "."
        )
    if j["noise"]:
        lines.append(
            "- Opposite sign but inside seed noise, so not a disagreement: "
            + "; ".join(
                f"{c.label} (ours {c.row['delta']:+.2f}, Welch {fmt_p(c.row.get('p_seeds'))})" for c in j["noise"]
            )
            + "."
        )
    if not j["disagree"] and not j["noise"]:
        lines.append("- No cell disagrees with the paper's direction.")
    return lines


def convergence_line(conv: dict) -> str:
    if not conv.get("n"):
        return "- Convergence: no run has two validations with a falling val loss: not measured."
    share = f"{conv['median']:.0%} (range {conv['min']:.0%}-{conv['max']:.0%}, {conv['n']} runs)"
    if conv["not_converged"]:
        return (
            f"- Convergence: the last third of training still gave a median {share} of the val-loss drop (over "
            f"{report_convergence.NOT_CONVERGED_SHARE:.0%}): still learning at the end; the row compares cells at "
            "a fixed, short budget, not converged models."
        )
    return (
        f"- Convergence: the last third of training gave a median {share} of the val-loss drop: most of the "
        "learning happened before it."
    )


def grid_only_lines(grid: list) -> list[str]:
    """A row with only phase 1 (the learning-rate grid) so far: its seed-1 runs, no cell at a chosen rate."""
    rows = sorted(
        [
            [
                r.cell,
                f"{r.flat[LR_KEY]:g}",
                f(r.results["metrics"].get("val/ppl")),
                f(r.results["metrics"]["test/bleu"]),
            ]
            for r in grid
        ]
    )
    return [
        f"- Partial: only the learning-rate grid (phase 1, seed 1 at each rate) has run: {len(grid)} runs; no cell "
        "has a chosen rate and 3 seeds yet, so no Δ or verdict. Resume: the command above.",
        "",
        *markdown_table(["grid run (cell at rate)", "rate", "val PPL", "test BLEU"], rows),
    ]


def edge_words(root: Path, grid_runs: list) -> list[str]:
    """The sweep report's lines on cells that chose their grid's smallest or largest rate, and whether a run
    past that edge (any sweep in results/) brackets it. Row D's base, in both of its sweeps, once."""
    by_cell, grids, chosen = choices(grid_runs)
    seen = set()
    for label in list(by_cell):
        runs = frozenset(r.dir.resolve() for r in by_cell[label].values())
        if runs in seen:
            del by_cell[label], grids[label]
            chosen.pop(label, None)
        seen.add(runs)
    return [line for line in edge_section(root, by_cell, grids, chosen) if line]


def row_info(root: Path, row: str, names: tuple, suffix: str, paper: list[dict], n_samples: int, threshold, early):
    """One row's cells and words from its sweeps under `suffix` ('' the CPU's, '_h200' a card's)."""
    sweeps = [n + suffix for n in names]
    got = row_runs(root, sweeps)
    info = {"sweeps": sweeps, "suffix": suffix, "left_out": got["left_out"], "grid": got["grid"], "cells": []}
    info["unrun"] = [p for p in paper if p["row"] == row]
    cells = merged_cells(got["runs"])
    if not cells:
        info["status"] = "partial (phase 1 only)" if got["grid"] else "not run yet"
        return info
    summary = summarize(cells, n_samples)
    add_paper(cells, paper)
    info["stuck"] = stuck_runs(cells, root, threshold, early() if threshold is None else None)
    info["convergence"] = report_convergence.convergence(cells)
    info["cells"], info["summary"] = cells, summary
    info["judge"] = judge(cells)
    info["edges"] = edge_words(root, got["grid"])
    base = next((c for c in cells if c.base), None)
    short = [c.label for c in cells if c.row["n"] < SEEDS]
    missing = got["missing"]
    # a paper cell none of ours matches: its sweep has not run, or has only its learning-rate grid
    info["unrun"] = unrun_cells(row, cells, paper)
    n_paper = sum(p["row"] == row for p in paper)
    unrun = [unrun_name(p, paper, base) for p in info["unrun"]]
    parts = [f"{', '.join(short)}: fewer than {SEEDS} seeds"] if short else []
    parts += [f"{', '.join(missing)} not run yet"] if missing else []
    parts += [f"{len(unrun)} of the paper's {n_paper} cells not run yet: {'; '.join(unrun)}"] if unrun else []
    info["status"] = "no base cell" if base is None else f"partial ({'; '.join(parts)})" if parts else "complete"
    info["devices"] = sorted(
        {
            f"{r.flat.get('trainer.precision')} {r.flat.get('trainer.accelerator') or 'cpu'}"
            for c in cells
            for r in c.runs
        }
    )
    return info


def card_suffixes(root: Path, names: tuple) -> list[str]:
    """'_h200' where every sweep of a row also ran on a card under its name (make table3 where torch sees a
    GPU); other suffixes (a sweep's '_edge' runs) are checked by their runs' device in build()."""
    first = names[0]
    found = {p.name[len(first) :] for p in root.glob(f"{first}_*") if p.is_dir()} if root.is_dir() else set()
    return sorted(s for s in found if all((root / (n + s)).is_dir() for n in names))


def complete_on_card(info: dict) -> bool:
    return bool(info["cells"]) and info["status"] == "complete" and all(d.endswith(" gpu") for d in info["devices"])


def build(root: Path, paper: list[dict], suffix: str = "", n_samples: int = 1000, threshold=None) -> dict:
    """Every row's cells and words: {row: {...}}. With a suffix every row is that card's; without one a row is
    the CPU's, unless only a card finished it: a row's cells then all come from that card (its own base too),
    since a row never mixes devices, and the page says so."""
    pool: list = []

    def early():
        if not pool:
            pool.append(early_pool(root))
        return pool[0]

    out = {}
    for row, names in ROWS.items():
        info = row_info(root, row, names, suffix, paper, n_samples, threshold, early)
        if not suffix and info["status"] != "complete":
            for card in card_suffixes(root, names):
                alt = row_info(root, row, names, card, paper, n_samples, threshold, early)
                if complete_on_card(alt):
                    alt["instead_of"] = (info["sweeps"], info["status"])
                    info = alt
                    break
        out[row] = info
    # the paper's cells we have not run, each a line of the table in our units (sizes need a base to scale by)
    base = table_base(out)
    for info in out.values():
        waiting = "phase 1 only" if info["grid"] else "not run yet"
        info["unrun_lines"] = [unrun_row(p["row"], p, paper, base, waiting) for p in info["unrun"]] if base else []
    return out


def table_base(rows: dict):
    """The base line atop the table: the one every CPU row shares, else any row's."""
    bases = [(bool(info.get("suffix")), c) for info in rows.values() for c in info["cells"] if c.base]
    return min(bases, key=lambda b: b[0])[1] if bases else None


def plot(rows: dict, path: Path) -> Path | None:
    """Our Δ BLEU against the paper's, one point per cell, coloured by row; bars: the seed spread of our Δ
    (the cell's and the base's sd over seeds, combined)."""
    from headsweep.reporting.plots import pyplot, save_figure

    points = [
        (row, c)
        for row, info in rows.items()
        for c in info["cells"]
        if not c.base and c.row.get("paper_delta") is not None and c.row.get("delta") is not None
    ]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for row in ROWS:
        mine = [c for r, c in points if r == row]
        if not mine:
            continue
        base = next(c for c in rows[row]["cells"] if c.base)
        bsd = base.row.get("test_bleu_sd") or 0.0
        ax.errorbar(
            [c.row["paper_delta"] for c in mine],
            [c.row["delta"] for c in mine],
            yerr=[math.hypot(c.row.get("test_bleu_sd") or 0.0, bsd) for c in mine],
            fmt="o",
            color=ROW_COLOURS[row],
            capsize=3,
            label=f"row {row}" + (f" ({rows[row]['suffix'].lstrip('_')})" if rows[row].get("suffix") else ""),
        )
    ax.axhline(0, color="grey", lw=0.8)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_xlabel("paper's Δ BLEU against its base (dev, newstest2013)")
    ax.set_ylabel("our Δ BLEU against our base (test, mean over seeds)")
    ax.set_title("Table 3: our Δ BLEU against the paper's, per cell")
    if points:
        ax.legend(loc="best", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no cell with both Δs yet", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=100)
    plt.close(fig)
    return path


def table_body(rows: dict) -> list[list[str]]:
    """The table's lines under HEADER: the base first, as in the paper, whichever row ran it; then every row's
    other cells, and the paper's cells we have not run."""
    any_base = table_base(rows)
    body = [table_row("base", any_base, any_base)] if any_base else []
    for row, info in rows.items():
        base = next((c for c in info["cells"] if c.base), None)
        if base is not None and info.get("suffix"):  # a row from a card: its own base, against which its Δs are
            body.append(table_row(row, base, base, f"{row}: base on {info['suffix'].lstrip('_')}"))
        body += [table_row(row, c, base) for c in info["cells"] if not c.base]
        if info.get("unrun_lines"):
            body += info["unrun_lines"]
        elif not info["cells"]:
            body.append([row, *[""] * len(SETTING_COLUMNS), *["—"] * 3, info["status"], *[""] * (len(HEADER) - 14)])
    return body


def markdown(rows: dict, png: Path | None, suffix: str) -> str:
    cmd = "make table3" + (f" ... (on the GPU: sweeps named <sweep>{suffix})" if suffix else "")
    md = [
        "# Table 3 (Vaswani et al. 2017), every row, today's protocol, beside the paper",
        "",
        f"Protocol of every number below: {PROTOCOL_WORDS}. Run or resume: `{cmd}` (a subset: `make table3 "
        "ROWS=A,D`). The paper's columns (dev PPL per wordpiece and dev BLEU on newstest2013, parameters) are its "
        "own, at its scale (transformer base, WMT14 EN-DE, 100k steps); ours are the small model (N 3, d_model 256, "
        "d_ff 1024, h 8) on Multi30k DE-EN at 1,150 steps: val PPL is per subword of plain NLL (never smoothed), "
        "test BLEU is beam search on test_2016_flickr, mean ± sd over seeds. Sizes compare relative to each base "
        "(our d_model 128 is the paper's 256, N 1 its 2). Δ is against the row's base (the one base run every CPU "
        "row shares; a row from a card has the card's own); Welch p is over the seeds' test BLEU, the bootstrap p "
        "is sacreBLEU's paired bootstrap over the seeds pooled. A blank setting is the base's, as in the paper.",
        "",
        "## Summary",
        "",
    ]
    summary = []
    for row, info in rows.items():
        j = info.get("judge")
        summary.append(
            [
                row,
                ", ".join(info["sweeps"]),
                info["status"],
                "; ".join(info.get("devices") or []) or "—",
                "—" if not j or not j["judged"] else f"{len(j['agree'])} / {len(j['judged'])}",
                "—" if not j or j["rho"] is None else f"{j['rho']:+.2f}",
                "—" if not j else ", ".join(c.label for c in j["disagree"]) or "none",
            ]
        )
    md += markdown_table(
        ["row", "sweeps", "state", "precision, device", "sign agrees", "Spearman rho", "disagrees (beyond noise)"],
        summary,
    )
    md += ["", "## The table", ""]
    md += markdown_table(HEADER, table_body(rows))
    md += ["", "## Rows", ""]
    for row, info in rows.items():
        md += [
            f"### Row {row}",
            "",
            f"- Sweeps: {', '.join(f'`{s}`' for s in info['sweeps'])}; state: {info['status']}.",
        ]
        if info.get("instead_of"):
            cpu, state = info["instead_of"]
            md.append(
                f"- Shown from the card: the CPU's {', '.join(f'`{s}`' for s in cpu)} is {state}, and a row never "
                "mixes devices, so every cell of this row, its base too, trained on the card, and each Δ is against "
                "the card's own base (the base line atop the table is the CPU rows')."
            )
        if not info["cells"]:
            if info["grid"]:
                md += grid_only_lines(info["grid"])
            else:
                md.append(f"- Not run yet: `make table3 ROWS={row}`.")
        else:
            md.append(f"- Protocol: {PROTOCOL_WORDS}; {'; '.join(info['devices'])}.")
            md += verdict_lines(row, info["judge"])
            md.append(convergence_line(info["convergence"]))
            stuck = [
                f"{c.label} seed {seed} ({gap_words(e)})"
                for c in info["cells"]
                for seed, e, _ in c.row.get("early") or []
                if seed in (c.row.get("stuck_seeds") or [])
            ]
            threshold = info["stuck"]["threshold"]
            md.append(
                f"- Stuck runs (early val loss over the base's by more than {threshold.value:.3f}; the gap early and "
                "at the end, which a plateau keeps and a slower learner narrows): "
                + ("; ".join(stuck) if stuck else "none")
                + "."
            )
            rates = "; ".join(f"{c.label} {rate_text(c)}" for c in info["cells"])
            md.append(f"- Chosen peak rate per cell: {rates}.")
            md += info["edges"]
        if row in EARLIER:
            md.append(f"- {EARLIER[row]}")
        if info["left_out"]:
            md.append(
                f"- Left out ({len(info['left_out'])}): "
                + "; ".join(f"{n}: {w}" for n, w in info["left_out"][:12])
                + ("; ..." if len(info["left_out"]) > 12 else "")
                + "."
            )
        md.append("")
    if png is not None:
        md += [
            "## Figure",
            "",
            figure(
                png.name,
                "Figure 1. Our Δ test BLEU against the paper's Δ dev BLEU, one point per cell with both, coloured by "
                "row; bars: our seed spread (the cell's and the base's sd over seeds, combined). Points in the "
                "upper right and lower left quadrants move the paper's way.",
            ),
            "",
        ]
    return "\n".join(md) + "\n"


def write(root: Path, out: Path, paper_csv: Path = PAPER_CSV, suffix: str = "", n_samples: int = 1000) -> list[Path]:
    paper = read_paper(paper_csv)
    if not root.is_dir():
        raise ReportError(f"no results at {root}: pass --root DIR (the folder holding results/<sweep>/)")
    rows = build(root, paper, suffix, n_samples)
    out.mkdir(parents=True, exist_ok=True)
    png = plot(rows, out / "table3.png")
    md = with_back_link(markdown(rows, png, suffix))
    md_path, html_path = out / "table3.md", out / "table3.html"
    atomic_write(md_path, md)
    atomic_write(html_path, page("Table 3, every row, beside the paper", md))
    return [md_path, html_path, png]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path("results"))
    parser.add_argument("--out", type=Path, default=Path("reports"))
    parser.add_argument("--paper", type=Path, default=PAPER_CSV, help="the paper's Table 3 as CSV")
    parser.add_argument("--suffix", default="", help="the rows' sweeps under a GPU's name, e.g. _h100")
    parser.add_argument("--samples", type=int, default=1000, help="paired bootstrap resamples")
    args = parser.parse_args(argv)
    try:
        paths = write(args.root, args.out, args.paper, args.suffix, args.samples)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
