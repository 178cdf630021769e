"""Head importance, pruning, roles and head dropout (Michel et al. 2019, Voita et al. 2019), and
`python -m headsweep.analysis.analyze` on a tiny checkpoint."""

import copy
import json
import math
from pathlib import Path

import pytest
import torch

from headsweep.analysis import analyze as A
from headsweep.analysis.ablation import MAX_LEN_FACTOR, Evaluator, plan_pruning, prunable_fraction
from headsweep.analysis.importance import (
    fractions,
    gate_gradients,
    gated,
    normalise_per_layer,
    pruned_at,
    pruning_order,
    sentence_losses,
)
from headsweep.analysis.roles import attention_stats, role_label
from headsweep.analysis.settings import AnalysisSettings
from headsweep.data import make_batches
from headsweep.model import ATTENTION_KINDS, Transformer, TransformerConfig
from headsweep.model.attention import AttentionConfig, MultiHeadAttention
from headsweep.store.pack import read_analysis


def tiny_net(**kw) -> Transformer:
    torch.manual_seed(0)
    cfg = dict(vocab_size=23, d_model=16, n_layers=2, heads=4, d_k=3, d_v=5, d_ff=24, dropout=0.0) | kw
    return Transformer(TransformerConfig(**cfg)).double().eval()


def tiny_batch(B: int = 3, S: int = 7, T: int = 6) -> dict:
    g = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(4, 23, (B, S), generator=g), torch.randint(4, 23, (B, T + 1), generator=g)
    src[0, -2:] = 0  # padding in the first sentence of each side
    tgt[0, -2:] = 0
    return {"src": src, "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:]}


# ----------------------------------------------------------------------------- importance


def test_gate_gradient_equals_finite_difference():
    """dL(x)/dxi_h from one backward pass equals (L(xi + d e_h) - L(xi - d e_h)) / 2d, sentence by sentence."""
    net, batch = tiny_net(), tiny_batch()
    grads = gate_gradients(net, batch, pad_id=0)
    assert {k: tuple(v.shape) for k, v in grads.items()} == {k: (3, 2, 4) for k in ATTENTION_KINDS}
    d = 1e-6
    for kind, layer, h in [("enc_self", 0, 1), ("dec_self", 1, 3), ("cross", 0, 2), ("cross", 1, 0)]:
        m = net.attention_layers(kind)[layer]
        losses = []
        for sign in (1, -1):
            m.gate = torch.ones(4, dtype=torch.float64)
            m.gate[h] += sign * d
            with torch.no_grad():
                losses.append(sentence_losses(net, batch, pad_id=0))
        m.gate = None
        fd = (losses[0] - losses[1]) / (2 * d)
        torch.testing.assert_close(grads[kind][:, layer, h], fd, rtol=1e-5, atol=1e-7)
        assert fd.abs().max() > 1e-4  # a real signal, not two zeros agreeing


def test_zero_gate_equals_the_weights_zeroed_model():
    net, batch = tiny_net(), tiny_batch()
    zeroed = copy.deepcopy(net)
    pruned = [("enc_self", 1, 2), ("cross", 0, 0), ("dec_self", 0, 3)]
    for kind, layer, h in pruned:  # head h's value columns of W^O: it can no longer reach the output
        m = zeroed.attention_layers(kind)[layer]
        with torch.no_grad():
            m.out_proj.weight[:, h * m.d_v : (h + 1) * m.d_v] = 0
    with torch.no_grad(), gated(net, pruned):
        gated_logits = net(batch["src"], batch["tgt_in"])
    with torch.no_grad():
        expected, full = zeroed(batch["src"], batch["tgt_in"]), net(batch["src"], batch["tgt_in"])
    torch.testing.assert_close(gated_logits, expected)
    assert not torch.allclose(full, expected)  # the heads mattered
    assert all(m.gate is None for k in ATTENTION_KINDS for m in net.attention_layers(k))  # gates restored


def test_pruning_order_follows_importance():
    scores = {
        "enc_self": torch.tensor([[0.5, 0.1], [0.9, 0.3]]),
        "dec_self": torch.tensor([[0.2, 0.8]]),
        "cross": torch.tensor([[0.05, 0.7]]),
    }
    order = pruning_order(scores)
    values = [float(scores[k][layer, h]) for k, layer, h in order]
    assert values == sorted(values) and order[0] == ("cross", 0, 0) and order[-1] == ("enc_self", 1, 0)
    assert pruning_order(scores, ["enc_self"]) == [
        ("enc_self", 0, 1),
        ("enc_self", 1, 1),
        ("enc_self", 0, 0),
        ("enc_self", 1, 0),
    ]
    assert pruned_at(order, 0.0) == [] and pruned_at(order, 1.0) == order and pruned_at(order, 0.5) == order[:4]
    assert fractions(0.1) == pytest.approx([i / 10 for i in range(11)]) and fractions(0.3)[-1] == 1.0
    norm = normalise_per_layer(scores)
    torch.testing.assert_close(norm["enc_self"].norm(dim=-1), torch.ones(2))
    heads = sorted(order)  # (kind, layer, head) order, as all_heads lists them
    plan = plan_pruning(heads, norm, fractions(0.5), random_orders=2, seed=0)
    assert plan["all"]["importance"] == pruning_order(norm)
    assert all(sorted(o) == heads for o in plan["all"]["random"]) and plan["all"]["random"][0] != heads
    assert plan["cross"]["importance"] == [("cross", 0, 0), ("cross", 0, 1)]


def test_prunable_fraction_stops_at_the_first_drop():
    grid = [0.0, 0.25, 0.5, 0.75, 1.0]
    assert prunable_fraction(grid, [30, 29.5, 28.0, 29.5, 5], 30, 1.0) == 0.25  # not 0.75: the first drop
    assert prunable_fraction(grid, [30, 30, 30, 30, 30], 30, 1.0) == 1.0


def test_loss_ablation_matches_the_gated_models_own_loss_and_its_paired_error():
    """LossEvaluator's single-head losses equal cross-entropy of the model with that gate set by hand (the
    encoder's output is reused for decoder heads: a wrong reuse would hide an encoder head's effect), over
    several batches put back in sentence order; its standard error is the paired one over sentences."""
    import torch.nn.functional as F

    from headsweep.analysis.ablation import LossEvaluator

    net = tiny_net()
    g = torch.Generator().manual_seed(2)
    src = [torch.randint(4, 23, (int(n),), generator=g).tolist() for n in torch.randint(3, 9, (11,), generator=g)]
    tgt = [torch.randint(4, 23, (int(n),), generator=g).tolist() for n in torch.randint(2, 8, (11,), generator=g)]
    batches = make_batches(src, tgt, max_tokens=30)
    assert len(batches) > 2
    ev = LossEvaluator(net, batches, pad_id=0)

    def by_hand(head):  # summed NLL per sentence, in the order of src
        out = torch.zeros(len(src), dtype=torch.float64)
        m = net.attention_layers(head[0])[head[1]] if head else None
        if m is not None:
            m.gate = torch.ones(m.heads, dtype=torch.float64)
            m.gate[head[2]] = 0
        with torch.no_grad():
            for b in batches:
                logits = net(b["src"], b["tgt_in"])
                nll = F.cross_entropy(logits.transpose(1, 2), b["tgt_out"], ignore_index=0, reduction="none")
                out[b["index"]] = nll.sum(1)
        if m is not None:
            m.gate = None
        return out

    assert ev.tokens.sum() == sum(int(b["tgt_out"].ne(0).sum()) for b in batches)
    full = by_hand(None)
    assert ev([]) == {
        "loss": pytest.approx(float(full.sum() / ev.tokens.sum())),
        "delta_loss": 0.0,
        "delta_loss_se": 0.0,
    }
    for head in [("enc_self", 0, 1), ("enc_self", 1, 3), ("dec_self", 1, 2), ("cross", 0, 0)]:
        d = by_hand(head) - full
        delta = float(d.sum() / ev.tokens.sum())
        se = float(torch.std(d - delta * ev.tokens) * len(src) ** 0.5 / ev.tokens.sum())
        r = ev([head])
        assert abs(delta) > 1e-4, head  # removing the head changes the loss: the check has teeth
        assert r["delta_loss"] == pytest.approx(delta, rel=1e-9) and r["delta_loss_se"] == pytest.approx(se, rel=1e-9)
    assert ev.forwards == 5  # memoised: asking again runs nothing
    ev([("cross", 0, 0)])
    assert ev.forwards == 5


# ----------------------------------------------------------------------------- roles


def test_a_shift_by_one_head_is_fully_positional():
    T = 6
    prev = torch.zeros(1, 1, T, T)
    prev[0, 0, 0, 0] = 1.0  # the first token has no previous one: it looks at itself
    for i in range(1, T):
        prev[0, 0, i, i - 1] = 1.0
    nxt = torch.zeros(1, 1, T, T)
    for i in range(T - 1):
        nxt[0, 0, i, i + 1] = 1.0
    nxt[0, 0, T - 1, T - 1] = 1.0
    valid = torch.ones(1, T, dtype=torch.bool)
    s = attention_stats(torch.cat([prev, nxt], 1), valid, valid, self_attention=True)
    share = {m: (total / count).tolist() for m, (total, count) in s.items()}
    assert share["prev"] == [1.0, 0.0] and share["next"] == [0.0, 1.0]
    assert share["confidence"] == [1.0, 1.0] and share["entropy"] == [0.0, 0.0]
    assert role_label(1.0, 0.0, None, 0.9, 0.5) == "positional (prev)" and role_label(0.5, 0.2, 0.1, 0.9, 0.5) == "-"


def test_a_uniform_head_has_confidence_one_over_t_and_maximal_entropy():
    T = 5
    w = torch.full((2, 1, T, T), 1.0 / T)
    valid = torch.ones(2, T, dtype=torch.bool)
    s = attention_stats(w, valid, valid, self_attention=True)
    conf, n = s["confidence"]
    ent, _ = s["entropy"]
    assert float(conf / n) == pytest.approx(1 / T) and float(ent / n) == pytest.approx(math.log(T))


def test_rare_word_share_and_padding_excluded():
    # Keys: token ids [5, 6, 7, pad]; id 7 is the rarest. Head 0 always looks at id 7, head 1 at id 5.
    ids = torch.tensor([[5, 6, 7, 0]])
    freq = torch.zeros(10)
    freq[5], freq[6], freq[7] = 100, 50, 2
    w = torch.zeros(1, 2, 4, 4)
    w[0, 0, :, 2], w[0, 1, :, 0] = 1.0, 1.0
    valid = ids.ne(0)
    s = attention_stats(w, valid, valid, self_attention=False, key_ids=ids, key_freq=freq)
    total, count = s["rare"]
    assert int(count) == 3 and (total / count).tolist() == [1.0, 0.0]  # the padded query is not counted
    assert "prev" not in s  # positional roles are defined for self-attention only


# ----------------------------------------------------------------------------- head dropout


def test_head_dropout_zero_and_evaluation_change_nothing():
    torch.manual_seed(0)
    x = torch.randn(4, 5, 16)
    plain = MultiHeadAttention(AttentionConfig(16, 4, dropout=0.0))
    dropped = MultiHeadAttention(AttentionConfig(16, 4, dropout=0.0, head_dropout=0.5))
    dropped.load_state_dict(plain.state_dict())
    zero = MultiHeadAttention(AttentionConfig(16, 4, dropout=0.0, head_dropout=0.0)).train()
    zero.load_state_dict(plain.state_dict())
    expected = plain.eval()(x)[0]
    torch.testing.assert_close(zero(x)[0], expected)  # p = 0, training: no dropout
    torch.testing.assert_close(dropped.eval()(x)[0], expected)  # evaluation: nothing dropped
    assert not torch.allclose(dropped.train()(x)[0], expected)  # training with p > 0 does drop


def test_head_dropout_drops_whole_heads_per_sentence_and_keeps_the_expectation():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8)
    m = MultiHeadAttention(AttentionConfig(8, 4, dropout=0.0, head_dropout=0.25))
    with torch.no_grad():
        expected = m.eval()(x)[0]
        m.train()
        gates = []
        m.out_proj.register_forward_pre_hook(lambda mod, args: gates.append(args[0]))
        # 4,000 draws as one batch of 4,000 copies of the 2 sentences: heads are drawn per sentence
        outs = m(x.repeat(4000, 1, 1))[0].view(4000, 2, 3, 8)
        m.eval()(x)
    heads = gates[0].view(4000, 2, 3, 4, 2).transpose(2, 3)  # (sample, B, h, T, d_v): W^O's input
    full = gates[1].view(2, 3, 4, 2).transpose(1, 2)  # the same at evaluation: no head dropped
    dropped = heads.abs().amax((-1, -2)).eq(0)  # (sample, B, h): a whole head, every position
    kept = torch.isclose(heads, full / 0.75, atol=1e-6).all(-1).all(-1)  # rescaled by 1 / (1 - p)
    assert (dropped ^ kept).all()
    assert abs(float(dropped.float().mean()) - 0.25) < 0.02
    assert (dropped[:, 0] != dropped[:, 1]).any()  # drawn per sentence, not once per batch
    torch.testing.assert_close(outs.mean(0), expected, atol=0.05, rtol=0)


