"""Per-matrix learning rates (issue 54, headsweep.model.lr_scaling): the rule against mup's MuAdam where mup
handles the case, where it departs (W^O), the factors on the Transformer, the optimizer's groups, the store
identity (factors all 1 = lr_scaling none), and the bad inputs' one line each."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from headsweep.config import compose
from headsweep.model import Transformer, TransformerConfig
from headsweep.model.lr_scaling import check_scaling, is_identity, lr_factors, param_groups
from headsweep.store import flat_key, flatten_config
from headsweep.training.checks import ConfigError, check_config

mup = pytest.importorskip("mup")  # the reference (mup 1.0.0, Microsoft): pip install mup, or .[dev]

BASE = {"w_o": 256, "ff_w2": 1024}  # h 8 x d_v 32, d_ff 1024: heads_fixed_dk's base


class Toy(nn.Module):
    """A hidden matrix whose fan-in and fan-out both grow with w (named as the FFN's W_2, so that the rule reads
    it), between an input layer and a readout of fixed sizes: a case mup handles."""

    def __init__(self, w: int):
        super().__init__()
        self.inp = nn.Linear(16, w)
        self.ff = nn.Module()
        self.ff.w2 = nn.Linear(w, w)
        self.readout = mup.MuReadout(w, 10)


def muadam_rates(model: nn.Module, base: nn.Module, lr: float) -> dict[str, float]:
    mup.set_base_shapes(model, base)
    opt = mup.MuAdam(model.parameters(), lr=lr)
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: g["lr"] for g in opt.param_groups for p in g["params"]}


@pytest.mark.parametrize("w", [16, 128, 256, 1024])
def test_the_rule_gives_muadams_rates_on_a_hidden_matrix(w):
    """MuAdam divides a matrix-like weight's rate by its fan-in multiplier w / w0; the rule's base fan-in /
    fan-in is the same number, and both leave the input layer, biases and readout at the full rate."""
    w0, lr = 64, 1e-2
    theirs = muadam_rates(Toy(w), Toy(w0), lr)
    model = Toy(w)
    factors = lr_factors(model, "mup", {"w_o": 1, "ff_w2": w0})
    groups = param_groups(list(model.named_parameters()), factors, lr)
    ours = {n: g["lr"] for g in groups for n, p in model.named_parameters() if any(p is q for q in g["params"])}
    assert ours["ff.w2.weight"] == pytest.approx(lr * w0 / w)
    assert ours == pytest.approx(theirs)


def test_where_the_rule_departs_from_mup_w_o():
    """W^O grows in its fan-in alone (fan-out d_model fixed): mup takes it for the readout. As a plain Linear,
    set_base_shapes refuses it; as a MuReadout, MuAdam keeps its rate (vector-like, scaled by the output
    multiplier instead). The rule divides its rate by the fan-in multiplier: Tensor Programs V, Table 3's
    Adam row for a growing fan-in."""

    class Attn(nn.Module):
        def __init__(self, w: int, readout: bool):
            super().__init__()
            self.self_attn = nn.Module()
            self.self_attn.out_proj = mup.MuReadout(w, 16) if readout else nn.Linear(w, 16)

    with pytest.raises(AssertionError, match="MuReadout"):
        mup.set_base_shapes(Attn(1024, False), Attn(256, False))
    theirs = muadam_rates(Attn(1024, True), Attn(256, True), 2e-3)
    assert theirs["self_attn.out_proj.weight"] == 2e-3
    ours = lr_factors(Attn(1024, False), "mup", {"w_o": 256, "ff_w2": 1})
    assert ours["self_attn.out_proj.weight"] == 0.25 and ours["self_attn.out_proj.bias"] == 1.0


def factors_of(lr_scaling="mup", base=BASE, **model):
    with torch.device("meta"):
        net = Transformer(TransformerConfig(vocab_size=100, **model))
    return lr_factors(net, lr_scaling, base)


def test_transformer_factors_follow_the_fan_ins_that_move():
    f = factors_of(heads=32, d_k=32, d_v=32)
    w_o = [n for n in f if n.endswith("_attn.out_proj.weight")]
    assert len(w_o) == 9 and all(f[n] == 0.25 for n in w_o)  # 3 encoder + 3 x 2 decoder attention sublayers
    assert all(v == 1.0 for n, v in f.items() if n not in w_o)  # Q, K, V, FFN, embeddings, norms, biases
    assert set(factors_of(heads=1, d_k=32, d_v=32).values()) == {1.0, 8.0}
    assert set(factors_of(heads=32, d_k=32, d_v=8).values()) == {1.0}  # the mirror: W^O's fan-in is the base's
    assert set(factors_of(heads=8, d_k=32, d_v=32, kv_heads=2).values()) == {1.0}  # kv heads: W^O still h * d_v
    assert set(factors_of(heads=16, d_k=16, d_v=16).values()) == {1.0}  # row B-like: 16 x 16 = 256
    ff = factors_of(heads=8, d_k=32, d_v=32, d_ff=2048)
    assert {n for n, v in ff.items() if v != 1.0} == {n for n in ff if n.endswith("ff.w2.weight")}
    assert {v for v in ff.values() if v != 1.0} == {0.5}
    untied = factors_of(heads=32, d_k=32, d_v=32, tie_embeddings=False)
    assert untied["out_proj.weight"] == 1.0  # the readout (fan-in d_model) is no W^O
    per_head = factors_of(heads=32, d_k=32, d_v=32, impl="per_head")
    assert sorted(set(per_head.values())) == [0.25, 1.0]
    assert set(factors_of("none", None, heads=32, d_k=32, d_v=32).values()) == {1.0}


def test_the_optimizer_has_a_group_per_factor():
    from tokenizers import Tokenizer, models

    from headsweep.data.tokenizer import SPECIALS
    from headsweep.training.module import TranslationModule

    vocab = {t: i for i, t in enumerate([*SPECIALS, "a", "b"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>")).to_str()
    model = {"d_model": 16, "n_layers": 1, "heads": 8, "d_k": 4, "d_v": 4, "d_ff": 32}
    rates = {}
    for scaling, base in (("none", None), ("mup", {"w_o": 16, "ff_w2": 32})):
        module = TranslationModule(model, len(vocab), tok, peak_lr=1e-3, lr_scaling=scaling, lr_base=base)
        module._trainer = SimpleNamespace(max_steps=10, callbacks=[])
        groups = module.configure_optimizers()["optimizer"].param_groups
        rates[scaling] = sorted((g["initial_lr"], len(g["params"])) for g in groups)  # the peak, before warm-up
        assert sum(len(g["params"]) for g in groups) == len(list(module.parameters()))
    assert rates["none"] == [(1e-3, len(list(module.parameters())))]
    # h 8 x d_v 4 = 32 against the base's 16: W^O's three matrices (enc self, dec self, cross) at half the rate
    assert rates["mup"][0] == (5e-4, 3) and rates["mup"][1][0] == 1e-3


def key(*overrides):
    return flat_key(flatten_config(compose(list(overrides))), 1)


def test_factors_all_one_are_the_same_experiment_as_none():
    """The base cell (and a cell whose fan-ins are the base's) under mup trains what it trains without: the same
    store key, so `make sweep` shows the finished run rather than training it again; a cell whose factors move
    is another experiment."""
    mup_ = ("module.lr_scaling=mup", "module.lr_base={w_o:256,ff_w2:1024}")
    h8 = ("model.heads=8", "model.d_k=32", "model.d_v=32")
    assert key(*h8, *mup_) == key(*h8)
    mirror = ("model.heads=32", "model.d_k=32", "model.d_v=8")
    assert key(*mirror, *mup_) == key(*mirror)
    h32 = ("model.heads=32", "model.d_k=32", "model.d_v=32")
    assert key(*h32, *mup_) != key(*h32)
    assert key(*h32, "module.lr_scaling=none", "module.lr_base={w_o:256,ff_w2:1024}") == key(*h32)
    assert is_identity({"module.lr_scaling": "none"}) and is_identity({})


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["module.lr_scaling=mu_p"], "module.lr_scaling"),
        (["module.lr_scaling=mup"], "module.lr_scaling=mup has no base cell to scale from"),
        (["module.lr_scaling=mup", "module.lr_base={w_o:256}"], "give the base cell's fan-ins"),
        (["module.lr_scaling=mup", "module.lr_base={w_o:0,ff_w2:1024}"], "whole numbers >= 1"),
    ],
)
def test_bad_scaling_settings_stop_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as e:
        check_config(compose([*overrides, "paths.output_dir=/tmp/x"]))
    assert "\n" not in str(e.value)


def test_check_scaling_names_what_exists():
    with pytest.raises(ValueError, match="does not exist: use none .* or mup"):
        check_scaling("muP", None)
    check_scaling("mup", BASE)
    check_scaling("none", None)
