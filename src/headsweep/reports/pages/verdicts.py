"""Each Table 3 verdict computed once, here: a cell's seeds against its base's seeds on one machine class, then
against the paper. reports/table3.json holds what `judge` returns; every page that words a verdict renders it
from there, so two pages cannot say different things.

The comparison (`compare`) never crosses a machine class (machine.run_class: the GPU model, else the CPU class
results.json records): bf16 kernels differ between classes and no configuration has run on two of them often
enough to know by how much. The cell is compared on the class its base also ran on that holds most of its runs;
runs of other classes are named and left out, as is a run its time cap stopped before its steps. Where the base
ran on none of the cell's classes, `compare` raises CrossClass (one line naming both classes) and nothing is
computed; `judge` turns it into *not comparable: base on <class>*.

Over seeds, the unit of replication: Δ is the cell's mean test BLEU minus the base's, with its 95 % Welch
interval and Welch's p (scipy.stats.ttest_ind, equal_var=False); Holm's step-down adjustment across the cells of
one family: the cell's sweep (one experiment: its base, its class, its protocol), the family its own sweep page
corrects over. A family that a collecting page drew (all of Table 3's cells, or the rows one card finished) would
make a cell's p depend on which other experiments that page gathered, and two pages would print two p's and, near
0.05, two verdicts for one cell. Fewer than 2 seeds on a side: interval "—", no p. sacreBLEU's
paired bootstrap pools sentences of all seeds and ignores the seed-to-seed spread: no verdict rests on it.

The verdict, exactly one of VERDICTS. Margins (BLEU):
- the paper's dev Δ is a *cost* at <= -EFFECT (0.5), a *gain* at >= +EFFECT, otherwise *no clear effect*
  (the paper prints one decimal and calls nothing under half a point a change);
- a cost or gain: ours *agrees* when its interval lies wholly on the paper's side of 0, *disagrees* when wholly
  on the other side; either also needs Holm p < ALPHA (0.05), since an interval clear of 0 is p < 0.05 for that
  cell alone, and the page tests many cells;
- no clear effect: ours *agrees* when its interval lies inside ±EQUIVALENT (1.0: about two of our seed sds,
  the smallest band 3 seeds can show), *disagrees* when it lies wholly outside ±EQUIVALENT with Holm p < ALPHA;
- *inconclusive* otherwise, and with fewer than 2 seeds on a side (said in words);
- *not comparable*: the base ran on another machine class; the paper has no such cell; or under-trained: more
  than half of the compared seeds stuck on an early plateau (report_stuck's one rule), or a mean val PPL over
  PPL_RATIO (1.5) times the base's (the paper's own cells lie within 1.25 times its base's: 6.11 against 4.92).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from headsweep.machine import run_class
from headsweep.reporting.markdown import fmt_p
from headsweep.reporting.stats import holm
from headsweep.reports.sweep.cells import ReportError
from headsweep.store import stopped_short

EFFECT = 0.5
EQUIVALENT = 1.0
ALPHA = 0.05
LEVEL = 0.95
STUCK_SHARE = 0.5  # not comparable above this share of the compared seeds stuck
PPL_RATIO = 1.5  # not comparable above this many times the base's val PPL
AGREES, DISAGREES, INCONCLUSIVE, NOT_COMPARABLE = "agrees", "disagrees", "inconclusive", "not comparable"
VERDICTS = (AGREES, DISAGREES, INCONCLUSIVE, NOT_COMPARABLE)
RULE = (
    f"The paper's Δ BLEU is a cost at ≤ −{EFFECT:g}, a gain at ≥ +{EFFECT:g}, otherwise no clear effect. Ours "
    f"*agrees* when its {LEVEL:.0%} Welch interval over seeds lies on the paper's side of 0 (no clear effect: "
    f"inside ±{EQUIVALENT:g}), *disagrees* when it lies on the other side (no clear effect: wholly outside "
    f"±{EQUIVALENT:g}); a claim of a direction also needs Holm p < {ALPHA:g} across the cells of its sweep (one "
    f"experiment, one base: the family its sweep page uses). *Inconclusive* otherwise, and with fewer than 2 "
    f"seeds on a side (no interval). *Not comparable*: "
    f"the base ran on another machine class, the paper has no such cell, or under-trained (more than half of the "
    f"seeds stuck on an early plateau, or a val PPL over {PPL_RATIO:g}× the base's)."
)


class CrossClass(ReportError):
    """A cell and its base on different machine classes: one line naming both; nothing is computed."""

    def __init__(self, cell_class: str, base_class: str):
        self.cell_class, self.base_class = cell_class, base_class
        super().__init__(
            f"cell on {cell_class}, base on {base_class}: a comparison never crosses a machine class; train the "
            f"base on {cell_class} (3 seeds at its rate) to compare them"
        )


def class_of(run) -> str:
    return run_class(run.results.get("machine"))


@dataclass
class Comparison:
    """A cell against its base on one machine class: the runs compared, those left out, the numbers."""

    machine_class: str
    cell_runs: list
    base_runs: list
    left_out: list[str] = field(default_factory=list)  # "seed 3 (NVIDIA H100 80GB HBM3)": another class
    stopped: list[str] = field(default_factory=list)  # "seed 2 (stopped at step 1046 of 1150 by ...)": left out
    n: int = 0
    n_base: int = 0
    mean: float | None = None
    base_mean: float | None = None
    delta: float | None = None
    interval: tuple[float, float] | None = None
    p: float | None = None


def welch(cell: list[float], base: list[float]) -> tuple[tuple[float, float] | None, float | None]:
    """(95 % interval of mean(cell) - mean(base), two-sided p) by Welch's t-test (scipy); (None, None) below 2
    seeds a side, or where neither side varies (no spread to test against: scipy's nan)."""
    from scipy.stats import ttest_ind

    if len(cell) < 2 or len(base) < 2:
        return None, None
    res = ttest_ind(cell, base, equal_var=False)
    ci = res.confidence_interval(LEVEL)
    lo, hi, p = float(ci.low), float(ci.high), float(res.pvalue)
    return (None, None) if any(math.isnan(x) for x in (lo, hi, p)) else ((lo, hi), p)


def compare(cell_runs: list, base_runs: list, metric: str = "test/bleu") -> Comparison:
    """The cell's runs against the base's on one machine class (the module's rule): Δ, interval, p. CrossClass
    where the base ran on none of the cell's classes. A run its time cap stopped short of its steps
    (store.stopped_short) is no run of the budget: left out, named, on either side."""
    mine = [class_of(r) for r in cell_runs]
    theirs = [class_of(r) for r in base_runs]
    shared = [k for k in dict.fromkeys(mine) if k in theirs]
    if not shared:
        most = lambda classes: max(sorted(set(classes)), key=classes.count)  # noqa: E731
        raise CrossClass(most(mine) if mine else "nothing", most(theirs) if theirs else "nothing")
    cls = max(shared, key=lambda k: (mine.count(k), theirs.count(k)))
    left = [f"seed {r.seed} ({k})" for r, k in zip(cell_runs, mine) if k != cls]
    left += [f"base seed {r.seed} ({k})" for r, k in zip(base_runs, theirs) if k != cls]
    short = {id(r): why for r in [*cell_runs, *base_runs] if (why := stopped_short(r.results))}
    stopped = [f"seed {r.seed} ({short[id(r)]})" for r in cell_runs if id(r) in short]
    stopped += [f"base seed {r.seed} ({short[id(r)]})" for r in base_runs if id(r) in short]
    a_runs = [r for r, k in zip(cell_runs, mine) if k == cls and id(r) not in short]
    b_runs = [r for r, k in zip(base_runs, theirs) if k == cls and id(r) not in short]
    a = [r.results["metrics"][metric] for r in a_runs if metric in r.results["metrics"]]
    b = [r.results["metrics"][metric] for r in b_runs if metric in r.results["metrics"]]
    out = Comparison(cls, a_runs, b_runs, left, stopped, n=len(a), n_base=len(b))
    if a and b:
        out.mean, out.base_mean = statistics.fmean(a), statistics.fmean(b)
        out.delta = out.mean - out.base_mean
        out.interval, out.p = welch(a, b)
    return out


def effect(paper_delta: float) -> str:
    """The paper's Δ in words: 'cost', 'gain' or 'no clear effect'."""
    return "cost" if paper_delta <= -EFFECT else "gain" if paper_delta >= EFFECT else "no clear effect"


def interval_text(interval) -> str:
    return "—" if interval is None else f"[{interval[0]:+.2f}, {interval[1]:+.2f}]"


@dataclass
class Entry:
    """One cell of a page, what its verdict is computed from. stuck: the run dirs report_stuck's one rule flags;
    stuck_rule: that rule in a few words, for the reason."""

    paper_delta: float | None
    cell_runs: list
    base_runs: list
    stuck: set = field(default_factory=set)
    stuck_rule: str = "report_stuck's rule"
    family: str | None = None  # Holm's family: the cell's sweep (None: one family with every other None)


@dataclass
class Verdict:
    word: str
    reason: str
    comparison: Comparison | None = None  # None where the comparison would cross classes
    p_holm: float | None = None
    cell_class: str | None = None
    base_class: str | None = None
    val_ppl: tuple[float | None, float | None] = (None, None)
    stuck_seeds: list[int] = field(default_factory=list)


def mean_of(runs: list, metric: str) -> float | None:
    values = [r.results["metrics"][metric] for r in runs if r.results["metrics"].get(metric) is not None]
    return statistics.fmean(values) if values else None


def judge(entries: list[Entry]) -> list[Verdict]:
    """Every cell of a page (of one protocol), each to exactly one verdict: compared within one machine class,
    Holm across the cells of its family that have a p, then the module's rule."""
    comps: list[Comparison | CrossClass] = []
    for e in entries:
        try:
            comps.append(compare(e.cell_runs, e.base_runs))
        except CrossClass as err:
            comps.append(err)
    p = [c.p if isinstance(c, Comparison) else None for c in comps]
    adjusted: list[float | None] = [None] * len(entries)
    for family in dict.fromkeys(e.family for e in entries):
        at = [i for i, e in enumerate(entries) if e.family == family]
        for i, q in zip(at, holm([p[i] for i in at])):
            adjusted[i] = q
    out = []
    for e, comp, p_holm in zip(entries, comps, adjusted):
        if isinstance(comp, CrossClass):
            out.append(
                Verdict(NOT_COMPARABLE, f"base on {comp.base_class}", None, None, comp.cell_class, comp.base_class)
            )
            continue
        ppl = (mean_of(comp.cell_runs, "val/ppl"), mean_of(comp.base_runs, "val/ppl"))
        stuck = sorted(r.seed for r in comp.cell_runs if r.dir in e.stuck)
        word, reason = verdict(e.paper_delta, comp, p_holm, len(stuck), ppl, e.stuck_rule)
        out.append(Verdict(word, reason, comp, p_holm, comp.machine_class, comp.machine_class, ppl, stuck))
    return out


def under_trained(
    stuck: int,
    n: int,
    val_ppl: tuple[float | None, float | None] = (None, None),
    stuck_rule: str = "report_stuck's rule",
) -> str | None:
    """Why a compared cell is under-trained, so not comparable whatever its Δ (the gap reads the training, not the
    setting), or None: over STUCK_SHARE of its n compared seeds stuck on an early plateau (report_stuck), or its val
    PPL over PPL_RATIO times the base's. Table 3 and the budgets page ask this one rule."""
    if n > 0 and stuck / n > STUCK_SHARE:
        return f"under-trained: {stuck} of {n} seeds stuck on an early plateau ({stuck_rule})"
    ppl, base_ppl = val_ppl
    if ppl is not None and base_ppl and ppl / base_ppl > PPL_RATIO:
        ratio = ppl / base_ppl
        return f"under-trained: val PPL {ppl:.2f} is {ratio:.2f}× the base's {base_ppl:.2f} (over {PPL_RATIO:g}×)"
    return None


def verdict(
    paper_delta: float | None,
    comp: Comparison,
    p_holm: float | None,
    stuck: int = 0,
    val_ppl: tuple[float | None, float | None] = (None, None),
    stuck_rule: str = "report_stuck's rule",
) -> tuple[str, str]:
    """(one of VERDICTS, why in words) for one compared cell: the module's rule."""
    if paper_delta is None:
        return NOT_COMPARABLE, "the paper's Table 3 has no such cell"
    if why := under_trained(stuck, comp.n, val_ppl, stuck_rule):
        return NOT_COMPARABLE, why
    kind = effect(paper_delta)
    said = f"the paper's {paper_delta:+.1f} is {'a ' if kind != 'no clear effect' else ''}{kind}"
    if comp.interval is None:
        return INCONCLUSIVE, (
            f"{said}; {comp.n} seed{'s' * (comp.n != 1)} against {comp.n_base} of the base: fewer than 2 on a side, "
            "so no interval"
        )
    lo, hi = comp.interval
    ours = f"ours {comp.delta:+.2f} {interval_text(comp.interval)}"
    held = p_holm is not None and p_holm < ALPHA
    holm_words = f"Holm p {fmt_p(p_holm)}"
    if kind == "no clear effect":
        if -EQUIVALENT <= lo and hi <= EQUIVALENT:
            return AGREES, f"{said}; {ours} lies inside ±{EQUIVALENT:g}"
        outside = hi < -EQUIVALENT or lo > EQUIVALENT
        if outside and held:
            return DISAGREES, f"{said}; {ours} lies outside ±{EQUIVALENT:g}, {holm_words}"
        if outside:
            return INCONCLUSIVE, f"{said}; {ours} lies outside ±{EQUIVALENT:g} but {holm_words} ≥ {ALPHA:g}"
        return INCONCLUSIVE, f"{said}; {ours} is neither inside nor wholly outside ±{EQUIVALENT:g}"
    paper_side = hi < 0 if kind == "cost" else lo > 0
    other_side = lo > 0 if kind == "cost" else hi < 0
    if (paper_side or other_side) and held:
        return (AGREES if paper_side else DISAGREES), f"{said}; {ours}, {holm_words}"
    if paper_side or other_side:
        return INCONCLUSIVE, f"{said}; {ours} excludes 0 but {holm_words} ≥ {ALPHA:g}"
    return INCONCLUSIVE, f"{said}; {ours} includes 0"
