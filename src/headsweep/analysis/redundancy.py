"""Head redundancy (Clark et al. 2019): how alike two heads' attention distributions are on the same sentences.

For two heads i, j of one attention kind (any layers: they attend over the same keys) and a query token
with distributions p, q over the keys,

    JS(p, q) = H((p + q) / 2) - (H(p) + H(q)) / 2        in bits: 0 = identical, 1 = disjoint supports

averaged over every real query token. Heads are then clustered (average linkage on the JS matrix) and
groups whose members average at most `threshold` bits apart are named as near-duplicates. A head's
redundancy is its JS to the nearest other head: does a head with a near twin prune cheaply?
"""

from __future__ import annotations

import math

import torch
from scipy.cluster.hierarchy import fcluster, leaves_list, linkage
from scipy.spatial.distance import squareform
from scipy.stats import spearmanr
from torch import Tensor

from headsweep.model import ATTENTION_KINDS, attention_switches
from headsweep.model.head_init import head_vectors, mean_pairwise_cosine


def entropy_bits(p: Tensor) -> Tensor:
    """-sum p log2 p over the last dimension."""
    return -torch.xlogy(p, p).sum(-1) / math.log(2)


def pairwise_js(weights: Tensor, query_valid: Tensor) -> Tensor:
    """Summed JS divergence (bits) over the valid queries for every pair of the n heads: (n, n).

    weights (B, n, Tq, Tk), query_valid (B, Tq)."""
    w = weights.float()
    n = w.size(1)
    h = entropy_bits(w)  # (B, n, Tq)
    valid = query_valid[:, None, :].float()  # (B, 1, Tq)
    out = torch.zeros(n, n)
    for i in range(n):
        mix = entropy_bits((w[:, i : i + 1] + w) / 2)  # (B, n, Tq): H of each pair's mixture
        js = mix - (h[:, i : i + 1] + h) / 2
        out[i] = (js.clamp_min(0) * valid).sum((0, 2)).cpu()
    return out


def collect_js(net, batches: list[dict], pad_id: int) -> dict[str, Tensor]:
    """{kind: (L*h, L*h) mean JS in bits}, heads ordered layer by layer, from teacher-forced passes."""
    sums, count = {}, {kind: 0 for kind in ATTENTION_KINDS}
    with attention_switches(net, record=True), torch.no_grad():
        for batch in batches:
            src, tgt = batch["src"], batch["tgt_in"]
            memory, src_pad = net.encode(src)
            net.decode_hidden(tgt, memory, src_pad)
            queries = {"enc_self": src.ne(pad_id), "dec_self": tgt.ne(pad_id), "cross": tgt.ne(pad_id)}
            for kind in ATTENTION_KINDS:
                stacked = torch.cat([m.last_weights for m in net.attention_layers(kind)], dim=1)  # (B, L*h, Tq, Tk)
                js = pairwise_js(stacked, queries[kind])
                sums[kind] = js if kind not in sums else sums[kind] + js
                count[kind] += int(queries[kind].sum())
    return {kind: sums[kind] / max(count[kind], 1) for kind in ATTENTION_KINDS}


def head_names(layers: int, heads: int) -> list[str]:
    return [f"L{layer}H{h}" for layer in range(layers) for h in range(heads)]


def cluster(js: Tensor, threshold: float) -> tuple[list[int], list[list[int]]]:
    """(leaf order of an average-linkage clustering, groups of >= 2 heads within `threshold` bits on average)."""
    n = js.size(0)
    if n < 2:
        return list(range(n)), []
    d = ((js + js.T) / 2).fill_diagonal_(0).clamp_min(0).numpy()
    z = linkage(squareform(d, checks=False), method="average")
    labels = fcluster(z, t=threshold, criterion="distance")
    groups = [[i for i in range(n) if labels[i] == c] for c in sorted(set(labels))]
    return leaves_list(z).tolist(), sorted((g for g in groups if len(g) > 1), key=lambda g: g[0])


def nearest_twin(js: Tensor) -> Tensor:
    """(n,): each head's JS to the most similar other head."""
    d = (js + js.T) / 2
    return d.fill_diagonal_(float("inf")).min(1).values


def redundancy(js: dict[str, Tensor], heads: int, single: list[dict], threshold: float) -> dict:
    """Per kind: the JS matrix, the clustering order, near-duplicate groups, and the rank correlation
    between each head's nearest-twin JS and the loss increase when it alone is removed (over the split)."""
    delta = {(s["kind"], s["layer"], s["head"]): s["delta_loss"] for s in single}
    out = {"threshold_bits": threshold, "kinds": {}}
    for kind, m in js.items():
        layers = m.size(0) // heads
        names = head_names(layers, heads)
        order, groups = cluster(m, threshold)
        twin = nearest_twin(m.clone()).tolist()
        lost = [delta[(kind, i // heads, i % heads)] for i in range(m.size(0))]
        rho, p = spearmanr(twin, lost) if m.size(0) > 2 else (float("nan"), float("nan"))
        out["kinds"][kind] = {
            "names": names,
            "js_bits": m.tolist(),
            "order": order,
            "groups": [[names[i] for i in g] for g in groups],
            "nearest_twin_bits": twin,
            "mean_js_bits": float(m.sum() / max(m.numel() - m.size(0), 1)),
            "twin_vs_loss_increase": {"spearman_rho": float(rho), "p": float(p), "n": m.size(0)},
        }
    return out


def within_layers(js: Tensor, heads: int) -> float:
    """The mean JS (bits) over pairs of heads of the same layer, from collect_js's (L*h, L*h) matrix; nan at h 1."""
    layers = js.size(0) // heads
    if heads < 2:
        return float("nan")
    blocks = [js[i * heads : (i + 1) * heads, i * heads : (i + 1) * heads] for i in range(layers)]
    return float(sum(b.sum() - b.diagonal().sum() for b in blocks) / (layers * heads * (heads - 1)))


def head_similarity(net, batch: dict, pad_id: int) -> dict[str, dict[str, float]]:
    """How alike each layer's heads are (issue 53), per attention kind, averaged over its layers: `cos_qkv`, the
    mean pairwise cosine between heads' W^Q, W^K and W^V slices (concatenated per head; nan with fixed heads),
    `cos_o` between their W^O blocks (1: identical, about 0: independent draws), and `js`, the mean pairwise
    Jensen-Shannon divergence (bits) between their attention maps on `batch` (collect_js, teacher-forced, in
    eval mode: 0 = the same maps)."""
    was_training = net.training
    net.eval()
    try:
        js = collect_js(net, [batch], pad_id)
    finally:
        net.train(was_training)
    out = {}
    for kind in ATTENTION_KINDS:
        modules = net.attention_layers(kind)
        vectors = [head_vectors(m) for m in modules]
        cos = {
            part: float(sum(mean_pairwise_cosine(v[part]) for v in vectors) / len(vectors))
            if all(v[part] is not None for v in vectors)
            else float("nan")
            for part in ("qkv", "o")
        }
        out[kind] = {"cos_qkv": cos["qkv"], "cos_o": cos["o"], "js": within_layers(js[kind], modules[0].heads)}
    return out
