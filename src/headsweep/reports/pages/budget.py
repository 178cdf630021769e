"""The budget view: does the cost of many narrow heads shrink, hold or grow with the training budget? Each
cell of a sweep trained longer (heads_budget_2x: 2,300 steps) beside the same cell at the shorter budget
(1x) found in other sweeps, its gap to the base cell at both budgets, and the change in that gap.

    python -m headsweep.reports.pages.budget --sweep heads_budget_2x [--against heads_budget_1x,table3_a,...]
                                           [--root results] [--out reports]

Without --against, the 1x cells are looked for in every other sweep the store shows under --root (a run two
sweeps show is one run, so where it is found does not change a number); a sweep named in --against must exist.

Writes reports/<sweep>-budget.md, .html and -budget-curves.png; reads only results/.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from headsweep.data.files import atomic_write  # a page killed mid-write leaves the previous one whole
from headsweep.reporting.html import page
from headsweep.reporting.markdown import figure, fmt_p, table, with_back_link, with_footer
from headsweep.reporting.plots import pyplot, save_figure
from headsweep.reporting.stats import holm, mean_sd, ols
from headsweep.reports.site.index import write_index  # the view's question block, as make report
from headsweep.reports.sweep.cells import Cell, ReportError, group_cells, load_runs
from headsweep.reports.sweep.plots import cell_curve
from headsweep.reports.sweep.table import display, fmt
from headsweep.store import settings_diff

# What may differ between a cell and its 1x cell: the budget, and the precision (the shipped 1x sweeps ran
# in fp32 and bf16-mixed). trainer.max_time is no experiment setting (store.EXPERIMENT_KEYS) at all.
BUDGET_KEYS = ("trainer.max_steps", "trainer.precision")
METHOD = (
    "Change in the gap: the interaction coefficient of an ordinary least-squares fit on the per-seed test "
    "BLEU of the four groups (base and cell, 1x and 2x), BLEU = b0 + b_2x·[2x] + b_cell·[cell] + "
    "b_int·[2x]·[cell], so b_int = (2x gap) − (1x gap); its 95% CI and two-sided p use t with n − 4 degrees "
    "of freedom and one seed spread pooled over the four groups. p Holm: Holm's correction over the cells."
)

NO_GAP = "No gap at both budgets: the sweep's base cell (tagged `base`) has no finished runs or no 1x cell."


@dataclass
class Match:
    """A cell of an --against sweep that is a sweep cell at the other budget."""

    sweep: str
    cell: Cell


def precision(cell: Cell) -> str:
    return " / ".join(sorted({str(r.flat.get("trainer.precision")) for r in cell.runs}))


def steps(cell: Cell) -> int:
    return cell.runs[0].flat["trainer.max_steps"]


def load(root: Path, sweep: str, hint: str) -> tuple[list[Cell], list[str]]:
    """The sweep's cells and one line per run left out; ReportError (one line, `hint`) if it has none."""
    if not (root / sweep).is_dir():
        raise ReportError(f"no runs of sweep '{sweep}': {root / sweep} does not exist; {hint}")
    runs, left_out = load_runs(root / sweep, sweep)
    if not runs:
        raise ReportError(f"no finished runs of sweep '{sweep}' in {root / sweep} ({len(left_out)} left out); {hint}")
    return group_cells(runs), [f"{sweep}/{d.name}: {why}" for d, why in left_out]


def every_other_sweep(root: Path, sweep: str) -> list[str]:
    """Where the 1x cells are looked for unless --against names sweeps: every sweep folder under root with a
    run in it (results/runs is the store itself, no sweep)."""
    return [
        d.name
        for d in sorted(root.iterdir())
        if d.is_dir()
        and d.name not in (sweep, "runs")
        and not d.name.startswith(".")
        and any(not p.name.startswith(".") for p in d.iterdir())
    ]


