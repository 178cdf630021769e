"""Table 3's verdict at 4x: each new-start cell's cooldown branch at 4 times the ablation budget (`make budgets`:
one warmup-stable-decay trunk per cell, cooled down from 3.2x; reports.pages.budgets) against the base's 4x branches,
judged against the paper's Δ by verdicts.verdict's rule on the numbers the budgets page computes (budgets_runs: within
one machine class, Holm across the cells of its budgets sweep at that budget), so the two pages agree.

Reads the budgets sweeps of the new start's rows (<row's start sweep>_budgets, e.g. table3_c_start_budgets), the
primary cooldown shape only. The base is one experiment whichever row's budgets sweep trained it: its branches are
pooled from all of them, per machine class. A one-seed cell has the budgets page's interval (the base's spread). A
4x branch is trained 4x as long as the 1x verdict's runs and cooled down differently, so its verdict sits beside the
1x one, never in place of it; the stuck rule is calibrated on 1,150-step runs and is not applied here."""

from __future__ import annotations

from pathlib import Path

from headsweep.reports.pages import budgets_runs as R
from headsweep.reports.pages import verdicts as V

AT = 4  # the multiple of the ablation budget the column reads
BUDGETS_SUFFIX = "_budgets"


def budgets_sweeps(root: Path, sweeps: list[str]) -> list[str]:
    """The budgets sweeps of root that belong to these row sweeps: <sweep>_budgets, or <sweep>_<tail>_budgets
    (make budgets NAME=table3_c_start_avx512_bf16_budgets: the same cells on another machine class, its own base)."""
    found = R.discover(root)
    return [
        d for d in found
        if any(d == f"{s}{BUDGETS_SUFFIX}" or (d.startswith(f"{s}_") and d.endswith(BUDGETS_SUFFIX)) for s in sweeps)
    ]  # fmt: skip


def readings(root: Path, sweeps: list[str], k: float = AT) -> dict[tuple[str, str], tuple[dict, R.Cell, dict]]:
    """{(budgets sweep, cell label): (its machine class's summary, the cell, its gap at k)} as the budgets page
    computes them (budgets_runs: one base per machine class, Holm across the cells of a sweep at each budget). A
    cell read on several classes: the class with the most seeds at k."""
    names = budgets_sweeps(root, sweeps)
    if not names:
        return {}
    data = R.load(root, names)
    out: dict[tuple[str, str], tuple[dict, R.Cell, dict]] = {}
    for machine_class, branches in R.by_class(data.branches):
        table, budgets = R.cells(branches)
        summary = {"machine_class": machine_class, "base": table[0] if table and table[0].base else None}
        gaps = R.gaps(table, budgets)
        for cell in table:
            per, key = gaps.get(cell.cell_id, {}), (cell.sweep, cell.label)
            if k in per and (key not in out or len(cell.runs[k]) > len(out[key][1].runs[k])):
                out[key] = (summary, cell, per[k])
    return out


def comparison(summary: dict, cell: R.Cell, gap: dict, k: float) -> V.Comparison:
    """The budgets page's numbers for one cell at k as a verdicts.Comparison: the same Δ, interval and p."""
    g, base = gap["test/bleu"], summary["base"]
    mine, theirs = [b.run for b in cell.runs[k]], [b.run for b in base.runs[k]]
    interval = None if g["lo"] is None else (g["lo"], g["hi"])
    mean, base_mean = V.mean_of(mine, "test/bleu"), V.mean_of(theirs, "test/bleu")
    return V.Comparison(
        summary["machine_class"], mine, theirs, n=len(mine), n_base=len(theirs), mean=mean, base_mean=base_mean,
        delta=g["diff"], interval=interval, p=g["p"],
    )  # fmt: skip


def at_budget(root: Path, rows: dict, cells: list[dict], k: float = AT) -> None:
    """Each cell record of the new start (table3_record.judged/unrun: row, label, paper_delta) gains "at_4x": its
    k-times verdict and the numbers behind it, or the state "not run yet". rows: the protocol's row infos (their
    sweeps name the budgets sweeps). The numbers are the budgets page's (readings); the verdict is verdicts.verdict's
    rule on them, so the two pages never read one cell two ways."""
    # A row's budgets sweeps: those of the sweeps it shows and of those they stand in for (instead_of: the CPU's
    # table3_c_start where table3_c_start_fp32 is shown), so every machine class's trunks are read.
    own = {row: [*(info.get("sweeps") or []), *((info.get("instead_of") or [[]])[0])] for row, info in rows.items()}
    sweeps = {row: budgets_sweeps(root, names) for row, names in own.items()}
    read = readings(root, [s for names in own.values() for s in names], k)
    for c in cells:
        c["at_4x"] = {"state": "not run yet"}
        got = next((read[(s, c.get("label"))] for s in sweeps.get(c["row"], []) if (s, c.get("label")) in read), None)
        if got is None:
            continue
        summary, cell, gap = got
        comp = comparison(summary, cell, gap, k)
        ppl = (V.mean_of(comp.cell_runs, "val/ppl"), V.mean_of(comp.base_runs, "val/ppl"))
        p_holm = gap["test/bleu"].get("p_holm")
        word, reason = V.verdict(c.get("paper_delta"), comp, p_holm, 0, ppl)
        c["at_4x"] = {
            "state": "read",
            "steps": int(comp.cell_runs[0].flat.get("trainer.max_steps") or 0),
            "verdict": word,
            "reason": reason,
            "n": comp.n,
            "n_base": comp.n_base,
            "delta": None if comp.delta is None else round(comp.delta, 4),
            "interval": None if comp.interval is None else [round(x, 4) for x in comp.interval],
            "p_holm": None if p_holm is None else float(f"{p_holm:.4g}"),
            "budgets_word": gap["word"],
            "cell_class": comp.machine_class,
            "base_class": comp.machine_class,
        }
