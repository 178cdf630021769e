"""The sweep page's two sections on the protocol's confounds, from what each run recorded: its init check ("At
init": each attention projection's gain and the attention output against the residual) and its update check
("First steps": each attention kind's output change in its first Adam steps). The tables and the
rule that flags a cell are sweeps.init_check's, the ones `make sweep` prints before a sweep trains."""

from __future__ import annotations

from headsweep.sweeps.init_check import TOLERANCE, UPDATE_MARGIN, init_check_table, run_check, update_check_table


def init_check_section(cells) -> str:
    """The report's section (cells: headsweep.reports.sweep.cells.Cell, base first): each cell's check, from its
    first run (seed 1 where it has one)."""
    labels, flats, checks = [], [], []
    for c in cells:
        run = min(c.runs, key=lambda r: r.seed)
        labels.append(c.label)
        flats.append(run.flat)
        checks.append(run_check(run.results))
    note = (
        f"Each attention projection's gain (sqrt(fan_in) x weight std; 1.00 keeps a unit-variance input's "
        f"scale) and the attention output's RMS against the residual stream's (first layer, a synthetic batch, "
        f"mean of {checks[0].get('draws', '')} weight draws) at init, seed "
        f"{min(r.seed for r in cells[0].runs)} (runs recorded before the 2026-11-26 protocol: measured from their "
        f"config, model.init xavier). A cell that differs from its base by more than {TOLERANCE:.0%} in something it "
        "does not vary on purpose carries a confound of the protocol, not of the attention setting."
    )
    return "\n".join(["## At init", "", note, "", *init_check_table(labels, flats, checks), ""])


def update_check_section(cells) -> str:
    """The report's section from each cell's first run's `update_check` (results.json); "" where no run has one."""
    labels, flats, checks = [], [], []
    for c in cells:
        by_seed = sorted(c.runs, key=lambda r: r.seed)  # the first seed that measured it (older runs did not)
        run = next((r for r in by_seed if r.results.get("update_check")), by_seed[0])
        labels.append(c.label)
        flats.append(run.flat)
        checks.append(run.results.get("update_check"))
    if not any(checks):
        return ""
    steps = next(c["steps"] for c in checks if c)
    note = (
        f"Each attention kind's output change after {steps} Adam steps from init at the cell's peak rate (no "
        "warmup; per-matrix rates where module.lr_scaling is mup) on synthetic batches the same for every cell: "
        "RMS(out_after - out_init) / RMS(out_init) on a fixed batch, every layer of the kind pooled. A cell "
        f"whose change is outside [{1 / (1 + UPDATE_MARGIN):.2f}x, {1 + UPDATE_MARGIN:.2f}x] of its base's in "
        "a kind it does not vary on purpose takes steps of another size, a confound of the protocol."
    )
    return "\n".join(["## First steps", "", note, "", *update_check_table(labels, flats, checks), ""])
