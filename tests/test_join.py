"""data.join (headsweep.data.joining, issue 70): k consecutive sentence pairs joined into one example. join=1 is the
data as it is; join=k joins exactly k pairs in file order, on one vocabulary; bad values stop in one line; the
references are joined alike wherever BLEU is computed (the trainer, the report's re-score). The expected examples
are built here by hand from the raw files of Multi30k."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from sacrebleu.metrics import BLEU, CHRF

from conftest import DATA, needs_data, tiny_overrides, write_results
from headsweep.config import compose
from headsweep.data import DataError, TranslationDataModule
from headsweep.data import datamodule as hd_datamodule
from headsweep.identity import cell_labels
from headsweep.reports.sweep.cells import as_run
from headsweep.reports.sweep.significance import references
from headsweep.store import experiment_key, results_check
from headsweep.training.checks import ConfigError, check_config

pytestmark = needs_data
SPLITS = ("train", "val", "test_2016_flickr")
N_TRAIN, N_EVAL = 200, 60  # 60 = 7 x 8 + 4: at join 8 the last evaluation example holds 4 pairs


def raw(split: str, lang: str, n: int) -> list[str]:
    """The first n lines of a split, read here without the data module."""
    with gzip.open(DATA / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n").strip() for _ in range(n)]


def module(tmp_path: Path, **kw) -> TranslationDataModule:
    kw = {"dir": str(DATA), "cache_dir": str(tmp_path / "cache"), "vocab_size": 300, **kw}
    dm = TranslationDataModule(limit_train=N_TRAIN, limit_eval=N_EVAL, **kw)
    dm.setup()
    return dm


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[int | None, TranslationDataModule]:
    """The data modules without the setting, at join 1 and at join 8, on one tokenizer cache."""
    tmp = tmp_path_factory.mktemp("join")
    return {None: module(tmp), 1: module(tmp, join=1), 8: module(tmp, join=8, max_len=512)}


def test_join_1_is_the_data_as_it_is(built):
    """join=1 and no setting at all give the same texts, ids, order and batches, and those are the raw lines and
    their own encodings: nothing joined, filtered or reordered."""
    plain, one = built[None], built[1]
    assert plain.tokenizer_json == one.tokenizer_json
    for split in SPLITS:
        n = N_TRAIN if split == "train" else N_EVAL
        by_hand = (raw(split, "de", n), raw(split, "en", n))
        assert plain.texts(split) == one.texts(split) == by_hand
        data = one._data[split]
        assert data.src == plain._data[split].src == one.encode(by_hand[0])
        assert data.tgt == plain._data[split].tgt == one.encode(by_hand[1])
        assert data.index == plain._data[split].index == list(range(n))
    batches = [[b[k].tolist() for k in ("src", "tgt_in", "index")] for b in one.train_dataloader()]
    assert batches == [[b[k].tolist() for k in ("src", "tgt_in", "index")] for b in plain.train_dataloader()]


def test_join_k_joins_exactly_k_pairs_in_order(built):
    one, eight = built[1], built[8]
    for split in SPLITS:
        n = N_TRAIN if split == "train" else N_EVAL
        for side, lang in enumerate(("de", "en")):
            lines = raw(split, lang, n)
            expected, group = [], []
            for line in lines:  # consecutive groups of 8 in file order, the last one what is left
                group.append(line)
                if len(group) == 8:
                    expected.append(" ".join(group))
                    group = []
            if group:
                expected.append(" ".join(group))
            got = eight.texts(split)[side]
            assert got == expected and len(got) == -(-n // 8)
            assert got[0] == " ".join(lines[:8]) and got[-1] == " ".join(lines[(len(got) - 1) * 8 :])
            # a joined text is its sentences' tokens one after another: a token-level join, same ids
            ids = one.encode(lines)
            assert eight.encode(got) == [sum(ids[i : i + 8], []) for i in range(0, n, 8)]
    assert eight.texts("val")[1][-1] == " ".join(raw("val", "en", N_EVAL)[56:])  # 7 x 8 + the 4 left
    assert eight._data["train"].index == list(range(N_TRAIN // 8))  # none dropped


def test_every_join_shares_one_vocabulary_and_its_cache(built, tmp_path, monkeypatch):
    """The tokenizer is trained on the sentences as they are, and join is not in its cache key: join 8 reads
    join 1's cached tokenizer, retraining nothing."""
    assert built[8].tokenizer_path == built[1].tokenizer_path and built[8].tokenizer_json == built[1].tokenizer_json

    def no_training(*a, **k):
        raise AssertionError("retrained instead of using the cache")

    first = module(tmp_path, join=1)
    monkeypatch.setattr(hd_datamodule, "train_tokenizer", no_training)
    again = module(tmp_path, join=4, max_len=512)
    assert again.tokenizer_json == first.tokenizer_json and again.tokenizer_path == first.tokenizer_path


