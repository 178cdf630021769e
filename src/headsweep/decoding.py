"""Decoding: greedy search over the decoder's KV cache, and a naive reference that re-runs the prefix."""

from __future__ import annotations

import torch
from torch import Tensor

from headsweep.model import Transformer


def max_output_length(src: Tensor, pad_id: int, extra: int, limit: int) -> int:
    """The paper's budget: longest input length + `extra` tokens, capped by the model's positions."""
    return min(int(src.ne(pad_id).sum(1).max()) + extra, limit)


@torch.no_grad()
def greedy(model: Transformer, src: Tensor, bos_id: int, eos_id: int, max_len: int) -> Tensor:
    """Batched greedy decoding with the KV cache: encoder keys/values once, one decoder step at a time.

    src (B, S) -> tokens (B, <= max_len), without BOS; rows that ended are padded after their EOS.
    """
    memory, src_pad = model.encode(src)
    cache = model.new_cache()
    B = src.size(0)
    step = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    out = []
    for _ in range(max_len):
        logits = model.decode(step, memory, src_pad, cache)[:, -1]  # (B, vocab)
        step = logits.argmax(-1, keepdim=True)
        step = step.masked_fill(done[:, None], model.cfg.pad_id)
        out.append(step)
        done |= step.squeeze(1).eq(eos_id)
        if done.all():
            break
    return torch.cat(out, dim=1)


@torch.no_grad()
def greedy_naive(model: Transformer, src: Tensor, bos_id: int, eos_id: int, max_len: int) -> Tensor:
    """Greedy decoding that re-runs the whole prefix every step (the reference for the cached one)."""
    memory, src_pad = model.encode(src)
    B = src.size(0)
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        step = model.decode(ys, memory, src_pad)[:, -1].argmax(-1, keepdim=True)
        step = step.masked_fill(done[:, None], model.cfg.pad_id)
        ys = torch.cat([ys, step], dim=1)
        done |= step.squeeze(1).eq(eos_id)
        if done.all():
            break
    return ys[:, 1:]
