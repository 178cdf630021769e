"""Table 3's page, our side: a row's runs under one protocol (the earlier one at unit gain, or the new start),
its cells, their stuck runs (report.stuck_runs: the one rule every page uses), and what the page says about the
row beside its verdicts (convergence, grid edges, runs left out). Used by headsweep.reports.pages.table3.

A row's sweeps are those of headsweep.sweeps.table3.ROWS under the protocol's suffix ('' or '_start'). A row is
the CPU's sweeps unless another machine class finished it (<sweep>_<card>, every run on a GPU; or <sweep>_fp32,
every run on one CPU class without bf16 units), or, where none finished it, has more cells at 3 seeds with a Δ
than the CPU: then every cell of it, its base too, is that class's."""

from __future__ import annotations

import math
from pathlib import Path

from headsweep.machine import run_class
from headsweep.reports.pages.table3_paper import f
from headsweep.reports.sweep import convergence as report_convergence
from headsweep.reports.sweep.cells import Cell, group_cells, load_runs
from headsweep.reports.sweep.complete import planned_runs
from headsweep.reports.sweep.lr import choices, edge_section, split_grid_runs
from headsweep.reports.sweep.page import stuck_runs
from headsweep.reports.sweep.rate_check import other_rates, rate_check_lines
from headsweep.reports.sweep.stuck import gap_words
from headsweep.reports.sweep.summary import cell_numbers
from headsweep.sweeps.lr_select import LR_KEY
from headsweep.sweeps.table3 import BUDGET, CPU_TAIL, ROWS, SEEDS, chosen_gain, grid_words

EARLIER, START = "earlier", "start"
START_GAIN = chosen_gain()  # W^O's and W_2's init gain the base chose (init_scale; docs/init.md)
GAIN_WORDS = "1/√6 = 0.408" if abs(START_GAIN - 1 / math.sqrt(6)) < 1e-12 else f"{START_GAIN:.3g}"
# What a run must have been trained with to count in a protocol's rows (the rest is named and left out).
COMMON = {"model.init": "fan_in", "module.decay_by": "steps", "trainer.max_steps": 1150}
PROTOCOLS = {
    EARLIER: {
        "title": "earlier protocol (unit gain)",
        "brief": "unit gain",  # in the answers' verdict lines, which the index's three screens must hold
        "suffix": "",
        "gain": 1.0,
        "grid": True,  # a peak rate chosen per cell from a grid, recorded in each run's lr_select
        "words": f"W^O and W_2 at init gain 1, model.init fan_in, the learning rate decayed by the step alone, the "
        f"{BUDGET} budget (1,150 steps), a peak rate chosen per cell on seed 1's validation loss from {grid_words()} "
        f"(widened past an edge that won), {SEEDS} seeds at it",
    },
    START: {
        "title": f"new start (gain {GAIN_WORDS.split(' = ')[0]})",
        "brief": f"gain {GAIN_WORDS.split(' = ')[0]}",
        "suffix": "_start",
        "gain": START_GAIN,
        "grid": False,  # the base chose its start, not its rate: one rate may serve every cell
        "words": f"W^O and W_2 at init gain {GAIN_WORDS} (the start the base chose on validation), "
        f"model.init fan_in, the learning rate decayed by the step alone, the {BUDGET} budget (1,150 steps), "
        f"{SEEDS} seeds",
    },
}


def off_protocol(run, protocol: str) -> str | None:
    """Why a run is not of `protocol`, in a few words; None when it is. A run from before the gains were a
    setting has none recorded: it started at gain 1."""
    want = PROTOCOLS[protocol]
    for key, value in COMMON.items():
        if run.flat.get(key) != value:
            return f"{key} {run.flat.get(key)} (this protocol's: {value})"
    for key in ("model.init_wo_gain", "model.init_ff2_gain"):
        got = run.flat.get(key)
        got = 1.0 if got is None else float(got)
        if abs(got - want["gain"]) > 1e-6:
            return f"{key} {got:.3g} (this protocol's: {want['gain']:.3g})"
    if want["grid"] and not (run.results["config"].get("lr_select") or {}).get("grid"):
        return "one peak rate for every cell (no learning-rate grid)"
    return None


