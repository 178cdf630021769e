"""A cooldown branch of `make budgets`: a run that starts from a trunk's checkpoint (weights, optimizer state,
schedule state, step counter, data position and RNG: the trunk's run continued) and cools down to its own budget
as module.schedule=wsd. The trunk is a module.schedule=constant run that kept those checkpoints
(callbacks.branch_points). Trunk to step S, then branch to B steps, trains what one uninterrupted wsd run of B
steps trains, step for step, when S is where B's cooldown starts (schedules.cooldown_start): every step up to S has
the peak rate in both (tests/test_budgets.py holds the weights equal).

The branch's config says where it starts, `budgets` (conf/train.yaml): {role: branch, checkpoint, step, trunk: the
trunk's store key, ...}. Before any data is read, one line each if: the checkpoint is missing, holds another step or
no trunk, the trunk has not finished, is another run than the branch names, or was trained with other settings than
the branch's (all but BRANCH_KEYS, what a branch changes). A branch killed after its own first checkpoint resumes
from that one, as any run does (headsweep.training.resume).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf

from headsweep.store import CorruptRecord, experiment_key, read_record, saved_settings
from headsweep.training.checks import ConfigError
from headsweep.training.resume import CSV_BEFORE
from headsweep.training.runs import is_complete

# What a branch sets apart from its trunk: the schedule (constant -> wsd), its cooldown and the budget
BRANCH_KEYS = ("module.schedule", "module.decay_fraction", "module.cooldown", "trainer.max_steps")


def branch_of(cfg: DictConfig) -> dict | None:
    """The run's `budgets` record where it is a cooldown branch, else None."""
    b = cfg.get("budgets")
    if b is None or b.get("role") != "branch":
        return None
    return OmegaConf.to_container(b, resolve=True)


def trunk_dir(checkpoint: str | Path) -> Path:
    """The trunk's run directory of a branch point <trunk>/branch_points/step*.ckpt."""
    return Path(checkpoint).parent.parent


def starts_from_trunk(cfg: DictConfig, out_dir: Path) -> bool:
    """A branch that has not trained a step of its own: no checkpoint of its own to resume from."""
    return branch_of(cfg) is not None and not (out_dir / "checkpoints" / "last.ckpt").is_file()


def check_branch(cfg: DictConfig, out_dir: Path) -> None:
    """A branch's trunk checkpoint, before any data is read (module docstring); nothing for other runs, or for a
    branch that resumes from its own checkpoint."""
    if is_complete(out_dir) or not starts_from_trunk(cfg, out_dir):
        return
    b = branch_of(cfg)
    missing = [k for k in ("checkpoint", "step", "trunk") if b.get(k) is None]
    if missing:
        raise ConfigError(f"budgets: a branch names its trunk's checkpoint, step and key; {missing[0]} is missing")
    ckpt, step = Path(b["checkpoint"]), int(b["step"])
    trunk = trunk_dir(ckpt)
    if not ckpt.is_file():
        raise ConfigError(
            f"budgets.checkpoint={ckpt}: the trunk's checkpoint after {step} steps is not there (a trunk not trained "
            "that far, stopped early by its time cap, or trained on another machine): run the trunk first "
            "(make budgets runs it before its branches)"
        )
    try:
        record = read_record(trunk)
    except CorruptRecord as e:
        raise ConfigError(f"budgets: the trunk's record is unreadable ({e})") from None
    if record is None or not record.complete:
        raise ConfigError(f"budgets: the trunk {trunk} has not finished (no complete results.json): finish it first")
    if (key := experiment_key(record.config)) != b["trunk"]:
        raise ConfigError(
            f"budgets.trunk={b['trunk']}: {trunk} holds the trunk {key}, another run: plan the branch again "
            "(make budgets) or point budgets.checkpoint at the trunk it names"
        )
    if diff := settings_apart(record.config, OmegaConf.to_container(cfg, resolve=True)):
        k, theirs, ours = diff[0]
        raise ConfigError(
            f"budgets: the trunk {trunk} was trained with other settings than this branch ({len(diff)} differ, e.g. "
            f"{k}: {theirs!r} there, {ours!r} here): a branch continues its own trunk; plan it again (make budgets)"
        )
    saved = torch.load(ckpt, map_location="cpu", mmap=True, weights_only=False)
    if int(saved["global_step"]) != step or saved["hyper_parameters"].get("schedule") != "constant":
        raise ConfigError(
            f"budgets.checkpoint={ckpt} holds step {saved['global_step']} of a "
            f"{saved['hyper_parameters'].get('schedule')} schedule, not step {step} of a constant-rate trunk: "
            "plan the branch again (make budgets)"
        )


def settings_apart(trunk_config: dict, branch_config: dict) -> list[tuple[str, object, object]]:
    """(key, trunk's, branch's) for each experiment setting (and the seed) in which a trunk and a branch differ,
    apart from those a branch changes (BRANCH_KEYS) and the branch's own identity (budgets.*)."""
    theirs, ours = saved_settings(trunk_config), saved_settings(branch_config)
    keys = sorted(k for k in theirs.keys() | ours.keys() if k not in BRANCH_KEYS and not k.startswith("budgets."))
    out = [(k, theirs.get(k), ours.get(k)) for k in keys if repr(theirs.get(k)) != repr(ours.get(k))]
    if trunk_config.get("seed") != branch_config.get("seed"):
        out.insert(0, ("seed", trunk_config.get("seed"), branch_config.get("seed")))
    return out


def start_from_trunk(cfg: DictConfig, out_dir: Path) -> tuple[Path, int]:
    """(the trunk checkpoint, its step) for Lightning to resume from, with the trunk's learning curve before that
    step set aside in the branch's csv/ (resume.join_metrics puts it before the branch's own rows at the end):
    the branch's metrics.csv is the whole curve of its budget, as one uninterrupted run's."""
    b = branch_of(cfg)
    ckpt, step = Path(b["checkpoint"]), int(b["step"])
    source = trunk_dir(ckpt) / "csv" / "metrics.csv"
    if source.is_file():
        with open(source, newline="") as f:
            reader = csv.DictReader(f)
            fields, rows = list(reader.fieldnames or []), [r for r in reader if r.get("step") and int(r["step"]) < step]
        dest = out_dir / "csv" / CSV_BEFORE.format(step=step)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".tmp")
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, dest)
    return ckpt, step


class ScheduleFromHere(pl.Callback):
    """A branch's first rate is its own schedule's. Lightning restores the optimizer with the rate the trunk's
    scheduler set for the next step (the peak) and the scheduler's step count; the branch's own schedule function
    (a closure, never saved) takes over from the step after. This sets the next step's rate from it too, as one
    uninterrupted wsd run would have: the same peak where the cooldown starts exactly at the branch point, and in
    floating point the same number where (1 - S/B)/f rounds a hair below 1."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for config in trainer.lr_scheduler_configs:
            s = config.scheduler
            rates = [base * fn(s.last_epoch) for base, fn in zip(s.base_lrs, s.lr_lambdas)]
            for group, rate in zip(s.optimizer.param_groups, rates):
                group["lr"] = rate
            s._last_lr = rates
