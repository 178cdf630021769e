"""Continuing an interrupted run in its own directory, and keeping W&B from ever stopping training.

    python -m headsweep.training.resume <run dir> [more overrides]      (make train RESUME=<run dir>)

reruns `python -m headsweep.train` with the overrides the run was started with (its .hydra/overrides.yaml)
in the same directory, which then continues from checkpoints/last.ckpt.

A run directory with checkpoints/last.ckpt and no complete results.json resumes from that checkpoint:
Lightning restores the weights, optimizer, schedule, loop counters and the time already spent (its Timer
callback), the data module continues the interrupted epoch's batch order, the module restores torch's RNG,
the W&B run id kept in the directory continues the same W&B run, and the metrics CSV written before the
interruption is joined with the new one.
"""

from __future__ import annotations

import csv
import dataclasses
import logging
import netrc
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import torch
import yaml
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from wandb.sdk.lib.runid import generate_id  # W&B's own id format

from headsweep.data.hub import unreachable
from headsweep.model import TransformerConfig
from headsweep.model.config import OLD_DEFAULTS
from headsweep.training.runs import RESULTS, is_complete

log = logging.getLogger(__name__)

WANDB_ID_FILE = "wandb_id"
CSV_BEFORE = "metrics.before-step{step}.csv"


class ResumeError(ValueError):
    """A run directory that cannot be resumed with this config; the message says what to do."""


def resume_checkpoint(out_dir: Path, model: dict, tokenizer_json: str) -> tuple[Path, int] | None:
    """(checkpoint, its step) to resume from, or None to start from scratch.

    A corrupt or truncated checkpoint means starting over (the checkpoints are moved aside and the log
    says so); one of another model or vocabulary is an error: resuming it would mix two experiments.
    """
    # last.ckpt (every checkpoint interval), or the one Lightning writes when SLURM signals a requeue
    candidates = [p for p in [out_dir / "checkpoints" / "last.ckpt", *out_dir.glob("hpc_ckpt_*.ckpt")] if p.is_file()]
    if not candidates:
        return None
    path = max(candidates, key=lambda p: p.stat().st_mtime)
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        hparams, step = ckpt["hyper_parameters"], int(ckpt["global_step"])
    except Exception as e:  # truncated file, not a checkpoint, ...
        stamp = time.strftime("%Y%m%d-%H%M%S")
        moved = out_dir / f"checkpoints.corrupt-{stamp}"
        if (out_dir / "checkpoints").is_dir():
            (out_dir / "checkpoints").rename(moved)
        for hpc in out_dir.glob("hpc_ckpt_*.ckpt"):
            hpc.rename(hpc.with_name(f"{hpc.name}.corrupt-{stamp}"))
        log.warning(
            "%s is unreadable (%s: %s); starting this run over (old checkpoints moved to %s)",
            path,
            type(e).__name__,
            str(e).splitlines()[0][:120] if str(e) else "",
            moved,
        )
        return None
    # a setting older checkpoints lack has the default that reproduces them (e.g. concrete_gates=False; init: the
    # old default, xavier, not today's)
    defaults = {**{f.name: f.default for f in dataclasses.fields(TransformerConfig)}, **OLD_DEFAULTS}
    saved = {k: hparams["model"].get(k, defaults.get(k)) for k in model}
    if saved != model:
        k = next(k for k in model if saved[k] != model[k])
        raise ResumeError(
            f"{out_dir} holds a run of another model (model.{k}: {saved[k]!r} there, {model[k]!r} "
            "here): resume it with its own settings, or write this run elsewhere (hydra.run.dir=...)"
        )
    if hparams.get("tokenizer_json") != tokenizer_json:
        raise ResumeError(
            f"{out_dir} was trained with another vocabulary than this data config builds: resume it "
            "with its own data settings, or write this run elsewhere (hydra.run.dir=...)"
        )
    return path, step


