"""The report's section for a sweep whose cells each chose their peak learning rate (`make sweep LR_GRID=`,
headsweep.sweeps.lr_select): each cell's final val loss (a table) and val-loss curve (a plot) at every
grid rate, the chosen rate, and the cells compared at their chosen rates beside the comparison at the
default (common) rate on seed 1. The grid runs are no seeds of their cells: the main table never sees them."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from headsweep import store
from headsweep.reporting.markdown import table as markdown_table
from headsweep.reporting.plots import pyplot, save_figure
from headsweep.reports.sweep.cells import Cell, Run, learning_curve, load_runs
from headsweep.reports.sweep.table import display
from headsweep.sweeps.lr_select import GRID_PHASE, LR_KEY, SELECT_ON, SELECT_WHAT, TIE, choose, lr_text
from headsweep.sweeps.reuse import finished_runs


def lr_record(run: Run) -> dict | None:
    return run.results["config"].get("lr_select")


def split_grid_runs(runs: list[Run]) -> tuple[list[Run], list[Run]]:
    """(the cells' runs, the grid runs of phase 1)."""
    grid = [r for r in runs if (lr_record(r) or {}).get("phase") == GRID_PHASE]
    return [r for r in runs if r not in grid], grid


def phase_one_only(sweep_dir: Path) -> int:
    """How many runs a sweep holds when every one is a learning-rate grid run (phase 1, or a rate check past a
    grid's edge): `make report` has no cells to show for it, and the page of the sweep it checks reads them from
    results/. 0 where it holds a run of phase 2, or none."""
    runs, grid = split_grid_runs(load_runs(sweep_dir, sweep_dir.name)[0])  # as the report reads them
    return 0 if runs else len(grid)


def grid_cell(run: Run) -> str:
    """The cell a grid run tried a rate for: its cell label without the -lr<v> it is tagged with."""
    suffix = f"-lr{lr_text(run.flat[LR_KEY])}"
    return run.cell[: -len(suffix)] if run.cell.endswith(suffix) else run.cell


def _loss(run: Run) -> float:
    loss = run.results["metrics"].get(SELECT_ON, math.nan)
    return math.inf if math.isnan(loss) else loss


def _f(x: float | None, digits: int = 2) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def _delta(x: float | None, base: float | None) -> str:
    return "" if x is None or base is None else f" ({x - base:+.2f})"


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def lr_section(
    sweep: str, cells: list[Cell], grid_runs: list[Run], out_dir: Path, root: Path | None = None
) -> tuple[str, list]:
    """(markdown, figures) of the learning-rate choice; ("", []) for a sweep without a grid. `root` (the
    results root): where to look for a chosen edge rate's neighbour beyond the grid (beyond_edge)."""
    if not grid_runs:
        return "", []
    by_cell, grids, chosen = choices(grid_runs)
    grid = sorted({v for rates in by_cell.values() for v in rates})
    names = {c.label: c for c in cells}
    order = [c.label for c in cells if c.label in by_cell] + sorted(set(by_cell) - set(names))
    chosen = {label: chosen[label] for label in order if label in chosen}
    md = [
        "## Learning rate chosen per cell",
        "",
        f"- Seed 1 of every cell trained at each peak learning rate of {grid_words(order, grids)}; "
        f"each cell's rate is the one with the lowest {SELECT_WHAT} (never a test split; ties within {TIE:g}: "
        "the smaller rate), and every seed of the cell in the table above trained at it (seed 1: the grid run, "
        "reused).",
        "- The selecting seed's bias: seed 1 at the chosen rate won on its own validation loss, so its scores "
        "lean optimistic. The comparison below shows each cell on every seed and on seeds 2..N alone, which "
        "took no part in the choice; where the two disagree, trust the second.",
        "",
    ]
    header = ["cell", *[f"val loss @ {lr_text(v)}" for v in grid], "chosen", "default"]
    rows = []
    for label in order:
        rates = by_cell[label]
        default = _default_rate(names.get(label))
        bold = lambda v, text, label=label: f"**{text}**" if chosen.get(label) == v else text  # noqa: E731
        rows.append(
            [
                display(names[label]) if label in names else label,
                *[
                    bold(v, _f(_loss(rates[v]), 4))
                    if v in rates
                    else "not run"
                    if v in grids[label]
                    else "not in its grid"
                    for v in grid
                ],
                lr_text(chosen[label]) if label in chosen else "waits",
                lr_text(default) if default else "–",
            ]
        )
    md += [
        f"Final val loss of seed 1 ({SELECT_ON}) at each rate; the chosen one in bold:",
        "",
        *markdown_table(header, rows),
        "",
    ]
    md += edge_section(root, by_cell, grids, chosen)
    md += comparison(cells, by_cell, chosen)
    figures = [f for f in (loss_plot(sweep, order, by_cell, chosen, grid, out_dir),) if f]
    return "\n".join(md), figures


def choices(grid_runs: list[Run]) -> tuple[dict[str, dict[float, Run]], dict[str, list[float]], dict[str, float]]:
    """The grid runs by cell and rate, each cell's own grid, and the rate each cell with its whole grid run
    chose (lowest val loss; ties: the smaller rate)."""
    by_cell: dict[str, dict[float, Run]] = {}
    for r in sorted(grid_runs, key=lambda r: r.flat[LR_KEY]):
        by_cell.setdefault(grid_cell(r), {})[r.flat[LR_KEY]] = r
    grids = cell_grids(by_cell)
    chosen = {
        label: choose({v: _loss(rates[v]) for v in grids[label]})
        for label, rates in by_cell.items()
        if all(v in rates for v in grids[label])
    }
    return by_cell, grids, chosen


def edge_section(
    root: Path | None, by_cell: dict[str, dict[float, Run]], grids: dict[str, list[float]], chosen: dict[str, float]
) -> list[str]:
    """edge_lines for the cells' choices, with runs past an edge looked up in the results root (if given)."""
    return edge_lines(
        chosen,
        grids,
        beyond_edge(root, by_cell, chosen, grids) if root else {},
        {label: _loss(by_cell[label][v]) for label, v in chosen.items()},
    )


def cell_grids(by_cell: dict[str, dict[float, Run]]) -> dict[str, list[float]]:
    """Each cell's own grid: the rates its grid runs were planned under (each records its sweep's grid), else
    the rates it has. A grid widened later for some cells only (kv_heads_lr's 4e-3, for the base and kv 1) is
    theirs alone: a cell whose sweep never planned that rate chose among its own, and does not wait for it."""
    grids = {}
    for label, rates in by_cell.items():
        planned = {v for r in rates.values() for v in (lr_record(r) or {}).get("grid") or []}
        grids[label] = sorted(planned or rates)
    return grids


def grid_words(order: list[str], grids: dict[str, list[float]]) -> str:
    """'the grid 0.0005, 0.001' when every cell has the same; else each grid with the cells that used it."""
    by_grid: dict[tuple, list[str]] = {}
    for label in order:
        by_grid.setdefault(tuple(grids[label]), []).append(label)
    if len(by_grid) == 1:
        return f"the grid {', '.join(map(lr_text, next(iter(by_grid))))}"
    return (
        "its grid (the cells' grids differ: "
        + "; ".join(f"{', '.join(map(lr_text, g))} for {', '.join(labels)}" for g, labels in by_grid.items())
        + ")"
    )


def _without_rate(config: dict) -> str:
    """The experiment's key less its peak rate: the same run at another rate shares it."""
    settings = {k: v for k, v in store.saved_settings(config).items() if k != LR_KEY}
    return store.settings_key(settings, config.get("seed"))


def beyond_edge(
    root: Path, by_cell: dict[str, dict[float, Run]], chosen: dict[str, float], grids: dict[str, list[float]]
) -> dict[str, dict[float, float]]:
    """For each cell that chose the grid's smallest or largest rate: the final val loss of every finished
    run in results/ (any sweep) of the same experiment and seed at a rate past that edge. Another sweep may
    have tried it (kv_heads_lr's 4e-3 runs): then the edge is bracketed after all, or plainly not."""
    wanted = {
        _without_rate(by_cell[label][v].results["config"]): (label, v)
        for label, v in chosen.items()
        if len(grids[label]) > 1 and v in (grids[label][0], grids[label][-1])
    }
    found: dict[str, dict[float, float]] = {}
    if not wanted:
        return found
    for _, record in finished_runs(Path(root)):
        hit = wanted.get(_without_rate(record.config))
        rate = store.saved_settings(record.config).get(LR_KEY)
        loss = (record.metrics or {}).get(SELECT_ON)
        if hit is None or rate is None or loss is None:
            continue
        label, v = hit
        if (v == grids[label][-1] and rate > v) or (v == grids[label][0] and rate < v):
            found.setdefault(label, {})[rate] = math.inf if math.isnan(loss) else loss
    return found


def edge_lines(
    chosen: dict[str, float],
    grids: dict[str, list[float]],
    beyond: dict[str, dict[float, float]] | None = None,
    losses: dict[str, float] | None = None,
) -> list[str]:
    """A cell whose best rate is its grid's smallest or largest (`grids`: each cell's) may do better beyond it:
    the grid did not bracket its optimum, so the comparison at the chosen rates is a comparison at the best
    rate tried. A run past the edge found in results/ (`beyond`, with the chosen rate's loss in `losses`) that
    did worse brackets it; one that did better is named."""
    grids = {label: grids[label] for label in chosen if len(grids[label]) > 1}
    if not grids:
        return []
    beyond, losses = beyond or {}, losses or {}
    at_edge = {label: v for label, v in chosen.items() if label in grids and v in (grids[label][0], grids[label][-1])}
    bracketed = {
        label: v
        for label, v in at_edge.items()
        if beyond.get(label) and label in losses and min(beyond[label].values()) > losses[label]
    }
    open_edge = {label: v for label, v in at_edge.items() if label not in bracketed}
    lines = []
    if not open_edge:
        shared = {tuple(g) for g in grids.values()}
        lo, *_, hi = next(iter(shared))
        where = f"the grid ({lr_text(lo)} to {lr_text(hi)})" if len(shared) == 1 else "its own grid"
        lines = [
            f"- Every cell's chosen rate lies inside {where}"
            + (", or at its edge with a worse run past it (below)." if bracketed else ".")
        ]
    else:

        def past(label):
            runs = beyond.get(label, {})
            return (
                ""
                if not runs
                else " [past it, in results/: "
                + ", ".join(f"{lr_text(r)} val loss {_f(x, 3)}" for r, x in sorted(runs.items()))
                + "]"
            )

        names = ", ".join(f"{label} ({lr_text(v)}){past(label)}" for label, v in open_edge.items())
        lines = [
            f"- **At the grid's edge: {len(open_edge)} of {len(chosen)} cells** chose the smallest or the "
            f"largest rate tried: {names}. Their best rate may lie beyond the grid; widen it (e.g. LR_GRID "
            "with a rate past that edge) before reading their difference as the attention setting's."
        ]
    for label, v in bracketed.items():
        runs = ", ".join(f"{lr_text(r)} (val loss {_f(x, 3)})" for r, x in sorted(beyond[label].items()))
        lines.append(
            f"- {label} chose {lr_text(v)}, the grid's edge, at val loss {_f(losses[label], 3)}; the same "
            f"experiment and seed past that edge, run by another sweep in results/, did worse: {runs}. "
            "Its best rate lies inside what was tried."
        )
    return [*lines, ""]


def _default_rate(cell: Cell | None) -> float | None:
    """The rate the cell trains at without a grid (recorded by phase 2's jobs)."""
    if cell is None:
        return None
    return next(((lr_record(r) or {}).get("default") for r in cell.runs if (lr_record(r) or {}).get("default")), None)


def _at(rates: dict[float, Run], rate: float | None) -> Run | None:
    return next((r for v, r in rates.items() if rate is not None and abs(v - rate) <= 1e-9 * rate), None)


def comparison(cells: list[Cell], by_cell: dict[str, dict[float, Run]], chosen: dict[str, float]) -> list[str]:
    """Test BLEU at the chosen rates (every seed, seeds 2..N) beside seed 1 at the default rate and at the
    chosen one; each with its difference from the base cell."""
    rows_data = []
    for c in cells:
        rates = by_cell.get(c.label, {})
        at_default = _at(rates, _default_rate(c))
        at_chosen = _at(rates, chosen.get(c.label))
        every = [r.results["metrics"]["test/bleu"] for r in c.runs]
        later = [r.results["metrics"]["test/bleu"] for r in c.runs if r.seed != min(x.seed for x in c.runs)]
        rows_data.append(
            (
                c,
                at_default and at_default.results["metrics"]["test/bleu"],
                at_chosen and at_chosen.results["metrics"]["test/bleu"],
                _mean(every),
                len(every),
                _mean(later),
                len(later),
            )
        )
    base = next((d for d in rows_data if d[0].base), None)
    rows = []
    for c, d1, c1, m, n, m2, n2 in rows_data:
        b = base or (None,) * 7
        rows.append(
            [
                display(c),
                lr_text(chosen[c.label]) if c.label in chosen else "–",
                _f(d1) + _delta(d1, b[1]),
                _f(c1) + _delta(c1, b[2]),
                f"{_f(m)}{_delta(m, b[3])} (n={n})",
                f"{_f(m2)}{_delta(m2, b[5])} (n={n2})" if n2 else "–",
            ]
        )
    header = [
        "cell",
        "chosen rate",
        "seed 1 @ default rate",
        "seed 1 @ chosen rate",
        "every seed @ chosen",
        "seeds 2..N @ chosen (unbiased)",
    ]
    return [
        "Test BLEU (Δ against the base cell in brackets): at the default (common) peak rate, seed 1 only "
        "(– where the grid lacks a cell's default), beside the cells at their chosen rates:",
        "",
        *markdown_table(header, rows),
        "",
    ]


def loss_plot(
    sweep: str, order: list[str], by_cell: dict, chosen: dict, grid: list[float], out_dir: Path
) -> tuple[Path, str] | None:
    """Left: final val loss against the peak rate, one line per cell, the chosen rate ringed. Right: each
    grid run's val-loss curve (colour: cell, line style: rate)."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    styles = ["-", "--", ":", "-."]
    for i, label in enumerate(order):
        color, rates = f"C{i % 10}", by_cell[label]
        xs = sorted(rates)
        left.plot(
            xs,
            [_loss(rates[v]) if math.isfinite(_loss(rates[v])) else math.nan for v in xs],
            marker="o",
            color=color,
            label=label,
        )
        if label in chosen:
            left.scatter([chosen[label]], [_loss(rates[chosen[label]])], s=120, facecolors="none", edgecolors=color)
        for v in xs:
            curve = sorted((s, p["val/loss"]) for s, p in learning_curve(rates[v]).items() if "val/loss" in p)
            if curve:
                right.plot(
                    *zip(*curve),
                    color=color,
                    ls=styles[grid.index(v) % len(styles)],
                    lw=1,
                    label=f"{label} @ {lr_text(v)}",
                )
    left.set_xscale("log")
    left.set_xticks(grid, [lr_text(v) for v in grid])
    left.minorticks_off()  # a log axis labels minor ticks too (6e-4 beside 0.0005): only the grid's rates
    left.set_xlabel("peak learning rate")
    left.set_ylabel("final val loss (seed 1)")
    left.legend(fontsize=7)
    right.set_xlabel("training step")
    right.set_ylabel("val loss")
    right.legend(fontsize=6)
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.suptitle(f"{sweep}: the learning-rate grid (seed 1)")
    fig.tight_layout()
    path = out_dir / f"{sweep}-lr.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path, (
        "The learning-rate grid, seed 1: final val loss against the peak rate per cell (the chosen "
        "rate ringed), and each grid run's val-loss curve (line style: rate)."
    )
