"""Token-budget batching, as in "Attention Is All You Need": batches hold a roughly constant number of
tokens rather than a constant number of sentences."""

from __future__ import annotations

import random

import torch
from torch.utils.data import Dataset

from headsweep.data.files import DataError
from headsweep.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


class TokenBatchSampler:
    """Batches of indices whose padded size, max(length) * n_sentences, stays <= max_tokens.

    Indices are sorted by length so batches need little padding. With ``shuffle`` the ties
    between equal lengths are broken randomly (so bucket contents vary per epoch) and the
    batch order is shuffled; everything is a pure function of (seed, epoch).

    Under data parallelism (world_size > 1) every rank makes the same batches and takes every
    world_size-th one from position `rank`: disjoint, equally long shares whose union is the
    one-process epoch (the last shares are topped up with the first batches when the count does
    not divide, as torch's DistributedSampler pads).
    """

    def __init__(
        self,
        lengths: list[int],
        max_tokens: int,
        shuffle: bool = False,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ):
        if max_tokens < 1:
            raise DataError(f"max_tokens must be >= 1, got {max_tokens}")
        if not 0 <= rank < world_size:
            raise DataError(f"rank {rank} is not in 0..{world_size - 1}")
        self.rank, self.world_size = rank, world_size
        self.lengths = list(lengths)
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.skip = 0  # batches of the next iteration to leave out: those a resumed run already trained on

    @property
    def sampler(self):
        # Lightning calls set_epoch() on `dataloader.batch_sampler.sampler`, not on the batch
        # sampler itself; exposing ourselves here makes it reach our set_epoch().
        return self

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _batches(self) -> list[list[int]]:
        idx = list(range(len(self.lengths)))
        rng = random.Random(f"{self.seed}-{self.epoch}")  # string seed: stable across runs
        if self.shuffle:
            rng.shuffle(idx)  # random tie-break: sort below is stable
        idx.sort(key=self.lengths.__getitem__)
        batches, cur = [], []
        for i in idx:
            # Ascending order, so the new item is the longest: padded size = its length * (n+1).
            # An over-long single sentence still gets its own batch (cur is empty then).
            if cur and self.lengths[i] * (len(cur) + 1) > self.max_tokens:
                batches.append(cur)
                cur = []
            cur.append(i)
        if cur:
            batches.append(cur)
        if self.shuffle:
            rng.shuffle(batches)
        if self.world_size > 1:
            per_rank = -(-len(batches) // self.world_size)  # ceil
            batches = (batches + batches[: per_rank * self.world_size - len(batches)])[self.rank :: self.world_size]
        return batches

    def __iter__(self):
        batches, self.skip = self._batches()[self.skip :], 0
        return iter(batches)

    def __len__(self) -> int:
        # The greedy cut depends only on the sorted multiset of lengths, so the count is the
        # same for every epoch; computing it is cheap (a sort) and done rarely.
        return len(self._batches())


class PairDataset(Dataset):
    """Encoded pairs plus their row index into ``texts(split)``."""

    def __init__(self, src: list[list[int]], tgt: list[list[int]], index: list[int]):
        self.src, self.tgt, self.index = src, tgt, index

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> dict:
        return {"src": self.src[i], "tgt": self.tgt[i], "index": self.index[i]}


def collate(items: list[dict]) -> dict[str, torch.Tensor]:
    """Pad a list of pairs: src; tgt_in = BOS + tgt; tgt_out = tgt + EOS (teacher forcing)."""
    n = len(items)
    s_len = max(len(it["src"]) for it in items)
    t_len = max(len(it["tgt"]) for it in items) + 1
    src = torch.full((n, s_len), PAD_ID, dtype=torch.long)
    tgt_in = torch.full((n, t_len), PAD_ID, dtype=torch.long)
    tgt_out = torch.full((n, t_len), PAD_ID, dtype=torch.long)
    for b, it in enumerate(items):
        s, t = it["src"], it["tgt"]
        src[b, : len(s)] = torch.tensor(s, dtype=torch.long)
        tgt_in[b, : len(t) + 1] = torch.tensor([BOS_ID, *t], dtype=torch.long)
        tgt_out[b, : len(t) + 1] = torch.tensor([*t, EOS_ID], dtype=torch.long)
    index = torch.tensor([it["index"] for it in items], dtype=torch.long)
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out, "index": index}


def make_batches(src_ids: list[list[int]], tgt_ids: list[list[int]], max_tokens: int) -> list[dict]:
    """Padded batches of (source, target) id lists in length order; `index` = row in the given lists."""
    items = [{"src": s, "tgt": t, "index": i} for i, (s, t) in enumerate(zip(src_ids, tgt_ids))]
    lengths = [max(len(s), len(t) + 1) for s, t in zip(src_ids, tgt_ids)]
    return [collate([items[i] for i in batch]) for batch in TokenBatchSampler(lengths, max_tokens)]
