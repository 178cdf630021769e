"""Models the benchmarks time when no checkpoint is given: random weights at a config's size."""

from __future__ import annotations

from headsweep.training.module import TranslationModule


def random_module(model: dict, datamodule, module_cfg) -> TranslationModule:
    """A TranslationModule of this model config with random weights, sized by the data module's vocabulary."""
    return TranslationModule(
        model=model,
        vocab_size=datamodule.vocab_size_actual,
        tokenizer_json=datamodule.tokenizer_json,
        pad_id=datamodule.pad_id,
        bos_id=datamodule.bos_id,
        eos_id=datamodule.eos_id,
        max_len_extra=module_cfg.max_len_extra,
        length_penalty=module_cfg.length_penalty,
    ).eval()
