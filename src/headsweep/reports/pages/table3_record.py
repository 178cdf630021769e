"""reports/table3.json: every cell of Table 3's rows A-E under each protocol, its verdict computed once
(verdicts.judge, here and nowhere else) with the numbers behind it and the machine class of the cell and of its
base; and the lines that render those verdicts into answers (the index, README, sweeps/_questions.yaml's
Table 3 questions: `answer_line`). The page itself (table3_page) renders from the same record."""

from __future__ import annotations

from pathlib import Path

from headsweep.reports.pages import verdicts as V
from headsweep.reports.pages.table3_answers import NOT_RUN, answer_line, counts_text  # noqa: F401 (re-exported)
from headsweep.reports.pages.table3_budget import at_budget
from headsweep.reports.pages.table3_paper import (
    SETTING_COLUMNS,
    match,
    ours_of,
    paper_base,
    paper_cells,
    short_name,
)
from headsweep.reports.pages.table3_rows import EARLIER, PROTOCOLS, START, notes, rate_text
from headsweep.reports.sweep.summary import settings
from headsweep.sweeps.table3 import ROWS, SEEDS


def rounded(x, digits: int = 4):
    return None if x is None else round(float(x), digits)


def significant(p, digits: int = 4):
    """A p-value to `digits` significant digits (a tiny p keeps its size; round() to places would zero it)."""
    return None if p is None else float(f"{p:.{digits}g}")


def reference_settings(by_protocol: dict) -> dict:
    """Our base's Table 3 columns (the same under every protocol: the gain is no column): from any row's base,
    else the configured model's."""
    for rows in by_protocol.values():
        for info in rows.values():
            if info.get("base") is not None:
                return settings(info["base"].runs[0].flat)
    from headsweep.config import compose
    from headsweep.store import flatten_config

    return settings(flatten_config(compose([])))


def stuck_words(info: dict) -> str:
    t = info["stuck"]["threshold"]
    return (
        f"report_stuck's rule: early val loss more than {t.value:.3f} over its reference's median (a size with no "
        "base of its size: also over the base's, net of its final gap)"
    )


def sweep_of(c) -> str | None:
    """The sweep a cell's runs are shown in: its page, and its Holm family."""
    return next((r.dir.parent.name for r in c.runs), None)


def judged(rows: dict, paper: list[dict]) -> list[dict]:
    """Every compared cell of one protocol's rows, its verdict by verdicts.judge (Holm across the cells of each
    cell's sweep, as its sweep page corrects)."""
    items, entries = [], []
    for row, info in rows.items():
        base = info.get("base")
        for c in info["cells"]:
            if base is None or c is base:
                continue
            ours, ref = settings(c.runs[0].flat), settings(base.runs[0].flat)
            p, p_delta, p_dppl = match(ours, ref, paper)
            items.append((row, info, c, ours, ref, p, p_delta, p_dppl))
            stuck = {r.dir for r in c.runs if r.seed in (c.row.get("stuck_seeds") or [])}
            entries.append(V.Entry(p_delta, c.runs, base.runs, stuck, stuck_words(info), sweep_of(c)))
    out = []
    for (row, _, c, ours, ref, p, p_delta, p_dppl), v in zip(items, V.judge(entries)):
        comp = v.comparison
        out.append(
            {
                "row": row,
                "cell": short_name(ours, ref),
                "label": c.label,
                "sweep": sweep_of(c),
                "settings": ours,
                "paper": None if p is None else {k: p.get(k) for k in ("dev_ppl", "dev_bleu", "params_M")},
                "paper_index": None if p is None else paper.index(p),
                "paper_delta": rounded(p_delta, 2),
                "paper_dppl": rounded(p_dppl, 2),
                "paper_effect": None if p_delta is None else V.effect(p_delta),
                "n": None if comp is None else comp.n,
                "n_base": None if comp is None else comp.n_base,
                "mean": None if comp is None else rounded(comp.mean),  # of the compared seeds
                "all_mean": rounded(c.row["test_bleu"]),  # of every seed, whatever its class
                "all_sd": rounded(c.row.get("test_bleu_sd")),
                "all_val_ppl": rounded(c.row.get("val_ppl")),
                "base_mean": None if comp is None else rounded(comp.base_mean),
                "delta": None if comp is None else rounded(comp.delta),
                "interval": None if comp is None or comp.interval is None else [rounded(x) for x in comp.interval],
                "p": None if comp is None else significant(comp.p),
                "p_holm": significant(v.p_holm),
                "verdict": v.word,
                "reason": v.reason,
                "cell_class": v.cell_class,
                "base_class": v.base_class,
                "left_out": [] if comp is None else comp.left_out,
                "stopped_out": [] if comp is None else comp.stopped,
                "stuck_seeds": sorted(c.row.get("stuck_seeds") or []),
                "val_ppl": rounded(v.val_ppl[0]),
                "base_val_ppl": rounded(v.val_ppl[1]),
                "params_M": rounded(c.row.get("params_M"), 2),
                "rate": rate_text(c),
                "seeds": len(c.runs),
                "state": "complete" if len(c.runs) >= SEEDS else f"partial ({len(c.runs)} of {SEEDS} seeds)",
            }
        )
    return out


