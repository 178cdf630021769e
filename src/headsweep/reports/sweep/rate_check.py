"""A sweep run at one rate for every cell (no grid; e.g. Table 3 from the chosen start at 2e-3) checks that rate on
a few cells' seed 1 at other rates, under another sweep name (<sweep>_edge): what those checks found, read from every
sweep in results/ (the Table 3 page's "Rate check" line)."""

from __future__ import annotations

import math
from pathlib import Path

from headsweep import store
from headsweep.machine import run_class
from headsweep.reports.sweep.cells import Run
from headsweep.reports.sweep.lr import _f, _loss, _without_rate
from headsweep.sweeps.lr_select import LR_KEY, SELECT_ON, lr_text
from headsweep.sweeps.reuse import finished_runs


def other_rates(root: Path, runs: dict[str, Run]) -> dict[str, dict[float, float]]:
    """A sweep run at one rate for every cell (no grid; e.g. Table 3 from the chosen start at 2e-3) checks that
    rate on a few cells' seed 1 at half and twice it, under another name. For each cell's run in `runs`: its final
    val loss and that of every finished run in results/ (any sweep) of the same experiment and seed at another
    rate, on the same machine class (rates differ between classes as kernels do); cells with no such run left
    out."""
    key = lambda config, machine: (_without_rate(config), run_class(machine))  # noqa: E731
    wanted = {key(r.results["config"], r.results.get("machine")): label for label, r in runs.items()}
    found = {label: {r.flat[LR_KEY]: _loss(r)} for label, r in runs.items()}
    for _, record in finished_runs(Path(root)):
        label = wanted.get(key(record.config, record.raw.get("machine")))
        rate, loss = store.saved_settings(record.config).get(LR_KEY), (record.metrics or {}).get(SELECT_ON)
        if label is not None and rate is not None and loss is not None:
            found[label].setdefault(rate, math.inf if math.isnan(loss) else loss)
    return {label: rates for label, rates in found.items() if len(rates) > 1}


def rate_check_lines(checks: list[tuple[str, dict[float, float], float]]) -> list[str]:
    """One line for a row's checks ((label as the page names the cell, other_rates' {rate: val loss}, the rate
    its seeds ran at)): each rate's final val loss, the best in bold, and whether each cell's own rate was the
    best tried, with rates on both sides of it."""
    if not checks:
        return []
    parts, beaten, one_side = [], [], []
    for label, rates, rate in checks:
        best = min(rates, key=lambda v: (rates[v], v))
        shown = [
            f"**{lr_text(v)} {_f(x, 3)}**" if v == best else f"{lr_text(v)} {_f(x, 3)}"
            for v, x in sorted(rates.items())
        ]
        parts.append(f"{label} " + ", ".join(shown))
        if best != rate:
            beaten.append(
                f"{label} at {lr_text(best)} ({_f(rates[best], 3)} against {_f(rates.get(rate), 3)} at {lr_text(rate)})"
            )
        elif not (min(rates) < rate < max(rates)):
            one_side.append(label)
    line = (
        "Rate check (seed 1 at other rates than its seeds', the same experiment in any sweep of results/, same "
        f"machine class; final val loss): {'; '.join(parts)}. "
    )
    if beaten:
        line += (
            f"**Another rate did better** for {'; '.join(beaten)}: "
            f"{'that cell is read below its' if len(beaten) == 1 else 'those cells are read below their'} best rate."
        )
    else:
        line += "Each cell checked ran at the best rate tried" + (
            f" (tried on one side only: {', '.join(one_side)})." if one_side else ", with a worse rate on both sides."
        )
    return [line]
