"""Shared key/value heads (model.kv_heads) and fixed heads (model.fixed_heads): against explicit references,
in the Transformer and its cached decoders, in parameter and KV-cache counts, and in the head analysis."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from headsweep.analysis.importance import gate_gradients
from headsweep.analysis.roles import attention_stats
from headsweep.model import (
    AttentionConfig,
    MultiHeadAttention,
    Transformer,
    TransformerConfig,
    attention_param_count,
    attention_switches,
    convert_impl,
    count_parameters,
    decoding,
    kv_cache_bytes,
)
from headsweep.model.patterns import DEFAULT_PATTERNS, FixedPatterns

PAD, BOS, EOS = 0, 1, 2


def padding_mask(lengths, T):
    return torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]  # True at padding


def projection(m: MultiHeadAttention, which: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) of W^Q, W^K or W^V as one matrix, whatever the layout."""
    if m.impl == "fused":
        p = getattr(m, f"{which}_proj")
        return p.weight, p.bias
    heads = getattr(m, f"{which}_heads")
    return torch.cat([p.weight for p in heads]), torch.cat([p.bias for p in heads])


def repeat_reference(m: MultiHeadAttention, x, memory=None, pad=None, causal=False):
    """Multi-head attention written out with the K/V heads explicitly repeated for their query heads."""
    kv_in = x if memory is None else memory
    B, Tq, _ = x.shape
    Tk, h, kv, dk, dv = kv_in.size(1), m.heads, m.kv_heads, m.d_k, m.d_v
    (wq, bq), (wk, bk), (wv, bv) = (projection(m, w) for w in "qkv")
    q = (x @ wq.T + bq).view(B, Tq, h, dk).transpose(1, 2)
    k = (kv_in @ wk.T + bk).view(B, Tk, kv, dk).transpose(1, 2).repeat_interleave(h // kv, dim=1)
    v = (kv_in @ wv.T + bv).view(B, Tk, kv, dv).transpose(1, 2).repeat_interleave(h // kv, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(dk)
    if pad is not None:
        scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
    if causal:
        scores = scores.masked_fill(torch.ones(Tq, Tk, dtype=torch.bool).triu(1), float("-inf"))
    weights = scores.softmax(-1)
    out = (weights @ v).transpose(1, 2).reshape(B, Tq, h * dv) @ m.out_proj.weight.T + m.out_proj.bias
    return out, weights


@pytest.mark.parametrize("kernel", ["math", "sdpa"])
@pytest.mark.parametrize("impl", ["fused", "per_head"])
@pytest.mark.parametrize("kv", [1, 2, 4, 8])
def test_shared_kv_heads_equal_explicit_repeat(kv, impl, kernel):
    torch.manual_seed(kv)
    m = MultiHeadAttention(AttentionConfig(24, 8, 5, 7, kv_heads=kv, impl=impl, kernel=kernel)).eval()
    x, mem = torch.randn(3, 5, 24), torch.randn(3, 6, 24)
    pad = padding_mask([6, 3, 1], 6)
    for memory, mask, causal in ((None, None, True), (mem, pad, False)):
        want, want_w = repeat_reference(m, x, memory, mask, causal)
        got, _ = m(x, memory, key_padding_mask=mask, causal=causal)
        got_w = m(x, memory, key_padding_mask=mask, causal=causal, need_weights=True)[1]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got_w, want_w, atol=1e-6, rtol=1e-5)
    assert projection(m, "k")[0].shape == (kv * 5, 24) and projection(m, "v")[0].shape == (kv * 7, 24)


@pytest.mark.parametrize("kernel", ["math", "sdpa"])
@pytest.mark.parametrize("impl", ["fused", "per_head"])
def test_kv_heads_equal_to_heads_is_the_plain_layer_bit_for_bit(impl, kernel):
    torch.manual_seed(0)
    plain = MultiHeadAttention(AttentionConfig(32, 4, 6, 10, impl=impl, kernel=kernel)).eval()
    torch.manual_seed(0)
    shared = MultiHeadAttention(AttentionConfig(32, 4, 6, 10, impl=impl, kernel=kernel, kv_heads=4)).eval()
    a, b = plain.state_dict(), shared.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # old checkpoints load as they are
    x, mem = torch.randn(3, 5, 32), torch.randn(3, 7, 32)
    pad = padding_mask([7, 4, 2], 7)
    assert torch.equal(plain(x, causal=True)[0], shared(x, causal=True)[0])
    for p, s in zip(
        plain(x, mem, key_padding_mask=pad, need_weights=True), shared(x, mem, key_padding_mask=pad, need_weights=True)
    ):
        assert torch.equal(p, s)


def test_kv_heads_equal_to_heads_is_the_plain_transformer_bit_for_bit():
    cfg = dict(vocab_size=50, d_model=16, n_layers=2, heads=4, d_ff=24, max_len=32)
    src, tgt = torch.randint(4, 50, (3, 6)), torch.randint(4, 50, (3, 5))
    out = []
    for kw in ({}, {"kv_heads": 4, "fixed_heads": {"enc_self": 0}, "fixed_patterns": list(DEFAULT_PATTERNS)}):
        torch.manual_seed(1)
        net = Transformer(TransformerConfig(**cfg, **kw)).train()
        torch.manual_seed(2)  # the same dropout masks
        out.append(net(src, tgt))
    assert torch.equal(out[0], out[1])


@settings(max_examples=25, deadline=None)
@given(
    heads=st.sampled_from([1, 2, 4, 6]),
    share=st.integers(0, 3),
    fixed=st.integers(0, 6),
    d_k=st.integers(1, 6),
    d_v=st.integers(1, 6),
    bias=st.booleans(),
    impl=st.sampled_from(["fused", "per_head"]),
)
def test_fused_equals_per_head_with_shared_and_fixed_heads(heads, share, fixed, d_k, d_v, bias, impl):
    divisors = [d for d in range(1, heads + 1) if heads % d == 0]
    kv, fixed = (divisors[share % len(divisors)], 0) if share else (None, min(fixed, heads))
    torch.manual_seed(heads * 7 + fixed)
    m = MultiHeadAttention(
        AttentionConfig(12, heads, d_k, d_v, bias=bias, impl=impl, kv_heads=kv, fixed=DEFAULT_PATTERNS[:fixed])
    ).eval()
    other = convert_impl(m, "per_head" if impl == "fused" else "fused")
    back = convert_impl(other, impl)
    n = sum(p.numel() for p in m.parameters())
    assert (
        n == sum(p.numel() for p in other.parameters()) == attention_param_count(12, heads, d_k, d_v, bias, kv, fixed)
    )
    x, pad = torch.randn(2, 5, 12), padding_mask([5, 3], 5)
    a, wa = m(x, key_padding_mask=pad, need_weights=True)
    b, wb = other(x, key_padding_mask=pad, need_weights=True)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(wa, wb, atol=1e-6, rtol=1e-5)
    assert torch.equal(a, back(x, key_padding_mask=pad)[0])


@settings(max_examples=40, deadline=None)
@given(
    heads=st.integers(1, 12),
    d_k=st.integers(1, 40),
    d_v=st.integers(1, 40),
    d_model=st.integers(1, 64),
    bias=st.booleans(),
    share=st.booleans(),
    pick=st.integers(0, 11),
    impl=st.sampled_from(["fused", "per_head"]),
)
def test_parameter_count_closed_form_with_shared_and_fixed_heads(heads, d_k, d_v, d_model, bias, share, pick, impl):
    divisors = [d for d in range(1, heads + 1) if heads % d == 0]
    kv = divisors[pick % len(divisors)] if share else None
    fixed = 0 if share else min(pick, heads, len(DEFAULT_PATTERNS))
    with torch.device("meta"):
        m = MultiHeadAttention(
            AttentionConfig(d_model, heads, d_k, d_v, bias=bias, impl=impl, kv_heads=kv, fixed=DEFAULT_PATTERNS[:fixed])
        )
    k = kv or heads
    # W^Q for the learned query heads, W^K for the key heads they use, W^V for every value head, then W^O
    closed = d_model * ((heads - fixed) * d_k + (k - fixed) * d_k + k * d_v) + heads * d_v * d_model
    if bias:
        closed += (heads - fixed) * d_k + (k - fixed) * d_k + k * d_v + d_model
    assert (
        sum(p.numel() for p in m.parameters())
        == closed
        == attention_param_count(d_model, heads, d_k, d_v, bias, kv, fixed)
    )


@pytest.mark.parametrize(
    "kw", [{"kv_heads": 1}, {"kv_heads": 2, "impl": "per_head"}, {"fixed_heads": {"enc_self": 3, "dec_self": 2}}]
)
def test_parameter_counts_by_part(kw):
    cfg = TransformerConfig(vocab_size=50, d_model=16, n_layers=2, heads=4, d_ff=24, max_len=32, **kw)
    counts = count_parameters(Transformer(cfg))
    fixed = cfg.fixed_heads or {}
    for kind in ("enc_self", "dec_self", "cross"):
        per_layer = attention_param_count(16, 4, 4, 4, True, cfg.kv_heads, fixed.get(kind, 0))
        assert counts[f"attn_{kind}"] == 2 * per_layer
    plain = count_parameters(
        Transformer(TransformerConfig(vocab_size=50, d_model=16, n_layers=2, heads=4, d_ff=24, max_len=32))
    )
    assert counts["ffn"] == plain["ffn"] and counts["attention"] < plain["attention"]


def small_model(seed: int, **kw) -> Transformer:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=12, d_model=16, n_layers=2, heads=4, d_ff=32, max_len=64, tie_embeddings=False)
    model = Transformer(TransformerConfig(**{**cfg, **kw})).eval()
    with torch.no_grad():  # peaked distributions, so EOS sometimes wins and beams end at different steps
        model.embed.weight.mul_(4)
    return model


