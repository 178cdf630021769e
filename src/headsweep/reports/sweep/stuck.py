"""Stuck runs: runs that sat on an early plateau, found by their val loss early in training, flagged in the
report and shown beside every number, never dropped from one.

Early val loss: a run's val loss at the validation nearest EARLY_SHARE (40%) of its trainer.max_steps
(step 460 of 1,150 under budget=ablation, 920 of 2,300 at twice it). Its excess: that minus the median of
the same validation over the runs of its reference cell, the sweep's base cell or, for a cell of another
model size (N, d_model, d_ff), the base at that size where the sweep has one (the cell the report compares
it with: a wider model's early loss is lower whatever its h), at the run's own peak rate where that cell has runs
there (issue 54: its seeds, or its LR-grid run at that rate; `same_rate_references`), so that a cell trained at a
lower chosen rate is not flagged for its rate: heads_fixed_dk_fan_in's h 32 at 1e-3 reads +0.44-0.51 against the
base at 2e-3 and +0.27-0.33 against the base's grid run at 1e-3. The report names each reference. A run is
stuck when its excess is above the threshold.

The threshold, chosen from the data (`choose_threshold`): pool the excess of every distinct run under the
results folder (a run copied into several sweeps counts once). Seed noise is the sd of the base runs'
excesses (their scatter around their own cell's median). Leave out everything within FLOOR_SPREADS (5) of
those sds of the base, where seeds scatter and cells differ by design. The threshold is the midpoint of the
widest gap between consecutive pooled excesses above that floor, among the gaps that leave at least
MIN_GROUP (3) runs above them (one extreme run makes no group). On the 112 distinct shipped runs of 12
sweeps: seed sd 0.029 over 17 base runs, floor 0.144, widest gap 0.337 -> 0.391, threshold 0.364 (the
SHIPPED_THRESHOLD); 20 runs above it (every kv 1 and kv 2 run, every h = 1 run at d_model 512, three of
the six h = 32 / d_k = 32 runs, two head-dropout-0.2 runs), and every one ended at or below 29.5 test BLEU.
When the pooled runs cannot support the rule (fewer than two base runs, or no such gap), the report uses
SHIPPED_THRESHOLD and says so. `make report ARGS="--stuck-threshold X"` (0 < X < 10) overrides it.

Which runs are pooled: where the results folder holds every CALIBRATION_SWEEPS sweep (the 11 of the 12 above
whose runs were complete when the rule was chosen), only theirs, so the threshold is fixed before a new sweep's
runs are seen and a new sweep cannot move an old sweep's flags. Pooling everything let row C's N 4 (a model
that trains slowly, not one that sat on a plateau) open a new widest gap and move the threshold from 0.353 to
0.576 on every page, unflagging runs of other sweeps. A results folder without them (a user's own) pools all
its runs.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from scipy.stats import pearsonr

from headsweep.reporting.stats import mean_sd
from headsweep.reports.sweep.cells import Cell, Run, learning_curve

EARLY_SHARE = 0.4  # of trainer.max_steps: where a stuck run's plateau shows and a normal run has left it
FLOOR_SPREADS = 5  # gaps count only this many seed sds above the base
MIN_GROUP = 3  # runs at least above a gap for it to set the threshold
SHIPPED_THRESHOLD = 0.364  # the rule on the 112 shipped runs; the fallback where the data are too few
# the sweeps the rule was chosen on (their runs complete then): pooled alone wherever all are present
CALIBRATION_SWEEPS = (
    "fixed_heads",
    "heads_budget_2x",
    "heads_budget_2x_fp32",
    "heads_by_width",
    "heads_by_width_512_fp32",
    "heads_fixed_dk",
    "heads_fixed_dk_fp32",
    "heads_specialise",
    "kv_heads",
    "table3_a",
    "table3_b",
)
THRESHOLD_RANGE = (0.0, 10.0)  # open: a val-loss difference (nats per subword) a report can use


@dataclass(frozen=True)
class Early:
    """A run's early val loss and its excess over its reference cell's median there."""

    step: int
    loss: float
    reference: str  # the reference cell's label
    reference_median: float
    excess: float
    # the same difference at the run's last validation: a run that sat on a plateau keeps its gap, a run that
    # only learns slower (a higher dropout) narrows it; None where the reference has no val loss at the end
    end_excess: float | None = None
    # a cell that is its own size's reference (row C's N 4: no base of its size) against the sweep's base at its
    # rate, net of the final gap: (early - base's early median) - (end - base's end median). A model of another
    # size sits above or below the base by about its final gap throughout; a cell stuck whole on a plateau that it
    # left later sits further above it early. None for every other cell
    net: float | None = None
    net_reference: str | None = None


def is_stuck(e: Early, threshold: float) -> bool:
    """Above the threshold over its reference early, or (a size's own reference) net of its final gap."""
    return e.excess > threshold or (e.net is not None and e.net > threshold)


def gap_words(e: Early, step: bool = True) -> str:
    """'+0.383 at step 459, +0.240 at the end': the gap to the reference early and at the end."""
    end = "" if e.end_excess is None else f", {e.end_excess:+.3f} at the end"
    net = "" if e.net is None else f"; against {e.net_reference} net of the end gap {e.net:+.3f}"
    return f"{e.excess:+.3f}{f' at step {e.step}' if step else ''}{end}{net}"


@dataclass(frozen=True)
class Threshold:
    value: float
    how: str  # "data": the rule on the pooled runs; "shipped": its fallback; "given": --stuck-threshold
    n_runs: int = 0
    n_base: int = 0
    n_sweeps: int = 0
    seed_sd: float | None = None
    floor: float | None = None
    gap: tuple[float, float] | None = None
    calibration: bool = False  # pooled the CALIBRATION_SWEEPS only (else every sweep in the results folder)


def check_threshold(value: float | None) -> float | None:
    """--stuck-threshold: None (choose from the data) or a number in (0, 10); anything else is one line."""
    if value is None:
        return None
    lo, hi = THRESHOLD_RANGE
    if not (isinstance(value, (int, float)) and lo < value < hi):  # NaN fails too
        raise ValueError(
            f"--stuck-threshold: got {value!r}; allowed: a number between {lo:g} and {hi:g} "
            "(exclusive), the rise in early val loss over the base's median, in nats per subword, "
            "above which a run counts as stuck; leave it out to choose it from the data"
        )
    return float(value)


def end_point(run: Run) -> tuple[int, float] | None:
    """(step, val loss) at the run's last validation; None without a val loss in its metrics CSV."""
    points = sorted((s, v["val/loss"]) for s, v in learning_curve(run).items() if "val/loss" in v)
    return points[-1] if points else None


def early_point(run: Run) -> tuple[int, float] | None:
    """(step, val loss) at the validation nearest EARLY_SHARE of the run's trainer.max_steps (the earlier of
    two as near); None without a val loss in its metrics CSV."""
    points = sorted((s, v["val/loss"]) for s, v in learning_curve(run).items() if "val/loss" in v)
    if not points:
        return None
    target = EARLY_SHARE * run.results["config"]["trainer"]["max_steps"]
    return min(points, key=lambda p: abs(p[0] - target))


LR_KEY = "module.peak_lr"


def _rate(c: Cell) -> float | None:
    rates = {r.flat.get(LR_KEY) for r in c.runs}
    return next(iter(rates)) if len(rates) == 1 else None


def same_rate_references(cells: list[Cell], references: dict[str, Cell], grid_runs: list[Run]) -> dict[str, Cell]:
    """Each cell's reference at the cell's own peak rate (issue 54): a cell trained at a lower chosen rate starts
    slower for its rate alone, so its early loss is compared with the reference cell's runs at that rate where
    it has some: its seeds there, else its learning-rate grid run there (every LR-grid sweep has one per rate).
    Such a reference is named '<cell> at lr <v>'; without runs at the rate the reference stays the cell at its
    own rate, named '<cell> (at lr <its rate>; none at <v>)'. A cell at the reference's own rate keeps it."""
    from headsweep.reports.sweep.lr import grid_cell  # report_lr imports the sweep planning: only here

    out = {}
    for c in cells:
        ref = references[c.label]
        rate, ref_rate = _rate(c), _rate(ref)
        if ref is c or rate is None or ref_rate is None or rate == ref_rate:
            out[c.label] = ref
            continue
        runs = [r for r in ref.runs if r.flat.get(LR_KEY) == rate]
        runs += [r for r in grid_runs if grid_cell(r) == ref.label and r.flat.get(LR_KEY) == rate]
        if runs:
            out[c.label] = Cell(f"{ref.label} at lr {rate:g}", runs)
        else:
            out[c.label] = Cell(f"{ref.label} (at lr {ref_rate:g}; none at {rate:g})", ref.runs)
    return out


def size_bases(cells: list[Cell], grid_runs: list[Run]) -> dict[str, Cell]:
    """Each cell's base at the cell's own rate (same_rate_references): what early_losses reads a size's own
    reference against, net of its final gap; {} without a cell tagged base."""
    base = next((c for c in cells if c.base), None)
    return {} if base is None else same_rate_references(cells, {c.label: base for c in cells}, grid_runs)


def early_losses(
    cells: list[Cell], references: dict[str, Cell], bases: dict[str, Cell] | None = None
) -> dict[Path, Early]:
    """Each run's Early, by run directory; a run without a validation, or whose reference cell has none,
    is absent (said in the report as not checked). A reference may hold runs of no cell (a learning-rate grid's:
    same_rate_references). bases: each cell's base at its rate (same_rate_references of the base); a cell that is
    its own reference but no base gets its `net` against it."""
    bases = bases or {}
    every = [r for c in [*cells, *references.values(), *bases.values()] for r in c.runs]
    points = {r.dir: early_point(r) for r in every}
    ends = {r.dir: end_point(r) for r in every}
    medians, end_medians = {}, {}
    for ref in {id(v): v for v in [*references.values(), *bases.values()]}.values():
        losses = [points[r.dir][1] for r in ref.runs if points.get(r.dir)]
        medians[ref.label] = statistics.median(losses) if losses else None
        losses = [ends[r.dir][1] for r in ref.runs if ends.get(r.dir)]
        end_medians[ref.label] = statistics.median(losses) if losses else None
    out = {}
    for c in cells:
        ref = references[c.label]
        own = bases.get(c.label) if ref is c and not c.base else None  # a size's own reference: also the base
        for r in c.runs:
            if points[r.dir] is None or medians[ref.label] is None:
                continue
            step, loss = points[r.dir]
            end = None if end_medians[ref.label] is None else ends[r.dir][1] - end_medians[ref.label]
            net = None
            if own is not None and medians[own.label] is not None and end_medians[own.label] is not None:
                net = (loss - medians[own.label]) - (ends[r.dir][1] - end_medians[own.label])
            out[r.dir] = Early(
                step,
                loss,
                ref.label,
                medians[ref.label],
                loss - medians[ref.label],
                end,
                net=net,
                net_reference=None if net is None else own.label,
            )
    return out


def choose_threshold(
    excesses: list[float], base_excesses: list[float], n_sweeps: int = 0, calibration: bool = False
) -> Threshold:
    """The module's rule on pooled excesses (every distinct run's, base runs included) and the base runs'
    excesses; SHIPPED_THRESHOLD where the data cannot support it. calibration: the pool is the
    CALIBRATION_SWEEPS' (said in the report)."""
    counts = dict(n_runs=len(excesses), n_base=len(base_excesses), n_sweeps=n_sweeps, calibration=calibration)
    if len(base_excesses) < 2:
        return Threshold(SHIPPED_THRESHOLD, "shipped", **counts)
    seed_sd = statistics.stdev(base_excesses)
    floor = statistics.median(base_excesses) + FLOOR_SPREADS * seed_sd
    above = sorted(x for x in excesses if x > floor)
    # gaps between consecutive excesses above the floor, leaving at least MIN_GROUP runs above each
    gaps = [(hi - lo, lo, hi) for i, (lo, hi) in enumerate(zip(above, above[1:])) if len(above) - (i + 1) >= MIN_GROUP]
    if not gaps:
        return Threshold(SHIPPED_THRESHOLD, "shipped", seed_sd=seed_sd, floor=floor, **counts)
    _, lo, hi = max(gaps)
    return Threshold((lo + hi) / 2, "data", seed_sd=seed_sd, floor=floor, gap=(lo, hi), **counts)


def flag(cells: list[Cell], early: dict[Path, Early], threshold: float) -> None:
    """Fill each cell's row: its runs' early losses and stuck flags, and test BLEU with and without the stuck
    runs (every run stays in every other number of the report)."""
    for c in cells:
        seeds = [(r.seed, early.get(r.dir), r.results["metrics"]["test/bleu"]) for r in c.runs]
        stuck = [s for s, e, _ in seeds if e is not None and is_stuck(e, threshold)]
        kept = [b for s, _, b in seeds if s not in stuck]
        c.row.update(
            early=seeds,
            stuck_seeds=stuck,
            checked=sum(e is not None for _, e, _ in seeds),
            bleu_all=mean_sd([b for *_, b in seeds]),
            bleu_kept=mean_sd(kept),
            n_kept=len(kept),
        )
        c.row["early_words"] = early_words(c, threshold)  # the cell's details (report_table.cell_details)


def disagreeing(cells: list[Cell]) -> list[Cell]:
    """Cells whose checked seeds disagree: some stuck, some not."""
    return [c for c in cells if c.row["stuck_seeds"] and len(c.row["stuck_seeds"]) < c.row["checked"]]


def correlation(pairs: list[tuple[float, float]]) -> float | None:
    """Pearson's r (scipy) between early val loss and test BLEU; None below 3 runs or for a constant side."""
    if len(pairs) < 3 or len({x for x, _ in pairs}) < 2 or len({y for _, y in pairs}) < 2:
        return None
    return float(pearsonr([x for x, _ in pairs], [y for _, y in pairs]).statistic)


def early_words(c: Cell, threshold: float) -> str:
    """A cell's details: each seed's early val loss and excess, stuck ones marked."""
    parts = []
    for seed, e, _ in c.row["early"]:
        if e is None:
            parts.append(f"seed {seed} not checked (no val loss)")
        else:
            mark = " STUCK" if is_stuck(e, threshold) else ""
            net = "" if e.net is None else f"; net {e.net:+.3f}"
            parts.append(f"seed {seed} {e.loss:.3f} at step {e.step} ({e.excess:+.3f}{net}){mark}")
    checked = [e for _, e, _ in c.row["early"] if e is not None]
    ref = checked[0] if checked else None
    against = f" against {ref.reference}'s median {ref.reference_median:.3f}" if ref else ""
    if ref and ref.reference == c.label and not c.base:  # the reference of its own size (row C's N 4)
        against = (
            f" against its own seeds' median {ref.reference_median:.3f} (it is its size's reference: a seed stuck "
            "among them shows)"
            if len(checked) > 1
            else " against itself (its size's reference, one seed)"
        )
        against += (
            f" and against {ref.net_reference} net of the gap at the end (early gap minus end gap: a cell "
            "stuck whole on a plateau it left later shows; one that never left it shows only in its BLEU)"
            if ref.net is not None
            else "; no base to check it against net of its final gap, so a cell stuck whole does not show"
        )
    return f"early val loss{against} (stuck above +{threshold:.3f}): " + "; ".join(parts)
