"""Long examples from short ones (data.join, issue 70): k consecutive sentence pairs of a split joined into one
example, source with source and target with target, in file order, the sentences of a side separated by one
space. The last example of a split whose size k does not divide holds the pairs that are left (fewer than k):
every sentence is translated and scored once. k = 1 is the data as it is, untouched.

Joined as text, not as token ids: the tokenizer's Metaspace pre-tokenizer splits at spaces and marks every
word's start (the first one's too: prepend_scheme always), so a joined text tokenizes to its sentences' tokens
one after another, the same ids a token-level join would give (tests/test_join.py checks it), while the joined
strings are also what decoding yields and what sacreBLEU scores: the references of a joined run are its
reference lines joined by this same function (reports.sweep.significance.references)."""

from __future__ import annotations

import logging

from headsweep.data.files import DataError

log = logging.getLogger(__name__)

JOIN_FIX = "e.g. data.join=8 (sentence pairs per example; 1: one pair per example, the data as it is)"


def check_join(join) -> int:
    """data.join as given to the data module: an integer >= 1 (the schema says the same of the config)."""
    if isinstance(join, bool) or not isinstance(join, int) or join < 1:
        raise DataError(
            f"data.join={join!r}: not an integer >= 1, the sentence pairs joined into one example; {JOIN_FIX}"
        )
    return join


def check_split_size(join: int, split: str, n: int, limit: str | None = None) -> None:
    """A split must hold at least `join` pairs (after its limit, named by `limit`): one example of fewer would
    not be the length asked for."""
    if join > n:
        after = f" after {limit}" if limit else ""
        raise DataError(
            f"data.join={join} joins more sentence pairs than split '{split}' holds ({n}{after}): use data.join <= {n}"
        )


def join_lines(lines: list[str], k: int) -> list[str]:
    """Groups of k consecutive lines, each joined with one space (each line stripped, as the data module's
    clean_pairs strips them); the last group keeps what is left. k = 1: the list itself, untouched."""
    if k == 1:
        return lines
    return [" ".join(line.strip() for line in lines[i : i + k]) for i in range(0, len(lines), k)]


def pairs_of(example: int, k: int, n: int) -> tuple[int, int]:
    """The first and last sentence pair (1-based, in file order) of example `example` (0-based) of a split of
    n pairs joined k at a time: what an error message names."""
    return example * k + 1, min((example + 1) * k, n)


def what_example(example: int, k: int, n: int) -> str:
    """How a message names example `example` (0-based) of a split of n pairs: "pair 7" as ever at k = 1,
    "example 3 (sentence pairs 17-24, data.join=8)" when joined."""
    if k == 1:
        return f"pair {example + 1}"
    first, last = pairs_of(example, k, n)
    return f"example {example + 1} (sentence pairs {first}-{last}, data.join={k})"


def fit_max_len(split: str, s_ids: list[list[int]], t_ids: list[list[int]], max_len: int, k: int, n: int) -> list[int]:
    """The training examples data.max_len keeps. At k = 1 as ever: a pair longer than max_len (with BOS/EOS)
    is left out, with a warning. A joined example is never left out (a long example is what the setting is
    for, and dropping the longest would bias the lengths it measures): the longest one over max_len stops
    the run, naming the value that holds it."""
    # +1: the target gets BOS (tgt_in) / EOS (tgt_out); src counted the same way for symmetry.
    lengths = [max(len(s), len(t)) + 1 for s, t in zip(s_ids, t_ids)]
    if k > 1:
        i = max(range(len(lengths)), key=lengths.__getitem__)
        if lengths[i] > max_len:
            raise DataError(
                f"split '{split}': {what_example(i, k, n)} is {lengths[i]} subwords long with BOS/EOS, longer "
                f"than data.max_len={max_len}; joined examples are never left out: raise data.max_len to >= "
                f"{lengths[i]} (and model.max_len with it)"
            )
        return list(range(len(lengths)))
    keep = [i for i, n_sub in enumerate(lengths) if n_sub <= max_len]
    if len(keep) < len(lengths):
        log.warning(
            "%s: filtered %d of %d training pairs longer than max_len=%d subwords",
            split,
            len(lengths) - len(keep),
            len(lengths),
            max_len,
        )
    if not keep:
        raise DataError(f"split '{split}': every pair is longer than data.max_len={max_len}; raise it")
    return keep