def sources(seed: int, vocab: int, lengths=(7, 4, 6, 9)) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.randint(3, vocab, (n,), generator=g)
    return src


CACHED_CASES = [
    {"kv_heads": 1},
    {"kv_heads": 2, "impl": "per_head"},
    {
        "fixed_heads": {"enc_self": 7, "dec_self": 2},
        "heads": 8,
        "fixed_patterns": ["prev", "left2", "cur", "next", "right2", "first", "last"],
    },
]


@pytest.mark.parametrize("kw", CACHED_CASES)
@pytest.mark.parametrize("seed", [1, 2])
def test_cached_decoders_equal_naive_ones(kw, seed):
    model = small_model(seed, **kw)
    src = sources(seed, 12)
    assert torch.equal(decoding.greedy(model, src, BOS, EOS, 15), decoding.greedy_naive(model, src, BOS, EOS, 15))
    assert torch.equal(
        decoding.beam_search(model, src, BOS, EOS, 15, 3, 0.6),
        decoding.beam_search_naive(model, src, BOS, EOS, 15, 3, 0.6),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"kv_heads": 1},
        {"kv_heads": 2, "d_k": 3, "d_v": 5},
        {"fixed_heads": {"dec_self": 2}, "fixed_patterns": ["prev", "first"]},
    ],
)
def test_kv_cache_bytes_match_the_closed_form(kw, dtype):
    model = small_model(4, **kw)
    cfg = model.cfg
    src, steps = sources(4, 12), 5
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        memory, src_pad = model.encode(src)
        cache = model.new_cache()
        for _ in range(steps):
            model.decode(torch.full((4, 1), BOS), memory, src_pad, cache)
    measured_self = sum(c.self_attn.k.nbytes + c.self_attn.v.nbytes for c in cache) / (4 * steps)
    measured_cross = sum(c.cross_attn.k.nbytes + c.cross_attn.v.nbytes for c in cache) / src.numel()
    # per token and layer: 2 kv_heads d values (keys and values), minus the keys fixed heads do not need
    kv, d_k, d_v, fixed = cfg.kv_heads or cfg.heads, cfg.d_k or 4, cfg.d_v or 4, len(cfg.fixed("dec_self"))
    size = torch.finfo(dtype).bits // 8
    assert measured_self == cfg.n_layers * ((kv - fixed) * d_k + kv * d_v) * size
    assert kv_cache_bytes(cfg, size) == {
        "self_per_target_token": measured_self,
        "cross_per_source_token": measured_cross,
    }