def unrun(row: str, have: set[str], paper: list[dict], ref: dict, protocol: str) -> list[dict]:
    """The paper's cells of `row` that no cell of ours under `protocol` matches, each as a record line."""
    out = []
    for p in paper_cells(paper, row):
        ours = ours_of(p, paper, ref)
        name = short_name(ours, ref)
        if name in have:
            continue
        delta = p["dev_bleu"] - paper_base(paper)["dev_bleu"]
        out.append(
            {
                "row": row,
                "cell": name,
                "protocol": protocol,
                "settings": ours,
                "paper": {k: p.get(k) for k in ("dev_ppl", "dev_bleu", "params_M")},
                "paper_index": paper.index(p),
                "paper_delta": rounded(delta, 2),
                "paper_effect": V.effect(delta),
                "state": NOT_RUN,
                "verdict": None,
            }
        )
    return out


def row_state(info: dict, cells: list[dict]) -> str:
    """'complete', 'not run yet', 'partial (...)': a row of one protocol."""
    if not info["cells"]:
        return "partial (phase 1 only)" if info["grid"] else NOT_RUN
    if info.get("base") is None:
        return "no base cell"
    parts = [f"{c['cell']}: {c['state']}" for c in cells if c["state"] not in ("complete", NOT_RUN)]
    parts += [f"{', '.join(info['missing'])} not run yet"] if info["missing"] else []
    ref = settings(info["base"].runs[0].flat)
    in_grid: dict[str, int] = {}  # a cell with no seeds yet may have its rate grid under way
    for r in info["grid"]:
        name = short_name(settings(r.flat), ref)
        in_grid[name] = in_grid.get(name, 0) + 1
    waiting = [c["cell"] for c in cells if c["state"] == NOT_RUN]
    parts += [f"{w}: rate grid only ({in_grid[w]} run{'s' * (in_grid[w] > 1)})" for w in waiting if w in in_grid]
    waiting = [w for w in waiting if w not in in_grid]
    parts += [f"not run yet: {'; '.join(waiting)}"] if waiting else []
    return f"partial ({'; '.join(parts)})" if parts else "complete"


def base_line(info: dict) -> dict | None:
    base = info.get("base")
    if base is None:
        return None
    r = base.row
    classes = sorted({V.class_of(run) for run in base.runs})
    return {
        "label": base.label,
        "sweep": base.runs[0].dir.parent.name,
        "settings": settings(base.runs[0].flat),
        "n": r["n"],
        "mean": rounded(r["test_bleu"]),
        "sd": rounded(r.get("test_bleu_sd")),
        "val_ppl": rounded(r.get("val_ppl")),
        "params_M": rounded(r.get("params_M"), 2),
        "rate": rate_text(base),
        "classes": {k: sorted(run.seed for run in base.runs if V.class_of(run) == k) for k in classes},
    }


