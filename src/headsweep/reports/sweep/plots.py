"""The report's plots: test BLEU against the varied setting and, where the cells' sizes differ, against
parameters (mean ± sd over seeds, each seed shown), and learning curves (val BLEU and val loss against
step, mean and band over the seeds that validated there). Each returns its file and a caption."""

from __future__ import annotations

import statistics
from pathlib import Path

from headsweep.identity import follows_join, label_part
from headsweep.reporting.plots import pyplot, save_figure
from headsweep.reports.sweep.cells import Cell, group_cells, learning_curve, load_runs
from headsweep.reports.sweep.lr import split_grid_runs
from headsweep.reports.sweep.table import display, reader_name, varies


def seed_spread(root: Path) -> float | None:
    """What one seed's noise is, measured: the median over every cell with 3 or more seeds under root (each
    set of runs once, whichever sweeps hold it) of the sd of its seeds' test BLEU. None where no cell has 3.
    A one-seed figure spans at least 4 of these, so a gap inside the seed noise looks like one."""
    sds, seen = [], set()
    for sweep_dir in sorted(d for d in root.iterdir() if d.is_dir() and d.name != "runs") if root.is_dir() else []:
        runs = split_grid_runs(load_runs(sweep_dir, sweep_dir.name)[0])[0]
        for c in group_cells(runs) if runs else []:
            values = tuple(sorted(c.values("test/bleu")))
            if len(values) >= 3 and values not in seen:
                seen.add(values)
                sds.append(statistics.stdev(values))
    return statistics.median(sds) if sds else None


def one_seed(cells: list[Cell]) -> bool:
    return {len(c.runs) for c in cells} == {1}


def honest_range(ax, cells: list[Cell], spread: float | None) -> str:
    """A one-seed figure's y-range: at least 4 seed sds wide about its points, and the base's ± 1 sd shaded,
    so a reader sees how much of a gap one seed's noise could make. The caption's words for it."""
    if not one_seed(cells) or not spread:
        return ""
    lo, hi = ax.get_ylim()
    if hi - lo < 4 * spread:
        mid = (lo + hi) / 2
        ax.set_ylim(mid - 2 * spread, mid + 2 * spread)
    base = next((c for c in cells if c.base), None)
    if base is not None:
        y = base.row["test_bleu"]
        ax.axhspan(y - spread, y + spread, color="C1", alpha=0.12, lw=0, label=f"base ± one seed sd ({spread:.2f})")
    return (
        f" One seed per cell: the y-range spans at least 4 seed sds ({spread:.2f} BLEU: the median sd over "
        "seeds of every cell with 3 or more seeds in results/), the base's ± 1 sd shaded."
    )


def plots(
    sweep: str, cells: list[Cell], keys: list[str], out_dir: Path, spread: float | None = None
) -> list[tuple[Path, str]]:
    """The BLEU plot, and the parameters plot where parameters differ between cells. spread: one seed's sd
    (seed_spread), for a one-seed figure's y-range."""
    figures = [bleu_plot(sweep, cells, keys, out_dir, spread)]
    if varies(cells, "params_M"):
        figures.append(params_plot(sweep, cells, out_dir))
    return figures


def over_seeds(cells: list[Cell]) -> str:
    """What a point or line stands for: a mean ± sd only where a cell has more than one seed."""
    counts = {len(c.runs) for c in cells}
    if counts == {1}:
        return "one seed per cell (no spread)"
    if 1 in counts:
        return "mean ± sd over seeds (one seed, no spread, where a cell has only one)"
    return "mean ± sd over seeds"


AXIS_FIRST = ("model.heads", "model.kv_heads")  # the setting a sweep is about, when it varies with others
LOG2_AXES = ("model.heads", "model.kv_heads", "model.d_k", "model.d_v")