def row_runs(root: Path, names: list[str], protocol: str) -> dict:
    """A row's usable runs of `protocol` (one list per sweep), its grid runs, and what was left out (with why)."""
    out = {"runs": [], "grid": [], "left_out": [], "sweeps": [], "missing": []}
    for name in names:
        d = root / name
        if not d.is_dir():
            out["missing"].append(name)
            continue
        out["sweeps"].append(name)
        runs, left = load_runs(d, name)
        out["left_out"] += [(f"{name}/{p.name}", why) for p, why in left]
        runs, grid = split_grid_runs(runs)
        for r in [*runs, *grid]:
            if why := off_protocol(r, protocol):
                out["left_out"].append((f"{name}/{r.dir.name}", f"another protocol: {why}"))
        out["runs"].append([r for r in runs if not off_protocol(r, protocol)])
        out["grid"] += [r for r in grid if not off_protocol(r, protocol)]
    return out


def merged_cells(runs_by_sweep: list[list]) -> list[Cell]:
    """One row's cells: the first sweep's, then each later sweep's. Row D's two sweeps share the base: one cell,
    each run once (a run two sweeps show is one run in the store); a sweep from a card adds the card's base runs
    beside the CPU's, so that each cell finds a base of its own machine class (verdicts.compare). The base first."""
    cells: list[Cell] = []
    for runs in runs_by_sweep:
        if not runs:
            continue
        for c in group_cells(runs):
            base = next((x for x in cells if x.base), None)
            if c.base and base is not None:
                seen = {r.dir.resolve() for r in base.runs}
                base.runs += [r for r in c.runs if r.dir.resolve() not in seen]
                continue
            cells.append(c)
    return sorted(cells, key=lambda c: not c.base)


def rate_text(c: Cell) -> str:
    rates = sorted({r.flat.get(LR_KEY) for r in c.runs})
    return " / ".join(f"{v:g}" for v in rates if v is not None) or "—"


def row_info(root: Path, row: str, sweeps: list[str], protocol: str, pool: dict) -> dict:
    """One row's cells (numbers filled: summary.cell_numbers), stuck flags (the one rule) and words, from
    `sweeps`. pool: summary.early_pool(root), shared by every row and page."""
    got = row_runs(root, sweeps, protocol)
    info = {"sweeps": sweeps, "protocol": protocol, "left_out": got["left_out"], "grid": got["grid"], "cells": []}
    cells = merged_cells(got["runs"])
    info["missing"] = got["missing"]
    if not cells:
        info["status"] = "partial (phase 1 only)" if got["grid"] else "not run yet"
        return info
    for c in cells:
        c.row.update(cell_numbers(c))
    info["stuck"] = stuck_runs(cells, root, None, pool, got["grid"], here=tuple(sweeps))
    info["convergence"] = report_convergence.convergence(cells)
    info["cells"] = cells
    info["base"] = next((c for c in cells if c.base), None)
    info["edges"] = edge_words(root, got["grid"])
    info["rate_checks"] = None if got["grid"] else rate_checks(root, cells)
    info["devices"] = sorted(
        {
            f"{r.flat.get('trainer.precision')} {r.flat.get('trainer.accelerator') or 'cpu'}"
            for c in cells
            for r in c.runs
        }
    )
    return info


