"""How alike each layer's heads are over training (issue 53), per cell: the head-similarity curves that the
training callback (training.callbacks.HeadSimilarity) logs to metrics.csv, mean ± sd over seeds.

Rows: mean pairwise cosine between the heads' W^Q/W^K/W^V slices, between their W^O blocks, and the mean pairwise
Jensen-Shannon divergence between their attention maps on a fixed validation batch; columns: encoder
self-attention, decoder self-attention, cross-attention. A run trained before the callback existed has none of
these columns and draws no line (the caption names its cell). Reads only the runs' metrics CSVs.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from headsweep.reporting.plots import pyplot, save_figure
from headsweep.reports.sweep.cells import Cell, Run, metrics_csv
from headsweep.reports.sweep.table import display
from headsweep.store.pack import open_text

KINDS = (("enc_self", "encoder self"), ("dec_self", "decoder self"), ("cross", "cross"))
MEASURES = (
    ("cos_qkv", "cos W^Q,K,V (heads)"),
    ("cos_o", "cos W^O blocks (heads)"),
    ("js", "JS of maps (bits)"),
)
KEYS = tuple(f"heads/{m}_{k}" for m, _ in MEASURES for k, _ in KINDS)


def similarity_curve(run: Run) -> dict[int, dict[str, float]]:
    """{step: {heads/...: value}} from the run's metrics CSV; empty without one or without the columns. Lightning
    writes a validation after n steps at n - 1, and the callback writes the point at init at -1: step + 1 is the
    number of steps trained (as cells.learning_curve reads it)."""
    path = metrics_csv(run)
    curve: dict[int, dict[str, float]] = {}
    if path is None:
        return curve
    with open_text(path) as f:
        for row in csv.DictReader(f):
            for key in KEYS:
                if row.get(key) and row.get("step"):
                    curve.setdefault(int(row["step"]) + 1, {})[key] = float(row[key])
    return curve


def cell_similarity(cell: Cell, key: str) -> tuple[list[int], list[float], list[float]]:
    """Steps any seed measured at, the mean and sd over the seeds that did."""
    curves = [similarity_curve(r) for r in cell.runs]
    steps = sorted({s for c in curves for s, v in c.items() if key in v})
    values = [[c[s][key] for c in curves if key in c.get(s, {})] for s in steps]
    return steps, [statistics.fmean(v) for v in values], [statistics.stdev(v) if len(v) > 1 else 0.0 for v in values]


def similarity_curves(sweep: str, cells: list[Cell], out_dir: Path) -> tuple[Path, str] | None:
    """The figure and its caption; None when no run of the sweep logged head similarity."""
    measured = [c for c in cells if any(similarity_curve(r) for r in c.runs)]
    if not measured:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(len(MEASURES), len(KINDS), figsize=(12, 9), sharex=True, squeeze=False)
    for i, c in enumerate(cells):
        color = f"C{i % 10}"
        for row, (measure, name) in enumerate(MEASURES):
            for col, (kind, kind_name) in enumerate(KINDS):
                ax = axes[row][col]
                steps, mean, sd = cell_similarity(c, f"heads/{measure}_{kind}")
                if steps:
                    ax.plot(steps, mean, marker="o", ms=3, color=color, label=display(c))
                    ax.fill_between(
                        steps,
                        [m - s for m, s in zip(mean, sd)],
                        [m + s for m, s in zip(mean, sd)],
                        color=color,
                        alpha=0.15,
                    )
                if row == 0:
                    ax.set_title(kind_name, fontsize=10)
                if col == 0:
                    ax.set_ylabel(name)
                if row == len(MEASURES) - 1:
                    ax.set_xlabel("training step")
                ax.grid(alpha=0.3)
    # one legend under the grid: cell names are long, and a legend inside an axes squeezed its column
    named = {}
    for ax in (a for row in axes for a in row):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            named.setdefault(label, handle)
    rows = -(-len(named) // 2)
    fig.legend(list(named.values()), list(named), loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle(f"{sweep}: how alike each layer's heads are (mean over pairs of heads of a layer, over layers)")
    fig.tight_layout(rect=(0, 0.035 * rows + 0.01, 1, 0.97))
    path = out_dir / f"{sweep}-head-similarity.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    unmeasured = [display(c) for c in cells if c not in measured]
    missing = f" No curve for {', '.join(unmeasured)}: trained before the head-similarity log." if unmeasured else ""
    caption = (
        "Head similarity against training step, one line per cell (mean ± sd over seeds), at init and at every "
        "validation: cosine between the heads' W^Q/W^K/W^V slices and between their W^O blocks (1: identical, about "
        "0: independent draws), and the Jensen-Shannon divergence between their attention maps on a fixed "
        f"validation batch (0: the same maps).{missing}"
    )
    return path, caption
