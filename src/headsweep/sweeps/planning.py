"""Planning a sweep: every job of sweeps/<name>.yaml (grid cell x seed), each cell composed and its model
built on the meta device first, so a bad key or value, cells that would train for unequal steps or in
different precisions, devices or inits, or more jobs than cores stop the sweep with one line before any job
starts. Then each cell's model is built on the CPU at init and measured (headsweep.sweeps.init_check):
a cell that differs from its base in what it does not vary on purpose gets one printed line."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import torch
from omegaconf import OmegaConf

from headsweep.analysis.settings import AnalysisSettings
from headsweep.config import SWEEPS_DIR, compose
from headsweep.identity import cell_labels
from headsweep.model.lr_scaling import base_fan_ins
from headsweep.store import flatten_config
from headsweep.sweeps.classes import class_bases
from headsweep.sweeps.init_check import (
    bases,
    check_margin,
    confound_lines,
    init_check_table,
    measure,
    measure_update,
    update_check_table,
    update_lines,
    update_settings,
)
from headsweep.sweeps.jobs import Job, Sweep
from headsweep.sweeps.packing import (
    DEFAULT_FOOTPRINT_GIB,
    cards,
    device_override,
    device_slug,
    measured_footprint,
    packed_jobs,
)
from headsweep.sweeps.reuse import find_reuse, finished_runs
from headsweep.sweeps.specs import (
    RESERVED,
    SweepError,
    format_value,
    load_spec,
    row_tag,
    spec_seeds,
    split_parameters,
)
from headsweep.sweeps.sweep_settings import SHARED, finished_values, resolved_values, shared_overrides
from headsweep.training.checks import ConfigError, check_config

# Hydra's own launcher plugins (hydra-joblib-launcher, hydra-submitit-launcher); configure them with
# overrides, e.g. hydra.launcher.n_jobs=2 or hydra.launcher.partition=gpu hydra.launcher.gpus_per_node=1.
LAUNCHERS = {
    "basic": [],
    "joblib": ["hydra/launcher=joblib"],
    # a job that hits its time limit is requeued (up to 3 times) and resumes from its checkpoint
    "submitit": ["hydra/launcher=submitit_slurm", "hydra.launcher.max_num_timeout=3"],
    "submitit_local": ["hydra/launcher=submitit_local"],
}


def _first_line(e: Exception) -> str:
    return next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)


def default_jobs(cores: int) -> int:
    """Two jobs of cores/2 threads on a CPU: on 2 cores two 1-thread jobs trained 1.09-1.46x the target
    tokens/s of one 2-thread job (`make bench`, docs/speed.md); one job where a GPU takes the work."""
    return 1 if torch.cuda.is_available() or cores < 2 else 2


def plan(
    name: str,
    seeds: int | None,
    extra: list[str] = (),
    *,
    budget: str | None = None,
    launcher: str = "basic",
    specs_dir: Path = SWEEPS_DIR,
    root: Path = Path("multirun"),
    results: Path | None = None,
    jobs: int | None = 1,
    cores: int | None = None,
    only: list[str] = (),
    name_as: str | None = None,
    update_margin: float | None = None,
    tables: bool = False,
) -> Sweep:
    """Every job of the sweep, checked before any runs; a finished run in `results` that a job can take
    over is noted on the job (headsweep.sweeps.reuse). `name_as`: the sweep's own name (its folders in
    multirun/ and results/, its W&B tag) when it is not the spec's, e.g. table3_a_h100 for the spec table3_a
    run on a GPU. `update_margin`: run the update check (init_check.update_lines) with that margin; None: not
    (`make sweep` runs it; it trains each cell a few steps, seconds a cell). `tables`: also print both checks'
    tables, every cell (`make checks`)."""
    if update_margin is not None:
        try:
            update_margin = check_margin(update_margin)
        except ValueError as e:
            raise SweepError(str(e)) from None
    spec, path = load_spec(name, specs_dir)
    if seeds is not None and seeds < 1:
        raise SweepError(f"--seeds must be >= 1, got {seeds}")
    seed_list = spec_seeds(spec) if seeds is None else list(range(1, seeds + 1))
    for o in extra:
        key = o.lstrip("+~").split("=", 1)[0]
        if key in RESERVED:
            raise SweepError(f"override '{o}': {key} is set per job by the sweep; drop it")
    spec_name, name = name, name_as or name
    constants, cells = split_parameters(spec)
    cores = cores or os.cpu_count() or 1
    on_gpu, device = sweep_device(name, results, [*constants, *extra])
    n_cards = 0
    if on_gpu and (found := cards()):  # without a card the plan still lists; launching it stops (launch.run)
        n_cards = len(found)
        jobs = packed_jobs(jobs, found, measured_footprint(results) or DEFAULT_FOOTPRINT_GIB, cores)
    # GPU jobs are checked against the card's memory and two per core (packing.packed_jobs)
    launcher, jobs, threads = parallel_jobs(launcher, jobs, cores, limit=2 * cores if n_cards else cores)
    # the launcher's overrides too, so that hydra.launcher.* settings in `extra` are checked against it
    common = [
        f"sweep={name}",
        *LAUNCHERS[launcher],
        *device,
        *([f"budget={budget}"] if budget else []),
        *constants,
        *extra,
    ]
    # the precision and device its finished jobs ran with, unless the spec or the command already sets them
    common += shared_overrides(name, results, [*constants, *extra, *device])
    if threads:
        common += [f"hydra.launcher.n_jobs={jobs}", f"threads={threads}"]
    try:
        cells = with_lr_base(common, cells, path)
        composed = [compose_cell(common, cell, path) for cell in cells]
    except SweepError:
        # composing each override alone is the slower half of planning: only done to name which one is at fault
        check_overrides(common, spec, path)
        raise
    labels = check_cells(composed, path)
    checks = [measure(c[4], seed_list[0], first_layer=True) for c in composed]  # on the CPU: ~0.1 s a cell
    for line in confound_lines(name, labels, [c[0] for c in composed], checks):
        print(line, flush=True)
    if update_margin is not None:  # each cell a few steps at its rate (the default: a grid's cells share it)
        steps = [measure_update(c[4], update_settings(c[0]), seed_list[0]) for c in composed]
        for line in update_lines(name, labels, [c[0] for c in composed], steps, update_margin):
            print(line, flush=True)
    if tables:
        flats = [c[0] for c in composed]
        print("\n".join(["At init:", *init_check_table(labels, flats, checks)]), flush=True)
        if update_margin is not None:
            print("\n".join(["First steps:", *update_check_table(labels, flats, steps, update_margin)]), flush=True)

    sweep = Sweep(name, path, root / name, common, threads=threads, only=list(only), on_gpu=on_gpu, spec=spec_name)
    sweep.flats = {label: c[0] for label, c in zip(labels, composed)}
    finished = finished_runs(results.resolve(), skip=name) if results is not None else []
    for seed in seed_list:  # seed-major: a half-done sweep already has every cell once
        for i, (cell, label, (flat, tags, analysis, plain, _)) in enumerate(zip(cells, labels, composed)):
            run = f"{label}-s{seed}"
            card = device_override(len(sweep.jobs), n_cards)  # several GPUs: jobs spread round-robin
            job = Job(
                name=run,
                cell=label,
                seed=seed,
                overrides=[*cell, *(f"{k}={v}" for k, v in plain.items()), f"seed={seed}", *card],
                tags=[*tags, row_tag(name), f"cell-{label}", *(["base"] if i == 0 else [])],
                dir=sweep.dir / run,
                base=i == 0,
                export=Path(os.path.abspath(results / name / run)) if results else None,
                analysis=analysis,
            )
            find_reuse(job, flat, finished)
            sweep.jobs.append(job)
    if unmatched := [g for g in sweep.only if not any(fnmatch.fnmatchcase(j.name, g) for j in sweep.jobs)]:
        raise SweepError(
            f"--only '{unmatched[0]}' matches none of {name}'s jobs "
            f"({', '.join(j.name for j in sweep.jobs[:4])}, ...): use their names, with * and ?"
        )
    if results is not None:
        sweep.jobs += class_bases(sweep, finished)  # the base again where cells train on another class
    return sweep


def _asked_device(overrides: list[str]) -> str | None:
    """'gpu' or 'cpu' where the overrides choose the device (trainer=gpu, trainer.accelerator=cpu, ...)."""
    for o in reversed(overrides):
        key, _, value = o.partition("=")
        if key in ("trainer", "trainer.accelerator"):
            return "gpu" if value in ("gpu", "cuda") else "cpu"
    return None


def sweep_device(name: str, results: Path | None, overrides: list[str]) -> tuple[bool, list[str]]:
    """(whether the sweep trains on GPUs, the override that says so). The command or spec decides; else the
    device its finished jobs ran on; else a GPU where torch sees one. A sweep never mixes devices: on a GPU
    machine, a sweep whose finished runs are CPU runs stops with one line."""
    asked = _asked_device(overrides)
    if asked is not None:
        return asked == "gpu", []
    finished = finished_values(results / name)["trainer.accelerator"] if results is not None else {}
    if "gpu" in finished:
        return True, []  # shared_overrides keeps it there (and stops on a machine without a GPU)
    if not torch.cuda.is_available():
        return False, []
    if finished:
        job = next(iter(finished.values()))
        raise SweepError(
            f"{results / name} holds CPU runs ({job}) and this machine has a GPU: a sweep never mixes "
            "devices; run the GPU sweep under its own name "
            f"(NAME={name}_{device_slug(torch.cuda.get_device_name())}) or stay on the CPU "
            f"(ARGS=trainer=cpu)"
        )
    return True, ["trainer=gpu"]


def parallel_jobs(launcher: str, jobs: int | None, cores: int, limit: int | None = None) -> tuple[str, int, int | None]:
    """(the launcher, jobs at once, torch threads per job or None) for `jobs` (None: the default) on `cores`;
    at most `limit` jobs (default: the cores)."""
    if launcher not in LAUNCHERS:
        raise SweepError(f"unknown launcher '{launcher}'; one of {', '.join(LAUNCHERS)}")
    if jobs is None:
        jobs = default_jobs(cores)
    limit = limit or cores
    if not 1 <= jobs <= limit:
        raise SweepError(f"JOBS={jobs}: run between 1 and {limit} jobs at once on this machine's {cores} cores")
    if jobs == 1:
        return launcher, jobs, None
    if launcher == "basic":
        launcher = "joblib"  # Hydra's basic launcher runs one job at a time
    if launcher != "joblib":
        raise SweepError(
            f"JOBS={jobs} runs local jobs in parallel with the joblib launcher, not {launcher}; "
            "a cluster launcher sets its own parallelism (hydra.launcher.array_parallelism)"
        )
    return launcher, jobs, max(cores // jobs, 1)


def check_overrides(common: list[str], spec: dict, path: Path) -> None:
    """The common overrides compose, and so does each parameter alone (the error names it)."""
    try:
        compose(common)
    except Exception as e:
        raise SweepError(f"overrides {' '.join(common)}: {_first_line(e)}") from None
    for key, p in spec["parameters"].items():
        first = format_value(p["value"] if "value" in p else p["values"][0])
        try:
            compose([*common, f"{key}={first}"])
        except Exception as e:
            raise SweepError(f"{path}: parameter '{key}' is not a config key or value here: {_first_line(e)}") from None


def _scaling(overrides: list[str], key: str = "module.lr_scaling") -> str | None:
    """The value of `key` (module.lr_scaling, model.init_wo) these overrides set last, None where they leave it
    at the config's."""
    found = [o.split("=", 1)[1] for o in overrides if o.lstrip("+~").split("=", 1)[0] == key]
    return found[-1] if found else None


