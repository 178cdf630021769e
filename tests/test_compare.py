"""The head-analysis section of a sweep's report: per-run measures by hand, seed tests against scipy, the words,
grouping by cell, and fixed against learned heads (analysis/fixed.py) by hand."""

import json
import math

import pytest
from scipy.stats import ttest_ind

from headsweep.analysis import fixed as F
from headsweep.reports.pages import compare as C


def analysis(
    head_dropout=0.0,
    curve=(30.0, 15.0, 0.0),
    layers=((1.0, 1.0), (1.0, 0.0)),
    js=(0.2, 0.4),
    prunable=0.5,
    rho=0.3,
    groups=((("L0H0", "L0H1"),), ()),
):
    kinds = ["enc_self", "dec_self", "cross"][: len(js)]
    return {
        "model": {"head_dropout": head_dropout},
        "split": "val",
        "full": {"bleu": curve[0]},
        "settings": {"sentences_decoded": 10, "step": 0.5, "tolerance": 1.0},
        "pruning": {
            "fractions": [0.0, 0.5, 1.0],
            "pools": {"all": {"importance": {"bleu": list(curve)}, "prunable": {"importance": prunable}}},
        },
        "importance": {"raw": {"enc_self": [list(s) for s in layers]}},
        "redundancy": {
            "kinds": {
                k: {"mean_js_bits": v, "twin_vs_loss_increase": {"spearman_rho": rho}, "groups": [list(g) for g in gs]}
                for k, v, gs in zip(kinds, js, groups)
            }
        },
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
    # fixed encoder heads 0 and 1 (cur in every layer): L1H0-L2H0 are copies by construction and not counted;
    # the learned L1H2 beside fixed L0H1 is
    fixed = {
        **analysis(groups=((("L1H0", "L2H0"), ("L0H1", "L1H2")),)),
        "fixed_heads": {"enc_self": {"0": "cur", "1": "prev"}},
    }
    assert C.specialisation(fixed)["near_duplicates"] == 1.0
    flat = C.specialisation(analysis(curve=(30.0, 30.0, 30.0), layers=((2.0, 1.0, 1.0),)))
    assert flat["kept_area"] == pytest.approx(1.0)
    p = [0.5, 0.25, 0.25]
    assert flat["evenness"] == pytest.approx(-sum(x * math.log(x) for x in p) / math.log(3))
    assert flat["importance_cv"] == pytest.approx(math.sqrt(2 / 9) / (4 / 3))  # sd of (2, 1, 1) / its mean


def test_comparisons_use_welch_and_holm_over_every_measure():
    groups = {
        "hd0 (base)": [C.specialisation(analysis(curve=(30.0, c, 0.0))) for c in (10.0, 11.0, 12.0)],
        "hd0.2": [C.specialisation(analysis(head_dropout=0.2, curve=(30.0, c, 0.0))) for c in (20.0, 22.0, 21.0)],
    }
    found = C.comparisons(groups, "hd0 (base)")
    area = next(c for c in found if c["measure"] == "kept_area")
    want = ttest_ind(area["values"], area["base_values"], equal_var=False).pvalue
    assert area["p"] == pytest.approx(want)
    tested = [c for c in found if c["p"] is not None]
    assert area["p_holm"] == pytest.approx(min(1.0, len(tested) * want))  # the only non-constant measure
    words = C.verdict_words(found)
    assert len(words) == 1 and words[0].startswith("hd0.2 against hd0 (base) (3 seeds vs 3 seeds): ")
    assert "a flatter pruning curve" in words[0] and "Larger than the seed spread after Holm" in words[0]


def test_one_seed_says_there_is_no_spread():
    groups = {
        "base": [C.specialisation(analysis())],
        "hd0.1": [C.specialisation(analysis(0.1, curve=(29.0, 20.0, 1.0)))],
    }
    words = C.verdict_words(C.comparisons(groups, "base"))
    assert "one seed in a cell: no spread, no test" in words[0] and "lower full-model BLEU" in words[0]
    assert "Nothing was tested: a seed spread needs two analysed seeds in each cell." in words[0]


def test_every_cell_is_compared_with_the_named_base_whatever_the_names_or_settings():
    """Cells, not head dropout: the base is the group named so, not the first, nor the smallest name or
    setting, and every other group is compared with it under its own name, in the given order."""
    groups = {
        "a-fixed4": [C.specialisation(analysis(curve=(30.0, 20.0, 0.0)))],
        "z-base": [C.specialisation(analysis(curve=(30.0, 10.0, 0.0)))],
        "m-fixed7": [C.specialisation(analysis(curve=(20.0, 5.0, 0.0)))],
    }
    found = C.comparisons(groups, "z-base")
    assert {c["base"] for c in found} == {"z-base"}
    assert [c["cell"] for c in found][:: len(C.MEASURES)] == ["a-fixed4", "m-fixed7"]
    words = C.verdict_words(found)
    assert [w.split(" (")[0] for w in words] == ["a-fixed4 against z-base", "m-fixed7 against z-base"]
    assert "a flatter pruning curve" in words[0] and "lower full-model BLEU" in words[1]


def write_runs(tmp_path, cells: dict[str, list[dict]]) -> dict[str, list]:
    """Each analysis as a run directory's analysis/analysis.json: {cell: run dirs}, as the report passes them."""
    groups = {}
    for name, analyses in cells.items():
        for a in analyses:
            d = tmp_path / f"run{sum(map(len, groups.values()))}"
            (d / "analysis").mkdir(parents=True)
            (d / "analysis" / "analysis.json").write_text(json.dumps(a))
            groups.setdefault(name, []).append(d)
    return groups


def test_report_section_tabulates_cells(tmp_path):
    # two cells with the same head dropout (0, as fixed_heads's cells): still two rows, one per cell
    groups = write_runs(
        tmp_path,
        {
            "cell-b (base)": [analysis(curve=(30.0, m, 0.0)) for m in (10.0, 12.0)],
            "cell-a": [analysis(curve=(30.0, 20.0, 0.0))],
        },
    )
    groups["no analysis"] = [tmp_path / "elsewhere"]  # a cell whose runs are not analysed: no row
    md = C.report_section(groups, tmp_path / "out", "fixed_heads", "cell-b (base)")
    assert md.startswith("## Head analysis: importance, pruning, redundancy by cell\n")
    assert (tmp_path / "out" / "fixed_heads_pruning.png").is_file()  # per sweep: reports share a folder
    rows = [line for line in md.splitlines() if line.startswith("| cell-")]
    # cell-b: areas (0.5 (30 + m) + 0.5 m) / 2 / 30 = 0.417 (m = 10) and 0.450 (m = 12): 43% ± 2%
    assert rows[0].startswith("| cell-b (base) | 2 | 30.00 ± 0.00 | 50% ± 0% | 43% ± 2% |")
    assert rows[1].startswith("| cell-a | 1 | 30.00 | 50% | 58% |") and len(rows) == 2
    assert "no analysis" not in md and "| cell | runs |" in md
    assert "- cell-a against cell-b (base) (1 seed vs 2 seeds): " in md
    assert "Spearman's ρ" in md and "+0.30 ± 0.00 (n = 3)" in md
    assert "Fixed and learned heads" not in md  # no run has fixed heads

    # the base not analysed (or no base): tabulated, not compared with whichever cell comes first
    del groups["cell-b (base)"]
    groups["cell-c"] = write_runs(tmp_path / "c", {"cell-c": [analysis(curve=(30.0, 5.0, 0.0))]})["cell-c"]
    md = C.report_section(groups, tmp_path / "out", "fixed_heads", "cell-b (base)")
    assert [line[:9] for line in md.splitlines() if line.startswith("| cell-")] == ["| cell-a ", "| cell-c "]
    assert " against " not in md
    assert "- No run of the base cell (cell-b (base)) is analysed: no cell is compared with it." in md
    alone = C.report_section({"cell-b (base)": groups["cell-a"]}, tmp_path / "out", "fixed_heads", "cell-b (base)")
    assert " against " not in alone and "No run of the base" not in alone  # the base alone: nothing to compare


# ----------------------------------------------------------------------------- fixed against learned heads


def head(layer, h, raw, distance, entropy, confidence, role="-", kind="enc_self"):
    return {
        "kind": kind,
        "layer": layer,
        "head": h,
        "importance_raw": raw,
        "importance": math.nan,
        "distance": distance,
        "entropy": entropy,
        "confidence": confidence,
        "role": role,
    }


def heads_run(fixed=True, shift=0.0):
    """2 layers of 4 encoder self-attention heads, heads 0-1 fixed (when `fixed`). Raw importance per layer:
    (1, 1, 2, 2) and (3, 3, 1, 1); `shift` moves the learned heads' distances."""
    raws = [(1.0, 1.0, 2.0, 2.0), (3.0, 3.0, 1.0, 1.0)]
    fixed_d, learned_d = (0.0, 1.0), (2.0, 4.0, 3.0, 5.0)
    heads = []
    for layer in (0, 1):
        norm = math.sqrt(sum(r * r for r in raws[layer]))
        for h in range(4):
            distance = fixed_d[h] if h < 2 else learned_d[2 * layer + h - 2] + shift
            heads.append(
                head(
                    layer,
                    h,
                    raws[layer][h],
                    distance,
                    entropy=0.1 if h < 2 else (1.0, 2.0, 1.5, 1.5)[2 * layer + h - 2],
                    confidence=0.9 if h < 2 else (0.4, 0.6, 0.5, 0.5)[2 * layer + h - 2],
                    role="positional" if h == 1 else "rare" if (layer, h) == (1, 3) else "-",
                )
            )
            heads[-1]["importance"] = raws[layer][h] / norm  # l2-normalised per layer, as analysis.json has it
    # other kinds are not counted: a decoder head with outlandish numbers, a cross head without a distance
    heads += [
        head(0, 0, 100.0, 50.0, 9.0, 0.01, "positional", kind="dec_self"),
        head(0, 0, 1.0, None, 1.0, 0.5, kind="cross"),
    ]
    return {
        "model": {"heads": 4},
        "roles": {"heads": heads},
        **({"fixed_heads": {"enc_self": {"0": "cur", "1": "prev"}}} if fixed else {}),
    }


def test_fixed_vs_learned_by_hand():
    sides = F.fixed_vs_learned(heads_run(), "enc_self")
    # importance share per layer: fixed 2 / 6 and 6 / 8, mean 0.5417 (not the kind's sum, 8 / 14 = 0.571)
    assert sides["fixed"]["importance_share"] == pytest.approx((2 / 6 + 6 / 8) / 2)
    assert sides["learned"]["importance_share"] == pytest.approx((4 / 6 + 2 / 8) / 2)
    assert sides["fixed"]["distance"] == pytest.approx(0.5) and sides["learned"]["distance"] == pytest.approx(3.5)
    assert (sides["fixed"]["entropy"], sides["learned"]["entropy"]) == pytest.approx((0.1, 1.5))
    assert (sides["fixed"]["confidence"], sides["learned"]["confidence"]) == pytest.approx((0.9, 0.5))
    # roles: head 1 positional in both layers (2 of 4 fixed heads), one rare learned head (1 of 4)
    assert (sides["fixed"]["with_role"], sides["learned"]["with_role"]) == pytest.approx((0.5, 0.25))
    base = F.fixed_vs_learned(heads_run(fixed=False), "enc_self")  # no fixed heads: all 8 are learned
    assert base["fixed"] is None and base["learned"]["importance_share"] == pytest.approx(1.0)
    assert base["learned"]["distance"] == pytest.approx((0 + 1 + 0 + 1 + 2 + 4 + 3 + 5) / 8)
    assert base["learned"]["with_role"] == pytest.approx(3 / 8)
    cross = F.fixed_vs_learned(heads_run(), "cross")  # no distance in cross-attention: nan, not a crash
    assert cross["fixed"] is None and math.isnan(cross["learned"]["distance"])


def test_fixed_vs_learned_table_and_words():
    assert F.fixed_vs_learned_lines({"base": [heads_run(fixed=False)]}, "base") == []  # no fixed heads: no table
    groups = {"base": [heads_run(fixed=False)], "fix2": [heads_run(), heads_run(shift=1.0)]}
    lines = F.fixed_vs_learned_lines(groups, "base")
    rows = [line for line in lines if line.startswith("| base") or line.startswith("| fix2")]
    assert rows == [
        "| base | encoder self-attention | learned | 4 of 4 | 1 | 100% | 2.00 | 0.80 | 0.70 | 38% |",
        # learned distance: 3.5 and 4.5 over the two seeds, 4.00 ± 0.71
        "| fix2 | encoder self-attention | fixed | 2 of 4 | 2 | 54% ± 0% | 0.50 ± 0.00 | 0.10 ± 0.00 | 0.90 ± 0.00 "
        "| 50% ± 0% |",
        "| fix2 | encoder self-attention | learned | 2 of 4 | 2 | 46% ± 0% | 4.00 ± 0.71 | 1.50 ± 0.00 | 0.50 ± 0.00 "
        "| 25% ± 0% |",
    ]
    words = [line for line in lines if line.startswith("- ")]
    assert words[0] == (
        "- encoder self-attention, 0 fixed of 4 (base, n = 1): its heads attend at mean distance "
        "2.00 tokens, entropy 0.80 nats, confidence 0.70, 38% with a role."
    )
    assert words[1].startswith(
        "- encoder self-attention, 2 fixed of 4 (fix2, n = 2): the fixed heads carry 54% of "
        "the importance (50% of the heads); the learned heads attend at mean distance 4.00 "
        "tokens, entropy 1.50 nats, confidence 0.50, 25% with a role, the learned heads of "
        "base at mean distance 2.00 tokens"
    )
    alone = F.fixed_vs_learned_lines({"fix2": groups["fix2"]}, None)  # no base analysed: nothing beside them
    assert alone[-2].endswith("confidence 0.50, 25% with a role.") and "of base" not in alone[-2]


def test_report_section_has_the_fixed_table_when_a_run_has_fixed_heads(tmp_path):
    groups = write_runs(
        tmp_path, {"base": [{**analysis(), **heads_run(fixed=False)}], "fix2": [{**analysis(), **heads_run()}]}
    )
    md = C.report_section(groups, tmp_path / "out", "fixed_heads", "base")
    assert "**Fixed and learned heads.**" in md and "| fix2 | encoder self-attention | fixed | 2 of 4 | 1 | 54% |" in md
