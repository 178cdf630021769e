"""Parallel text in, token-budget batches out: files -> tokenizer -> batching -> the Lightning data module."""

from headsweep.data.batching import TokenBatchSampler, collate, make_batches
from headsweep.data.datamodule import TranslationDataModule
from headsweep.data.files import DataError, read_lines, split_files
from headsweep.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, decode, load_tokenizer

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "DataError",
    "TokenBatchSampler",
    "TranslationDataModule",
    "collate",
    "decode",
    "load_tokenizer",
    "make_batches",
    "read_lines",
    "split_files",
]