def with_lr_base(common: list[str], cells: list[list[str]], path: Path) -> list[list[str]]:
    """The cells, each with module.lr_base={w_o:..,ff_w2:..}, its base cell's fan-ins (the first cell of its
    d_model, as the init check's base), where any cell runs per-matrix rates (module.lr_scaling=mup), and with
    model.init_wo_base=<the base's h * d_v> where any cell draws W^O by muP (model.init_wo=mup); the cells
    unchanged otherwise. The sizes come from composing each cell without either (mup without its base would
    stop the check)."""
    rates = "mup" in {_scaling([*common, *cell]) for cell in cells}
    wo = "mup" in {_scaling([*common, *cell], "model.init_wo") for cell in cells}
    if not (rates or wo):
        return cells
    plain = ["module.lr_scaling=none", "model.init_wo=fan_in"]
    flats = [compose_cell(common, [*cell, *plain], path)[0] for cell in cells]
    out = []
    for cell, b in zip(cells, bases(flats)):
        fans = base_fan_ins(flats[b])
        more = ["module.lr_base={" + ",".join(f"{k}:{v}" for k, v in fans.items()) + "}"] if rates else []
        out.append([*cell, *more, *([f"model.init_wo_base={fans['w_o']}"] if wo else [])])
    return out


def compose_cell(common: list[str], cell: list[str], path: Path) -> tuple[dict, list, dict | None, dict, dict]:
    """(flat settings, tags, analysis settings or None, plain values to pass on, the model config) of one
    checked grid cell."""
    try:
        cfg = compose([*common, *cell])
        check_config(cfg)
        plain = resolved_values(cfg)  # plain values: precision, width-scaled learning rate
        analysis = OmegaConf.to_container(cfg.analysis, resolve=True) if cfg.get("analysis") else None
        if analysis is not None:
            AnalysisSettings(**analysis)  # checked like the rest of the config: one line, nothing started
    except ConfigError as e:
        raise SweepError(f"{path}: cell {' '.join(cell)}: {e}") from None
    except Exception as e:
        raise SweepError(f"{path}: cell {' '.join(cell)}: {_first_line(e)}") from None
    flat = flatten_config(cfg)
    flat.update(plain)
    return flat, list(cfg.tags), analysis, plain, OmegaConf.to_container(cfg.model, resolve=True)


