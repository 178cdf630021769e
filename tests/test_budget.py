"""The budget view (1x vs 2x steps) on fake runs: the 1x cell of the 2x runs' precision is preferred, the change
in the gap and its p-value are the hand-computed difference of differences, a shrinking gap is called so, and a
sweep without finished runs stops with one line. (heads_budget_2x, sweeps/heads_budget.yaml, composing: test_sweep.py's
test_every_grid_point_composes_into_the_jobs_it_planned_before_variants.)"""

import json

import numpy as np
import pytest
from scipy import stats

from conftest import fake_run
from headsweep.reporting.plots import ticks_path
from headsweep.reports.pages import budget
from headsweep.reports.site import check as report_check

BASE, H32, DK8 = ["tags=[base]"], ["model.heads=32"], ["model.d_k=8", "model.d_v=32"]
BF16 = ["trainer.precision=bf16-mixed"]
TWO = ["trainer.max_steps=2300", "trainer.max_time=00:03:00:00", *BF16]  # what heads_budget_2x changes
NOISE = (0.0, 0.3, -0.3)  # seeds 1..3


def curve(steps, top):
    rows = [f"{s - 1},{top * s / steps:.3f},{2 + steps / s:.3f}" for s in range(230, steps + 1, 230)]
    return "step,val/bleu,val/loss\n" + "\n".join(rows) + "\n"


def cell(root, sweep, label, bleu, overrides, steps=1150, noise=NOISE):
    for seed, e in enumerate(noise, 1):
        fake_run(root, sweep, f"{label}-s{seed}", seed, bleu + e, overrides, curve=curve(steps, bleu - 4))


def test_the_1x_cell_of_the_2x_precision_is_preferred_and_gaps_stay_within_one_precision(tmp_path):
    cell(tmp_path, "a32", "h8-dk32-dv32", 34.0, BASE)  # fp32, listed first in --against
    cell(tmp_path, "a32", "h32-dk8-dv8", 30.0, H32)
    cell(tmp_path, "a32", "h8-dk32-dv32-hdrop0.1", 33.0, ["model.head_dropout=0.1"])  # another experiment
    cell(tmp_path, "fixed", "h8-dk32-dv32", 33.9, [*BASE, "model.d_k=32", "model.d_v=32", *BF16])  # d_k spelt out
    cell(tmp_path, "long", "h8-dk32-dv32", 36.0, [*BASE, *TWO], steps=2300)
    cell(tmp_path, "long", "h32-dk8-dv8", 35.0, [*H32, *TWO], steps=2300)
    cells = budget.load(tmp_path, "long", "")[0]
    against = [(s, budget.load(tmp_path, s, "")[0]) for s in ("a32", "fixed")]
    rows, missing = budget.compare(cells, against)
    assert not missing and [r["cell"].label for r in rows] == ["h8-dk32-dv32", "h32-dk8-dv8"]
    base, h32 = rows
    assert (base["one"].sweep, base["one"].cell.label, budget.precision(base["one"].cell)) == (
        "fixed",
        "h8-dk32-dv32",
        "bf16-mixed",
    )
    assert (h32["one"].sweep, budget.precision(h32["one"].cell)) == ("a32", "32-true")
    # the 1x gap of h32 (fp32) is taken against the fp32 base, not the preferred bf16 one
    assert h32["base_one"].sweep == "a32" and h32["gap"]["gap1"] == pytest.approx(-4.0)
    # the same cell at the same budget is no 1x match
    assert not budget.same_but_budget(cells[0], cells[0])


def test_gap_change_is_the_hand_computed_difference_of_differences():
    b1, x1 = [34.0, 34.5, 33.8], [30.1, 29.5, 30.6]
    b2, x2 = [36.2, 35.7, 36.4], [34.9, 35.6, 34.8]
    g = budget.gap_change(b1, x1, b2, x2)
    groups = [np.array(v) for v in (b1, x1, b2, x2)]
    did = (groups[3].mean() - groups[2].mean()) - (groups[1].mean() - groups[0].mean())
    dof = sum(len(v) for v in groups) - 4
    s2 = sum(((v - v.mean()) ** 2).sum() for v in groups) / dof  # the seed spread pooled over the four groups
    se = np.sqrt(s2 * sum(1 / len(v) for v in groups))
    half = stats.t.ppf(0.975, dof) * se
    assert g["change"] == pytest.approx(did) and g["dof"] == dof == 8
    assert (g["lo"], g["hi"]) == pytest.approx((did - half, did + half))
    assert g["p"] == pytest.approx(2 * stats.t.sf(abs(did / se), dof))
    assert g["gap1"] == pytest.approx(np.mean(x1) - np.mean(b1))


