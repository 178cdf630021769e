"""Entry point: `python -m headsweep.train [hydra overrides]`.

`train(cfg) -> metrics` does the work; `main` is the thin Hydra wrapper around it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import hydra
import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf

from headsweep.resume import (ResumeError, SafeCheckpointIO, join_metrics, resume_checkpoint, set_aside_metrics, wandb_run_id,
                              wandb_unreachable)
from headsweep.runs import RESULTS, export_run, is_complete, read_results
from headsweep.schedules import SCHEDULES

log = logging.getLogger("headsweep.train")


class ConfigError(ValueError):
    """A config value that cannot work; the message says which key and what to do."""


MIN_TIME_S = 60


def auto_precision() -> str:
    """bf16 autocast on a GPU or a CPU with native bf16 matmuls (AVX512-BF16 or AMX), else fp32."""
    if torch.cuda.is_available() or torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported():
        return "bf16-mixed"
    return "32-true"


OmegaConf.register_new_resolver("auto_precision", auto_precision, replace=True)


def default_run_name(cfg: DictConfig) -> str:
    m = cfg.model
    d_k = m.d_k or m.d_model // m.heads
    d_v = m.d_v or m.d_model // m.heads
    return f"h{m.heads}-dk{d_k}-dv{d_v}-s{cfg.seed}"


def check_config(cfg: DictConfig) -> None:
    """Fail before any data is read if the model cannot be built from these settings."""
    from headsweep.model import Transformer, TransformerConfig

    model = OmegaConf.to_container(cfg.model, resolve=True)
    try:
        with torch.device("meta"):  # shapes only: no memory, no time
            Transformer(TransformerConfig(**model))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"model config: {e}") from None
    check_budget(cfg)


def check_devices(cfg: DictConfig) -> None:
    """Devices and strategy this machine can run, before any data is read."""
    t = cfg.trainer
    devices = t.devices if isinstance(t.devices, int) else None
    if t.accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError("trainer=gpu but torch sees no CUDA GPU here: train on the CPU (trainer=cpu) or install a "
                          "CUDA build of torch on a machine with a GPU")
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
        raise ConfigError(f"trainer.max_time={max_time!r}: write it as \"DD:HH:MM:SS\", e.g. \"00:00:25:00\"")
    days, hours, minutes, seconds = parts
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def check_budget(cfg: DictConfig) -> None:
    """The schedule must be able to finish inside the budget it is given."""
    m, t = cfg.module, cfg.trainer
    if m.warmup_steps < 1:
        raise ConfigError(f"module.warmup_steps must be >= 1, got {m.warmup_steps}")
    max_steps = t.max_steps if t.max_steps and t.max_steps > 0 else None
    max_time = max_time_seconds(t.get("max_time"))
    schedule = m.get("schedule", "linear")
    if schedule not in SCHEDULES:
        raise ConfigError(f"module.schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if schedule != "inverse_sqrt" and max_steps is None and max_time is None:
        raise ConfigError(f"module.schedule={schedule} decays to zero at the end of the budget, but there is none: "
                          "set trainer.max_steps or trainer.max_time, or use module.schedule=inverse_sqrt")
    if max_steps is not None and m.warmup_steps >= max_steps:
        raise ConfigError(f"module.warmup_steps={m.warmup_steps} is not shorter than trainer.max_steps={max_steps}: "
                          "training would end before the learning rate peaks; lower module.warmup_steps")
    if max_time is not None and max_time < MIN_TIME_S:
        raise ConfigError(f"trainer.max_time={t.max_time} is shorter than one validation (about {MIN_TIME_S} s "
                          "with BLEU on 2 CPU cores): give it at least 00:00:01:00")


def write_json(path: Path, obj: dict) -> None:
    """Write atomically: a killed run never leaves a half-written results file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    os.replace(tmp, path)