def same_but_budget(cell: Cell, other: Cell) -> bool:
    """The same experiment (the store's comparison of settings) at another number of steps, precision aside."""
    diff = settings_diff(other.runs[0].results["config"], cell.runs[0].flat, other.runs[0].seed)[0]
    return steps(other) != steps(cell) and all(k in ("seed", *BUDGET_KEYS) for k in diff)


def pick(candidates: list[Match], want_precision: str, want_sweep: str | None = None) -> Match | None:
    """The candidate of the wanted precision (then sweep); ties go to the earlier --against sweep."""
    return min(candidates, key=lambda m: (precision(m.cell) != want_precision, m.sweep != want_sweep), default=None)


def gap_change(b1: list[float], x1: list[float], b2: list[float], x2: list[float]) -> dict:
    """The gaps (cell − base, mean test BLEU) at 1x and 2x and the change between them, with the interaction
    coefficient's 95% CI and p (METHOD); no CI or p with fewer than 5 runs in all."""
    gap1, gap2 = mean_sd(x1)[0] - mean_sd(b1)[0], mean_sd(x2)[0] - mean_sd(b2)[0]
    out = {"gap1": gap1, "gap2": gap2, "change": gap2 - gap1, "lo": None, "hi": None, "p": None, "dof": 0}
    groups = [(b1, 0, 0), (x1, 0, 1), (b2, 1, 0), (x2, 1, 1)]
    y = [v for vals, _, _ in groups for v in vals]
    if len(y) > 4:
        long_ = [float(t) for vals, t, _ in groups for _ in vals]
        is_cell = [float(c) for vals, _, c in groups for _ in vals]
        fit = ols({"2x": long_, "cell": is_cell, "2x × cell": [a * b for a, b in zip(long_, is_cell)]}, y)
        term = fit["terms"]["2x × cell"]
        out.update(lo=term["lo"], hi=term["hi"], p=term["p"], dof=fit["dof"])
    return out


def verdict(name: str, g: dict, n: int, alpha: float = 0.05) -> tuple[str, str]:
    """(shrank | held | grew, a sentence from the numbers). The gap is cell − base: it shrank when the change
    points back towards zero from the 1x gap."""
    change = f"{g['gap1']:+.2f} → {g['gap2']:+.2f} BLEU (change {g['change']:+.2f}"
    if g["p"] is None:
        return "held", f"{name}: gap {change}; too few runs for a test): nothing is shown."
    ci = f", 95% CI [{g['lo']:+.2f}, {g['hi']:+.2f}], p Holm {fmt_p(g['p_holm'])})"
    if g["p_holm"] >= alpha:
        return "held", (
            f"{name}: the gap held as far as {n} seed{'' if n == 1 else 's'} per cell can tell: {change}{ci} is not "
            "significant, which means a change is not shown, not that there is none."
        )
    word = "shrank" if g["change"] * g["gap1"] < 0 else "grew"
    flipped = " and changed sign" if word == "shrank" and g["gap1"] * g["gap2"] < 0 else ""
    return word, f"{name}: the gap {word}{flipped} with the budget: {change}{ci}."


