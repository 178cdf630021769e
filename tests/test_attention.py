"""MultiHeadAttention against torch's reference, across layouts, masks, gates and the KV cache."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from headsweep.model.attention import (
    AttentionConfig,
    KVCache,
    MultiHeadAttention,
    attention_param_count,
    convert_impl,
)


def copy_from_torch(ref: nn.MultiheadAttention, kernel: str = "auto") -> MultiHeadAttention:
    d, h = ref.embed_dim, ref.num_heads
    ours = MultiHeadAttention(AttentionConfig(d, h, kernel=kernel))  # the kernel is chosen at construction
    wq, wk, wv = ref.in_proj_weight.chunk(3)
    bq, bk, bv = ref.in_proj_bias.chunk(3)
    with torch.no_grad():
        for proj, w, b in ((ours.q_proj, wq, bq), (ours.k_proj, wk, bk), (ours.v_proj, wv, bv)):
            proj.weight.copy_(w)
            proj.bias.copy_(b)
        ours.out_proj.load_state_dict(ref.out_proj.state_dict())
    return ours.eval()


def padding_mask(lengths, T):
    return torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]  # True at padding


@pytest.mark.parametrize("kernel", ["math", "sdpa"])
@pytest.mark.parametrize("cross", [False, True])
def test_matches_torch_multihead_attention(cross, kernel):
    torch.manual_seed(0)
    d, h, B, Tq, Tk = 32, 4, 3, 5, 7 if cross else 5
    ref = nn.MultiheadAttention(d, h, batch_first=True).eval()
    ours = copy_from_torch(ref, kernel)
    x, mem = torch.randn(B, Tq, d), torch.randn(B, Tk, d)
    kv = mem if cross else x
    pad = padding_mask([Tk, Tk - 2, 1], Tk)
    want, want_w = ref(x, kv, kv, key_padding_mask=pad, average_attn_weights=False)
    got, _ = ours(x, mem if cross else None, key_padding_mask=pad)
    got_exact, got_w = ours(x, mem if cross else None, key_padding_mask=pad, need_weights=True)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_exact, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_w, want_w, atol=1e-6, rtol=1e-5)
    assert got_w.shape == (B, h, Tq, Tk)


@pytest.mark.parametrize("kernel", ["math", "sdpa"])  # sdpa: is_causal=True, no mask tensor
def test_causal_matches_torch(kernel):
    torch.manual_seed(1)
    ref = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    ours = copy_from_torch(ref, kernel)
    x = torch.randn(2, 6, 16)
    causal = torch.ones(6, 6, dtype=torch.bool).triu(1)  # torch: True = masked
    want, _ = ref(x, x, x, attn_mask=causal)
    got, _ = ours(x, causal=True)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    heads=st.integers(1, 6),
    d_k=st.integers(1, 12),
    d_v=st.integers(1, 12),
    d_model=st.sampled_from([8, 12, 20]),
    bias=st.booleans(),
    cross=st.booleans(),
)
def test_fused_equals_per_head(heads, d_k, d_v, d_model, bias, cross):
    torch.manual_seed(heads * 100 + d_k * 10 + d_v)
    fused = MultiHeadAttention(AttentionConfig(d_model, heads, d_k, d_v, bias=bias)).eval()
    per_head = convert_impl(fused, "per_head")
    back = convert_impl(per_head, "fused")
    assert sum(p.numel() for p in per_head.parameters()) == sum(p.numel() for p in fused.parameters())
    x, mem = torch.randn(2, 4, d_model), torch.randn(2, 3, d_model) if cross else None
    pad = padding_mask([3, 2], 3) if cross else padding_mask([4, 2], 4)
    a, wa = fused(x, mem, key_padding_mask=pad, need_weights=True)
    b, wb = per_head(x, mem, key_padding_mask=pad, need_weights=True)
    c, _ = back(x, mem, key_padding_mask=pad)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(wa, wb, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(a, c, atol=0, rtol=0)


@settings(max_examples=40, deadline=None)
@given(
    heads=st.integers(1, 16),
    d_k=st.integers(1, 80),
    d_v=st.integers(1, 80),
    d_model=st.integers(1, 96),
    bias=st.booleans(),
    impl=st.sampled_from(["fused", "per_head"]),
)
def test_parameter_count_closed_form(heads, d_k, d_v, d_model, bias, impl):
    with torch.device("meta"):
        mha = MultiHeadAttention(AttentionConfig(d_model, heads, d_k, d_v, bias=bias, impl=impl))
    closed = heads * d_model * (2 * d_k + d_v) + heads * d_v * d_model
    if bias:
        closed += heads * (2 * d_k + d_v) + d_model
    assert sum(p.numel() for p in mha.parameters()) == closed == attention_param_count(d_model, heads, d_k, d_v, bias)


def test_defaults_and_bad_sizes():
    mha = MultiHeadAttention(AttentionConfig(64, 8))
    assert (mha.d_k, mha.d_v) == (8, 8)
    row_b = MultiHeadAttention(AttentionConfig(512, 8, d_k=16, d_v=64))  # Table 3 row B
    assert row_b.q_proj.out_features == 128 and row_b.v_proj.out_features == 512
    with pytest.raises(ValueError, match="heads=3 does not divide d_model=64: set d_k and d_v"):
        MultiHeadAttention(AttentionConfig(64, 3))
    MultiHeadAttention(AttentionConfig(64, 3, d_k=20, d_v=21))  # explicit sizes need no divisibility


@pytest.mark.parametrize("impl", ["fused", "per_head"])
def test_padding_does_not_change_real_positions(impl):
    torch.manual_seed(2)
    mha = MultiHeadAttention(AttentionConfig(24, 3, 5, 7, impl=impl)).eval()
    x = torch.randn(2, 4, 24)
    out, _ = mha(x, key_padding_mask=padding_mask([4, 3], 4))
    more = torch.cat([x, torch.randn(2, 3, 24)], dim=1)  # three extra padded positions
    out_more, _ = mha(more, key_padding_mask=padding_mask([4, 3], 7))
    torch.testing.assert_close(out_more[0, :4], out[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_more[1, :3], out[1, :3], atol=1e-5, rtol=1e-5)


def test_causal_later_tokens_do_not_leak():
    torch.manual_seed(3)
    mha = MultiHeadAttention(AttentionConfig(16, 4)).eval()
    x = torch.randn(1, 6, 16)
    y = x.clone()
    y[0, 4:] = torch.randn(2, 16)
    a, _ = mha(x, causal=True)
    b, _ = mha(y, causal=True)
    torch.testing.assert_close(a[0, :4], b[0, :4])
    assert not torch.allclose(a[0, 4:], b[0, 4:])


def test_gates():
    torch.manual_seed(4)
    mha = MultiHeadAttention(AttentionConfig(16, 4, d_k=3, d_v=5)).eval()
    x = torch.randn(2, 5, 16)
    plain, _ = mha(x)
    ones, _ = mha(x, gate=torch.ones(4))
    torch.testing.assert_close(ones, plain)
    gated, _ = mha(x, gate=torch.tensor([1.0, 0.0, 1.0, 1.0]))
    with torch.no_grad():
        mha.out_proj.weight[:, 5:10] = 0  # head 1's input columns of W^O
    zeroed, _ = mha(x)
    torch.testing.assert_close(gated, zeroed)
    # per-sentence gates (B, h): row 0 keeps everything, row 1 drops head 1
    per_row, _ = mha(x, gate=torch.tensor([[1.0, 1, 1, 1], [1, 0, 1, 1]]))
    torch.testing.assert_close(per_row[1], zeroed[1])


@pytest.mark.parametrize("impl", ["fused", "per_head"])
def test_incremental_decoding_equals_full_prefix(impl):
    torch.manual_seed(6)
    self_attn = MultiHeadAttention(AttentionConfig(16, 4, 3, 6, impl=impl)).eval()
    cross = MultiHeadAttention(AttentionConfig(16, 4, 3, 6, impl=impl)).eval()
    x, mem = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    mem_pad = padding_mask([7, 4], 7)

    def block(inp, c_self=None, c_cross=None):
        h, _ = self_attn(inp, causal=True, cache=c_self)
        out, _ = cross(h, mem, key_padding_mask=mem_pad, cache=c_cross)
        return out

    full = block(x)
    c_self, c_cross = KVCache(), KVCache()
    steps = [block(x[:, t : t + 1], c_self, c_cross) for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert c_self.k.shape == (2, 4, 5, 3) and c_cross.v.shape == (2, 4, 7, 6)

    c_self.reorder(torch.tensor([1, 1]))
    assert torch.equal(c_self.k[0], c_self.k[1])
