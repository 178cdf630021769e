"""Run one ablation as a Hydra multirun: `make sweep SWEEP=table3_a [SEEDS=3 BUDGET=ablation ...]`.

    python -m headsweep.sweeps.sweep --sweep table3_a --seeds 3 [--budget short] [--launcher basic|joblib|submitit]
                              [--scale paper] [--only 'h1-*,*-s3'] [--dry] [hydra overrides for every job]

The grid comes from sweeps/<sweep>.yaml, a W&B grid sweep spec whose parameters are Hydra override keys, merged
over sweeps/_base.yaml; a sweep named <spec>_<variant> is a spec's variant (heads_fixed_dk_fp32: heads_fixed_dk,
variant fp32; headsweep.sweeps.specs). `make wandb-spec` writes the full spec, so that `wandb sweep` +
`wandb agent` run the same grid online. Each job (grid cell x seed 1..N) is one
training run with its own W&B run, named like h8-dk32-dv32-s1, tagged with its row
and cell, writing to multirun/<sweep>/<run name>/; each finished job's small outputs (results.json,
hypotheses, metrics CSV, analysis; never checkpoints or W&B files) are exported to the run store,
results/runs/<key>/ (headsweep.store: each experiment once), and shown as results/<sweep>/<run name>, a
symlink (--results): the folder `make report` reads and the repository keeps as reference results.

The parts: planning.py (the jobs, checked before any starts), reuse.py (stored runs shown instead of trained
again; one key per experiment: headsweep.store.experiment_key), launch.py (job files, the lock, resume, the
multirun and its summary).

Resume: a job with a complete results.json (and its analysis, where the sweep analyses) is skipped; a
trained job whose analysis was cut short only analyses; an unfinished job with a checkpoint continues from
it (headsweep.training.resume); one without is moved to multirun/<sweep>/.incomplete/ and runs again.

Part of a sweep: --only runs the jobs whose names match one of its comma-separated globs (e.g. the jobs
that reuse another sweep's checkpoints while they are on this machine, or one seed); the rest wait for a
later run of the full command. Names and outputs are the full sweep's.

Cores: --jobs N runs N jobs at once (Hydra's joblib launcher) with cores / N torch threads each, set
before torch starts (OMP_NUM_THREADS) and recorded in results.json.

GPUs: where torch sees CUDA (and neither the command nor the sweep's finished runs say CPU), every job
trains with trainer=gpu (bf16-mixed, torch's SDPA kernels), and several jobs share each card: as many as
its free memory holds at the largest per-job peak earlier GPU runs recorded (headsweep.sweeps.packing),
at most one per CPU core; --jobs N asks for N and is checked against the same limit. Several cards: jobs
spread round-robin. A sweep never mixes devices: name a GPU sweep of a CPU spec with --name (table3_a_h100).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from headsweep.config import SWEEPS_DIR
from headsweep.sweeps.init_check import UPDATE_MARGIN, check_margin
from headsweep.sweeps.launch import run
from headsweep.sweeps.planning import LAUNCHERS, default_jobs, plan  # noqa: F401 (default_jobs: make bench)
from headsweep.sweeps.specs import SweepError


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sweep", required=True, help="a sweep: a spec in sweeps/ (table3_a) or a spec's variant (heads_fixed_dk_fp32)"
    )
    parser.add_argument(
        "--name",
        default=None,
        help="the sweep's own name when it is not the spec's (its multirun/ and results/ folders), "
        "e.g. table3_a_h100 for the spec table3_a run on a GPU",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="run seeds 1..N of every cell (default: the spec's seed values, as W&B agents run)",
    )
    parser.add_argument("--budget", help="a conf/budget option, e.g. ablation (the shipped results') or short")
    parser.add_argument("--launcher", default="basic", help=f"one of {', '.join(LAUNCHERS)}")
    parser.add_argument(
        "--scale",
        choices=["small", "paper"],
        default="small",
        help="paper: the sweep <sweep>_paper, the spec's variant at the paper's sizes (for a GPU)",
    )
    parser.add_argument(
        "--only", default="", help="run only the jobs whose names match one of these comma-separated globs, e.g. '*-s3'"
    )
    parser.add_argument("--dry", action="store_true", help="list the jobs, done or to run; run nothing")
    parser.add_argument(
        "--checks",
        action="store_true",
        help="print every cell's init check and update check (its first steps at its rate), then stop; "
        "nothing trains beyond the check's few steps",
    )
    parser.add_argument("--root", type=Path, default=Path("multirun"), help="where the sweeps' runs go")
    parser.add_argument(
        "--results",
        type=Path,
        default=Path("results"),
        help="where finished jobs' small outputs go (results/<sweep>/<run name>)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="jobs at once, each with cores / N threads (default: 2 on a CPU, 1 with a GPU)",
    )
    parser.add_argument(
        "--lr-grid",
        default="",
        help="choose each cell's module.peak_lr from these (e.g. 5e-4,1e-3,2e-3) by seed 1's final "
        "val/loss, then run every seed at it (headsweep.sweeps.lr_select)",
    )
    parser.add_argument(
        "--update-margin",
        type=float,
        default=UPDATE_MARGIN,
        help="the update check's margin m in (0, 10): a cell whose attention moves in its first steps outside "
        f"[1/(1+m), 1+m] of its base's gets a line (default {UPDATE_MARGIN}; headsweep.sweeps.init_check); "
        "checked before a command that trains, not with --dry",
    )
    parser.add_argument("--specs", type=Path, default=SWEEPS_DIR, help="where the sweep specs are")
    args, extra = parser.parse_known_args(argv)
    if bad := [a for a in extra if a.startswith("--")]:
        parser.error(f"unknown option {bad[0]}")
    return args, extra


def main(argv: list[str] | None = None) -> int:
    args, extra = parse_args(argv)
    name = f"{args.sweep}_paper" if args.scale == "paper" and not args.sweep.endswith("_paper") else args.sweep
    try:
        try:
            check_margin(args.update_margin)
        except ValueError as e:
            raise SweepError(str(e)) from None
        # the update check trains each cell a few steps (seconds a cell; tens at the paper's sizes on a CPU):
        # before a command that trains, not in a --dry listing
        args.update_margin = None if args.dry and not args.checks else args.update_margin
        if args.checks:
            return print_checks(name, args, extra)
        if args.lr_grid:
            return run_lr_grid(name, args, extra)
        sweep = plan(
            name,
            args.seeds,
            extra,
            budget=args.budget,
            launcher=args.launcher,
            specs_dir=args.specs,
            root=args.root,
            results=args.results,
            jobs=args.jobs,
            only=[g.strip() for g in args.only.split(",") if g.strip()],
            name_as=args.name,
            update_margin=args.update_margin,
        )
        return run(sweep, args.dry)
    except SweepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def parse_grid(text: str) -> list[float]:
    """The grid of --lr-grid '5e-4,1e-3,2e-3', sorted; one line of SweepError for anything else."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    values = []
    for p in parts:
        try:
            v = float(p)
        except ValueError:
            raise SweepError(
                f"--lr-grid {text}: '{p}' is not a number; give peak learning rates > 0, e.g. --lr-grid 5e-4,1e-3,2e-3"
            ) from None
        if not math.isfinite(v) or v <= 0:
            raise SweepError(
                f"--lr-grid {text}: {p} is not a learning rate > 0; give peak learning rates > 0, "
                "e.g. --lr-grid 5e-4,1e-3,2e-3"
            )
        values.append(v)
    if len(set(values)) < 2:
        raise SweepError(
            f"--lr-grid {text}: a grid needs at least two different rates to choose from "
            "(one rate is the spec's module.peak_lr=<v>); e.g. --lr-grid 5e-4,1e-3,2e-3"
        )
    return sorted(set(values))


