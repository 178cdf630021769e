"""`train(cfg) -> metrics`: data module, module, loggers and callbacks from the config, then fit (or
resume), validate the final weights, test, write the run directory (results.json, hypotheses, the
metrics CSV) with checkpoint averaging and the W&B summary. The entry point, headsweep.train, adds the
steps on the finished run directory (head analysis, export)."""

from __future__ import annotations

import hashlib
import logging
import time
import warnings
from pathlib import Path

import hydra
import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf

from headsweep.identity import default_cell, default_run_name
from headsweep.machine import describe
from headsweep.model.diagnostics import init_check
from headsweep.sizes import comparison_config
from headsweep.training.averaging import average_at_end
from headsweep.training.branch import ScheduleFromHere, check_branch, start_from_trunk, starts_from_trunk
from headsweep.training.checks import (
    ConfigError,
    check_config,
    check_devices,
    check_resume,
    torch_threads,
)
from headsweep.training.module import train_time
from headsweep.training.resume import (
    ResumeError,
    SafeCheckpointIO,
    join_metrics,
    resume_checkpoint,
    set_aside_metrics,
    wandb_run_id,
    wandb_unreachable,
)
from headsweep.training.runs import RESULTS, RunError, is_complete, load_weights, read_results, write_json, write_lines

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict:
    """Train (or resume), test, and write results.json; returns the final metrics."""
    start = time.time()
    out_dir = prepare(cfg)
    if is_complete(out_dir):  # never retrain (or overwrite) a finished run
        print(f"{out_dir} is already complete ({RESULTS}); not training it again", flush=True)
        return read_results(out_dir)["metrics"]
    pl.seed_everything(cfg.seed, workers=True)
    datamodule, module = build(cfg)
    at_init = init_check(module.net)  # before any weights load: the init this seed gives (the same on resume)
    at_steps = update_check_of(cfg, module)  # its first steps, as `make sweep` measured them (issue 54)
    resume = find_resume(cfg, out_dir, module, datamodule)
    # a cooldown branch (make budgets) that has no checkpoint of its own continues its trunk's (training.branch)
    from_trunk = not resume and starts_from_trunk(cfg, out_dir)
    if from_trunk:
        resume = start_from_trunk(cfg, out_dir)
        print(f"branching {cfg.run_name} from its trunk at step {resume[1]} ({resume[0]})", flush=True)
    if cfg.get("init_from") and not resume:
        try:
            log.info("starting from the weights of %s", load_weights(module, cfg.init_from))
        except RunError as e:
            raise ConfigError(str(e)) from None
    loggers, wandb_info = make_loggers(cfg, out_dir)
    callbacks = [hydra.utils.instantiate(c) for c in cfg.callbacks.values()]
    callbacks += [ScheduleFromHere()] if from_trunk else []
    resolved = OmegaConf.to_container(cfg, resolve=True)
    if wandb_info.get("fell_back"):
        resolved["logger"]["wandb"]["mode"] = wandb_info["mode"]
    for lg in loggers:
        # the resolved config, with the sizes null stands for (d_k, d_v), parameters and attention FLOPs
        lg.log_hyperparams(comparison_config(resolved, module.param_counts))
        lg.log_metrics({f"params/{k}": v for k, v in module.param_counts.items()}, step=0)

    trainer = hydra.utils.instantiate(cfg.trainer, logger=loggers, callbacks=callbacks, plugins=[SafeCheckpointIO()])
    try:
        metrics = fit_and_test(trainer, module, datamodule, resume, start)
        if not trainer.is_global_zero:  # rank 0 alone writes the run's files
            return metrics
        for lg in loggers:
            lg.save()
        join_metrics(out_dir / "csv")
        hyp_files = write_hypotheses(out_dir / "hypotheses", module.hypotheses, datamodule.tgt_lang)
        checkpoint = next((cb for cb in callbacks if isinstance(cb, pl.callbacks.ModelCheckpoint)), None)
        averaged = None
        if cfg.get("average_last", 0) > 1 and checkpoint is not None:  # the paper averages the last 5
            averaged, avg_metrics = average_at_end(
                module,
                datamodule,
                Path(checkpoint.dirpath),
                cfg.average_last,
                resolved["trainer"]["precision"],
                cfg.get("average_from", 0.0),
            )
            metrics.update(avg_metrics)
            for lg in loggers:
                lg.log_metrics(avg_metrics, step=trainer.global_step)
                lg.save()  # the trainer has already flushed its loggers for the last time
        results = results_record(
            cfg,
            resolved,
            module,
            datamodule,
            metrics,
            averaged,
            hyp_files,
            checkpoint,
            resume[1] if resume and not from_trunk else None,
            wandb_info,
            at_init,
            at_steps,
        )
        write_json(out_dir / RESULTS, results)
        wandb_summary(loggers, module, metrics, module.scores.get(f"{cfg.data.test_split}.beam", {}))
    finally:
        import wandb

        wandb.finish()  # every job of a multirun gets its own W&B run
    print_summary(results)
    return metrics


