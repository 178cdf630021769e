"""Run one Table 3 ablation as a Hydra multirun: `make sweep SWEEP=table3_a [SEEDS=3 BUDGET=short ...]`.

    python -m headsweep.experiments.sweep --sweep table3_a --seeds 3 [--budget short] [--launcher basic|joblib|submitit]
                              [--scale paper] [--only 'h1-*,*-s3'] [--dry] [hydra overrides for every job]

The grid comes from sweeps/<sweep>.yaml, a W&B grid sweep spec whose parameters are Hydra override keys
(so `wandb sweep` + `wandb agent` run the same grid online). Each job (grid cell x seed 1..N) is one
training run with its own W&B run (group = the sweep), named like h8-dk32-dv32-s1, tagged with its row
and cell, writing to multirun/<sweep>/<run name>/.

Hydra's launchers take any list of jobs, but its command line only expresses cartesian products, and a
resumed sweep runs an arbitrary subset. So each pending job becomes a tiny config file (its overrides,
run name, seed and tags) in multirun/<sweep>/.jobs/sweep_job/, and one `python -m headsweep.train -m
+sweep_job=a,b,c` sweeps over exactly those files with the chosen launcher.

Results: each finished job's small outputs (results.json, hypotheses, metrics CSV, analysis; never
checkpoints or W&B files) are exported to results/<sweep>/<run name>/ (--results), the folder `make
report` reads and the repository keeps as reference results.

Shared work: a job another sweep already ran (same settings and seed) is copied from results/, not
trained; one whose model another sweep trained but did not analyse as this sweep does (heads_specialise's
head dropout 0 is table3_a's h = 8) analyses a copy of that run while its checkpoint is on this machine.

Resume: a job with a complete results.json (and its analysis, where the sweep analyses) is skipped; a
trained job whose analysis was cut short only analyses; an unfinished job with a checkpoint continues from
it (headsweep.resume); one without is moved to multirun/<sweep>/.incomplete/ and runs again from scratch.

Part of a sweep: --only runs the jobs whose names match one of its comma-separated globs (e.g. the jobs
that reuse another sweep's checkpoints while they are on this machine, or one seed); the rest wait for a
later run of the full command. Names and outputs are the full sweep's.

Cores: --jobs N runs N jobs at once (Hydra's joblib launcher) with cores / N torch threads each, set
before torch starts (OMP_NUM_THREADS) and recorded in results.json.
"""

from __future__ import annotations

import argparse
import fcntl
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import OmegaConf
from hydra.core.override_parser.overrides_parser import OverridesParser

from headsweep.config import CONF_DIR, SWEEPS_DIR, compose
from headsweep.experiments.specs import (RESERVED, SweepError, cell_labels, flatten_config, format_value, load_spec,
                                         row_tag, spec_seeds, split_parameters)
from headsweep.experiments.sweep_settings import SHARED, resolved_values, shared_overrides
from headsweep.training.checks import ConfigError, check_config
from headsweep.training.runs import RESULTS, adopt_run, copy_run, export_run, is_complete, read_results
JOB_GROUP = "sweep_job"
# Hydra's own launcher plugins (hydra-joblib-launcher, hydra-submitit-launcher); configure them with
# overrides, e.g. hydra.launcher.n_jobs=2 or hydra.launcher.partition=gpu hydra.launcher.gpus_per_node=1.
LAUNCHERS = {
    "basic": [],
    "joblib": ["hydra/launcher=joblib"],
    # a job that hits its time limit is requeued (up to 3 times) and resumes from its checkpoint
    "submitit": ["hydra/launcher=submitit_slurm", "hydra.launcher.max_num_timeout=3"],
    "submitit_local": ["hydra/launcher=submitit_local"],
}

@dataclass
class Job:
    name: str                 # run name and output directory, e.g. h8-dk32-dv32-s1
    cell: str                 # the name without the seed, e.g. h8-dk32-dv32
    seed: int
    overrides: list[str]      # this job's grid values and seed, as command-line overrides
    tags: list[str]
    dir: Path
    base: bool = False
    export: Path | None = None  # results/<sweep>/<run name>: where the finished job's outputs go
    same_as: Path | None = None  # a finished run of another sweep with this job's settings and seed
    analysis: dict | None = None  # the head analysis after training (conf/analysis), when the sweep runs one
    trained_as: Path | None = None  # a finished run of another sweep that trained this job's model

    def finished(self, run_dir: Path) -> bool:
        """Complete, and analysed where the job analyses its model: a run whose analysis was cut short
        runs again, and `train` finds it trained and only analyses it."""
        return is_complete(run_dir) and (self.analysis is None or (run_dir / "analysis" / "analysis.json").is_file())

    @property
    def done(self) -> bool:
        return self.finished(self.dir) or (self.export is not None and self.finished(self.export))


