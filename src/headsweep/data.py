"""Parallel-text data for headsweep: loading + validation, a joint subword tokenizer,
and token-budget batching (as in "Attention Is All You Need": batches hold a roughly
constant number of tokens rather than a constant number of sentences).

Every problem with the data or the data config is reported as a one-line ``DataError``
that names the file (and line) and says how to fix it, *before* any training starts.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import random
import tempfile
from pathlib import Path

import datasets
import pytorch_lightning as pl
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from torch.utils.data import DataLoader, Dataset

log = logging.getLogger("headsweep.data")

DEFAULT_DIR = "../shared/data/multi30k"
DATA_ENV = "HEADSWEEP_DATA"
SOURCES = ("local", "hub")
TOKENIZERS = ("bpe", "unigram")
# Fixed ids so the model, the collate function and checkpoints agree without lookups.
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
# Bump when the tokenizer recipe changes, so stale cached tokenizers are not reused.
_TOKENIZER_RECIPE = "v1"


class DataError(ValueError):
    """One-line, actionable message about bad data/config."""

    def __init__(self, message: str):
        # Messages often embed exception text; keep them on one line for logs and sweeps.
        super().__init__(" ".join(str(message).split()))


# ----------------------------------------------------------------------------- reading


def split_files(dir: str | os.PathLike, split: str, lang: str) -> Path:
    """Return the file holding ``split`` in ``lang``: ``{split}.{lang}`` or ``{split}.{lang}.gz``."""
    base = Path(dir)
    for name in (f"{split}.{lang}", f"{split}.{lang}.gz"):
        if (base / name).is_file():
            return base / name
    raise DataError(
        f"missing data file for split '{split}': expected {base.absolute() / f'{split}.{lang}'} "
        f"or {split}.{lang}.gz in that directory"
    )


def _read_lines(path: Path) -> list[str]:
    """Read a text file (optionally gzipped) strictly as UTF-8, one sentence per line."""
    opener = gzip.open if path.suffix == ".gz" else open
    lines = []
    try:
        with opener(path, "rb") as f:
            # Iterate over *bytes* lines: they split on b"\n" only, whereas str.splitlines()
            # would also split on U+2028/U+0085 etc. and silently misalign the two sides.
            for lineno, raw in enumerate(f, start=1):
                try:
                    lines.append(raw.decode("utf-8").rstrip("\r\n"))
                except UnicodeDecodeError as e:
                    raise DataError(
                        f"{path}: line {lineno}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at byte "
                        f"offset {e.start} of the line); re-encode the file as UTF-8"
                    ) from None
    except (OSError, EOFError) as e:  # corrupt/truncated gzip, permission denied, ...
        raise DataError(f"{path}: cannot read file ({type(e).__name__}: {e})") from None
    return lines


def _clean_pairs(src: list[str], tgt: list[str], what: str) -> tuple[list[str], list[str]]:
    """Strip whitespace and drop pairs where either side is blank (logged with the count)."""
    pairs = [(s.strip(), t.strip()) for s, t in zip(src, tgt)]
    kept = [(s, t) for s, t in pairs if s and t]
    if len(kept) < len(pairs):
        log.warning("%s: dropped %d empty sentence pair(s) of %d", what, len(pairs) - len(kept), len(pairs))
    if not kept:
        raise DataError(f"{what}: no non-empty sentence pairs (split is empty)")
    return [s for s, _ in kept], [t for _, t in kept]


# ----------------------------------------------------------------------------- tokenizer


def load_tokenizer(json_str: str) -> Tokenizer:
    """Rebuild a tokenizer from ``Tokenizer.to_str()`` output (e.g. stored in a checkpoint)."""
    tok = Tokenizer.from_str(json_str)
    for i, name in enumerate(SPECIALS):
        if tok.token_to_id(name) != i:
            raise DataError(f"tokenizer has special token {name!r} at id {tok.token_to_id(name)}, expected {i}")
    return tok


def _train_tokenizer(kind: str, vocab_size: int, texts: list[str]) -> Tokenizer:
    """Train a joint sentencepiece-style subword tokenizer (Metaspace keeps spacing recoverable)."""
    if kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS), show_progress=False)
    else:
        tok = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=list(SPECIALS), unk_token="<unk>", show_progress=False
        )
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return load_tokenizer(tok.to_str())  # checks the special-token ids


def _atomic_write(path: Path, text: str) -> None:
    """Write via a temp file + os.replace so parallel sweep jobs never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ----------------------------------------------------------------------------- batching


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

    def __init__(self, lengths: list[int], max_tokens: int, shuffle: bool = False, seed: int = 0,
                 rank: int = 0, world_size: int = 1):
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
            batches = (batches + batches[: per_rank * self.world_size - len(batches)])[self.rank::self.world_size]
        return batches

    def __iter__(self):
        batches, self.skip = self._batches()[self.skip:], 0
        return iter(batches)

    def __len__(self) -> int:
        # The greedy cut depends only on the sorted multiset of lengths, so the count is the
        # same for every epoch; computing it is cheap (a sort) and done rarely.
        return len(self._batches())