def bleu_axes(cells: list[Cell], keys: list[str]) -> tuple[str | None, list[str]]:
    """The x axis of the BLEU plot and the keys that split the cells into lines. The axis is a numeric
    varied setting (h first); d_k and d_v follow h, so they split nothing; the other varied settings
    each give a line (heads_by_width: h on the axis, one line per d_model). None: no such axis tells the
    cells of a line apart, so each cell gets a slot of its own. data.max_len set by data.join alone is neither
    (follows_join): the axis or the lines say the join."""
    keys = [k for k in keys if not follows_join(k, [c.runs[0].flat for c in cells])]
    numeric = [
        k
        for k in keys
        if all(isinstance(c.runs[0].flat[k], (int, float)) and not isinstance(c.runs[0].flat[k], bool) for c in cells)
    ]
    for x in sorted(numeric, key=lambda k: (k not in AXIS_FIRST, keys.index(k))):
        split = [k for k in keys if k != x and not (x == "model.heads" and k in ("model.d_k", "model.d_v"))]
        lines: dict[tuple, list] = {}
        for c in cells:
            lines.setdefault(tuple(repr(c.runs[0].flat[k]) for k in split), []).append(c.runs[0].flat[x])
        if all(len(xs) == len(set(xs)) for xs in lines.values()):
            return x, split
    return None, keys


def naming_keys(split: list[str], cells: list[Cell]) -> list[str]:
    """The settings that name the lines: the first splitting one that alone tells them apart (d_model, when
    d_ff and the learning rate follow it), else all of them."""
    groups = len({tuple(repr(c.runs[0].flat[k]) for k in split) for c in cells})
    return next(([k] for k in split if len({repr(c.runs[0].flat[k]) for c in cells}) == groups), split)


def line_name(cell: Cell, naming: list[str]) -> str:
    return ", ".join(f"{reader_name(k)} {fmt_value(cell.runs[0].flat[k])}" for k in naming)