def train(cfg: DictConfig) -> dict:
    """Train (or resume), test, and write results.json; returns the final metrics."""
    start = time.time()
    if cfg.run_name is None:
        cfg.run_name = default_run_name(cfg)
    check_config(cfg)
    check_devices(cfg)
    if threads := torch_threads(cfg):
        torch.set_num_threads(threads)
    out_dir = Path(cfg.paths.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if is_complete(out_dir):  # never retrain (or overwrite) a finished run
        print(f"{out_dir} is already complete ({RESULTS}); not training it again", flush=True)
        finish(cfg, out_dir)
        return read_results(out_dir)["metrics"]
    pl.seed_everything(cfg.seed, workers=True)

    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.setup("fit")  # validates the data and builds the vocabulary before anything trains
    model = OmegaConf.to_container(cfg.model, resolve=True)
    module = hydra.utils.instantiate(
        cfg.module, model=model, vocab_size=datamodule.vocab_size_actual,
        tokenizer_json=datamodule.tokenizer_json,
        pad_id=datamodule.pad_id, bos_id=datamodule.bos_id, eos_id=datamodule.eos_id,
        _convert_="all",
    )
    try:
        resume = resume_checkpoint(out_dir, model, datamodule.tokenizer_json)
    except ResumeError as e:
        raise ConfigError(str(e)) from None
    if resume:
        log.info("resuming %s from step %d (%s)", cfg.run_name, resume[1], resume[0])
        print(f"resuming {cfg.run_name} from step {resume[1]} ({resume[0]})", flush=True)
        set_aside_metrics(out_dir / "csv", resume[1])
    loggers, wandb_info = make_loggers(cfg, out_dir)
    callbacks = [hydra.utils.instantiate(c) for c in cfg.callbacks.values()]
    resolved = OmegaConf.to_container(cfg, resolve=True)
    if wandb_info.get("fell_back"):
        resolved["logger"]["wandb"]["mode"] = wandb_info["mode"]
    for lg in loggers:
        lg.log_hyperparams(resolved)  # the resolved config as a plain dict
        lg.log_metrics({f"params/{k}": v for k, v in module.param_counts.items()}, step=0)

    trainer = hydra.utils.instantiate(cfg.trainer, logger=loggers, callbacks=callbacks,
                                      plugins=[SafeCheckpointIO()])
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume[0] if resume else None)
        timer = next((cb for cb in trainer.callbacks if isinstance(cb, pl.callbacks.Timer)), None)
        train_seconds = timer.time_elapsed("train") if timer else time.time() - start
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}  # validate()/test() reset them
        if module.val_bleu_step != trainer.global_step:
            # Training stopped mid-epoch (max_steps / max_time) or between BLEU epochs: score the final
            # weights, so val/* (the sweeps' metric) describe the same model as test/*.
            trainer.validate(module, datamodule=datamodule, verbose=False)
            metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
        trainer.test(module, datamodule=datamodule, verbose=False)
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
        metrics["train/tgt_tokens_per_s"] = module.train_tokens / max(module.train_seconds, 1e-9)
        metrics["train/steps"] = trainer.global_step
        metrics["train/seconds"] = train_seconds
        metrics["wall_seconds"] = time.time() - start
        if not trainer.is_global_zero:  # rank 0 alone writes the run's files
            return metrics
        for lg in loggers:
            lg.save()
        join_metrics(out_dir / "csv")

        hyp_files = write_hypotheses(out_dir / "hypotheses", module.hypotheses, datamodule.tgt_lang)
        checkpoint = next((cb for cb in callbacks if isinstance(cb, pl.callbacks.ModelCheckpoint)), None)
        averaged = None
        if cfg.get("average_last", 0) > 1 and checkpoint is not None:  # the paper averages the last 5
            from headsweep.evaluate import average_at_end

            averaged, avg_metrics = average_at_end(module, datamodule, Path(checkpoint.dirpath),
                                                   cfg.average_last, resolved["trainer"]["precision"])
            metrics.update(avg_metrics)
            for lg in loggers:
                lg.log_metrics(avg_metrics, step=trainer.global_step)
                lg.save()  # the trainer has already flushed its loggers for the last time
        results = {
            "status": "complete",
            "run_name": cfg.run_name,
            "sweep": cfg.sweep,
            "config": resolved,
            "params": module.param_counts,
            "metrics": metrics,
            "scores": module.scores,  # per split and decoder: BLEU, chrF and their signatures
            "averaged": averaged,  # the same scores of the averaged last checkpoints (average_last)
            "hypotheses": hyp_files,
            "references": {cfg.data.test_split: datamodule.split_path(cfg.data.test_split)},
            "checkpoints": {
                "last": checkpoint.last_model_path if checkpoint else None,
                "kept": sorted(checkpoint.best_k_models) if checkpoint else [],
            },
            "tokenizer": datamodule.tokenizer_path,
            "output_dir": str(out_dir),
            "threads": torch.get_num_threads(),
            "resumed_from_step": resume[1] if resume else None,
            "wandb": wandb_info,
        }
        write_json(out_dir / RESULTS, results)
        wandb_summary(loggers, module, metrics, module.scores.get(f"{cfg.data.test_split}.beam", {}))
    finally:
        import wandb

        wandb.finish()  # every job of a multirun gets its own W&B run
    print_summary(results)
    finish(cfg, out_dir)
    return metrics


def finish(cfg: DictConfig, out_dir: Path) -> None:
    """After-training steps on the written run: head analysis (analysis=...), then the export."""
    if cfg.get("analysis") and not (out_dir / "analysis" / "analysis.json").is_file():
        analyze_after_training(out_dir, OmegaConf.to_container(cfg.analysis, resolve=True),
                               cfg.logger.get("wandb", {}).get("mode"))
    if cfg.get("export_dir"):
        print(f"  exported to {export_run(out_dir, cfg.export_dir)}", flush=True)


def write_hypotheses(hyp_dir: Path, hypotheses: dict[str, list[str]], lang: str) -> dict[str, str]:
    hyp_dir.mkdir(exist_ok=True)
    files = {}
    for name, hyps in hypotheses.items():
        path = hyp_dir / f"{name}.{lang}"
        path.write_text("".join(h + "\n" for h in hyps))
        files[name] = str(path)
    return files


