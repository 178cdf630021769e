"""The cross-sweep view: the least-squares fit recovers known coefficients, a copied run counts once,
other changes are left out, and sweeps of different budgets stop it with one line."""

import math

import pytest

from headsweep.experiments import explain

from conftest import fake_run


def bleu_of(h, d_k, d_model):  # the truth the fit must recover, plus a seed effect that averages out
    return 20 + 0.5 * math.log2(h) + 2.0 * math.log2(d_k) - 1.0 * math.log2(d_model)


def test_fit_recovers_the_coefficients_and_counts_a_copy_once(tmp_path):
    cells = [(8, 32, 256), (1, 32, 256), (32, 32, 256), (8, 8, 256), (8, 64, 128), (2, 16, 128), (4, 128, 512)]
    for h, dk, dm in cells:
        for seed, noise in ((1, -0.3), (2, 0.3)):
            fake_run(tmp_path, "mixed", f"h{h}-dk{dk}-dm{dm}-s{seed}", seed, bleu_of(h, dk, dm) + noise,
                     [f"model.heads={h}", f"model.d_k={dk}", f"model.d_v={dk}", f"model.d_model={dm}"])
    fake_run(tmp_path, "copy", "h8-dk32-dv32-s1", 1, bleu_of(8, 32, 256) - 0.3,
             ["model.heads=8", "model.d_k=32", "model.d_v=32"])
    fake_run(tmp_path, "copy", "dropout-s1", 1, 10.0, ["model.head_dropout=0.1"])
    fake_run(tmp_path, "copy", "kv2-s1", 1, 10.0, ["model.kv_heads=2"])
    points, left_out = explain.collect(tmp_path, ["mixed", "copy"])
    assert len(points) == 14
    assert any("copy/h8-dk32-dv32-s1: the same run as mixed/" in line for line in left_out)
    assert any("copy/dropout-s1: model.head_dropout = 0.1" in line for line in left_out)
    assert any("copy/kv2-s1: model.kv_heads = 2 (not h)" in line for line in left_out)
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
