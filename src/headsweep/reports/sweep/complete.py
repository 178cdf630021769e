"""Is a sweep complete? The top of its page says when it is not: how many of the runs its spec plans are
here (cells x seeds of sweeps/<spec>.yaml), else which cells have fewer seeds than the others. A sweep run
under another name than its spec (table3_a_h200 from table3_a, `make sweep NAME=`) is matched to the
longest spec name it starts with."""

from __future__ import annotations

import json
from pathlib import Path

from headsweep.config import SWEEPS_DIR
from headsweep.reports.sweep.cells import Cell
from headsweep.sweeps.specs import SweepError, available, load_spec, spec_seeds, spec_source, split_parameters


def spec_of(sweep: str, specs_dir: Path = SWEEPS_DIR, results: Path | None = None) -> str | None:
    """The spec a sweep was run from: its own name, else the one `make sweep NAME=` noted in
    results/<sweep>/.sweep.json, else the longest spec name it extends (name_*: sweeps named before the note)."""
    names = available(specs_dir)
    if sweep in names:
        return sweep
    note = (results / sweep / ".sweep.json") if results is not None else None
    if note is not None and note.is_file() and (spec := json.loads(note.read_text()).get("spec")) in names:
        return spec
    return max((n for n in names if sweep.startswith(n + "_")), key=len, default=None)


def planned_runs(sweep: str, specs_dir: Path = SWEEPS_DIR, results: Path | None = None) -> tuple[str, int, int] | None:
    """(where its spec is, cells, seeds) the sweep's spec plans, or None where no readable spec is known."""
    name = spec_of(sweep, specs_dir, results)
    if name is None:
        return None
    try:
        spec, _ = load_spec(name, specs_dir)
        return spec_source(name, specs_dir), len(split_parameters(spec)[1]), len(spec_seeds(spec))
    except SweepError:
        return None


def incomplete(sweep: str, cells: list[Cell], specs_dir: Path = SWEEPS_DIR) -> str | None:
    """One line for the top of the page when runs are missing; None when the sweep looks complete."""
    runs = sum(len(c.runs) for c in cells)
    most = max(len(c.runs) for c in cells)
    short = [f"{c.label} ({len(c.runs)} of {most})" for c in cells if len(c.runs) < most]
    fewer = f"cells with fewer seeds than the others: {', '.join(short)}" if short else ""
    run_dir = getattr(cells[0].runs[0], "dir", None)  # results/<sweep>/<run>: the results root two up
    plan = planned_runs(sweep, specs_dir, run_dir.parent.parent if run_dir is not None else None)
    if plan is not None:
        source, n_cells, n_seeds = plan
        if runs < n_cells * n_seeds:
            missing = f"{n_cells - len(cells)} of its cells not run yet" if len(cells) < n_cells else ""
            said = "; ".join(s for s in (missing, fewer) if s)
            return (
                f"**Incomplete: {runs} of {n_cells * n_seeds} planned runs** (`{source}`: {n_cells} "
                f"cells x {n_seeds} seeds){f'; {said}' if said else ''}. Every number below is of the runs here."
            )
        return None
    return f"**Incomplete:** {fewer}. Every number below is of the runs here." if short else None