@pytest.mark.parametrize("gap2, word", [(-1.0, "shrank"), (-4.1, "held"), (-7.0, "grew")])
def test_the_report_says_whether_the_gap_shrank_held_or_grew(tmp_path, capsys, gap2, word):
    cell(tmp_path, "a32", "h8-dk32-dv32", 34.0, BASE)
    cell(tmp_path, "a32", "h32-dk8-dv8", 30.0, H32, noise=(0.2, -0.1, -0.1))  # 1x gap -4
    cell(tmp_path, "long", "h8-dk32-dv32", 36.0, [*BASE, *TWO], steps=2300)
    cell(tmp_path, "long", "h32-dk8-dv8", 36.0 + gap2, [*H32, *TWO], steps=2300, noise=(-0.1, 0.2, -0.1))
    cell(tmp_path, "long", "h8-dk8-dv32", 33.0, [*DK8, *TWO], steps=2300)  # no 1x cell in a32
    out = tmp_path / "out"
    assert budget.main(["--sweep", "long", "--against", "a32", "--root", str(tmp_path), "--out", str(out)]) == 0
    md = (out / "long-budget.md").read_text()
    assert f"h32-dk8-dv8: the gap {word}" in md
    assert md.count(f"| {word} |") == 1 and not any(f"| {w} |" in md for w in {"shrank", "held", "grew"} - {word})
    assert "| a32/h32-dk8-dv8 | 30.00 ± 0.17 (n 3, 32-true) |" in md  # where the 1x number comes from
    assert "- h8-dk8-dv32: no cell of a32 with the same settings at another budget; left out." in md
    assert "each gap is measured within one precision" in md  # bf16 at 2x, fp32 at 1x
    if word == "held":
        assert "not shown, not that there is none" in md
    assert (out / "long-budget.html").stat().st_size > 0 and (out / "long-budget-curves.png").stat().st_size > 0
    # the key lies below both panels, over no curve and no ± sd band (inside a panel it lay over the bands)
    drawn = json.loads(ticks_path(out / "long-budget-curves.png").read_text())
    assert drawn["legends"] == [] and report_check.legend_problems(drawn) == []


@pytest.mark.parametrize("unfinished", [False, True])
def test_no_finished_runs_stop_it_with_one_line(tmp_path, capsys, unfinished):
    if unfinished:
        (tmp_path / "heads_budget_2x" / "h8-dk32-dv32-s1").mkdir(parents=True)  # started, no results.json
    assert budget.main(["--root", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run `make sweep SWEEP=heads_budget_2x SEEDS=3` first" in err
    assert not (tmp_path / "out").exists()


def test_without_against_every_other_sweep_is_searched_and_a_named_missing_one_stops_it(tmp_path, capsys):
    # no sweep name is wired in: the 1x cells are found in any sweep of the store, here one named "anything";
    # an empty sweep folder (a sweep that has not run) must not stop the report
    cell(tmp_path, "anything", "h8-dk32-dv32", 34.0, BASE)
    cell(tmp_path, "anything", "h32-dk8-dv8", 30.0, H32)
    (tmp_path / "not_run_yet").mkdir()
    cell(tmp_path, "long", "h8-dk32-dv32", 36.0, [*BASE, *TWO], steps=2300)
    cell(tmp_path, "long", "h32-dk8-dv8", 35.0, [*H32, *TWO], steps=2300)
    assert budget.every_other_sweep(tmp_path, "long") == ["anything"]
    out = tmp_path / "out"
    assert budget.main(["--sweep", "long", "--root", str(tmp_path), "--out", str(out)]) == 0
    assert "| anything/h32-dk8-dv8 | 30.00" in (out / "long-budget.md").read_text()
    assert (
        budget.main(["--sweep", "long", "--against", "heads_budget_1x", "--root", str(tmp_path), "--out", str(out)])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no runs of sweep 'heads_budget_1x'" in err and "drop it from --against" in err
