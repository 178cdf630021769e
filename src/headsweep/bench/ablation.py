"""The ablation job's speed: target tokens/s of a `make sweep BUDGET=ablation` job's training step as the
shipped results were made (fp32, eager) against the job as `make sweep` runs it now on this machine
(the ablation budget's precision here: bf16-mixed where the CPU has bf16 matmul units), timed in the
same run on the same batches with the threads a sweep job gets (cores / make sweep's JOBS), plus the
validation loss pass with and without the gradient work it used to do under no_grad.

    python -m headsweep.bench.ablation [--steps 12] [--warmup 3]
"""

from __future__ import annotations

import argparse
import os
import time

import hydra
import torch
from omegaconf import OmegaConf

from headsweep.bench.training import ours_tokens_per_s
from headsweep.config import compose, cpu_has_bf16
from headsweep.machine import cpu_class
from headsweep.model.losses import _LinearCrossEntropy
from headsweep.sweeps.sweep import default_jobs
from headsweep.training.module import TranslationModule

SHIPPED = "32-true"  # every job in results/ until this change: fp32, eager


def _job(threads: int):
    """The ablation job's config and data module, with its first training batches."""
    cfg = compose(["budget=ablation", "paths.output_dir=/tmp/headsweep-bench"])
    dm = hydra.utils.instantiate(cfg.data)
    dm.setup("fit")
    torch.set_num_threads(threads)
    return cfg, dm


def validation_loss_ms(module: TranslationModule, batches: list[dict], gradient_work: bool) -> float:
    """Mean ms per batch of the validation loss (no_grad), with or without the fused loss's gradient pass."""
    module.eval()
    apply = _LinearCrossEntropy.apply
    if gradient_work:  # what the loss did before: needs_input_grad alone decided it
        _LinearCrossEntropy.apply = lambda h, w, t, s, c, grad: apply(h, w, t, s, c, True)
    try:
        with torch.no_grad():
            module.loss(batches[0], smoothing=0.0)
            t = time.perf_counter()
            for b in batches:
                module.loss(b, smoothing=0.0)
            return (time.perf_counter() - t) / len(batches) * 1e3
    finally:
        _LinearCrossEntropy.apply = apply


def bench_ablation(steps: int = 12, warmup: int = 3) -> float:
    """Print and return new / shipped tokens/s of the ablation job's training step."""
    cores = os.cpu_count() or 1
    threads = max(1, cores // default_jobs(cores))
    saved_threads = torch.get_num_threads()
    cfg, dm = _job(threads)
    new = str(cfg.trainer.precision)
    it = iter(dm.train_dataloader())
    batches = [next(it) for _ in range(steps + warmup)]
    print(
        f"\n## Ablation job (budget=ablation, {threads} thread(s) as make sweep runs each of its jobs here; "
        f"{steps} timed steps, same batches)\nCPU class: {cpu_class()}; bf16 units: {cpu_has_bf16()}; "
        f"the ablation budget chooses {new} here",
        flush=True,
    )
    model = OmegaConf.to_container(cfg.model, resolve=True)
    shipped = ours_tokens_per_s(dm, batches, warmup, SHIPPED, model)
    ours = ours_tokens_per_s(dm, batches, warmup, new, model) if new != SHIPPED else shipped
    ratio = ours / shipped
    print(
        f"ablation job: shipped {SHIPPED} eager {shipped:.0f} target tok/s, new default {new} eager "
        f"{ours:.0f} target tok/s: {ratio:.2f}x",
        flush=True,
    )
    module = TranslationModule(model=model, vocab_size=dm.vocab_size_actual, tokenizer_json=dm.tokenizer_json)
    dm.setup("validate")
    val = [b for _, b in zip(range(8), dm.val_dataloader())]
    before, after = validation_loss_ms(module, val, True), validation_loss_ms(module, val, False)
    print(
        f"validation loss pass (fp32, no_grad): {after:.0f} ms/batch, {before:.0f} with the gradient work it did "
        f"before: {before / after:.2f}x",
        flush=True,
    )
    torch.set_num_threads(saved_threads)
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12, help="timed training steps per side")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    args = parser.parse_args()
    bench_ablation(args.steps, args.warmup)


if __name__ == "__main__":
    main()
