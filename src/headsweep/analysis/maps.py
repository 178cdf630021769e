"""Attention maps of chosen sentences: a row of the split (with its reference) or any source text (with
the model's own translation), teacher-forced with every attention module recording its weights."""

from __future__ import annotations

import torch

from headsweep.analysis.settings import AnalysisError
from headsweep.model import ATTENTION_KINDS, attention_switches
from headsweep.training.translate import decode_tokens


def sentence_weights(module, src_ids: list[int], tgt_ids: list[int]) -> dict[str, list[torch.Tensor]]:
    """Attention weights of one teacher-forced sentence pair: {kind: per layer (h, Tq, Tk)}."""
    net, hp = module.net, module.hparams
    src = torch.tensor([src_ids])
    tgt_in = torch.tensor([[hp.bos_id, *tgt_ids]])
    with attention_switches(net, record=True), torch.no_grad():
        memory, src_pad = net.encode(src)
        net.decode_hidden(tgt_in, memory, src_pad)
        return {kind: [m.last_weights[0].clone() for m in net.attention_layers(kind)] for kind in ATTENTION_KINDS}


def resolve_sentences(specs, module, datamodule, split: str) -> list[dict]:
    """Each spec is a row index of the split (its reference is the target side) or a source text
    (the model's greedy translation is the target side)."""
    src_texts, refs = datamodule.texts(split)
    out = []
    for n, spec in enumerate(specs):
        spec = str(spec).strip()
        if spec.isdigit():
            i = int(spec)
            if i >= len(src_texts):
                raise AnalysisError(
                    f"--sentences {i}: split '{split}' has {len(src_texts)} sentences (0..{len(src_texts) - 1})"
                )
            src_ids, tgt_ids = datamodule.encode([src_texts[i], refs[i]])
            out.append(
                {
                    "tag": f"{split}{i}",
                    "source": src_texts[i],
                    "target": refs[i],
                    "target_side": "reference",
                    "src_ids": src_ids,
                    "tgt_ids": tgt_ids,
                }
            )
        elif spec:
            (src_ids,) = datamodule.encode([spec])
            if not src_ids:
                raise AnalysisError(f"--sentences {spec!r}: the text has no tokens")
            hp = module.hparams
            row = decode_tokens(
                module.net,
                torch.tensor([src_ids]),
                bos_id=hp.bos_id,
                eos_id=hp.eos_id,
                pad_id=hp.pad_id,
                max_len_extra=hp.max_len_extra,
            )[0].tolist()
            tgt_ids = row[: row.index(hp.eos_id)] if hp.eos_id in row else row
            out.append(
                {
                    "tag": f"text{n}",
                    "source": spec,
                    "target": datamodule.decode([row])[0],
                    "target_side": "model translation",
                    "src_ids": src_ids,
                    "tgt_ids": tgt_ids,
                }
            )
    return out