@dataclass
class Sweep:
    name: str
    spec_path: Path
    dir: Path                 # multirun/<sweep>
    common: list[str]         # overrides of every job
    jobs: list[Job] = field(default_factory=list)
    threads: int | None = None  # torch threads per job (--jobs)
    only: list[str] = field(default_factory=list)  # globs on job names (--only); empty: every job

    def selects(self, job: Job) -> bool:
        return not self.only or any(fnmatch.fnmatchcase(job.name, g) for g in self.only)


# ----------------------------------------------------------------------------- composing the jobs


def _first_line(e: Exception) -> str:
    return next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)


def default_jobs(cores: int) -> int:
    """Two jobs of cores/2 threads on a CPU: on 2 cores, two 1-thread jobs trained 1.21x the target
    tokens/s of one 2-thread job (make bench measures it); one job where a GPU takes the work."""
    return 1 if torch.cuda.is_available() or cores < 2 else 2


def plan(name: str, seeds: int | None, extra: list[str] = (), *, budget: str | None = None, launcher: str = "basic",
         specs_dir: Path = SWEEPS_DIR, root: Path = Path("multirun"), results: Path | None = None,
         jobs: int | None = 1, cores: int | None = None, only: list[str] = ()) -> Sweep:
    """Every job of the sweep, each grid cell composed and its model built (on the meta device) first,
    so a bad key or value stops the sweep before any job starts."""
    spec, path = load_spec(name, specs_dir)
    if launcher not in LAUNCHERS:
        raise SweepError(f"unknown launcher '{launcher}'; one of {', '.join(LAUNCHERS)}")
    if seeds is not None and seeds < 1:
        raise SweepError(f"--seeds must be >= 1, got {seeds}")
    seed_list = spec_seeds(spec) if seeds is None else list(range(1, seeds + 1))
    cores = cores or os.cpu_count() or 1
    if jobs is None:
        jobs = default_jobs(cores)
    if not 1 <= jobs <= cores:
        raise SweepError(f"JOBS={jobs}: run between 1 and {cores} jobs at once on this machine's {cores} cores")
    threads = None
    if jobs > 1:
        if launcher == "basic":
            launcher = "joblib"  # Hydra's basic launcher runs one job at a time
        if launcher != "joblib":
            raise SweepError(f"JOBS={jobs} runs local jobs in parallel with the joblib launcher, not {launcher}; "
                             "a cluster launcher sets its own parallelism (hydra.launcher.array_parallelism)")
        threads = cores // jobs
    for o in extra:
        key = o.lstrip("+~").split("=", 1)[0]
        if key in RESERVED:
            raise SweepError(f"override '{o}': {key} is set per job by the sweep; drop it")
    constants, cells = split_parameters(spec)
    # the launcher's overrides too, so that hydra.launcher.* settings in `extra` are checked against it
    common = [f"sweep={name}", *LAUNCHERS[launcher], *([f"budget={budget}"] if budget else []), *constants, *extra]
    common += shared_overrides(name, results, list(extra))  # the precision and device its finished jobs ran with
    if threads:
        common += [f"hydra.launcher.n_jobs={jobs}", f"threads={threads}"]
    try:
        compose(common)
    except Exception as e:
        raise SweepError(f"overrides {' '.join(common)}: {_first_line(e)}") from None
    for key, p in spec["parameters"].items():  # each parameter alone first: the error names it
        first = format_value(p["value"] if "value" in p else p["values"][0])
        try:
            compose([*common, f"{key}={first}"])
        except Exception as e:
            raise SweepError(f"{path}: parameter '{key}' is not a config key or value here: {_first_line(e)}") from None
    flats, resolved = [], []
    for cell in cells:
        try:
            cfg = compose([*common, *cell])
            check_config(cfg)
            resolved.append(resolved_values(cfg))  # plain values: precision, width-scaled learning rate
        except ConfigError as e:
            raise SweepError(f"{path}: cell {' '.join(cell)}: {e}") from None
        except Exception as e:
            raise SweepError(f"{path}: cell {' '.join(cell)}: {_first_line(e)}") from None
        analysis = OmegaConf.to_container(cfg.analysis, resolve=True) if cfg.get("analysis") else None
        flat = flatten_config(cfg)
        flat.update(resolved[-1])
        flats.append((flat, list(cfg.tags), analysis))
    steps = {f["trainer.max_steps"] for f, _, _ in flats}
    if len(steps) > 1 or not all(isinstance(n, int) and n > 0 for n in steps):
        raise SweepError(f"{path}: the cells would train for unequal or unlimited steps (trainer.max_steps "
                         f"{sorted(map(str, steps))}); an ablation compares cells at equal steps: fix trainer.max_steps")
    for key in SHARED:  # trainer.precision, trainer.accelerator
        if len(values := {str(f.get(key)) for f, _, _ in flats}) > 1:
            raise SweepError(f"{path}: the cells would train with different {key} ({', '.join(sorted(values))}); a "
                             f"sweep compares cells in one precision on one device: set {key} for the whole sweep")
    labels = cell_labels([{k: v for k, v in f.items() if k != "module.peak_lr"} for f, _, _ in flats])
    if len(set(labels)) < len(labels):
        raise SweepError(f"{path}: two grid cells compose to the same config ({labels}); remove the duplicate")

    sweep = Sweep(name, path, root / name, common, threads=threads, only=list(only))
    finished_elsewhere = finished_runs(results.resolve(), skip=name) if results is not None else []
    for seed in seed_list:  # seed-major: a half-done sweep already has every cell once
        for i, (cell, label, (flat, tags, analysis), plain) in enumerate(zip(cells, labels, flats, resolved)):
            run = f"{label}-s{seed}"
            job = Job(
                name=run, cell=label, seed=seed, overrides=[*cell, *(f"{k}={v}" for k, v in plain.items()), f"seed={seed}"],
                tags=[*tags, row_tag(name), f"cell-{label}", *(["base"] if i == 0 else [])],
                dir=sweep.dir / run, base=i == 0, export=(results / name / run).resolve() if results else None,
                analysis=analysis,
            )
            check_export(job, flat)
            if results is not None and not job.done:
                job.same_as = identical_run(job, flat, finished_elsewhere)
                if job.same_as is None and analysis is not None:
                    job.trained_as = trained_run(job, flat, finished_elsewhere)
            sweep.jobs.append(job)
    if unmatched := [g for g in sweep.only if not any(fnmatch.fnmatchcase(j.name, g) for j in sweep.jobs)]:
        raise SweepError(f"--only '{unmatched[0]}' matches none of {name}'s jobs "
                         f"({', '.join(j.name for j in sweep.jobs[:4])}, ...): use their names, with * and ?")
    return sweep