def prepare(cfg: DictConfig) -> Path:
    """Checks (before any data is read), torch threads, the run directory."""
    if cfg.run_name is None:
        cfg.run_name = default_run_name(cfg)
    if "cell" in cfg and cfg.cell is None:
        cfg.cell = default_cell(cfg.run_name, cfg.get("tags"))
    check_config(cfg)
    check_devices(cfg)
    if threads := torch_threads(cfg):
        torch.set_num_threads(threads)
    out_dir = Path(cfg.paths.output_dir)
    check_resume(cfg, out_dir)
    check_branch(cfg, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


def build(cfg: DictConfig):
    """The data module (set up: the data validated and the vocabulary built before anything trains) and
    the LightningModule sized by its vocabulary (the model's settings are module.model: ${model})."""
    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.setup("fit")
    module = hydra.utils.instantiate(
        cfg.module,
        vocab_size=datamodule.vocab_size_actual,
        tokenizer_json=datamodule.tokenizer_json,
        pad_id=datamodule.pad_id,
        bos_id=datamodule.bos_id,
        eos_id=datamodule.eos_id,
        _convert_="all",
    )
    for split in (datamodule.val_split, datamodule.test_split):
        datamodule.check_fits(split, module.net.cfg.max_len, module.hparams.max_len_extra)
    return datamodule, module


def find_resume(cfg: DictConfig, out_dir: Path, module, datamodule) -> tuple[Path, int] | None:
    """The checkpoint an interrupted run in this directory continues from (headsweep.training.resume)."""
    try:
        resume = resume_checkpoint(out_dir, module.hparams.model, datamodule.tokenizer_json)
    except ResumeError as e:
        raise ConfigError(str(e)) from None
    if resume:
        log.info("resuming %s from step %d (%s)", cfg.run_name, resume[1], resume[0])
        print(f"resuming {cfg.run_name} from step {resume[1]} ({resume[0]})", flush=True)
        set_aside_metrics(out_dir / "csv", resume[1])
    return resume


def fit_and_test(trainer: pl.Trainer, module, datamodule, resume, start: float) -> dict:
    """Fit, validate the final weights if the last validation scored earlier ones, test; the metrics."""
    with warnings.catch_warnings():
        # Lightning warns that a mid-epoch resume with a plain dataloader "can cause unreliable results";
        # ours skips the batches already trained on (TranslationDataModule.train_dataloader), so a resumed
        # run follows the uninterrupted one step by step (tests/test_resume.py).
        warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before the epoch")
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume[0] if resume else None)
    train_seconds = train_time(trainer)[0] or time.time() - start
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
    return metrics


def write_hypotheses(hyp_dir: Path, hypotheses: dict[str, list[str]], lang: str) -> dict[str, str]:
    return {name: str(write_lines(hyp_dir / f"{name}.{lang}", hyps)) for name, hyps in hypotheses.items()}


def results_record(
    cfg: DictConfig,
    resolved: dict,
    module,
    datamodule,
    metrics: dict,
    averaged,
    hyp_files: dict,
    checkpoint,
    resumed_from: int | None,
    wandb_info: dict,
    at_init: dict | None = None,
    at_steps: dict | None = None,
) -> dict:
    """Everything results.json says about a finished run (the report and the analysis read only this and
    the files it names)."""
    return {
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
        "output_dir": str(cfg.paths.output_dir),
        "threads": torch.get_num_threads(),
        "machine": describe(),  # speed and bf16 numerics belong to one machine
        "resumed_from_step": resumed_from,
        "gates": gate_record(module.net),
        "wandb": wandb_info,
        # attention projections' gains and attention/residual ratio at init (headsweep.model.diagnostics): a
        # cell's init confound shows here (issue 42)
        "init_check": at_init,
        # each attention kind's output change in its first Adam steps at its rate (sweeps.init_check, issue 54)
        "update_check": at_steps,
    }


