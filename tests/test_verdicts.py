"""The one verdict rule (headsweep.reports.pages.verdicts): Welch's interval and p over seeds against a closed form,
Holm across a page's cells by hand and within each sweep's family, a seed stopped short left out, each margin of the
rule on both sides, fewer than 2 seeds, a comparison that would cross machine classes (one line, nothing computed),
a cell with seeds on two classes, under-training."""

import math
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest
from scipy import stats

from headsweep.reports.pages import verdicts as V

XEON = {"cpu": "Intel(R) Xeon(R) Processor", "cpu_class": "AVX512 + AMX (bf16 units)", "gpu": None}
EPYC = {"cpu": "AMD EPYC 7B13", "cpu_class": "AVX512 + AVX512-BF16 (bf16 units)", "gpu": None}
H100 = {"cpu": "x", "cpu_class": "AVX2, no bf16 units", "gpu": "NVIDIA H100 80GB HBM3"}


def run(seed, bleu, machine=XEON, ppl=10.0):
    """What the rule reads of a run: its seed, directory, machine record and metrics."""
    return SimpleNamespace(
        seed=seed,
        dir=Path(f"/runs/{id(machine)}-{seed}-{bleu}"),
        results={"machine": machine, "metrics": {"test/bleu": bleu, "val/ppl": ppl}},
    )


def runs(values, machine=XEON, ppl=10.0):
    return [run(i + 1, v, machine, ppl) for i, v in enumerate(values)]


def welch_by_hand(a, b, level=0.95):
    """Welch's t-test in closed form: the interval of mean(a) - mean(b) and two-sided p (Welch-Satterthwaite df)."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    d = statistics.fmean(a) - statistics.fmean(b)
    half = stats.t.ppf(0.5 + level / 2, df) * se
    return (d - half, d + half), 2 * stats.t.sf(abs(d / se), df)


def test_the_interval_and_p_are_welchs_over_seeds():
    cell, base = [33.4, 33.7, 33.3], [34.4, 33.3, 34.5]
    comp = V.compare(runs(cell), runs(base))
    (lo, hi), p = welch_by_hand(cell, base)
    assert comp.interval == pytest.approx((lo, hi)) and comp.p == pytest.approx(p)
    assert comp.delta == pytest.approx(statistics.fmean(cell) - statistics.fmean(base))
    assert (comp.n, comp.n_base, comp.machine_class) == (3, 3, XEON["cpu_class"])


def test_holm_across_the_pages_cells_by_hand():
    base = runs([30.0, 30.2, 29.8])
    cells = [[28.0, 28.3, 27.9], [29.5, 30.1, 29.6], [31.0, 30.4, 30.9]]
    p = [welch_by_hand(c, [30.0, 30.2, 29.8])[1] for c in cells]
    got = [v.p_holm for v in V.judge([V.Entry(-1.0, runs(c), base) for c in cells])]
    order = sorted(range(3), key=lambda i: p[i])  # step-down: 3 p1, max(that, 2 p2), max(that, p3)
    want, running = [0.0] * 3, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (3 - rank) * p[i]))
        want[i] = running
    assert got == pytest.approx(want)

    # families: each cell's sweep apart; a family of one keeps its Welch p, the two others are Holm'd together
    fam = V.judge([V.Entry(-1.0, runs(c), base, family=f) for c, f in zip(cells, ("a", "b", "b"))])
    two = sorted(p[1:])
    assert [v.p_holm for v in fam] == pytest.approx([p[0], *[max(min(1, 2 * two[0]), q) for q in p[1:]]])


def test_a_seed_its_time_cap_stopped_short_is_left_out_of_the_comparison_and_named():
    """A seed that trained 1,046 of 1,150 steps (its rate not decayed) is no run of the budget, on either side."""
    cell, base = runs([33.4, 33.7, 20.0]), runs([34.4, 33.3, 34.5, 34.0])
    for r, steps in ((cell[2], 1046), (base[3], 900)):
        r.results["metrics"]["train/steps"] = steps
        r.results["config"] = {"trainer": {"max_steps": 1150, "max_time": "00:01:30:00"}}
    c = V.compare(cell, base)
    (lo, hi), p = welch_by_hand([33.4, 33.7], [34.4, 33.3, 34.5])
    assert (c.n, c.n_base) == (2, 3) and c.interval == pytest.approx((lo, hi)) and c.p == pytest.approx(p)
    assert c.stopped == [
        "seed 3 (stopped at step 1046 of 1150 by trainer.max_time 00:01:30:00)",
        "base seed 4 (stopped at step 900 of 1150 by trainer.max_time 00:01:30:00)",
    ]
    assert c.left_out == []  # another class: none


def comp(delta, lo, hi, n=3):
    return V.Comparison(XEON["cpu_class"], [], [], n=n, n_base=3, delta=delta, interval=(lo, hi), p=0.01)


@pytest.mark.parametrize(
    ("paper", "interval", "holm", "word"),
    [
        (-0.5, (-2.0, -0.1), 0.01, "agrees"),  # a cost at exactly -0.5; ours below 0
        (-0.5, (0.1, 2.0), 0.01, "disagrees"),  # a cost; ours above 0
        (-0.9, (-2.0, 0.3), 0.30, "inconclusive"),  # includes 0
        (-0.9, (-2.0, -0.1), 0.20, "inconclusive"),  # clear of 0 for the cell, not after Holm
        (+0.5, (0.2, 1.8), 0.01, "agrees"),  # a gain at exactly +0.5
        (+1.1, (-1.8, -0.2), 0.01, "disagrees"),
        (-0.4, (-0.9, 0.9), 0.90, "agrees"),  # no clear effect: inside ±1 (no Holm needed for that)
        (-0.4, (-1.0, 1.0), 0.90, "agrees"),  # the margin itself is inside
        (0.0, (-1.2, 0.4), 0.50, "inconclusive"),  # neither inside nor wholly outside
        (0.0, (-3.0, -1.1), 0.01, "disagrees"),  # wholly outside
        (0.4, (1.1, 3.0), 0.20, "inconclusive"),  # wholly outside, not after Holm
    ],
)
def test_each_margin_of_the_rule(paper, interval, holm, word):
    got, why = V.verdict(paper, comp(sum(interval) / 2, *interval), holm)
    assert got == word, why


def test_fewer_than_2_seeds_is_inconclusive_in_words():
    c = V.compare(runs([33.0]), runs([34.0, 34.2, 33.8]))
    assert c.interval is None and c.p is None and c.delta == pytest.approx(-1.0)
    (v,) = V.judge([V.Entry(-0.9, runs([33.0]), runs([34.0, 34.2, 33.8]))])
    assert v.word == "inconclusive" and "1 seed against 3 of the base: fewer than 2 on a side" in v.reason
    assert V.interval_text(c.interval) == "—"


def test_a_comparison_never_crosses_a_machine_class():
    cell, base = runs([33.0, 33.5, 33.2], EPYC), runs([34.0, 34.2, 33.8], XEON)
    with pytest.raises(V.CrossClass) as e:
        V.compare(cell, base)
    assert str(e.value).count("\n") == 0
    assert str(e.value).startswith(f"cell on {EPYC['cpu_class']}, base on {XEON['cpu_class']}: a comparison never")
    (v,) = V.judge([V.Entry(-0.9, cell, base)])
    assert v.word == "not comparable" and v.reason == f"base on {XEON['cpu_class']}"
    assert v.comparison is None and v.p_holm is None
    assert (v.cell_class, v.base_class) == (EPYC["cpu_class"], XEON["cpu_class"])


def test_a_cell_on_two_classes_is_compared_on_its_bases_and_names_the_rest():
    """Row A's base: seed 1 on an H100, seeds 2-3 on the H200 its cells ran on: the H100 seed is left out."""
    h200 = {**H100, "gpu": "NVIDIA H200"}
    base = [run(1, 33.2, H100), run(2, 33.8, h200), run(3, 34.5, h200)]
    c = V.compare(runs([29.8, 30.4, 29.8], h200), base)
    assert c.machine_class == "NVIDIA H200" and (c.n, c.n_base) == (3, 2)
    assert c.left_out == ["base seed 1 (NVIDIA H100 80GB HBM3)"]
    assert c.base_mean == pytest.approx((33.8 + 34.5) / 2)


