"""Verdicts across budgets (issue 68): each cell's gap to the base at 1x, 2x and 4x the steps, read from the
cooldown branches of `make budgets` (one constant-rate trunk per cell and seed, branches cooled down from it).

    python -m headsweep.reports.pages.budgets [--sweeps a_budgets,b_budgets] [--root results] [--out reports]
    make budgets-report [SWEEPS=..]

Per cell and budget: test BLEU (beam 4) and final val loss minus the base's at that budget, with a 95% interval over
seeds (the seed is the unit of replication: Welch's t where both have 2+ seeds; where the cell has one seed, the
base's spread, pooled over its budgets, stands for its own), the base's seed sd as the noise band, a verdict word
(better | worse | level: the interval's side of zero) and how it moved from the first budget (holds | flips |
appears | fades); Kendall's tau of the cells' order between budgets; the base's 1x branch against its linear-decay
1x run; learning curves. Until every planned trunk and branch has finished the page says "partial" and lists what is
missing.

Without --sweeps, every folder of --root with make budgets' note (.budgets.json) or named *_budgets. A run two sweeps
show (the base trunk every row shares) is counted once, and cells are matched across sweeps by their settings. Each
machine class is a section of its own with its own base: no gap crosses classes (bf16 kernels differ between them).
Writes reports/budgets.md, .html and per class budgets-gaps-<class>.png, budgets-curves-<class>.png; reads only
results/.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from headsweep.data.files import atomic_write  # a page killed mid-write leaves the previous one whole
from headsweep.machine import class_slug
from headsweep.reporting.html import page
from headsweep.reporting.markdown import figure, fmt_p, table, with_back_link, with_footer
from headsweep.reporting.plots import pyplot, save_figure
from headsweep.reporting.stats import mean_sd
from headsweep.reports.pages import budgets_runs as R
from headsweep.reports.site.index import write_index  # the view's question block, as make report
from headsweep.reports.sweep.cells import Cell as RunCell
from headsweep.reports.sweep.cells import ReportError
from headsweep.reports.sweep.plots import cell_curve

HEAD = "Verdicts across budgets: each cell against the base at several multiples of the steps"
METHOD = (
    "Gap: the cell's mean over seeds minus the base's at the same budget (test BLEU, beam 4; final val loss). 95% "
    "interval: Welch's t over seeds where both have 2+ seeds; where the cell has one seed, its spread is taken to be "
    "the base's seed sd pooled over its budgets (t with the pooled degrees of freedom, standard error "
    "sd_pooled · sqrt(1 + 1/n_base); one budget's three seeds can agree to 0.01 BLEU by chance). Only runs of one "
    "machine class are compared: each class has its own base and section. Verdict on test BLEU: better or worse "
    "where the p of that interval's test, Holm-adjusted across the cells of its sweep at that budget (the family "
    "Table 3's verdicts use), is below 0.05, inconclusive where it is not, untested without a p (the sweep pages' "
    "words and rule); Table 3's verdict at 4x reads these same numbers. From the first budget on: holds (the same "
    "word), flips (better to worse or back), appears (inconclusive first), fades (inconclusive now). Noise band: the "
    "base's seed sd at that budget. Kendall's tau (scipy.stats.kendalltau, tau-b) of the cells' order by mean test "
    "BLEU, base included, over the cells measured at both budgets. A branch its time cap stopped short of its steps "
    "is left out and listed as missing."
)


def k_text(k: float) -> str:
    return f"{k:g}x"


def fmt_gap(d: dict | None, digits: int = 2) -> str:
    if d is None:
        return "—"
    ci = "" if d["lo"] is None else f" [{d['lo']:+.{digits}f}, {d['hi']:+.{digits}f}]"
    return f"{d['diff']:+.{digits}f}{ci}"


def fmt_mean(values: list[float], digits: int = 2) -> str:
    mean, sd = mean_sd(values)
    if mean is None:
        return "—"
    return f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if sd is not None else "") + f" (n {len(values)})"


def fmt_ms(mean_and_sd: tuple, digits: int) -> str:
    mean, sd = mean_and_sd
    return f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if sd is not None else "")


def steps_of(cells: list[R.Cell], k: float) -> str:
    found = {b.run.flat.get("trainer.max_steps") for c in cells for b in c.runs.get(k, [])}
    return "/".join(str(s) for s in sorted(found)) or "?"


def status_lines(data: R.Budgets) -> list[str]:
    done = len({b.run.dir.resolve() for b in data.branches})
    t, b = data.trunks_done, done
    finished = f"{t} trunk{'' if t == 1 else 's'}, {b} branch{'' if b == 1 else 'es'}"
    if not data.missing and done:
        return [f"Complete: every planned trunk and branch has finished ({finished})."]
    return [
        f"**Partial**: {len(data.missing)} of {data.planned} planned trunks and branches have not finished "
        f"(finished: {finished}); the numbers below are what has landed, and the missing runs are listed at the end."
    ]


def gap_table(table_cells: list[R.Cell], budgets: list[float], gaps: dict, band: dict, metric: str) -> list[str]:
    digits = 2 if metric == "test/bleu" else 3
    head = ["cell", *[f"{k_text(k)} ({steps_of(table_cells, k)} steps)" for k in budgets]]
    rows = []
    for c in table_cells:
        if c.base:
            rows.append([f"base: {c.label}", *[fmt_mean(c.values(k, metric), digits) for k in budgets]])
            continue
        per = gaps.get(c.cell_id, {})
        cells = []
        for k in budgets:
            g = per.get(k)
            moved = g and k != budgets[0] and g["change"] != R.INCONCLUSIVE  # inconclusive twice: nothing moved
            word = ""
            if g and metric == "test/bleu":  # the verdict reads test BLEU; the val-loss table shows its gaps only
                holm_p = f", Holm p {fmt_p(g[metric]['p_holm'])}" if g[metric].get("p_holm") is not None else ""
                word = f" {g['word']}" + (f", {g['change']}" if moved else "") + holm_p
            cells.append(f"{fmt_gap(g and g[metric], digits)}{word} (n {len(c.runs.get(k, []))})" if g else "—")
        rows.append([c.label, *cells])
    if metric == "test/bleu":
        rows.append(["noise band (base sd)", *[f"± {band[k]:.2f}" if band[k] is not None else "—" for k in budgets]])
    return table(head, rows)


def tau_lines(taus: list[dict]) -> list[str]:
    rows = [
        [f"{k_text(t['a'])} → {k_text(t['b'])}", t["n"], "—" if t["tau"] is None else f"{t['tau']:+.2f}", fmt_p(t["p"])]
        for t in taus
    ]
    return (
        table(["budgets", "cells", "Kendall's tau", "p"], rows) if rows else ["One budget so far: no order to compare."]
    )


def said(table_cells: list[R.Cell], budgets: list[float], gaps: dict) -> list[str]:
    """One sentence per cell: its verdict at each budget."""
    out = []
    for c in table_cells[1:] if table_cells and table_cells[0].base else []:
        per = gaps.get(c.cell_id, {})
        if not per:
            continue
        parts = [f"{k_text(k)} {per[k]['word']} ({per[k]['test/bleu']['diff']:+.2f})" for k in budgets if k in per]
        last = per[max(per)]
        how = "stays inconclusive" if last["change"] == R.INCONCLUSIVE else last["change"]
        moved = f"; from {k_text(budgets[0])} to {k_text(max(per))} the verdict {how}" if len(per) > 1 else ""
        out.append(f"- {c.label}: {', '.join(parts)}{moved}.")
    return out or ["- No cell has both its own branches and the base's at one budget yet."]


def linear_lines(cmp: dict | None) -> list[str]:
    if cmp is None:
        return ["No 1x branch of the base has finished yet."]
    if not cmp:
        return [
            "No linear-decay run of the base with the 1x branch's settings (rate, precision, device, steps) is in the "
            "store: nothing to compare with."
        ]
    rows = [
        [
            name,
            fmt_ms(cmp[m]["linear"], digits),
            fmt_ms(cmp[m]["branch"], digits),
            fmt_gap(cmp[m], digits),
            fmt_p(cmp[m]["p"]),
        ]
        for m, name, digits in (("val/loss", "val loss", 3), ("test/bleu", "test BLEU", 2))
        if m in cmp
    ]
    return [
        f"Branches: {cmp['n_branch']} seeds; linear-decay runs: {cmp['n_linear']} seeds (one machine class).",
        "",
        *table(["metric", "linear 1x", "branch 1x", "branch − linear [95%]", "p"], rows),
        "",
        linear_verdict(cmp),
    ]


def linear_verdict(cmp: dict) -> str:
    """Whether a 1x branch stands for today's 1x run, on every metric compared: an interval off 0 on any one of
    them (val loss too, where BLEU's wider interval holds 0) makes branches comparable only with branches."""
    named = [(m, name) for m, name in (("val/loss", "val loss"), ("test/bleu", "test BLEU")) if m in cmp]
    if not named or any(cmp[m].get("lo") is None for m, _ in named):
        return "Too few seeds for an interval: compare branches only with branches (every gap above is)."
    differ = [(m, name) for m, name in named if not cmp[m]["lo"] <= 0 <= cmp[m]["hi"]]
    if not differ:
        both = " and ".join(n for _, n in named)
        return f"The 1x branch and the linear 1x run agree within their intervals on {both}."
    how = " and its ".join(
        f"{name} is {abs(d := cmp[m]['diff']):.{3 if m == 'val/loss' else 2}f} {'lower' if d < 0 else 'higher'}"
        for m, name in differ
    )
    same = [name for m, name in named if (m, name) not in differ]
    also = f" ({' and '.join(same)} within {'its' if len(same) == 1 else 'their'} interval)" if same else ""
    return (
        f"The 1x branch is not today's 1x run: its {how} than the linear-decay run's{also}. Compare branches only "
        "with branches: every gap above is branch against branch."
    )


def gaps_png(
    table_cells: list[R.Cell], budgets: list[float], gaps: dict, band: dict, out: Path, slug: str
) -> tuple[Path, str]:
    """Test-BLEU gap to the base against the budget, one line per cell with its intervals, the noise band in grey."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    xs = [math.log2(k) for k in budgets]
    sd = [band[k] or 0.0 for k in budgets]
    ax.fill_between(xs, [-s for s in sd], sd, color="0.8", label="base ± sd (noise band)")
    ax.axhline(0, color="0.4", lw=0.8)
    for i, c in enumerate(c for c in table_cells if not c.base):
        per = gaps.get(c.cell_id, {})
        ks = [k for k in budgets if k in per]
        if not ks:
            continue
        d = [per[k]["test/bleu"] for k in ks]
        lo = [x["diff"] - x["lo"] if x["lo"] is not None else 0 for x in d]
        hi = [x["hi"] - x["diff"] if x["hi"] is not None else 0 for x in d]
        x = [math.log2(k) + 0.02 * (i - len(table_cells) / 2) for k in ks]  # apart, so the bars do not overlap
        ax.errorbar(
            x, [v["diff"] for v in d], yerr=[lo, hi], marker="o", ms=4, capsize=3, label=c.label, color=f"C{i % 10}"
        )
    ax.set_xticks(xs, [k_text(k) for k in budgets])
    ax.set(xlabel="budget (multiple of the sweep's steps)", ylabel="test BLEU − base")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path = out / f"budgets-gaps-{slug}.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path, (
        "Each cell's test BLEU minus the base's at each budget, with its 95% interval (Welch over seeds; the base's "
        "spread pooled over budgets for a one-seed cell); grey: the base's seed sd at that budget, the noise band."
    )


def curves_png(table_cells: list[R.Cell], budgets: list[float], out: Path, slug: str) -> tuple[Path, str] | None:
    """Val loss against step, one panel per cell, one line per budget (mean over seeds), the base's in grey."""
    if not table_cells:
        return None
    plt = pyplot()
    cols = min(4, len(table_cells))
    rows = math.ceil(len(table_cells) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False, sharey=True)
    base = table_cells[0] if table_cells[0].base else None
    for ax, c in zip(axes.flat, table_cells):
        for j, k in enumerate(budgets):
            reference = [] if base is None or c is base else [(base, "0.7", 1.0)]  # the base's own panel: no grey twin
            for who, color, lw in (*reference, (c, f"C{j}", 1.4)):
                if not who.runs.get(k):
                    continue
                x, mean, _ = cell_curve(RunCell(who.label, [b.run for b in who.runs[k]]), "val/loss")
                ax.plot(x, mean, color=color, lw=lw, label=k_text(k) if who is c else None)
        ax.set_title(c.label if not c.base else f"base: {c.label}", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(table_cells) :]:
        ax.set_visible(False)
    axes[0][0].set_ylabel("val loss")
    axes[-1][0].set_xlabel("training step")
    axes[0][0].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    path = out / f"budgets-curves-{slug}.png"
    save_figure(fig, path, dpi=100)
    plt.close(fig)
    return path, (
        "Val loss against training step, one panel per cell: each budget's branches (mean over seeds; the trunk's "
        "curve up to the branch point, then the cooldown), the base's at the same budgets in grey."
    )


def summarize(root: Path, data: R.Budgets) -> list[dict]:
    """Everything the page shows, computed once per machine class (the class with the most branches first): the
    cells, budgets, gaps, noise band, taus, the base's 1x branch against its linear run."""
    out = []
    for machine_class, branches in R.by_class(data.branches):
        table_cells, budgets = R.cells(branches)
        base = table_cells[0] if table_cells and table_cells[0].base else None
        out.append(
            {
                "machine_class": machine_class,
                "sweeps": sorted({b.sweep for b in branches}),
                "cells": table_cells,
                "budgets": budgets,
                "gaps": R.gaps(table_cells, budgets),
                "band": R.noise_band(base, budgets),
                "taus": R.taus(table_cells, budgets) if budgets else [],
                "linear": R.one_x_against_linear(root, table_cells, budgets),
            }
        )
    return out


def class_lines(c: dict, figures: list[tuple[Path, str]], first: int) -> list[str]:
    """One machine class's section: its cells against its own base."""
    table_cells, budgets, gaps, band, on = c["cells"], c["budgets"], c["gaps"], c["band"], c["machine_class"]
    md = [f"## On {on}", "", f"Sweeps: {', '.join(c['sweeps'])}. Every run below trained on this class.", ""]
    md += ["### Test BLEU: each cell against the base", "", *gap_table(table_cells, budgets, gaps, band, "test/bleu")]
    md += ["", "### Final val loss: each cell against the base", ""]
    md += gap_table(table_cells, budgets, gaps, band, "val/loss")
    md += ["", "### Does the cells' order hold with budget?", "", *tau_lines(c["taus"])]
    md += ["", "### What the numbers say", "", *said(table_cells, budgets, gaps)]
    md += ["", "### Is a 1x branch today's 1x run?", "", *linear_lines(c["linear"])]
    if figures:
        md += ["", "### Figures", ""]
        md += [figure(p.name, f"Figure {i}. {caption}") + "\n" for i, (p, caption) in enumerate(figures, first)]
    return md + [""]


def markdown(data: R.Budgets, classes: list[dict], figures: dict[str, list[tuple[Path, str]]]) -> str:
    notes = [n for n in data.notes.values() if n]
    plan = (
        f"Trunks at the peak rate, cooled down over the last {notes[0]['cooldown']:.0%} of each budget "
        f"({data.shape}: {'1 − √t' if data.shape == 'sqrt' else '1 − t'}), budgets as multiples of "
        f"{notes[0]['base_steps']} steps. "
        if notes
        else ""
    )
    md = [f"# {HEAD}", "", *status_lines(data), "", f"Sweeps: {', '.join(data.sweeps)}. {plan}"]
    if data.other_shapes:
        others = ", ".join(f"{n} {shape} branches" for shape, n in data.other_shapes.items())
        md += ["", "## Which cooldown shape?", "", f"Only the {data.shape} cooldown's branches are read below. The "]
        md[-1] += f"{others} are measured against them, paired on one trunk checkpoint (`python -m headsweep.sweeps."
        md[-1] += "cooldown`):"
        md += ["", *data.shape_lines]
    if not classes:
        md += ["", "No branch has finished yet: nothing to compare."]
    else:
        names = ", ".join(c["machine_class"] for c in classes)
        md += [
            "",
            f"Machine classes: {names}. A cell is read against the base trained on its own class only (bf16 kernels "
            "differ between classes); a class without its own base has no gaps.",
            "",
        ]
        first = 1
        for c in classes:
            mine = figures.get(c["machine_class"], [])
            md += class_lines(c, mine, first)
            first += len(mine)
    md += ["## Method", "", METHOD, ""]
    if data.missing:
        md += ["## Missing (the page is partial)", "", *[f"- {line}" for line in data.missing], ""]
    return "\n".join(md)


def write(root: Path, sweeps: list[str] | None, out: Path) -> list[Path]:
    if not root.is_dir():
        raise ReportError(f"{root} does not exist: run make budgets first, or pass --root")
    sweeps = sweeps if sweeps is not None else R.discover(root)
    if not sweeps:
        raise ReportError(
            f"no budgets sweep under {root}: run `make budgets SWEEP=<sweep>` first, or name them (--sweeps)"
        )
    if gone := [name for name in sweeps if not (root / name).is_dir()]:
        raise ReportError(f"--sweeps {gone[0]}: {root / gone[0]} does not exist; drop it or run its make budgets")
    data = R.load(root, sweeps)
    classes = summarize(root, data)
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, list[tuple[Path, str]]] = {}
    for c in classes:
        slug = class_slug(c["machine_class"])
        got = [gaps_png(c["cells"], c["budgets"], c["gaps"], c["band"], out, slug)]
        got += [f for f in [curves_png(c["cells"], c["budgets"], out, slug)] if f]
        figures[c["machine_class"]] = got
    md = with_footer(with_back_link(markdown(data, classes, figures)), __spec__.name)
    md_path, html_path = out / "budgets.md", out / "budgets.html"
    atomic_write(md_path, md)
    atomic_write(html_path, page(HEAD, md))
    return [md_path, html_path, *(p for got in figures.values() for p, _ in got)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sweeps", default=None, help="comma-separated budgets sweeps (default: every one under --root)"
    )
    parser.add_argument("--root", type=Path, default=Path("results"))
    parser.add_argument("--out", type=Path, default=Path("reports"))
    args = parser.parse_args(argv)
    try:
        sweeps = [s for s in args.sweeps.split(",") if s] if args.sweeps else None
        paths = write(args.root, sweeps, args.out)
        paths += write_index(args.out, args.root)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(map(str, paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