class _PairDataset(Dataset):
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


# ----------------------------------------------------------------------------- data module


class TranslationDataModule(pl.LightningDataModule):
    pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

    def __init__(
        self,
        source: str = "local",
        dir: str = DEFAULT_DIR,
        hub_name: str | None = None,
        hub_config: str | None = None,
        hub_columns: dict | None = None,
        src_lang: str = "de",
        tgt_lang: str = "en",
        train_split: str = "train",
        val_split: str = "val",
        test_split: str = "test_2016_flickr",
        tokenizer: str = "bpe",
        vocab_size: int = 8000,
        cache_dir: str = ".cache/headsweep",
        max_tokens: int = 4096,
        eval_max_tokens: int | None = None,
        max_len: int = 128,
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
        # HEADSWEEP_DATA redirects the *default* location; an explicitly given dir always wins.
        self.dir_from_env = dir == DEFAULT_DIR and bool(os.environ.get(DATA_ENV))
        self.dir = os.environ[DATA_ENV] if self.dir_from_env else dir
        self.hub_name, self.hub_config = hub_name, hub_config
        cols = dict(hub_columns) if hub_columns else {"src": src_lang, "tgt": tgt_lang}
        if set(cols) != {"src", "tgt"}:
            raise DataError(f"data.hub_columns must have exactly the keys src and tgt, got {sorted(cols)}")
        self.hub_columns = cols
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.train_split, self.val_split, self.test_split = train_split, val_split, test_split
        self.tokenizer_type = tokenizer
        self.vocab_size = vocab_size
        self.cache_dir = cache_dir
        self.max_tokens = max_tokens
        self.eval_max_tokens = eval_max_tokens or 2 * max_tokens
        self.max_len = max_len
        self.limit_train, self.limit_eval = limit_train, limit_eval
        self.seed = seed
        self.num_workers = num_workers

        self.tokenizer: Tokenizer | None = None
        self.tokenizer_path: str | None = None
        self._texts: dict[str, tuple[list[str], list[str]]] = {}
        self._data: dict[str, _PairDataset] = {}
        self._raw: dict[str, datasets.Dataset] = {}

    # -- loading ------------------------------------------------------------------------

    def _check_dir(self) -> Path:
        # absolute() so every message names a findable file even if the cwd changed (Hydra).
        d = Path(self.dir).absolute()
        if not d.is_dir():
            origin = f"${DATA_ENV}" if self.dir_from_env else "data.dir"
            raise DataError(
                f"data directory not found: {d} (set by {origin}); point to the Multi30k files "
                f"with data.dir=PATH or the environment variable {DATA_ENV}=PATH"
            )
        return d

    def _load_local(self, split: str) -> tuple[list[str], list[str]]:
        d = self._check_dir()
        sf, tf = split_files(d, split, self.src_lang), split_files(d, split, self.tgt_lang)
        src, tgt = _read_lines(sf), _read_lines(tf)
        if len(src) != len(tgt):
            raise DataError(f"line counts differ: {sf} has {len(src)} lines but {tf} has {len(tgt)} lines")
        return _clean_pairs(src, tgt, f"{sf} / {tf}")

    def _load_hub(self, split: str) -> tuple[list[str], list[str]]:
        what = f"hub dataset '{self.hub_name}'" + (f" (config {self.hub_config})" if self.hub_config else "")
        try:
            ds = datasets.load_dataset(self.hub_name, self.hub_config, split=split)
        except Exception as e:  # network, unknown name/split, ...: all become one actionable line
            reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
            raise DataError(
                f"could not load {what} split '{split}': {type(e).__name__}: {reason}; "
                f"use data.source=local data.dir=PATH for local files"
            ) from None
        # flatten() turns nested fields into dotted column names ('translation.de'),
        # so the dotted paths in hub_columns can be read column-wise (fast) instead of per row.
        flat = ds.flatten()
        out = []
        for side in ("src", "tgt"):
            col = self.hub_columns[side]
            if col not in flat.column_names:
                raise DataError(
                    f"{what} split '{split}' has no column '{col}' (data.hub_columns.{side}); "
                    f"available: {', '.join(flat.column_names)}"
                )
            out.append([x if isinstance(x, str) else "" for x in flat[col]])
        return _clean_pairs(out[0], out[1], f"{what} split '{split}'")

    # -- tokenizer ------------------------------------------------------------------------

    def _tokenizer_key(self) -> str:
        h = hashlib.sha256()
        if self.source == "local":
            # Content hash, not path/mtime: copies of the same data share one cache entry and
            # an edited file invalidates it.
            for lang in (self.src_lang, self.tgt_lang):
                h.update(split_files(self.dir, self.train_split, lang).read_bytes())
        else:
            h.update(repr((self.hub_name, self.hub_config, self.train_split, sorted(self.hub_columns.items()))).encode())
        h.update(
            repr(
                (self.src_lang, self.tgt_lang, self.tokenizer_type, self.vocab_size, self.limit_train, _TOKENIZER_RECIPE)
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
        tok = _train_tokenizer(self.tokenizer_type, self.vocab_size, src + tgt)
        _atomic_write(path, tok.to_str())
        log.info("trained %s tokenizer (vocab %d) -> %s", self.tokenizer_type, tok.get_vocab_size(), path)
        return tok

    # -- public API -------------------------------------------------------------------

    def setup(self, stage: str | None = None) -> None:
        if self.tokenizer is not None:  # idempotent: Lightning calls setup once per stage
            return
        # Load and validate every split first, so bad data fails before minutes of training.
        load = self._load_local if self.source == "local" else self._load_hub
        for split in dict.fromkeys((self.train_split, self.val_split, self.test_split)):
            src, tgt = load(split)
            limit = self.limit_train if split == self.train_split else self.limit_eval
            if limit is not None:
                src, tgt = src[:limit], tgt[:limit]
            self._texts[split] = (src, tgt)
        self.tokenizer = self._get_tokenizer()
        for split, (src, tgt) in self._texts.items():
            self._data[split] = self._build(split, src, tgt, filter_long=split == self.train_split)

    def _build(self, split: str, src: list[str], tgt: list[str], filter_long: bool) -> _PairDataset:
        self._raw[split] = datasets.Dataset.from_dict({"src": src, "tgt": tgt})
        s_ids, t_ids = self.encode(src), self.encode(tgt)
        index = list(range(len(src)))
        if filter_long:
            # +1: the target gets BOS (tgt_in) / EOS (tgt_out); src counted the same way for symmetry.
            keep = [i for i in index if max(len(s_ids[i]), len(t_ids[i])) + 1 <= self.max_len]
            if len(keep) < len(index):
                log.warning(
                    "%s: filtered %d of %d training pairs longer than max_len=%d subwords",
                    split, len(index) - len(keep), len(index), self.max_len,
                )
            if not keep:
                raise DataError(f"split '{split}': every pair is longer than data.max_len={self.max_len}; raise it")
            s_ids, t_ids, index = [s_ids[i] for i in keep], [t_ids[i] for i in keep], keep
        return _PairDataset(s_ids, t_ids, index)

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
        if self.source != "local":
            return None
        return str(split_files(self._check_dir(), split, self.tgt_lang))

    def texts(self, split: str) -> tuple[list[str], list[str]]:
        self._need_split(split)
        return self._texts[split]

    def encode(self, texts: list[str]) -> list[list[int]]:
        encs = self._need_tokenizer().encode_batch(list(texts), add_special_tokens=False)
        return [e.ids for e in encs]

    def decode(self, ids) -> list[str]:
        """Ids (lists or a 2-D tensor) -> strings. Cut at the first EOS; all special tokens
        (pad, bos, eos, unk) are dropped."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        cut = [list(seq[: seq.index(EOS_ID)]) if EOS_ID in seq else list(seq) for seq in map(list, ids)]
        return self._need_tokenizer().decode_batch(cut, skip_special_tokens=True)

    def add_split(self, name: str, src_texts: list[str], tgt_texts: list[str]) -> None:
        """Register extra evaluation data (never filtered, limit_eval not applied)."""
        src_texts, tgt_texts = list(src_texts), list(tgt_texts)
        if len(src_texts) != len(tgt_texts):
            raise DataError(f"split '{name}': {len(src_texts)} source vs {len(tgt_texts)} target sentences")
        self._need_tokenizer()
        src, tgt = _clean_pairs(src_texts, tgt_texts, f"split '{name}'")
        self._texts[name] = (src, tgt)
        self._data[name] = self._build(name, src, tgt, filter_long=False)

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
        )

    def train_dataloader(self) -> DataLoader:
        # Training batches are split between data-parallel ranks; evaluation decodes the whole split on
        # every rank (identical metrics, nothing to reduce; rank 0 writes the results).
        trainer = self.trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        loader = self.dataloader(self.train_split, shuffle=True, rank=rank, world_size=world)
        if trainer is not None and trainer.global_step > 0:
            # Resumed from a checkpoint (Lightning restores the loops before asking for this loader, and
            # iterates it once before it sets the epoch): continue the interrupted epoch's own batch order
            # after the batches already trained on, so the run sees the data an uninterrupted one would.
            sampler = loader.batch_sampler
            sampler.set_epoch(trainer.current_epoch)
            sampler.skip = max(trainer.global_step - trainer.current_epoch * len(sampler), 0)
        return loader

    def val_dataloader(self) -> DataLoader:
        return self.dataloader(self.val_split)

    def test_dataloader(self) -> DataLoader:
        return self.dataloader(self.test_split)
