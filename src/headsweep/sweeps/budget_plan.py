"""Planning `make budgets` (headsweep.sweeps.budgets): the budgets' steps and branch points, then a sweep's cells as
trunks and cooldown branches, each checked before any job starts (one line each).

A budget list BUDGETS=1,2,4 is multiples of the sweep's budget (its trainer.max_steps, 1,150 at BUDGET=ablation);
COOLDOWN=0.2 is the share of each budget that cools down. Budget B then leaves the trunk after
cooldown_start(B, 0.2) = floor(0.8 B) steps (920, 1,840, 3,680), and the trunk runs to the last of them.
"""

from __future__ import annotations

import fnmatch
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from headsweep import store
from headsweep.config import SWEEPS_DIR
from headsweep.machine import CLASS_KEY, this_class
from headsweep.store import experiment_key, flat_key, read_record, settings_diff
from headsweep.sweeps import planning
from headsweep.sweeps.budget_rates import chosen_rate, rate_settings_apart, source_pins
from headsweep.sweeps.classes import class_pin, other_class
from headsweep.sweeps.jobs import Job, Sweep
from headsweep.sweeps.reuse import find_reuse, finished_runs
from headsweep.sweeps.specs import SweepError, load_spec, record_override, split_parameters
from headsweep.sweeps.sweep_settings import shared_overrides
from headsweep.training.checks import ConfigError, max_time_seconds
from headsweep.training.runs import is_complete, read_results
from headsweep.training.schedules import COOLDOWNS, cooldown_start

TRUNK, BRANCH = "trunk", "branch"
DEFAULT_SHAPE = "sqrt"  # why: docs/schedule.md ("Budgets: trunks and cooldown branches")
# The keys every trunk and branch job sets itself (COOLDOWN, SHAPES): a command that set them would be overridden
# unseen. trainer.max_steps on the command line is the base budget the multiples are of (BUDGET's otherwise).
OWN_KEYS = ("module.schedule", "module.decay_fraction", "module.cooldown", "module.decay_by", "budgets")
# ... and what each job sets from the sweep's own (its base steps and time cap, the cell's rate): these, given by the
# spec or the command, are read once from the composed cell and left off the jobs' shared command line, which would
# otherwise win over each job's file (Hydra applies command-line overrides last)
JOB_KEYS = (*OWN_KEYS, "trainer.max_steps", "trainer.max_time", "module.peak_lr", "callbacks.branch_points")