# What makes two runs the same experiment (and the same outputs: the analysis after training counts);
# paths, loggers, threads, launcher and names may differ.
EXPERIMENT_KEYS = ("model.", "module.", "data.", "trainer.max_steps", "trainer.precision", "average_last", "analysis")
NOT_EXPERIMENT = ("data.dir", "data.cache_dir", "data.num_workers", "data.seed")


def experiment_settings(flat: dict) -> dict:
    return {k: v for k, v in flat.items() if k.startswith(EXPERIMENT_KEYS) and k not in NOT_EXPERIMENT
            and not k.startswith("module.model.")}


def settings_diff(saved_config: dict, flat: dict, seed: int) -> tuple[list[str], dict, dict]:
    """The experiment settings (and seed) in which a saved run's config differs from a job's."""
    theirs = experiment_settings(flatten_config(OmegaConf.create(saved_config)))
    ours = experiment_settings(flat)
    ours.setdefault("trainer.precision", theirs.get("trainer.precision"))
    diff = [k for k in sorted(ours.keys() | theirs.keys())
            if repr(ours.get(k)) != repr(theirs.get(k)) and not _unresolved(ours.get(k))]
    if saved_config.get("seed") != seed:
        diff.insert(0, "seed")
    return diff, theirs, ours


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


def _unresolved(value) -> bool:
    return isinstance(value, str) and "${" in value


# ----------------------------------------------------------------------------- running