def test_a_step_holds_the_same_token_budget_at_any_join(built):
    """data.max_tokens bounds a batch's padded tokens whatever the join: a joined batch holds fewer, longer
    examples, and one epoch's target tokens are the same sentences' (EOS apart: one per example)."""
    counts = {}
    for k in (1, 8):
        batches = list(built[k].train_dataloader())
        assert all(b["tgt_out"].numel() <= built[k].max_tokens for b in batches)
        tokens = sum(int(b["tgt_out"].ne(0).sum()) for b in batches)
        counts[k] = tokens - sum(len(b["index"]) for b in batches)  # less EOS: the sentences' subwords
    assert counts[1] == counts[8]


def test_joined_examples_over_max_len_stop_never_dropped(tmp_path, caplog):
    """At join 1 data.max_len leaves long training pairs out as before; a joined example over it stops with one
    line naming data.max_len and the value that holds the longest (computed here from the ids)."""
    eight = module(tmp_path, join=8, max_len=4096)
    lengths = [max(len(s), len(t)) + 1 for s, t in zip(eight._data["train"].src, eight._data["train"].tgt)]
    longest, which = max(lengths), lengths.index(max(lengths))
    with pytest.raises(DataError) as e:
        module(tmp_path, join=8, max_len=longest - 1)
    first, last = which * 8 + 1, which * 8 + 8
    assert str(e.value) == (
        f"split 'train': example {which + 1} (sentence pairs {first}-{last}, data.join=8) is {longest} subwords long "
        f"with BOS/EOS, longer than data.max_len={longest - 1}; joined examples are never left out: raise "
        f"data.max_len to >= {longest} (and model.max_len with it)"
    )
    assert module(tmp_path, join=8, max_len=longest)._data["train"].index == list(range(N_TRAIN // 8))
    with caplog.at_level(logging.WARNING, logger="headsweep.data"):
        kept = module(tmp_path, join=1, max_len=20)._data["train"].index
    assert 0 < len(kept) < N_TRAIN and any("filtered" in r.getMessage() for r in caplog.records)


def test_a_joined_evaluation_example_needs_room_to_decode(built):
    """check_fits (train.build, before training): the longest joined source + module.max_len_extra within the
    model's positions, else one line naming model.max_len; join 1 keeps its old check only."""
    eight = built[8]
    longest = max(map(len, eight._data["val"].src))
    need = longest + 50 + 1
    eight.check_fits("val", need, 50)
    with pytest.raises(DataError, match=rf"needs model.max_len >= {need}, got {need - 1}: raise model.max_len"):
        eight.check_fits("val", need - 1, 50)
    short = max(map(len, built[1]._data["val"].src)) + 1
    built[1].check_fits("val", max(short, max(len(t) + 1 for t in built[1]._data["val"].tgt)), 50)


# ---- bad input: one line, nothing trained


@pytest.mark.parametrize("value", [0, -3, 2.5, "8", True, None])
def test_a_join_that_is_not_an_integer_of_at_least_1_is_one_line(value, tmp_path):
    with pytest.raises(DataError) as e:
        TranslationDataModule(dir=str(DATA), cache_dir=str(tmp_path), join=value)
    assert str(e.value).startswith(f"data.join={value!r}: not an integer >= 1") and "\n" not in str(e.value)


@pytest.mark.parametrize("value", ["0", "-1", "2.5", "eight", "1e9"])
def test_a_bad_join_in_the_config_stops_before_any_data_is_read(value, tmp_path):
    cfg = compose([f"data.join={value}", f"data.dir={tmp_path / 'none'}", f"paths.output_dir={tmp_path / 'out'}"])
    with pytest.raises(ConfigError) as e:
        check_config(cfg)
    assert str(e.value).startswith("data.join") and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"join": 61}, "split 'val' holds (60 after data.limit_eval=60): use data.join <= 60"),
        (
            {"join": 201, "limit_eval": None},
            "split 'train' holds (200 after data.limit_train=200): use data.join <= 200",
        ),
    ],
)
def test_a_join_larger_than_a_split_is_one_line_and_trains_nothing(kw, message, tmp_path):
    kw = {
        "dir": str(DATA),
        "cache_dir": str(tmp_path / "cache"),
        "vocab_size": 300,
        "limit_train": N_TRAIN,
        "limit_eval": N_EVAL,
        **kw,
    }
    dm = TranslationDataModule(**kw)
    with pytest.raises(DataError) as e:
        dm.setup()
    assert str(e.value) == f"data.join={kw['join']} joins more sentence pairs than {message}"
    assert not (tmp_path / "cache").exists()  # no tokenizer trained
    with pytest.raises(DataError, match="split 'few' holds \\(3\\): use data.join <= 3"):
        module(tmp_path, join=4, max_len=512).add_split("few", ["a", "b", "c"], ["x", "y", "z"])


