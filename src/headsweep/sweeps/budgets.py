"""Verdicts across budgets (issue 68): one warmup-stable-decay trunk per cell and seed, read at several budgets.

    make budgets SWEEP=table3_a_fan_in [BUDGETS=1,2,4 COOLDOWN=0.2 SHAPES=sqrt FROM=.. DRY=1 ONLY=.. SEEDS=3 JOBS=2]
    python -m headsweep.sweeps.budgets --sweep table3_a_fan_in --budgets 1,2,4 [--cooldown 0.2] [--shapes sqrt,linear]
        [--from SWEEP] [--seeds N] [--only globs] [--jobs N] [--name NAME] [--budget ablation] [--dry] [overrides]

A trunk trains a cell at its peak rate after warm-up (module.schedule=constant) up to where the longest budget's
cooldown starts, keeping the whole training state there and where each shorter budget's cooldown starts
(callbacks.branch_points). A branch continues the trunk from one of those checkpoints (weights, optimizer state,
step, data position: training.branch) and cools down to zero over the last COOLDOWN of its budget
(module.schedule=wsd, module.cooldown=<shape>): it trains what one wsd run of its budget trains, and costs only its
cooldown. BUDGETS are multiples of the sweep's budget (BUDGET's trainer.max_steps: 1,150 at ablation); 1,2,4 with
COOLDOWN=0.2: a trunk of 3,680 steps, branches from 920, 1,840 and 3,680 steps to 1,150, 2,300 and 4,600, 5,290
steps in all where three linear-decay runs would take 8,050. SHAPES: linear (1 - t) or sqrt (1 - sqrt(t), the
default; docs/schedule.md), several at once to compare them on the same trunks (sweeps.cooldown, printed at the end).

Planned like `make sweep` (planning.plan: the spec's cells, SEEDS, the checks, the store, GPU packing) under the name
<sweep>_budgets (multirun/ and results/), jobs <cell>-trunk-s<seed> and <cell>-<k>x-<shape>-s<seed>. Each cell trains
at the rate its sweep chose (the lr_select record of its finished runs in results/<sweep>/, else the choice of its
finished grid runs), else the config's; ARGS=module.peak_lr=<v> sets one for every cell. FROM=<sweep> reads the rates
(and precision and device) from another sweep of the same cells, e.g. table3_c_start (the chosen start); a rate chosen
under other settings than the plan's (unit gains) is not borrowed, and the plan says so. Every trunk and branch is a
run of the store with its own key (a branch's counts its trunk's key and its step: it never mixes with a linear-decay
run); its results.json names the schedule, the budget and the trunk (config.budgets). Phase 1 runs the trunks, phase
2 the branches of every finished trunk; each finished run is exported to results/ like a sweep job, and a rerun
resumes a killed trunk or branch from its checkpoint and skips what is done.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser

from headsweep.config import SWEEPS_DIR
from headsweep.sweeps import launch
from headsweep.sweeps.budget_plan import (
    BRANCH,
    DEFAULT_SHAPE,
    TRUNK,
    BudgetPlan,
    check_fraction,
    multiple_text,
    parse_budgets,
    parse_shapes,
    plan_budgets,
)
from headsweep.sweeps.cooldown import branch_runs, compare_shapes
from headsweep.sweeps.specs import SweepError
from headsweep.training.runs import write_json

NOTE = ".budgets.json"  # results/<name>/.budgets.json: the plan a report reads (source sweep, budgets, cooldown)


def describe(bp: BudgetPlan) -> list[str]:
    b = bp.budgets
    lines = [
        f"budgets {bp.name}: the cells of {bp.source} at {', '.join(multiple_text(k) + 'x' for k in b.multiples)} its "
        f"{b.base_steps} steps ({', '.join(map(str, b.steps))}), each cooling down over its last "
        f"{b.fraction:.0%} ({', '.join(b.shapes)}) from a trunk of {b.trunk_steps} steps at the peak rate that keeps "
        f"its checkpoints after {', '.join(map(str, b.points))} steps",
    ]
    lines += bp.notes
    if bp.runs_from != bp.source:
        lines.append(f"  rates, precision and device read from the runs of {bp.runs_from} (FROM=)")
    lines += [f"  {cell}: peak rate {rate:g} ({origin})" for cell, (rate, origin) in bp.rates.items()]
    return lines


def _record(job) -> dict:
    """The job's budgets record, as its override gives it to the run."""
    o = next(o for o in job.overrides if o.startswith("budgets="))
    return OverridesParser.create().parse_override(o).value()


def waiting(bp: BudgetPlan) -> list:
    """The branches that cannot start yet: not done or shown from the store, and their trunk not finished."""
    return [j for j in bp.branches.jobs if not (j.done or j.same_as) and not bp.trunk_of[j.name].done]


def check_ready(bp: BudgetPlan) -> None:
    """Before anything starts, one line: a selected branch whose trunk this command will not run (not finished, not
    selected), or whose finished trunk lacks its checkpoint (stopped early by its time cap, trained elsewhere)."""
    for j in bp.branches.jobs:
        trunk = bp.trunk_of[j.name]
        if not bp.branches.selects(j) or j.done or j.same_as:
            continue
        if not trunk.done and not bp.trunks.selects(trunk):
            raise SweepError(
                f"branch {j.name}: its trunk {trunk.name} is not finished and --only leaves it out: select it too "
                f"(ONLY='{trunk.name},...') or run the trunks first"
            )
        if trunk.done and not (point := Path(_record(j)["checkpoint"])).is_file():
            raise SweepError(
                f"branch {j.name}: its trunk {trunk.name} is finished but its checkpoint {point} is not here (trained "
                "on another machine, or stopped by its time cap before that step): run the branch where the trunk "
                f"trained, or move {trunk.export or trunk.dir} away to train the trunk again"
            )