def make_loggers(cfg: DictConfig, out_dir: Path) -> tuple[list, dict]:
    """The configured loggers. W&B keeps one run id per run directory (a resumed run continues it), and
    online logging that cannot work from here falls back to offline with one line, never stopping training."""
    loggers, info = [], {}
    for name, c in cfg.logger.items():
        if c._target_ != "pytorch_lightning.loggers.WandbLogger":
            loggers.append(hydra.utils.instantiate(c))
            continue
        requested = c.get("mode") or "online"
        info = {"requested": requested, "mode": requested, "run_id": None}
        if requested == "disabled":
            loggers.append(hydra.utils.instantiate(c))
            continue
        info["run_id"] = wandb_run_id(out_dir)
        if requested == "online" and (reason := wandb_unreachable()):
            fall_back(info, reason, out_dir)
        logger = hydra.utils.instantiate(c, mode=info["mode"], id=info["run_id"], resume="allow")
        if info["mode"] == "online":
            try:
                logger.experiment  # starts the run: W&B errors show here, not mid-training
            except Exception as e:  # noqa: BLE001 - whatever W&B raises, training goes on offline
                import wandb

                wandb.finish()
                fall_back(info, f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}", out_dir)
                logger = hydra.utils.instantiate(c, mode="offline", id=info["run_id"], resume="allow")
        loggers.append(logger)
    return loggers, info


def fall_back(info: dict, reason: str, out_dir: Path) -> None:
    info.update(mode="offline", fell_back=reason)
    log.warning("W&B online logging unavailable (%s): logging offline instead; upload later with "
                "`wandb sync %s`", reason, out_dir / "wandb")


def wandb_summary(loggers: list, module, metrics: dict, test_scores: dict) -> None:
    for lg in loggers:
        if isinstance(lg, pl.loggers.WandbLogger):
            summary = lg.experiment.summary
            summary.update({f"params/{k}": v for k, v in module.param_counts.items()})
            summary.update(dict(metrics))
            summary["bleu_signature"] = test_scores.get("bleu_signature")


def analyze_after_training(run_dir: Path, settings: dict, wandb_mode: str | None) -> None:
    """Head importance, pruning and roles of the finished run (analysis=default) into <run>/analysis/.
    It runs after results.json is written: a failure here is logged and never costs the run."""
    from headsweep.analyze import analyze, summary

    try:
        analysis, out = analyze(run_dir, wandb_mode=wandb_mode, **settings)
    except Exception:
        log.exception("head analysis failed; the run itself is complete. Retry: make analyze CKPT=%s", run_dir)
        return
    print(summary(analysis, out), flush=True)


def print_summary(results: dict) -> None:
    m, p = results["metrics"], results["params"]
    split = results["config"]["data"]["test_split"]
    beam = results["config"]["module"]["test_beam_size"]
    lines = [
        "",
        f"run {results['run_name']} finished in {m['wall_seconds'] / 60:.1f} min "
        f"({m['train/steps']} steps, {m['train/tgt_tokens_per_s']:.0f} target tokens/s)",
        f"  {split}: BLEU {m.get('test/bleu', float('nan')):.2f} (beam {beam}), "
        f"greedy {m.get('test/bleu_greedy', float('nan')):.2f}, chrF {m.get('test/chrf', float('nan')):.2f}, "
        f"ppl {m.get('test/ppl', float('nan')):.2f}",
        f"  val: BLEU {m.get('val/bleu', float('nan')):.2f} (greedy), ppl {m.get('val/ppl', float('nan')):.2f}",
        f"  params: {p['total']:,} total, {p['embeddings']:,} embeddings, {p['attention']:,} attention "
        f"(enc self {p['attn_enc_self']:,}, dec self {p['attn_dec_self']:,}, cross {p['attn_cross']:,}), "
        f"{p['ffn']:,} feed-forward",
        f"  outputs: {results['output_dir']}  (results.json, hypotheses/, checkpoints/, wandb/)",
    ]
    print("\n".join(lines), flush=True)


@hydra.main(version_base="1.3", config_path="../../conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from headsweep.data import DataError

    try:
        metrics = train(cfg)
    except Exception as e:
        # Leave the failure where `make sweep` looks: a results.json that is not "complete" (so a rerun
        # retries the job) naming the error, and the traceback in the job's log file.
        hc, out_dir = HydraConfig.get(), Path(cfg.paths.output_dir)
        log_file = Path(hc.runtime.output_dir) / f"{hc.job.name}.log"
        expected = isinstance(e, (ConfigError, DataError))
        log.error("%s", e, exc_info=not expected)
        out_dir.mkdir(parents=True, exist_ok=True)
        rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)))
        if rank == 0 and not is_complete(out_dir):  # a finished run's results are never overwritten
            write_json(out_dir / RESULTS, {
                "status": "failed", "run_name": cfg.run_name, "sweep": cfg.sweep,
                "error": f"{type(e).__name__}: {' '.join(str(e).split())}", "log": str(log_file),
            })
        if hc.mode == RunMode.MULTIRUN:
            raise  # the launcher records it and goes on with the next job; sys.exit would end them all
        if not expected:
            raise
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    return metrics.get("val/bleu")


if __name__ == "__main__":
    main()
