"""The attention layer's settings as one object (AttentionConfig): the transformer and convert_impl pass it
whole, by name, so a field added or moved cannot silently change the layer they build; the state_dict of the
default model is the one from before the config object existed."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from headsweep.model import AttentionConfig, MultiHeadAttention, Transformer, TransformerConfig, convert_impl
from headsweep.model.config import ATTENTION_KINDS

# Every setting away from its default, each to a value no other field holds: a setting passed to the wrong
# field, or dropped, shows in the comparison.
NON_DEFAULT = dict(
    d_model=24,
    heads=4,
    d_k=5,
    d_v=7,
    dropout=0.25,
    bias=False,
    impl="fused",
    kernel="math",
    head_dropout=0.125,
    concrete_gates=True,
    kv_heads=None,
    fixed=("prev", "first"),
    init="xavier",
    init_kv_gain=0.75,
)
SHARED = {**NON_DEFAULT, "fixed": (), "kv_heads": 2}  # kv_heads < h cannot go with fixed heads


def test_non_default_covers_every_field():
    assert set(NON_DEFAULT) == {f.name for f in dataclasses.fields(AttentionConfig)}
    defaults = AttentionConfig(24, 4)
    moved = {k for k, v in NON_DEFAULT.items() if v != getattr(defaults, k)}
    assert moved == set(NON_DEFAULT) - {"d_model", "heads", "impl", "kv_heads"}  # those are SHARED's or required


def reordered_config_class():
    """AttentionConfig with its fields in reverse order (all keyword-only, so the defaults may come first):
    what reordering the dataclass's fields would make of it."""
    fields = [(f.name, f.type, dataclasses.field(default=f.default)) for f in dataclasses.fields(AttentionConfig)]
    for _, _, f in fields[:2]:
        f.default = dataclasses.MISSING  # d_model and heads stay required
    namespace = {"__post_init__": AttentionConfig.__post_init__, "sizes": AttentionConfig.sizes}
    return dataclasses.make_dataclass("AttentionConfig", fields[::-1], namespace=namespace, frozen=True, kw_only=True)


def assert_same_layer(layer, other, impl):
    """other: layer in layout `impl`, every other setting the same, and the same function of its input."""
    for f in dataclasses.fields(layer.config):
        want = impl if f.name == "impl" else getattr(layer.config, f.name)
        assert getattr(other.config, f.name) == want, f.name
    assert (other.d_k, other.d_v, other.kv_heads, other.n_fixed) == (
        layer.d_k,
        layer.d_v,
        layer.kv_heads,
        layer.n_fixed,
    )
    assert sum(p.numel() for p in other.parameters()) == sum(p.numel() for p in layer.parameters())
    x = torch.randn(2, 5, layer.d_model)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    want, want_w = layer.eval()(x, key_padding_mask=pad, need_weights=True)
    got, got_w = other.eval()(x, key_padding_mask=pad, need_weights=True)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_w, want_w)


@pytest.mark.parametrize("settings", [NON_DEFAULT, SHARED], ids=["fixed", "shared"])
@pytest.mark.parametrize("impl", ["fused", "per_head"])
def test_a_reordered_config_cannot_change_the_layer_convert_impl_builds(settings, impl, monkeypatch):
    reordered = reordered_config_class()
    assert [f.name for f in dataclasses.fields(reordered)] != [f.name for f in dataclasses.fields(AttentionConfig)]
    monkeypatch.setattr("headsweep.model.attention.AttentionConfig", reordered)  # the layer's isinstance check
    torch.manual_seed(0)
    layer = MultiHeadAttention(reordered(**{**settings, "impl": impl}))
    other = "per_head" if impl == "fused" else "fused"
    converted = convert_impl(layer, other)
    assert type(converted.config) is reordered
    assert_same_layer(layer, converted, other)
    back = convert_impl(converted, impl)
    assert back.config == layer.config
    x = torch.randn(2, 5, layer.d_model)
    assert torch.equal(back.eval()(x)[0], layer.eval()(x)[0])


@pytest.mark.parametrize("impl", ["fused", "per_head"])
def test_keyword_order_and_replace_give_the_same_config_and_layer(impl):
    settings = {**NON_DEFAULT, "impl": impl}
    forward, backward = AttentionConfig(**settings), AttentionConfig(**dict(reversed(settings.items())))
    via_replace = dataclasses.replace(AttentionConfig(24, 4), **{k: v for k, v in settings.items() if k != "heads"})
    assert forward == backward == via_replace
    layers = []
    for config in (forward, backward, via_replace):
        torch.manual_seed(0)
        layers.append(MultiHeadAttention(config))
    states = [m.state_dict() for m in layers]
    assert all(list(s) == list(states[0]) for s in states)
    assert all(torch.equal(s[k], states[0][k]) for s in states for k in s)
    converted = convert_impl(layers[0], "per_head" if impl == "fused" else "fused")
    assert_same_layer(layers[0], converted, converted.config.impl)


