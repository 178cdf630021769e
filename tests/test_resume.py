"""Nothing is lost to interruptions: a killed run resumes from its checkpoint onto the same curve and W&B
run, bad resume directories fail in one line, and W&B that cannot be reached never stops training."""

import csv
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

from conftest import TINY_RUN, needs_data, tiny_overrides
from headsweep.config import compose
from headsweep.training.checks import ConfigError
from headsweep.training.resume import SafeCheckpointIO, join_metrics, set_aside_metrics, wandb_unreachable
from headsweep.training.train import train


def overrides(out: Path, *extra: str) -> list[str]:
    """40 steps of 512-token batches, a checkpoint every 5: room to kill a run between two of them."""
    return tiny_overrides(
        None,
        f"data.cache_dir={out.parent / 'cache'}",
        "data.limit_eval=20",
        "data.max_tokens=512",
        "trainer.max_steps=40",
        "module.test_beam_size=1",
        "trainer.log_every_n_steps=1",
        "callbacks.checkpoint.every_n_train_steps=5",
        "callbacks.checkpoint.every_n_epochs=null",
        "logger.wandb.mode=offline",
        "run_name=resume",
        *extra,
    )


def loss_curve(run: Path) -> dict[int, float]:
    rows = csv.DictReader(open(run / "csv" / "metrics.csv"))
    return {int(r["step"]): float(r["train/loss"]) for r in rows if r.get("train/loss")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


@pytest.mark.slow
@needs_data
def test_killed_run_resumes_onto_the_uninterrupted_curve(tmp_path):
    whole = tmp_path / "whole"
    train(compose([*overrides(whole), f"paths.output_dir={whole}"]))

    killed = tmp_path / "killed"
    args = [f"{o.split('=', 1)[0]}={o.split('=', 1)[1]}" for o in overrides(killed)]
    # its own W&B service, as a separate `make train` would have (not this process's, which it would inherit)
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "headsweep.train", *args, f"hydra.run.dir={killed}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    last, log = killed / "checkpoints" / "last.ckpt", killed / "csv" / "metrics.csv"
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline:  # kill between the checkpoints of steps 5 and 10
        try:
            if last.is_file() and log.is_file() and max(loss_curve(killed), default=0) >= 6:
                break
        except ValueError:  # a line being written
            pass
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "results.json").exists(), "the run finished before it could be killed"
    step = torch.load(last, weights_only=False)["global_step"]
    assert 5 <= step < 40

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = train(compose([*overrides(killed), f"paths.output_dir={killed}"]))
    # no false alarm: Lightning's "dataloader is not resumable" does not apply to ours (the curve below)
    assert not [w for w in caught if "not resumable" in str(w.message)]
    results = json.loads((killed / "results.json").read_text())
    assert results["resumed_from_step"] == step and metrics["train/steps"] == 40
    a, b = loss_curve(whole), loss_curve(killed)
    assert sorted(a) == sorted(b) == list(range(0, 40))  # one row per step, none lost or repeated
    for s in a:  # the same curve, step by step, across the interruption
        assert b[s] == pytest.approx(a[s], rel=1e-5, abs=1e-6), s
    # one W&B run, continued: its id is kept in the run directory
    run_id = (killed / "wandb_id").read_text().strip()
    assert results["wandb"]["run_id"] == run_id
    assert {p.name.rsplit("-", 1)[1] for p in (killed / "wandb").glob("offline-run-*")} == {run_id}


@pytest.mark.slow
@needs_data
def test_resume_under_other_checkpoint_settings_still_ends_in_last_ckpt(tmp_path):
    """Other checkpoint settings change the callback's state key, so Lightning drops its saved state on
    resume; the run must still overwrite last.ckpt (not write last-v1.ckpt beside a stale one) and end
    with its final step saved, or the next resume and the analysis load the step it resumed from."""
    run = tmp_path / "run"
    train(compose([*overrides(run, "callbacks.checkpoint.save_top_k=10"), f"paths.output_dir={run}"]))
    ckpts = run / "checkpoints"
    (run / "results.json").unlink()  # as if killed right after step 20's checkpoint
    shutil.copy(ckpts / "step000020.ckpt", ckpts / "last.ckpt")
    for p in ckpts.glob("step*.ckpt"):
        if int(p.stem[4:]) > 20:
            p.unlink()
    train(compose([*overrides(run, "callbacks.checkpoint.every_n_train_steps=4"), f"paths.output_dir={run}"]))
    assert json.loads((run / "results.json").read_text())["resumed_from_step"] == 20
    assert sorted(p.name for p in ckpts.glob("last*.ckpt")) == ["last.ckpt"]
    assert torch.load(ckpts / "last.ckpt", weights_only=False)["global_step"] == 40
    assert (ckpts / "step000040.ckpt").is_file()


def test_complete_run_is_never_retrained(run_copy, capsys):
    first = json.loads((run_copy / "results.json").read_text())
    files = [run_copy / "results.json", run_copy / "csv" / "metrics.csv", run_copy / "checkpoints" / "last.ckpt"]
    stamps = [p.stat().st_mtime_ns for p in files]
    assert train(compose(tiny_overrides(run_copy, *TINY_RUN))) == first["metrics"]
    assert [p.stat().st_mtime_ns for p in files] == stamps  # nothing trained, nothing written
    assert "already complete" in capsys.readouterr().out


def test_resume_with_another_model_fails_in_one_line(run_copy):
    (run_copy / "results.json").unlink()  # as if killed after its last checkpoint
    with pytest.raises(ConfigError, match=r"holds a run of another model \(model.heads: 2 there, 4 here\)"):
        train(compose(tiny_overrides(run_copy, *TINY_RUN, "model.heads=4")))


