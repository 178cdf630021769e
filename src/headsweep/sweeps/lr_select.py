"""A peak learning rate chosen per cell: `make sweep SWEEP=<spec> SEEDS=3 LR_GRID=5e-4,1e-3,2e-3`.

A cell that loses at the one common peak may simply want another rate. So the sweep runs in two phases,
both by one command and resumable like any sweep (a rerun skips what is finished):

1. grid: seed 1 of every cell at each grid value (module.peak_lr=<v>), jobs named <cell>-lr<v>-s1;
2. chosen: for each cell whose grid runs are all complete, the rate whose seed-1 run ended with the lowest
   validation loss, then seeds 1..N of the cell at that rate as the ordinary jobs <cell>-s<seed>. Seed 1
   is the grid run at that rate, copied, not trained again.

The selection reads one number: results.json metrics["val/loss"], the loss on data.val_split of the final weights
(train.fit_and_test validates them when the last validation came earlier), never averaged weights and never a test
split: there is no option to choose on anything else. A diverged run (NaN) counts as the worst; ties (equal to 1e-6)
go to the smaller rate, so the choice is deterministic. A grid run its time cap stopped before trainer.max_steps
cannot choose (store.stopped_short): the sweep stops with one line.

The selecting seed's bias: seed 1 at the chosen rate won on its own validation loss, so its scores lean optimistic
(a winner's curse). The report compares the cells on every seed and on seeds 2..N only.

Every job records the grid in its config (`lr_select`, tags lr-grid / lr-chosen and lr<v>): a grid job its phase and
grid; a chosen-rate job also the rate, each grid value's loss and the runs they came from.

Grids as run (issue 54): each cell has its own grid. A later command with a wider LR_GRID and a narrow ONLY (edge
runs for two cells) widens the grid of the cells it runs (`extended_from`: the grid before); a cell whose grid runs
ONLY leaves out keeps the grid its runs were recorded under. A grid over a sweep first planned at one rate uses its
seeds, never overwriting them: headsweep.sweeps.lr_plain.
"""

from __future__ import annotations

import fnmatch
import math
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from headsweep import store
from headsweep.config import SWEEPS_DIR
from headsweep.store import as_seen, read_record, stopped_short, write_record
from headsweep.sweeps import launch, lr_plain, planning
from headsweep.sweeps.classes import class_bases
from headsweep.sweeps.jobs import Job, Sweep
from headsweep.sweeps.reuse import find_reuse, finished_runs
from headsweep.sweeps.specs import SweepError, load_spec, record_override, split_parameters
from headsweep.sweeps.sweep_settings import shared_overrides
from headsweep.training.runs import RESULTS, is_complete, read_results

LR_KEY = "module.peak_lr"
SELECT_ON = "val/loss"  # results.json metrics: the final weights' loss on data.val_split
SELECT_WHAT = "final val/loss of seed 1 (data.val_split, the last step's weights)"
TIE = 1e-6
GRID_PHASE, CHOSEN_PHASE = "grid", "chosen"


def lr_text(v: float) -> str:
    return f"{v:g}"


def grid_job_name(cell: str, v: float, seed: int = 1) -> str:
    return f"{cell}-lr{lr_text(v)}-s{seed}"


def check_no_lr_setting(name: str, spec: dict, path: Path, extra: list[str]) -> None:
    """An LR grid sets module.peak_lr itself: a spec or command that sets it too would be overridden unseen."""
    if LR_KEY in spec["parameters"]:
        raise SweepError(
            f"{path}: the spec sets {LR_KEY} and --lr-grid chooses it per cell: use one of them "
            f"(drop LR_GRID, or run a spec without {LR_KEY})"
        )
    if any(o.lstrip("+~").split("=", 1)[0] == LR_KEY for o in extra):
        raise SweepError(
            f"override {next(o for o in extra if o.lstrip('+~').startswith(LR_KEY))}: --lr-grid "
            f"sets {LR_KEY} per job; drop the override"
        )


@dataclass
class CellGrid:
    label: str
    base: bool
    default_lr: float  # the cell's peak without a grid (conf/module: width-scaled)
    jobs: list[Job]  # the cell's default-rate jobs from planning.plan, one per seed
    flat: dict  # the cell's settings (find_reuse), module.peak_lr replaced per job
    grid_jobs: dict[float, Job] = field(default_factory=dict)
    grid: list[float] = field(default_factory=list)  # the cell's own grid: the command's, or as its runs recorded
    extended_from: list[float] | None = None  # the grid this command widened for the cell (an edge extension)