def test_the_transformer_passes_every_setting():
    """TransformerConfig.attention maps each model setting to the layer's: checked against the model config's
    own keys, so a setting it forgets (left at the layer's default) fails."""
    cfg = TransformerConfig(
        vocab_size=20,
        d_model=24,
        n_layers=1,
        heads=4,
        d_k=5,
        d_v=7,
        attn_dropout=0.25,
        head_dropout=0.125,
        concrete_gates=True,
        kernel="math",
        impl="per_head",
        fixed_heads={"enc_self": 2, "dec_self": 1},
        fixed_patterns=["prev", "first", "cur"],
        init="xavier",
        init_kv_gain=0.75,
    )
    net = Transformer(cfg)
    renamed = {"dropout": "attn_dropout"}
    for kind, fixed in zip(ATTENTION_KINDS, [("prev", "first"), ("prev",), ()]):
        (layer,) = net.attention_layers(kind)
        for f in dataclasses.fields(AttentionConfig):
            if f.name == "fixed":
                assert layer.config.fixed == fixed
            elif f.name == "bias":
                assert layer.config.bias is True  # no model setting: always on
            else:
                assert getattr(layer.config, f.name) == getattr(cfg, renamed.get(f.name, f.name)), (kind, f.name)


# The default model's state_dict keys, as written by the code before AttentionConfig (main at 9e8ab04): the
# refactor keeps every name, so old checkpoints load.
DEFAULT_KEYS = """
embed.weight
encoder.0.self_attn.q_proj.weight encoder.0.self_attn.q_proj.bias encoder.0.self_attn.k_proj.weight
encoder.0.self_attn.k_proj.bias encoder.0.self_attn.v_proj.weight encoder.0.self_attn.v_proj.bias
encoder.0.self_attn.out_proj.weight encoder.0.self_attn.out_proj.bias encoder.0.ff.w1.weight
encoder.0.ff.w1.bias encoder.0.ff.w2.weight encoder.0.ff.w2.bias encoder.0.res_attn.norm.weight
encoder.0.res_attn.norm.bias encoder.0.res_ff.norm.weight encoder.0.res_ff.norm.bias
encoder.1.self_attn.q_proj.weight encoder.1.self_attn.q_proj.bias encoder.1.self_attn.k_proj.weight
encoder.1.self_attn.k_proj.bias encoder.1.self_attn.v_proj.weight encoder.1.self_attn.v_proj.bias
encoder.1.self_attn.out_proj.weight encoder.1.self_attn.out_proj.bias encoder.1.ff.w1.weight
encoder.1.ff.w1.bias encoder.1.ff.w2.weight encoder.1.ff.w2.bias encoder.1.res_attn.norm.weight
encoder.1.res_attn.norm.bias encoder.1.res_ff.norm.weight encoder.1.res_ff.norm.bias
encoder.2.self_attn.q_proj.weight encoder.2.self_attn.q_proj.bias encoder.2.self_attn.k_proj.weight
encoder.2.self_attn.k_proj.bias encoder.2.self_attn.v_proj.weight encoder.2.self_attn.v_proj.bias
encoder.2.self_attn.out_proj.weight encoder.2.self_attn.out_proj.bias encoder.2.ff.w1.weight
encoder.2.ff.w1.bias encoder.2.ff.w2.weight encoder.2.ff.w2.bias encoder.2.res_attn.norm.weight
encoder.2.res_attn.norm.bias encoder.2.res_ff.norm.weight encoder.2.res_ff.norm.bias
decoder.0.self_attn.q_proj.weight decoder.0.self_attn.q_proj.bias decoder.0.self_attn.k_proj.weight
decoder.0.self_attn.k_proj.bias decoder.0.self_attn.v_proj.weight decoder.0.self_attn.v_proj.bias
decoder.0.self_attn.out_proj.weight decoder.0.self_attn.out_proj.bias decoder.0.cross_attn.q_proj.weight
decoder.0.cross_attn.q_proj.bias decoder.0.cross_attn.k_proj.weight decoder.0.cross_attn.k_proj.bias
decoder.0.cross_attn.v_proj.weight decoder.0.cross_attn.v_proj.bias decoder.0.cross_attn.out_proj.weight
decoder.0.cross_attn.out_proj.bias decoder.0.ff.w1.weight decoder.0.ff.w1.bias decoder.0.ff.w2.weight
decoder.0.ff.w2.bias decoder.0.res_self.norm.weight decoder.0.res_self.norm.bias
decoder.0.res_cross.norm.weight decoder.0.res_cross.norm.bias decoder.0.res_ff.norm.weight
decoder.0.res_ff.norm.bias
decoder.1.self_attn.q_proj.weight decoder.1.self_attn.q_proj.bias decoder.1.self_attn.k_proj.weight
decoder.1.self_attn.k_proj.bias decoder.1.self_attn.v_proj.weight decoder.1.self_attn.v_proj.bias
decoder.1.self_attn.out_proj.weight decoder.1.self_attn.out_proj.bias decoder.1.cross_attn.q_proj.weight
decoder.1.cross_attn.q_proj.bias decoder.1.cross_attn.k_proj.weight decoder.1.cross_attn.k_proj.bias
decoder.1.cross_attn.v_proj.weight decoder.1.cross_attn.v_proj.bias decoder.1.cross_attn.out_proj.weight
decoder.1.cross_attn.out_proj.bias decoder.1.ff.w1.weight decoder.1.ff.w1.bias decoder.1.ff.w2.weight
decoder.1.ff.w2.bias decoder.1.res_self.norm.weight decoder.1.res_self.norm.bias
decoder.1.res_cross.norm.weight decoder.1.res_cross.norm.bias decoder.1.res_ff.norm.weight
decoder.1.res_ff.norm.bias
decoder.2.self_attn.q_proj.weight decoder.2.self_attn.q_proj.bias decoder.2.self_attn.k_proj.weight
decoder.2.self_attn.k_proj.bias decoder.2.self_attn.v_proj.weight decoder.2.self_attn.v_proj.bias
decoder.2.self_attn.out_proj.weight decoder.2.self_attn.out_proj.bias decoder.2.cross_attn.q_proj.weight
decoder.2.cross_attn.q_proj.bias decoder.2.cross_attn.k_proj.weight decoder.2.cross_attn.k_proj.bias
decoder.2.cross_attn.v_proj.weight decoder.2.cross_attn.v_proj.bias decoder.2.cross_attn.out_proj.weight
decoder.2.cross_attn.out_proj.bias decoder.2.ff.w1.weight decoder.2.ff.w1.bias decoder.2.ff.w2.weight
decoder.2.ff.w2.bias decoder.2.res_self.norm.weight decoder.2.res_self.norm.bias
decoder.2.res_cross.norm.weight decoder.2.res_cross.norm.bias decoder.2.res_ff.norm.weight
decoder.2.res_ff.norm.bias
""".split()