def record(by_protocol: dict, paper: list[dict], root: Path | None = None) -> dict:
    """reports/table3.json from {protocol: table3_rows.rows(...)}: per row and protocol its sweeps, state and
    words; per cell and protocol its verdict and the numbers behind it; the verdicts that moved. With the results
    root, each new-start cell also its verdict at 4x (table3_budget)."""
    ref = reference_settings(by_protocol)
    cells, rows = [], {row: {} for row in ROWS}
    for protocol, row_infos in by_protocol.items():
        done = judged(row_infos, paper)
        for c in done:
            c["protocol"] = protocol
        for row, info in row_infos.items():
            mine = [c for c in done if c["row"] == row]
            mine += unrun(row, {c["cell"] for c in mine}, paper, ref, protocol)
            mine.sort(key=lambda c: (c["paper_index"] is None, c["paper_index"] or 0, c["cell"]))
            cells += mine
            names = {c["label"]: c["cell"] for c in mine if "label" in c}
            if info.get("base") is not None:
                names[info["base"].label] = "base"
            rows[row][protocol] = {
                "sweeps": info["sweeps"],
                "state": row_state(info, mine),
                "devices": info.get("devices") or [],
                "base": base_line(info),
                "instead_of": list(info["instead_of"]) if info.get("instead_of") else None,
                "notes": notes(info, names),
            }
    if root is not None and START in by_protocol:
        at_budget(root, by_protocol[START], [c for c in cells if c["protocol"] == START])
    return {
        "what": "Table 3's verdicts, computed once by `make table3-report` (headsweep.reports.pages.table3); the table "
        "page, the index, README's answers and sweeps/_questions.yaml's Table 3 answers render them from here",
        "rule": V.RULE,
        "margins": {
            "effect": V.EFFECT,
            "equivalent": V.EQUIVALENT,
            "alpha": V.ALPHA,
            "level": V.LEVEL,
            "stuck_share": V.STUCK_SHARE,
            "ppl_ratio": V.PPL_RATIO,
        },
        "protocols": {p: {k: PROTOCOLS[p][k] for k in ("title", "brief", "words", "suffix")} for p in by_protocol},
        "setting_columns": list(SETTING_COLUMNS),
        "reference_settings": ref,
        "paper_base": {k: paper_base(paper).get(k) for k in ("dev_ppl", "dev_bleu", "params_M")},
        "rows": rows,
        "cells": cells,
        "moved": moved(cells),
        "calibration": {p: calibration(row_infos) for p, row_infos in by_protocol.items()},
    }


def calibration(row_infos: dict) -> dict | None:
    """The base cell on each machine class its rows' base runs trained on, written once: n seeds, mean test BLEU
    and val loss per class, and each other class against the reference class (the CPU class with the most base
    runs, else the class with most) with a Welch interval over seeds. bf16 kernels differ between classes, so
    this is how far two classes' bases sit apart, the reason no comparison crosses them. None below 2 classes."""
    runs, seen = [], set()
    for info in row_infos.values():
        for r in info["base"].runs if info.get("base") is not None else []:
            if r.dir.resolve() not in seen:
                seen.add(r.dir.resolve())
                runs.append(r)
    by: dict[str, list] = {}
    for r in runs:
        by.setdefault(V.class_of(r), []).append(r)
    if len(by) < 2:
        return None
    gpu = lambda k: any((r.results.get("machine") or {}).get("gpu") for r in by[k])  # noqa: E731
    ref = max(sorted(by), key=lambda k: (not gpu(k), len(by[k])))
    metric = lambda rs, m: [r.results["metrics"][m] for r in rs if m in r.results["metrics"]]  # noqa: E731
    classes = []
    for k in sorted(by, key=lambda k: (k != ref, k)):
        bleu, loss = metric(by[k], "test/bleu"), metric(by[k], "val/loss")
        entry = {
            "class": k,
            "n": len(bleu),
            "seeds": sorted(r.seed for r in by[k]),
            "bleu": rounded(sum(bleu) / len(bleu)) if bleu else None,
            "val_loss": rounded(sum(loss) / len(loss)) if loss else None,
        }
        if k != ref:
            for name, mine, theirs in (
                ("bleu", bleu, metric(by[ref], "test/bleu")),
                ("val_loss", loss, metric(by[ref], "val/loss")),
            ):
                interval, p = V.welch(mine, theirs)
                entry[f"delta_{name}"] = (
                    rounded(sum(mine) / len(mine) - sum(theirs) / len(theirs)) if mine and theirs else None
                )
                entry[f"interval_{name}"] = None if interval is None else [rounded(x) for x in interval]
                entry[f"p_{name}"] = significant(p)
        classes.append(entry)
    return {"reference": ref, "classes": classes}


def moved(cells: list[dict]) -> list[dict]:
    """The cells whose verdict differs between the earlier protocol and the new start (both run)."""
    by = {(c["row"], c["cell"], c["protocol"]): c for c in cells}
    out = []
    for (row, name, protocol), c in by.items():
        new = by.get((row, name, START))
        if protocol != EARLIER or new is None or c["verdict"] is None or new["verdict"] is None:
            continue
        if c["verdict"] != new["verdict"]:
            out.append({"row": row, "cell": name, EARLIER: c["verdict"], START: new["verdict"]})
    return out


# ----------------------------------------------------------------------------- answers rendered from the record


def cell_verdict(c: dict) -> str:
    """A cell's verdict as every page words it: the verdict, or 'not run yet'."""
    return c["verdict"] or c["state"]
