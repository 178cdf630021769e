"""The cross-sweep view: the least-squares fit recovers known coefficients, a copied run counts once,
other changes are left out, and sweeps of different budgets stop it with one line."""

import math

import numpy as np
import pytest

from conftest import fake_run
from headsweep.reports.pages import explain
from headsweep.reports.pages import explain_data as D


def bleu_of(h, d_k, d_model):  # the truth the fit must recover, plus a seed effect that averages out
    return 20 + 0.5 * math.log2(h) + 2.0 * math.log2(d_k) - 1.0 * math.log2(d_model)


def test_fit_recovers_the_coefficients_and_counts_a_copy_once(tmp_path):
    cells = [(8, 32, 256), (1, 32, 256), (32, 32, 256), (8, 8, 256), (8, 64, 128), (2, 16, 128), (4, 128, 512)]
    for h, dk, dm in cells:
        for seed, noise in ((1, -0.3), (2, 0.3)):
            fake_run(
                tmp_path,
                "mixed",
                f"h{h}-dk{dk}-dm{dm}-s{seed}",
                seed,
                bleu_of(h, dk, dm) + noise,
                [f"model.heads={h}", f"model.d_k={dk}", f"model.d_v={dk}", f"model.d_model={dm}"],
            )
    fake_run(
        tmp_path,
        "copy",
        "h8-dk32-dv32-s1",
        1,
        bleu_of(8, 32, 256) - 0.3,
        ["model.heads=8", "model.d_k=32", "model.d_v=32"],
    )
    fake_run(tmp_path, "copy", "dropout-s1", 1, 10.0, ["model.head_dropout=0.1"])
    fake_run(tmp_path, "copy", "kv2-s1", 1, 10.0, ["model.kv_heads=2"])
    fake_run(
        tmp_path, "copy", "h8-lr-s1", 1, 10.0, ["model.heads=8", "model.d_k=32", "model.d_v=32", "module.peak_lr=5e-4"]
    )  # not the same run: another lr
    points, left_out = D.collect(tmp_path, ["mixed", "copy"])
    assert len(points) == 14
    assert any("copy/h8-dk32-dv32-s1: the same run as mixed/" in line for line in left_out)
    assert any("copy/dropout-s1: model.head_dropout = 0.1" in line for line in left_out)
    assert any("copy/kv2-s1: model.kv_heads = 2 (not h)" in line for line in left_out)
    assert "copy/h8-lr-s1: module.peak_lr = 0.0005 (the width's default 0.002)" in left_out
    terms = explain.fit(points)["terms"]
    assert terms["log2 h"]["coef"] == pytest.approx(0.5, abs=1e-6)
    assert terms["log2 d_k"]["coef"] == pytest.approx(2.0, abs=1e-6)
    assert terms["log2 d_model"]["coef"] == pytest.approx(-1.0, abs=1e-6)
    assert terms["log2 d_k"]["lo"] < 2.0 < terms["log2 d_k"]["hi"]
    path = explain.write(tmp_path, ["mixed", "copy"], tmp_path / "out")
    text = path.read_text()
    assert "| log2 d_k | +2.00 |" in text and (tmp_path / "out" / "explain-bleu-dk.png").stat().st_size > 0


