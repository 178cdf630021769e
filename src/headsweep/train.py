"""Entry point: `python -m headsweep.train [hydra overrides]` (make train, make smoke, sweep jobs).

A thin Hydra wrapper: `run(cfg)` = headsweep.training.train.train(cfg), then the steps on the finished run
directory in order (head analysis when analysis=..., the export to results/ when export_dir is set);
`main` records a failed run where `make sweep` looks and exits with one line for a bad config. Run as a
command without Hydra's flags, the command line is checked first (`check_command_line`): a key the config
lacks, a group option that does not exist or a bad value ends in one line, before Hydra writes anything.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning_fabric.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

from headsweep.analysis.analyze import analyze, summary
from headsweep.analysis.settings import AnalysisError, AnalysisSettings
from headsweep.config import compose, register_resolvers
from headsweep.data import DataError
from headsweep.store import experiment_key, train_once
from headsweep.store.pack import analysis_file
from headsweep.training.checks import ConfigError, check_config, check_devices
from headsweep.training.runs import RESULTS, export_run, is_complete, write_json
from headsweep.training.schema import SCHEMA, unknown_key
from headsweep.training.train import train

log = logging.getLogger("headsweep.train")  # its module name even when run as __main__
register_resolvers()


def run(cfg: DictConfig) -> dict:
    """Train (or find the finished run), then analyse and export it. With export_dir (a sweep's job), under
    the lock of its experiment in the store: of two sweeps that want one experiment at once, one trains and
    exports it, the other waits and then shows the stored run as its own job (store.show)."""
    # the analysis settings are checked before anything is read or trained, like every other config value
    settings = AnalysisSettings(**OmegaConf.to_container(cfg.analysis, resolve=True)) if cfg.get("analysis") else None
    if not cfg.get("export_dir"):
        return train_and_export(cfg, settings)
    view = Path(cfg.export_dir)
    key = experiment_key(OmegaConf.to_container(cfg, resolve=True))
    metrics, trained = train_once(
        view.parent.parent,
        key,
        view,
        list(cfg.get("tags") or []),
        lambda: train_and_export(cfg, settings),
        whole=lambda stored: not settings or analysis_file(stored) is not None,
        wait_note=lambda lock: print(f"  waiting for {lock}: another sweep trains this experiment", flush=True),
    )
    if not trained:
        print(f"  the store holds this experiment ({key}): shown as {view}, not trained again", flush=True)
    return metrics


def train_and_export(cfg: DictConfig, settings: AnalysisSettings | None) -> dict:
    metrics = train(cfg)
    out_dir = Path(cfg.paths.output_dir)
    if rank_zero_only.rank != 0 or not is_complete(out_dir):  # rank 0 alone writes the run's files
        return metrics
    if settings and analysis_file(out_dir) is None:
        analyze_after_training(out_dir, settings, cfg.logger.get("wandb", {}).get("mode"))
    if cfg.get("export_dir"):
        print(f"  exported to {export_run(out_dir, cfg.export_dir)}", flush=True)
    return metrics


def analyze_after_training(run_dir: Path, settings: AnalysisSettings, wandb_mode: str | None) -> None:
    """Head importance, pruning and roles of the finished run into <run>/analysis/. It runs after
    results.json is written: a failure here is logged and never costs the run."""
    try:
        analysis, out = analyze(run_dir, settings, wandb_mode=wandb_mode)
    except Exception:
        log.exception("head analysis failed; the run itself is complete. Retry: make analyze CKPT=%s", run_dir)
        return
    print(summary(analysis, out), flush=True)


@hydra.main(version_base="1.3", config_path="../../conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    try:
        metrics = run(cfg)
    except Exception as e:
        # Leave the failure where `make sweep` looks: a results.json that is not "complete" (so a rerun
        # retries the job) naming the error, and the traceback in the job's log file.
        hc, out_dir = HydraConfig.get(), Path(cfg.paths.output_dir)
        log_file = Path(hc.runtime.output_dir) / f"{hc.job.name}.log"
        expected = isinstance(e, (ConfigError, DataError, AnalysisError))
        log.error("%s", e, exc_info=not expected)
        out_dir.mkdir(parents=True, exist_ok=True)
        if rank_zero_only.rank == 0 and not is_complete(out_dir):  # a finished run's results are never overwritten
            write_json(
                out_dir / RESULTS,
                {
                    "status": "failed",
                    "run_name": cfg.run_name,
                    "sweep": cfg.sweep,
                    "error": f"{type(e).__name__}: {' '.join(str(e).split())}",
                    "log": str(log_file),
                },
            )
        if hc.mode == RunMode.MULTIRUN:
            raise  # the launcher records it and goes on with the next job; sys.exit would end them all
        if not expected:
            raise
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    return metrics.get("val/bleu")


def check_command_line(argv: list[str]) -> str | None:
    """What would stop this command line before any data is read, as one line; None if nothing would. Hydra's
    own errors (a key the config lacks, an option that does not exist, a bad override) become one line too.
    Nothing is read or written: Hydra has not made the run directory yet. With Hydra's flags (--multirun,
    --cfg, --help, ...) it checks nothing: a sweep's cells are checked when `make sweep` plans them."""
    if any(a.startswith("-") for a in argv):
        return None
    try:
        cfg = compose(argv)
    except Exception as e:  # Hydra's and OmegaConf's errors, several lines each
        return compose_error(e, argv)
    try:
        check_config(cfg)
        check_devices(cfg)
    except ConfigError as e:
        return str(e)
    return None


def compose_error(e: Exception, overrides: list[str]) -> str:
    cause, key = e.__cause__, getattr(e.__cause__, "full_key", None)
    given = next((o.split("=", 1)[1] for o in overrides if key and o.split("=", 1)[0].lstrip("+~") == key), None)
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and key:  # an override of a key the config lacks
        return unknown_key(key, given)
    lines = [line.strip() for line in str(e).split("Config search path:")[0].splitlines() if line.strip()]
    text = "; ".join(lines).replace(":; ", ": ")
    if key in SCHEMA:  # a value Hydra cannot merge there, e.g. a mapping where a list goes
        return f"{key}={given}: {text} ({str(cause).splitlines()[0]}): {key} takes {SCHEMA[key].allowed()}"
    return f"{text}: fix the command line (python -m headsweep.train --help lists the groups and their options)"


if __name__ == "__main__":
    if problem := check_command_line(sys.argv[1:]):
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    main()
