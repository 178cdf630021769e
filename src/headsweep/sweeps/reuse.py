"""Finished runs a sweep takes over instead of training again. Two runs are the same experiment when their
keys agree (headsweep.store.experiment_key: the experiment settings and the seed):

- a finished job in results/<sweep>/ must be the job planned there (check_export), so a rerun never
  mixes two configs;
- identical: an experiment the store (results/runs/<key>/) already holds is shown as this sweep's job, a
  view (Table 3's base row is row A's h = 8 and row B's base), never copied and never trained again;
- trained: one whose model another sweep trained but did not analyse as this sweep does (heads_specialise's
  head dropout 0 is table3_a's h = 8) gets a copy of that run directory, checkpoints hard-linked, and only
  analyses it, while the checkpoint is on this machine (another experiment: the analysis is a setting).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from headsweep import store
from headsweep.store import Record, settings_diff
from headsweep.sweeps.jobs import Job, Sweep
from headsweep.sweeps.specs import SweepError
from headsweep.training.runs import adopt_run, export_run, is_complete, read_results


def check_export(job: Job, flat: dict) -> None:
    """A finished job in results/ must be this job: same settings, so a rerun never mixes two configs."""
    if job.export is None or not is_complete(job.export):
        return
    config = read_results(job.export)["config"]
    diff, theirs, ours = settings_diff(config, flat, job.seed)
    if diff:
        k = diff[0]
        raise SweepError(
            f"{job.export} holds a run with other settings than job {job.name} ({len(diff)} differ, e.g. "
            f"{k}: {theirs.get(k)!r} there, {ours.get(k)!r} here); "
            f"{_grid_hint(config, diff) or 'move it away or pass --results DIR'}"
        )


def _grid_hint(config: dict, diff: list[str]) -> str | None:
    """The usual cause when only a finished job's rate differs: it ran under a learning-rate grid (its rate
    chosen per cell) and this plan was made without that grid, or with another."""
    grid = (config.get("lr_select") or {}).get("grid")
    if not grid or diff != ["module.peak_lr"]:
        return None
    rates = ",".join(f"{g:g}" for g in grid)
    return f"it ran with the learning-rate grid {rates}: plan with that grid (LR_GRID={rates}, --lr-grid={rates})"


def finished_runs(results_root: Path, skip: str | None = None) -> list[tuple[Path, Record]]:
    """(store dir, record) of every complete experiment in the store, read once per plan, then the runs of
    a results/ not yet migrated (results/<sweep>/<job>/ directories, not views; copies and those of sweep
    `skip` left out); a corrupt record is named on stderr and left out."""

    def corrupt(line):
        print(f"left out: {line}", file=sys.stderr)

    runs = store.stored_runs(results_root, on_corrupt=corrupt)
    for d in sorted(results_root.glob(f"*/*/{store.RESULTS}")):
        d = d.parent
        if d.is_symlink() or d.parent.name in (store.RUNS, skip) or d.name.startswith("."):
            continue
        try:
            record = store.read_record(d)
        except store.CorruptRecord as e:
            corrupt(str(e))
            continue
        if record.complete and record.raw.get("shared_from") is None:
            runs.append((d, record))
    return runs


_KEYS: dict[str, str] = {}


def _key(run_dir: Path, record: Record) -> str:
    if str(run_dir) not in _KEYS:
        _KEYS[str(run_dir)] = store.experiment_key(record.config)
    return _KEYS[str(run_dir)]


def identical_run(job: Job, flat: dict, finished: list[tuple[Path, Record]]) -> Path | None:
    """The stored run of this job's experiment (the same key), e.g. Table 3's base row, which rows A and B
    share: shown as this sweep's job instead of trained again."""
    key = store.flat_key(flat, job.seed)
    return next((d for d, record in finished if _key(d, record) == key), None)


def trained_run(job: Job, flat: dict, finished: list[tuple[Path, Record]]) -> Path | None:
    """A stored experiment that trained this job's model (same settings and seed; only the analysis after
    training differs, e.g. heads_specialise's head dropout 0 and table3_a's h = 8) and whose run directory,
    checkpoint included, is on this machine: the job analyses a copy of it instead of training the same
    model again. Elsewhere (results/ cloned without checkpoints) the job trains."""
    for export, saved in finished:
        src = saved.raw.get("output_dir")
        if saved.raw.get("shared_from") is not None or not src:
            continue
        src = store.local_path(src)
        diff = settings_diff(saved.config, flat, job.seed)[0]
        if (
            diff
            and all(k == "analysis" or k.startswith("analysis.") for k in diff)
            and is_complete(src)
            and (src / "checkpoints" / "last.ckpt").is_file()
        ):
            return export
    return None


def find_reuse(job: Job, flat: dict, finished: list[tuple[Path, Record]]) -> None:
    """Check the job's export and note a finished run it can take over (Job.same_as / Job.trained_as)."""
    check_export(job, flat)
    if job.export is None or job.done:
        return
    job.same_as = identical_run(job, flat, finished)
    if job.same_as is None and job.analysis is not None:
        job.trained_as = trained_run(job, flat, finished)


def export_finished(sweep: Sweep, out) -> None:
    """Jobs that finished in their run directory but are missing from results/ (an older sweep, or an
    export cut short) are exported now."""
    for j in sweep.jobs:
        if j.export is not None and j.finished(j.dir) and not j.finished(j.export):
            export_run(j.dir, j.export)
            print(f"  {j.name}: exported to {j.export}", file=out)


def share_identical(sweep: Sweep, out) -> None:
    """Jobs whose experiment the store holds (Job.same_as) become views of it: results/<sweep>/<job> links
    to results/runs/<key>/, and the record lists the view with this sweep's tags and the job's learning-rate
    selection (now, not when the sweep ends: a sweep cut short in training its other jobs leaves no view that
    reads as a grid run). Nothing is copied."""
    for j in sweep.jobs:
        if j.same_as is not None and not j.done:
            stored = Path(os.path.realpath(j.same_as))  # the store dir, or a view of it
            if stored.parent.name != store.RUNS:
                raise SweepError(
                    f"{j.same_as} is a run of the old results/ layout: run `python -m headsweep.store "
                    f"migrate --results {j.export.parent.parent}` first, then the sweep again"
                )
            selection = j.lr_select()
            store.show(stored, j.export, j.tags, **({"lr_select": selection} if selection is not None else {}))
            print(f"  {j.name}: the same experiment as {j.same_as}: shown here, not trained again", file=out)


def adopt_trained(sweep: Sweep, out) -> None:
    """Jobs whose model another sweep already trained (Job.trained_as) get a copy of that run directory,
    checkpoints hard-linked, as their own: in the launcher, `train` finds it complete and the job only
    analyses it."""
    for j in sweep.jobs:
        if j.trained_as is not None and not j.done and not j.dir.exists() and sweep.selects(j):
            adopt_run(j.trained_as, j.dir, sweep=sweep.name, run_name=j.name, tags=j.tags, analysis=j.analysis)
            print(
                f"  {j.name}: the model of {j.trained_as}, trained with the same settings and seed: analysed, "
                "not trained again",
                file=out,
            )
