"""Config checks that run before any data is read: one clear line for a value that cannot work."""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from headsweep.identity import heads_as_used
from headsweep.machine import this_class
from headsweep.model import Transformer, TransformerConfig
from headsweep.training.module import check_settings
from headsweep.training.runs import RunError, is_complete, resolve_checkpoint
from headsweep.training.schema import SchemaError, check_ranges, check_types


class ConfigError(ValueError):
    """A config value that cannot work; the message says which key and what to do."""


MIN_TIME_S = 60


def check_config(cfg: DictConfig) -> None:
    """Fail before any data is read, in one line, on a key the schema lacks, a value out of its type or range
    (training.schema), or settings that cannot work together (sizes, budgets, lengths)."""
    try:
        values = check_types(cfg)
    except SchemaError as e:
        raise ConfigError(str(e)) from None
    m = cfg.module
    try:  # the module's and average_from's own, longer messages first
        check_settings(
            m.label_smoothing,
            m.schedule,
            m.decay_fraction,
            m.eval_every,
            m.l0_lambda,
            m.gate_lr,
            m.get("decay_by", "steps_or_time"),
            m.get("lr_scaling", "none"),
            OmegaConf.to_container(m.lr_base, resolve=True) if m.get("lr_base") is not None else None,
            m.get("cooldown", "linear"),
        )
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not 0.0 <= cfg.get("average_from", 0.0) < 1.0:
        raise ConfigError(
            f"average_from={cfg.average_from} is a share of the training budget: use a value in "
            "[0, 1), e.g. 0.9 (average only checkpoints written in the last 10%)"
        )
    try:
        check_ranges(values)
    except SchemaError as e:
        raise ConfigError(str(e)) from None
    model = OmegaConf.to_container(cfg.model, resolve=True)
    try:
        with torch.device("meta"):  # shapes only: no memory, no time
            Transformer(TransformerConfig(**model))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"model config: {e}") from None
    if cfg.get("init_from"):
        try:
            ckpt = resolve_checkpoint(cfg.init_from)
        except RunError as e:
            raise ConfigError(f"init_from: {e}") from None
        check_heads(
            model,
            ckpt,
            f"init_from={cfg.init_from} was trained with",
            "fine-tune with the checkpoint's setting (the weights of its heads have other shapes or roles)",
        )
    if cfg.data.max_len > model["max_len"]:
        raise ConfigError(
            f"data.max_len={cfg.data.max_len} is longer than model.max_len={model['max_len']}, the "
            "longest sequence the model has positions for: lower data.max_len or raise model.max_len"
        )
    check_budget(cfg)
    check_lengths(cfg)
    check_intervals(cfg)


def check_lengths(cfg: DictConfig) -> None:
    """Token budgets against the longest pair a batch must hold, and the decoding limit against the positions."""
    d, model_len = cfg.data, cfg.model.max_len
    if d.max_tokens < d.max_len:
        raise ConfigError(
            f"data.max_tokens={d.max_tokens} cannot hold one training pair of data.max_len={d.max_len} "
            f"subwords (a batch is padded to its longest pair): raise data.max_tokens to >= {d.max_len} "
            "or lower data.max_len"
        )
    eval_tokens = d.eval_max_tokens or 2 * d.max_tokens  # the data module's own default
    if eval_tokens < model_len:
        given = (
            f"data.eval_max_tokens={eval_tokens}"
            if d.eval_max_tokens
            else f"data.eval_max_tokens=null (2 x data.max_tokens = {eval_tokens})"
        )
        raise ConfigError(
            f"{given} evaluation tokens per batch cannot hold one evaluation pair of up to "
            f"model.max_len={model_len} subwords (evaluation keeps every pair): raise data.eval_max_tokens "
            f"to >= {model_len} or lower model.max_len"
        )
    extra = cfg.module.max_len_extra
    if extra >= model_len:
        raise ConfigError(
            f"module.max_len_extra={extra} decodes up to input length + {extra} tokens, but the model "
            f"has positions for model.max_len={model_len} (decoding stops at {model_len - 1} whatever "
            f"the input): use module.max_len_extra < {model_len}, e.g. 50, or raise model.max_len"
        )


