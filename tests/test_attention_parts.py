"""The parts MultiHeadAttention is made of (issue 52): the kernel fixed at construction, the per-head layout as
the reference the fused layer must match, the KV cache, and the one place a null head size is resolved."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import torch

import headsweep
from headsweep.model import AttentionConfig, MultiHeadAttention, TransformerConfig, convert_impl, resolve_heads
from headsweep.model.kernels import attention, sdpa_attention
from headsweep.model.kv_cache import KVCache
from headsweep.model.patterns import DEFAULT_PATTERNS


@pytest.mark.parametrize(
    "kernel, fixed, expected",
    [("math", 0, attention), ("sdpa", 0, sdpa_attention), ("sdpa", 4, attention)],  # 4 of 4 fixed: nothing for SDPA
)
def test_the_kernel_is_chosen_at_construction(kernel, fixed, expected):
    m = MultiHeadAttention(AttentionConfig(16, 4, kernel=kernel, fixed=DEFAULT_PATTERNS[:fixed]))
    assert m.attend_learned is expected


def test_auto_takes_sdpa_only_where_a_gpu_is():
    expected = sdpa_attention if torch.cuda.is_available() else attention
    assert MultiHeadAttention(AttentionConfig(16, 4)).attend_learned is expected


def test_an_unknown_kernel_is_one_line():
    with pytest.raises(ValueError, match="kernel must be one of"):
        MultiHeadAttention(AttentionConfig(16, 4, kernel="flash"))


def test_forward_reads_as_the_paper():
    lines = inspect.getsource(MultiHeadAttention.forward).splitlines()
    assert len(lines) <= 30
    body = "\n".join(lines)
    steps = [body.index(f"self.{step}(") for step in ("project", "attend", "gate_heads", "out_proj")]
    assert steps == sorted(steps)  # project -> attend -> gate -> W^O
    assert "kernel" not in body and "cuda" not in body  # the kernel is no decision of forward's


@pytest.mark.parametrize("kv_heads, fixed", [(None, 0), (2, 0), (None, 2)])
def test_fused_layer_matches_the_per_head_reference_and_the_check_can_fail(kv_heads, fixed):
    torch.manual_seed(0)
    fused = MultiHeadAttention(AttentionConfig(24, 4, 5, 7, kv_heads=kv_heads, fixed=DEFAULT_PATTERNS[:fixed])).eval()
    reference = convert_impl(fused, "per_head")
    x = torch.randn(3, 6, 24)
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[0, 4:] = True
    out, w = fused(x, key_padding_mask=pad, causal=True, need_weights=True)
    ref_out, ref_w = reference(x, key_padding_mask=pad, causal=True, need_weights=True)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(w, ref_w)
    with torch.no_grad():  # one head's value weights off by a little: the comparison must see it
        reference.v_heads[-1].weight.add_(1e-3)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(fused(x, key_padding_mask=pad)[0], reference(x, key_padding_mask=pad)[0])


def test_kv_cache_appends_self_attention_and_projects_cross_attention_once():
    cache, k, v = KVCache(), torch.randn(2, 1, 1, 3), torch.randn(2, 1, 1, 4)
    assert cache.append(k, v) == (k, v)
    k2, v2 = cache.append(k + 1, v + 1)
    assert k2.shape == (2, 1, 2, 3) and torch.equal(k2[:, :, 1], (k + 1)[:, :, 0]) and v2.shape == (2, 1, 2, 4)
    calls = []
    cross = KVCache()
    for _ in range(3):
        got = cross.once(lambda: calls.append(1) or (k, v))
    assert got == (k, v) and calls == [1]
    cross.reorder(torch.tensor([1]))
    assert cross.k.shape[0] == 1


def test_null_head_sizes_mean_the_paper_defaults():
    assert resolve_heads(512, 8) == (64, 64, 8)
    assert resolve_heads(512, 8, d_k=16, kv_heads=2) == (16, 64, 2)
    assert TransformerConfig(d_model=64, heads=4, d_v=8, kv_heads=2).sizes == (16, 8, 2)


# The ways a null size was spelt out before issue 52: d_model // h, `kv_heads or heads`, `heads if kv_heads is None`.
FALLBACKS = re.compile(
    r"d_model\W{0,3}\s*//\s*\S*h|kv_heads\W{0,3}\s+or\s|heads if kv_heads is None|is None else kv_heads"
    r"|kv_heads\W{0,3} not in \(None"
)


def test_a_null_head_size_is_resolved_in_one_place():
    src = Path(headsweep.__file__).parent
    hits = []
    for path in sorted(src.rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if FALLBACKS.search(line):
                hits.append(f"{path.relative_to(src)}:{n}")
    assert len(hits) == 2 and all(h.startswith("model/config.py:") for h in hits), hits  # resolve_heads' 2 lines
