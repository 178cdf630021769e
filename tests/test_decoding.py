"""Decoding: the cached decoders against naive ones, beam search against exhaustive search."""

import itertools
import math
from types import SimpleNamespace

import pytest
import torch

from headsweep.model import LayerCache, Transformer, TransformerConfig, decoding

PAD, BOS, EOS = 0, 1, 2


# W^O and W_2 as drawn (gain 1): the seeds below were chosen for the models this start gives (varied lengths)
UNIT_START = dict(init_wo_gain=1.0, init_ff2_gain=1.0)


def random_model(seed: int, vocab_size: int = 40, **kw) -> Transformer:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=vocab_size, d_model=16, n_layers=2, heads=4, d_ff=32, max_len=64, **UNIT_START)
    model = Transformer(TransformerConfig(**{**cfg, **kw})).eval()
    with torch.no_grad():  # larger logits: peaked, varied distributions, so EOS sometimes wins
        model.embed.weight.mul_(4)
    return model


def sources(seed: int, vocab_size: int, lengths=(7, 4, 6)) -> torch.Tensor:
    """A batch of sentences of different lengths, padded (pad, bos, eos never inside)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.randint(3, vocab_size, (n,), generator=g)
    return src


def hypothesis(row: torch.Tensor, max_len: int) -> list[int]:
    """One decoder output row as a token list: up to its EOS, or all max_len tokens if it never ended."""
    row = row.tolist()
    return row[: row.index(EOS) + 1] if EOS in row else row[:max_len]


@torch.no_grad()
def sequence_score(model, src_row: torch.Tensor, tokens: list[int], alpha: float) -> float:
    """log P(tokens | src) / lp, from one full (uncached) decoder pass: the reference scorer."""
    memory, src_pad = model.encode(src_row[None])
    tgt_in = torch.tensor([[BOS] + tokens[:-1]])
    logp = model.decode(tgt_in, memory, src_pad)[0].double().log_softmax(-1)
    return float(logp[torch.arange(len(tokens)), tokens].sum()) / decoding.length_penalty(len(tokens), alpha)


@pytest.mark.parametrize("kw", [{}, {"norm_first": True, "positions": "learned", "impl": "per_head"}])
def test_cached_greedy_equals_naive_greedy(kw):
    model = random_model(0, **kw)
    src = sources(0, 40)
    cached = decoding.greedy(model, src, BOS, EOS, 20)
    naive = decoding.greedy_naive(model, src, BOS, EOS, 20)
    assert torch.equal(cached, naive)


@pytest.mark.parametrize("seed", range(4))
def test_beam_size_one_is_greedy(seed):
    model = random_model(seed)
    src = sources(seed, 40, lengths=(7, 4, 6, 9, 3))
    greedy = decoding.greedy(model, src, BOS, EOS, 25)
    assert torch.equal(decoding.beam_search(model, src, BOS, EOS, 25, 1, 0.6), greedy)
    assert torch.equal(decoding.beam_search(model, src, BOS, EOS, 25, 1, 0.0), greedy)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cached_beam_equals_naive_beam(seed):
    # Untied output projection: these random models end sentences at varied steps, so rows leave
    # the batch and the cache is reordered and shrunk mid-search.
    model = random_model(seed, vocab_size=12, tie_embeddings=False)
    src = sources(seed, 12, lengths=(7, 4, 6, 9))
    cached = decoding.beam_search(model, src, BOS, EOS, 15, 3, 0.6)
    naive = decoding.beam_search_naive(model, src, BOS, EOS, 15, 3, 0.6)
    assert torch.equal(cached, naive)
    lengths = {len(hypothesis(row, 15)) for row in cached}
    assert len(lengths) > 1  # the test's premise: hypotheses of different lengths in one batch


@torch.no_grad()
def sequence_logprobs(model, src_row: torch.Tensor, seqs: list[list[int]]) -> list[float]:
    """log P(tokens | src) of each sequence from full (uncached) decoder passes, one pass per length: the
    reference scorer of the exhaustive search (sequence_score's sum, the length penalty left to the caller)."""
    memory, src_pad = model.encode(src_row[None])
    out = {}
    for n in sorted({len(s) for s in seqs}):
        group = [s for s in seqs if len(s) == n]
        tokens = torch.tensor(group)
        tgt_in = torch.cat([torch.full((len(group), 1), BOS), tokens[:, :-1]], 1)
        k = len(group)
        logp = model.decode(tgt_in, memory.expand(k, -1, -1), src_pad.expand(k, -1))
        picked = logp.double().log_softmax(-1).gather(-1, tokens[..., None])[..., 0].sum(-1)
        out.update({tuple(s): float(v) for s, v in zip(group, picked)})
    return [out[tuple(s)] for s in seqs]


@pytest.mark.parametrize("seed", [1, 4])
def test_wide_beam_finds_the_exhaustive_optimum(seed):
    """With a beam wider than all candidates nothing is pruned: beam search must return the sequence
    that brute-force enumeration of every output (scored by full decoder passes) ranks best.
    For these seeds the optimum changes with alpha (the empty output, 2 and 3 tokens), so a wrong
    or missing length penalty fails here."""
    V, max_len = 6, 3  # tokens 0..5; sequences: EOS-ended of length 1..3 and unfinished of length 3
    model = random_model(seed, vocab_size=V, tie_embeddings=False)
    src = sources(seed, V, lengths=(5, 3))
    words = [t for t in range(V) if t != EOS]
    everything = [list(p) + [EOS] for n in range(max_len) for p in itertools.product(words, repeat=n)]
    everything += [list(p) for p in itertools.product(words, repeat=max_len)]
    width = (V - 1) ** (max_len - 1) * V  # candidates at the last step: all of them kept
    logps = [sequence_logprobs(model, src[b], everything) for b in range(src.size(0))]
    best_lengths = set()
    for alpha in (0.0, 0.6, 2.0):
        out = decoding.beam_search(model, src, BOS, EOS, max_len, width, alpha)
        for b in range(src.size(0)):
            scores = {tuple(s): lp / decoding.length_penalty(len(s), alpha) for s, lp in zip(everything, logps[b])}
            found = hypothesis(out[b], max_len)
            assert scores[tuple(found)] == pytest.approx(max(scores.values()), abs=1e-5), (alpha, b, found)
            best_lengths.add((b, len(max(scores, key=scores.get))))
    assert len(best_lengths) > src.size(0)  # the premise: for some sentence the optimum's length moves with alpha


def test_sentences_decode_alike_alone_and_in_a_batch():
    model = random_model(7, vocab_size=12)
    src = sources(7, 12, lengths=(6, 6, 6, 6))  # equal lengths: no padding difference between the two
    batch = decoding.beam_search(model, src, BOS, EOS, 12, 3, 0.6)
    for b in range(src.size(0)):
        alone = decoding.beam_search(model, src[b : b + 1], BOS, EOS, 12, 3, 0.6)
        in_batch, by_itself = hypothesis(batch[b], 12), hypothesis(alone[0], 12)
        # Equal tokens, or (only if float noise split an exact tie) equal scores.
        assert in_batch == by_itself or sequence_score(model, src[b], in_batch, 0.6) == pytest.approx(
            sequence_score(model, src[b], by_itself, 0.6), abs=1e-6
        )


class MarkovToy:
    """A stand-in for the Transformer: the next token depends only on the last one, by a fixed table.
    Tokens: 0 pad, 1 bos, 2 eos, 3 'a', 4 'b'. Greedy takes 'a' (0.6) and then EOS: P = 0.6 * 0.4 = 0.24;
    'b' then EOS has P = 0.4 * 0.9 = 0.36, the best sequence, which only a beam keeps in sight."""

    cfg = SimpleNamespace(pad_id=PAD)

    def __init__(self):
        eps = 1e-9  # never pad or bos
        rows = {BOS: {3: 0.6, 4: 0.4}, 3: {EOS: 0.4, 3: 0.3, 4: 0.3}, 4: {EOS: 0.9, 3: 0.05, 4: 0.05}}
        table = torch.full((5, 5), eps)
        for prev, nxt in rows.items():
            for tok, p in nxt.items():
                table[prev, tok] = p
        table[EOS, EOS] = table[PAD, PAD] = 1.0  # after the end: anything, it is never read
        self.logits = table.log()

    def encode(self, src):
        return torch.zeros(*src.shape, 1), src.eq(PAD)

    def new_cache(self):
        return [LayerCache()]

    def decode(self, tgt_in, memory, src_pad, cache=None):
        return self.logits[tgt_in]  # (B, T, V): one row of the table per position


def test_beam_finds_the_best_sequence_where_greedy_does_not():
    toy, src = MarkovToy(), torch.tensor([[5, 6], [7, 0]])
    assert decoding.greedy(toy, src, BOS, EOS, 10).tolist() == [[3, EOS], [3, EOS]]
    assert decoding.beam_search(toy, src, BOS, EOS, 10, 2, 0.0).tolist() == [[4, EOS], [4, EOS]]
    assert decoding.beam_search(toy, src, BOS, EOS, 10, 1, 0.0).tolist() == [[3, EOS], [3, EOS]]


def test_length_penalty_formula():
    # lp(Y) = ((5 + |Y|) / 6) ** alpha, values worked out by hand.
    assert decoding.length_penalty(1, 0.6) == 1.0
    assert decoding.length_penalty(7, 1.0) == 2.0
    assert decoding.length_penalty(13, 0.5) == pytest.approx(math.sqrt(3))
    assert decoding.length_penalty(40, 0.0) == 1.0
    lengths = torch.tensor([1.0, 7.0, 13.0])
    torch.testing.assert_close(decoding.length_penalty(lengths, 0.5), ((5 + lengths) / 6).sqrt())


def test_bad_beam_arguments():
    model = random_model(0)
    with pytest.raises(ValueError, match="beam_size and max_len must be >= 1"):
        decoding.beam_search(model, sources(0, 40), BOS, EOS, 10, 0, 0.6)


def test_beam_search_reindexes_cross_attention_only_when_sentences_leave(monkeypatch):
    """Every beam of a sentence attends to the same encoder keys/values: beam search re-indexes the
    cross-attention cache only when a finished sentence leaves the batch, never per step."""
    calls = {"self": 0, "cross": 0}
    real = decoding.reorder_cache

    def counting(cache, index, cross_index=None):
        calls["self"] += 1
        calls["cross"] += cross_index is not None
        real(cache, index, cross_index)

    monkeypatch.setattr(decoding, "reorder_cache", counting)
    model = random_model(2, vocab_size=12, tie_embeddings=False)
    src = sources(2, 12, lengths=(7, 4, 6, 9))
    decoding.beam_search(model, src, BOS, EOS, 15, 3, 0.6)
    assert calls["self"] > calls["cross"] >= 1
    assert calls["cross"] <= len(src) - 1  # at most once per sentence that leaves before the last