@dataclass
class LrPlan:
    name: str
    grid: list[float]
    seeds: list[int]
    cells: list[CellGrid]
    grid_sweep: Sweep
    results: Path
    finished: list
    give_way: list[Path] = field(default_factory=list)  # plain seed-1 views the chosen grid run replaces (lr_plain)
    held: dict[str, str] = field(default_factory=dict)  # cell -> why it waits on plain seeds at another rate


def lr_record(phase: str, grid: list[float], **more) -> dict:
    return {"phase": phase, "grid": list(grid), "select_on": SELECT_ON, **more}


def _job(template: Job, sweep: Sweep, results: Path, *, name: str, lr: float, record: dict, grid_run: bool) -> Job:
    """`template` (a default-rate job of planning.plan) at rate `lr`. A grid run is a cell of its own for
    every reader of results/ (cell tag <cell>-lr<v>, never the base), so it never counts as a seed of its cell."""
    keep = [o for o in template.overrides if not o.startswith((f"{LR_KEY}=", "seed="))]
    cell = f"{template.cell}-lr{lr_text(lr)}" if grid_run else template.cell
    tags = [t for t in template.tags if not (grid_run and (t == "base" or t.startswith("cell-")))]
    tags += [f"cell-{cell}"] * grid_run + ["lr-grid" if grid_run else "lr-chosen", f"lr{lr_text(lr)}"]
    return replace(
        template,
        name=name,
        cell=cell,
        base=template.base and not grid_run,
        tags=tags,
        overrides=[*keep, f"{LR_KEY}={lr!r}", record_override("lr_select", record), f"seed={template.seed}"],
        dir=sweep.dir / name,
        export=Path(os.path.abspath(results / sweep.name / name)),
        same_as=None,
        trained_as=None,
    )


def plan_lr(
    name: str,
    seeds: int | None,
    extra: list[str],
    grid: list[float],
    *,
    results: Path | None,
    specs_dir: Path = SWEEPS_DIR,
    only: list[str] = (),
    **plan_kwargs,
) -> LrPlan:
    """Phase 1 planned (phase 2 needs its results: `chosen_sweep`); every check before anything trains."""
    if results is None:
        raise SweepError("--lr-grid needs --results: phase 2 reuses the grid runs' exported results")
    spec, path = load_spec(name, specs_dir)
    check_no_lr_setting(name, spec, path, list(extra))
    constants, _ = split_parameters(spec)
    # planning.plan runs without results (its jobs are renamed here); the precision and device that the
    # finished jobs ran with are pinned as plan would
    own = plan_kwargs.get("name_as") or name  # the sweep's own name (--name), e.g. kv_heads_init_h200
    pins = shared_overrides(own, results, [*constants, *extra])
    base = planning.plan(name, seeds, [*extra, *pins], specs_dir=specs_dir, results=None, **plan_kwargs)
    cells: dict[str, CellGrid] = {}
    for job in base.jobs:
        if job.cell not in cells:
            flat = planning.compose_cell(base.common, job.overrides[:-1], path)[0]
            cells[job.cell] = CellGrid(job.cell, job.base, float(flat[LR_KEY]), [], flat)
        cells[job.cell].jobs.append(job)
    grid_sweep = replace(base, jobs=[], only=list(only))
    finished = finished_runs(results.resolve(), skip=own)
    for c in cells.values():
        c.grid, c.extended_from = cell_grid(c, grid, only, results / own)
        more = {"extended_from": c.extended_from} if c.extended_from else {}
        record = lr_record(GRID_PHASE, c.grid, **more)
        for v in c.grid:
            job = _job(
                c.jobs[0],
                grid_sweep,
                results,
                name=grid_job_name(c.label, v, c.jobs[0].seed),
                lr=v,
                record=record,
                grid_run=True,
            )
            find_reuse(job, {**c.flat, LR_KEY: v}, finished)
            lr_plain.check_not_shown_twice(job, finished, own, plain=f"{c.label}-s{c.jobs[0].seed}")
            c.grid_jobs[v] = job
    # cell-major within the grid: each cell's rates side by side in the listing
    grid_sweep.jobs = [j for c in cells.values() for j in c.grid_jobs.values()]
    lr = LrPlan(own, grid, sorted({j.seed for j in base.jobs}), list(cells.values()), grid_sweep, results, finished)
    names = [grid_job_name(c.label, v, c.jobs[0].seed) for c in lr.cells for v in grid]
    names += [j.name for j in grid_sweep.jobs] + [j.name for c in lr.cells for j in c.jobs]
    if unmatched := [g for g in only if not any(fnmatch.fnmatchcase(n, g) for n in names)]:
        raise SweepError(
            f"--only '{unmatched[0]}' matches none of {name}'s jobs ({', '.join(names[:4])}, ...): "
            "use their names, with * and ?"
        )
    return lr


