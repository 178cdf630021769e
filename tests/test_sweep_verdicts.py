"""A sweep page's verdicts use Table 3's rule (issue 69): Welch over seeds with its 95% interval, Holm across the
page's cells on the Welch p-values, a direction only where Holm p < 0.05; the paired bootstrap over sentences is
shown as test-set noise and decides nothing. Welch and Holm are checked against their closed forms."""

import json
import math
import statistics

import pytest
from scipy import stats

from headsweep.reports.sweep import page as R
from headsweep.reports.sweep import significance as S
from headsweep.reports.sweep import summary as N
from headsweep.store.record import Record, read_record, write_record
from test_report import CELLS, make_run
from test_report_site import references

# Per cell: test BLEU per seed (what Welch reads) and the test hypotheses (what the bootstrap reads). h4's seeds
# disagree (20 to 35) while its hypotheses are far worse than the base's on every sentence: the bootstrap's
# floor, Welch's p near 1. h2 is 6 BLEU worse in each of 3 seeds, tight. h16 has one seed.
BASE = [30.0, 32.0, 31.0]
SPREAD = [20.0, 34.0, 35.0]
TIGHT = [25.0, 25.2, 24.9]
SWEEP = {8: (BASE, CELLS[8]["hyps"]), 4: (SPREAD, CELLS[2]["hyps"]), 2: (TIGHT, CELLS[2]["hyps"])}
SWEEP[16] = ([29.0], CELLS[4]["hyps"])


def welch_by_hand(cell: list[float], base: list[float]) -> tuple[float, float, float]:
    """(lo, hi, p) of mean(cell) - mean(base): Welch's t with Welch-Satterthwaite degrees of freedom."""
    va, vb = statistics.variance(cell) / len(cell), statistics.variance(base) / len(base)
    se = math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / (len(cell) - 1) + vb**2 / (len(base) - 1))
    d = statistics.fmean(cell) - statistics.fmean(base)
    half = stats.t.ppf(0.975, dof) * se
    return d - half, d + half, 2 * stats.t.sf(abs(d) / se, dof)


@pytest.fixture
def sweep(tmp_path):
    data = references(tmp_path)
    root = tmp_path / "results"
    for h, (bleus, hyps) in SWEEP.items():
        for seed, bleu in enumerate(bleus, start=1):
            make_run(root / "table3_a", data, h, seed, bleu, hyps)
    runs, _ = R.load_runs(root / "table3_a")
    cells = R.group_cells(runs)
    N.summarize(cells, n_samples=100)
    return root, cells, {c.label.split("-")[0]: c.row for c in cells}


def test_a_cell_the_bootstrap_calls_but_its_seeds_do_not_is_inconclusive_and_a_tight_gap_is_worse(sweep):
    _, cells, rows = sweep
    spread, tight = rows["h4"], rows["h2"]
    assert spread["p_bootstrap"] == pytest.approx(1 / 101) and spread["p_bootstrap_bound"]  # pooled sentences: floor
    assert spread["p_holm"] > 0.05 and spread["verdict"] == "inconclusive"
    assert tight["p_holm"] < 0.05 and tight["verdict"] == "worse"
    words = {w.split(":")[0]: w for w in N.verdicts(cells)}
    assert words["h4-dk64-dv64"].startswith(f"h4-dk64-dv64: inconclusive: {statistics.fmean(SPREAD) - 31:+.2f} BLEU")
    lo, hi, p = welch_by_hand(TIGHT, BASE)
    assert words["h2-dk128-dv128"] == (
        f"h2-dk128-dv128: worse than the base by {31 - statistics.fmean(TIGHT):.2f} BLEU (95% CI [{lo:+.2f}, "
        f"{hi:+.2f}], Welch p = {p:.3f}, Holm p = {tight['p_holm']:.3f})."
    )
    assert not any("significant" in w or "bootstrap" in w for w in words.values())  # the bootstrap decides nothing


def test_welch_interval_and_holm_over_the_welch_p_values_match_their_closed_forms(sweep):
    _, _, rows = sweep
    hand = {h: welch_by_hand(bleus, BASE) for h, bleus in (("h4", SPREAD), ("h2", TIGHT))}
    for h, (lo, hi, p) in hand.items():
        assert rows[h]["interval"] == pytest.approx([lo, hi]) and rows[h]["p_welch"] == pytest.approx(p)
    # Holm over two p-values (h16's one seed has none): the smaller doubled, the larger at least that
    (small, s), (large, g) = sorted((p, h) for h, (_, _, p) in hand.items())
    assert rows[s]["p_holm"] == pytest.approx(min(1.0, 2 * small))
    assert rows[g]["p_holm"] == pytest.approx(max(min(1.0, 2 * small), large))
    assert rows["h16"]["p_welch"] is None and rows["h16"]["p_holm"] is None and rows["h8"]["p_holm"] is None


