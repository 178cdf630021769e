"""A joint subword tokenizer (BPE or unigram, trained with Hugging Face `tokenizers`) with fixed
special-token ids, so the model, the collate function and checkpoints agree without lookups."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from headsweep.data.files import DataError

TOKENIZERS = ("bpe", "unigram")
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
# Bump when the tokenizer recipe changes, so stale cached tokenizers are not reused.
TOKENIZER_RECIPE = "v1"


def load_tokenizer(json_str: str) -> Tokenizer:
    """Rebuild a tokenizer from ``Tokenizer.to_str()`` output (e.g. stored in a checkpoint)."""
    tok = Tokenizer.from_str(json_str)
    for i, name in enumerate(SPECIALS):
        if tok.token_to_id(name) != i:
            raise DataError(f"tokenizer has special token {name!r} at id {tok.token_to_id(name)}, expected {i}")
    return tok


def train_tokenizer(kind: str, vocab_size: int, texts: list[str]) -> Tokenizer:
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


def decode(tok: Tokenizer, ids) -> list[str]:
    """Ids (lists or a 2-D tensor) -> strings: cut at the first EOS, special tokens dropped."""
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    cut = [list(seq[: seq.index(EOS_ID)]) if EOS_ID in seq else list(seq) for seq in map(list, ids)]
    return tok.decode_batch(cut, skip_special_tokens=True)
