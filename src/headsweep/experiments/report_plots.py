"""The report's plots: test BLEU against the varied setting and, where the cells' sizes differ, against
parameters (mean ± sd over seeds, each seed shown), and learning curves (val BLEU and val loss against
step, mean and band over the seeds that validated there). Each returns its file and a caption."""

from __future__ import annotations

import statistics
from pathlib import Path

from headsweep.experiments.cells import Cell, learning_curve
from headsweep.experiments.report_table import display, reader_name, varies
from headsweep.experiments.specs import label_part
from headsweep.reporting.plots import pyplot


def plots(sweep: str, cells: list[Cell], keys: list[str], out_dir: Path) -> list[tuple[Path, str]]:
    """The BLEU plot, and the parameters plot where parameters differ between cells."""
    figures = [bleu_plot(sweep, cells, keys, out_dir)]
    if varies(cells, "params_M"):
        figures.append(params_plot(sweep, cells, out_dir))
    return figures


def bleu_plot(sweep: str, cells: list[Cell], keys: list[str], out_dir: Path) -> tuple[Path, str]:
    plt = pyplot()
    # BLEU against the varied setting: on a number axis when the first varied key tells every cell apart
    # (h in row A, d_k in row B; log2 for sizes per head), else one slot per cell named by its settings.
    key = keys[0]
    numeric = (all(isinstance(c.runs[0].flat[key], (int, float)) for c in cells)
               and len({c.runs[0].flat[key] for c in cells}) == len(cells))
    xlabel = reader_name(key) if numeric or len(keys) == 1 else "cell"
    xs = [c.runs[0].flat[key] if numeric else i for i, c in enumerate(cells)]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    stuck_shown = False
    for x, c in zip(xs, cells):
        ys = c.row["test_bleu_seeds"]
        stuck = [y for y, seed in zip(ys, c.row["seeds"]) if seed in c.row.get("stuck_seeds", [])]  # report_stuck
        ax.scatter([x] * len(ys), ys, color="0.6", s=14, zorder=2, label="one seed" if c is cells[0] else None)
        if stuck:
            ax.scatter([x] * len(stuck), stuck, color="C3", marker="x", s=30, zorder=4,
                       label=None if stuck_shown else "stuck seed (early plateau)")
            stuck_shown = True
        ax.errorbar([x], [c.row["test_bleu"]], yerr=[c.row["test_bleu_sd"] or 0], fmt="o", color="C0",
                    capsize=4, zorder=3, label="mean ± sd over seeds" if c is cells[0] else None)
    base = next((c for c in cells if c.base), None)
    if base is not None:
        ax.axhline(base.row["test_bleu"], color="C1", ls="--", lw=1, label=display(base))
    if numeric and key in ("model.heads", "model.d_k", "model.d_v") and min(xs) > 0:
        ax.set_xscale("log", base=2)
    if numeric:
        ax.set_xticks(sorted(xs), [str(x) for x in sorted(xs)])
    else:
        shown = [k for k in keys if k not in ("model.heads", "model.d_k", "model.d_v")] or keys
        names = [str(c.runs[0].flat[key]) if len(keys) == 1 else
                 "-".join(label_part(k, c.runs[0].flat[k]) for k in shown) for c in cells]
        ax.set_xticks(xs, names, rotation=30 if len(keys) > 1 else 0, ha="right" if len(keys) > 1 else "center",
                      fontsize=8)
        ax.set_xlim(-0.5, len(cells) - 0.5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("test BLEU")
    ax.set_title(f"{sweep}: test BLEU vs {xlabel}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out_dir / f"{sweep}-bleu.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path, (f"Test BLEU of each cell against {xlabel}: each seed (grey), the mean ± sd over seeds (blue), "
                  "the base cell's mean (dashed)" + ("; a red cross marks a seed stuck on an early plateau (Stuck "
                                                     "runs), counted in the mean." if stuck_shown else "."))


def params_plot(sweep: str, cells: list[Cell], out_dir: Path) -> tuple[Path, str]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for c in cells:
        ax.errorbar([c.row["params_M"]], [c.row["test_bleu"]], yerr=[c.row["test_bleu_sd"] or 0], fmt="o",
                    color="C1" if c.base else "C0", capsize=4)
        ax.annotate(display(c), (c.row["params_M"], c.row["test_bleu"]), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("parameters (M)")
    ax.set_ylabel("test BLEU")
    ax.set_title(f"{sweep}: test BLEU vs parameters (mean ± sd over seeds)")
    fig.tight_layout()
    path = out_dir / f"{sweep}-params.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path, "Test BLEU against the number of parameters, mean ± sd over seeds; the base cell in orange."


def cell_curve(cell: Cell, metric: str) -> tuple[list[int], list[float], list[float]]:
    """Steps any seed of the cell validated at, and the mean and sd of `metric` over the seeds that did
    (the report says where a seed has no point: report_table.missing_validations)."""
    curves = [learning_curve(r) for r in cell.runs]
    steps = sorted({s for c in curves for s, v in c.items() if metric in v})
    values = [[c[s][metric] for c in curves if metric in c.get(s, {})] for s in steps]
    return steps, [statistics.fmean(v) for v in values], [statistics.stdev(v) if len(v) > 1 else 0.0 for v in values]


def learning_curves(sweep: str, cells: list[Cell], out_dir: Path) -> tuple[Path, str] | None:
    """Val BLEU (greedy) and val loss against training step, one line per cell with a ±sd band."""
    if not any(cell_curve(c, "val/loss")[0] for c in cells):
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for i, c in enumerate(cells):
        for ax, metric in zip(axes, ("val/bleu", "val/loss")):
            steps, mean, sd = cell_curve(c, metric)
            if not steps:
                continue
            color = f"C{i % 10}"
            ax.plot(steps, mean, marker="o", ms=3, color=color, label=display(c))
            ax.fill_between(steps, [m - s for m, s in zip(mean, sd)], [m + s for m, s in zip(mean, sd)],
                            color=color, alpha=0.15)
    for ax, name in zip(axes, ("val BLEU (greedy)", "val loss (NLL per subword)")):
        ax.set_xlabel("training step")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{sweep}: learning curves, mean ± sd over seeds")
    fig.tight_layout()
    path = out_dir / f"{sweep}-curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path, ("Learning curves: val BLEU (greedy) and val loss against training step, one line per cell, "
                  "mean ± sd over the seeds that validated at that step.")
