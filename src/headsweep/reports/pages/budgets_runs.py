"""What the budgets page (reports.pages.budgets) reads and computes: the trunks and cooldown branches of `make budgets`
sweeps (results/<sweep>_budgets/), grouped into cells across budgets and sweeps, each cell's gap to the base at each
budget with its interval over seeds (within one machine class: each class has its own base), the verdict words
(computed here once: Table 3's "verdict at 4x" reads them too, reports.pages.table3_budget), Kendall's tau of the
cells' order between budgets, the base's 1x branch against its linear-decay 1x run, and what the plan has not
delivered yet. Reads only the runs' results.json and metrics files, and the plan's note (.budgets.json: which
trunks and branches are planned)."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from scipy.stats import kendalltau

from headsweep.machine import CLASS_KEY, run_class  # the class splits the page (by_class), not a cell
from headsweep.reporting.stats import difference_interval, holm, mean_sd
from headsweep.reports.pages.verdicts import ALPHA, NOT_COMPARABLE, mean_of, under_trained  # Table 3's rules
from headsweep.reports.sweep.cells import Run, as_run
from headsweep.reports.sweep.significance import BETTER, INCONCLUSIVE, WORSE  # the sweep pages' words for one rule
from headsweep.store import (
    RUNS,
    CorruptRecord,
    as_seen,
    experiment_settings,
    read_record,
    settings_diff,
    settings_key,
    stopped_short,
    stored_runs,
)
from headsweep.sweeps.budget_plan import BRANCH, DEFAULT_SHAPE, TRUNK
from headsweep.sweeps.budgets import NOTE
from headsweep.sweeps.cooldown import branch_runs, compare_shapes

METRICS = ("test/bleu", "val/loss")  # the verdicts read test BLEU (beam 4), as Table 3 does
# What makes a branch one budget of its cell: apart from these, its cell's branches share every experiment setting
PER_BUDGET = ("budgets.trunk", "budgets.step", "trainer.max_steps")
# What may differ between the base's 1x branch and its linear-decay 1x run (the same experiment otherwise)
SCHEDULE_KEYS = ("module.schedule", "module.decay_fraction", "module.cooldown", "module.decay_by", *PER_BUDGET[:2])


@dataclass
class Branch:
    run: Run  # as reports.sweep.cells reads a run (learning_curve, metrics CSV)
    sweep: str
    cell: str  # the view's cell part: <cell>-<k>x-<shape>-s<seed> less the budget, shape and seed
    budget: float  # multiple of base_steps
    shape: str
    base: bool
    cell_id: str  # the cell's identity across budgets and sweeps (its settings less PER_BUDGET)
    machine_class: str = "not recorded"  # machine.run_class: a gap never crosses it


@dataclass
class Budgets:
    sweeps: list[str]
    notes: dict[str, dict]  # sweep -> its .budgets.json
    branches: list[Branch]  # the primary shape's, each run once
    shape: str
    other_shapes: dict[str, int]  # shape -> finished branches left out (sweeps.cooldown compares shapes)
    trunks_done: int
    missing: list[str] = field(default_factory=list)  # lines: what is planned and not finished
    planned: int = 0  # trunks and branches planned (notes and finished trunks' records)
    shape_lines: list[str] = field(default_factory=list)  # markdown: other shapes against `shape` (sweeps.cooldown)


def discover(root: Path) -> list[str]:
    """The budgets sweeps under root: a folder with make budgets' note, or named <sweep>_budgets."""
    return [
        d.name
        for d in sorted(root.iterdir())
        if d.is_dir() and d.name != RUNS and not d.name.startswith(".")
        if (d / NOTE).is_file() or d.name.endswith("_budgets")
    ]


def cell_id(run: Run) -> str:
    settings = {k: v for k, v in experiment_settings(run.flat).items() if k not in (*PER_BUDGET, CLASS_KEY)}
    return settings_key(settings, None)


