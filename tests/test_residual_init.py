"""The residual outputs' starting scale (headsweep.model.residual_init): muP's W^O init and the W^O / W_2 gains."""

from __future__ import annotations

import math

import pytest
import torch

from headsweep.config import compose
from headsweep.model import Transformer, TransformerConfig
from headsweep.model.diagnostics import init_check
from headsweep.model.residual_init import check_residual_init
from headsweep.store import flat_key, flatten_config
from headsweep.training.checks import ConfigError, check_config

SMALL = dict(vocab_size=64, d_model=32, n_layers=2, d_ff=64)


UNIT = dict(init_wo_gain=1.0, init_ff2_gain=1.0)  # the weights as drawn: what each factor multiplies


def build(**kw) -> dict[str, torch.Tensor]:
    torch.manual_seed(7)
    return dict(Transformer(TransformerConfig(**{**SMALL, **UNIT, **kw})).named_parameters())


def is_wo(name: str) -> bool:
    return name.endswith("_attn.out_proj.weight")


def is_w2(name: str) -> bool:
    return name.endswith(".ff.w2.weight")


@pytest.mark.parametrize("heads, base", [(16, 64), (2, 64), (4, 128)])
def test_mup_scales_wo_std_by_sqrt_base_over_fan_in_and_leaves_qkv_alone(heads, base):
    """W^O's fan-in h * d_v grows with h at d_k = d_v fixed: muP draws it with std * sqrt(base / fan-in) (an
    output-like weight, std ∝ 1 / fan-in against fan_in's 1 / sqrt(fan-in)). Every other weight, W^Q, W^K, W^V
    included, is the fan_in model's bit for bit."""
    sizes = dict(heads=heads, d_k=8, d_v=8)
    plain, mup = build(**sizes), build(**sizes, init_wo="mup", init_wo_base=base)
    fan_in = heads * 8
    factor = math.sqrt(base / fan_in)
    assert plain.keys() == mup.keys()
    for name, w in plain.items():
        if is_wo(name):
            assert torch.allclose(mup[name], w * factor, rtol=1e-6, atol=0)
            assert mup[name].std().item() == pytest.approx(w.std().item() * factor, rel=1e-5)
            # the independent reference: fan_in's std is sqrt(1 / fan_in) (U(-a, a), a = sqrt(3 / fan_in))
            assert mup[name].std().item() == pytest.approx(math.sqrt(base) / fan_in, rel=0.15)
        else:
            assert torch.equal(mup[name], w), name


def test_mup_at_the_base_fan_in_is_the_fan_in_model():
    sizes = dict(heads=4, d_k=8, d_v=8)
    plain, mup = build(**sizes).values(), build(**sizes, init_wo="mup", init_wo_base=32).values()
    assert all(torch.equal(a, b) for a, b in zip(plain, mup))


GPT2 = 1 / math.sqrt(6)  # 1 / sqrt(2N) at N 3


@pytest.mark.parametrize("wo, ff2", [(0.5, 1.0), (1.0, 0.25), (GPT2, GPT2), (0.0, 1.0), (0.0, 0.0)])
def test_each_gain_scales_exactly_its_matrices(wo, ff2):
    """init_wo_gain multiplies every W^O (encoder self, decoder self, cross) and nothing else; init_ff2_gain every
    FFN W_2 and nothing else: every other parameter, biases included, is the unit-gain model's bit for bit."""
    base, scaled = build(), build(init_wo_gain=wo, init_ff2_gain=ff2)
    seen = {"wo": 0, "w2": 0}
    for name, w in base.items():
        if is_wo(name):
            seen["wo"] += 1
            assert torch.equal(scaled[name], w * wo), name
        elif is_w2(name):
            seen["w2"] += 1
            assert torch.equal(scaled[name], w * ff2), name
        else:
            assert torch.equal(scaled[name], w), name
    assert seen == {"wo": 2 + 2 * 2, "w2": 2 + 2}  # N 2: 2 encoder W^O, 2 x 2 decoder W^O; 4 W_2


