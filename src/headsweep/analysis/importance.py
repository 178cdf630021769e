"""Head importance (Michel et al. 2019) and removing heads through their gates.

Every attention module multiplies head h's output by a gate xi_h before W^O (MultiHeadAttention.gate);
xi_h = 0 removes the head. Head h's importance is

    I_h = E_x | dL(x) / dxi_h |   at xi = 1,

the expected first-order change of a sentence's loss when the head is removed. L(x) is the sentence's
summed token NLL (no label smoothing), so the expectation is over sentences, as in Michel's formula.
Each layer's scores are then divided by their l2 norm, which Michel found necessary to compare heads
of different layers (the global pruning order uses the normalised scores).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import Tensor

from headsweep.model import ATTENTION_KINDS, Transformer, attention_switches

Head = tuple[str, int, int]  # (attention kind, layer, head)
POOLS = ("all", *ATTENTION_KINDS)  # pruning within each kind, and over all heads together
NORMALISATION = "each layer's importance scores divided by their l2 norm (Michel et al. 2019)"
KIND_NAMES = {
    "enc_self": "encoder self-attention",
    "dec_self": "decoder self-attention",
    "cross": "encoder-decoder attention",
}


def all_heads(net: Transformer, kinds: Iterable[str] = ATTENTION_KINDS) -> list[Head]:
    return [
        (kind, layer, h) for kind in kinds for layer, m in enumerate(net.attention_layers(kind)) for h in range(m.heads)
    ]


def gated(net: Transformer, pruned: Iterable[Head]):
    """A context in which every attention module's default gate is 1, and 0 at the pruned heads.

    Gates are set even when nothing is pruned (all ones), so "0% pruned" runs the same code path as
    any other point of a pruning curve. The previous gates are restored on exit.
    """
    pruned = set(pruned)
    weight = net.output_weight
    gates = {
        kind: [
            torch.tensor(
                [0.0 if (kind, layer, h) in pruned else 1.0 for h in range(m.heads)],
                dtype=weight.dtype,
                device=weight.device,
            )
            for layer, m in enumerate(net.attention_layers(kind))
        ]
        for kind in ATTENTION_KINDS
    }
    return attention_switches(net, gates)


def sentence_losses(net: Transformer, batch: dict, pad_id: int, encoded: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """Teacher-forced loss of each sentence, (B,): the sum of its target tokens' NLL, no smoothing.
    `encoded`: the batch's (memory, source padding) from net.encode, when already computed."""
    memory, src_pad = encoded if encoded is not None else net.encode(batch["src"])
    hidden = net.decode_hidden(batch["tgt_in"], memory, src_pad)  # (B, T, d_model)
    real = batch["tgt_out"].ne(pad_id)
    # Logits of the real tokens only: the padded (B, T, vocab) block would be mostly wasted memory.
    nll = F.cross_entropy(net.logits(hidden[real]), batch["tgt_out"][real], reduction="none")
    rows = torch.arange(real.size(0), device=real.device)[:, None].expand_as(real)[real]
    return torch.zeros(real.size(0), dtype=nll.dtype, device=nll.device).index_add(0, rows, nll)


def gate_gradients(net: Transformer, batch: dict, pad_id: int) -> dict[str, Tensor]:
    """dL(x)/dxi_h of every sentence x at xi = 1: {kind: (B, layers, heads)}.

    Each sentence gets its own gate row (gates of shape (B, h)). Sentence x's loss depends only on
    its own row, so the gradient of the summed loss with respect to row x is dL(x)/dxi: one backward
    pass gives every sentence's gradient.
    """
    B = batch["src"].size(0)
    weight = net.output_weight
    gates = {
        kind: [
            torch.ones(B, m.heads, dtype=weight.dtype, device=weight.device, requires_grad=True)
            for m in net.attention_layers(kind)
        ]
        for kind in ATTENTION_KINDS
    }
    with attention_switches(net, gates), torch.enable_grad():
        total = sentence_losses(net, batch, pad_id).sum()
        grads = torch.autograd.grad(total, [g for kind in ATTENTION_KINDS for g in gates[kind]])
    out, i = {}, 0
    for kind in ATTENTION_KINDS:
        n = len(gates[kind])
        out[kind] = torch.stack(grads[i : i + n], dim=1)  # (B, layers, heads)
        i += n
    return out


def head_importance(net: Transformer, batches: Iterable[dict], pad_id: int) -> dict[str, Tensor]:
    """I_h = mean over sentences of |dL(x)/dxi_h|: {kind: (layers, heads)}, not normalised."""
    sums, n = None, 0
    for batch in batches:
        grads = gate_gradients(net, batch, pad_id)
        absum = {kind: g.abs().sum(0).detach() for kind, g in grads.items()}
        sums = absum if sums is None else {k: sums[k] + absum[k] for k in sums}
        n += batch["src"].size(0)
    if not n:
        raise ValueError("no sentences to compute head importance on")
    return {kind: s / n for kind, s in sums.items()}


def normalise_per_layer(scores: dict[str, Tensor]) -> dict[str, Tensor]:
    """Each layer's scores divided by their l2 norm (a layer of all zeros stays zero)."""
    return {kind: s / s.norm(dim=-1, keepdim=True).clamp_min(1e-12) for kind, s in scores.items()}


def pruning_order(scores: dict[str, Tensor], kinds: Iterable[str] = ATTENTION_KINDS) -> list[Head]:
    """The heads of `kinds`, least important first (ties in (kind, layer, head) order)."""
    heads = [
        (kind, layer, h) for kind in kinds for layer in range(scores[kind].size(0)) for h in range(scores[kind].size(1))
    ]
    return sorted(heads, key=lambda head: float(scores[head[0]][head[1], head[2]]))


def fractions(step: float) -> list[float]:
    """0, step, 2 step, ..., 1 (the last point is 1 even if step does not divide it)."""
    if not 0 < step <= 1:
        raise ValueError(f"the pruning step must be in (0, 1], got {step}")
    n = math.ceil(1 / step - 1e-9)
    return [float(min(round(i * step, 10), 1.0)) for i in range(n + 1)]


def pruned_at(order: list[Head], fraction: float) -> list[Head]:
    """The first round(fraction * len(order)) heads of `order`: what is removed at that fraction."""
    return order[: int(round(fraction * len(order)))]