def test_a_one_seed_cell_has_no_interval_and_reads_inconclusive(sweep):
    _, cells, rows = sweep
    one = rows["h16"]
    assert one["interval"] is None and one["verdict"] == "inconclusive" and (one["n"], one["n_base"]) == (1, 3)
    line = next(w for w in N.verdicts(cells) if w.startswith("h16-"))
    assert line.startswith("h16-dk16-dv16: inconclusive: -2.00 BLEU against the base; 1 seed against 3: fewer")
    assert "no interval" in line
    # one seed on each side, by the rule alone
    row = {"delta": -3.0, "p_welch": None, "interval": None, "n": 1, "n_base": 1}
    S.holm_verdicts([row])
    assert (
        S.verdict_line("x", "the base", row)
        == "x: inconclusive: -3.00 BLEU against the base; one seed per side: no interval."
    )


def test_holm_decides_the_direction_not_welch_alone():
    """Two cells with Welch p 0.03 and 0.04: each below 0.05 alone, Holm's 0.06 and 0.06 are not."""
    rows = [
        {"delta": -1.0, "p_welch": 0.03, "interval": [-1.9, -0.1], "n": 3, "n_base": 3},
        {"delta": 1.0, "p_welch": 0.04, "interval": [0.1, 1.9], "n": 3, "n_base": 3},
        {"delta": 2.0, "p_welch": 0.001, "interval": [1.5, 2.5], "n": 3, "n_base": 3},
        {"delta": None, "p_welch": None, "interval": None, "n": 3, "n_base": None},  # the base
    ]
    S.holm_verdicts(rows)
    # sorted: 0.001 x 3 = 0.003, 0.03 x 2 = 0.06, 0.04 x 1 -> monotone 0.06
    assert [r["p_holm"] for r in rows] == pytest.approx([0.06, 0.06, 0.003, None])
    assert [r["verdict"] for r in rows] == ["inconclusive", "inconclusive", "better", None]
    assert S.verdict_line("c", "the base", rows[2]) == (
        "c: better than the base by 2.00 BLEU (95% CI [+1.50, +2.50], Welch p = 0.001, Holm p = 0.003)."
    )
    assert S.verdict_line("a", "the base", rows[0]) == (
        "a: inconclusive: -1.00 BLEU against the base (95% CI [-1.90, -0.10], Welch p = 0.030, Holm p = 0.060)."
    )