def test_one_kv_head_shrinks_the_cache_by_h():
    plain, shared = kv_cache_bytes(small_model(4).cfg), kv_cache_bytes(small_model(4, kv_heads=1).cfg)
    assert {k: v // 4 for k, v in plain.items()} == shared


# Each pattern's weights over a 5-token sentence and over one of 3 real tokens padded to 5 (rows: queries
# 0..2 of the short one), written out by hand.
EXPECTED = {
    "cur": (
        [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 1]],
        [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0]],
    ),
    "prev": (
        [[1, 0, 0, 0, 0], [1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0]],
        [[1, 0, 0, 0, 0], [1, 0, 0, 0, 0], [0, 1, 0, 0, 0]],
    ),
    "next": (
        [[0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 1]],
        [[0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 0, 0]],
    ),
    "left2": (
        [[1, 0, 0, 0, 0], [1, 0, 0, 0, 0], [0.5, 0.5, 0, 0, 0], [0, 0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5, 0]],
        [[1, 0, 0, 0, 0], [1, 0, 0, 0, 0], [0.5, 0.5, 0, 0, 0]],
    ),
    "right3": (
        [
            [0, 1 / 3, 1 / 3, 1 / 3, 0],
            [0, 0, 1 / 3, 1 / 3, 1 / 3],
            [0, 0, 0, 0.5, 0.5],
            [0, 0, 0, 0, 1],
            [0, 0, 0, 0, 1],
        ],
        [[0, 0.5, 0.5, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 0, 0]],
    ),
    "first": ([[1, 0, 0, 0, 0]] * 5, [[1, 0, 0, 0, 0]] * 3),
    "last": ([[0, 0, 0, 0, 1]] * 5, [[0, 0, 1, 0, 0]] * 3),
}


