"""A learning-rate grid over a sweep first planned at one rate, under the sweep's own name: `make table3` under
the chosen start, whose rows first ran every cell at 2e-3, then row C's widths wanted other rates.

The sweep's plain views (<cell>-s<k>, planned without a grid: no lr_select as the sweep shows them) are finished
runs the grid can use, never overwritten:

- phase 1: a cell's plain seed 1 at rate r is the grid's run at r, shown as <cell>-lr<r>-s1 too, not trained
  again (every other second name of one run in one sweep is refused: its page would count it twice);
- phase 2, where the grid chooses r: the plain seeds are the chosen seeds (their views get the selection);
- phase 2, where it chooses another rate: the plain seed-1 view gives way to the chosen grid run (its own run
  stays shown as <cell>-lr<r>-s1); plain seeds 2.. at r are no seeds at the chosen rate, and the cell waits,
  with one line naming the views to take away (`python -m headsweep.store unshow`; the runs stay in the store).
"""

from __future__ import annotations

import math
from pathlib import Path

from headsweep.store import as_seen, read_record
from headsweep.sweeps.jobs import Job
from headsweep.sweeps.specs import SweepError
from headsweep.training.runs import is_complete


def plain_rate(view: Path, sweep: str) -> float | None:
    """The peak rate of the finished view results/<sweep>/<job> when the sweep planned it without a grid;
    None for no view, an unfinished one, or a view with a learning-rate selection."""
    if not view.is_symlink() or not is_complete(view):
        return None
    config = as_seen(read_record(view), sweep, view.name)["config"]
    return None if config.get("lr_select") else float(config["module"]["peak_lr"])


def check_not_shown_twice(job: Job, finished: list, own: str, plain: str) -> str | None:
    """A grid run whose experiment this sweep already shows under another name would be a second view of one
    run in one sweep, which its page would count twice: one line, nothing planned. The exception is `plain`,
    the cell's seed view planned before the grid, the grid's run at its rate: its name is returned (adopted)."""
    if job.same_as is None:
        return None
    record = next(r for d, r in finished if d == job.same_as)
    shown = [v["job"] for v in record.views if v.get("sweep") == own and v.get("job") != job.name]
    if not shown:
        return None
    if shown == [plain] and not as_seen(record, own, plain)["config"].get("lr_select"):
        return plain
    raise SweepError(
        f"{own} already shows {shown[0]}, the experiment of grid run {job.name} (under another learning-rate "
        f"selection): plan the grid under its own name (NAME={own}_edge, --name {own}_edge)"
    )


def at_another_rate(views: list[Path], rate: float, grid_done: dict[float, bool]) -> tuple[list[str], list[Path]]:
    """(seed views that give way, seed views that hold the cell) of a cell whose grid chose `rate`; `views`: its
    seeds' views, seed 1 first; `grid_done`: its grid rates, whether each grid run is shown in the sweep. Plain
    seed 1 at a grid rate gives way (the grid run shows it); any other plain seed at another rate holds."""
    give, hold = [], []
    for i, view in enumerate(views):
        r = plain_rate(view, view.parent.name)
        if r is None or math.isclose(r, rate, rel_tol=1e-9):
            continue
        shown = any(math.isclose(r, v, rel_tol=1e-9) and done for v, done in grid_done.items())
        if i == 0 and shown:
            give.append(view.name)
        else:
            hold.append(view)
    return give, hold


def hold_line(cell: str, hold: list[Path], rate: float) -> str:
    """What a held cell waits for, and the command that frees it."""
    rates = sorted({f"{plain_rate(v, v.parent.name):g}" for v in hold})
    return (
        f"  {cell}: waits: {', '.join(v.name for v in hold)} trained at {', '.join(rates)} before the grid, which "
        f"chose {rate:g}: no seeds at that rate, never overwritten; take the views away (their runs stay in "
        f"results/runs/), then rerun: python -m headsweep.store unshow {' '.join(map(str, hold))}"
    )
