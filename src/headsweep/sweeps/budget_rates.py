"""Where each cell of `make budgets` gets its peak rate, precision and device: the finished runs of the sweep it reads
(results/<sweep>/, or FROM=<sweep>): the rate that sweep chose for the cell (its lr_select record, else the choice its
finished grid runs make), unless those runs were trained with other settings than the plan's cell (a rate chosen at
unit gains is not the chosen start's); the precision and device its runs share, so that a cell's 1x branch compares
with its 1x run on one machine class."""

from __future__ import annotations

import math
import re
from pathlib import Path

from headsweep.machine import CLASS_KEY
from headsweep.store import as_seen, read_record, settings_diff
from headsweep.sweeps import lr_select
from headsweep.sweeps.sweep_settings import finished_values
from headsweep.training.runs import is_complete


def chosen_rate(results: Path | None, source: str, cell: str, seeds: list[int]) -> tuple[float, str] | None:
    """(the peak rate the sweep chose for the cell, where that is recorded): the lr_select record of the cell's
    finished runs in results/<source>/; else, where the cell's grid runs have all finished but its chosen-rate runs
    have not, the rate their losses choose (lr_select.choose, as make sweep LR_GRID= will); None where neither is
    there (a sweep without a grid, or not run)."""
    if results is None:
        return None
    for seed in seeds:
        view = results / source / f"{cell}-s{seed}"
        if not is_complete(view):
            continue
        config = as_seen(read_record(view), source, view.name)["config"]
        if (config.get("lr_select") or {}).get("phase") == "chosen":
            return float(config["module"]["peak_lr"]), f"{source}/{view.name}"
    grid, losses = lr_select.recorded_grid(results / source, cell, seeds[0]), {}
    for v in grid:
        view = results / source / lr_select.grid_job_name(cell, v, seeds[0])
        loss = read_record(view).metrics.get(lr_select.SELECT_ON) if is_complete(view) else None
        if loss is None:
            return None
        losses[v] = math.inf if math.isnan(loss) else float(loss)
    if not losses:
        return None
    rates = ",".join(map(lr_select.lr_text, grid))
    return lr_select.choose(losses), f"{source}: its grid {rates} of seed {seeds[0]}, by final val/loss"


def rate_settings_apart(results: Path | None, source: str, cell: str, flat: dict) -> str | None:
    """Where the cell's finished runs in results/<source>/ (chosen-rate and grid runs) were trained with other
    settings than this plan's cell (e.g. the residual outputs' gains of ARGS), a few words saying which: the rate
    they chose is not this cell's, and the plan says so rather than borrow it. None where they match or none is
    there."""
    if results is None or not (results / source).is_dir():
        return None
    for view in sorted((results / source).glob(f"{cell}-*")):
        if not re.fullmatch(r"(-lr[^-]+)?-s\d+", view.name[len(cell) :]):
            continue  # another cell whose name starts with this one's
        record = read_record(view) if is_complete(view) else None
        if record is None:
            continue
        diff, theirs, ours = settings_diff(record.config, flat, record.seed)
        # the rate chosen on one machine class serves another (CLASS_KEY only keeps their runs apart)
        if apart := [k for k in diff if k not in ("seed", "module.peak_lr", CLASS_KEY)]:
            k = apart[0]
            there = f"{k}: {theirs.get(k)!r} there, {ours.get(k)!r} here"
            return f"{source}'s runs of {cell} trained with other settings ({there})"
    return None


def source_pins(source: str, results: Path | None, asked: list[str]) -> list[str]:
    """The precision and device of the sweep's own finished runs, where the command does not choose them: a
    cell's 1x branch then compares with its 1x run on one machine class."""
    if results is None:
        return []
    keys = {o.lstrip("+~").split("=", 1)[0] for o in asked}
    found = finished_values(results / source)
    return [
        f"{key}={next(iter(values))}"
        for key, values in found.items()
        if len(values) == 1 and key not in keys and "trainer" not in keys
    ]