def test_each_fixed_pattern_exactly_with_padding():
    patterns = list(EXPECTED)
    a = FixedPatterns(patterns)(5, 5, padding_mask([5, 3], 5), False, torch.float32, "cpu")  # (B, n, Tq, Tk)
    for i, name in enumerate(patterns):
        full, short = EXPECTED[name]
        torch.testing.assert_close(a[0, i], torch.tensor(full, dtype=torch.float32), atol=1e-7, rtol=0)
        torch.testing.assert_close(a[1, i, :3], torch.tensor(short, dtype=torch.float32), atol=1e-7, rtol=0)
    assert torch.all(a[1, :, :3, 3:] == 0)  # no real query looks at padding keys
    torch.testing.assert_close(a.sum(-1), torch.ones(2, len(patterns), 5))  # padding queries too: no NaN


def test_fixed_patterns_in_incremental_decoding_see_the_cached_positions():
    pat = FixedPatterns(["prev", "left2", "first", "cur"])
    full = pat(6, 6, None, True, torch.float32, "cpu")[0]  # (n, 6, 6)
    for t in range(6):  # step t: one query at position t over keys 0..t
        step = pat(1, t + 1, None, True, torch.float32, "cpu")[0, :, 0]  # (n, t + 1)
        torch.testing.assert_close(step, full[:, t, : t + 1])
    with pytest.raises(ValueError, match=r"\['next'\] look at later tokens"):
        FixedPatterns(["cur", "next"])(3, 3, None, True, torch.float32, "cpu")


@pytest.mark.parametrize("impl", ["fused", "per_head"])
def test_fixed_heads_attend_by_their_patterns_with_no_query_or_key_weights(impl):
    torch.manual_seed(5)
    m = MultiHeadAttention(AttentionConfig(16, 4, 3, 5, impl=impl, fixed=["prev", "first"]))
    assert projection(m, "q")[0].shape == (2 * 3, 16) and projection(m, "k")[0].shape == (2 * 3, 16)
    assert projection(m, "v")[0].shape == (4 * 5, 16)  # every head keeps W^V
    x, pad = torch.randn(2, 5, 16), padding_mask([5, 3], 5)
    out, w = m(x, key_padding_mask=pad, need_weights=True)
    want = FixedPatterns(["prev", "first"])(5, 5, pad, False, torch.float32, "cpu")
    assert torch.equal(w[:, :2], want.expand(2, -1, -1, -1))
    # the fixed heads' part of the output reads neither W^Q nor W^K: gate the learned heads off, change those
    gate = torch.tensor([1.0, 1.0, 0.0, 0.0])
    before = m(x, key_padding_mask=pad, gate=gate)[0]
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.startswith(("q_", "k_")):
                p.normal_()
    torch.testing.assert_close(m(x, key_padding_mask=pad, gate=gate)[0], before)
    # and it is A V W^V W^O: the fixed weights times the values, written out
    wv, bv = projection(m, "v")
    v = (x @ wv.T + bv).view(2, 5, 4, 5).transpose(1, 2)[:, :2]
    heads = torch.cat([want @ v, torch.zeros(2, 2, 5, 5)], 1).transpose(1, 2).reshape(2, 5, 20)
    torch.testing.assert_close(before, heads @ m.out_proj.weight.T + m.out_proj.bias, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("impl", ["fused", "per_head"])
def test_every_head_fixed_has_no_query_key_parameters_and_gradients_reach_the_rest(impl):
    m = MultiHeadAttention(AttentionConfig(16, 2, 4, 4, impl=impl, fixed=["cur", "prev"]))
    names = {n for n, _ in m.named_parameters()}
    assert not any(n.startswith(("q_", "k_")) for n in names), names
    assert (
        sum(p.numel() for p in m.parameters())
        == attention_param_count(16, 2, 4, 4, True, None, 2)
        == (16 * 8 + 8) + (8 * 16 + 16)
    )  # W^V, W^O
    x = torch.randn(2, 4, 16, requires_grad=True)
    m(x)[0].square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in m.parameters())


