"""Decoding over the decoder's KV cache: greedy and beam search (GNMT length penalty), plus naive
references that re-run the whole prefix every step (for tests and `bench_decoding`)."""

from __future__ import annotations

import torch
from torch import Tensor

from headsweep.model.transformer import Transformer, reorder_cache


def max_output_length(src: Tensor, pad_id: int, extra: int, limit: int, factor: float | None = None) -> int:
    """The paper's budget: longest input length + `extra` tokens, capped by the model's positions and,
    with `factor`, by factor x the longest input (the head analysis: a badly pruned model would otherwise
    decode every sentence to the full budget)."""
    longest = int(src.ne(pad_id).sum(1).max())
    cap = min(longest + extra, limit)
    return cap if factor is None else min(cap, max(1, int(factor * longest)))


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


def length_penalty(length, alpha: float):
    """GNMT length penalty (Wu et al. 2016): lp(Y) = ((5 + |Y|) / 6) ** alpha; alpha = 0 gives 1.

    Beam search ranks hypotheses by log P(Y|X) / lp(Y). |Y| counts the generated tokens, EOS included.
    """
    return ((5 + length) / 6) ** alpha


@torch.no_grad()
def beam_search(
    model: Transformer,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    max_len: int,
    beam_size: int,
    length_penalty: float = 0.6,
) -> Tensor:
    """Batched beam search over the KV cache: the best hypothesis per sentence by log P / lp(Y).

    Each of the B sentences keeps `beam_size` live hypotheses, B * beam_size rows of the cache.
    Every step takes the best 2 * beam_size extensions of a sentence (at most beam_size of them end,
    so beam_size live ones always remain); an EOS among the best beam_size is a finished hypothesis.
    A sentence is done when it has beam_size finished hypotheses (fairseq's rule); its rows then
    leave the batch. At max_len the live hypotheses compete, unfinished, with the finished ones.
    beam_size = 1 is greedy search. src (B, S) -> tokens (B, <= max_len), without BOS, padded after EOS.
    """
    return _beam(model, src, bos_id, eos_id, max_len, beam_size, length_penalty, cached=True)


@torch.no_grad()
def beam_search_naive(
    model: Transformer,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    max_len: int,
    beam_size: int,
    length_penalty: float = 0.6,
) -> Tensor:
    """The same beam search re-running every live prefix each step (the reference for the cached one)."""
    return _beam(model, src, bos_id, eos_id, max_len, beam_size, length_penalty, cached=False)


def _beam(model, src, bos_id, eos_id, max_len, beam_size, alpha, cached: bool) -> Tensor:
    if beam_size < 1 or max_len < 1:
        raise ValueError(f"beam_size and max_len must be >= 1, got {beam_size} and {max_len}")
    B, K, device = src.size(0), beam_size, src.device
    memory, src_pad = model.encode(src)
    memory, src_pad = memory.repeat_interleave(K, 0), src_pad.repeat_interleave(K, 0)  # rows b*K + k
    cache = model.new_cache() if cached else None
    # The K copies of a sentence start identical: only copy 0 may expand, or step 1 would pick
    # the same extension K times.
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0
    prefix = torch.empty(B * K, 0, dtype=torch.long, device=device)  # tokens so far, per row
    step = torch.full((B * K, 1), bos_id, dtype=torch.long, device=device)
    active = list(range(B))  # the sentence of each group of K rows still decoding
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]  # (log P / lp, tokens)
    for t in range(1, max_len + 1):
        if not cached:  # the whole prefix again, BOS first
            step = torch.cat([torch.full((prefix.size(0), 1), bos_id, device=device), prefix], dim=1)
        logp = model.decode(step, memory, src_pad, cache)[:, -1].float().log_softmax(-1)
        n, V = len(active), logp.size(-1)
        cand = (scores[:, :, None] + logp.view(n, K, V)).view(n, K * V)
        top_scores, top_idx = cand.topk(min(2 * K, K * V), dim=1)  # sorted, best first
        origin, token = top_idx // V, top_idx % V  # which live hypothesis, which next token
        ends = token.eq(eos_id)

        # Finished hypotheses: EOS among a sentence's best K extensions (a worse EOS would take the
        # slot of a better live hypothesis).
        lp = length_penalty(t, alpha)
        for i, j in (ends[:, :K] & top_scores[:, :K].isfinite()).nonzero().tolist():
            hyps = finished[active[i]]
            if len(hyps) < K:
                row = i * K + int(origin[i, j])
                hyps.append((float(top_scores[i, j]) / lp, prefix[row].tolist() + [eos_id]))

        # The best K extensions that do not end live on (stable sort keeps them best first).
        keep = ends.to(torch.uint8).argsort(dim=1, stable=True)[:, :K]
        scores, origin, token = top_scores.gather(1, keep), origin.gather(1, keep), token.gather(1, keep)
        rows = (torch.arange(n, device=device)[:, None] * K + origin).view(-1)
        prefix = torch.cat([prefix[rows], token.view(-1, 1)], dim=1)
        if t == max_len:
            for i, sentence in enumerate(active):  # out of length: unfinished hypotheses compete
                for k in range(K):
                    if scores[i, k].isfinite():
                        finished[sentence].append((float(scores[i, k]) / lp, prefix[i * K + k].tolist()))
            break
        going = torch.tensor([len(finished[s]) < K for s in active], device=device)
        if not going.any():
            break
        go_rows = None
        if not going.all():  # drop done sentences' rows from the batch
            go_rows = going.repeat_interleave(K)
            rows, prefix = rows[go_rows], prefix[go_rows]
            memory, src_pad = memory[go_rows], src_pad[go_rows]
            scores, token = scores[going], token[going]
            active = [s for s, g in zip(active, going.tolist()) if g]
        if cached:
            reorder_cache(cache, rows, None if go_rows is None else go_rows.nonzero().squeeze(1))
        step = token.view(-1, 1)

    return _best(finished, model.cfg.pad_id, device)


def _best(finished: list[list[tuple[float, list[int]]]], pad_id: int, device) -> Tensor:
    """Each sentence's best hypothesis by score, as rows padded after their end: (B, longest)."""
    best = [max(hyps, key=lambda h: h[0])[1] for hyps in finished]
    out = torch.full((len(best), max(map(len, best))), pad_id, dtype=torch.long, device=device)
    for b, tokens in enumerate(best):
        out[b, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
    return out
