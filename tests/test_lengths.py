"""Narrow heads and sentence length: each bucket's score is sacreBLEU's corpus BLEU on those sentences, a cell
that loses only beyond k gets a negative contrast that its interval separates from zero, and the source
lengths are the run's own subwords."""

import gzip

import numpy as np
import pytest
from sacrebleu import corpus_bleu
from tokenizers import Tokenizer

from conftest import DATA, needs_data
from headsweep.reports.pages import lengths as LEN
from headsweep.reports.sweep.cells import as_run

WORDS = "a man in a blue shirt is riding a red bike down the busy street near the old market".split()


def corpus(n: int = 240, seed: int = 0) -> tuple[list[str], list[int]]:
    """References of 3 to 18 words; the 'source length' of each is its word count."""
    rng = np.random.default_rng(seed)
    refs = [" ".join(rng.choice(WORDS, size=k)) for k in rng.integers(3, 19, size=n)]
    return refs, [len(r.split()) for r in refs]


def spoil(sentence: str) -> str:
    return " ".join(reversed(sentence.split())) + " x"


def test_each_bucket_is_corpus_bleu_of_its_sentences_with_the_seeds_pooled():
    refs, n = corpus()
    rng = np.random.default_rng(1)
    base = [[r if rng.random() < 0.6 else spoil(r) for r in refs] for _ in range(2)]
    cell = [[r if rng.random() < 0.4 else spoil(r) for r in refs] for _ in range(2)]
    out = LEN.by_length(LEN.sentence_stats(base, refs), LEN.sentence_stats(cell, refs), n, n_samples=50)
    for (lo, hi), bucket in zip(LEN.BUCKETS, out["buckets"]):
        idx = [i for i, k in enumerate(n) if k >= lo and (hi is None or k <= hi)]

        def pooled(hyps, idx=idx):
            return corpus_bleu([h[i] for h in hyps for i in idx], [[refs[i] for _ in hyps for i in idx]]).score

        assert bucket["n"] == len(idx)
        assert bucket["delta"] == pytest.approx(pooled(cell) - pooled(base), abs=1e-9)


def test_a_cell_that_loses_only_beyond_k_gets_a_negative_contrast_at_k():
    refs, n = corpus()
    base = [refs]
    cell = [[r if k <= 8 else spoil(r) for r, k in zip(refs, n)]]
    out = LEN.by_length(LEN.sentence_stats(base, refs), LEN.sentence_stats(cell, refs), n, n_samples=200)
    within, *beyond = [b["delta"] for b in out["buckets"]]
    assert within == 0 and all(d < -10 for d in beyond)
    at8 = out["contrasts"][0]
    assert at8["k"] == 8 and at8["hi"] < 0 and at8["p_bound"] and at8["p"] == pytest.approx(2 / 200)
    # and the mirror: one that loses only within k has a positive contrast there
    short = [[spoil(r) if k <= 8 else r for r, k in zip(refs, n)]]
    mirror = LEN.by_length(LEN.sentence_stats(base, refs), LEN.sentence_stats(short, refs), n, n_samples=200)
    assert mirror["buckets"][1]["delta"] == mirror["buckets"][2]["delta"] == 0 and mirror["contrasts"][0]["lo"] > 0


@needs_data
def test_source_lengths_are_the_runs_subwords(tiny_run):
    import json

    results = json.loads((tiny_run / "results.json").read_text())
    run = as_run(tiny_run, results)
    tok = Tokenizer.from_file(results["tokenizer"])  # the file the run trained with, read independently
    with gzip.open(DATA / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        src = f.read().splitlines()[: results["config"]["data"]["limit_eval"]]
    assert LEN.source_lengths(run) == [len(tok.encode(s, add_special_tokens=False).ids) for s in src]


def test_a_missing_sweep_is_one_line(tmp_path, capsys):
    assert LEN.main(["--sweeps", "nope", "--root", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run `make sweep SWEEP=nope` first" in err


def test_against_wide_cancels_what_every_cell_shares_with_the_base():
    """Base good on short sentences only: every cell's contrast is positive, yet the narrow cell that also
    loses beyond k stands out against the wide cell, and a narrow cell like the wide one does not."""
    refs, n = corpus()
    base = LEN.sentence_stats([[r if k <= 8 else spoil(r) for r, k in zip(refs, n)]], refs)
    half = [[spoil(r) if i % 3 == 0 else r for i, r in enumerate(refs)]]  # loses a third of every bucket
    worse = [[spoil(r) if i % 3 == 0 or (k > 8 and i % 3 == 1) else r for i, (r, k) in enumerate(zip(refs, n))]]
    rows = [
        {"d_k": d, "base_key": "b", "contrasts": LEN.by_length(base, LEN.sentence_stats(h, refs), n, 200)["contrasts"]}
        for d, h in ((32, half), (8, worse), (8, half))
    ]
    LEN.against_wide(rows)
    assert rows[0]["against_wide"] is None  # a wide cell is the reference, not compared
    assert rows[1]["against_wide"]["hi"] < 0 and rows[1]["against_wide"]["n_wide"] == 1
    assert rows[2]["against_wide"]["value"] == pytest.approx(0) and rows[2]["against_wide"]["lo"] == pytest.approx(0)
