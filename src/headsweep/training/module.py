"""LightningModule: label-smoothed training of the Transformer, BLEU on greedy/beam decodes."""

from __future__ import annotations

import time

import pytorch_lightning as pl
import torch
from torch import Tensor

from headsweep.data import load_tokenizer
from headsweep.model import Transformer, TransformerConfig, count_parameters
from headsweep.model.losses import linear_cross_entropy
from headsweep.model.lr_scaling import SCALINGS, check_scaling, lr_factors, param_groups
from headsweep.schema import choice, integer, items, mapping, nullable, number, share, text
from headsweep.training.schedules import (
    COOLDOWNS,
    DECAY_BY,
    SCHEDULES,
    budget_progress,
    lr_factor,
    schedule_progress,
)
from headsweep.training.translate import corpus_scores, translate

# What each setting of conf/module/ may hold (training.schema checks them all before any data is read;
# check_settings below gives the module's own longer messages for the ones it checks).
MODULE_SETTINGS = {
    "_target_": text(),
    "model": mapping(),  # ${model}: conf/model/'s settings, checked as model.*
    "label_smoothing": share(fix="e.g. module.label_smoothing=0.1 (the paper's)"),
    "peak_lr": nullable(number(0.0, 1.0, lo_open=True, fix="e.g. module.peak_lr=2e-3, or null for the paper's rate")),
    "warmup_steps": integer(1, 10**7, fix="e.g. module.warmup_steps=300"),
    "schedule": choice(*SCHEDULES),
    "decay_fraction": number(0.0, 1.0, lo_open=True, fix="e.g. module.decay_fraction=0.25"),
    "cooldown": choice(*COOLDOWNS, fix="e.g. module.cooldown=sqrt (wsd's decay as 1 - sqrt(t))"),
    "betas": items(share(), length=2, fix="e.g. module.betas=[0.9,0.98] (the paper's Adam betas)"),
    "eps": number(0.0, 1.0, lo_open=True, fix="e.g. module.eps=1e-9 (the paper's)"),
    "weight_decay": number(0.0, 1.0),
    "eval_every": integer(1, 10**6),
    "max_len_extra": integer(0, 65535, fix="e.g. module.max_len_extra=50 (the paper's)"),
    "test_beam_size": integer(1, 64, fix="e.g. module.test_beam_size=4 (the paper's), or 1 for greedy"),
    "length_penalty": number(0.0, 10.0, fix="e.g. module.length_penalty=0.6 (the paper's alpha)"),
    "l0_lambda": number(0.0, 1000.0),
    "gate_lr": number(0.0, 10.0, lo_open=True),
    "decay_by": choice(*DECAY_BY),
    "lr_scaling": choice(*SCALINGS, fix="e.g. module.lr_scaling=mup (each matrix's rate by base fan-in / fan-in)"),
    # the base cell's fan-ins {w_o, ff_w2}; make sweep sets it per job (model.lr_scaling)
    "lr_base": nullable(mapping()),
}