def views(root: Path, sweep: str) -> dict[str, dict | None]:
    """Each view of the sweep: its results as the view shows it (store.as_seen), None where it has not finished."""
    out = {}
    for d in sorted(p for p in (root / sweep).iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            record = read_record(d)
        except (OSError, CorruptRecord):
            record = None
        out[d.name] = as_seen(record, sweep, d.name) if record is not None and record.complete else None
    return out


def branch_of(view: Path, sweep: str, results: dict) -> Branch:
    run, b = as_run(view, results), results["config"]["budgets"]
    shape = results["config"]["module"].get("cooldown", "linear")
    suffix = f"-{b['budget']:g}x-{shape}-s{run.seed}"
    cell = view.name[: -len(suffix)] if view.name.endswith(suffix) else view.name
    klass = run_class(results.get("machine"))
    return Branch(run, sweep, cell, b["budget"], shape, bool(b.get("base")), cell_id(run), klass)


def load(root: Path, sweeps: list[str]) -> Budgets:
    """Every finished trunk and branch of the sweeps (a run two sweeps show counted once), and what is missing."""
    notes, seen, branches, shapes, trunks_done, missing, planned = {}, set(), [], {}, 0, [], 0
    for sweep in sweeps:
        note_path = root / sweep / NOTE
        notes[sweep] = json.loads(note_path.read_text()) if note_path.is_file() else {}
        shown = views(root, sweep)
        expected = dict(notes[sweep].get("planned", {}))
        for name, results in shown.items():
            b = (results or {}).get("config", {}).get("budgets") or {}
            if b.get("role") == TRUNK:  # a finished trunk's branches are expected, planned or not
                cell, seed = name.rsplit("-trunk-s", 1)
                # in its first shape only: a second shape's branches (SHAPES=sqrt,linear ONLY=..) are a measurement
                # of the shape on the trunks the command selected, expected where it planned them
                shape = (notes[sweep].get("shapes") or [DEFAULT_SHAPE])[0]
                for k in b.get("budgets", []):
                    expected.setdefault(f"{cell}-{k:g}x-{shape}-s{seed}", {"role": BRANCH, "trunk": name})
        planned += len(expected)
        for name, job in sorted(expected.items()):
            if shown.get(name) is not None:
                continue
            if job["role"] == TRUNK:
                missing.append(f"{sweep}/{name}: trunk not finished")
            elif shown.get(job["trunk"]) is None:
                missing.append(f"{sweep}/{name}: waits for its trunk {job['trunk']}")
            else:
                missing.append(f"{sweep}/{name}: branch not run (its trunk has finished)")
        for name, results in shown.items():
            b = (results or {}).get("config", {}).get("budgets") or {}
            where = (root / sweep / name).resolve()
            if b.get("role") not in (TRUNK, BRANCH) or where in seen:
                continue
            seen.add(where)
            if b["role"] == TRUNK:
                trunks_done += 1
                continue
            if why := stopped_short(results):  # not a run of its budget (its cooldown never ended): as verdicts
                missing.append(f"{sweep}/{name}: {why}; rerun make budgets to resume it")
                continue
            branch = branch_of(root / sweep / name, sweep, results)
            shapes[branch.shape] = shapes.get(branch.shape, 0) + 1
            branches.append(branch)
    shape = DEFAULT_SHAPE if DEFAULT_SHAPE in shapes or not shapes else max(shapes, key=shapes.get)
    # the shapes measured on the page: paired on one trunk checkpoint, so each pair shares its class and seed
    shape_lines = []
    for sweep in sweeps:
        if lines := compare_shapes(branch_runs(root / sweep), shape):
            shape_lines += [f"- `{sweep}`: {lines[0]}", *(f"  - {line.strip()}" for line in lines[1:])]
    return Budgets(
        sweeps,
        notes,
        [b for b in branches if b.shape == shape],
        shape,
        {s: n for s, n in shapes.items() if s != shape},
        trunks_done,
        missing,
        planned,
        shape_lines,
    )


@dataclass
class Cell:
    cell_id: str
    label: str
    base: bool
    runs: dict[float, list[Branch]]  # budget -> its branches (seeds)

    def values(self, budget: float, metric: str) -> list[float]:
        return [
            b.run.results["metrics"][metric] for b in self.runs.get(budget, []) if metric in b.run.results["metrics"]
        ]

    @property
    def sweep(self) -> str:
        """The budgets sweep that trained the cell (the first one, for a base several sweeps share): Holm's family."""
        return min(b.sweep for bs in self.runs.values() for b in bs)


def by_class(branches: list[Branch]) -> list[tuple[str, list[Branch]]]:
    """The branches of each machine class, the class with the most first: a cell is read against the base of its
    own class only (bf16 kernels differ between classes), so each class is a page section of its own."""
    out: dict[str, list[Branch]] = {}
    for b in branches:
        out.setdefault(b.machine_class, []).append(b)
    return sorted(out.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def cells(branches: list[Branch]) -> tuple[list[Cell], list[float]]:
    """The cells of one machine class's branches (the base first: the base cell with the most runs where sweeps
    disagree), and the budgets seen."""
    if len({b.machine_class for b in branches}) > 1:
        raise ValueError("cells() reads one machine class: split the branches with by_class first")
    by: dict[str, Cell] = {}
    for b in branches:
        c = by.setdefault(b.cell_id, Cell(b.cell_id, b.cell, False, {}))
        c.base = c.base or b.base
        c.runs.setdefault(b.budget, []).append(b)
    out = sorted(by.values(), key=lambda c: (not c.base, -sum(map(len, c.runs.values())), c.label))
    for c in out[1:]:
        c.base = False  # one base: a second one (other settings) is a cell like the others
    return out, sorted({b.budget for b in branches})


def word(d: dict) -> str:
    """better | worse | inconclusive from a test-BLEU gap and its Holm-adjusted p (the sweep pages' rule and
    words: below ALPHA after Holm across the cells of its sweep at that budget); "untested" without a p."""
    if d.get("p_holm") is None:
        return "untested"
    if d["p_holm"] >= ALPHA:
        return INCONCLUSIVE
    return BETTER if d["diff"] > 0 else WORSE


def change(first: str, now: str) -> str:
    """How a verdict moved from the first budget to this one: holds, flips, appears, fades, inconclusive (both),
    untested or not comparable (either)."""
    if "untested" in (first, now):
        return "untested"
    if NOT_COMPARABLE in (first, now):
        return NOT_COMPARABLE
    if first == now:
        return INCONCLUSIVE if now == INCONCLUSIVE else "holds"
    if first == INCONCLUSIVE:
        return "appears"
    return "fades" if now == INCONCLUSIVE else "flips"


def gaps(table: list[Cell], budgets: list[float]) -> dict[str, dict[float, dict]]:
    """cell_id -> budget -> {metric: difference_interval, "word", "change"} against the base at that budget. The
    test-BLEU gap also carries "p_holm": Holm across the cells of its sweep at that budget (the family Table 3's
    verdicts use), so a sweep of many cells is no licence for a lucky one."""
    base = table[0] if table and table[0].base else None
    pooled = {m: pooled_sd([base.values(k, m) for k in budgets]) for m in METRICS} if base else {}
    out: dict[str, dict[float, dict]] = {}
    for c in table:
        if base is None or c is base:
            continue
        per = {}
        for k in budgets:
            if base.values(k, "test/bleu") and c.values(k, "test/bleu"):
                per[k] = {m: difference_interval(base.values(k, m), c.values(k, m), pooled[m]) for m in METRICS}
        out[c.cell_id] = per
    for k in budgets:
        for family in dict.fromkeys(c.sweep for c in table if k in out.get(c.cell_id, {})):
            at = [out[c.cell_id][k]["test/bleu"] for c in table if k in out.get(c.cell_id, {}) and c.sweep == family]
            for g, q in zip(at, holm([g["p"] for g in at])):
                g["p_holm"] = q
    for c in table:
        for k, g in out.get(c.cell_id, {}).items():
            g["word"] = word(g["test/bleu"])
            # Table 3's under-training rule on PPL (its stuck rule is calibrated on 1,150-step runs: not here)
            ppl = (mean_of([b.run for b in c.runs[k]], "val/ppl"), mean_of([b.run for b in base.runs[k]], "val/ppl"))
            if why := under_trained(0, len(c.runs[k]), ppl):
                g["word"], g["under_trained"] = NOT_COMPARABLE, why
    for per in out.values():
        first = per.get(budgets[0], {}).get("word", "untested")
        for g in per.values():
            g["change"] = change(first, g["word"])
    return out


def pooled_sd(groups: list[list[float]]) -> tuple[float, int] | None:
    """The base's seed sd pooled over budgets, (sd, degrees of freedom): a one-seed cell's spread. Seed noise need
    not change with the budget, and one budget's three seeds alone can agree to 0.01 BLEU (the AVX512-BF16 base at
    2x), which would call a 0.07 difference real."""
    dof = sum(len(g) - 1 for g in groups if len(g) >= 2)
    if dof == 0:
        return None
    ss = sum((len(g) - 1) * statistics.variance(g) for g in groups if len(g) >= 2)
    return math.sqrt(ss / dof), dof


def noise_band(base: Cell | None, budgets: list[float], metric: str = "test/bleu") -> dict[float, float | None]:
    """The base's seed sd at each budget: the size of a difference that seed-to-seed noise alone makes."""
    return {k: mean_sd(base.values(k, metric))[1] if base else None for k in budgets}


def taus(table: list[Cell], budgets: list[float], metric: str = "test/bleu") -> list[dict]:
    """Kendall's tau (scipy) of the cells' order by mean `metric` between each pair of budgets (consecutive, then
    the first against the last), over the cells measured at both."""
    pairs = list(zip(budgets, budgets[1:])) + ([(budgets[0], budgets[-1])] if len(budgets) > 2 else [])
    out = []
    for a, b in pairs:
        both = [c for c in table if c.values(a, metric) and c.values(b, metric)]
        row = {"a": a, "b": b, "n": len(both), "tau": None, "p": None}
        if len(both) >= 2:
            res = kendalltau(
                [statistics.fmean(c.values(a, metric)) for c in both],
                [statistics.fmean(c.values(b, metric)) for c in both],
            )
            if not math.isnan(res.statistic):  # nan: every cell level at one budget, no order to compare
                row.update(tau=float(res.statistic), p=float(res.pvalue))
        out.append(row)
    return out


def linear_runs(root: Path, branch: Branch) -> list[dict]:
    """The store's finished runs that are the base's 1x branch as a linear-decay run: every experiment setting
    equal but the schedule (SCHEDULE_KEYS) and the seed, trained on the branch's machine class."""
    out = []
    for _, record in stored_runs(root):
        config = record.config or {}
        if not record.complete or config.get("budgets") or (config.get("module") or {}).get("schedule") != "linear":
            continue
        if run_class(record.raw.get("machine")) != branch.machine_class or stopped_short(record.as_dict()):
            continue
        diff = settings_diff(config, branch.run.flat, branch.run.seed)[0]
        if all(k in ("seed", CLASS_KEY, *SCHEDULE_KEYS) for k in diff):
            out.append({"seed": config.get("seed"), **(record.metrics or {})})
    return out


def one_x_against_linear(root: Path, table: list[Cell], budgets: list[float]) -> dict | None:
    """The base's 1x branches against its linear-decay 1x runs: {n_branch, n_linear, metric: interval}; None where
    there is no 1x branch of the base, {} where no linear run matches."""
    base = table[0] if table and table[0].base else None
    if base is None or 1 not in budgets or not base.runs.get(1):
        return None
    linear = linear_runs(root, base.runs[1][0])
    if not linear:
        return {}
    out = {"n_branch": len(base.runs[1]), "n_linear": len(linear)}
    for m in METRICS:
        lin = [r[m] for r in linear if m in r]
        if lin and base.values(1, m):
            out[m] = difference_interval(lin, base.values(1, m))  # branch - linear
            out[m]["linear"], out[m]["branch"] = mean_sd(lin), mean_sd(base.values(1, m))
    return out
