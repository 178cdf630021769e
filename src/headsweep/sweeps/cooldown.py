"""Which cooldown shape: the branches of a budgets sweep (make budgets) that cooled down from the same trunk
checkpoint in two shapes (SHAPES=sqrt,linear), paired by cell, seed and budget: the difference in final val loss
and in test BLEU (beam), the other shape minus the first, with a 95% t-interval over the pairs (each pair shares
its trunk, so the seed's own spread cancels out). Printed at the end of `make budgets`, and by

    python -m headsweep.sweeps.cooldown --sweep table3_a_fan_in_budgets [--root results]

Reads only results/ (what runs wrote). In headsweep.sweeps, not reports: make budgets prints it, and a sweep never
imports the reports (tests/test_rooms.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from headsweep.reporting.stats import paired_interval
from headsweep.store import CorruptRecord, as_seen, read_record

METRICS = (("val/loss", "val loss"), ("test/bleu", "test BLEU"))


def branch_runs(sweep_dir: Path) -> list[dict]:
    """Every finished branch shown in results/<sweep>/: its cell, budget multiple, shape, seed and metrics."""
    runs = []
    for view in sorted(sweep_dir.iterdir()) if sweep_dir.is_dir() else []:
        try:
            record = read_record(view) if not view.name.startswith(".") else None
        except CorruptRecord:
            continue
        if record is None or not record.complete:
            continue
        config = as_seen(record, sweep_dir.name, view.name)["config"]
        b = config.get("budgets") or {}
        if b.get("role") != "branch":
            continue
        shape = config["module"].get("cooldown", "linear")
        suffix = f"-{b['budget']:g}x-{shape}-s{config['seed']}"
        cell = view.name[: -len(suffix)] if view.name.endswith(suffix) else view.name
        runs.append({"cell": cell, "budget": b["budget"], "shape": shape, "seed": config["seed"], **record.metrics})
    return runs


def compare_shapes(runs: list[dict], first: str | None = None) -> list[str]:
    """Lines: per budget and in all, each other shape against `first` (default: the most common shape)."""
    shapes = sorted({r["shape"] for r in runs})
    if len(shapes) < 2:
        return []
    first = first if first in shapes else max(shapes, key=lambda s: sum(r["shape"] == s for r in runs))
    by = {(r["cell"], r["budget"], r["seed"], r["shape"]): r for r in runs}
    lines = []
    for other in [s for s in shapes if s != first]:
        lines.append(f"cooldown {other} - {first}, paired on the same trunk checkpoint (cell, seed, budget):")
        budgets = sorted({r["budget"] for r in runs})
        for budget in [*budgets, None]:
            pairs = [
                (by[(c, k, s, first)], r)
                for (c, k, s, shape), r in sorted(by.items(), key=lambda kv: str(kv[0]))
                if shape == other and (c, k, s, first) in by and (budget is None or k == budget)
            ]
            if not pairs:
                continue
            parts = []
            for key, label in METRICS:
                diffs = [b[key] - a[key] for a, b in pairs if a.get(key) is not None and b.get(key) is not None]
                if diffs:
                    mean, half = paired_interval(diffs)
                    parts.append(f"{label} {mean:+.3f}" + (f" ± {half:.3f}" if half is not None else ""))
            where = f"{budget:g}x" if budget is not None else "all"
            lines.append(f"  {where:>4}: {len(pairs)} pairs, " + ", ".join(parts))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", required=True, help="a budgets sweep, e.g. table3_a_fan_in_budgets")
    parser.add_argument("--root", type=Path, default=Path("results"))
    parser.add_argument("--first", default=None, help="the shape the others are compared with (default: the commonest)")
    args = parser.parse_args(argv)
    runs = branch_runs(args.root / args.sweep)
    lines = compare_shapes(runs, args.first)
    if not lines:
        print(f"{args.root / args.sweep}: no branches of two cooldown shapes to compare ({len(runs)} branches)")
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