def update_check_of(cfg: DictConfig, module) -> dict:
    """The run's update check: its model config from its seed, at its peak rate, betas, eps and per-matrix
    rates (the same numbers `make sweep` printed for its cell: training.update_check.measure_update)."""
    from headsweep.training.update_check import measure_update

    hp = module.hparams
    peak = hp.peak_lr if hp.peak_lr is not None else (module.net.cfg.d_model * hp.warmup_steps) ** -0.5
    settings = {
        "lr": float(peak),
        "betas": [float(b) for b in hp.betas],
        "eps": float(hp.eps),
        "lr_scaling": hp.get("lr_scaling", "none"),
        "lr_base": dict(hp.lr_base) if hp.get("lr_base") else None,
    }
    return measure_update(OmegaConf.to_container(cfg.model, resolve=True), settings, cfg.seed)


def gate_record(net) -> dict | None:
    """The hard-concrete gates at the end (model.concrete_gates): which heads are open, and log alpha."""
    if not net.cfg.concrete_gates:
        return None
    return {
        "open": net.open_heads(),
        "log_alpha": {
            kind: [m.concrete.log_alpha.tolist() for m in net.attention_layers(kind)] for kind in net.open_heads()
        },
    }


def make_loggers(cfg: DictConfig, out_dir: Path) -> tuple[list, dict]:
    """The configured loggers. W&B keeps one run id per run directory (a resumed run continues it); W&B logging
    that cannot work from here steps down with one line (online to offline, offline to disabled), never
    stopping training."""
    loggers, info = [], {}
    for c in cfg.logger.values():
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
        run = {"id": info["run_id"], "resume": "allow", "tags": wandb_tags(cfg, c)}
        loggers.append(start_wandb(c, info, run, out_dir))
    return loggers, info


def start_wandb(c: DictConfig, info: dict, run: dict, out_dir: Path):
    """The W&B logger with its run started now, so that W&B's errors show here and not mid-training. Online that
    fails goes offline; offline that fails goes disabled (seen: wandb 0.17's local service not answering
    `wandb.init` within 30 s, 21 jobs packed on one GPU); the record says which and why."""
    while True:
        logger = hydra.utils.instantiate(c, mode=info["mode"], **run)
        if info["mode"] == "disabled":
            return logger
        try:
            logger.experiment  # noqa: B018 - starts the run
            return logger
        except Exception as e:  # noqa: BLE001 - whatever W&B raises, training goes on with less W&B
            import wandb

            wandb.finish()
            fall_back(info, f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}", out_dir)


WANDB_TAG_CHARS = 64  # wandb.Settings refuses a longer tag, and the run would not start


def wandb_tags(cfg: DictConfig, c: DictConfig) -> list[str]:
    """The configured tags and the sweep's name, so a dashboard filters a sweep by tag as well as job type; a tag
    longer than W&B allows (a cell of several settings: cell-h8-...-noise0.01) is cut and given a hash of the
    whole, so it still names one cell (its W&B group and results.json keep the full name)."""
    tags = list(c.get("tags") or [])
    tags = tags + [cfg.sweep] if cfg.get("sweep") and cfg.sweep not in tags else tags
    return [wandb_tag(str(t)) for t in tags]


def wandb_tag(tag: str) -> str:
    if len(tag) <= WANDB_TAG_CHARS:
        return tag
    digest = hashlib.sha1(tag.encode()).hexdigest()[:8]
    return f"{tag[: WANDB_TAG_CHARS - len(digest) - 1]}~{digest}"


def fall_back(info: dict, reason: str, out_dir: Path) -> None:
    """One step down: online -> offline -> disabled, the reasons kept in the run's record."""
    if info["mode"] == "online":
        log.warning(
            "W&B online logging unavailable (%s): logging offline instead; upload later with `wandb sync %s`",
            reason,
            out_dir / "wandb",
        )
        info.update(mode="offline", fell_back=reason)
    else:
        log.warning(
            "W&B offline logging failed to start (%s): W&B disabled for this run; its metrics are in "
            "csv/ and results.json",
            reason,
        )
        info.update(mode="disabled", fell_back="; ".join(filter(None, [info.get("fell_back"), reason])))


def wandb_summary(loggers: list, module, metrics: dict, test_scores: dict) -> None:
    for lg in loggers:
        if isinstance(lg, pl.loggers.WandbLogger):
            summary = lg.experiment.summary
            summary.update({f"params/{k}": v for k, v in module.param_counts.items()})
            summary.update(dict(metrics))
            summary["bleu_signature"] = test_scores.get("bleu_signature")


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