def test_sweeps_of_different_budgets_are_refused_with_one_line(tmp_path, capsys):
    fake_run(tmp_path, "a", "h8-s1", 1, 30.0)
    fake_run(tmp_path, "b", "h8-s1", 1, 31.0, ["trainer.max_steps=2300"])
    assert explain.main(["--sweeps", "a,b", "--root", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different budgets: 1150 steps (a/h8-s1), 2300 steps (b/h8-s1)" in err


def test_best_h_at_each_width_is_row_a_within_one_precision(tmp_path):
    runs = {  # (h, d_model): per-seed BLEU; d_k = d_model / h (row A)
        (1, 128): [32.0, 32.4, 32.2],
        (2, 128): [33.0, 33.4, 33.2],
        (8, 128): [30.0, 30.2, 30.4],
        (8, 512): [36.0, 36.2],
        (32, 512): [35.9, 36.1],
    }
    for (h, dm), values in runs.items():
        for seed, bleu in enumerate(values, start=1):
            fake_run(
                tmp_path,
                "w",
                f"h{h}-dm{dm}-s{seed}",
                seed,
                bleu,
                [f"model.heads={h}", f"model.d_model={dm}", f"model.d_ff={4 * dm}"],
            )
    # not row A (d_k fixed at 32): in the fit, not in the best-h table
    fake_run(
        tmp_path,
        "w",
        "h16-dk32-dm128-s1",
        1,
        40.0,
        ["model.heads=16", "model.d_k=32", "model.d_v=32", "model.d_model=128", "model.d_ff=512"],
    )
    points, _ = D.collect(tmp_path, ["w"])
    rows = {r["d_model"]: r for r in explain.best_h_by_width(points)}
    narrow, wide = rows[128], rows[512]
    assert narrow["best"] == 2 and sorted(narrow["cells"]) == [1, 2, 8]
    assert narrow["cells"][2]["mean"] == pytest.approx(33.2) and narrow["cells"][2]["n"] == 3
    # h = 1 (32.2) and 8 (30.2) sit more than 4 seed-sds below h = 2: Welch tells both apart from the best
    assert narrow["level"] == [] and narrow["p_vs_best"][1] < 0.05 and narrow["p_vs_best"][8] < 0.05
    assert wide["best"] == 8 and wide["level"] == [32]  # 0.1 apart with sd 0.14: level
    text = explain.write(tmp_path, ["w"], tmp_path / "out").read_text()
    assert "| 128 | 32-true | 32.20 ± 0.20 (3)<br>p " in text and "| **2** (64) | none |" in text
    assert "| **8** (64) | 32 |" in text
    assert '<figure><img src="explain-best-h.png" alt="Figure 2. Row A at each width: test BLEU against h' in text
    assert (tmp_path / "out" / "explain-best-h.png").stat().st_size > 0


def test_leaving_one_cell_out_finds_the_cell_that_turns_the_fit_over():
    # exact truth b_h = 0.5, b_dk = 2.0 on every cell but one outlier (h 32, d_k 32: 12 BLEU low, two seeds)
    cells = [(8, 32), (1, 32), (2, 32), (16, 16), (32, 8), (8, 8), (8, 16), (32, 32)]
    points = [
        D.Point(
            "s",
            f"h{h}-dk{dk}-s{seed}",
            h,
            dk,
            dk,
            256,
            "32-true",
            bleu_of(h, dk, 256) - (12.0 if (h, dk) == (32, 32) else 0.0) + noise,
        )
        for h, dk in cells
        for seed, noise in ((1, -0.2), (2, 0.2))
    ]
    moves = explain.fit_without_each_cell(points)
    h = moves["log2 h"]
    assert h["coef"] < 0 < h["high"]["coef"]  # one cell turns the head-count term over
    assert h["high_cell"] == (32, 32, 32, 256, "32-true") and h["high"]["coef"] == pytest.approx(0.5, abs=1e-6)
    # the low end is an ordinary least-squares fit without its cell (numpy's, independently)
    rest = [p for p in points if (p.h, p.d_k) != h["low_cell"][:2]]
    X = np.column_stack([np.ones(len(rest)), [math.log2(p.h) for p in rest], [math.log2(p.d_k) for p in rest]])
    beta = np.linalg.lstsq(X, [p.bleu for p in rest], rcond=None)[0]
    assert h["low"]["coef"] == pytest.approx(beta[1])
    lines = explain.influence_lines(moves)
    assert any(
        line.startswith("| log2 h | ") and "(h 32, d_k 32, d_v 32, d_model 256, 32-true)" in line for line in lines
    )


def test_by_default_every_sweep_at_the_ablation_budget_is_compared_and_the_others_are_named(
    tmp_path, capsys, monkeypatch
):
    for h, dk, dm in [(8, 32, 256), (1, 32, 256), (8, 8, 256), (8, 64, 128), (4, 128, 512)]:
        for seed in (1, 2):
            fake_run(
                tmp_path,
                "a",
                f"h{h}-dk{dk}-dm{dm}-s{seed}",
                seed,
                bleu_of(h, dk, dm) + seed / 10,
                [f"model.heads={h}", f"model.d_k={dk}", f"model.d_v={dk}", f"model.d_model={dm}"],
            )
    fake_run(tmp_path, "long", "h8-s1", 1, 34.0, ["trainer.max_steps=2300"])  # a 2x-budget sweep
    reads = []
    monkeypatch.setattr(D, "load_runs", lambda d, load=D.load_runs: reads.append(d.name) or load(d))
    assert explain.main(["--root", str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    assert "left out, not at the ablation budget's 1150 steps: long (2300 steps)" in capsys.readouterr().out
    text = (tmp_path / "out" / "explain.md").read_text()
    assert "# Heads or head width? Every cell at 1150 steps\n" in text and "\n\nSweeps read (1): a." in text
    assert sorted(reads) == ["a", "long"]  # each sweep's results read once (results/ holds hundreds of runs)


def test_the_fit_takes_one_protocol_the_most_common_unless_init_names_another(tmp_path, capsys):
    """Xavier's init scale moves with h (issue 42), so a fit over both protocols would blend two answers: the
    view takes the protocol most runs share, --init the other, and the rest are named as left out."""
    xavier = ["model.init=xavier", "module.decay_by=steps_or_time"]
    for h, bleu in ((8, 34.0), (16, 33.0), (32, 27.0)):
        for seed in (1, 2):
            fake_run(
                tmp_path,
                "old",
                f"h{h}-s{seed}",
                seed,
                bleu + seed / 10,
                [f"model.heads={h}", "model.d_k=32", "model.d_v=32", *xavier],
            )
    for h, bleu in ((8, 34.0), (16, 31.0), (32, 23.0)):
        fake_run(tmp_path, "new", f"h{h}-s1", 1, bleu, [f"model.heads={h}", "model.d_k=32", "model.d_v=32"])
    points, left_out = D.collect(tmp_path, ["old", "new"])
    assert {p.sweep for p in points} == {"old"} and len(points) == 6
    assert "new/h32-s1: model.init = 'fan_in' (default 'xavier')" in left_out
    out = tmp_path / "out"
    assert explain.main(["--root", str(tmp_path), "--out", str(out), "--init", "fan_in"]) == 0
    text = (out / "explain.md").read_text()
    assert "3 runs in 3 cells, every one trained under model.init fan_in, module.decay_by steps (--init fan_in" in text
    assert "- old/h8-s1: model.init = 'xavier' (default 'fan_in')" in text
    assert explain.main(["--root", str(tmp_path), "--out", str(out), "--init", "xavier"]) == 0
    assert "6 runs in 3 cells, every one trained under model.init xavier" in (out / "explain.md").read_text()