# ----------------------------------------------------------------------------- the whole analysis


def test_analyze_writes_every_file(run_copy, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    tiny_run = run_copy  # the session's run (2 heads a layer, 40 val sentences), copied without its W&B files
    A.main(
        [
            "--ckpt",
            str(tiny_run),
            "--max-sentences",
            "6",
            "--random-orders",
            "2",
            "--step",
            "0.5",
            "--sentences",
            "1",
            "ein Mann fährt Fahrrad .",
        ]
    )
    out = tiny_run / "analysis"
    a = json.loads((out / "analysis.json").read_text())
    files = [out / f for f in a["files"].values()]
    files += [out / f for m in a["attention_maps"] for f in m["files"].values()]
    assert len(a["attention_maps"]) == 2 and len(files) == 7 + 2 * 3
    assert all(p.is_file() and p.stat().st_size > 0 for p in files), [p for p in files if not p.is_file()]
    assert len(list((tiny_run / "wandb").glob("offline-run-*"))) == 1, "no W&B offline run"  # the copy had none
    n_heads = 3 * 1 * 2  # kinds x layers x heads of model=tiny (1 layer) with heads=2
    assert len(a["single_head"]) == len(a["roles"]["heads"]) == n_heads
    # Single heads are scored by loss over the split, not decoded; with 2 heads a layer, keeping the best head
    # removes one head, a set the single-head pass already measured: no extra loss pass for it.
    assert all("bleu" not in r and r["delta_loss_se"] >= 0 for r in a["single_head"])
    assert a["cost"]["loss_passes"] == 1 + n_heads and a["settings"]["sentences_loss"] == 40
    assert all("bleu" in r and "delta_loss_se" in r for r in a["best_head_only"])
    # Removing nothing is the full model: the first point of every curve is the full BLEU.
    for pool in a["pruning"]["pools"].values():
        assert pool["importance"]["bleu"][0] == a["full"]["bleu"] and pool["n_removed"][0] == 0
    assert a["pruning"]["pools"]["all"]["n_removed"] == [0, 3, 6]
    drops = [r["bleu_drop_half"] for r in a["kinds"]]  # which kind matters most: most sensitive first
    assert sorted(r["kind"] for r in a["kinds"]) == sorted(ATTENTION_KINDS) and drops == sorted(drops, reverse=True)
    assert drops[0] == a["full"]["bleu"] - a["pruning"]["pools"][a["kinds"][0]["kind"]]["importance"]["bleu"][1]
    assert "normalised by" in capsys.readouterr().out or "l2" in (out / "analysis.md").read_text()
    # one row per (kind, layer) with role shares summing to 1; a JS matrix per kind over its 2 heads
    assert [(r["kind"], r["layer"]) for r in a["layer_roles"]] == [(k, 0) for k in ATTENTION_KINDS]
    assert all(abs(r["positional"] + r["rare"] + r["none"] - 1) < 1e-9 for r in a["layer_roles"])
    assert all(len(k["js_bits"]) == 2 and k["js_bits"][0][0] == 0 for k in a["redundancy"]["kinds"].values())
    assert "2 x its longest source" in a["settings"]["decoding"]


def test_nothing_pruned_reproduces_the_models_own_bleu(tiny_run):
    """The evaluator's 0%-pruned point goes through the gates (all ones) and must equal plain decoding."""
    from headsweep.training.runs import load_datamodule, load_module
    from headsweep.training.translate import corpus_scores

    module, dm = load_module(tiny_run), load_datamodule(tiny_run)
    dm.setup()
    src, refs = dm.texts("val")
    batches = make_batches(dm.encode(src), dm.encode(refs), dm.eval_max_tokens)
    plain: list = [None] * len(src)
    for b in batches:
        for i, hyp in zip(b["index"].tolist(), module.translate(b["src"], max_len_factor=MAX_LEN_FACTOR)):
            plain[i] = hyp
    assert Evaluator(module, batches, refs)([])["bleu"] == corpus_scores(plain, refs)["bleu"]


def test_bad_arguments_get_one_line(tiny_run, capsys):
    with pytest.raises(SystemExit) as e:
        A.main(["--ckpt", str(tiny_run), "--step", "0"])
    assert e.value.code == 2 and capsys.readouterr().err.startswith("error: --step must be in (0, 1]")
    with pytest.raises(SystemExit):
        A.main(["--ckpt", str(tiny_run / "nope")])
    assert "checkpoint not found" in capsys.readouterr().err


def test_one_source_for_the_analysis_settings():
    """analysis=default (after training) and make analyze's defaults are the same values, those of
    conf/analysis/default.yaml; a bad one is one line before anything is read."""
    from omegaconf import OmegaConf

    from headsweep.analysis.settings import AnalysisError
    from headsweep.config import compose

    from_hydra = AnalysisSettings(**OmegaConf.to_container(compose(["analysis=default"]).analysis, resolve=True))
    assert A.parse_args(["--ckpt", "x"])[1] == from_hydra == AnalysisSettings.defaults()
    assert from_hydra.max_sentences == 150 and from_hydra.sentences == ("0",)
    assert A.parse_args(["--ckpt", "x", "--step", "0.5", "--sentences", "2", "3"])[1] == AnalysisSettings.defaults(
        step=0.5, sentences=["2", "3"]
    )
    with pytest.raises(AnalysisError, match=r"^--redundancy-threshold must be in \[0, 1\], got 2$"):
        AnalysisSettings.defaults(redundancy_threshold=2)


def test_pairwise_js_matches_scipy_and_clusters_twins():
    """JS in bits against scipy's jensenshannon (which returns its square root); two copies of a head
    form the one near-duplicate group."""
    from scipy.spatial.distance import jensenshannon

    from headsweep.analysis.redundancy import cluster, nearest_twin, pairwise_js

    torch.manual_seed(0)
    w = torch.randn(2, 3, 4, 5).softmax(-1)
    w[:, 2] = w[:, 0]  # head 2 is head 0's twin
    valid = torch.tensor([[True, True, True, False], [True, True, False, False]])
    got = pairwise_js(w, valid) / valid.sum()
    for i in range(3):
        for j in range(3):
            ref = [
                jensenshannon(w[b, i, q].double().numpy(), w[b, j, q].double().numpy(), base=2) ** 2
                for b in range(2)
                for q in range(4)
                if valid[b, q]
            ]
            assert float(got[i, j]) == pytest.approx(sum(ref) / len(ref), abs=1e-5)
    order, groups = cluster(got, threshold=0.01)
    assert groups == [[0, 2]] and sorted(order) == [0, 1, 2]
    assert nearest_twin(got.clone())[[0, 2]].tolist() == pytest.approx([0.0, 0.0], abs=1e-6)


def test_analysis_decoding_stops_at_twice_the_source():
    from headsweep.model.decoding import max_output_length

    src = torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])  # lengths 3 and 5, pad 0
    assert max_output_length(src, 0, extra=50, limit=500) == 55
    assert max_output_length(src, 0, extra=50, limit=500, factor=2.0) == 10
    assert max_output_length(src, 0, extra=4, limit=500, factor=2.0) == 9  # the paper's limit still applies