# ---- scoring: the references joined alike


def joined_run(tmp_path: Path, join: int, hyps: list[str], refs: list[str]) -> Path:
    """A finished run's record at data.join=`join` (limit_eval 60) whose test hypotheses are `hyps`, scored
    against `refs` as the trainer scores them."""
    d = tmp_path / f"join{join}"
    (d / "hypotheses").mkdir(parents=True)
    (d / "hypotheses" / "test_2016_flickr.beam.en").write_text("".join(f"{h}\n" for h in hyps))
    cfg = compose(["budget=ablation", "trainer.precision=32-true", f"data.join={join}", f"data.limit_eval={N_EVAL}"])
    write_results(
        d,
        {
            "status": "complete",
            "config": OmegaConf.to_container(cfg, resolve=False),
            "metrics": {"test/bleu": BLEU().corpus_score(hyps, [refs]).score},
            "scores": {
                "test_2016_flickr.beam": {
                    "bleu": BLEU().corpus_score(hyps, [refs]).score,
                    "chrf": CHRF().corpus_score(hyps, [refs]).score,
                }
            },
            "hypotheses": {"test_2016_flickr.beam": str(d / "hypotheses" / "test_2016_flickr.beam.en")},
            "references": {"test_2016_flickr": str(DATA / "test_2016_flickr.en.gz")},
        },
    )
    return d


def test_the_report_joins_the_references_as_the_run_joined_its_examples(built, tmp_path):
    """The references the reports and `make results-check` read (significance.references) are the trainer's
    own at join 8 (test_2016_flickr cut at limit_eval, joined by 8), and a run's re-score is its stored score;
    read unjoined they would not even pair with the hypotheses."""
    refs = built[8].texts("test_2016_flickr")[1]
    hyps = [" ".join(r.split()[:-2]) if i % 3 == 0 else r for i, r in enumerate(refs)]  # neither 0 nor 100
    d = joined_run(tmp_path, 8, hyps, refs)
    record = json.loads((d / "results.json").read_text())
    assert references(as_run(d, record)) == refs and len(refs) == 8
    assert results_check.mismatches(results_check.rescore(d)) == []
    one = joined_run(tmp_path, 1, built[1].texts("test_2016_flickr")[1], built[1].texts("test_2016_flickr")[1])
    assert references(as_run(one, json.loads((one / "results.json").read_text()))) == raw(
        "test_2016_flickr", "en", N_EVAL
    )  # join 1: the file's lines, as before


def test_join_is_its_own_experiment_and_join_1_keeps_every_stored_key():
    base = compose(["budget=ablation", "trainer.precision=32-true", "seed=1"])
    new = OmegaConf.to_container(base, resolve=False)
    old = json.loads(json.dumps(new))
    del old["data"]["join"]  # a record from before the setting
    assert experiment_key(new) == experiment_key(old)
    joined = compose(["budget=ablation", "trainer.precision=32-true", "seed=1", "data.join=8"])
    assert experiment_key(OmegaConf.to_container(joined, resolve=False)) != experiment_key(old)


def test_cells_are_named_by_their_join_alone():
    flats = [
        {"model.heads": h, "model.d_k": 256 // h, "model.d_v": 256 // h, "data.join": k, "data.max_len": m}
        for h in (8, 32)
        for k, m in ((1, 128), (8, 256))
    ]
    assert cell_labels(flats) == ["h8-dk32-dv32-join1", "h8-dk32-dv32-join8", "h32-dk8-dv8-join1", "h32-dk8-dv8-join8"]
    flats[3]["data.max_len"] = 512  # a max_len that does not follow the join is a setting of its own
    assert cell_labels(flats)[3] == "h32-dk8-dv8-join8-max_len512"


@pytest.mark.slow
def test_a_joined_run_trains_and_re_scores_its_joined_segments(tmp_path):
    """The whole path at join 2: test hypotheses one per joined segment, BLEU over them, and the results check
    re-scores the stored hypotheses against the references joined alike to the stored score."""
    from headsweep.training.train import train

    out = tmp_path / "run"
    overrides = ["data.join=2", "data.limit_eval=16", "data.max_len=256", "model.max_len=512"]
    overrides += ["module.max_len_extra=5", "module.test_beam_size=1"]  # an untrained model decodes to the limit
    train(compose(tiny_overrides(out, *overrides, "trainer.max_steps=6", "average_last=0")))
    record = json.loads((out / "results.json").read_text())
    hyps = (out / "hypotheses" / "test_2016_flickr.beam.en").read_text().splitlines()
    assert len(hyps) == 8 and record["config"]["data"]["join"] == 2
    rescored = results_check.rescore(out)
    assert rescored and results_check.mismatches(rescored) == []
