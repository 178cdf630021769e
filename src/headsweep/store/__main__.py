"""python -m headsweep.store migrate [--results results]: moves results/<sweep>/<job>/ directories of the old
layout into the store (headsweep.store.migrate).

python -m headsweep.store unshow results/<sweep>/<job> ...: takes views away (a learning-rate grid over a sweep
first planned at one rate names the seeds it cannot use: headsweep.sweeps.lr_plain); each run stays in
results/runs/<key>, and the line says where it is still shown."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from headsweep.store.migrate import MigrationError, migrate
from headsweep.store.store import StoreError, unshow


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m headsweep.store", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("migrate", help="move results/<sweep>/<job>/ into results/runs/<key>/, views as symlinks")
    m.add_argument("--results", type=Path, default=Path("results"))
    u = sub.add_parser("unshow", help="take views results/<sweep>/<job> away; their runs stay in the store")
    u.add_argument("views", type=Path, nargs="+")
    args = parser.parse_args(argv)
    try:
        if args.command == "migrate":
            migrate(args.results, out=sys.stdout)
        else:
            for bad in [v for v in args.views if not v.is_symlink()]:  # every view checked before any goes
                raise StoreError(f"{bad} is no view (a symlink into results/runs/): nothing taken away")
            for view in args.views:
                run = Path(os.path.realpath(view))
                left = unshow(view)
                where = f"still shown as {', '.join(left)}" if left else "shown by no sweep now"
                print(f"{view}: taken away; its run stays in {run} ({where})")
    except (MigrationError, StoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
