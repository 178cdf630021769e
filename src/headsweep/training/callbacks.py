"""Lightning callbacks the stock ones lack."""

from __future__ import annotations

import math
from pathlib import Path

import pytorch_lightning as pl

from headsweep.analysis.redundancy import head_similarity
from headsweep.schema import choice, flag, integer, items, nullable, text

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
BRANCH_POINTS_SETTINGS = {
    "_target_": text(),
    "steps": items(integer(1, 10**8), fix="e.g. callbacks.branch_points.steps=[920,1840,3680], or [] for none"),
    "dirpath": text(),
}
HEAD_SIMILARITY_SETTINGS = {
    "_target_": text(),
    "sentences": integer(1, 10**4, fix="e.g. callbacks.head_similarity.sentences=32"),
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


class BranchPoints(pl.Callback):
    """The whole training state (weights, optimizer, schedule, loop counters, data position, RNG) after each of
    `steps` optimizer steps, in dirpath/step<step>.ckpt, kept for good: ModelCheckpoint rotates its own files
    only, never these. A `make budgets` trunk saves them where each budget's cooldown starts; its branches
    continue from them (headsweep.training.branch). A trunk resumed after a kill saves those it had not reached;
    one already written (by this run, before the kill) is kept."""

    def __init__(self, steps=(), dirpath: str = "branch_points"):
        self.steps = sorted({int(s) for s in steps})
        self.dirpath = Path(dirpath)
        self.todo: set[int] = set()

    def path(self, step: int) -> Path:
        return self.dirpath / f"step{step:06d}.ckpt"

    def on_fit_start(self, trainer: pl.Trainer, pl_module) -> None:
        # decided once, before any rank writes: trainer.save_checkpoint waits for every rank
        self.todo = {s for s in self.steps if not self.path(s).is_file()}

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx) -> None:
        # after the optimizer and scheduler stepped, as ModelCheckpoint's step checkpoints: a resume from here
        # continues onto the uninterrupted run (tests/test_resume.py); every rank calls it, rank 0 writes
        if trainer.global_step in self.todo:
            self.todo.discard(trainer.global_step)
            trainer.save_checkpoint(self.path(trainer.global_step))


class HeadSimilarity(pl.Callback):
    """How alike each layer's heads are, over training (issue 53): at the start of training and after every
    validation, `heads/cos_qkv_<kind>`, `heads/cos_o_<kind>` and `heads/js_<kind>` for kind in enc_self, dec_self,
    cross (analysis.redundancy.head_similarity: mean pairwise cosine of the heads' projection weights, mean
    pairwise JS divergence of their attention maps), to metrics.csv and W&B with the validation's own metrics.

    The maps are those of one fixed batch: the first `sentences` sentences of the first validation batch (the
    validation loader does not shuffle), the same at every measurement, so the curve follows the weights alone.
    One teacher-forced pass over a few sentences: a fraction of a validation's cost.
    """

    def __init__(self, sentences: int = 32):
        self.sentences = sentences
        self.batch: dict | None = None

    def _keep(self, batch: dict) -> None:
        self.batch = {k: batch[k][: self.sentences].detach().clone() for k in ("src", "tgt_in")}

    def _measure(self, pl_module: pl.LightningModule) -> dict[str, float]:
        batch = {k: v.to(pl_module.device) for k, v in self.batch.items()}
        found = head_similarity(pl_module.net, batch, pl_module.hparams.pad_id)
        return {
            f"heads/{name}_{kind}": value
            for kind, values in found.items()
            for name, value in values.items()
            if not math.isnan(value)  # no W^Q slices to compare where heads are fixed
        }

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The point at init (identical heads: cos 1, JS 0), not again on a resume. Straight to the loggers: Lightning's
        # self.log here would be written at the end of the first epoch. At step -1, as Lightning writes a validation
        # after n steps at n - 1 (reports.sweep.cells.learning_curve adds the 1 back): after 0 steps.
        datamodule = getattr(trainer, "datamodule", None)
        if trainer.global_step == 0 and datamodule is not None:
            self._keep(next(iter(datamodule.val_dataloader())))
            metrics = self._measure(pl_module)
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=-1)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if self.batch is None and batch_idx == 0 and dataloader_idx == 0:
            self._keep(batch)

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after each validation while fitting, and the final weights' (train.fit_and_test validates them apart)
        if not trainer.sanity_checking and self.batch is not None:
            for key, value in self._measure(pl_module).items():  # beside the validation's own metrics
                pl_module.log(key, value, on_step=False, on_epoch=True)