def class_suffixes(root: Path, names: list[str]) -> list[str]:
    """'_h200', '_fp32': where every sweep of a row also ran on another machine class under its name (make table3
    where torch sees a GPU, or on a CPU without bf16 units). Other tails ('_edge', '_budgets') are not rows."""
    first = names[0]
    found = {p.name[len(first) :] for p in root.glob(f"{first}_*") if p.is_dir()} if root.is_dir() else set()
    is_class = lambda s: s == CPU_TAIL or (s[1:].isalnum() and any(c.isdigit() for c in s))  # noqa: E731
    return sorted(s for s in found if is_class(s) and all((root / (n + s)).is_dir() for n in names))


def complete(info: dict) -> bool:
    return bool(info["cells"]) and info.get("base") is not None and all(c.row["n"] >= SEEDS for c in info["cells"])


def seeded(info: dict) -> int:
    """The row's cells at SEEDS seeds that have a Δ: 0 without a base at SEEDS seeds or with runs of two classes."""
    base = info.get("base")
    if base is None or base.row["n"] < SEEDS or len(classes(info)) != 1:
        return 0
    return sum(c.row["n"] >= SEEDS for c in info["cells"] if not c.base)


def classes(info: dict) -> set[str]:
    return {run_class(r.results.get("machine")) for c in info["cells"] for r in c.runs}


def on_card(info: dict) -> bool:
    return complete(info) and all(d.endswith(" gpu") for d in info["devices"])


def on_own_class(info: dict, root: Path) -> bool:
    """Complete, and on one machine class: every run on a card, or every run on one CPU class with every cell its
    sweeps' specs plan."""
    if on_card(info):
        return True
    if not complete(info) or len(classes(info)) != 1:
        return False
    planned = planned_cells(info, root)
    return planned is not None and len(info["cells"]) >= planned


def rows(root: Path, protocol: str, pool: dict, suffix: str = "") -> dict:
    """Every row of `protocol`: {row: info}. With a suffix every row is that card's; without one a row is the
    CPU's, unless another class finished it, or, where none did, has more cells at SEEDS seeds with a Δ than the
    CPU: a row's cells then all come from that class (its own base too). A row of two sweeps (D) takes a sweep
    from a card that finished it with more cells than the CPU has, with the card's base: each cell is still
    compared with a base of its own class (verdicts.compare)."""
    out = {}
    for row, names in ROWS.items():
        names = [n + PROTOCOLS[protocol]["suffix"] for n in names]
        info = row_info(root, row, [n + suffix for n in names], protocol, pool)
        cpu = (info["sweeps"], info["status"] if not info["cells"] else "partial")
        if not suffix and not complete(info):
            tails = class_suffixes(root, names)
            alts = [row_info(root, row, [n + tail for n in names], protocol, pool) for tail in tails]
            pick = next((a for a in alts if on_own_class(a, root)), None)
            if pick is None:  # no class finished it: the class with the most cells at SEEDS seeds, where it beats ours
                pick = max(alts, key=seeded, default=None)
                if pick is not None and seeded(pick) > seeded(info):
                    pick["outnumbers"] = seeded(info)  # the page says it is partial, and why it is shown
                else:
                    pick = None
            if pick is not None:
                pick["instead_of"] = cpu
                info = pick
            for alt in alts:  # the row also runs elsewhere: the page says how far it is
                if alt is not pick and (alt["cells"] or alt["grid"]):
                    info.setdefault("elsewhere", []).append(elsewhere(alt, root))
        if not suffix and not info.get("instead_of") and len(names) > 1:
            mixed = per_sweep(root, row, names, protocol, pool)
            if mixed is not None and len(mixed["cells"]) > len(info["cells"]):
                mixed["instead_of"] = cpu
                info = mixed
        out[row] = info
    return out


def planned_cells(info: dict, root: Path) -> int | None:
    """The cells a row's sweeps' specs plan (a base shared by two sweeps once); None where a spec is unknown."""
    plans = [planned_runs(n, results=root) for n in info["sweeps"]]
    return None if None in plans else sum(p[1] for p in plans) - (len(plans) - 1)


