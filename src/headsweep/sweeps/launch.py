"""Running a planned sweep through a Hydra launcher.

Hydra's launchers take any list of jobs, but its command line only expresses cartesian products, and a
resumed sweep runs an arbitrary subset. So each pending job becomes a tiny config file (its overrides,
run name, seed and tags) in multirun/<sweep>/.jobs/sweep_job/, and one `python -m headsweep.train -m
+sweep_job=a,b,c` sweeps over exactly those files with the chosen launcher. One sweep per directory at a
time (a lock file); unfinished runs resume from their checkpoint or are set aside; a failed job does not
stop the others, and the summary names each failure and its log.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from headsweep.config import CONF_DIR
from headsweep.sweeps.jobs import Job, Sweep
from headsweep.sweeps.reuse import adopt_trained, export_finished, share_identical
from headsweep.sweeps.specs import SweepError
from headsweep.training.runs import RESULTS, is_complete, read_results, write_json

JOB_GROUP = "sweep_job"


def job_config(job: Job) -> str:
    """The job's overrides as a config file of group JOB_GROUP (package _global_, merged last)."""
    cfg = OmegaConf.create(
        {"run_name": job.name, "tags": job.tags, **({"export_dir": str(job.export)} if job.export else {})}
    )
    defaults = []
    for o in OverridesParser.create().parse_overrides(job.overrides):
        key, value = o.key_or_group, o.value()
        if isinstance(value, str) and (CONF_DIR / key).is_dir():  # a config group choice, e.g. model=tiny
            defaults.append({f"override /{key}": value})
        else:
            OmegaConf.update(cfg, key, value, merge=True)  # a dict value merges, as on the command line
    head = OmegaConf.to_yaml(OmegaConf.create({"defaults": [*defaults, "_self_"]})) if defaults else ""
    return (
        f"# @package _global_\n# job {job.name} of a headsweep sweep; the same as the overrides\n"
        f"#   {' '.join(job.overrides)}\n{head}{OmegaConf.to_yaml(cfg)}"
    )


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
        sys.executable,
        "-m",
        "headsweep.train",
        "-m",
        *sweep.common,
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
    """An unfinished job with a checkpoint: its rerun continues from there (headsweep.training.resume)."""
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


def list_jobs(sweep: Sweep, done: set[str], todo: list[Job], out) -> None:
    """--dry: every job with its state, and the command that would run the pending ones."""
    width = max(len(j.name) for j in sweep.jobs)
    for j in sweep.jobs:
        # a shared run is not a run of this sweep: the store's run is shown as it whatever --only selects
        state = (
            "done  "
            if j.name in done
            else "shared"
            if j.same_as
            else "later "
            if not sweep.selects(j)
            else "reuse "
            if j.trained_as
            else "to run"
        )
        print(
            f"  {state}  {j.name:<{width}}  {' '.join(j.overrides)}"
            + (f"  (= {j.same_as})" if j.same_as and j.name not in done else "")
            + (f"  (analyses the model of {j.trained_as})" if j.trained_as and j.name not in done else ""),
            file=out,
        )
    if todo:
        print("would run: " + shlex.join(multirun_command(sweep, todo)), file=out)


SWEEP_NOTE = ".sweep.json"  # results/<name>/.sweep.json: the spec a sweep run under another name came from


def note_spec(sweep: Sweep) -> None:
    """A sweep named apart from its spec (NAME=) says which spec it is, so its report knows what it plans."""
    if (
        sweep.spec
        and sweep.spec != sweep.name
        and (results := next((j.export.parent for j in sweep.jobs if j.export), None))
    ):
        results.mkdir(parents=True, exist_ok=True)
        write_json(results / SWEEP_NOTE, {"sweep": sweep.name, "spec": sweep.spec})


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
    print(
        f"sweep {sweep.name} ({sweep.spec_path}): {len(sweep.jobs)} jobs, {len(done)} done, {len(todo)} to run"
        f"{later}; every job: {' '.join(sweep.common)}",
        file=out,
    )
    if dry:
        list_jobs(sweep, done, todo, out)
        return 0
    if sweep.on_gpu and not torch.cuda.is_available():
        raise SweepError(
            "trainer=gpu but torch sees no CUDA GPU here: train on the CPU (trainer=cpu) or run the sweep "
            "on a machine with a GPU"
        )
    note_spec(sweep)
    if not todo:
        print(
            f"nothing to run: every job{' --only selects' if later else ''} is complete. "
            f"Next: make report SWEEP={sweep.name}",
            file=out,
        )
        return 0
    rc = launch(sweep, todo, out)
    if rc is None:
        return 130  # interrupted
    export_finished(sweep, out)
    failed = [j for j in todo if not j.done]
    print(
        f"\nsweep {sweep.name}: {len(todo) - len(failed)} done, {len(done)} skipped (already complete), "
        f"{len(failed)} failed (hydra exit status {rc}){later}",
        file=out,
    )
    for j in failed:
        print(f"  failed {j.name}: {failure(j)}", file=out)
    print("rerun the same command to retry the failed jobs; " if failed else "", end="", file=out)
    print(f"report: make report SWEEP={sweep.name}", file=out)
    return 1 if failed else 0


def launch(sweep: Sweep, todo: list[Job], out) -> int | None:
    """One Hydra multirun over the pending jobs, under the sweep's lock; its exit status, None if interrupted."""
    held = lock(sweep.dir)
    try:
        for j in todo:
            if is_complete(j.dir):
                print(f"  {j.name}: trained; runs its head analysis", file=out)
            elif moved := set_aside(j):
                print(f"  {j.name}: unfinished output moved to {moved}", file=out)
            elif resumable(j):
                print(
                    f"  {j.name}: resumes from {j.dir / 'checkpoints' / 'last.ckpt'} (its log names the step)", file=out
                )
        write_jobs(sweep, todo)
        cmd = multirun_command(sweep, todo)
        print("running: " + shlex.join(cmd), file=out, flush=True)
        # A failing job does not stop the others: Hydra's launchers catch each job's exception (train.main
        # raises instead of exiting in a multirun) and the sweeper re-raises the first one at the end, so
        # the exit status is not the summary: each job's results.json is.
        env = {**os.environ, **({"OMP_NUM_THREADS": str(sweep.threads)} if sweep.threads else {})}
        try:
            return subprocess.run(cmd, env=env).returncode
        except KeyboardInterrupt:
            print("\ninterrupted; rerun the same command to resume (finished jobs are kept)", file=out)
            return None
    finally:
        held.close()