@pytest.mark.slow  # two fine-tunes
def test_prune_with_concrete_gates_beside_michel(run_copy, capsys):
    """A large lambda closes gates (fewer heads kept than without the penalty); Michel's side removes as
    many heads per kind; the fine-tunes log the open gates per layer at every step."""
    import csv

    from headsweep.analysis import prune as P

    tiny_run = run_copy

    assert (
        P.main(["--ckpt", str(tiny_run), "--lambdas", "0", "20", "--steps", "12", "--gate-lr", "1", "--split", "val"])
        == 0
    )
    record = json.loads((tiny_run / "prune" / "prune.json").read_text())
    none, strong = record["rows"]
    assert none["heads_kept"] == record["heads"] == 6 and strong["heads_kept"] < 6
    for row in record["rows"]:
        assert {k: len(v) for k, v in row["michel_kept"].items()} == row["kept_per_kind"]
    assert none["michel"]["bleu"] == record["full"]["bleu"]  # nothing removed: the original model
    assert "lambda 0 is the control" in (tiny_run / "prune" / "prune.md").read_text()
    rows = list(csv.DictReader(open(tiny_run / "prune" / "l0-20" / "csv" / "metrics.csv")))
    opened = [float(r["gates/enc_self.0"]) for r in rows if r.get("gates/enc_self.0")]
    assert len(opened) >= 10 and opened[0] == 2 and opened[-1] < 2
    assert (tiny_run / "prune" / "prune.png").stat().st_size > 0 and "lambda" in capsys.readouterr().out
    # bad input: one line each
    assert P.main(["--ckpt", str(tiny_run), "--lambdas", "-1"]) == 2
    assert "--lambdas must be one or more values >= 0" in capsys.readouterr().err
    assert P.main(["--ckpt", str(tiny_run / "prune" / "l0-20")]) == 2
    assert "already has concrete gates" in capsys.readouterr().err
    assert P.main(["--ckpt", str(tiny_run), "--split", "nosuch"]) == 2
    assert "nosuch" in capsys.readouterr().err