def curves_png(sweep: str, rows: list[dict], out: Path) -> tuple[Path, str]:
    """Val BLEU and val loss against step; one colour per cell, 2x solid and its 1x cell dashed, ±sd bands."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.0))
    for i, row in enumerate(rows):
        one = row["one"]
        for cell, style, tag in (
            (row["cell"], "-", f"2x ({steps(row['cell'])} steps)"),
            (one.cell, "--", f"1x ({steps(one.cell)} steps, {one.sweep}, {precision(one.cell)})"),
        ):
            for ax, metric in zip(axes, ("val/bleu", "val/loss")):
                x, mean, sd = cell_curve(cell, metric)
                if x:
                    ax.plot(x, mean, style, marker="o", ms=3, color=f"C{i % 10}", label=f"{display(row['cell'])} {tag}")
                    ax.fill_between(
                        x,
                        [m - s for m, s in zip(mean, sd)],
                        [m + s for m, s in zip(mean, sd)],
                        color=f"C{i % 10}",
                        alpha=0.12,
                    )
    for ax, name in zip(axes, ("val BLEU (greedy)", "val loss (NLL per subword)")):
        ax.set(xlabel="training step", ylabel=name)
        ax.grid(alpha=0.3)
    # the key below both panels: inside either it lay over the curves' ± sd bands
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=7, frameon=False)
    fig.suptitle(f"{sweep}: learning curves at 1x and 2x the steps, mean ± sd over seeds")
    fig.tight_layout(rect=(0, 0.03 + 0.04 * ((len(labels) + 1) // 2), 1, 1))
    path = out / f"{sweep}-budget-curves.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path, (
        "Val BLEU (greedy) and val loss against training step: one colour per cell, the longer budget "
        "solid, the same cell at the shorter budget dashed; mean ± sd over the seeds that validated there."
    )


def p_text(p: float | None) -> str:
    return fmt_p(p)


def capped(rows: list[dict]) -> list[str]:
    """Runs the time cap stopped before trainer.max_steps: they trained less than their budget says."""
    cells = [c for r in rows for c in (r["cell"], r["one"].cell)]
    return [
        f"{r.dir.parent.name}/{r.dir.name}: stopped at step {r.results['metrics'].get('train/steps'):.0f} of "
        f"{steps(c)} (trainer.max_time)"
        for c in cells
        for r in c.runs
        if r.results["metrics"].get("train/steps", steps(c)) < steps(c)
    ]


def bleu(cell: Cell) -> str:
    mean, sd = mean_sd(cell.values("test/bleu"))
    return f"{fmt(mean, sd=sd)} (n {len(cell.runs)}, {precision(cell)})"


def compare(cells: list[Cell], against: list[tuple[str, list[Cell]]]) -> tuple[list[dict], list[str]]:
    """Each sweep cell with its 1x match and, for a non-base cell, the gap change against the base, whose 1x
    is taken from the same sweep and precision as the cell's 1x so each gap is measured within one precision."""
    base = next((c for c in cells if c.base), None)
    found = {c.label: [Match(s, o) for s, os in against for o in os if same_but_budget(c, o)] for c in cells}
    rows, missing = [], []
    for c in cells:
        one = pick(found[c.label], precision(c))
        if one is None:
            missing.append(
                f"{c.label}: no cell of {', '.join(s for s, _ in against)} with the same settings at "
                "another budget; left out."
            )
            continue
        row = {
            "cell": c,
            "one": one,
            "gain": mean_sd(c.values("test/bleu"))[0] - mean_sd(one.cell.values("test/bleu"))[0],
        }
        base_one = pick(found[base.label], precision(one.cell), one.sweep) if base and c is not base else None
        if base_one is not None and base in [r["cell"] for r in rows]:  # group_cells puts the base first
            row["base_one"] = base_one
            row["gap"] = gap_change(
                base_one.cell.values("test/bleu"),
                one.cell.values("test/bleu"),
                base.values("test/bleu"),
                c.values("test/bleu"),
            )
        rows.append(row)
    gapped = [r["gap"] for r in rows if "gap" in r]
    for g, p in zip(gapped, holm([g["p"] for g in gapped])):
        g["p_holm"] = p
    return rows, missing


