"""Tests for headsweep.data: validation messages, tokenizer, caching and token-budget batching.

All tests build tiny corpora in tmp_path; only the last one reads the real Multi30k files
(skipped when they are absent).
"""

import gzip
import logging
import random
import socket
import time
from pathlib import Path

import datasets
import pytest
import torch

from headsweep.data import DataError, TokenBatchSampler, TranslationDataModule, load_tokenizer, split_files
from headsweep.data import datamodule as hd_datamodule
from headsweep.data import hub as hd_hub

REAL_DIR = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "multi30k"

_DE = ["Ein Mann", "Eine Frau", "Zwei Kinder", "Ein kleiner Hund", "Eine Gruppe von Leuten"]
_EN = ["A man", "A woman", "Two children", "A small dog", "A group of people"]
_VERB_DE = ["läuft über", "sitzt auf", "spielt neben", "steht vor", "wartet an"]
_VERB_EN = ["walks across", "sits on", "plays next to", "stands in front of", "waits at"]
_OBJ_DE = ["der Straße", "einer Bank", "dem Haus", "einem roten Auto", "der großen Brücke"]
_OBJ_EN = ["the street", "a bench", "the house", "a red car", "the big bridge"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


def make_pairs(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Aligned synthetic German/English sentences of varied length (1-4 clauses)."""
    rng = random.Random(seed)
    de, en = [], []
    for _ in range(n):
        parts = [(rng.randrange(5), rng.randrange(5), rng.randrange(5)) for _ in range(rng.randint(1, 4))]
        de.append(", und ".join(f"{_DE[a]} {_VERB_DE[b]} {_OBJ_DE[c]}" for a, b, c in parts) + ".")
        en.append(", and ".join(f"{_EN[a]} {_VERB_EN[b]} {_OBJ_EN[c]}" for a, b, c in parts) + ".")
    return de, en


def write(path: Path, lines: list[str] | bytes) -> Path:
    raw = lines if isinstance(lines, bytes) else "".join(f"{x}\n" for x in lines).encode("utf-8")
    path.write_bytes(gzip.compress(raw) if path.suffix == ".gz" else raw)
    return path


@pytest.fixture
def corpus(tmp_path) -> Path:
    """train (gzipped, 300 pairs), val and test_2016_flickr (plain, 60 pairs each)."""
    d = tmp_path / "multi30k"
    d.mkdir()
    for split, n, ext, seed in (("train", 300, ".gz", 0), ("val", 60, "", 1), ("test_2016_flickr", 60, "", 2)):
        de, en = make_pairs(n, seed)
        write(d / f"{split}.de{ext}", de)
        write(d / f"{split}.en{ext}", en)
    return d


def dm_for(corpus: Path, tmp_path: Path, **kw) -> TranslationDataModule:
    kw = {"dir": str(corpus), "cache_dir": str(tmp_path / "cache"), "vocab_size": 200, **kw}
    return TranslationDataModule(**kw)


def setup_error(dm: TranslationDataModule) -> str:
    with pytest.raises(DataError) as ei:
        dm.setup()
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


# ----------------------------------------------------------------------------- validation


def test_missing_dir_names_absolute_path_and_fixes(tmp_path, monkeypatch):
    monkeypatch.delenv("HEADSWEEP_DATA", raising=False)
    msg = setup_error(dm_for(tmp_path / "nowhere", tmp_path))
    assert str((tmp_path / "nowhere").absolute()) in msg
    assert "data.dir=PATH" in msg and "HEADSWEEP_DATA" in msg


def test_env_var_redirects_default_dir(corpus, tmp_path, monkeypatch):
    """$HEADSWEEP_DATA fills data.dir in the config (so results.json records the directory used); an
    explicit data.dir still wins."""
    from headsweep.config import compose

    monkeypatch.setenv("HEADSWEEP_DATA", str(corpus))
    assert compose([]).data.dir == str(corpus)
    assert compose([f"data.dir={tmp_path}"]).data.dir == str(tmp_path)
    monkeypatch.setenv("HEADSWEEP_DATA", str(tmp_path / "gone"))
    msg = setup_error(TranslationDataModule(dir=compose([]).data.dir, cache_dir=str(tmp_path / "cache")))
    assert str(tmp_path / "gone") in msg and "HEADSWEEP_DATA" in msg


def test_missing_split_file(corpus, tmp_path):
    (corpus / "val.en").unlink()
    msg = setup_error(dm_for(corpus, tmp_path))
    assert "val.en" in msg and "val.en.gz" in msg and str(corpus.absolute()) in msg
    with pytest.raises(DataError):
        split_files(corpus, "val", "en")
    assert split_files(corpus, "train", "de") == corpus / "train.de.gz"


def test_line_count_mismatch(corpus, tmp_path):
    de, en = make_pairs(60, 1)
    write(corpus / "val.en", en[:-2])
    msg = setup_error(dm_for(corpus, tmp_path))
    assert str(corpus / "val.de") in msg and str(corpus / "val.en") in msg
    assert "60" in msg and "58" in msg


def test_line_count_mismatch_caught_despite_limit(corpus, tmp_path):
    de, en = make_pairs(60, 1)
    write(corpus / "val.en", en[:-2])
    assert "58" in setup_error(dm_for(corpus, tmp_path, limit_eval=10))


def test_empty_split(corpus, tmp_path):
    write(corpus / "test_2016_flickr.de", ["", "  "] * 5)
    write(corpus / "test_2016_flickr.en", ["x", ""] * 5)
    msg = setup_error(dm_for(corpus, tmp_path))
    assert "test_2016_flickr.de" in msg and "no non-empty" in msg


@pytest.mark.parametrize("name", ["train.de.gz", "val.en"])
def test_non_utf8_names_file_and_line(corpus, tmp_path, name):
    path = corpus / name
    lines = (gzip.decompress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes()).split(b"\n")
    lines[6] = b"Ein Caf\xe9 in der Stadt."  # latin-1 byte, line 7
    write(path, b"\n".join(lines))
    msg = setup_error(dm_for(corpus, tmp_path))
    assert str(path) in msg and "line 7" in msg and "UTF-8" in msg


def test_unknown_source_and_tokenizer_list_allowed_values(tmp_path):
    with pytest.raises(DataError, match="allowed: local, hub"):
        TranslationDataModule(source="s3")
    with pytest.raises(DataError, match="allowed: bpe, unigram"):
        TranslationDataModule(tokenizer="wordpiece")


def test_empty_pairs_dropped_and_counted(corpus, tmp_path, caplog):
    de, en = make_pairs(60, 1)
    de[3], en[10], de[20], en[20] = "", "   ", "", ""
    write(corpus / "val.de", de)
    write(corpus / "val.en", en)
    dm = dm_for(corpus, tmp_path)
    with caplog.at_level(logging.INFO, logger="headsweep.data"):
        dm.setup()
    src, ref = dm.texts("val")
    assert len(src) == len(ref) == 57
    assert src[3] == de[4] and ref[3] == en[4]  # file order kept, pair stays aligned
    assert any("dropped 3 empty" in r.getMessage() and "val.de" in r.getMessage() for r in caplog.records)


# ----------------------------------------------------------------------------- hub source


def test_hub_unreachable_is_one_quick_line(monkeypatch, tmp_path):
    """No route to the hub: one line in seconds, not datasets' half minute of retries."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("tried the hub anyway"))
    dm = TranslationDataModule(source="hub", hub_name="wmt14", hub_config="de-en", cache_dir=str(tmp_path))
    t = time.monotonic()
    msg = setup_error(dm)
    assert time.monotonic() - t < 5
    assert "wmt14" in msg and "cannot reach 127.0.0.1" in msg
    assert "use data.source=local data.dir=PATH for local files" in msg


def test_hub_error_is_one_line(monkeypatch, tmp_path):
    def offline(*args, **kwargs):  # what datasets raises after its retries when offline
        raise ConnectionError("Couldn't reach 'wmt14' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(hd_hub, "hub_unreachable", lambda: None)
    monkeypatch.setattr(datasets, "load_dataset", offline)
    msg = setup_error(
        TranslationDataModule(source="hub", hub_name="wmt14", hub_config="de-en", cache_dir=str(tmp_path))
    )
    assert "wmt14" in msg and "Couldn't reach" in msg and "use data.source=local data.dir=PATH" in msg


FALLBACK = {"name": "bentrevett/multi30k", "splits": {"val": "validation", "test_2016_flickr": "test"}}


def test_missing_local_folder_takes_the_same_corpus_from_the_hub(monkeypatch, tmp_path, caplog):
    """The default data config (source=local with hub_fallback): no folder, so the hub's copy, its splits
    renamed to ours, and one line saying so."""
    asked = []

    def hub_copy(name, config, split):
        asked.append((name, split))
        de, en = make_pairs({"train": 200, "validation": 30, "test": 20}[split])
        return datasets.Dataset.from_dict({"de": de, "en": en})

    monkeypatch.setattr(hd_hub, "hub_unreachable", lambda: None)
    monkeypatch.setattr(datasets, "load_dataset", hub_copy)
    dm = dm_for(tmp_path / "nowhere", tmp_path, hub_fallback=FALLBACK)
    with caplog.at_level(logging.INFO, logger="headsweep.data"):
        dm.setup()
    assert asked == [(FALLBACK["name"], s) for s in ("train", "validation", "test")]
    assert dm.texts("val") == make_pairs(30) and len(dm.texts("test_2016_flickr")[0]) == 20
    assert dm.loaded_from == "hub" and dm.split_path("val") is None
    said = [r.getMessage() for r in caplog.records if "hub" in r.getMessage()]
    assert len(said) == 1 and "nowhere not found" in said[0] and "bentrevett/multi30k" in said[0]


def test_neither_local_folder_nor_hub_names_both_fixes(monkeypatch, tmp_path):
    monkeypatch.setattr(
        hd_hub, "hub_unreachable", lambda: "cannot reach huggingface.co:443 (Name or service not known)"
    )
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("tried the hub anyway"))
    msg = setup_error(dm_for(tmp_path / "nowhere", tmp_path, hub_fallback=FALLBACK))
    assert str((tmp_path / "nowhere").absolute()) in msg and "data.dir=PATH" in msg and "HEADSWEEP_DATA" in msg
    assert "bentrevett/multi30k" in msg and "huggingface.co" in msg


def test_the_default_data_config_falls_back_to_the_hub():
    from headsweep.config import compose

    data = compose(["paths.output_dir=/tmp/x"]).data
    assert data.source == "local" and data.hub_fallback.name == "bentrevett/multi30k"
    assert dict(data.hub_fallback.splits) == {"train": "train", "val": "validation", "test_2016_flickr": "test"}


def test_hub_dotted_columns(monkeypatch, tmp_path):
    def fake(name, config, split):
        de, en = make_pairs({"train": 200, "validation": 30, "test": 30}[split])
        return datasets.Dataset.from_dict({"translation": [{"de": d, "en": e} for d, e in zip(de, en)]})

    monkeypatch.setattr(datasets, "load_dataset", fake)
    monkeypatch.setattr(hd_hub, "hub_unreachable", lambda: None)
    dm = TranslationDataModule(
        source="hub",
        hub_name="fake",
        hub_columns={"src": "translation.de", "tgt": "translation.en"},
        val_split="validation",
        test_split="test",
        cache_dir=str(tmp_path),
        vocab_size=200,
    )
    dm.setup()
    assert dm.texts("validation") == make_pairs(30)
    bad = TranslationDataModule(
        source="hub",
        hub_name="fake",
        hub_columns={"src": "de", "tgt": "en"},
        val_split="validation",
        test_split="test",
        cache_dir=str(tmp_path),
    )
    assert "translation.de" in setup_error(bad)  # lists the available columns


# ----------------------------------------------------------------------------- tokenizer


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_tokenizer_round_trip_and_specials(corpus, tmp_path, kind):
    dm = dm_for(corpus, tmp_path, tokenizer=kind)
    dm.setup()
    tok = dm.tokenizer
    assert [tok.token_to_id(t) for t in ("<pad>", "<s>", "</s>", "<unk>")] == [0, 1, 2, 3]
    assert (dm.pad_id, dm.bos_id, dm.eos_id, dm.unk_id) == (0, 1, 2, 3)
    src, ref = dm.texts("test_2016_flickr")
    ids = dm.encode(src + ref)
    assert all(ids) and not any(i < 4 for seq in ids for i in seq)  # no specials, no unk
    assert dm.decode(ids) == src + ref
    # decode stops at the first EOS and drops pad/bos
    assert dm.decode([[1, *ids[0], 2, *ids[1], 0, 0]]) == [src[0]]
    # the tokenizer survives a checkpoint round trip
    assert load_tokenizer(dm.tokenizer_json).encode(src[0]).ids == tok.encode(src[0]).ids


def test_tokenizer_cache_reused_and_keyed(corpus, tmp_path, monkeypatch, caplog):
    dm = dm_for(corpus, tmp_path)
    dm.setup()
    dm.setup()  # idempotent
    path = Path(dm.tokenizer_path)
    assert path.parent == tmp_path / "cache" and path.name.startswith("tokenizer-") and path.is_file()
    mtime = path.stat().st_mtime_ns

    def no_training(*a, **k):
        raise AssertionError("retrained instead of using the cache")

    monkeypatch.setattr(hd_datamodule, "train_tokenizer", no_training)
    again = dm_for(corpus, tmp_path)
    with caplog.at_level(logging.INFO, logger="headsweep.data"):
        again.setup()
    assert again.tokenizer_path == str(path) and path.stat().st_mtime_ns == mtime
    assert any("loaded cached tokenizer" in r.getMessage() for r in caplog.records)
    assert again.tokenizer_json == dm.tokenizer_json
    monkeypatch.undo()

    other = dm_for(corpus, tmp_path, vocab_size=150)
    other.setup()
    assert other.tokenizer_path != str(path) and Path(other.tokenizer_path).is_file()
    assert other.vocab_size_actual <= 150 < dm.vocab_size_actual
    assert not list((tmp_path / "cache").glob("*.tmp"))  # atomic write left no temp files


# ----------------------------------------------------------------------------- batching


def test_token_batch_sampler_properties():
    rng = random.Random(0)
    lengths = [rng.randint(1, 40) for _ in range(500)] + [300]  # one sentence over the budget
    s = TokenBatchSampler(lengths, max_tokens=256, shuffle=True, seed=7)
    epochs = []
    for epoch in (0, 1):
        s.set_epoch(epoch)
        batches = list(s)
        assert len(batches) == len(s)
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))  # each once
        for b in batches:
            assert max(lengths[i] for i in b) * len(b) <= 256 or len(b) == 1
        epochs.append(batches)
    assert [500] in epochs[0]  # the over-long sentence forms its own batch
    s2 = TokenBatchSampler(lengths, max_tokens=256, shuffle=True, seed=7)
    s2.set_epoch(1)
    assert list(s2) == epochs[1]  # same (seed, epoch) -> same batches
    assert epochs[0] != epochs[1]  # new epoch -> new order
    # eval mode: deterministic, length-sorted, independent of epoch
    e = TokenBatchSampler(lengths, max_tokens=256)
    flat = [i for b in e for i in b]
    assert [lengths[i] for i in flat] == sorted(lengths)
    e.set_epoch(5)
    assert [i for b in e for i in b] == flat


