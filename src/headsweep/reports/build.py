"""`make report`: every sweep's page, Table 3's page (which spans sweeps), the index and README's answers.

    python -m headsweep.reports.build --sweep table3_a|all [--root results] [--out reports] [--samples 1000]

The command line apart from headsweep.reports.sweep.page so that the pages that read several sweeps (table3) sit
above the sweep page they reuse, with no import circle.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from headsweep.reports.pages.table3 import write as write_table3
from headsweep.reports.site import questions as Q
from headsweep.reports.site.index import write_index
from headsweep.reports.sweep import page as report
from headsweep.reports.sweep import summary
from headsweep.reports.sweep.cells import ReportError
from headsweep.reports.sweep.plots import seed_spread
from headsweep.store import schema_note


def sweep_pages(names: list[str], write, every: bool) -> list[Path]:
    """Each sweep's pages (`write(name)`). Building every sweep (SWEEP=all), one that has only its learning-rate
    grid's runs so far (a sweep stopped in phase 1) gets one line and no page, and the rest are still built;
    asked for by name, it stops with that line."""
    paths = []
    for name in names:
        try:
            paths += write(name)
        except (report.PhaseOneOnly, report.BudgetStore) as e:
            if not every:
                raise
            print(f"{name}: no page yet: {e}", file=sys.stderr)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=report.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", required=True, help="the sweep's name, e.g. table3_a; all: every sweep under --root")
    parser.add_argument(
        "--root",
        type=Path,
        default=Path("results"),
        help="where the sweeps' finished runs are (results/<sweep>/<run>; multirun for run directories)",
    )
    parser.add_argument("--out", type=Path, default=Path("reports"), help="where the report goes")
    parser.add_argument("--samples", type=int, default=1000, help="paired bootstrap resamples")
    # a string, checked below: argparse's own type error would print the usage line as well
    parser.add_argument(
        "--stuck-threshold",
        default=None,
        metavar="X",
        help="early val loss above the base's median (nats per subword, 0 < X < 10) from which a "
        "run counts as stuck; default: chosen from every sweep's runs under --root",
    )
    parser.add_argument(
        "--readme",
        type=Path,
        default=None,
        help="README.md whose answers block is rendered again from sweeps/_questions.yaml (make report passes it)",
    )
    args = parser.parse_args(argv)
    try:
        threshold = report.stuck_threshold_arg(args.stuck_threshold)
        names = summary.sweeps_in(args.root) if args.sweep == "all" else [args.sweep]
        if not names:
            raise ReportError(f"no sweep has runs under {args.root}; run `make sweep SWEEP=<name>` first")
        questions = Q.load(root=args.root)  # checked before any page is written
        # once for every page: the threshold, and each run's one Early (a run is flagged alike on every page)
        pool = summary.early_pool(args.root)
        spread = seed_spread(args.root)
        paths = sweep_pages(
            names,
            lambda name: report.write_report(
                name, args.root, args.out, args.samples, threshold, pool, questions, spread
            ),
            every=args.sweep == "all",
        )
        if args.sweep == "all":  # Table 3's page spans several sweeps (headsweep.reports.pages.table3)
            paths += write_table3(args.root, args.out, pool=pool)
        paths += write_index(args.out, args.root, questions, pool)
        if args.readme is not None and Q.write_readme(args.readme, questions):
            paths.append(args.readme)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(str(p) for p in paths))
    if note := schema_note():
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