@pytest.mark.slow
@needs_data
def test_corrupt_checkpoint_starts_over_and_says_so(tmp_path, caplog):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "last.ckpt").write_bytes(b"PK\x03\x04 truncated")
    with caplog.at_level(logging.WARNING, logger="headsweep.training.resume"):
        metrics = train(compose([*overrides(out, "trainer.max_steps=10"), f"paths.output_dir={out}"]))
    assert metrics["train/steps"] == 10
    assert "is unreadable" in caplog.text and "starting this run over" in caplog.text
    assert list(out.glob("checkpoints.corrupt-*/last.ckpt"))


@pytest.mark.slow
@needs_data
def test_unreachable_wandb_falls_back_to_offline(tmp_path, monkeypatch, caplog):
    """Online logging with a key but no route to the server: one warning, an offline run, results.json
    says so, and seconds (not W&B's minutes of retries) lost."""
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{free_port()}")
    out = tmp_path / "run"
    start = time.time()
    with caplog.at_level(logging.WARNING, logger="headsweep.training.train"):
        train(compose([*overrides(out, "trainer.max_steps=6", "logger.wandb.mode=online"), f"paths.output_dir={out}"]))
    took = time.time() - start
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "complete" and results["wandb"]["requested"] == "online"
    assert results["wandb"]["mode"] == "offline" and "cannot reach 127.0.0.1" in results["wandb"]["fell_back"]
    warnings = [r for r in caplog.records if "W&B online logging unavailable" in r.getMessage()]
    assert len(warnings) == 1 and "wandb sync" in warnings[0].getMessage()
    assert list((out / "wandb").glob("offline-run-*"))
    assert took < 120


def test_no_api_key_is_reported_without_network(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    (tmp_path / "netrc").write_text("")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    assert "no W&B API key" in wandb_unreachable()


def test_metrics_before_a_resume_are_kept_up_to_the_checkpoint(tmp_path):
    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    (csv_dir / "metrics.csv").write_text("epoch,step,train/loss\n0,1,5.0\n0,2,4.0\n0,3,3.5\n")
    set_aside_metrics(csv_dir, step=2)  # a checkpoint after 2 steps: CSV steps 0 and 1; 2 is trained again
    assert not (csv_dir / "metrics.csv").exists()  # Lightning's CSV logger would delete it
    (csv_dir / "metrics.csv").write_text("epoch,lr-Adam,step,train/loss\n0,0.1,2,3.6\n0,0.1,3,3.4\n")
    join_metrics(csv_dir)
    rows = list(csv.DictReader(open(csv_dir / "metrics.csv")))
    assert [(r["step"], r["train/loss"], r["lr-Adam"]) for r in rows] == [
        ("1", "5.0", ""),
        ("2", "3.6", "0.1"),
        ("3", "3.4", "0.1"),
    ]
    assert list(csv_dir.iterdir()) == [csv_dir / "metrics.csv"]


def test_resuming_twice_from_one_checkpoint_keeps_the_rows_before_it(tmp_path):
    """Killed again before the next checkpoint, a run resumes from the same step twice: the second
    set-aside must not overwrite the first (it held the only copy of the run's start)."""
    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    # every start logs the parameter count at step 0 (params/total), resumed ones too
    (csv_dir / "metrics.csv").write_text("params/total,step,train/loss\n7,0,\n,0,5.0\n,1,4.0\n,2,3.5\n")
    set_aside_metrics(csv_dir, step=2)
    (csv_dir / "metrics.csv").write_text("params/total,step,train/loss,val/loss\n7,0,,\n,2,3.6,\n")  # killed again
    set_aside_metrics(csv_dir, step=2)
    (csv_dir / "metrics.csv").write_text("params/total,step,train/loss,val/loss\n7,0,,\n,2,3.7,\n,3,3.3,3.0\n")
    join_metrics(csv_dir)
    rows = list(csv.DictReader(open(csv_dir / "metrics.csv")))
    assert [(r["params/total"], r["step"], r["train/loss"], r["val/loss"]) for r in rows] == [
        ("7", "0", "", ""),
        ("", "0", "5.0", ""),
        ("", "1", "4.0", ""),
        ("", "2", "3.7", ""),
        ("", "3", "3.3", "3.0"),
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_failed_checkpoint_write_keeps_the_previous_one(tmp_path, caplog):
    io = SafeCheckpointIO()
    path = tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"step": 1}, path)
    path.parent.chmod(0o500)
    try:
        with caplog.at_level(logging.WARNING, logger="headsweep.training.resume"):
            io.save_checkpoint({"step": 2}, path)
    finally:
        path.parent.chmod(0o700)
    assert torch.load(path, weights_only=False) == {"step": 1}
    assert "could not write checkpoint" in caplog.text and "previous checkpoint is intact" in caplog.text


def test_failed_checkpoint_write_on_a_full_disk_keeps_the_previous_one(tmp_path, monkeypatch, caplog):
    io = SafeCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"step": 1}, path)

    def full_disk(obj, f, *a, **k):
        Path(f).write_bytes(b"partial")
        raise RuntimeError(
            "[enforce fail at inline_container.cc] . PytorchStreamWriter failed writing file: No space left on device"
        )

    monkeypatch.setattr(torch, "save", full_disk)
    with caplog.at_level(logging.WARNING, logger="headsweep.training.resume"):
        io.save_checkpoint({"step": 2}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=False) == {"step": 1}
    assert not list(tmp_path.glob(".*.tmp")) and "No space left on device" in caplog.text
