"""Translating with a trained model: the one place that picks greedy or beam search, cuts at EOS and
detokenises, and scores detokenised text with sacreBLEU. Used by training (val/test), `make evaluate`,
the head analysis and the benchmarks."""

from __future__ import annotations

import contextlib

import sacrebleu
import torch
from tokenizers import Tokenizer
from torch import Tensor

from headsweep.data import decode
from headsweep.model import Transformer, decoding


def corpus_scores(hypotheses: list[str], references: list[str]) -> dict:
    """sacreBLEU BLEU and chrF on detokenised text, with their signatures."""
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    b, c = bleu.corpus_score(hypotheses, [references]), chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": b.score,
        "chrf": c.score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def decode_tokens(
    net: Transformer,
    src: Tensor,
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_len_extra: int,
    beam_size: int = 1,
    alpha: float = 0.6,
    max_len_factor: float | None = None,
) -> Tensor:
    """Output ids (B, T) for source ids (B, S): greedy, or beam search with the GNMT length penalty alpha;
    at most source length + max_len_extra tokens (the paper's limit), max_len_factor x the source length
    when given, and the model's positions."""
    max_len = decoding.max_output_length(src, pad_id, max_len_extra, net.cfg.max_len - 1, max_len_factor)
    if beam_size > 1:
        return decoding.beam_search(net, src, bos_id, eos_id, max_len, beam_size, alpha)
    return decoding.greedy(net, src, bos_id, eos_id, max_len)


def translate(
    net: Transformer,
    tokenizer: Tokenizer,
    src: Tensor,
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_len_extra: int,
    beam_size: int = 1,
    alpha: float = 0.6,
    max_len_factor: float | None = None,
) -> list[str]:
    """Detokenised translations of a batch of source ids, cut at the first EOS."""
    tokens = decode_tokens(
        net,
        src,
        bos_id=bos_id,
        eos_id=eos_id,
        pad_id=pad_id,
        max_len_extra=max_len_extra,
        beam_size=beam_size,
        alpha=alpha,
        max_len_factor=max_len_factor,
    )
    return decode(tokenizer, tokens)


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of a Lightning precision setting ("bf16-mixed" -> bfloat16, "32-true" -> None)."""
    precision = str(precision)
    if precision.startswith("bf16"):
        return torch.bfloat16
    if precision.startswith("16"):
        return torch.float16
    return None


def translate_batches(
    module,
    batches,
    n: int,
    *,
    beam_size: int = 1,
    alpha: float | None = None,
    max_len_extra: int | None = None,
    precision: str = "32-true",
) -> list[str]:
    """Translations of padded batches (with `index` = row) by a TranslationModule, back in row order.

    Decoded under the run's training precision so the scores compare with its test/bleu (trainer.test
    decodes under the same autocast)."""
    hp, device = module.hparams, module.device
    dtype = autocast_dtype(precision)
    hyps: list[str | None] = [None] * n
    autocast = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
    with torch.no_grad(), autocast:
        for batch in batches:
            texts = module.translate(
                batch["src"].to(device),
                beam_size,
                alpha=hp.length_penalty if alpha is None else alpha,
                max_len_extra=hp.max_len_extra if max_len_extra is None else max_len_extra,
            )
            for i, text in zip(batch["index"].tolist(), texts):
                hyps[i] = text
    return hyps