# ----------------------------------------------------------------------------- fixed heads


def test_fixed_heads_are_recorded_and_named_without_changing_learned_ones():
    """The record and the words come from the model itself; a model without fixed heads gets none, and its
    heads keep their plain labels."""
    from headsweep.analysis.fixed import fixed_heads, fixed_words, head_label, name_label

    net = tiny_net(fixed_heads={"enc_self": 3, "dec_self": 1})
    fixed = fixed_heads(net)
    assert fixed == {"enc_self": {"0": "cur", "1": "prev", "2": "next"}, "dec_self": {"0": "cur"}}
    assert fixed_words(fixed, 4) == [
        "enc_self heads 0-2 of every layer are fixed patterns (cur, prev, next); the learned head is 3",
        "dec_self head 0 of every layer is a fixed pattern (cur); the learned heads are 1-3",
    ]
    assert [head_label(fixed, "enc_self", h, "h") for h in (1, 3)] == ["h1 (prev, fixed)", "h3"]
    assert head_label(fixed, "cross", 0) == "0" and name_label(fixed, "enc_self", "L1H2") == "L1H2 (next, fixed)"
    assert name_label(fixed, "enc_self", "L1H2", short=True) == "L1H2 (next)"
    assert name_label(fixed, "cross", "L0H0") == "L0H0"
    assert fixed_heads(tiny_net()) == {} and fixed_words({}, 4) == [] and head_label({}, "enc_self", 0) == "0"


