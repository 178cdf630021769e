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

from headsweep.runs import RESULTS

log = logging.getLogger("headsweep.train")


class ConfigError(ValueError):
    """A config value that cannot work; the message says which key and what to do."""


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
    if cfg.module.warmup_steps < 1:
        raise ConfigError(f"module.warmup_steps must be >= 1, got {cfg.module.warmup_steps}")


def write_json(path: Path, obj: dict) -> None:
    """Write atomically: a killed run never leaves a half-written results file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    os.replace(tmp, path)


def train(cfg: DictConfig) -> dict:
    """Train, test, and write results.json; returns the final metrics."""
    start = time.time()
    if cfg.run_name is None:
        cfg.run_name = default_run_name(cfg)
    check_config(cfg)
    out_dir = Path(cfg.paths.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pl.seed_everything(cfg.seed, workers=True)

    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.setup("fit")  # validates the data and builds the vocabulary before anything trains
    module = hydra.utils.instantiate(
        cfg.module,
        model=OmegaConf.to_container(cfg.model, resolve=True),
        vocab_size=datamodule.vocab_size_actual,
        tokenizer_json=datamodule.tokenizer_json,
        pad_id=datamodule.pad_id, bos_id=datamodule.bos_id, eos_id=datamodule.eos_id,
        _convert_="all",
    )
    loggers = [hydra.utils.instantiate(c) for c in cfg.logger.values()]
    callbacks = [hydra.utils.instantiate(c) for c in cfg.callbacks.values()]
    resolved = OmegaConf.to_container(cfg, resolve=True)
    for lg in loggers:
        lg.log_hyperparams(resolved)  # the resolved config as a plain dict
        lg.log_metrics({f"params/{k}": v for k, v in module.param_counts.items()}, step=0)

    trainer = hydra.utils.instantiate(cfg.trainer, logger=loggers, callbacks=callbacks)
    try:
        trainer.fit(module, datamodule=datamodule)
        train_seconds = time.time() - start
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}  # validate()/test() reset them
        if module.val_bleu_step != trainer.global_step:
            # Training stopped mid-epoch (max_steps / max_time) or between BLEU epochs: score the final
            # weights, so val/* (the sweeps' metric) describe the same model as test/*.
            trainer.validate(module, datamodule=datamodule, verbose=False)
            metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
        trainer.test(module, datamodule=datamodule, verbose=False)
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
        metrics["train/tgt_tokens_per_s"] = module._train_tokens / max(module._train_seconds, 1e-9)
        metrics["train/steps"] = trainer.global_step
        metrics["train/seconds"] = train_seconds
        metrics["wall_seconds"] = time.time() - start

        hyp_dir = out_dir / "hypotheses"
        hyp_dir.mkdir(exist_ok=True)
        hyp_files = {}
        for name, hyps in module.hypotheses.items():
            path = hyp_dir / f"{name}.{datamodule.tgt_lang}"
            path.write_text("".join(h + "\n" for h in hyps))
            hyp_files[name] = str(path)
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
            "references": {cfg.data.test_split: datamodule.split_path(cfg.data.test_split)}
            if hasattr(datamodule, "split_path") else {},
            "checkpoints": {
                "last": checkpoint.last_model_path if checkpoint else None,
                "kept": sorted(checkpoint.best_k_models) if checkpoint else [],
            },
            "tokenizer": datamodule.tokenizer_path,
            "output_dir": str(out_dir),
        }
        write_json(out_dir / RESULTS, results)
        for lg in loggers:
            if isinstance(lg, pl.loggers.WandbLogger):
                lg.experiment.summary.update({f"params/{k}": v for k, v in module.param_counts.items()})
                lg.experiment.summary.update({k: v for k, v in metrics.items()})
                lg.experiment.summary["bleu_signature"] = module.scores.get(
                    f"{cfg.data.test_split}.beam", {}).get("bleu_signature")
    finally:
        import wandb

        wandb.finish()  # every job of a multirun gets its own W&B run
    print_summary(results)
    if cfg.get("analysis"):
        analyze_after_training(out_dir, OmegaConf.to_container(cfg.analysis, resolve=True),
                               resolved["logger"].get("wandb", {}).get("mode"))
    return metrics


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