def planned_jobs(bp: BudgetPlan) -> dict[str, dict]:
    """The selected trunks and branches by name, as the page lists what is missing: role, base, and a branch's
    trunk and budget."""
    out = {}
    for j in bp.trunks.jobs:
        if bp.trunks.selects(j):
            out[j.name] = {"role": TRUNK, "base": j.base}
    for j in bp.branches.jobs:
        if bp.branches.selects(j):
            record = _record(j)
            out[j.name] = {
                "role": BRANCH,
                "base": j.base,
                "trunk": bp.trunk_of[j.name].name,
                "budget": record["budget"],
            }
    return out


def write_note(bp: BudgetPlan) -> None:
    """results/<name>/.budgets.json: the plan (source sweep, budgets, cooldown), and every trunk and branch any
    run of the command selected (merged: the base with SEEDS=3 and the other cells with SEEDS=1 are two commands),
    which reports.pages.budgets lists as missing until its run lands."""
    note, b = bp.results / bp.name / NOTE, bp.budgets
    old = json.loads(note.read_text()) if note.is_file() else {}
    write_json(
        note,
        {
            "sweep": bp.name,
            "source": bp.source,
            "runs_from": bp.runs_from,
            "budgets": b.multiples,
            "base_steps": b.base_steps,
            "steps": b.steps,
            "branch_steps": b.points,
            "cooldown": b.fraction,
            "shapes": list(dict.fromkeys([*old.get("shapes", []), *b.shapes])),  # every shape any command planned
            "planned": {**old.get("planned", {}), **planned_jobs(bp)},
        },
    )


def run_budgets(bp: BudgetPlan, dry: bool = False, out=None) -> int:
    """Phase 1 (the trunks), then phase 2 (the branches of the finished trunks); the shapes compared where there
    are two. 0 when every selected trunk and branch is complete (or listed, with dry)."""
    out = out or sys.stdout
    print("\n".join(describe(bp)), file=out)
    check_ready(bp)
    if not dry and bp.results is not None:
        write_note(bp)
    print("\nphase 1 of 2: the trunks", file=out)
    rc1 = launch.run(bp.trunks, dry, out)
    if rc1 == 130:
        return rc1
    later = waiting(bp)
    branches = replace(bp.branches, jobs=[j for j in bp.branches.jobs if j not in later])
    print("\nphase 2 of 2: the branches of every finished trunk", file=out)
    for j in (j for j in later if bp.branches.selects(j)):  # ONLY= leaves the others out of the list too
        print(f"  waits   {j.name}  {' '.join(j.overrides)}  (after {bp.trunk_of[j.name].name})", file=out)
    rc2 = launch.run(branches, dry, out) if branches.jobs else 0
    if rc2 == 130:
        return rc2
    if bp.results is not None and (lines := compare_shapes(branch_runs(bp.results / bp.name), DEFAULT_SHAPE)):
        print("\n" + "\n".join(lines), file=out)
    stuck = [j for j in later if bp.branches.selects(j)]
    if stuck and not dry:
        print(f"{len(stuck)} branch(es) wait for a trunk that did not finish: rerun the same command", file=out)
    return 1 if rc1 or rc2 or (stuck and not dry) else 0


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", required=True, help="the sweep whose cells to read at several budgets")
    parser.add_argument("--budgets", default="1,2,4", help="multiples of the sweep's budget, increasing (1,2,4)")
    parser.add_argument("--cooldown", type=float, default=0.2, help="the share of each budget that cools down (0.2)")
    parser.add_argument("--shapes", default=DEFAULT_SHAPE, help=f"cooldown shapes: sqrt, linear ({DEFAULT_SHAPE})")
    parser.add_argument(
        "--from", dest="runs_from", default=None, help="the sweep whose runs give rates (default --sweep)"
    )
    parser.add_argument("--name", default=None, help="the budgets sweep's name (default <sweep>_budgets)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds 1..N of every cell (default: the spec's)")
    parser.add_argument("--budget", default="ablation", help="the conf/budget the multiples are of (ablation)")
    parser.add_argument("--launcher", default="basic")
    parser.add_argument("--only", default="", help="only the trunks and branches matching these globs")
    parser.add_argument("--jobs", type=int, default=None, help="jobs at once (make sweep's JOBS)")
    parser.add_argument("--dry", action="store_true", help="list the trunks and branches, done or to run; run nothing")
    parser.add_argument("--root", type=Path, default=Path("multirun"))
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--specs", type=Path, default=SWEEPS_DIR)
    args, extra = parser.parse_known_args(argv)
    if bad := [a for a in extra if a.startswith("--")]:
        parser.error(f"unknown option {bad[0]}")
    return args, extra


def main(argv: list[str] | None = None) -> int:
    args, extra = parse_args(argv)
    try:
        multiples, fraction = parse_budgets(args.budgets), check_fraction(args.cooldown)
        shapes = parse_shapes(args.shapes)
        bp = plan_budgets(
            args.sweep,
            args.seeds,
            extra,
            multiples,
            fraction,
            shapes,
            results=args.results,
            name_as=args.name,
            specs_dir=args.specs,
            only=[g.strip() for g in args.only.split(",") if g.strip()],
            runs_from=args.runs_from,
            budget=args.budget,
            launcher=args.launcher,
            root=args.root,
            jobs=args.jobs,
        )
        return run_budgets(bp, args.dry)
    except SweepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