def job_config(job: Job) -> str:
    """The job's overrides as a config file of group JOB_GROUP (package _global_, merged last)."""
    cfg = OmegaConf.create({"run_name": job.name, "tags": job.tags,
                            **({"export_dir": str(job.export)} if job.export else {})})
    defaults = []
    for o in OverridesParser.create().parse_overrides(job.overrides):
        key, value = o.key_or_group, o.value()
        if isinstance(value, str) and (CONF_DIR / key).is_dir():  # a config group choice, e.g. model=tiny
            defaults.append({f"override /{key}": value})
        else:
            OmegaConf.update(cfg, key, value, merge=True)  # a dict value merges, as on the command line
    head = OmegaConf.to_yaml(OmegaConf.create({"defaults": [*defaults, "_self_"]})) if defaults else ""
    return (f"# @package _global_\n# job {job.name} of a headsweep sweep; the same as the overrides\n"
            f"#   {' '.join(job.overrides)}\n{head}{OmegaConf.to_yaml(cfg)}")


def _quote(value: str) -> str:
    """A path as a Hydra override value: bare where Hydra's grammar allows, else quoted."""
    if re.fullmatch(r"[A-Za-z0-9_./:@+-]+", value):
        return value
    if "'" in value or "\\" in value:
        raise SweepError(f"path {value!r}: quotes and backslashes cannot be passed to Hydra; use another directory")
    return f"'{value}'"


def multirun_command(sweep: Sweep, jobs: list[Job]) -> list[str]:
    jobs_dir = (sweep.dir / ".jobs").resolve()
    return [
        sys.executable, "-m", "headsweep.train", "-m", *sweep.common,
        f"hydra.sweep.dir={_quote(str(sweep.dir.resolve()))}",
        "hydra.sweep.subdir=${run_name}",  # resolved per job: multirun/<sweep>/<run name>
        f"hydra.searchpath=[{_quote('file://' + str(jobs_dir))}]",
        f"+{JOB_GROUP}={','.join(j.name for j in jobs)}",
    ]


def write_jobs(sweep: Sweep, jobs: list[Job]) -> None:
    group = sweep.dir / ".jobs" / JOB_GROUP
    shutil.rmtree(group, ignore_errors=True)
    group.mkdir(parents=True)
    for job in jobs:
        (group / f"{job.name}.yaml").write_text(job_config(job))


def resumable(job: Job) -> bool:
    """An unfinished job with a checkpoint: its rerun continues from there (headsweep.resume)."""
    return (job.dir / "checkpoints" / "last.ckpt").is_file()


def set_aside(job: Job) -> Path | None:
    """Move an unfinished job's directory without a checkpoint out of the way: the rerun starts clean,
    the old log stays readable."""
    if not job.dir.exists() or resumable(job):
        return None
    dest = job.dir.parent / ".incomplete" / f"{job.name}.{time.strftime('%Y%m%d-%H%M%S')}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    job.dir.rename(dest)
    return dest


def failure(job: Job) -> str:
    """Why a job has no complete results.json, and where its log is."""
    log = job.dir / "train.log"
    try:
        results = read_results(job.dir)
    except (OSError, json.JSONDecodeError):
        results = None
    if results and results.get("status") == "failed":
        return f"{results.get('error', 'failed')} (log: {results.get('log') or log})"
    if results and results.get("status") == "complete":
        return f"trained, but its head analysis did not finish (log: {log})"
    if log.exists():
        return f"no {RESULTS}: killed or crashed (log: {log})"
    return f"never started (no {job.dir})"


