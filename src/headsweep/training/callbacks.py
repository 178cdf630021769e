"""Lightning callbacks the stock ones lack."""

from __future__ import annotations

import pytorch_lightning as pl

from headsweep.schema import choice, flag, integer, nullable, text

# What each setting of conf/callbacks/ may hold (training.schema checks them before any data is read, with
# the checkpoint interval and count against the training budget and checkpoint averaging).
CHECKPOINT_SETTINGS = {
    "_target_": text(),
    "dirpath": text(),
    "filename": text(pattern=r".+", pattern_text="a file name pattern"),
    "auto_insert_metric_name": flag(),
    "monitor": nullable(text()),
    "mode": choice("min", "max"),
    "save_top_k": integer(
        0, 10**6, specials=(-1,), fix="e.g. callbacks.checkpoint.save_top_k=5, or -1 to keep every checkpoint"
    ),
    "save_last": flag(specials=("link",), null=True),
    "enable_version_counter": flag(),
    "every_n_train_steps": nullable(integer(0, 10**7)),
    "every_n_epochs": nullable(integer(0, 10**6)),
}
LR_MONITOR_SETTINGS = {
    "_target_": text(),
    "logging_interval": nullable(choice("step", "epoch")),
}


class FinalStepCheckpoint(pl.callbacks.ModelCheckpoint):
    """Lightning's ModelCheckpoint that also saves the weights training ends with.

    With `every_n_train_steps=n`, Lightning saves (step*.ckpt and last.ckpt) only at multiples of n, and
    its `on_train_end` saves last.ckpt only if none was ever saved: a run ending at step 1,150 (max_steps)
    or anywhere (max_time) kept step 1,100 as last.ckpt while its scores came from step 1,150, and the
    analysis, evaluation and averaging that read checkpoints worked on other weights than the run scored.
    """

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # before Lightning's own, which would save last.ckpt alone after a resume (no step checkpoint)
        if not self._should_skip_saving_checkpoint(trainer):  # skips when this step is already saved
            candidates = self._monitor_candidates(trainer)
            self._save_topk_checkpoint(trainer, candidates)
            self._save_last_checkpoint(trainer, candidates)
        super().on_train_end(trainer, pl_module)
