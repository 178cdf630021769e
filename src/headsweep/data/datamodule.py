"""The Lightning data module: loads and validates every split (local files, or the Hugging Face hub, where
source=local falls back to when its folder is missing and the config names the same corpus there), trains
or reuses the cached joint tokenizer (on the sentences as they are), joins k pairs into one example where
data.join asks (data.joining), and serves token-budget batches."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import datasets
import pytorch_lightning as pl
import torch
from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from headsweep.data import hub
from headsweep.data.batching import PairDataset, TokenBatchSampler, collate
from headsweep.data.files import DATA_ENV, DataError, atomic_write, clean_pairs, read_lines, split_files
from headsweep.data.joining import JOIN_FIX, check_join, check_split_size, fit_max_len, join_lines, what_example
from headsweep.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    TOKENIZER_RECIPE,
    TOKENIZERS,
    UNK_ID,
    decode,
    load_tokenizer,
    train_tokenizer,
)
from headsweep.schema import choice, integer, mapping, nullable, text

log = logging.getLogger(__name__)

DEFAULT_DIR = "../shared/data/multi30k"
SOURCES = ("local", "hub")

# What each setting of conf/data/ may hold, checked before any data is read (training.schema); the token
# budgets against the lengths they must hold are checked there too.
_NAME = text(pattern=r"\S+", pattern_text="a non-empty name without spaces")
DATA_SETTINGS = {
    "_target_": text(),
    "source": choice(*SOURCES),
    "dir": text(pattern=r".+", pattern_text="a path"),
    "hub_name": nullable(_NAME),
    "hub_config": nullable(_NAME),
    "hub_columns": nullable(mapping(fix="e.g. data.hub_columns={src:de,tgt:en}")),
    "hub_fallback": nullable(mapping()),
    "src_lang": _NAME,
    "tgt_lang": _NAME,
    "train_split": _NAME,
    "val_split": _NAME,
    "test_split": _NAME,
    "tokenizer": choice(*TOKENIZERS),
    "vocab_size": integer(16, 1_000_000, fix="e.g. data.vocab_size=8000"),
    "cache_dir": text(pattern=r".+", pattern_text="a path"),
    "max_tokens": integer(2, 10**7, fix="e.g. data.max_tokens=2048"),
    "eval_max_tokens": nullable(
        integer(2, 10**7, fix="e.g. data.eval_max_tokens=4096, or null for 2 x data.max_tokens")
    ),
    "max_len": integer(2, 65536, fix="e.g. data.max_len=128"),
    "join": integer(1, 10**6, fix=JOIN_FIX),
    "limit_train": nullable(integer(1, 10**9, fix="e.g. 2000, or null for the whole split")),
    "limit_eval": nullable(integer(1, 10**9, fix="e.g. 2000, or null for the whole split")),
    "seed": integer(0, 2**32 - 1),
    "num_workers": integer(0, 256),
}


class TranslationDataModule(pl.LightningDataModule):
    """The arguments are conf/data/'s keys, with its defaults, but for hub_fallback: where the local corpus
    is on the hub, {"name": ..., "splits": {our split: theirs}}, loaded when source=local and `dir` does not
    exist. None here, so that code alone never reaches for the network; conf/data/multi30k.yaml sets it."""

    pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

    def __init__(
        self,
        source: str = "local",
        dir: str = DEFAULT_DIR,
        hub_name: str | None = None,
        hub_config: str | None = None,
        hub_columns: dict | None = None,
        hub_fallback: dict | None = None,
        src_lang: str = "de",
        tgt_lang: str = "en",
        train_split: str = "train",
        val_split: str = "val",
        test_split: str = "test_2016_flickr",
        tokenizer: str = "bpe",
        vocab_size: int = 8000,
        cache_dir: str = ".cache/headsweep",
        max_tokens: int = 2048,
        eval_max_tokens: int | None = None,
        max_len: int = 128,
        join: int = 1,
        limit_train: int | None = None,
        limit_eval: int | None = None,
        seed: int = 1234,
        num_workers: int = 0,
    ):
        super().__init__()
        # Check config values up front so a typo fails at construction, not mid-run.
        if source not in SOURCES:
            raise DataError(f"unknown data.source={source!r}; allowed: {', '.join(SOURCES)}")
        if tokenizer not in TOKENIZERS:
            raise DataError(f"unknown data.tokenizer={tokenizer!r}; allowed: {', '.join(TOKENIZERS)}")
        if source == "hub" and not hub_name:
            raise DataError("data.source=hub needs data.hub_name (e.g. wmt14); or use data.source=local data.dir=PATH")
        self.source = source
        self.dir = dir  # conf/data/multi30k.yaml fills it from $HEADSWEEP_DATA when that is set
        self.hub_name, self.hub_config = hub_name, hub_config
        cols = dict(hub_columns) if hub_columns else {"src": src_lang, "tgt": tgt_lang}
        if set(cols) != {"src", "tgt"}:
            raise DataError(f"data.hub_columns must have exactly the keys src and tgt, got {sorted(cols)}")
        self.hub_columns = cols
        self.hub_fallback = dict(hub_fallback) if hub_fallback else None
        self.loaded_from: str | None = None  # local or hub, once setup() has chosen
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.train_split, self.val_split, self.test_split = train_split, val_split, test_split
        self.tokenizer_type = tokenizer
        self.vocab_size = vocab_size
        self.cache_dir = cache_dir
        self.max_tokens = max_tokens
        self.eval_max_tokens = eval_max_tokens or 2 * max_tokens
        self.max_len = max_len
        self.join = check_join(join)  # sentence pairs per example (data.joining); limits count sentences
        self.limit_train, self.limit_eval = limit_train, limit_eval
        self.seed = seed
        self.num_workers = num_workers

        self.tokenizer: Tokenizer | None = None
        self.tokenizer_path: str | None = None
        self._texts: dict[str, tuple[list[str], list[str]]] = {}  # joined by data.join once the vocabulary is
        self._pairs: dict[str, int] = {}  # sentence pairs per split before joining, as messages count them
        self._data: dict[str, PairDataset] = {}
        self._raw: dict[str, datasets.Dataset] = {}

    # -- loading ------------------------------------------------------------------------

    def _check_dir(self) -> Path:
        # absolute() so every message names a findable file even if the cwd changed (Hydra).
        d = Path(self.dir).absolute()
        if not d.is_dir():
            raise DataError(
                f"data directory not found: {d}; point to the Multi30k files "
                f"with data.dir=PATH or the environment variable {DATA_ENV}=PATH"
            )
        return d

    def load_local(self, split: str) -> tuple[list[str], list[str]]:
        d = self._check_dir()
        sf, tf = split_files(d, split, self.src_lang), split_files(d, split, self.tgt_lang)
        src, tgt = read_lines(sf), read_lines(tf)
        if len(src) != len(tgt):
            raise DataError(f"line counts differ: {sf} has {len(src)} lines but {tf} has {len(tgt)} lines")
        return clean_pairs(src, tgt, f"{sf} / {tf}")

    def _choose_source(self) -> str:
        """local or hub: source=local takes the hub's copy (hub_fallback) when `dir` does not exist."""
        return hub.choose_source(self.source, self.dir, self.hub_fallback, self._check_dir)

    def _load_hub(self, split: str) -> tuple[list[str], list[str]]:
        """A split from the hub: the configured dataset (source=hub), or the local corpus's copy there."""
        try:
            if self.source == "hub":
                return hub.load_hub_pairs(self.hub_name, self.hub_config, split, self.hub_columns)
            fb = self.hub_fallback
            theirs = fb.get("splits", {}).get(split, split)
            return hub.load_hub_pairs(
                fb["name"], fb.get("config"), theirs, {"src": self.src_lang, "tgt": self.tgt_lang}
            )
        except DataError as e:
            fix = (
                "use data.source=local data.dir=PATH for local files"
                if self.source == "hub"
                else f"or put the files in {Path(self.dir).absolute()} "
                f"(or point data.dir=PATH or {DATA_ENV}=PATH at them)"
            )
            raise DataError(f"{e}; {fix}") from None

    # -- tokenizer ------------------------------------------------------------------------

    def _tokenizer_key(self) -> str:
        h = hashlib.sha256()
        if self.loaded_from == "local":
            # Content hash, not path/mtime: copies of the same data share one cache entry and
            # an edited file invalidates it.
            for lang in (self.src_lang, self.tgt_lang):
                h.update(split_files(self.dir, self.train_split, lang).read_bytes())
        else:
            h.update(
                repr(
                    (self.hub_name, self.hub_config, self.train_split, sorted(self.hub_columns.items()))
                    if self.source == "hub"
                    else (self.hub_fallback["name"], self.train_split)
                ).encode()
            )
        h.update(
            repr(
                (self.src_lang, self.tgt_lang, self.tokenizer_type, self.vocab_size, self.limit_train, TOKENIZER_RECIPE)
            ).encode()
        )
        return h.hexdigest()[:16]

    def _get_tokenizer(self) -> Tokenizer:
        path = Path(self.cache_dir) / f"tokenizer-{self._tokenizer_key()}.json"
        self.tokenizer_path = str(path)
        if path.is_file():
            try:
                tok = load_tokenizer(path.read_text(encoding="utf-8"))
                log.info("loaded cached tokenizer %s (vocab %d)", path, tok.get_vocab_size())
                return tok
            except Exception as e:  # unreadable cache: retrain rather than fail the run
                log.warning("cached tokenizer %s unusable (%s); retraining", path, e)
        src, tgt = self._texts[self.train_split]
        tok = train_tokenizer(self.tokenizer_type, self.vocab_size, src + tgt)
        atomic_write(path, tok.to_str())
        log.info("trained %s tokenizer (vocab %d) -> %s", self.tokenizer_type, tok.get_vocab_size(), path)
        return tok

    # -- public API -------------------------------------------------------------------

    def setup(self, stage: str | None = None) -> None:
        if self.tokenizer is not None:  # idempotent: Lightning calls setup once per stage
            return
        # Load and validate every split first, so bad data fails before minutes of training.
        self.loaded_from = self._choose_source()
        if self.source == "hub" and (reason := hub.hub_unreachable()):
            raise DataError(
                f"could not load hub dataset '{self.hub_name}': {reason}; "
                "use data.source=local data.dir=PATH for local files"
            )
        load = self.load_local if self.loaded_from == "local" else self._load_hub
        for split in dict.fromkeys((self.train_split, self.val_split, self.test_split)):
            src, tgt = load(split)
            limit = self.limit_train if (train := split == self.train_split) else self.limit_eval
            if limit is not None:
                src, tgt = src[:limit], tgt[:limit]
            check_split_size(self.join, split, len(src), limit and f"data.limit_{'train' if train else 'eval'}={limit}")
            self._texts[split], self._pairs[split] = (src, tgt), len(src)
        self.tokenizer = self._get_tokenizer()  # on the sentences as they are: every join has one vocabulary
        for split, (src, tgt) in self._texts.items():
            self._texts[split] = (join_lines(src, self.join), join_lines(tgt, self.join))
            self._data[split] = self._build(split, *self._texts[split], filter_long=split == self.train_split)

    def _build(self, split: str, src: list[str], tgt: list[str], filter_long: bool) -> PairDataset:
        self._raw[split] = datasets.Dataset.from_dict({"src": src, "tgt": tgt})
        s_ids, t_ids = self.encode(src), self.encode(tgt)
        index = list(range(len(src)))
        if filter_long:  # data.max_len: long training pairs left out at join 1, a joined one stops (joining)
            index = fit_max_len(split, s_ids, t_ids, self.max_len, self.join, self._pairs.get(split, len(src)))
            s_ids, t_ids = [s_ids[i] for i in index], [t_ids[i] for i in index]
        return PairDataset(s_ids, t_ids, index)

    def check_fits(self, split: str, max_len: int, decode_extra: int | None = None) -> None:
        """Every pair of an evaluation split fits the model's max_len positions with BOS/EOS: checked before
        training, not mid-run. A joined one (data.join > 1) also leaves room to decode its source + decode_extra
        (module.max_len_extra) tokens, or decoding would cut its hypothesis short."""
        self._need_split(split)
        data = self._data[split]
        lengths = [max(len(s), len(t)) + 1 for s, t in zip(data.src, data.tgt)]
        i = max(range(len(lengths)), key=lengths.__getitem__)
        what = what_example(data.index[i], self.join, self._pairs.get(split, len(lengths)))
        if lengths[i] > max_len:
            raise DataError(
                f"split '{split}': {what} is {lengths[i]} subwords long with BOS/EOS, "
                f"longer than model.max_len={max_len}; evaluation scores every pair: raise model.max_len"
            )
        longest = max(map(len, data.src))
        if self.join > 1 and decode_extra is not None and (need := longest + decode_extra + 1) > max_len:
            raise DataError(
                f"split '{split}': decoding its longest joined source ({longest} subwords, data.join={self.join}) up "
                f"to module.max_len_extra={decode_extra} tokens longer needs model.max_len >= {need}, got {max_len}: "
                "raise model.max_len (or lower module.max_len_extra)"
            )

    @property
    def vocab_size_actual(self) -> int:
        return self._need_tokenizer().get_vocab_size()

    @property
    def tokenizer_json(self) -> str:
        return self._need_tokenizer().to_str()

    def _need_tokenizer(self) -> Tokenizer:
        if self.tokenizer is None:
            self.setup()
        return self.tokenizer

    def _need_split(self, split: str):
        if self.tokenizer is None:
            self.setup()
        if split not in self._texts:
            raise DataError(f"unknown split '{split}'; loaded splits: {', '.join(self._texts)}")

    def split_path(self, split: str) -> str | None:
        """The target-side file of a local split (what references are read from); None for hub data."""
        if self.loaded_from != "local":
            return None
        return str(split_files(self._check_dir(), split, self.tgt_lang))

    def texts(self, split: str) -> tuple[list[str], list[str]]:
        self._need_split(split)
        return self._texts[split]

    def encode(self, texts: list[str]) -> list[list[int]]:
        encs = self._need_tokenizer().encode_batch(list(texts), add_special_tokens=False)
        return [e.ids for e in encs]

    def decode(self, ids) -> list[str]:
        """Ids (lists or a 2-D tensor) -> strings, cut at the first EOS, special tokens dropped."""
        return decode(self._need_tokenizer(), ids)

    def ensure_split(self, split: str) -> None:
        """The run's own splits are loaded by setup(); another split of a local data dir is read from its files."""
        try:
            self.texts(split)
        except DataError:
            if self.loaded_from != "local":
                raise
            self.add_split(split, *self.load_local(split))  # one clear error naming a missing file

    def add_files(self, src: str, ref: str) -> str:
        """A pair of plain text files (one sentence per line, optionally .gz) as a split named after them."""
        paths = [Path(src), Path(ref)]
        for p in paths:
            if not p.is_file():
                raise DataError(f"file not found: {p}")
        name = paths[0].name.removesuffix(".gz").rsplit(".", 1)[0] or "file"  # newstest.de -> newstest
        self.add_split(name, *(read_lines(p) for p in paths))
        return name

    def add_split(self, name: str, src_texts: list[str], tgt_texts: list[str]) -> None:
        """Register extra evaluation data (never filtered, limit_eval not applied; joined by data.join)."""
        src_texts, tgt_texts = list(src_texts), list(tgt_texts)
        if len(src_texts) != len(tgt_texts):
            raise DataError(f"split '{name}': {len(src_texts)} source vs {len(tgt_texts)} target sentences")
        self._need_tokenizer()
        src, tgt = clean_pairs(src_texts, tgt_texts, f"split '{name}'")
        check_split_size(self.join, name, len(src))  # joined as the run's own splits are
        self._texts[name], self._pairs[name] = (join_lines(src, self.join), join_lines(tgt, self.join)), len(src)
        self._data[name] = self._build(name, *self._texts[name], filter_long=False)

    def dataloader(self, split: str, shuffle: bool = False, rank: int = 0, world_size: int = 1) -> DataLoader:
        self._need_split(split)
        data = self._data[split]
        # A batch's padded size is bounded by its longest side (tgt gets +1 for BOS/EOS).
        lengths = [max(len(s), len(t) + 1) for s, t in zip(data.src, data.tgt)]
        budget = self.max_tokens if shuffle else self.eval_max_tokens
        sampler = TokenBatchSampler(lengths, budget, shuffle=shuffle, seed=self.seed, rank=rank, world_size=world_size)
        if self.num_workers > 0:
            # Workers never tokenize; silence the tokenizers fork warning in each of them.
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        return DataLoader(
            data,
            batch_sampler=sampler,
            collate_fn=collate,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            # Each iterator draws its base seed from here, not from torch's global RNG, which then feeds dropout
            # alone: a resumed run (or a budgets branch) draws the uninterrupted run's masks (issue 68)
            generator=torch.Generator().manual_seed(self.seed),
        )

    def train_dataloader(self) -> DataLoader:
        # Training batches are split between data-parallel ranks; evaluation decodes the whole split on
        # every rank (identical metrics, nothing to reduce; rank 0 writes the results).
        trainer = self.trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        loader = self.dataloader(self.train_split, shuffle=True, rank=rank, world_size=world)
        if trainer is not None and trainer.global_step > 0:
            # Resumed from a checkpoint: continue the interrupted epoch's own batch order after the batches
            # already trained on, as an uninterrupted run would. Every epoch has len(sampler) batches, so the step
            # says where; trainer.current_epoch does not after a checkpoint of an epoch's last batch (issue 68).
            sampler, n = loader.batch_sampler, len(loader.batch_sampler)
            sampler.set_epoch(trainer.global_step // n)
            sampler.skip = trainer.global_step % n
        return loader

    def val_dataloader(self) -> DataLoader:
        return self.dataloader(self.val_split)

    def test_dataloader(self) -> DataLoader:
        return self.dataloader(self.test_split)