def recorded_grid(sweep_dir: Path, cell: str, seed: int) -> list[float]:
    """The rates a cell's finished grid runs in results/<sweep>/ were recorded under (their lr_select grids
    together; a run without one counts its own rate); [] where it has none."""
    rates: set[float] = set()
    for run in sorted(sweep_dir.glob(f"{cell}-lr*-s{seed}")):
        record = read_record(run) if is_complete(run) else None
        if record is None:
            continue
        config = as_seen(record, sweep_dir.name, run.name)["config"]
        lr = config.get("lr_select") or {}
        if lr.get("phase") == GRID_PHASE:
            rates |= {float(v) for v in lr.get("grid") or [config["module"]["peak_lr"]]}
    return sorted(rates)


def cell_grid(c: CellGrid, grid: list[float], only: list[str], sweep_dir: Path) -> tuple[list[float], list | None]:
    """(the cell's grid, the grid it extends or None). Without --only, or where --only picks one of the cell's
    grid runs, the command's grid: every rate of it is the cell's, and where its grid runs were recorded under a
    narrower grid this is an edge extension of that one. A cell whose grid runs --only leaves out keeps the grid
    its runs were recorded under (a later LR_GRID widened for two cells' edge runs is not theirs: they would
    wait for rates they never needed); with none recorded, the command's grid."""
    before = recorded_grid(sweep_dir, c.label, c.jobs[0].seed)
    names = [grid_job_name(c.label, v, c.jobs[0].seed) for v in grid]
    runs_here = not only or any(fnmatch.fnmatchcase(n, g) for n in names for g in only)
    if not runs_here:
        return (before or list(grid)), None
    widened = before and set(before) < set(grid)
    return list(grid), (before if widened else None)


def final_val_loss(job: Job) -> float | None:
    """The selection's number of a finished grid job (SELECT_ON), None while it is not finished; NaN
    (diverged) reads as +inf."""
    for d in (job.export, job.dir):
        if d is not None and job.finished(d):
            results = read_results(d)
            loss = results.get("metrics", {}).get(SELECT_ON)
            if short := stopped_short(results):  # fewer steps, its rate not decayed: not the budget's loss
                raise SweepError(
                    f"{d / RESULTS}: {short}: its val loss cannot choose a rate; move it (and its view in results/) "
                    "away and run the job again with a longer ARGS=trainer.max_time=...: it resumes from its checkpoint"
                )
            if loss is None:
                raise SweepError(
                    f"{d / RESULTS} has no metrics['{SELECT_ON}']: the learning rate cannot be chosen; "
                    "rerun that job (move it away)"
                )
            return math.inf if math.isnan(loss) else float(loss)
    return None


def choose(losses: dict[float, float]) -> float:
    """The rate with the lowest loss; a tie (within TIE) goes to the smaller rate, and so does a cell whose
    every rate diverged (the report shows those losses as –)."""
    best = min(losses.values())
    if math.isinf(best):
        return min(losses)
    return min(v for v, loss in losses.items() if loss - best <= TIE)


def select(lr: LrPlan) -> dict[str, tuple[float, dict[float, float]] | None]:
    """{cell: (chosen rate, {rate: loss})}, None for a cell whose grid runs are not all finished."""
    out = {}
    for c in lr.cells:
        losses = {v: final_val_loss(j) for v, j in c.grid_jobs.items()}
        out[c.label] = None if None in losses.values() else (choose(losses), losses)
    return out


def chosen_sweep(lr: LrPlan) -> tuple[Sweep, list[str]]:
    """Phase 2: seeds 1..N of every selectable cell at its chosen rate (seed 1: its grid run, copied);
    and the cells that wait for their grid runs."""
    sweep = replace(lr.grid_sweep, jobs=[])
    waiting, by_seed, picks = [], {}, select(lr)
    lr.give_way, lr.held = [], {}
    for c in lr.cells:
        picked = picks[c.label]
        if picked is None:
            waiting.append(c.label)
            continue
        rate, losses = picked
        views = [lr.results / lr.name / t.name for t in c.jobs]
        give, hold = lr_plain.at_another_rate(views, rate, {v: j.done for v, j in c.grid_jobs.items()})
        if hold:  # seeds of a plan without the grid at a rate it did not choose: never overwritten
            waiting.append(c.label)
            lr.held[c.label] = lr_plain.hold_line(c.label, hold, rate)
            continue
        record = lr_record(
            CHOSEN_PHASE,
            c.grid,
            chosen=rate,
            default=c.default_lr,
            val_loss=[None if math.isinf(losses[v]) else losses[v] for v in c.grid],
            grid_runs=[c.grid_jobs[v].name for v in c.grid],
            **({"extended_from": c.extended_from} if c.extended_from else {}),
        )
        for template in c.jobs:
            job = _job(template, sweep, lr.results, name=template.name, lr=rate, record=record, grid_run=False)
            if job.name in give:  # run_lr takes the plain view away first: the grid run at its rate shows it
                lr.give_way.append(job.export)
            else:
                find_reuse(job, {**c.flat, LR_KEY: rate}, lr.finished)
            if template.seed == c.jobs[0].seed and (not job.done or job.name in give):
                job.same_as, job.trained_as = c.grid_jobs[rate].export, None  # the selecting run: reused
            by_seed.setdefault(job.seed, []).append(job)
    sweep.jobs = [j for s in sorted(by_seed) for j in by_seed[s]]  # seed-major, as planning.plan
    base = next((c for c in lr.cells if c.base and picks[c.label] is not None), None)
    if base is not None:  # the base again on the class its cells train on, at the base's chosen rate
        grid = ",".join(f"{v:g}" for v in base.grid)
        sweep.jobs += class_bases(sweep, lr.finished, {**base.flat, LR_KEY: picks[base.label][0]}, f" LR_GRID={grid}")
    return sweep, waiting