def test_default_model_state_dict_keys_unchanged():
    with torch.device("meta"):  # names only: no memory, no time
        net = Transformer(TransformerConfig())
    assert list(net.state_dict()) == DEFAULT_KEYS


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(heads=5), r"heads=5 does not divide d_model=24: set d_k and d_v explicitly \(e.g. model.d_k=4"),
        (dict(impl="paper"), r"impl must be one of \('fused', 'per_head'\), got 'paper'"),
        (dict(kernel="flash"), r"kernel must be one of \('auto', 'math', 'sdpa'\), got 'flash'"),
        (dict(kv_heads=3), r"kv_heads=3 must divide heads=4 .*use one of 1, 2, 4, or null for heads"),
        (dict(fixed=["prev"] * 5), r"5 fixed heads but heads=4: at most 4"),
        (dict(fixed=["up"]), r"unknown fixed attention pattern 'up'"),
        (dict(d_k=0, d_v=4), r"d_k and d_v must be positive, got d_k=0 d_v=4"),
        (dict(head_dropout=1.0), r"^head_dropout must be in \[0, 1\), got 1.0"),
        (dict(dropout=-0.1), r"^dropout must be in \[0, 1\), got -0.1"),
        (dict(init="he"), r"init='he': use one of fan_in, xavier"),
        (dict(init_kv_gain=0.0), r"init_kv_gain=0.0 multiplies the init bound of W\^K and W\^V"),
    ],
)
def test_a_bad_setting_fails_when_the_config_is_built(change, message):
    with pytest.raises(ValueError, match=message):
        AttentionConfig(**{"d_model": 24, "heads": 4, **change})


def test_the_layer_takes_one_frozen_config():
    with pytest.raises(TypeError, match=r"MultiHeadAttention takes one AttentionConfig, got 64: use Multi"):
        MultiHeadAttention(64)
    with pytest.raises(TypeError):  # after d_v, settings are keyword-only
        AttentionConfig(24, 4, 5, 7, 0.1)
    config = AttentionConfig(24, 4, fixed=["prev"])
    assert config.fixed == ("prev",) and hash(config) == hash(dataclasses.replace(config))  # a list kept as a tuple
    assert MultiHeadAttention(config).config is config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.impl = "per_head"  # a layer's config cannot drift from the layer it built