def markdown(sweep: str, rows: list[dict], lines_out: list[str], png: tuple[Path, str]) -> tuple[str, str]:
    head = f"{sweep}: the cost of narrow heads at 1x and 2x the training steps"
    cells = [["cell", "1x from (sweep/cell)", "test BLEU 1x", "test BLEU 2x", "gain from 2x"]]
    cells += [
        [
            display(r["cell"]),
            f"{r['one'].sweep}/{r['one'].cell.label}",
            bleu(r["one"].cell),
            bleu(r["cell"]),
            f"{r['gain']:+.2f}",
        ]
        for r in rows
    ]
    gaps = [["cell", "base 1x from", "gap 1x", "gap 2x", "change", "95% CI", "p", "p Holm", "verdict"]]
    said = []
    for r in (r for r in rows if "gap" in r):
        g, n = r["gap"], min(len(r["cell"].runs), len(r["one"].cell.runs))
        word, sentence = verdict(display(r["cell"]), g, n)
        said.append(sentence)
        ci = "—" if g["lo"] is None else f"[{g['lo']:+.2f}, {g['hi']:+.2f}]"
        gaps.append(
            [
                display(r["cell"]),
                f"{r['base_one'].sweep} ({precision(r['base_one'].cell)})",
                f"{g['gap1']:+.2f}",
                f"{g['gap2']:+.2f}",
                f"{g['change']:+.2f}",
                ci,
                p_text(g["p"]),
                p_text(g["p_holm"]),
                word,
            ]
        )
    mixed = any(precision(r["cell"]) != precision(r["one"].cell) for r in rows)
    budgets = sorted({steps(r["one"].cell) for r in rows})
    md = [
        f"# {head}",
        "",
        f"2x: {sweep}, {steps(rows[0]['cell'])} steps; 1x: {', '.join(map(str, budgets))} steps. "
        "Test BLEU (beam 4), mean ± sd over seeds. 1x: the same cell (every setting but "
        "trainer.max_steps, trainer.max_time and the precision) in the sweep named; where several match, the one "
        "of the 2x runs' precision. Gap: the cell's mean minus the base's at that budget.",
        "",
        *table(cells[0], cells[1:], align=True),
        "",
        *table(gaps[0], gaps[1:], align=True),
        "",
        "## What the numbers say",
        "",
        *[f"- {s}" for s in said or [NO_GAP]],
        "",
    ]
    if mixed:
        md += [
            "Precision differs between the budgets: each gap is measured within one precision (the base's 1x "
            "is taken from the cell's 1x sweep), so the change compares two within-precision gaps; the gain "
            "from 2x mixes budget and precision.",
            "",
        ]
    md += ["## Figure", "", figure(png[0].name, f"Figure 1. {png[1]}"), "", "## Method", "", METHOD, ""]
    md += ["Left out:", "", *[f"- {line}" for line in lines_out], ""] if lines_out else []
    return head, "\n".join(md)


def write(root: Path, sweep: str, against: list[str], out: Path) -> list[Path]:
    cells, left_out = load(root, sweep, f"run `make sweep SWEEP={sweep} SEEDS=3` first")
    others = []
    for name in against:
        o, lo = load(root, name, "drop it from --against")
        others.append((name, o))
        left_out += lo
    rows, missing = compare(cells, others)
    if not rows:
        raise ReportError(
            f"no cell of {sweep} ({steps(cells[0])} steps) has a cell with the same settings at another "
            f"budget in {', '.join(against)}: --against names sweeps of the same cells at other steps"
        )
    out.mkdir(parents=True, exist_ok=True)
    png = curves_png(sweep, rows, out)
    head, md = markdown(sweep, rows, missing + capped(rows) + left_out, png)
    md_path, html_path = out / f"{sweep}-budget.md", out / f"{sweep}-budget.html"
    md = with_footer(with_back_link(md), __spec__.name)
    atomic_write(md_path, md)
    atomic_write(html_path, page(head, md))
    return [md_path, html_path, png[0]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", default="heads_budget_2x", help="the sweep at the longer budget")
    parser.add_argument(
        "--against",
        default=None,
        help="comma-separated sweeps holding the same cells at the shorter budget, preferred first "
        "(default: every other sweep under --root)",
    )
    parser.add_argument("--root", type=Path, default=Path("results"))
    parser.add_argument("--out", type=Path, default=Path("reports"))
    args = parser.parse_args(argv)
    try:
        against = (
            [s for s in args.against.split(",") if s]
            if args.against is not None
            else every_other_sweep(args.root, args.sweep)
        )
        paths = write(args.root, args.sweep, against, args.out)
        paths += write_index(args.out, args.root)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(map(str, paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