def test_the_init_check_measures_the_residual_gains():
    """The init check (make checks, make sweep) shows W^O's and W_2's gains, and the attention output's scale
    against the residual stream moves with W^O's gain: a cell's starting scale is visible before it trains."""
    cfg = dict(SMALL, heads=4)
    one = init_check(TransformerConfig(**cfg, **UNIT))
    half = init_check(TransformerConfig(**cfg, init_wo_gain=0.5, init_ff2_gain=0.25))
    for kind in one["gain"]:
        assert half["gain"][kind]["o"] == pytest.approx(0.5 * one["gain"][kind]["o"], rel=1e-5)
        assert half["gain"][kind]["q"] == pytest.approx(one["gain"][kind]["q"], rel=1e-6)
        assert half["ratio"][kind] == pytest.approx(0.5 * one["ratio"][kind], rel=1e-4)
    for stack in ("enc", "dec"):
        # torch's default Linear init, U(-1/sqrt(fan_in), 1/sqrt(fan_in)): gain 1/sqrt(3)
        assert one["gain_ff2"][stack] == pytest.approx(1 / math.sqrt(3), rel=0.1)
        assert half["gain_ff2"][stack] == pytest.approx(0.25 * one["gain_ff2"][stack], rel=1e-5)


def key(*overrides):
    return flat_key(flatten_config(compose(list(overrides))), 1)


def test_unit_gains_are_the_runs_recorded_before_them():
    """Gain 1 and fan_in W^O train what every earlier run trained: the same store key (the base cell is shared,
    never trained again); mup at the base's own fan-in too; any other gain is another experiment."""
    unit = ("model.init_wo_gain=1.0", "model.init_ff2_gain=1.0")
    before = flat_key(
        {k: v for k, v in flatten_config(compose(list(unit))).items() if "init_wo" not in k and "ff2" not in k}, 1
    )
    assert key(*unit, "model.init_wo=fan_in") == before  # a record without the keys reads them at 1
    h8 = ("model.heads=8", "model.d_k=32", "model.d_v=32")
    assert key(*h8, *unit, "model.init_wo=mup", "model.init_wo_base=256") == key(*h8, *unit)
    assert key("model.init_wo_gain=0.5") != key(*unit) and key("model.init_ff2_gain=0.5") != key(*unit)
    h32 = ("model.heads=32", "model.d_k=32", "model.d_v=32")
    assert key(*h32, *unit, "model.init_wo=mup", "model.init_wo_base=256") != key(*h32, *unit)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.init_wo=mup"], "model.init_wo=mup has no base cell to scale from"),
        (["model.init_wo=muP"], "model.init_wo"),
        (["model.init_wo_gain=-0.5"], "model.init_wo_gain"),
        (["model.init_ff2_gain=nan"], "model.init_ff2_gain"),
        (["model.init_ff2_gain=inf"], "model.init_ff2_gain"),
    ],
)
def test_bad_residual_init_stops_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as e:
        check_config(compose([*overrides, "paths.output_dir=/tmp/x"]))
    assert "\n" not in str(e.value)


def test_check_residual_init_names_the_choices():
    with pytest.raises(ValueError, match="use fan_in .* or mup"):
        check_residual_init("xavier", None, 1.0, 1.0)
    with pytest.raises(ValueError, match="finite number >= 0"):
        check_residual_init("fan_in", None, float("nan"), 1.0)
    with pytest.raises(ValueError, match="whole number >= 1"):
        check_residual_init("mup", 0, 1.0, 1.0)
    check_residual_init("mup", 256, 0.0, 0.0)  # zero gains are a setting: the branch starts at zero


def test_the_init_check_reads_mup_s_w_o_scale_as_on_purpose_and_fan_in_s_as_a_confound():
    """h 32 at d_v 32 beside the base h 8: under init_wo mup W^O's gain is sqrt(256 / 1024) = 1/2 of the base's, on
    purpose (no line); the same two cells' W^Q gain moved by hand is still named."""
    from headsweep.sweeps.init_check import confounds, differences

    def check(heads, init_wo):
        cfg = TransformerConfig(vocab_size=256, heads=heads, d_k=32, d_v=32, init_wo=init_wo, init_wo_base=256)
        return init_check(cfg, seed=1)

    base, h32 = check(8, "mup"), check(32, "mup")
    found = {q for q, _, _ in differences(h32, base, 0.10)}
    assert any(q.startswith("gain W^O") for q in found), found  # the scale did move: by design
    flat = {"model.init_wo": "mup", "model.heads": 32, "model.d_model": 256}
    assert confounds(flat, {**flat, "model.heads": 8}, h32, base) == []
    moved = {**h32, "gain": {k: {**g, "q": 2 * g["q"]} for k, g in h32["gain"].items()}}
    assert {q for q, _, _ in confounds(flat, {**flat, "model.heads": 8}, moved, base)} >= {"gain W^Q enc_self"}