@pytest.mark.parametrize("world", [2, 3])
def test_data_parallel_ranks_split_each_epoch(world):
    """Each rank takes an equally long share of the one-process epoch (same shuffle on every rank); the
    shares are disjoint but for the few batches that top up the last ones, and together they are the
    one-process epoch."""
    random.seed(1)
    lengths = [random.randint(1, 60) for _ in range(2000)]
    one = [tuple(b) for b in TokenBatchSampler(lengths, 256, shuffle=True, seed=3)]
    for epoch in (0, 1):
        shares = []
        for rank in range(world):
            s = TokenBatchSampler(lengths, 256, shuffle=True, seed=3, rank=rank, world_size=world)
            s.set_epoch(epoch)
            shares.append([tuple(b) for b in s])
            assert len(s) == len(shares[-1]) == -(-len(one) // world)
        one_epoch = TokenBatchSampler(lengths, 256, shuffle=True, seed=3)
        one_epoch.set_epoch(epoch)
        one = [tuple(b) for b in one_epoch]
        union = [b for share in shares for b in share]
        assert set(union) == set(one)
        assert len(union) - len(set(union)) == len(shares[0]) * world - len(one) < world  # only the top-up repeats
    with pytest.raises(DataError, match="rank 2 is not in 0..1"):
        TokenBatchSampler(lengths, 256, rank=2, world_size=2)


def test_resumed_epoch_continues_its_batch_order():
    lengths = list(range(1, 300))
    s = TokenBatchSampler(lengths, 256, shuffle=True, seed=5)
    s.set_epoch(2)
    full = list(s)
    s.skip = 7
    assert list(s) == full[7:]
    assert list(s) == full  # the skip applies to one iteration only


def test_lightning_reaches_set_epoch(corpus, tmp_path):
    from lightning_fabric.utilities.data import _set_sampler_epoch

    dm = dm_for(corpus, tmp_path, max_tokens=200)
    dm.setup()
    dl = dm.train_dataloader()
    first = [b["index"].tolist() for b in dl]
    _set_sampler_epoch(dl, 3)  # what Lightning's fit loop calls each epoch
    assert dl.batch_sampler.epoch == 3
    assert [b["index"].tolist() for b in dl] != first


def test_batches_shift_pad_and_index(corpus, tmp_path):
    dm = dm_for(corpus, tmp_path, max_tokens=300)
    dm.setup()
    src_texts, tgt_texts = dm.texts("train")
    seen = []
    for batch in dm.train_dataloader():
        src, tgt_in, tgt_out, index = batch["src"], batch["tgt_in"], batch["tgt_out"], batch["index"]
        assert src.dtype == tgt_in.dtype == tgt_out.dtype == index.dtype == torch.long
        assert tgt_in.shape == tgt_out.shape and src.shape[0] == index.shape[0]
        assert max(src.numel(), tgt_in.numel()) <= 300 or len(index) == 1
        assert (tgt_in[:, 0] == dm.bos_id).all()
        for b, i in enumerate(index.tolist()):
            tgt = dm.encode([tgt_texts[i]])[0]
            n = len(tgt)
            assert tgt_in[b, : n + 1].tolist() == [dm.bos_id, *tgt]
            assert tgt_out[b, : n + 1].tolist() == [*tgt, dm.eos_id]
            assert (tgt_in[b, n + 1 :] == dm.pad_id).all() and (tgt_out[b, n + 1 :] == dm.pad_id).all()
        assert dm.decode(src) == [src_texts[i] for i in index.tolist()]  # index maps back to texts()
        assert dm.decode(tgt_out) == [tgt_texts[i] for i in index.tolist()]
        seen += index.tolist()
    assert sorted(seen) == list(range(len(src_texts)))

    val = list(dm.val_dataloader())
    assert sorted(i for b in val for i in b["index"].tolist()) == list(range(60))
    assert max(b["src"].numel() for b in val) <= dm.eval_max_tokens == 600


def test_max_len_filters_training_only(corpus, tmp_path, caplog):
    dm = dm_for(corpus, tmp_path, max_len=12)
    with caplog.at_level(logging.INFO, logger="headsweep.data"):
        dm.setup()
    n_train = len(dm.texts("train")[0])
    kept = sorted(i for b in dm.train_dataloader() for i in b["index"].tolist())
    assert 0 < len(kept) < n_train
    for i in kept:  # kept pairs fit, with the +1 for BOS/EOS
        s, t = dm.encode([dm.texts("train")[0][i], dm.texts("train")[1][i]])
        assert max(len(s), len(t)) + 1 <= 12
    assert any(f"filtered {n_train - len(kept)} of {n_train}" in r.getMessage() for r in caplog.records)
    assert sum(len(b["index"]) for b in dm.val_dataloader()) == 60  # eval splits untouched ...
    dm.check_fits("val", 100)
    with pytest.raises(
        DataError,
        match=r"^split 'val': pair \d+ is \d+ subwords long with BOS/EOS, longer than "
        r"model.max_len=12; evaluation scores every pair: raise model.max_len$",
    ):
        dm.check_fits("val", 12)  # ... so what the model cannot take is one line before training


def test_limits_and_add_split(corpus, tmp_path):
    dm = dm_for(corpus, tmp_path, limit_train=100, limit_eval=10)
    dm.setup()
    assert len(dm.texts("train")[0]) == 100 and len(dm.texts("val")[1]) == 10
    de, en = make_pairs(5, seed=9)
    dm.add_split("extra", de + [""], en + ["dropped"])
    assert dm.texts("extra") == (de, en)
    assert sum(len(b["index"]) for b in dm.dataloader("extra")) == 5
    with pytest.raises(DataError, match="loaded splits: train, val, test_2016_flickr, extra"):
        dm.texts("nope")


# ----------------------------------------------------------------------------- real data


@pytest.mark.skipif(not REAL_DIR.is_dir(), reason="Multi30k not present at ../shared/data/multi30k")
def test_real_multi30k_slice(tmp_path):
    dm = TranslationDataModule(
        dir=str(REAL_DIR), cache_dir=str(tmp_path), vocab_size=2000, limit_train=3000, limit_eval=200
    )
    dm.setup()
    src, ref = dm.texts("val")
    assert len(src) == 200
    assert dm.decode(dm.encode(ref)) == ref
    assert len(dm.train_dataloader()) > 0
