"""Table 3's verdict at 4x: each new-start cell's cooldown branch at 4 times the ablation budget (`make budgets`:
one warmup-stable-decay trunk per cell, cooled down from 3.2x; reports.pages.budgets) against the base's 4x branches,
judged once by verdicts.judge (within one machine class, Holm across the cells of its budgets sweep) against the
paper's Δ.

Reads the budgets sweeps of the new start's rows (<row's start sweep>_budgets, e.g. table3_c_start_budgets), the
primary cooldown shape only. The base is one experiment whichever row's budgets sweep trained it: its branches are
pooled from all of them. A 4x branch is trained 4x as long as the 1x verdict's runs and cooled down differently, so
its verdict sits beside the 1x one, never in place of it; the stuck rule is calibrated on 1,150-step runs and is
not applied here."""

from __future__ import annotations

import os
from pathlib import Path

from headsweep.reports.pages import verdicts as V
from headsweep.reports.sweep.cells import Run, load_runs
from headsweep.sweeps.budget_plan import DEFAULT_SHAPE

AT = 4  # the multiple of the ablation budget the column reads
BUDGETS_SUFFIX = "_budgets"


def branches(root: Path, sweeps: list[str], k: float = AT) -> tuple[dict[str, list[Run]], list[Run]]:
    """({cell label: its k-times branches}, the base's k-times branches) of the budgets sweeps of `sweeps`,
    each run once."""
    cells: dict[str, list[Run]] = {}
    base: list[Run] = []
    seen: set[str] = set()
    suffix = f"-{k:g}x-{DEFAULT_SHAPE}"
    for name in sweeps:
        d = root / f"{name}{BUDGETS_SUFFIX}"
        if not d.is_dir():
            continue
        for r in load_runs(d, d.name)[0]:
            flat = r.flat
            if flat.get("budgets.role") != "branch" or float(flat.get("budgets.budget") or 0) != k:
                continue
            if flat.get("module.cooldown") != DEFAULT_SHAPE or not r.cell.endswith(suffix):
                continue
            real = os.path.realpath(r.dir)
            if real in seen:
                continue
            seen.add(real)
            if flat.get("budgets.base"):
                base.append(r)
            else:
                cells.setdefault(r.cell.removesuffix(suffix), []).append(r)
    return cells, base


def at_budget(root: Path, rows: dict, cells: list[dict], k: float = AT) -> None:
    """Each cell record of the new start (table3_record.judged/unrun: row, label, paper_delta) gains "at_4x": its
    k-times verdict and the numbers behind it, or the state "not run yet". rows: the protocol's row infos (their
    sweeps name the budgets sweeps)."""
    runs, base = {}, []
    for row, info in rows.items():
        got, row_base = branches(root, info.get("sweeps") or [], k)
        runs[row] = got
        base += [r for r in row_base if os.path.realpath(r.dir) not in {os.path.realpath(b.dir) for b in base}]
    items = [c for c in cells if c.get("label") and runs.get(c["row"], {}).get(c["label"]) and base]
    # Holm per budgets sweep (the row's experiment at k times), as the 1x verdicts are per sweep
    mine = lambda c: runs[c["row"]][c["label"]]  # noqa: E731
    verdicts = V.judge([V.Entry(c.get("paper_delta"), mine(c), base, family=mine(c)[0].dir.parent.name) for c in items])
    for c in cells:
        c["at_4x"] = {"state": "not run yet"}
    for c, v in zip(items, verdicts):
        comp = v.comparison
        c["at_4x"] = {
            "state": "read",
            "steps": int(runs[c["row"]][c["label"]][0].flat.get("trainer.max_steps") or 0),
            "verdict": v.word,
            "reason": v.reason,
            "n": None if comp is None else comp.n,
            "n_base": None if comp is None else comp.n_base,
            "delta": None if comp is None or comp.delta is None else round(comp.delta, 4),
            "interval": None if comp is None or comp.interval is None else [round(x, 4) for x in comp.interval],
            "p_holm": None if v.p_holm is None else float(f"{v.p_holm:.4g}"),
            "cell_class": v.cell_class,
            "base_class": v.base_class,
        }