def fixed_head_run(tmp_path_factory):
    """A tiny run (1 layer, 4 heads) whose encoder heads 0 and 1 are the fixed patterns cur and prev."""
    from conftest import DATA, tiny_overrides
    from headsweep.config import compose
    from headsweep.training.train import train

    if not DATA.is_dir():
        pytest.skip(f"Multi30k not found at {DATA}")
    out = tmp_path_factory.mktemp("fixed") / "run"
    train(
        compose(
            tiny_overrides(
                out,
                "model.heads=4",
                "model.fixed_heads={enc_self:2}",
                "trainer.max_steps=4",
                "module.warmup_steps=2",
                "logger.wandb.mode=disabled",
                "run_name=fixed",
            )
        )
    )
    return out


@pytest.mark.slow  # a training run of its own, then the whole analysis
def test_analysis_records_and_marks_fixed_heads(tmp_path_factory, capsys, monkeypatch):
    import matplotlib.pyplot as plt

    run = fixed_head_run(tmp_path_factory)
    figures, close = [], plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig) or close(fig))  # keep each plot to look at
    A.main(
        [
            "--ckpt",
            str(run),
            "--max-sentences",
            "4",
            "--random-orders",
            "0",
            "--step",
            "1",
            "--sentences",
            "1",
            "--wandb-mode",
            "disabled",
        ]
    )
    a = json.loads((run / "analysis" / "analysis.json").read_text())
    assert a["fixed_heads"] == {"enc_self": {"0": "cur", "1": "prev"}}
    sentence = "enc_self heads 0-1 of every layer are fixed patterns (cur, prev); the learned heads are 2-3"
    md = (run / "analysis" / "analysis.md").read_text()
    assert f"**Fixed heads**: {sentence}." in md and f"fixed heads: {sentence}" in capsys.readouterr().out
    assert "| layer | h0 (cur, fixed) | h1 (prev, fixed) | h2 | h3 |" in md  # encoder tables
    assert "| layer | h0 | h1 | h2 | h3 |" in md  # decoder self and cross: nothing fixed
    prev = next(r for r in a["roles"]["heads"] if (r["kind"], r["head"]) == ("enc_self", 1))
    assert prev["prev"] == pytest.approx(1.0)  # the head labelled prev is the one that attends to the previous token
    assert "| encoder self-attention | 0 | 1 (prev, fixed) | " in md
    heat = next(f for f in figures if f._suptitle and f._suptitle.get_text().startswith("head importance"))
    enc = heat.axes[0]
    assert [t.get_text() for t in enc.get_xticklabels()] == ["0\ncur", "1\nprev", "2", "3"]
    assert [p.get_x() + 0.5 for p in enc.patches if p.get_hatch()] == [0, 1]  # columns 0 and 1 hatched
    assert not any(p.get_hatch() for ax in heat.axes[1:] for p in ax.patches)
    scatter = next(f for f in figures if f.axes and f.axes[0].get_title().startswith("importance vs confidence"))
    assert "fixed pattern head" in [t.get_text() for t in scatter.axes[0].get_legend().get_texts()]