def check_cells(composed: list[tuple], path: Path) -> list[str]:
    """The cells' labels, once the cells train for equal steps in one precision from one init and differ from
    each other."""
    flats = [c[0] for c in composed]
    steps = {f["trainer.max_steps"] for f in flats}
    if len(steps) > 1 or not all(isinstance(n, int) and n > 0 for n in steps):
        raise SweepError(
            f"{path}: the cells would train for unequal or unlimited steps (trainer.max_steps "
            f"{sorted(map(str, steps))}); an ablation compares cells at equal steps: fix trainer.max_steps"
        )
    for key in SHARED:  # trainer.precision, trainer.accelerator
        if len(values := {str(f.get(key)) for f in flats}) > 1:
            raise SweepError(
                f"{path}: the cells would train with different {key} ({', '.join(sorted(values))}); a "
                f"sweep compares cells in one precision on one device: set {key} for the whole sweep"
            )
    if len(inits := {str(f.get("model.init")) for f in flats}) > 1:
        raise SweepError(
            f"{path}: the cells would start from different model.init ({', '.join(sorted(inits))}); an "
            "init is the protocol, not an ablated setting: set model.init for the whole sweep (a mirror "
            "cell scales K/V with model.init_kv_gain instead)"
        )
    labels = cell_labels([{k: v for k, v in f.items() if k != "module.peak_lr"} for f in flats])
    if len(set(labels)) < len(labels):
        raise SweepError(f"{path}: two grid cells compose to the same config ({labels}); remove the duplicate")
    return labels
