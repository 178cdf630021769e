"""The rank bound measure (analysis/rank.py): effective rank against numpy's SVD, the logit rank of a map
built from known low-rank logits, the bound d_k on a real model's heads, entropy against the roles code."""

import json

import numpy as np
import pytest
import torch

from conftest import copy_run_dir
from headsweep.analysis import rank as K
from headsweep.analysis.roles import attention_stats
from headsweep.model import Transformer, TransformerConfig, attention_switches


def numpy_effective_rank(m: np.ndarray) -> float:
    s = np.linalg.svd(m, compute_uv=False)
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def test_effective_rank_is_roy_and_vetterlis_from_numpys_singular_values():
    rng = np.random.default_rng(0)
    mats = [rng.normal(size=(7, 5)), rng.normal(size=(6, 1)) @ rng.normal(size=(1, 6)), np.eye(9)]
    got = [float(K.effective_rank(torch.tensor(m))) for m in mats]
    assert got == pytest.approx([numpy_effective_rank(m) for m in mats], rel=1e-9)
    assert got[1] == pytest.approx(1.0) and got[2] == pytest.approx(9.0)  # one direction; nine equal ones


def test_logit_rank_is_the_rank_of_the_centred_logits_and_padding_is_left_out():
    """Softmax over logits S = Q K^T of rank 2 (n = 6 real keys, one padded): the measure is numpy's effective
    rank of S with each row centred, so at most 2; the map itself has more."""
    g = torch.Generator().manual_seed(3)
    q, k = (
        torch.randn(1, 1, 6, 2, generator=g, dtype=torch.float64),
        torch.randn(1, 1, 7, 2, generator=g, dtype=torch.float64),
    )
    logits = 3 * q @ k.transpose(-1, -2)  # (1, 1, 6, 7)
    key_valid = torch.tensor([[True] * 6 + [False]])
    w = logits.masked_fill(~key_valid[:, None, None, :], float("-inf")).softmax(-1)
    got = K.head_measures(w, torch.ones(1, 6, dtype=torch.bool), key_valid)
    s = logits[0, 0, :, :6].numpy()
    assert float(got["logit_rank"][0, 0]) == pytest.approx(numpy_effective_rank(s - s.mean(1, keepdims=True)), rel=1e-6)
    assert float(got["logit_rank"][0, 0]) <= 2 + 1e-9 < float(got["map_rank"][0, 0])
    a = w[0, 0, :, :6].numpy()
    assert float(got["entropy"][0, 0]) == pytest.approx(float(-(a * np.log(a)).sum(1).mean()), rel=1e-9)
    assert "logit_rank" not in K.head_measures(w, torch.ones(1, 6, dtype=torch.bool), key_valid, causal=True)


def test_a_real_models_heads_stay_within_d_k_and_entropy_agrees_with_the_roles_code():
    torch.manual_seed(0)
    net = Transformer(
        TransformerConfig(vocab_size=23, d_model=16, n_layers=2, heads=4, d_k=2, d_v=4, d_ff=24, dropout=0.0)
    )
    net = net.double().eval()
    g = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(4, 23, (3, 9), generator=g), torch.randint(4, 23, (3, 8), generator=g)
    src[0, -3:] = 0
    tgt[0, -2:] = 0
    got = K.measure_ranks(net, [{"src": src, "tgt_in": tgt}], pad_id=0)
    for kind in ("enc_self", "cross"):
        ranks = [x for layer in got[kind]["layers"] for x in layer["logit_rank"]]
        assert max(ranks) <= 2 + 1e-6 and min(ranks) > 1  # d_k = 2 binds: 6 to 9 keys
    assert got["enc_self"]["keys"] == pytest.approx((6 + 9 + 9) / 3)
    assert got["cross"]["uniform_entropy"] == pytest.approx((np.log(6) + 2 * np.log(9)) / 3)
    with attention_switches(net, record=True), torch.no_grad():
        net.encode(src)
        w = net.attention_layers("enc_self")[1].last_weights.numpy()
    ok = src.ne(0).numpy()
    by_hand = [  # per example: the mean over its real queries of the entropy over its real keys; then over examples
        np.mean([(-(a * np.log(a)).sum(-1)).mean() for a in (w[b, h][ok[b]][:, ok[b]] for b in range(3))])
        for h in range(4)
    ]
    assert got["enc_self"]["layers"][1]["entropy"] == pytest.approx(by_hand, rel=1e-9)
    with attention_switches(net, record=True), torch.no_grad():  # the roles code: the same, per token
        net.encode(src)
        roles = attention_stats(
            net.attention_layers("enc_self")[1].last_weights, src.ne(0), src.ne(0), self_attention=True
        )
    per_token = (roles["entropy"][0] / roles["entropy"][1]).tolist()
    assert per_token != pytest.approx(by_hand, rel=1e-3)  # the padded first example weighs less per token
    assert np.mean(per_token) == pytest.approx(np.mean(by_hand), rel=0.05)


def test_the_command_writes_the_record_beside_the_run(tiny_run, tmp_path, capsys):
    run = copy_run_dir(tiny_run, tmp_path / "run")
    K.main(["--ckpt", str(run)])
    record = json.loads((run / K.FILE).read_text())
    cfg = json.loads((run / "results.json").read_text())["config"]
    assert (record["heads"], record["join"]) == (cfg["model"]["heads"], cfg["data"]["join"])
    assert record["examples"] == cfg["data"]["limit_eval"]
    bound = record["d_k"]
    assert all(x <= bound + 1e-6 for layer in record["kinds"]["enc_self"]["layers"] for x in layer["logit_rank"])
    assert f"(bound d_k = {bound})" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="error: "):
        K.main(["--ckpt", str(tmp_path / "nothing")])


def test_a_sweeps_finished_jobs_are_measured_once_into_their_stored_runs(tiny_run, tmp_path, capsys):
    """make ranks: a finished job's measure is copied into its stored run; a job still running (no complete
    results.json) and a job with no stored run are skipped; a second pass writes nothing."""
    multirun, results = tmp_path / "multirun", tmp_path / "results"
    done = copy_run_dir(tiny_run, multirun / "lengths" / "h8-join8-s1")
    running = copy_run_dir(tiny_run, multirun / "lengths" / "h8-join8-s2")
    record = json.loads((running / "results.json").read_text())
    (running / "results.json").write_text(json.dumps(record | {"status": "running"}))
    copy_run_dir(tiny_run, multirun / "lengths" / "h32-join8-s1")  # finished, never exported
    (results / "lengths" / "h8-join8-s1").mkdir(parents=True)
    (results / "lengths" / "h8-join8-s2").mkdir(parents=True)
    args = ["--sweep", "lengths", "--multirun", str(multirun), "--results", str(results)]
    K.main(args)
    stored = results / "lengths" / "h8-join8-s1" / K.FILE
    assert stored.read_bytes() == (done / K.FILE).read_bytes()
    assert not (results / "lengths" / "h8-join8-s2" / K.FILE).exists() and not (running / K.FILE).exists()
    assert capsys.readouterr().out == f"{stored}: written\n"
    K.main(args)
    assert capsys.readouterr().out == ""
    with pytest.raises(SystemExit, match="no jobs of sweep 'nothing'"):
        K.main(["--sweep", "nothing", "--multirun", str(multirun)])