def lock(sweep_dir: Path):
    """One `make sweep` per sweep directory at a time; the OS drops the lock when the process ends."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    f = open(sweep_dir / ".lock", "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SweepError(f"another sweep is running in {sweep_dir} (it holds {sweep_dir / '.lock'})") from None
    return f


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


def run(sweep: Sweep, dry: bool = False, out=None) -> int:
    """Run the jobs not yet complete; print the summary. 0 when every job is complete at the end."""
    out = out or sys.stdout
    if not dry:
        export_finished(sweep, out)
        share_identical(sweep, out)
        adopt_trained(sweep, out)
    done = {j.name for j in sweep.jobs if j.done}
    pending = [j for j in sweep.jobs if j.name not in done and not (dry and j.same_as)]
    todo = [j for j in pending if sweep.selects(j)]
    later = "" if len(todo) == len(pending) else f" ({len(pending) - len(todo)} more left out by --only)"
    print(f"sweep {sweep.name} ({sweep.spec_path}): {len(sweep.jobs)} jobs, {len(done)} done, {len(todo)} to run"
          f"{later}; every job: {' '.join(sweep.common)}", file=out)
    if dry:
        width = max(len(j.name) for j in sweep.jobs)
        for j in sweep.jobs:
            # a copy is not a run: the real run makes it whatever --only selects
            state = ("done  " if j.name in done else "copy  " if j.same_as else "later " if not sweep.selects(j)
                     else "reuse " if j.trained_as else "to run")
            print(f"  {state}  {j.name:<{width}}  {' '.join(j.overrides)}"
                  + (f"  (= {j.same_as})" if j.same_as and j.name not in done else "")
                  + (f"  (analyses the model of {j.trained_as})" if j.trained_as and j.name not in done else ""),
                  file=out)
        if todo:
            print("would run: " + shlex.join(multirun_command(sweep, todo)), file=out)
        return 0
    if not todo:
        print(f"nothing to run: every job{' --only selects' if later else ''} is complete. "
              f"Next: make report SWEEP={sweep.name}", file=out)
        return 0

    held = lock(sweep.dir)
    try:
        for j in todo:
            if is_complete(j.dir):
                print(f"  {j.name}: trained; runs its head analysis", file=out)
            elif moved := set_aside(j):
                print(f"  {j.name}: unfinished output moved to {moved}", file=out)
            elif resumable(j):
                print(f"  {j.name}: resumes from {j.dir / 'checkpoints' / 'last.ckpt'} (its log names the step)",
                      file=out)
        write_jobs(sweep, todo)
        cmd = multirun_command(sweep, todo)
        print("running: " + shlex.join(cmd), file=out, flush=True)
        # A failing job does not stop the others: Hydra's launchers catch each job's exception (train.main
        # raises instead of exiting in a multirun) and the sweeper re-raises the first one at the end, so
        # the exit status is not the summary: each job's results.json is.
        env = {**os.environ, **({"OMP_NUM_THREADS": str(sweep.threads)} if sweep.threads else {})}
        try:
            rc = subprocess.run(cmd, env=env).returncode
        except KeyboardInterrupt:
            print("\ninterrupted; rerun the same command to resume (finished jobs are kept)", file=out)
            return 130
    finally:
        held.close()

    export_finished(sweep, out)
    ran_ok = [j for j in todo if j.done]
    failed = [j for j in todo if not j.done]
    print(f"\nsweep {sweep.name}: {len(ran_ok)} done, {len(done)} skipped (already complete), "
          f"{len(failed)} failed (hydra exit status {rc}){later}", file=out)
    for j in failed:
        print(f"  failed {j.name}: {failure(j)}", file=out)
    print("rerun the same command to retry the failed jobs; " if failed else "", end="", file=out)
    print(f"report: make report SWEEP={sweep.name}", file=out)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", required=True, help="a spec in sweeps/, e.g. table3_a")
    parser.add_argument("--seeds", type=int, default=None,
                        help="run seeds 1..N of every cell (default: the spec's seed values, as W&B agents run)")
    parser.add_argument("--budget", help="a conf/budget option, e.g. short")
    parser.add_argument("--launcher", default="basic", help=f"one of {', '.join(LAUNCHERS)}")
    parser.add_argument("--scale", choices=["small", "paper"], default="small",
                        help="paper: sweeps/<sweep>_paper.yaml, the paper's model sizes (for a GPU)")
    parser.add_argument("--only", default="",
                        help="run only the jobs whose names match one of these comma-separated globs, e.g. '*-s3'")
    parser.add_argument("--dry", action="store_true", help="list the jobs, done or to run; run nothing")
    parser.add_argument("--root", type=Path, default=Path("multirun"), help="where the sweeps' runs go")
    parser.add_argument("--results", type=Path, default=Path("results"),
                        help="where finished jobs' small outputs go (results/<sweep>/<run name>)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="jobs at once, each with cores / N threads (default: 2 on a CPU, 1 with a GPU)")
    parser.add_argument("--specs", type=Path, default=SWEEPS_DIR, help="where the sweep specs are")
    args, extra = parser.parse_known_args(argv)
    if bad := [a for a in extra if a.startswith("--")]:
        parser.error(f"unknown option {bad[0]}")
    name = f"{args.sweep}_paper" if args.scale == "paper" and not args.sweep.endswith("_paper") else args.sweep
    try:
        sweep = plan(name, args.seeds, extra, budget=args.budget, launcher=args.launcher, specs_dir=args.specs,
                     root=args.root, results=args.results, jobs=args.jobs,
                     only=[g.strip() for g in args.only.split(",") if g.strip()])
        return run(sweep, args.dry)
    except SweepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