def test_an_under_trained_cell_is_not_comparable_and_says_by_which_rule():
    base = runs([34.0, 34.2, 33.8], ppl=9.9)
    cell = runs([22.6, 21.8, 23.0], ppl=18.4)
    (v,) = V.judge([V.Entry(-0.3, cell, base)])
    assert v.word == "not comparable" and "val PPL 18.40 is 1.86× the base's 9.90 (over 1.5×)" in v.reason
    slow = runs([28.0, 27.0, 29.0], ppl=13.0)
    stuck = {slow[0].dir, slow[1].dir}
    (v,) = V.judge([V.Entry(-0.3, slow, base, stuck, "the stuck rule")])
    assert (
        v.word == "not comparable"
        and v.reason == "under-trained: 2 of 3 seeds stuck on an early plateau (the stuck rule)"
    )
    assert v.stuck_seeds == [1, 2]
    (v,) = V.judge([V.Entry(-0.3, slow, base, {slow[0].dir})])  # one of three: a minority, still compared
    assert v.word == "disagrees" and v.stuck_seeds == [1]


def test_a_cell_the_paper_lacks_is_not_comparable():
    (v,) = V.judge([V.Entry(None, runs([33.0, 33.1, 33.2]), runs([34.0, 34.2, 33.8]))])
    assert v.word == "not comparable" and v.reason == "the paper's Table 3 has no such cell"
    assert v.comparison.p is not None  # still compared with the base: its numbers stand beside