def fmt_value(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def bleu_figure(sweep: str, cells: list[Cell], keys: list[str], spread: float | None = None):
    """The figure of test BLEU against the varied setting, and its caption."""
    plt = pyplot()
    x_key, split = bleu_axes(cells, keys)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    stuck_shown = False
    colors: dict[str, str] = {}  # cell -> its line's colour, where lines split the cells

    def seeds_at(x, c, color):
        nonlocal stuck_shown
        ys = c.row["test_bleu_seeds"]
        stuck = [y for y, seed in zip(ys, c.row["seeds"]) if seed in c.row.get("stuck_seeds", [])]  # report_stuck
        ax.scatter(
            [x] * len(ys), ys, color=color, s=14, zorder=2, alpha=0.5, label="one seed" if c is cells[0] else None
        )
        if stuck:
            ax.scatter(
                [x] * len(stuck),
                stuck,
                color="C3",
                marker="x",
                s=30,
                zorder=4,
                label=None if stuck_shown else "stuck seed (early plateau)",
            )
            stuck_shown = True

    if x_key is None:  # one slot per cell, named by its settings
        xs = list(range(len(cells)))
        for x, c in zip(xs, cells):
            seeds_at(x, c, "0.6")
            ax.errorbar(
                [x],
                [c.row["test_bleu"]],
                yerr=[c.row["test_bleu_sd"] or 0],
                fmt="o",
                color="C0",
                capsize=4,
                zorder=3,
                label=over_seeds(cells) if c is cells[0] else None,
            )
        names = ["-".join(label_part(k, c.runs[0].flat[k]) for k in keys) for c in cells]
        ax.set_xticks(xs, names, rotation=30, ha="right", fontsize=8)
        ax.set_xlim(-0.5, len(cells) - 0.5)
        xlabel, against = "cell (its settings)", "each cell, named by its settings"
    else:
        naming = naming_keys(split, cells) if split else []
        lines: dict[str, list[Cell]] = {}
        for c in cells:
            lines.setdefault(line_name(c, naming), []).append(c)
        for i, (name, members) in enumerate(lines.items()):
            members.sort(key=lambda c: c.runs[0].flat[x_key])
            color = f"C{i % 10}" if split else "C0"
            colors.update({c.label: color for c in members} if split else {})
            xs = [c.runs[0].flat[x_key] for c in members]
            mean = [c.row["test_bleu"] for c in members]
            sd = [c.row["test_bleu_sd"] or 0 for c in members]
            for x, c in zip(xs, members):
                seeds_at(x, c, color if split else "0.6")
            if split:  # one line per setting, the seeds' spread as a band
                ax.plot(xs, mean, "o-", color=color, zorder=3, label=name)
                ax.fill_between(
                    xs,
                    [m - d for m, d in zip(mean, sd)],
                    [m + d for m, d in zip(mean, sd)],
                    color=color,
                    alpha=0.15,
                    lw=0,
                )
            else:
                ax.errorbar(xs, mean, yerr=sd, fmt="o", color="C0", capsize=4, zorder=3, label=over_seeds(cells))
        every_x = sorted({c.runs[0].flat[x_key] for c in cells})
        if x_key in LOG2_AXES and min(every_x) > 0:
            ax.set_xscale("log", base=2)
        ax.set_xticks(every_x, [fmt_value(x) for x in every_x])
        ax.minorticks_off()
        xlabel = reader_name(x_key)
        by = ", ".join(reader_name(k) for k in naming)
        against = xlabel + (f", one line per {by}" if split else "")
    # the base, and each base a line's cells are compared with (the base at their length or width), in its line's
    # colour: one colour for two lines' bases would read as the other line's
    refs = {c.row.get("against") for c in cells}
    bases = [c for c in cells if c.base or c.label in refs]
    for ref in bases:
        ax.axhline(ref.row["test_bleu"], color=colors.get(ref.label, "C1"), ls="--", lw=1, label=display(ref))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("test BLEU")
    ax.set_title(f"{sweep}: test BLEU vs {xlabel}" + (" (1 seed)" if one_seed(cells) else ""))
    honesty = honest_range(ax, cells, spread)
    ax.legend(fontsize=8)
    fig.tight_layout()
    caption = (
        f"Test BLEU against {against}: the mean over seeds, its ± sd as a band, each seed a dot; "
        + (
            "each line's base cell's mean (dashed, in its line's colour)"
            if len(bases) > 1
            else "the base cell's mean (dashed)"
        )
        if x_key is not None and split and {len(c.runs) for c in cells} != {1}
        else f"Test BLEU against {against}: each seed (dots), {over_seeds(cells)}, the base cell's mean (dashed)"
        if x_key is not None
        else f"Test BLEU of {against}: each seed (grey), {over_seeds(cells)} (blue), the base cell's mean (dashed)"
    )
    caption += (
        "; a red cross marks a seed stuck on an early plateau (Stuck runs), counted in the mean."
        if stuck_shown
        else "."
    )
    return fig, caption + honesty


def bleu_plot(
    sweep: str, cells: list[Cell], keys: list[str], out_dir: Path, spread: float | None = None
) -> tuple[Path, str]:
    fig, caption = bleu_figure(sweep, cells, keys, spread)
    path = out_dir / f"{sweep}-bleu.png"
    save_figure(fig, path, dpi=120)
    pyplot().close(fig)
    return path, caption


def params_figure(sweep: str, cells: list[Cell]):
    """Test BLEU against parameters, one colour per cell named in a legend beside the axes: cells of one
    size share a parameter count, so names written at the points would overlap."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.4, 4.2))
    for i, c in enumerate(cells):
        ax.errorbar(
            [c.row["params_M"]],
            [c.row["test_bleu"]],
            yerr=[c.row["test_bleu_sd"] or 0],
            ls="none",
            color=f"C{i % 10}",
            marker="osD^v<>"[i // 10 % 7],
            capsize=4,
            label=display(c),
        )
    ax.set_xlabel("parameters (M)")
    ax.set_ylabel("test BLEU")
    ax.set_title(f"{sweep}: test BLEU vs parameters" + (" (1 seed)" if one_seed(cells) else ""))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig, f"Test BLEU against the number of parameters, {over_seeds(cells)}; one colour per cell."


def params_plot(sweep: str, cells: list[Cell], out_dir: Path) -> tuple[Path, str]:
    fig, caption = params_figure(sweep, cells)
    path = out_dir / f"{sweep}-params.png"
    save_figure(fig, path, dpi=120)
    pyplot().close(fig)
    return path, caption


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
            ax.fill_between(
                steps, [m - s for m, s in zip(mean, sd)], [m + s for m, s in zip(mean, sd)], color=color, alpha=0.15
            )
    for ax, name in zip(axes, ("val BLEU (greedy)", "val loss (NLL per subword)")):
        ax.set_xlabel("training step")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{sweep}: learning curves, {over_seeds(cells)}" + (" (1 seed)" if one_seed(cells) else ""))
    fig.tight_layout()
    path = out_dir / f"{sweep}-curves.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    spread = (
        "one seed per cell (no spread)"
        if {len(c.runs) for c in cells} == {1}
        else "mean ± sd over the seeds that validated at that step"
    )
    return path, f"Learning curves: val BLEU (greedy) and val loss against training step, one line per cell, {spread}."
