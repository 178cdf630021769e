"""Upload a sweep's offline W&B runs: `make sync SWEEP=table3_a` runs `wandb sync` on every offline run
of multirun/<sweep>/<run>/wandb/ (results/ keeps no W&B files; a run trained online is already there).

    python -m headsweep.sweeps.sync --sweep table3_a [--root multirun] [--dry]

`wandb sync` skips runs it has already uploaded, so running it again uploads only what is new. Each run
keeps the group (its grid cell), job type (the sweep) and tags it was logged with.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path


def offline_runs(sweep_dir: Path) -> list[Path]:
    """The offline run directories of the sweep's jobs (not the latest-run links beside them)."""
    return sorted(p for p in sweep_dir.glob("*/wandb/offline-run-*") if p.is_dir() and not p.is_symlink())


def sync_command(runs: list[Path]) -> list[str]:
    wandb = Path(sys.executable).parent / "wandb"  # the wandb of this environment, as `make` runs it
    return [str(wandb) if wandb.is_file() else "wandb", "sync", *map(str, runs)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", required=True, help="the sweep's name, e.g. table3_a")
    parser.add_argument("--root", type=Path, default=Path("multirun"), help="where the sweeps' run directories are")
    parser.add_argument("--dry", action="store_true", help="print the command, upload nothing")
    args = parser.parse_args(argv)
    runs = offline_runs(args.root / args.sweep)
    if not runs:
        print(
            f"error: no offline W&B runs under {args.root / args.sweep}/*/wandb/ (the run directories of "
            f"`make sweep SWEEP={args.sweep}`; results/ holds none)",
            file=sys.stderr,
        )
        return 2
    cmd = sync_command(runs)
    print(f"{len(runs)} offline runs of {args.sweep}: " + shlex.join(cmd), flush=True)
    if args.dry:
        return 0
    # The Makefile exports WANDB_MODE=offline for training; an upload is online whatever it says.
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}
    return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
