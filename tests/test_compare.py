"""The heads_specialise comparison: per-run measures by hand, seed tests against scipy, the words."""

import json
import math

import pytest
from scipy.stats import ttest_ind

from headsweep.analysis import compare as C


def analysis(head_dropout=0.0, curve=(30.0, 15.0, 0.0), layers=((1.0, 1.0), (1.0, 0.0)), js=(0.2, 0.4),
             prunable=0.5, rho=0.3, groups=((("L0H0", "L0H1"),), ())):
    kinds = ["enc_self", "dec_self", "cross"][:len(js)]
    return {
        "model": {"head_dropout": head_dropout}, "split": "val", "full": {"bleu": curve[0]},
        "settings": {"sentences_decoded": 10, "step": 0.5, "tolerance": 1.0},
        "pruning": {"fractions": [0.0, 0.5, 1.0],
                    "pools": {"all": {"importance": {"bleu": list(curve)}, "prunable": {"importance": prunable}}}},
        "importance": {"raw": {"enc_self": [list(s) for s in layers]}},
        "redundancy": {"kinds": {k: {"mean_js_bits": v, "twin_vs_loss_increase": {"spearman_rho": rho},
                                     "groups": [list(g) for g in gs]}
                                 for k, v, gs in zip(kinds, js, groups)}},
    }


def test_measures_by_hand():
    m = C.specialisation(analysis())
    # area: 0.5 (30 + 15) / 2 + 0.5 (15 + 0) / 2 = 15 over a unit interval, / 30 = half the full BLEU kept
    assert m["kept_area"] == pytest.approx(0.5)
    # layer (1, 1): entropy log 2 / log 2 = 1; layer (1, 0): all on one head = 0; mean 0.5
    assert m["evenness"] == pytest.approx(0.5)
    assert m["importance_cv"] == pytest.approx(0.5)  # layer (1, 1): sd 0; layer (1, 0): sd 0.5 / mean 0.5 = 1
    assert m["mean_js"] == pytest.approx(0.3)
    assert (m["bleu"], m["prunable"]) == (30.0, 0.5)
    three = C.specialisation(analysis(groups=((("L0H0", "L0H1"), ("L1H2", "L1H3", "L1H4")), (("L2H0", "L2H1"),))))
    assert (m["near_duplicates"], three["near_duplicates"]) == (2.0, 7.0)  # heads in groups, over every kind
    flat = C.specialisation(analysis(curve=(30.0, 30.0, 30.0), layers=((2.0, 1.0, 1.0),)))
    assert flat["kept_area"] == pytest.approx(1.0)
    p = [0.5, 0.25, 0.25]
    assert flat["evenness"] == pytest.approx(-sum(x * math.log(x) for x in p) / math.log(3))
    assert flat["importance_cv"] == pytest.approx(math.sqrt(2 / 9) / (4 / 3))  # sd of (2, 1, 1) / its mean


def test_comparisons_use_welch_and_holm_over_every_measure():
    groups = {0.0: [C.specialisation(analysis(curve=(30.0, c, 0.0))) for c in (10.0, 11.0, 12.0)],
              0.2: [C.specialisation(analysis(head_dropout=0.2, curve=(30.0, c, 0.0))) for c in (20.0, 22.0, 21.0)]}
    found = C.comparisons(groups)
    area = next(c for c in found if c["measure"] == "kept_area")
    want = ttest_ind(area["values"], area["base_values"], equal_var=False).pvalue
    assert area["p"] == pytest.approx(want)
    tested = [c for c in found if c["p"] is not None]
    assert area["p_holm"] == pytest.approx(min(1.0, len(tested) * want))  # the only non-constant measure
    words = C.verdict_words(found)
    assert len(words) == 1 and words[0].startswith("head dropout 0.2 against 0 (n = 3 vs 3 seeds): ")
    assert "a flatter pruning curve" in words[0] and "Larger than the seed spread after Holm" in words[0]


def test_one_seed_says_there_is_no_spread():
    groups = {0.0: [C.specialisation(analysis())], 0.1: [C.specialisation(analysis(0.1, curve=(29.0, 20.0, 1.0)))]}
    words = C.verdict_words(C.comparisons(groups))
    assert "one seed in a cell: no spread, no test" in words[0] and "lower full-model BLEU" in words[0]
    assert "None of these differences is larger than the seed spread" in words[0]


def test_report_section_tabulates_groups(tmp_path):
    dirs = []
    for i, (hd, mid) in enumerate([(0.0, 10.0), (0.0, 12.0), (0.1, 20.0)]):
        d = tmp_path / f"run{i}"
        (d / "analysis").mkdir(parents=True)
        (d / "analysis" / "analysis.json").write_text(json.dumps(analysis(hd, curve=(30.0, mid, 0.0))))
        dirs.append(d)
    md = C.report_section(dirs, tmp_path / "out")
    assert (tmp_path / "out" / "heads_specialise_pruning.png").is_file()
    rows = [line for line in md.splitlines() if line.startswith("| 0")]
    # head dropout 0: areas (0.5 (30 + m) + 0.5 m) / 2 / 30 = 0.417 (m = 10) and 0.450 (m = 12): 43% ± 2%
    assert rows[0].startswith("| 0 | 2 | 30.00 ± 0.00 | 50% ± 0% | 43% ± 2% |")
    assert rows[1].startswith("| 0.1 | 1 | 30.00 | 50% | 58% |")
    assert "Spearman's ρ" in md and "+0.30 ± 0.00 (n = 3)" in md