def test_wandb_tables_name_the_fixed_heads():
    """The W&B tables of a shipped analysis with 4 fixed encoder heads (results/fixed_heads, seed 1): the
    `fixed` column holds each head's pattern, "" for learned heads, in every per-head table."""
    # a stored run: its analysis.json is gzipped (store/pack.py), read_analysis reads either
    a = read_analysis(Path(__file__).parents[1] / "results/fixed_heads/h8-dk32-dv32-fixed_enc4-s1")
    assert a is not None
    tables = A.wandb_tables(a)
    cols, rows = tables["importance_table"]
    fixed = {(r[0], r[2]): r[cols.index("fixed")] for r in rows}
    assert [fixed["enc_self", h] for h in range(8)] == ["cur", "prev", "next", "left3", "", "", "", ""]
    assert {v for (kind, _), v in fixed.items() if kind != "enc_self"} == {""}
    assert len(rows) == 3 * 3 * 8  # kinds x layers x heads
    for name, head_col in (("single_head", "head"), ("roles", "head"), ("best_head_only", "kept_head")):
        cols, rows = tables[name]
        assert all(
            (r[cols.index("fixed")] != "") == (r[0] == "enc_self" and r[cols.index(head_col)] < 4) for r in rows
        ), name
    cols, rows = tables["roles"]
    assert rows[0][cols.index("importance")] == a["roles"]["heads"][0]["importance"]  # columns still line up