def record_selection(sweep: Sweep, out) -> None:
    """A job copied from another run (the selecting grid run, or another sweep's identical run) gets the
    job's own lr_select and tags in its exported results.json: every run of the sweep says its rate's origin."""
    for j in sweep.jobs:
        if j.export is None or not is_complete(j.export):
            continue
        record = read_record(j.export)
        want = _record_of(j)
        seen = as_seen(record, j.export.parent.name, j.export.name)["config"]
        if seen.get("lr_select") == want and seen.get("tags") == j.tags:
            continue
        if j.export.is_symlink():  # a view of the store: the selection and tags are the view's
            store.show(Path(os.path.realpath(j.export)), j.export, j.tags, lr_select=want)
        else:  # a run directory of the old layout
            record.config = {**record.config, "lr_select": want, "tags": list(j.tags)}
            write_record(j.export, record)
        print(f"  {j.name}: recorded its learning rate's selection (lr_select)", file=out)


def _record_of(job: Job) -> dict:
    return job.lr_select()


def run_lr(lr: LrPlan, dry: bool = False, out=None) -> int:
    """Phase 1, the selection, phase 2; 0 when every job of both phases is complete (or listed, --dry)."""
    out = out or sys.stdout
    print(
        f"phase 1 of 2: seed {lr.cells[0].jobs[0].seed} of every cell at each peak learning rate of the grid "
        f"{', '.join(map(lr_text, lr.grid))}",
        file=out,
    )
    rc1 = launch.run(lr.grid_sweep, dry, out)
    if rc1 == 130:
        return rc1
    if not dry:
        record_selection(lr.grid_sweep, out)
    chosen, waiting = chosen_sweep(lr)
    print(
        f"\nphase 2 of 2: seeds {', '.join(map(str, lr.seeds))} of every cell at the rate its {SELECT_WHAT} "
        "chose (ties: the smaller rate)",
        file=out,
    )
    picks = select(lr)
    for c in lr.cells:
        if c.label in lr.held:
            print(lr.held[c.label], file=out)
        elif c.label in waiting:
            print(
                f"  {c.label}: waits for its grid runs ({sum(j.done for j in c.grid_jobs.values())} of "
                f"{len(c.grid)} finished)",
                file=out,
            )
        else:
            rate, losses = picks[c.label]
            print(
                f"  {c.label}: chosen {LR_KEY}={lr_text(rate)} (val/loss "
                + ", ".join(f"{lr_text(v)}: {losses[v]:.4f}" for v in c.grid)
                + f"; default {lr_text(c.default_lr)})",
                file=out,
            )
    for view in lr.give_way:  # a plain seed-1 view at a rate not chosen: its grid run shows that run (lr_plain)
        print(f"  {view.name}: {'gives' if dry else 'gave'} way to the chosen rate's grid run", file=out)
        if not dry:
            store.unshow(view)
    rc2 = launch.run(chosen, dry, out) if chosen.jobs else 0
    if not dry and chosen.jobs and rc2 != 130:
        record_selection(chosen, out)
    # a cell waits for grid runs that failed, or that --only left for later (not a failure)
    stuck = [
        c.label
        for c in lr.cells
        if c.label in waiting and any(lr.grid_sweep.selects(j) and not j.done for j in c.grid_jobs.values())
    ]
    if waiting and not dry:
        print(
            f"{len(waiting)} cell(s) wait for phase 1 ({len(stuck)} on a failed grid run): rerun the same "
            "command once their grid runs finish",
            file=out,
        )
    return rc2 if rc2 == 130 else (1 if rc1 or rc2 or ((stuck or lr.held) and not dry) else 0)