def test_the_page_table_and_json_carry_the_seed_rule_and_label_the_bootstrap_as_noise(sweep, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    root, cells, rows = sweep
    out = tmp_path / "reports"
    R.write_report("table3_a", root, out, n_samples=100)
    md = (out / "table3_a.md").read_text()
    columns, body = R.table(cells, R.varied_keys(cells))
    tight = dict(zip(columns, next(r for r in body if r[0] == "h2-dk128-dv128")))
    lo, hi, _ = welch_by_hand(TIGHT, BASE)
    assert tight["95% CI"] == f"[{lo:+.2f}, {hi:+.2f}]" and tight["p Holm"] == f"{rows['h2']['p_holm']:.3f}"
    assert dict(zip(columns, next(r for r in body if r[0].startswith("h16-"))))["95% CI"] == "—"
    assert "test-set noise within a seed, not a verdict: sacreBLEU's paired bootstrap" in md
    assert "significant after Holm" not in md
    cell = next(c for c in json.loads((out / "table3_a.json").read_text())["cells"] if c["cell"] == "h4-dk64-dv64")
    assert cell["interval"] == pytest.approx(rows["h4"]["interval"]) and cell["p_holm"] == pytest.approx(
        rows["h4"]["p_holm"]
    )
    assert cell["verdict"] == "inconclusive" and cell["p_bootstrap"] == pytest.approx(1 / 101)


XEON = {"cpu": "Intel(R) Xeon(R) Processor", "cpu_class": "AVX512 + AMX (bf16 units)", "gpu": None}
EPYC = {"cpu": "AMD EPYC 9R14", "cpu_class": "AVX512-BF16 (no AMX)", "gpu": None}


def on_machine(run, machine: dict) -> None:
    """Rewrite a hand-built run's record as trained on `machine` (results.json's `machine`)."""
    d = read_record(run).as_dict()
    d["machine"] = machine
    write_record(run, Record.from_dict(d, version=d.get("schema_version")))


def test_a_sweep_page_never_compares_across_machine_classes(tmp_path):
    """Base on the Xeon class; h2 on the EPYC class only: no Δ, no verdict, one line naming the base to train.
    h4 has two seeds on the Xeon and one on the EPYC: its Δ and interval use the two, the third is named."""
    data = references(tmp_path)
    sweep_dir = tmp_path / "results" / "table3_a"
    plan = {8: (BASE, [XEON] * 3), 2: (TIGHT, [EPYC] * 3), 4: ([24.0, 25.0, 40.0], [XEON, XEON, EPYC])}
    for h, (bleus, machines) in plan.items():
        hyps = SWEEP[h][1]
        for seed, (bleu, machine) in enumerate(zip(bleus, machines), start=1):
            on_machine(make_run(sweep_dir, data, h, seed, bleu, hyps), machine)
    runs, _ = R.load_runs(sweep_dir)
    cells = R.group_cells(runs)
    N.summarize(cells, n_samples=50)
    rows = {c.label.split("-")[0]: c.row for c in cells}
    words = {w.split(":")[0]: w for w in N.verdicts(cells)}

    epyc = rows["h2"]
    assert epyc["delta"] is None and epyc["verdict"] is None and epyc["p_holm"] is None
    assert words["h2-dk128-dv128"] == (
        "h2-dk128-dv128: no verdict: cell on AVX512-BF16 (no AMX), base on AVX512 + AMX (bf16 units): a comparison "
        "never crosses a machine class; train the base on AVX512-BF16 (no AMX) (3 seeds at its rate) to compare them."
    )
    mixed = rows["h4"]
    lo, hi, p = welch_by_hand([24.0, 25.0], BASE)
    assert mixed["delta"] == pytest.approx(24.5 - 31.0) and mixed["interval"] == pytest.approx([lo, hi])
    assert mixed["p_welch"] == pytest.approx(p) and mixed["n_compared"] == 2 and mixed["n"] == 3
    assert mixed["machine_class"] == "AVX512 + AMX (bf16 units)"
    assert words["h4-dk64-dv64"].endswith("Left out (another machine class): seed 3 (AVX512-BF16 (no AMX)).")
    # all three seeds pooled would read -1.33 BLEU: the page's Δ is not that
    assert mixed["test_bleu"] == pytest.approx(statistics.fmean([24.0, 25.0, 40.0]))


def with_val_ppl(run, ppl: float) -> None:
    """Rewrite a hand-built run's record with val PPL `ppl`."""
    d = read_record(run).as_dict()
    d["metrics"]["val/ppl"] = ppl
    write_record(run, Record.from_dict(d, version=d.get("schema_version")))


def test_an_under_trained_cell_is_not_comparable_on_its_sweep_page_as_on_table3(tmp_path, monkeypatch):
    """h2 is 6 BLEU worse in each of 3 seeds (Holm p < 0.05: 'worse' by the seed rule), but its val PPL is 12
    against the base's 6.9: 1.74x, over Table 3's 1.5x, so its Δ reads the training and it is not comparable, on
    the page, its json and its verdict line; h4's word and every Holm p are as without the rule."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    data = references(tmp_path)
    root = tmp_path / "results"
    for h, (bleus, hyps) in SWEEP.items():
        for seed, bleu in enumerate(bleus, start=1):
            run = make_run(root / "table3_a", data, h, seed, bleu, hyps)
            if h == 2:
                with_val_ppl(run, 12.0)
    out = tmp_path / "reports"
    R.write_report("table3_a", root, out, n_samples=100)
    cells = {c["cell"]: c for c in json.loads((out / "table3_a.json").read_text())["cells"]}
    base_ppl = statistics.fmean(10.0 - b / 10 for b in BASE)
    tight, spread = cells["h2-dk128-dv128"], cells["h4-dk64-dv64"]
    assert tight["p_holm"] < 0.05 and tight["verdict"] == "not comparable"
    assert tight["under_trained"] == (
        f"under-trained: val PPL 12.00 is {12 / base_ppl:.2f}× the base's {base_ppl:.2f} (over 1.5×)"
    )
    assert spread["verdict"] == "inconclusive" and spread["under_trained"] is None
    md = (out / "table3_a.md").read_text()
    assert f"h2-dk128-dv128: not comparable: {tight['under_trained']}, so its Δ {tight['delta']:+.2f} BLEU" in md
    assert "h2-dk128-dv128: worse than" not in md


def test_most_compared_seeds_stuck_make_a_cell_not_comparable_half_do_not():
    """Table 3's stuck share: over half of the compared seeds (a seed of another class is not compared)."""
    row = {"delta": -3.0, "verdict": "worse", "compared_seeds": [1, 2, 3], "val_ppl_pair": (7.0, 6.9)}
    two, one, other = dict(row, stuck_seeds=[1, 2]), dict(row, stuck_seeds=[1]), dict(row, stuck_seeds=[1, 4])
    S.under_trained_verdicts([two, one, other])
    assert two["verdict"] == "not comparable" and two["under_trained"].startswith("under-trained: 2 of 3 seeds stuck")
    assert one["verdict"] == other["verdict"] == "worse" and one["under_trained"] is None
