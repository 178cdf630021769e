"""Finished runs a sweep takes over instead of training again. Two runs are the same experiment when
their experiment settings (EXPERIMENT_KEYS) and seed agree:

- a finished job in results/<sweep>/ must be the job planned there (check_export), so a rerun never
  mixes two configs;
- identical: a finished job of another sweep with the same settings and seed is copied (Table 3's base
  row is row A's h = 8 and row B's base);
- trained: one whose model another sweep trained but did not analyse as this sweep does (heads_specialise's
  head dropout 0 is table3_a's h = 8) gets a copy of that run directory, checkpoints hard-linked, and only
  analyses it, while the checkpoint is on this machine.
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from headsweep.experiments.jobs import Job, Sweep
from headsweep.experiments.specs import SweepError, flatten_config
from headsweep.training.runs import RESULTS, adopt_run, copy_run, export_run, is_complete, read_results

# What makes two runs the same experiment (and the same outputs: the analysis after training counts);
# paths, loggers, threads, launcher and names may differ.
# The device class counts: a GPU run is never taken for the CPU run of the same settings (bf16 kernels differ).
EXPERIMENT_KEYS = ("model.", "module.", "data.", "trainer.max_steps", "trainer.precision", "trainer.accelerator",
                   "average_last", "analysis")
# Where the files come from, not what they hold (data.hub_fallback: where the same corpus is on the hub).
NOT_EXPERIMENT = ("data.dir", "data.cache_dir", "data.num_workers", "data.seed", "data.hub_fallback")


def experiment_settings(flat: dict) -> dict:
    return {k: v for k, v in flat.items() if k.startswith(EXPERIMENT_KEYS)
            and ".".join(k.split(".")[:2]) not in NOT_EXPERIMENT and not k.startswith("module.model.")}


def saved_settings(saved_config: dict) -> dict:
    """A saved run's experiment settings, flattened once per config: a sweep compares each of its jobs with
    every finished run, and building the OmegaConf tree each time made planning take a minute."""
    key = json.dumps(saved_config, sort_keys=True, default=str)
    if key not in _SAVED:
        _SAVED[key] = experiment_settings(flatten_config(OmegaConf.create(saved_config)))
    return _SAVED[key]


_SAVED: dict[str, dict] = {}


def settings_diff(saved_config: dict, flat: dict, seed: int) -> tuple[list[str], dict, dict]:
    """The experiment settings (and seed) in which a saved run's config differs from a job's."""
    theirs = dict(saved_settings(saved_config))
    ours = experiment_settings(flat)
    ours.setdefault("trainer.precision", theirs.get("trainer.precision"))
    diff = [k for k in sorted(ours.keys() | theirs.keys())
            if repr(ours.get(k)) != repr(theirs.get(k)) and not _unresolved(ours.get(k))]
    if saved_config.get("seed") != seed:
        diff.insert(0, "seed")
    return diff, theirs, ours


def _unresolved(value) -> bool:
    return isinstance(value, str) and "${" in value


def check_export(job: Job, flat: dict) -> None:
    """A finished job in results/ must be this job: same settings, so a rerun never mixes two configs."""
    if job.export is None or not is_complete(job.export):
        return
    diff, theirs, ours = settings_diff(read_results(job.export)["config"], flat, job.seed)
    if diff:
        k = diff[0]
        raise SweepError(f"{job.export} holds a run with other settings than job {job.name} ({len(diff)} differ, e.g. "
                         f"{k}: {theirs.get(k)!r} there, {ours.get(k)!r} here); move it away or pass --results DIR")


def finished_runs(results_root: Path, skip: str) -> list[tuple[Path, dict]]:
    """(run dir, results) of every complete job in results/ outside sweep `skip`, read once per plan."""
    runs = []
    for path in sorted(results_root.glob(f"*/*/{RESULTS}")):
        run_dir = path.parent
        if run_dir.parent.name != skip and not run_dir.name.startswith(".") and is_complete(run_dir):
            runs.append((run_dir, read_results(run_dir)))
    return runs


def identical_run(job: Job, flat: dict, finished: list[tuple[Path, dict]]) -> Path | None:
    """A finished job of another sweep that is this job (same settings, same seed), e.g. Table 3's base
    row, which rows A and B share: it is copied instead of trained again."""
    for run_dir, saved in finished:
        if saved.get("shared_from") is None and not settings_diff(saved["config"], flat, job.seed)[0]:
            return run_dir
    return None


def trained_run(job: Job, flat: dict, finished: list[tuple[Path, dict]]) -> Path | None:
    """A finished job of another sweep that trained this job's model (same settings and seed; only the
    analysis after training differs, e.g. heads_specialise's head dropout 0 and table3_a's h = 8) and whose
    run directory, checkpoint included, is on this machine: the job analyses a copy of it instead of
    training the same model again. Elsewhere (results/ cloned without checkpoints) the job trains."""
    for export, saved in finished:
        src = saved.get("output_dir")
        if saved.get("shared_from") is not None or not src:
            continue
        diff = settings_diff(saved["config"], flat, job.seed)[0]
        if (diff and all(k == "analysis" or k.startswith("analysis.") for k in diff) and is_complete(src)
                and (Path(src) / "checkpoints" / "last.ckpt").is_file()):
            return export
    return None


def find_reuse(job: Job, flat: dict, finished: list[tuple[Path, dict]]) -> None:
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
    """Jobs that another sweep already ran (Job.same_as) are copied to results/, tagged as this sweep's."""
    for j in sweep.jobs:
        if j.same_as is not None and not j.done:
            copy_run(j.same_as, j.export, sweep=sweep.name, tags=j.tags)
            print(f"  {j.name}: the same experiment as {j.same_as}: copied, not trained again", file=out)


def adopt_trained(sweep: Sweep, out) -> None:
    """Jobs whose model another sweep already trained (Job.trained_as) get a copy of that run directory,
    checkpoints hard-linked, as their own: in the launcher, `train` finds it complete and the job only
    analyses it."""
    for j in sweep.jobs:
        if j.trained_as is not None and not j.done and not j.dir.exists() and sweep.selects(j):
            adopt_run(j.trained_as, j.dir, sweep=sweep.name, run_name=j.name, tags=j.tags, analysis=j.analysis)
            print(f"  {j.name}: the model of {j.trained_as}, trained with the same settings and seed: analysed, "
                  "not trained again", file=out)
