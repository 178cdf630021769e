"""What heads do (Voita et al. 2019): statistics of where each head's attention maximum falls.

For every query token (padding excluded), with a = its attention distribution over the keys:

    confidence   max_j a_j                  (1/T for a uniform head over T keys, 1 for a one-hot one)
    entropy      -sum_j a_j log a_j         (log T for a uniform head)
    prev, next   argmax_j a_j is the query's position - 1 / + 1. Self-attention only, and counted over
                 the queries that have such a neighbour (the first token has no previous one; the
                 decoder's causal mask hides every next one), so a pure shift-by-one head scores 100%.
    distance     sum_j a_j |j - i|: how far from the query the attention goes, in tokens. Self-attention
                 only (in cross-attention queries and keys are different sentences).
    rare         argmax_j a_j falls on the sentence's least frequent token, by frequency in the
                 training split. Defined where the keys are the source sentence: encoder
                 self-attention and cross-attention.

A head's value is the mean over all query tokens of the split. Undefined metrics are None.
`layer_roles` sums the heads up per layer: the share with each role, mean entropy and distance.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch import Tensor

from headsweep.model import attention_switches

METRICS = ("confidence", "entropy", "distance", "prev", "next", "rare")


def attention_stats(
    weights: Tensor,
    query_valid: Tensor,
    key_valid: Tensor,
    *,
    self_attention: bool,
    causal: bool = False,
    key_ids: Tensor | None = None,
    key_freq: Tensor | None = None,
) -> dict[str, tuple[Tensor, Tensor]]:
    """Per-head sums and counts of each metric over one batch: {metric: (sum (h,), count ())}.

    weights (B, h, Tq, Tk); query_valid (B, Tq) and key_valid (B, Tk), True at real tokens;
    key_ids (B, Tk) and key_freq (vocab,) for the rare-word metric.
    """
    w = weights.float()
    B, h, Tq, Tk = w.shape
    qv = query_valid[:, None, :]  # (B, 1, Tq), broadcast over heads
    n = query_valid.sum()
    arg = w.argmax(-1)  # (B, h, Tq)
    stats = {
        "confidence": ((w.amax(-1) * qv).sum((0, 2)), n),
        "entropy": ((-torch.xlogy(w, w).sum(-1) * qv).sum((0, 2)), n),
    }
    if self_attention:
        pos = torch.arange(Tq, device=w.device)
        gap = (pos[None, :Tk] - pos[:, None]).abs().to(w.dtype)  # (Tq, Tk): |j - i|
        stats["distance"] = (((w * gap).sum(-1) * qv).sum((0, 2)), n)
        has_prev = query_valid & (pos >= 1)
        stats["prev"] = (((arg == pos - 1) & has_prev[:, None]).sum((0, 2)), has_prev.sum())
        if not causal:
            # Query i has a next token when key i + 1 is real (queries and keys are the same sentence).
            has_next = query_valid & torch.cat([key_valid[:, 1:], key_valid.new_zeros(B, 1)], dim=1)
            stats["next"] = (((arg == pos + 1) & has_next[:, None]).sum((0, 2)), has_next.sum())
    if key_freq is not None and key_ids is not None:
        freq = key_freq.to(w.device, torch.float64)[key_ids].masked_fill(~key_valid, float("inf"))  # (B, Tk)
        rarest = freq.min(-1).values  # (B,): a repeated rarest token counts at each of its positions
        hit = freq.gather(1, arg.reshape(B, h * Tq)).view(B, h, Tq) == rarest[:, None, None]
        stats["rare"] = ((hit & qv).sum((0, 2)), n)
    return stats


class RoleAccumulator:
    """Sums attention_stats over batches, per (kind, layer); `means()` gives the per-head values."""

    def __init__(self):
        self._sums: dict[tuple[str, int, str], list] = defaultdict(lambda: [0.0, 0])

    def add(self, kind: str, layer: int, stats: dict[str, tuple[Tensor, Tensor]]) -> None:
        for metric, (total, count) in stats.items():
            acc = self._sums[(kind, layer, metric)]
            acc[0] = acc[0] + total.double().cpu()
            acc[1] = acc[1] + int(count)

    def means(self, kind: str, layer: int) -> dict[str, list[float | None]]:
        """{metric: one value per head, None where undefined}."""
        out = {}
        heads = None
        for metric in METRICS:
            key = (kind, layer, metric)
            if key in self._sums:
                total, count = self._sums[key]
                values = (total / count).tolist() if count else [None] * len(total)
                heads = len(values)
                out[metric] = values
        return {m: out.get(m, [None] * (heads or 0)) for m in METRICS}


def role_label(
    prev: float | None, next_: float | None, rare: float | None, pos_threshold: float, rare_threshold: float
) -> str:
    """The dominant role: the share above its threshold that is largest, or "-" when none is."""
    candidates = [
        (share, name)
        for share, name, t in (
            (prev, "positional (prev)", pos_threshold),
            (next_, "positional (next)", pos_threshold),
            (rare, "rare words", rare_threshold),
        )
        if share is not None and share >= t
    ]
    return max(candidates)[1] if candidates else "-"


def source_frequencies(datamodule) -> torch.Tensor:
    """How often each subword id occurs in the source side of the training split (rare-word role)."""
    ids = datamodule.encode(datamodule.texts(datamodule.train_split)[0])
    flat = torch.tensor([i for sent in ids for i in sent], dtype=torch.long)
    return torch.bincount(flat, minlength=datamodule.vocab_size_actual)


def collect_roles(net, batches: list[dict], pad_id: int, freq: torch.Tensor) -> RoleAccumulator:
    """Teacher-forced passes over the batches with every module recording its attention weights."""
    acc = RoleAccumulator()
    with attention_switches(net, record=True), torch.no_grad():
        for batch in batches:
            src, tgt = batch["src"], batch["tgt_in"]
            memory, src_pad = net.encode(src)
            net.decode_hidden(tgt, memory, src_pad)
            src_ok, tgt_ok = src.ne(pad_id), tgt.ne(pad_id)
            for layer, m in enumerate(net.attention_layers("enc_self")):
                acc.add(
                    "enc_self",
                    layer,
                    attention_stats(m.last_weights, src_ok, src_ok, self_attention=True, key_ids=src, key_freq=freq),
                )
            for layer, m in enumerate(net.attention_layers("dec_self")):
                acc.add(
                    "dec_self", layer, attention_stats(m.last_weights, tgt_ok, tgt_ok, self_attention=True, causal=True)
                )
            for layer, m in enumerate(net.attention_layers("cross")):
                acc.add(
                    "cross",
                    layer,
                    attention_stats(m.last_weights, tgt_ok, src_ok, self_attention=False, key_ids=src, key_freq=freq),
                )
    return acc


def layer_roles(rows: list[dict]) -> list[dict]:
    """Per (kind, layer): the share of heads with each role, and the mean entropy, distance and confidence
    of its heads (None where undefined)."""
    out = []
    for kind, layer in dict.fromkeys((r["kind"], r["layer"]) for r in rows):
        heads = [r for r in rows if r["kind"] == kind and r["layer"] == layer]
        n = len(heads)

        def mean(metric, heads=heads):
            values = [r[metric] for r in heads if r[metric] is not None]
            return sum(values) / len(values) if values else None

        out.append(
            {
                "kind": kind,
                "layer": layer,
                "heads": n,
                "positional": sum(r["role"].startswith("positional") for r in heads) / n,
                "rare": sum(r["role"] == "rare words" for r in heads) / n,
                "none": sum(r["role"] == "-" for r in heads) / n,
                "entropy": mean("entropy"),
                "distance": mean("distance"),
                "confidence": mean("confidence"),
            }
        )
    return out