def check_settings(
    label_smoothing: float,
    schedule: str,
    decay_fraction: float,
    eval_every: int,
    l0_lambda: float,
    gate_lr: float,
    decay_by: str = "steps_or_time",
    lr_scaling: str = "none",
    lr_base: dict | None = None,
    cooldown: str = "linear",
) -> None:
    """The module's settings that cannot work, as one line naming the key (checks.check_config calls it
    before any data is read)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"module.schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if cooldown not in COOLDOWNS:
        raise ValueError(
            f"module.cooldown={cooldown!r}: wsd's decay is linear (1 - t) or sqrt (1 - sqrt(t), Hägele et al. 2024)"
        )
    if decay_by not in DECAY_BY:
        raise ValueError(
            f"module.decay_by={decay_by!r}: use steps (the learning rate follows the step alone; the "
            "time cap only stops the job) or steps_or_time (the larger of the step and time shares)"
        )
    if not 0.0 < decay_fraction <= 1.0:
        raise ValueError(
            f"module.decay_fraction={decay_fraction} is the share of the budget wsd decays over: "
            "use a value in (0, 1], e.g. 0.25"
        )
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"module.label_smoothing={label_smoothing} must be in [0, 1), e.g. 0.1 (the paper's)")
    if not isinstance(eval_every, int) or eval_every < 1:
        raise ValueError(f"module.eval_every={eval_every}: greedy val BLEU runs at every N-th validation; use N >= 1")
    if l0_lambda < 0 or gate_lr <= 0:
        raise ValueError(f"module.l0_lambda must be >= 0 and module.gate_lr > 0, got {l0_lambda}, {gate_lr}")
    check_scaling(lr_scaling, lr_base)


def train_time(trainer: pl.Trainer) -> tuple[float | None, float | None]:
    """(seconds trained so far, the time cap in seconds) from Lightning's Timer, which trainer.max_time
    adds; (None, None) without a time cap."""
    timer = next((cb for cb in trainer.callbacks if isinstance(cb, pl.callbacks.Timer)), None)
    if timer is None:
        return None, None
    elapsed = timer.time_elapsed("train")
    return elapsed, elapsed + timer.time_remaining("train")


class TranslationModule(pl.LightningModule):
    """Trains `Transformer` with label-smoothed cross-entropy and Adam: linear warm-up to `peak_lr`, then
    `schedule` (headsweep.training.schedules: linear, cosine or wsd decay to zero at the end of the budget, wsd's
    decay shaped by `cooldown`; constant, a trunk that never decays; or the paper's inverse square root). The end of
    the budget is trainer.max_steps or trainer.max_time, whichever comes first (decay_by="steps_or_time"), or
    trainer.max_steps alone (decay_by="steps", the sweep budgets: the rate is a function of the step on any machine,
    and the time cap only stops training).

    The defaults are conf/module/translation.yaml's for the default model (tests/test_train.py holds them
    equal); conf also scales peak_lr with the width (d_model^-0.5, 2e-3 at d_model 256), which a number
    given here does not. peak_lr=None uses the paper's exact rate, d_model^-0.5 * warmup^-0.5 at the peak.

    lr_scaling="mup": per-matrix Adam rates, W^O's and the FFN's W_2's peak scaled by lr_base's fan-in over
    theirs (headsweep.model.lr_scaling; the schedule multiplies every group alike).

    With model.concrete_gates the loss adds l0_lambda * the expected number of open head gates (Voita
    et al. 2019), the gates' log alpha learn at gate_lr (same schedule), and each layer's open-gate count
    is logged as gates/<kind>.<layer>.
    """

    def __init__(
        self,
        model: dict,
        vocab_size: int,
        tokenizer_json: str,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
        label_smoothing: float = 0.1,
        peak_lr: float | None = 2e-3,
        warmup_steps: int = 300,
        schedule: str = "linear",
        decay_fraction: float = 0.25,
        betas: tuple[float, float] = (0.9, 0.98),
        eps: float = 1e-9,
        weight_decay: float = 0.0,
        eval_every: int = 3,
        max_len_extra: int = 50,
        test_beam_size: int = 4,
        length_penalty: float = 0.6,
        l0_lambda: float = 0.0,
        gate_lr: float = 0.05,
        decay_by: str = "steps_or_time",
        lr_scaling: str = "none",
        lr_base: dict | None = None,
        cooldown: str = "linear",
    ):
        super().__init__()
        lr_base = None if lr_base is None else dict(lr_base)
        check_settings(
            label_smoothing,
            schedule,
            decay_fraction,
            eval_every,
            l0_lambda,
            gate_lr,
            decay_by,
            lr_scaling,
            lr_base,
            cooldown,
        )
        # Not sent to the loggers: they get the resolved config, and tokenizer_json is ~0.7 MB of text.
        self.save_hyperparameters(logger=False)
        self.net = Transformer(TransformerConfig(**model, vocab_size=vocab_size, pad_id=pad_id))
        self.tokenizer = load_tokenizer(tokenizer_json)
        self.param_counts = count_parameters(self.net)
        self._eval_outputs: list[tuple[Tensor, list[str]]] = []
        self.hypotheses: dict[str, list[str]] = {}  # split -> hypotheses in file order (test)
        self.scores: dict[str, dict] = {}
        self.train_tokens, self.train_seconds, self._t0 = 0, 0.0, None  # training steps only
        self.val_bleu_step = -1  # the training step whose weights the last val/bleu scored
        self.validations_done = 0  # validations during fit so far: BLEU runs at every eval_every-th

    # ----- training -----
    def loss(self, batch: dict, smoothing: float | None = None) -> tuple[Tensor, int]:
        """Cross-entropy per target token, padding excluded; label-smoothed unless smoothing=0."""
        memory, src_pad = self.net.encode(batch["src"])
        hidden = self.net.decode_hidden(batch["tgt_in"], memory, src_pad)  # (B, T, d_model)
        real = batch["tgt_out"].ne(self.hparams.pad_id)
        loss = linear_cross_entropy(
            hidden[real],
            self.net.output_weight,
            batch["tgt_out"][real],
            self.hparams.label_smoothing if smoothing is None else smoothing,
        )
        return loss, int(real.sum())

    def on_train_batch_start(self, batch, batch_idx):
        self._t0 = time.perf_counter()

    def training_step(self, batch, batch_idx):
        loss, n_tokens = self.loss(batch)
        self.train_tokens += n_tokens
        self.log("train/loss", loss, prog_bar=True, batch_size=n_tokens)
        if self.net.cfg.concrete_gates:
            l0 = self.net.expected_open_heads()
            self.log("train/l0", l0, batch_size=n_tokens)
            for kind, layers in self.net.open_heads().items():
                for layer, open_ in enumerate(layers):
                    self.log(f"gates/{kind}.{layer}", float(sum(open_)), batch_size=n_tokens)
            loss = loss + self.hparams.l0_lambda * l0
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx):
        # Time only the training steps (not validation), so tokens/s is the training step's speed.
        self.train_seconds += time.perf_counter() - self._t0
        self.log("train/tgt_tokens_per_s", self.train_tokens / self.train_seconds, prog_bar=True)

    def configure_optimizers(self):
        hp = self.hparams
        peak = hp.peak_lr if hp.peak_lr is not None else (self.net.cfg.d_model * hp.warmup_steps) ** -0.5
        gates = [p for name, p in self.named_parameters() if name.endswith("concrete.log_alpha")]
        rest = [(name, p) for name, p in self.named_parameters() if not name.endswith("concrete.log_alpha")]
        # lr_scaling mup: a group per factor (W^O, the FFN's W_2 at base fan-in / fan-in); none: one group
        factors = {f"net.{n}": f for n, f in lr_factors(self.net, hp.lr_scaling, hp.lr_base).items()}
        groups = [
            *param_groups(rest, factors, peak),
            *([{"params": gates, "lr": hp.gate_lr, "weight_decay": 0.0}] if gates else []),
        ]
        opt = torch.optim.Adam(groups, lr=peak, betas=tuple(hp.betas), eps=hp.eps, weight_decay=hp.weight_decay)
        max_steps = self.trainer.max_steps if self.trainer.max_steps > 0 else None
        warmup_progress = hp.warmup_steps / max_steps if max_steps else 0.0

        def factor(done: int) -> float:  # the rate of step done + 1; a plain function: not saved in checkpoints
            progress = self.schedule_progress(done)
            return lr_factor(
                hp.schedule,
                done + 1,
                hp.warmup_steps,
                progress,
                warmup_progress,
                hp.decay_fraction,
                hp.get("cooldown", "linear"),
            )

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def budget_spent(self, done: int) -> float:
        """The share of the training budget spent after `done` steps, in [0, 1]: the larger of the step and
        the time fraction (what the schedule decays by). The time share depends on the machine, so under a
        time cap one seed can follow another schedule on a slower CPU."""
        max_steps = self.trainer.max_steps if self.trainer.max_steps > 0 else None
        elapsed, max_time = train_time(self.trainer)
        return budget_progress(done, max_steps, elapsed or 0.0, max_time)

    def schedule_progress(self, done: int) -> float:
        """What the learning rate decays by after `done` steps: budget_spent under decay_by=steps_or_time,
        the step share alone under decay_by=steps (the same schedule on any machine)."""
        max_steps = self.trainer.max_steps if self.trainer.max_steps > 0 else None
        elapsed, max_time = train_time(self.trainer)
        return schedule_progress(self.hparams.decay_by, done, max_steps, elapsed or 0.0, max_time)

    # ----- evaluation -----
    def translate(
        self,
        src: Tensor,
        beam_size: int = 1,
        alpha: float | None = None,
        max_len_extra: int | None = None,
        max_len_factor: float | None = None,
    ) -> list[str]:
        """Detokenised translations of source ids (B, S): greedy, or beam search (alpha: length penalty);
        max_len_factor caps the output at that many times the source length."""
        hp = self.hparams
        return translate(
            self.net,
            self.tokenizer,
            src,
            bos_id=hp.bos_id,
            eos_id=hp.eos_id,
            pad_id=hp.pad_id,
            max_len_extra=hp.max_len_extra if max_len_extra is None else max_len_extra,
            beam_size=beam_size,
            alpha=hp.length_penalty if alpha is None else alpha,
            max_len_factor=max_len_factor,
        )

    def validation_step(self, batch, batch_idx):
        loss, n_tokens = self.loss(batch, smoothing=0.0)  # plain NLL, so exp(loss) is the perplexity
        self.log("val/loss", loss, batch_size=n_tokens, on_epoch=True)
        if self.val_bleu_now():
            self._eval_outputs.append((batch["index"].cpu(), self.translate(batch["src"])))

    def val_bleu_now(self) -> bool:
        """Greedy-decode the validation set at every `eval_every`-th validation (never in the sanity
        check), and always in trainer.validate() (training's final validation of the last weights)."""
        if self.trainer.sanity_checking:
            return False
        return self.trainer.state.fn == "validate" or (self.validations_done + 1) % self.hparams.eval_every == 0

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking and self.trainer.state.fn == "fit":
            self.validations_done += 1
        loss = self.trainer.callback_metrics.get("val/loss")
        if loss is not None:
            self.log("val/ppl", torch.exp(loss))
        if self._eval_outputs:
            split = self.trainer.datamodule.val_split
            hyps = self._gather(split)
            scores = corpus_scores(hyps, self.trainer.datamodule.texts(split)[1])
            self.log("val/bleu", scores["bleu"], prog_bar=True)
            self.log("val/chrf", scores["chrf"])
            self.val_bleu_step = self.global_step

    def test_step(self, batch, batch_idx):
        loss, n_tokens = self.loss(batch, smoothing=0.0)
        self.log("test/loss", loss, batch_size=n_tokens, on_epoch=True)
        greedy = self.translate(batch["src"])
        beam = self.translate(batch["src"], self.hparams.test_beam_size) if self.hparams.test_beam_size > 1 else greedy
        self._eval_outputs.append((batch["index"].cpu(), list(zip(greedy, beam))))

    def on_test_epoch_end(self):
        split = self.trainer.datamodule.test_split
        pairs = self._gather(split)
        refs = self.trainer.datamodule.texts(split)[1]
        for name, hyps in (("greedy", [g for g, _ in pairs]), ("beam", [b for _, b in pairs])):
            self.hypotheses[f"{split}.{name}"] = hyps
            self.scores[f"{split}.{name}"] = corpus_scores(hyps, refs)
        main = self.scores[f"{split}.beam"]
        self.log("test/bleu", main["bleu"])
        self.log("test/chrf", main["chrf"])
        self.log("test/bleu_greedy", self.scores[f"{split}.greedy"]["bleu"])
        self.log("test/ppl", torch.exp(self.trainer.callback_metrics["test/loss"]))

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # torch's RNG state too (dropout masks): a resumed run draws the masks an uninterrupted one would.
        checkpoint["headsweep"] = {
            "validations_done": self.validations_done,
            "val_bleu_step": self.val_bleu_step,
            "train_tokens": self.train_tokens,
            "train_seconds": self.train_seconds,
            "torch_rng": torch.get_rng_state(),
            # where in the schedule these weights are: averaging picks the annealed tail
            "budget_spent": self.budget_spent(self.trainer.global_step),
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("headsweep", {})
        self.validations_done = state.get("validations_done", 0)
        self.val_bleu_step = state.get("val_bleu_step", -1)
        self.train_tokens = state.get("train_tokens", 0)
        self.train_seconds = state.get("train_seconds", 0.0)
        if self._trainer is not None and "torch_rng" in state:  # resuming training, not loading for evaluation
            self._resume_rng = state["torch_rng"]

    def on_train_start(self):
        # Set torch's RNG only now: creating the resumed epoch's DataLoader iterator drew from it in between.
        if getattr(self, "_resume_rng", None) is not None:
            torch.set_rng_state(self._resume_rng)
            self._resume_rng = None

    def _gather(self, split: str) -> list:
        """Eval outputs back in file order (batches are sorted by length)."""
        n = len(self.trainer.datamodule.texts(split)[0])
        ordered = [None] * n
        for index, outputs in self._eval_outputs:
            for i, item in zip(index.tolist(), outputs):
                ordered[i] = item
        self._eval_outputs = []
        return ordered
