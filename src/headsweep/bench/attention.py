"""Attention speed: forward + backward of our layer (plain matmul-softmax-matmul and SDPA kernels) vs
torch.nn.MultiheadAttention, at every h of Table 3 row A."""

from __future__ import annotations

import time

import torch
from torch import nn

from headsweep.model import AttentionConfig, MultiHeadAttention


def bench_attention(reps: int = 10, bf16: bool = True) -> None:
    """Forward + backward of one self-attention layer at d_model 256, batch of 3,200 tokens."""
    B, T, d = 128, 25, 256
    print(
        f"\n## Attention layer: forward + backward, B={B}, T={T}, d_model={d} "
        "(ms; ratio = torch / ours, >1 = ours faster)"
    )
    print(f"{'dtype':<6}{'h':>4}{'ours':>9}{'ours sdpa':>11}{'torch MHA':>11}{'ratio':>8}")
    for use_bf16 in (False, True) if bf16 else (False,):
        for h in (1, 4, 8, 16, 32):
            x = torch.randn(B, T, d, requires_grad=True)
            pad = torch.zeros(B, T, dtype=torch.bool)
            pad[: B // 2, T - 5 :] = True
            ours, sdpa = (
                MultiHeadAttention(AttentionConfig(d, h, kernel="math")),
                MultiHeadAttention(AttentionConfig(d, h, kernel="sdpa")),
            )
            ref = nn.MultiheadAttention(d, h, batch_first=True)

            def run_ours(m=ours, x=x, pad=pad):
                m(x, key_padding_mask=pad)[0].sum().backward()

            def run_sdpa(m=sdpa, x=x, pad=pad):
                m(x, key_padding_mask=pad)[0].sum().backward()

            def run_ref(m=ref, x=x, pad=pad):
                m(x, x, x, key_padding_mask=pad, need_weights=False)[0].sum().backward()

            times = [_time(f, reps, use_bf16) for f in (run_ours, run_sdpa, run_ref)]
            print(
                f"{'bf16' if use_bf16 else 'fp32':<6}{h:>4}{times[0]:>9.1f}{times[1]:>11.1f}{times[2]:>11.1f}"
                f"{times[2] / times[0]:>8.2f}",
                flush=True,
            )


def _time(fn, reps: int, bf16: bool) -> float:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        fn()
        t = time.perf_counter()
        for _ in range(reps):
            fn()
    return (time.perf_counter() - t) / reps * 1000