def test_the_prune_figure_names_each_lambda_apart_from_the_others_and_inside_the_axes():
    """The shipped make-train numbers: 67 and 72 heads kept lie close, where the labels ran into each other and
    past the axes' right edge."""
    from headsweep.analysis import prune as P
    from headsweep.reporting.plots import pyplot

    kept = [(0.0, 72, 36.16, 36.0), (0.01, 67, 36.0, 35.9), (0.03, 41, 33.54, 17.2), (0.1, 7, 24.83, 1.3)]
    record = {
        "heads": 72,
        "split": "test_2016_flickr",
        "full": {"bleu": 36.0},
        "rows": [
            {"lambda": lam, "heads_kept": h, "concrete": {"bleu": c}, "michel": {"bleu": m}} for lam, h, c, m in kept
        ],
    }
    fig = P.prune_figure(record)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    boxes = {t.get_text(): t.get_window_extent(renderer) for t in ax.texts}
    assert sorted(boxes) == ["λ=0", "λ=0.01", "λ=0.03", "λ=0.1"]
    names = sorted(boxes)
    apart = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :] if boxes[a].overlaps(boxes[b])]
    assert apart == []
    frame = ax.get_window_extent(renderer)
    assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1 for b in boxes.values())
    pyplot().close(fig)