def check_intervals(cfg: DictConfig) -> None:
    """Validation and checkpoint intervals, and checkpoint averaging, against the steps there are."""
    t, ckpt = cfg.trainer, (cfg.get("callbacks") or {}).get("checkpoint")
    max_steps = t.max_steps if t.max_steps > 0 else None
    vci = t.get("val_check_interval")
    if isinstance(vci, int) and not isinstance(vci, bool):
        if max_steps is not None and vci > max_steps:
            raise ConfigError(
                f"trainer.val_check_interval={vci} is beyond trainer.max_steps={max_steps}: no "
                f"validation would run before the end; use at most {max_steps}, or null (every epoch)"
            )
        if t.get("check_val_every_n_epoch") is not None:
            raise ConfigError(
                f"trainer.val_check_interval={vci} steps with trainer.check_val_every_n_epoch="
                f"{t.check_val_every_n_epoch} counts steps within each epoch, and Lightning stops once "
                "the data is loaded if an epoch is shorter: set trainer.check_val_every_n_epoch=null "
                "(count across epochs, as budget=ablation does)"
            )
    points = ((cfg.get("callbacks") or {}).get("branch_points") or {}).get("steps") or []
    if max_steps is not None and (beyond := [p for p in points if p > max_steps]):
        raise ConfigError(
            f"callbacks.branch_points.steps: step {beyond[0]} is beyond trainer.max_steps={max_steps}, where "
            f"training ends; keep branch points at most {max_steps}"
        )
    if ckpt is None:
        return
    steps, epochs = ckpt.get("every_n_train_steps") or 0, ckpt.get("every_n_epochs") or 0
    if steps and epochs:
        raise ConfigError(
            f"callbacks.checkpoint.every_n_train_steps={steps} and callbacks.checkpoint.every_n_epochs="
            f"{epochs}: Lightning takes one of them; set the other to null"
        )
    if steps and max_steps is not None and steps > max_steps:
        raise ConfigError(
            f"callbacks.checkpoint.every_n_train_steps={steps} is beyond trainer.max_steps={max_steps}: "
            "no checkpoint before the end, so a run stopped midway starts again from scratch; use at "
            f"most {max_steps}"
        )
    n, after = cfg.get("average_last", 0), cfg.get("average_from", 0.0)
    if n <= 1:
        return
    keep = ckpt.get("save_top_k", 1)
    if keep != -1 and keep < n:
        raise ConfigError(
            f"average_last={n} averages {n} checkpoints but callbacks.checkpoint.save_top_k={keep} keeps "
            f"{keep}: set callbacks.checkpoint.save_top_k >= {n} (or -1), or average_last <= {keep}"
        )
    if steps and max_steps is not None:
        first = max(
            math.ceil(after * max_steps), 1
        )  # a checkpoint at step s is in the window if s >= after * max_steps
        saved = {s for s in range(-(-first // steps) * steps, max_steps, steps)} | {max_steps}
        if len(saved) < 2:
            raise ConfigError(
                f"average_last={n}, average_from={after:g}: of trainer.max_steps={max_steps}, checkpoints "
                f"every callbacks.checkpoint.every_n_train_steps={steps} steps leave only the final one "
                f"after step {first}, nothing to average: lower every_n_train_steps or average_from, "
                "or set average_last=0"
            )


def check_devices(cfg: DictConfig) -> None:
    """Devices and strategy this machine can run, before any data is read."""
    t = cfg.trainer
    if cfg.get("machine_class") and cfg.machine_class != (here := this_class(t.accelerator in ("gpu", "cuda"))):
        raise ConfigError(
            f"machine_class={cfg.machine_class!r} but this machine is {here!r}: train it on a machine of that class, "
            "or drop the setting (a run of another class is another experiment)"
        )
    devices = t.devices if isinstance(t.devices, int) else None
    if t.accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(
            "trainer=gpu but torch sees no CUDA GPU here: train on the CPU (trainer=cpu) or install a "
            "CUDA build of torch on a machine with a GPU"
        )
    if t.accelerator == "cpu" and devices is not None:
        cores = os.cpu_count() or 1
        if devices > cores:
            raise ConfigError(f"trainer.devices={devices} CPU processes on {cores} cores: use at most {cores}")
        if devices > 1 and t.get("strategy", "auto") not in ("ddp", "ddp_spawn", "ddp_fork"):
            raise ConfigError(f"trainer.devices={devices} on the CPU needs trainer.strategy=ddp (or trainer=ddp_cpu)")


def torch_threads(cfg: DictConfig) -> int | None:
    """`threads`, else cores / processes for CPU data parallelism (else torch's default)."""
    if cfg.get("threads"):
        return cfg.threads
    t = cfg.trainer
    if t.accelerator == "cpu" and isinstance(t.devices, int) and t.devices > 1:
        return max((os.cpu_count() or 1) // t.devices, 1)
    return None


def max_time_seconds(max_time) -> float | None:
    """trainer.max_time as seconds: "DD:HH:MM:SS" (Lightning's string form) or null."""
    if max_time is None:
        return None
    try:
        parts = [int(x) for x in str(max_time).split(":")]
    except ValueError:
        parts = []
    if len(parts) != 4:
        raise ConfigError(f'trainer.max_time={max_time!r}: write it as "DD:HH:MM:SS", e.g. "00:00:25:00"')
    days, hours, minutes, seconds = parts
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def check_budget(cfg: DictConfig) -> None:
    """The schedule must be able to finish inside the budget it is given."""
    m, t = cfg.module, cfg.trainer
    if m.warmup_steps < 1:
        raise ConfigError(f"module.warmup_steps must be >= 1, got {m.warmup_steps}")
    max_steps = t.max_steps if t.max_steps and t.max_steps > 0 else None
    max_time = max_time_seconds(t.get("max_time"))
    schedule = m.get("schedule", "linear")  # one of SCHEDULES: check_settings has run
    if schedule not in ("inverse_sqrt", "constant") and max_steps is None and max_time is None:
        raise ConfigError(
            f"module.schedule={schedule} decays to zero at the end of the budget, but there is none: "
            "set trainer.max_steps or trainer.max_time, or use module.schedule=inverse_sqrt"
        )
    if schedule != "inverse_sqrt" and m.get("decay_by") == "steps" and max_steps is None:
        raise ConfigError(
            f"module.decay_by=steps decays module.schedule={schedule} by trainer.max_steps, which is "
            "unset: set trainer.max_steps, or use module.decay_by=steps_or_time"
        )
    if max_steps is not None and m.warmup_steps >= max_steps:
        raise ConfigError(
            f"module.warmup_steps={m.warmup_steps} is not shorter than trainer.max_steps={max_steps}: "
            "training would end before the learning rate peaks; lower module.warmup_steps"
        )
    if max_time is not None and max_time < MIN_TIME_S:
        raise ConfigError(
            f"trainer.max_time={t.max_time} is shorter than one validation (about {MIN_TIME_S} s "
            "with BLEU on 2 CPU cores): give it at least 00:00:01:00"
        )


def check_heads(model: dict, ckpt: Path, trained: str, advice: str) -> None:
    """One line if a checkpoint's model has other key/value heads or fixed heads than `model` builds: its
    weights would not fit, or would fit and mean something else. Read before any data is."""
    try:  # mmap: only the hyper-parameters are read, not the weights
        saved = torch.load(ckpt, map_location="cpu", mmap=True, weights_only=False)["hyper_parameters"]["model"]
        theirs = heads_as_used(saved)
    except Exception:  # unreadable or not one of ours: the loader says so
        return
    ours = heads_as_used(model)
    for key, value in ours.items():
        if theirs[key] != value:
            raise ConfigError(f"{trained} {key}: {theirs[key]} and this run builds {key}: {value}; {advice}")


def check_resume(cfg: DictConfig, out_dir: Path) -> None:
    """An unfinished run in out_dir continues from its checkpoint: it must be of the same heads."""
    if is_complete(out_dir):
        return
    model = OmegaConf.to_container(cfg.model, resolve=True)
    for ckpt in [out_dir / "checkpoints" / "last.ckpt", *out_dir.glob("hpc_ckpt_*.ckpt")]:
        if ckpt.is_file():
            check_heads(
                model,
                ckpt,
                f"{out_dir} holds a run trained with",
                "resume it with its own settings, or write this run elsewhere (hydra.run.dir=...)",
            )