def set_aside_metrics(csv_dir: Path, step: int) -> None:
    """Lightning's CSV logger deletes an existing metrics.csv: keep the rows logged before the checkpoint
    (CSV step < the checkpoint's global step; the resumed run logs the later ones again) for `join_metrics`."""
    path = csv_dir / "metrics.csv"
    if not path.is_file():
        return
    before = csv_dir / CSV_BEFORE.format(step=step)
    fields, rows = [], []
    if before.is_file():
        # Resumed from this checkpoint before and stopped again ahead of the next one: the rows set aside
        # then are the only copy of the run's start; the current file holds rows from this step on only.
        with open(before, newline="") as f:
            reader = csv.DictReader(f)
            fields, rows = list(reader.fieldnames or []), list(reader)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields += [k for k in reader.fieldnames or [] if k not in fields]
        rows += [r for r in reader if r.get("step") and int(r["step"]) < step]
    tmp = before.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, before)
    path.unlink()


def join_metrics(csv_dir: Path) -> None:
    """metrics.csv = the rows kept from before each resume, then the new ones, under one header, each once."""
    parts = sorted(csv_dir.glob(CSV_BEFORE.format(step="*")), key=lambda p: int(p.stem.rsplit("step", 1)[1]))
    current = csv_dir / "metrics.csv"
    if not parts:
        return
    fields, rows = [], []
    for path in [*parts, current]:
        if not path.is_file():
            continue
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            fields += [k for k in reader.fieldnames or [] if k not in fields]
            rows += list(reader)
    # A resumed run logs its step-0 rows (the parameter counts) again: keep one copy of a repeated row.
    seen, unique = set(), []
    for r in rows:
        key = tuple(sorted((k, v) for k, v in r.items() if v not in ("", None)))
        if key not in seen:
            seen.add(key)
            unique.append(r)
    rows = unique
    tmp = current.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=sorted(fields))
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, current)
    for path in parts:
        path.unlink()


def wandb_run_id(out_dir: Path) -> str:
    """The W&B run id of this run directory, made and kept on first use, so a resumed run continues it."""
    path = out_dir / WANDB_ID_FILE
    if path.is_file():
        return path.read_text().strip()
    run_id = generate_id()
    path.write_text(run_id + "\n")
    return run_id


def wandb_unreachable(timeout: float = 5.0) -> str | None:
    """Why online W&B logging cannot work from here (no API key, no route to the server), or None.
    Checked before training in a few seconds, instead of W&B's own minutes of retries."""
    url = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    if not (os.environ.get("WANDB_API_KEY") or _netrc_key(urlparse(url).hostname)):
        return "no W&B API key (run `wandb login` or set WANDB_API_KEY)"
    return unreachable(url, timeout)


def _netrc_key(host: str) -> str | None:
    """The key `wandb login` stores in ~/.netrc (or $NETRC) for the W&B host."""
    try:
        auth = netrc.netrc(os.environ.get("NETRC")).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None
    return auth[2] if auth else None


class SafeCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, made safe for the files already there: each checkpoint is written to
    a temporary file beside its target and renamed over it, so a failed write (full disk, read-only
    directory) leaves the previous last.ckpt intact; the failure is one warning and training goes on."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(checkpoint, tmp)
            os.replace(tmp, path)
        except (OSError, RuntimeError) as e:  # torch.save reports a full disk as RuntimeError
            if tmp.parent.is_dir():
                tmp.unlink(missing_ok=True)
            log.warning(
                "could not write checkpoint %s (%s); the previous checkpoint is intact, training goes on",
                path,
                str(e).splitlines()[0][:160] if str(e) else type(e).__name__,
            )


def resume_command(run_dir: Path, extra: list[str]) -> list[str]:
    """The command that continues `run_dir`: its own overrides, its own directory."""
    overrides_file = run_dir / ".hydra" / "overrides.yaml"
    if not overrides_file.is_file():
        raise ResumeError(
            f"{run_dir} is not a run directory of `make train` (no .hydra/overrides.yaml); "
            "pass the directory a run printed as its outputs"
        )
    overrides = [o for o in yaml.safe_load(overrides_file.read_text()) or [] if not o.startswith("hydra.run.dir=")]
    return [sys.executable, "-m", "headsweep.train", *overrides, *extra, f"hydra.run.dir={run_dir.resolve()}"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m headsweep.training.resume <run dir> [overrides]", file=sys.stderr)
        return 2
    run_dir = Path(args[0])
    try:
        if is_complete(run_dir):
            print(f"{run_dir} is already complete ({RESULTS}); nothing to resume")
            return 0
        cmd = resume_command(run_dir, args[1:])
    except ResumeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    raise SystemExit(main())