def elsewhere(info: dict, root: Path) -> str:
    """'[table3_c_start_fp32](table3_c_start_fp32.md) (32-true cpu): 2 of 8 cells at 3 seeds, 9 learning-rate grid
    runs': a row's other-class sweeps while unfinished, linked to their pages (a sweep with seeds has one)."""
    n = len(info["grid"])
    grid = f"{n} learning-rate grid run{'s' if n != 1 else ''}"
    if not info["cells"]:
        return f"{', '.join(info['sweeps'])} (phase 1 only): {grid}"
    name = ", ".join(f"[{s}]({s}.md)" for s in info["sweeps"])
    done = sum(c.row["n"] >= SEEDS for c in info["cells"])
    of = max(planned_cells(info, root) or 0, len(info["cells"]))
    return f"{name} ({', '.join(info['devices'])}): {done} of {of} cells at {SEEDS} seeds, {grid}"


def per_sweep(root: Path, row: str, names: list[str], protocol: str, pool: dict) -> dict | None:
    """The row with each sweep from the CPU, or from a card that finished that sweep with more cells than the CPU
    has; None where no card does, or the row so taken is unfinished."""
    chosen = []
    for name in names:
        pick, cpu = name, row_info(root, row, [name], protocol, pool)
        for card in class_suffixes(root, [name]):
            alt = row_info(root, row, [name + card], protocol, pool)
            if on_card(alt) and (not complete(cpu) or len(alt["cells"]) > len(cpu["cells"])):
                pick = name + card
                break
        chosen.append(pick)
    if chosen == names:
        return None
    info = row_info(root, row, chosen, protocol, pool)
    return info if complete(info) else None


# ----------------------------------------------------------------------------- the row's words beside its verdicts


def convergence_line(conv: dict) -> str:
    if not conv.get("n"):
        return "Convergence: no run has two validations with a falling val loss: not measured."
    share = f"{conv['median']:.0%} (range {conv['min']:.0%}-{conv['max']:.0%}, {conv['n']} runs)"
    if conv["not_converged"]:
        return (
            f"Convergence: the last third of training still gave a median {share} of the val-loss drop (over "
            f"{report_convergence.NOT_CONVERGED_SHARE:.0%}): still learning at the end; the row compares cells at "
            "a fixed, short budget, not converged models."
        )
    return (
        f"Convergence: the last third of training gave a median {share} of the val-loss drop: most of the learning "
        "happened before it."
    )


def stuck_line(info: dict, names: dict) -> str:
    """The row's stuck runs by the one rule, each with its gap early and at the end."""
    early, threshold = info["stuck"]["early"], info["stuck"]["threshold"]
    stuck = [
        f"{names.get(c.label, c.label)} seed {r.seed} ({gap_words(early[r.dir])})"
        for c in info["cells"]
        for r in c.runs
        if r.seed in (c.row.get("stuck_seeds") or []) and r.dir in early
    ]
    return (
        f"Stuck runs (report_stuck's rule, the same on every page: early val loss over its reference's median, at "
        f"its own rate, by more than {threshold.value:.3f}, or for a size with no base of its size over the base's "
        f"net of its final gap; the gap early and at the end, which a plateau keeps and "
        f"a slower learner narrows): " + ("; ".join(stuck) if stuck else "none") + "."
    )


def grid_only_line(grid: list) -> str:
    """A row with only phase 1 (the learning-rate grid) so far: its seed-1 runs, no cell at a chosen rate."""
    runs = sorted(
        f"{r.cell} at {r.flat[LR_KEY]:g} (val PPL {f(r.results['metrics'].get('val/ppl'))}, test BLEU "
        f"{f(r.results['metrics']['test/bleu'])})"
        for r in grid
    )
    return (
        f"Partial: only the learning-rate grid (phase 1, seed 1 at each rate) has run, {len(grid)} runs: "
        f"{'; '.join(runs)}. No cell has a chosen rate and {SEEDS} seeds yet, so no Δ or verdict."
    )