def test_fixed_head_grads_reach_values_not_learned_queries_of_other_heads():
    torch.manual_seed(6)
    m = MultiHeadAttention(AttentionConfig(16, 4, 4, 4, fixed=["prev"]))
    x = torch.randn(2, 5, 16)
    gate = torch.tensor([1.0, 0.0, 0.0, 0.0])  # the fixed head alone
    m(x, gate=gate)[0].square().sum().backward()
    assert m.v_proj.weight.grad[:4].abs().sum() > 0  # its W^V learns
    assert m.q_proj.weight.grad.abs().sum() == 0 and m.k_proj.weight.grad.abs().sum() == 0  # no Q/K of its own


def test_head_analysis_treats_fixed_heads_as_heads():
    torch.manual_seed(7)
    cfg = TransformerConfig(
        vocab_size=30,
        d_model=16,
        n_layers=2,
        heads=4,
        d_ff=24,
        max_len=32,
        fixed_heads={"enc_self": 3},
        fixed_patterns=["prev", "next", "cur"],
    )
    net = Transformer(cfg).eval()
    src = torch.randint(3, 30, (3, 7))
    src[1, 5:] = PAD
    tgt = torch.randint(3, 30, (3, 6))
    batch = {"src": src, "tgt_in": tgt, "tgt_out": torch.randint(3, 30, (3, 6))}
    grads = gate_gradients(net, batch, PAD)
    assert grads["enc_self"].shape == (3, 2, 4) and grads["enc_self"][:, :, :3].abs().sum() > 0
    with attention_switches(net, record=True), torch.no_grad():
        memory, src_pad = net.encode(src)
        w = net.attention_layers("enc_self")[1].last_weights
    real = src.ne(PAD)
    stats = attention_stats(w, real, real, self_attention=True)
    prev = stats["prev"][0] / stats["prev"][1]
    nxt = stats["next"][0] / stats["next"][1]
    assert prev[0] == 1 and nxt[1] == 1 and prev[2] == 0 and nxt[2] == 0  # the roles analysis sees the patterns


def test_shared_kv_transformer_equals_plain_one_with_repeated_kv_weights():
    """The whole model, every attention kind, forward and backward: a kv_heads = 2 Transformer is the plain
    h = 4 Transformer whose W^K / W^V rows are its shared heads repeated for their query heads, and each
    shared weight's gradient is the sum of its copies' gradients. An independent check of the wiring
    (encoder, decoder, cross-attention), not only of one layer."""
    cfg = dict(vocab_size=50, d_model=16, n_layers=2, heads=4, d_ff=24, max_len=32, dropout=0.0)
    torch.manual_seed(3)
    shared, plain = Transformer(TransformerConfig(**cfg, kv_heads=2)), Transformer(TransformerConfig(**cfg))
    expanded = {}
    for name, p in shared.state_dict().items():
        if any(f"{w}_proj" in name for w in "kv"):  # (kv * d, d_model) rows -> (h * d, ...), each head twice
            p = p.view(2, -1, *p.shape[1:]).repeat_interleave(2, dim=0).flatten(0, 1)
        expanded[name] = p
    plain.load_state_dict(expanded)
    src, tgt = torch.randint(4, 50, (3, 7)), torch.randint(4, 50, (3, 6))
    src[1, 5:] = 0  # padding in the source
    out_shared, out_plain = shared(src, tgt), plain(src, tgt)
    torch.testing.assert_close(out_shared, out_plain, atol=1e-5, rtol=1e-5)
    out_shared.square().mean().backward()
    out_plain.square().mean().backward()
    grads = dict(plain.named_parameters())
    for name, p in shared.named_parameters():
        want = grads[name].grad
        if any(f"{w}_proj" in name for w in "kv"):
            want = want.view(2, 2, -1, *want.shape[1:]).sum(1).flatten(0, 1)
        torch.testing.assert_close(p.grad, want, atol=1e-5, rtol=1e-4, msg=name)