def parse_budgets(text: str) -> list[float]:
    """BUDGETS=1,2,4 -> [1, 2, 4]: positive multiples in increasing order; one line for anything else."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise SweepError(f"BUDGETS={text}: give multiples of the sweep's budget > 0, e.g. BUDGETS=1,2,4")
    if any(b <= a for a, b in zip(values, values[1:])):
        raise SweepError(
            f"BUDGETS={text} is not increasing: list each budget once, shortest first (its branch leaves the trunk "
            "first), e.g. BUDGETS=1,2,4"
        )
    return [int(v) if v == int(v) else v for v in values]


def check_fraction(fraction: float) -> float:
    if not (isinstance(fraction, int | float) and 0.0 < fraction < 1.0):
        raise SweepError(
            f"COOLDOWN={fraction}: the share of each budget that cools down must be in (0, 1), e.g. COOLDOWN=0.2"
        )
    return float(fraction)


def parse_shapes(text: str) -> list[str]:
    shapes = [p.strip() for p in str(text or DEFAULT_SHAPE).split(",") if p.strip()]
    if not shapes or any(s not in COOLDOWNS for s in shapes):
        raise SweepError(f"SHAPES={text}: each cooldown shape is one of {', '.join(COOLDOWNS)}, e.g. SHAPES=sqrt")
    if len(set(shapes)) < len(shapes):
        raise SweepError(f"SHAPES={text}: name each shape once")
    return shapes


def multiple_text(k: float) -> str:
    return f"{k:g}"


@dataclass
class Budgets:
    multiples: list[float]
    fraction: float
    shapes: list[str]
    base_steps: int
    steps: list[int] = field(default_factory=list)  # each budget's trainer.max_steps
    points: list[int] = field(default_factory=list)  # where each budget's cooldown starts: the trunk's checkpoints

    @property
    def trunk_steps(self) -> int:
        return self.points[-1]


def budget_steps(multiples: list[float], fraction: float, shapes: list[str], base_steps: int, warmup: int) -> Budgets:
    """Each budget's steps and branch point; one line where a budget is no whole number of steps or its cooldown
    would start before warm-up ends."""
    b = Budgets(list(multiples), fraction, list(shapes), base_steps)
    for k in multiples:
        steps = k * base_steps
        if abs(steps - round(steps)) > 1e-9:
            raise SweepError(
                f"BUDGETS: {multiple_text(k)} x {base_steps} steps is {steps:g}, no whole number of steps: "
                "use multiples that give whole steps"
            )
        b.steps.append(round(steps))
        b.points.append(cooldown_start(round(steps), fraction))
    if b.points[0] < warmup or len(set(b.points)) < len(b.points):
        raise SweepError(
            f"BUDGETS={','.join(map(multiple_text, multiples))} COOLDOWN={fraction:g}: the cooldowns start after "
            f"{', '.join(map(str, b.points))} steps; each must start after warm-up ({warmup} steps) and apart from "
            "the others: longer budgets or a shorter cooldown"
        )
    return b


TIME_MARGIN = 2.0  # a trunk stopped short by its time cap loses every later branch: twice the budget's own share


def scaled_time(max_time, steps: int, base_steps: int) -> str | None:
    """The budget's time cap (a safety net that only stops a job) for `steps`, as "DD:HH:MM:SS": its share per step
    times the steps, times TIME_MARGIN. A branch inherits the time its trunk spent (Lightning's Timer)."""
    try:
        seconds = max_time_seconds(max_time)
    except ConfigError as e:
        raise SweepError(str(e)) from None
    if seconds is None:
        return None
    s = math.ceil(seconds * steps / base_steps * TIME_MARGIN)
    return f"{s // 86400:02d}:{s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


@dataclass
class BudgetPlan:
    name: str  # the budgets sweep (multirun/<name>, results/<name>)
    source: str  # the sweep whose cells it reads at several budgets
    budgets: Budgets
    trunks: Sweep  # phase 1
    branches: Sweep  # phase 2: every branch; one whose trunk is not finished waits
    trunk_of: dict[str, Job]  # branch name -> its trunk's job
    keys: dict[str, str]  # job name -> its planned store key
    flats: dict[str, dict]  # job name -> its experiment settings (find_reuse's, the run-directory checks')
    rates: dict[str, tuple[float, str]]  # cell -> (peak rate, where it comes from)
    results: Path | None
    runs_from: str = ""  # the sweep whose finished runs gave the rates, precision and device (FROM=; source's)
    notes: list[str] = field(default_factory=list)  # lines the plan prints before it runs (describe)


def plan_budgets(
    source: str,
    seeds: int | None,
    extra: list[str],
    multiples: list[float],
    fraction: float,
    shapes: list[str],
    *,
    results: Path | None,
    name_as: str | None = None,
    specs_dir: Path = SWEEPS_DIR,
    only: list[str] = (),
    runs_from: str | None = None,
    **plan_kwargs,
) -> BudgetPlan:
    """Every trunk and branch of `source`'s cells, checked; nothing runs (budgets.run_budgets runs them). Each
    cell's rate, precision and device come from the finished runs of results/<runs_from>/ (FROM=, e.g. the sweep of
    the same spec at the chosen start, table3_c_start), by default results/<source>/."""
    fraction, name = check_fraction(fraction), name_as or f"{source}_budgets"
    origin = runs_from or source
    if runs_from and results is not None and not (results / runs_from).is_dir():
        raise SweepError(f"FROM={runs_from}: {results / runs_from} does not exist; name a sweep of {source}'s cells")
    if own := [o for o in extra if o.lstrip("+~").split("=", 1)[0].startswith(OWN_KEYS)]:
        raise SweepError(
            f"override {own[0]}: make budgets sets it on every trunk and branch (COOLDOWN=, SHAPES=); drop it"
        )
    spec, _ = load_spec(source, specs_dir)
    constants, _ = split_parameters(spec)
    pins = source_pins(origin, results, [*constants, *extra])
    pins += shared_overrides(name, results, [*constants, *extra, *pins])
    pins += class_pin(name, results, [*extra, *pins], this_class(torch.cuda.is_available()))
    base = planning.plan(source, seeds, [*extra, *pins], specs_dir=specs_dir, results=None, name_as=name, **plan_kwargs)
    asked_lr = next((o.split("=", 1)[1] for o in extra if o.split("=", 1)[0] == "module.peak_lr"), None)
    finished = finished_runs(results.resolve(), skip=name) if results is not None else []
    seed_list = sorted({j.seed for j in base.jobs})
    # what the jobs set leaves every job's command line: Hydra applies it after the job's own file (launch.job_config)
    common = [o for o in base.common if not o.lstrip("+~").split("=", 1)[0].startswith(JOB_KEYS)]
    trunks = replace(base, jobs=[], only=list(only), common=common)
    branches = replace(base, jobs=[], only=list(only), common=common)
    bp = BudgetPlan(name, source, None, trunks, branches, {}, {}, {}, {}, results, origin)
    templates = {}
    for job in base.jobs:
        templates.setdefault(job.cell, {})[job.seed] = job
    flats = base.flats  # each cell's settings, as planning composed them
    for cell in templates:
        apart = None if asked_lr else rate_settings_apart(results, origin, cell, flats[cell])
        found = None if asked_lr or apart else chosen_rate(results, origin, cell, seed_list)
        why = f"{apart}: set ARGS=module.peak_lr=<v> to choose" if apart else "no chosen rate"
        bp.rates[cell] = found or (
            float(flats[cell]["module.peak_lr"]),
            "module.peak_lr on the command line" if asked_lr else f"the config: {why}",
        )
    any_flat = next(iter(flats.values()))
    bp.budgets = budget_steps(
        multiples, fraction, shapes, any_flat["trainer.max_steps"], any_flat["module.warmup_steps"]
    )
    for seed in seed_list:  # seed-major, as make sweep: a half-done plan has every cell once
        for cell, jobs in templates.items():
            add_cell(bp, jobs[seed], flats[cell], finished)
    names = [j.name for j in [*bp.trunks.jobs, *bp.branches.jobs]]
    if unmatched := [g for g in only if not any(fnmatch.fnmatchcase(n, g) for n in names)]:
        raise SweepError(
            f"--only '{unmatched[0]}' matches none of {name}'s trunks and branches ({', '.join(names[:3])}, ...): "
            "use their names, with * and ?"
        )
    for job in [*bp.trunks.jobs, *bp.branches.jobs]:
        check_run_dir(job, bp.flats[job.name], bp.keys[job.name])
    here = this_class(base.on_gpu)
    if here is None or any(o.lstrip("+~").split("=", 1)[0] == CLASS_KEY for o in extra):
        return bp
    if note := other_class(bp, here):  # the store's trunks are another class's: this class's own, keyed apart
        again = plan_budgets(
            source, seeds, [*extra, f"{CLASS_KEY}='{here}'"], multiples, fraction, shapes, results=results,
            name_as=name_as, specs_dir=specs_dir, only=only, runs_from=runs_from, **plan_kwargs,
        )  # fmt: skip
        again.notes.insert(0, note)
        return again
    return bp


def add_cell(bp: BudgetPlan, template: Job, flat: dict, finished: list) -> None:
    """The trunk of one cell and seed, and its branches, with their store keys, each checked against a finished
    run of its name (reuse.find_reuse) and noted where the store holds it."""
    b, seed, cell = bp.budgets, template.seed, template.cell
    rate, rate_from = bp.rates[cell]
    keep = [o for o in template.overrides if not o.startswith(("seed=", "module.peak_lr="))]
    common = [*keep, f"module.peak_lr={rate!r}", "module.decay_by=steps", f"module.decay_fraction={b.fraction!r}"]
    common_flat = {**flat, "module.peak_lr": rate, "module.decay_by": "steps", "module.decay_fraction": b.fraction}
    max_time = flat.get("trainer.max_time")

    def job(name: str, overrides: list[str], tags: list[str], steps: int, base: bool) -> Job:
        time = scaled_time(max_time, steps, b.base_steps)
        return replace(
            template,
            name=name,
            overrides=[*overrides[:-1], *([f"trainer.max_time='{time}'"] if time else []), overrides[-1]],
            tags=[t for t in template.tags if t != "base" and not t.startswith("cell-")] + tags,
            dir=bp.trunks.dir / name,
            base=base,
            export=Path(os.path.abspath(bp.results / bp.name / name)) if bp.results is not None else None,
            same_as=None,
            trained_as=None,
        )

    trunk_record = {
        "role": TRUNK,
        "budgets": b.multiples,
        "base_steps": b.base_steps,
        "cooldown": b.fraction,
        "branch_steps": b.points,
        "rate_from": rate_from,
        "base": template.base,  # the sweep's base cell: what reports.pages.budgets measures every cell against
    }
    trunk = job(
        f"{cell}-trunk-s{seed}",
        [
            *common,
            "module.schedule=constant",
            "module.cooldown=linear",  # the trunk is every shape's: the neutral value keeps it out of its key
            f"trainer.max_steps={b.trunk_steps}",
            f"callbacks.branch_points.steps=[{','.join(map(str, b.points))}]",
            record_override("budgets", trunk_record),
            f"seed={seed}",
        ],
        [f"cell-{cell}-trunk", TRUNK],
        b.trunk_steps,
        False,
    )
    trunk_flat = {**common_flat, "module.schedule": "constant", "module.cooldown": "linear"}
    trunk_flat["trainer.max_steps"] = b.trunk_steps
    register(bp, trunk, trunk_flat, finished, bp.trunks)
    home = Path(os.path.abspath(trunk_home(trunk)))
    for k, steps, point in zip(b.multiples, b.steps, b.points):
        for shape in b.shapes:
            record = {
                "role": BRANCH,
                "budget": k,
                "base_steps": b.base_steps,
                "cooldown": b.fraction,
                "trunk": bp.keys[trunk.name],
                "step": point,
                "checkpoint": str(home / "branch_points" / f"step{point:06d}.ckpt"),
                "rate_from": rate_from,
                "base": template.base,
            }
            label = f"{cell}-{multiple_text(k)}x-{shape}"
            branch = job(
                f"{label}-s{seed}",
                [
                    *common,
                    "module.schedule=wsd",
                    f"module.cooldown={shape}",
                    f"trainer.max_steps={steps}",
                    record_override("budgets", record),
                    f"seed={seed}",
                ],
                [f"cell-{label}", BRANCH, f"budget-{multiple_text(k)}x", f"cooldown-{shape}"],
                steps,
                template.base,
            )
            branch_flat = {**common_flat, "module.schedule": "wsd", "module.cooldown": shape}
            branch_flat.update({"trainer.max_steps": steps, "budgets.trunk": record["trunk"], "budgets.step": point})
            register(bp, branch, branch_flat, finished, bp.branches)
            bp.trunk_of[branch.name] = trunk


def register(bp: BudgetPlan, job: Job, flat: dict, finished: list, sweep: Sweep) -> None:
    bp.flats[job.name], bp.keys[job.name] = flat, flat_key(flat, job.seed)
    find_reuse(job, flat, finished)
    sweep.jobs.append(job)


def trunk_home(trunk: Job) -> Path:
    """The run directory that holds (or will hold) the trunk's checkpoints: its own, or, where the store already
    holds the trunk (another budgets sweep made it: a base cell every row shares), that run's."""
    if trunk.same_as is not None and not trunk.done:
        stored = read_record(trunk.same_as)
        if stored is not None and stored.raw.get("output_dir"):
            return store.local_path(stored.raw["output_dir"])
    return trunk.dir


def check_run_dir(job: Job, flat: dict, key: str) -> None:
    """A trunk's or branch's run directory holds this job or nothing: a finished run there with another key, or
    an unfinished one whose checkpoint has other module settings (a resume would mix two experiments), is one line."""
    if is_complete(job.dir):
        config = read_results(job.dir)["config"]
        if experiment_key(config) != key:
            diff, theirs, ours = settings_diff(config, flat, job.seed)
            k = diff[0] if diff else "budgets.trunk"
            raise SweepError(
                f"{job.dir} holds a run trained with other settings than {job.name} ({k}: {theirs.get(k)!r} there, "
                f"{ours.get(k)!r} here): move it away, or plan with its settings"
            )
        return
    last = job.dir / "checkpoints" / "last.ckpt"
    if not last.is_file():
        return
    try:
        saved = torch.load(last, map_location="cpu", mmap=True, weights_only=False)["hyper_parameters"]
    except Exception:  # noqa: BLE001 - unreadable: the resume sets it aside and says so (training.resume)
        return
    for name, value in saved.items():
        ours = flat.get(f"module.{name}")
        if name in ("peak_lr", "warmup_steps", "schedule", "decay_fraction", "cooldown") and repr(ours) != repr(value):
            raise SweepError(
                f"{job.dir} holds an unfinished run with module.{name}={value!r} and {job.name} trains with "
                f"{ours!r}: resuming it would mix two experiments; move it away"
            )
