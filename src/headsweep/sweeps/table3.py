"""Table 3, all five rows, under today's protocol, by one command: `make table3 [ROWS=A,D DRY=1 JOBS=2 START=unit]`.

    python -m headsweep.sweeps.table3 [--rows A,B,C,D,E] [--start chosen|unit] [--dry] [--jobs N] [hydra overrides]

Two starting scales (docs/init.md). `--start chosen` (the default): the residual outputs W^O and W_2 at the
model's default init gains (1/sqrt(6), chosen on the base's validation loss), each row's sweep under the name
<sweep>_start. `--start unit`: gains 1, the start every row was first measured under, the sweeps' own names (their
specs pin it), kept as the earlier protocol beside the new one.

Each row is one or two sweeps of sweeps/table3_*.yaml (ROWS below), each run as
`make sweep SWEEP=<sweep> SEEDS=3 BUDGET=ablation LR_GRID=<the row's grid>` would run it: model.init fan_in,
the learning rate decayed by the step alone (the ablation budget), a peak rate chosen per cell on seed 1's
validation loss, then 3 seeds at it (headsweep.sweeps.lr_select). Rows B, D and E ran on 5e-4,1e-3,2e-3;
rows A and C, planned after them, on 1e-3,2e-3,4e-3 (ROW_GRIDS): 5e-4 won no cell of any sweep run before
them, 2e-3 won about five in six and 1e-3 the rest, so a grid one step higher brackets the choice on both
sides without the edge run (4e-3) that nearly every cell needed. Every row's base cell (h 8, d_k = d_v 32,
N 3, d_model 256, d_ff 1024, dropout and eps_ls 0.1, sinusoids) composes to one experiment, so the store holds
it once and every row after the first shows it (headsweep.sweeps.reuse). Row B is the shipped
table3_b_fan_in: planned like the others, it finds every job done. Resumable: a rerun skips what is finished.

Device: a sweep never mixes devices. On the CPU every row runs at row B's precision (its shipped runs'),
so the base stays the one run row B has. Where torch sees a GPU every row runs there, packed on the card,
under the name <sweep>_<card> (table3_b_fan_in_h100: row B again, on that card, so that the rows share one
base); `make table3-report SUFFIX=_h100` shows those. On a CPU without bf16 units (AVX2 only), where row B
ran bf16, each row runs in fp32 under <sweep>_fp32 (CPU_TAIL) with its own base: bf16 there is 5-130x slower,
and a cell is only ever compared with a base of its own machine class. Part of a row: --only (make sweep's).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROWS = {
    "A": ("table3_a_fan_in",),  # table3_a itself keeps the earlier protocol's shipped runs
    "B": ("table3_b_fan_in",),
    "C": ("table3_c",),
    "D": ("table3_d_dropout", "table3_d_smoothing"),  # the paper's 4 cells, one setting at a time
    "E": ("table3_e",),
}
SEEDS = 3
BUDGET = "ablation"
LR_GRID = "5e-4,1e-3,2e-3"
ROW_GRIDS = {"A": "1e-3,2e-3,4e-3", "C": "1e-3,2e-3,4e-3"}  # why: the module's docstring
BASE_ROW = "B"  # the shipped row at today's protocol: its precision is every row's on a CPU
STARTS = ("chosen", "unit")
CPU_TAIL = "_fp32"  # a row's sweeps on a CPU without bf16 units, where row B's runs are bf16 (the docstring)
GAINS = ("model.init_wo_gain", "model.init_ff2_gain")


def chosen_gain() -> float:
    """The residual outputs' init gain the base chose on validation: the model's default (conf/model, docs/init.md)."""
    from headsweep.model import TransformerConfig

    default = TransformerConfig()
    assert default.init_wo_gain == default.init_ff2_gain, "one chosen start: W^O's and W_2's default gains agree"
    return default.init_wo_gain


def start_overrides(start: str) -> tuple[str, list[str]]:
    """(sweep name suffix, overrides) of a starting scale: 'chosen' sets the residual outputs' gains to the model's
    defaults (the rows' specs pin 1, the start of their shipped runs), 'unit' keeps the specs' own."""
    if start == "unit":
        return "", []
    gain = chosen_gain()
    return "_start", [f"{GAINS[0]}={gain!r}", f"{GAINS[1]}={gain!r}"]


def mixed_start(results: Path, name: str, overrides: list[str]) -> str | None:
    """One line when results/<name> holds a finished run whose residual-output gains are not the ones this
    command trains with (a row never mixes two starts); None when it holds none."""
    from headsweep.sweeps.sweep_settings import _get
    from headsweep.training.runs import is_complete, read_results

    want = {k: float(v) for k, v in (o.split("=", 1) for o in overrides) if k in GAINS}
    for path in sorted((results / name).glob("*/results.json")):
        if path.parent.name.startswith(".") or not is_complete(path.parent):
            continue
        config = read_results(path.parent)["config"]
        got = {k: float(_get(config, k) if _get(config, k) is not None else 1.0) for k in GAINS}
        if any(abs(got[k] - want.get(k, got[k])) > 1e-9 for k in GAINS):
            return (
                f"{results / name}/{path.parent.name} was trained with W^O, W_2 gains {got[GAINS[0]]:g}, "
                f"{got[GAINS[1]]:g}, this row with {want[GAINS[0]]:g}, {want[GAINS[1]]:g}: a row never mixes two "
                "starts; move that run away or use --start unit"
            )
    return None


def row_grid(row: str) -> str:
    return ROW_GRIDS.get(row, LR_GRID)


def grid_words() -> str:
    """'5e-4,1e-3,2e-3 (rows A and C: 1e-3,2e-3,4e-3)': every row's grid, for a line of output or a page."""
    other = sorted({g for g in ROW_GRIDS.values() if g != LR_GRID})
    return LR_GRID + "".join(f" (rows {' and '.join(r for r, g in ROW_GRIDS.items() if g == o)}: {o})" for o in other)


class RowError(ValueError):
    """A bad ROWS value; one line naming the rows."""


def parse_rows(text: str | None) -> list[str]:
    """'A,d' -> ['A', 'D'] in the table's order; anything else one line naming the rows."""
    if text is None or not str(text).strip():
        return list(ROWS)
    asked = [p.strip().upper() for p in str(text).split(",") if p.strip()]
    if bad := [p for p in asked if p not in ROWS]:
        raise RowError(
            f"ROWS={text}: no row {bad[0]} in Table 3; the rows are {', '.join(ROWS)} (e.g. ROWS=A,D; empty: all)"
        )
    return [r for r in ROWS if r in asked]


def suffix(overrides: list[str], results: Path | None = None) -> str:
    """'_<card>' where torch sees a GPU and the overrides do not ask for the CPU; on the CPU '' , or CPU_TAIL
    where this CPU has no bf16 units and row B's runs are bf16 (the command setting no precision)."""
    import torch

    from headsweep.config import cpu_has_bf16
    from headsweep.sweeps.packing import device_slug
    from headsweep.sweeps.planning import _asked_device

    if _asked_device(overrides) != "cpu" and torch.cuda.is_available():
        return f"_{device_slug(torch.cuda.get_device_name())}"
    if results is None or cpu_has_bf16() or any(o.startswith("trainer.precision=") for o in overrides):
        return ""
    return CPU_TAIL if base_precision(results) == "bf16-mixed" else ""


def base_precision(results: Path) -> str | None:
    """trainer.precision of row B's finished runs; None where they are none or disagree."""
    from headsweep.sweeps.sweep_settings import finished_values

    found = finished_values(results / ROWS[BASE_ROW][0]).get("trainer.precision") or {}
    return next(iter(found)) if len(found) == 1 else None


def pinned(results: Path, overrides: list[str], tail: str) -> list[str]:
    """On the CPU under row B's names: trainer.precision of row B's finished runs, unless the command sets it
    (the base then is row B's run, whatever this CPU's default precision). Under a tail (a card, CPU_TAIL) the
    rows have their own base at the machine's own precision."""
    if tail or any(o.startswith("trainer.precision=") for o in overrides):
        return []
    found = base_precision(results)
    return [f"trainer.precision={found}"] if found else []


def where(start: str, tail: str) -> str:
    """The plan line's words on a tail: the GPU's, or a CPU's without bf16 units."""
    if tail == CPU_TAIL:
        return f" in fp32, this CPU having no bf16 units (sweeps named <sweep>{start}{tail}, own base)"
    return f" on the GPU (sweeps named <sweep>{start}{tail})" if tail else ""


def sweep_args(name: str, own: str, grid: str, args: argparse.Namespace, extra: list[str]) -> list[str]:
    return [
        "--sweep",
        name,
        *(["--name", own] if own != name else []),
        "--seeds",
        str(SEEDS),
        "--budget",
        BUDGET,
        f"--lr-grid={grid}",
        "--results",
        str(args.results),
        "--root",
        str(args.root),
        *(["--jobs", str(args.jobs)] if args.jobs else []),
        *(["--launcher", args.launcher] if args.launcher else []),
        *(["--only", args.only] if args.only else []),
        *(["--dry"] if args.dry else []),
        *extra,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="", help=f"some of {','.join(ROWS)} (default: all)")
    parser.add_argument(
        "--start", default="chosen", choices=STARTS, help="residual outputs' init gains: the default's or 1"
    )
    parser.add_argument("--dry", action="store_true", help="plan every row's jobs, done or to run; run nothing")
    parser.add_argument("--jobs", type=int, default=None, help="jobs at once (make sweep's JOBS)")
    parser.add_argument("--launcher", default=None, help="make sweep's LAUNCHER")
    parser.add_argument("--only", default="", help="make sweep's ONLY: the jobs matching these globs, e.g. '*N4*'")
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--root", type=Path, default=Path("multirun"))
    args, extra = parser.parse_known_args(argv)
    if bad := [a for a in extra if a.startswith("--")]:
        parser.error(f"unknown option {bad[0]}")
    try:
        rows = parse_rows(args.rows)
    except RowError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from headsweep.sweeps import sweep

    tail = suffix(extra, args.results)
    start, gains = start_overrides(args.start)
    extra = [*extra, *pinned(args.results, extra, tail), *gains]
    for row in rows:
        for name in ROWS[row]:
            if not args.dry and (bad := gains and mixed_start(args.results, name + start + tail, gains)):
                print(f"error: {bad}", file=sys.stderr)
                return 2
    print(
        f"table3: rows {', '.join(rows)} at the {BUDGET} budget, {SEEDS} seeds, a peak rate per cell from "
        f"{grid_words()}, {'W^O and W_2 at gain 1 (the earlier start)' if not gains else ' '.join(gains)}"
        f"{where(start, tail)}",
        flush=True,
    )
    failed = []
    for row in rows:
        for name in ROWS[row]:
            print(f"\n== row {row}: {name}{start}{tail}", flush=True)
            rc = sweep.main(sweep_args(name, name + start + tail, row_grid(row), args, extra))
            if rc:
                failed.append(f"{row} ({name}{start}{tail}: exit {rc})")
    if failed:
        print(f"table3: rows not finished: {', '.join(failed)}; rerun the same command to resume", file=sys.stderr)
        return 1
    page = "make table3-report" + (f" SUFFIX={tail}" if tail else "")
    if tail == CPU_TAIL:  # the main page shows a row from here once it is complete and the bf16 one is not
        page = f"make table3-report (the row from here once complete; its own page: {page})"
    print(f"\ntable3: {'planned' if args.dry else 'done'}; the page: {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
