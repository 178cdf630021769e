"""A sweep's base on every machine class its cells ran on. bf16 kernels differ between classes, so a cell's Δ is
taken against a base of its own class (reports.pages.verdicts). A base that the store holds from another class
(shared, or finished there) does not serve cells trained here: the plan adds the base's seeds again under
`machine_class=<this class>` (part of the run's identity, so the store keeps both), named <base cell>-<class>-s<n>
and tagged as the base cell, so every page reads them as the base of that class.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from headsweep import store
from headsweep.machine import CLASS_KEY, NOT_RECORDED, class_slug, run_class, this_class
from headsweep.sweeps.jobs import Job, Sweep
from headsweep.sweeps.reuse import find_reuse
from headsweep.sweeps.specs import SweepError
from headsweep.training.runs import is_complete, read_results


def run_class_of(run_dir: Path) -> str:
    return run_class(read_results(run_dir).get("machine"))


def job_class(job: Job, here: str) -> str:
    """The class a job's run is of: the finished run's, the stored run it shows (same_as), the run whose model it
    analyses (trained_as: the model is that class's); else it trains here."""
    if job.export is not None and job.finished(job.export):
        return run_class_of(job.export)
    if job.same_as is not None:
        return run_class_of(job.same_as)
    if job.trained_as is not None:
        return run_class_of(job.trained_as)
    return here


def class_job(base: Job, machine_class: str, sweep: Sweep) -> Job:
    """The base job `base` again for `machine_class`: its overrides, tags and seed, its own name and view."""
    quoted = machine_class.replace("'", "")  # a Hydra override's quoted string
    name = f"{base.cell}-{class_slug(machine_class)}-s{base.seed}"
    return dataclasses.replace(
        base,
        name=name,
        overrides=[*base.overrides, f"machine_class='{quoted}'"],
        dir=sweep.dir / name,
        export=base.export.parent / name if base.export is not None else None,
        same_as=None,
        trained_as=None,
    )


def class_bases(sweep: Sweep, finished: list, flat: dict | None = None, args: str = "", out=None) -> list[Job]:
    """Base jobs for the classes whose cells have no base of their class: run here for this machine's class,
    listed as done for another class where they finished there; one line for each class still missing. Runs from
    before results.json named its machine (NOT_RECORDED) say nothing either way. `flat`: the base's settings
    (default: the sweep's composed base cell; a grid sweep passes it at the base's chosen rate); `args`: what the
    line's `make sweep` command needs besides the sweep's names (a grid sweep's LR_GRID=...)."""
    here = this_class(sweep.on_gpu)
    bases = [j for j in sweep.jobs if j.base]
    if here is None:  # a GPU sweep planned where torch sees no card: launching it stops (launch.run)
        return []
    cells = [j for j in sweep.jobs if not j.base and (j.done or j.same_as or j.trained_as or sweep.selects(j))]
    have = {job_class(j, here) for j in bases}
    if not bases or NOT_RECORDED in have:
        return []
    need = sorted({job_class(j, here) for j in cells} - have - {NOT_RECORDED})
    flat = flat if flat is not None else sweep.flats[bases[0].cell]
    added = []
    for machine_class in need:
        jobs = [class_job(b, machine_class, sweep) for b in bases]
        for job in jobs:
            find_reuse(job, {**flat, "machine_class": machine_class}, finished)
        done = [j for j in jobs if j.done or j.same_as is not None]
        if machine_class == here:
            added += jobs
            if sweep.only and not all(sweep.selects(j) for j in jobs):
                sweep.only += [j.name for j in jobs]  # the cells asked for need their class's base
            left = len(jobs) - len(done)
            if left:
                print(
                    f"  {sweep.name}: cells train on {here}, whose base is not in the store: {left} base job(s) "
                    f"planned here ({jobs[0].name}, ...), so no Δ crosses a class",
                    file=out,
                )
        else:
            added += done
            named = f" NAME={sweep.name}" if sweep.spec and sweep.spec != sweep.name else ""
            if len(done) < len(jobs):
                print(
                    f"  {sweep.name}: cells ran on {machine_class}, which has {len(done)} of the base's "
                    f"{len(jobs)} seeds: their Δ waits for it; on a machine of that class `make sweep "
                    f"SWEEP={sweep.spec or sweep.name}{named} SEEDS={len(jobs)}{args}` plans it",
                    file=out,
                )
    return added


# -- make budgets (sweeps.budget_plan): a trunk per class --------------------------------------------------------


def class_pin(name: str, results: Path | None, extra: list[str], here: str | None) -> list[str]:
    """machine_class=<this class> where the sweep's own finished runs were planned under it (other_class, on an
    earlier command) and the command leaves it unset: a later command on this class plans their keys again."""
    if results is None or any(o.lstrip("+~").split("=", 1)[0] == CLASS_KEY for o in extra):
        return []
    done = [p.parent for p in (results / name).glob(f"*/{store.RESULTS}") if is_complete(p.parent)]
    values = {read_results(d)["config"].get(CLASS_KEY) for d in done} - {None}
    return [f"{CLASS_KEY}='{here}'"] if values == {here} else []


def other_class(bp, here: str) -> str | None:
    """Where a trunk this command needs was trained on another machine class than `here`, what to do: a line saying
    the plan trains this class's own (None where every such trunk is of this class, or new). Needed: a selected
    trunk, the trunk of a selected branch, and the base's trunks wherever this command trains anything. bf16 kernels
    differ between classes and the page reads a cell only against the base of its own class
    (reports.pages.budgets_runs.by_class), so a branch here never continues another class's trunk, and a cell
    trained here never leans on another class's base. A trunk the store shows from another budgets sweep is planned
    again under machine_class=<here> (its own key: the store keeps both). One finished in this sweep's own
    results/<name>/ keeps its name there, so a run trained here would share the sweep with another class's base:
    that stops, in one line."""
    trains = [
        j for sweep in (bp.trunks, bp.branches) for j in sweep.jobs if sweep.selects(j) and not (j.done or j.same_as)
    ]
    bases = {bp.trunk_of[j.name].name for j in bp.branches.jobs if j.base}
    needed = {bp.trunk_of[j.name].name for j in bp.branches.jobs if bp.branches.selects(j)}
    needed |= bases if trains else set()
    wanted = [j for j in bp.trunks.jobs if bp.trunks.selects(j) or j.name in needed]
    other = [(j, c) for j in wanted if (c := job_class(j, here)) not in (here, NOT_RECORDED)]
    if own := [(j, c) for j, c in other if j.done and trains]:
        j, c = own[0]
        raise SweepError(
            f"{bp.name}'s {j.name} trained on {c} and this machine is {here}: a run trained here would be read "
            f"against that class's base; plan this class's own under another name (NAME={bp.name}_{class_slug(here)}, "
            f"its base first) or run on a machine of {c}"
        )
    shown = [(j, c) for j, c in other if not j.done]
    if not shown:
        return None
    (j, c), more = shown[0], f" and {len(shown) - 1} more" if len(shown) > 1 else ""
    unselected = sorted(bases - {t.name for t in bp.trunks.jobs if bp.trunks.selects(t)})
    hint = f"; the base's trunks are not selected ({unselected[0]}, ...): select them too" if unselected else ""
    return (
        f"  the store's {j.name}{more} trained on {c}, and this machine is {here}: every trunk and branch is planned "
        f"under {CLASS_KEY}='{here}' (its own identity), so no cell here is read against another class's base" + hint
    )