def rate_checks(root: Path, cells: list[Cell]) -> list | None:
    """A row run without a grid (one rate, or a rate set per cell after its check): [label, {rate: val loss},
    the cell's rate] for each cell whose seed 1 has runs at other rates in results/ (other_rates); None where none
    has."""
    seed_1 = {c.label: next((r for r in c.runs if r.seed == 1), None) for c in cells}
    seed_1 = {label: r for label, r in seed_1.items() if r is not None and r.flat.get(LR_KEY) is not None}
    checks = other_rates(root, seed_1)
    return [[label, rates, seed_1[label].flat[LR_KEY]] for label, rates in checks.items()] or None


def edge_words(root: Path, grid_runs: list) -> list[str]:
    """The sweep report's lines on cells that chose their grid's smallest or largest rate, and whether a run
    past that edge (any sweep in results/) brackets it. Row D's base, in both of its sweeps, once."""
    by_cell, grids, chosen = choices(grid_runs)
    seen = set()
    for label in list(by_cell):
        runs = frozenset(r.dir.resolve() for r in by_cell[label].values())
        if runs in seen:
            del by_cell[label], grids[label]
            chosen.pop(label, None)
        seen.add(runs)
    return [line.removeprefix("- ") for line in edge_section(root, by_cell, grids, chosen) if line]


def notes(info: dict, names: dict) -> list[str]:
    """What the page says about a row of one protocol beside its verdicts, as plain lines."""
    lines = []
    if info.get("instead_of"):
        cpu, state = info["instead_of"]
        if info["cells"] and all(d.endswith(" gpu") for d in info["devices"]):
            lines.append(
                f"Shown from the card: the CPU's {', '.join(cpu)} is {state}; every cell of this row, its base too, "
                "trained on the card, and each Δ is against the card's own base."
            )
        elif all(n.endswith(CPU_TAIL) for n in info["sweeps"]):
            lines.append(
                f"Shown from {', '.join(sorted(classes(info)))} in fp32: the bf16 {', '.join(cpu)} is {state}; every "
                "cell of this row, its base too, trained on that CPU class, and each Δ is against its own base there."
            )
        else:
            card = [n for n in info["sweeps"] if n not in cpu]
            lines.append(
                f"Two machines: {', '.join(card)} from the card (the CPU has fewer of its cells), the rest from the "
                "CPU; the base cell holds both machines' base runs, and each cell's Δ is against the base runs of "
                "its own class, never across."
            )
        if "outnumbers" in info:
            lines.append(
                f"Partial here too: shown for having more cells with {SEEDS} seeds and a Δ ({seeded(info)}) than "
                f"the CPU's row ({info['outnumbers']}); a row is read from one class, never cells of two."
            )
    if not info["cells"]:
        lines += [grid_only_line(info["grid"])] if info["grid"] else []
    else:
        lines.append(convergence_line(info["convergence"]))
        lines.append(stuck_line(info, names))
        lines.append(
            "Chosen peak rate per cell: "
            + "; ".join(f"{names.get(c.label, c.label)} {rate_text(c)}" for c in info["cells"])
            + "."
        )
        lines += info["edges"]
        if info.get("rate_checks"):
            lines += rate_check_lines([(names.get(label, label), v, rate) for label, v, rate in info["rate_checks"]])
    if info.get("elsewhere"):
        lines.append(
            f"Also running on another machine class, shown here once complete or ahead in cells at {SEEDS} seeds: "
            f"{'; '.join(info['elsewhere'])}."
        )
    if info["missing"]:
        lines.append(f"Not run yet: {', '.join(info['missing'])}.")
    if info["left_out"]:
        shown = "; ".join(f"{n}: {w}" for n, w in info["left_out"][:12])
        lines.append(
            f"Left out ({len(info['left_out'])}): {shown}" + ("; ..." if len(info["left_out"]) > 12 else "") + "."
        )
    return lines
