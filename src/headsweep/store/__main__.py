"""python -m headsweep.store migrate [--results results]: moves results/<sweep>/<job>/ directories of the old
layout into the store (headsweep.store.migrate)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from headsweep.store.migrate import MigrationError, migrate
from headsweep.store.store import StoreError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m headsweep.store", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("migrate", help="move results/<sweep>/<job>/ into results/runs/<key>/, views as symlinks")
    m.add_argument("--results", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    try:
        migrate(args.results, out=sys.stdout)
    except (MigrationError, StoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