def print_checks(name: str, args: argparse.Namespace, extra: list[str]) -> int:
    """Both checks' tables for every cell, at each rate of --lr-grid (else the config's), nothing trained."""
    rates = parse_grid(args.lr_grid) if args.lr_grid else [None]
    for lr in rates:
        if lr is not None:
            print(f"\n{name} at module.peak_lr={lr:g}", flush=True)
        plan(
            name,
            1,
            [*extra, *([f"module.peak_lr={lr}"] if lr is not None else [])],
            budget=args.budget,
            specs_dir=args.specs,
            root=args.root,
            results=None,
            update_margin=args.update_margin,
            tables=True,
        )
    return 0


def run_lr_grid(name: str, args: argparse.Namespace, extra: list[str]) -> int:
    """Both phases of a sweep whose cells each get their own peak learning rate (lr_select)."""
    from headsweep.sweeps.lr_select import plan_lr, run_lr

    grid = parse_grid(args.lr_grid)
    lr = plan_lr(
        name,
        args.seeds,
        extra,
        grid,
        budget=args.budget,
        launcher=args.launcher,
        specs_dir=args.specs,
        root=args.root,
        results=args.results,
        jobs=args.jobs,
        only=[g.strip() for g in args.only.split(",") if g.strip()],
        name_as=args.name,
        update_margin=args.update_margin,
    )
    return run_lr(lr, args.dry)


if __name__ == "__main__":
    sys.exit(main())
