"""Scaling out: data-parallel CPU training splits each epoch between the ranks and writes one run; sweeps
run their jobs in parallel (joblib) or through submitit's local executor (SLURM's stand-in)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import needs_data, tiny_overrides
from headsweep.config import compose
from headsweep.sweeps import sweep as S
from headsweep.training.checks import ConfigError, check_devices


def run_cli(out, *extra) -> subprocess.CompletedProcess:
    args = [a for a in tiny_overrides(out, *extra) if not a.startswith("paths.output_dir=")]
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    return subprocess.run(
        [sys.executable, "-m", "headsweep.train", *args, f"hydra.run.dir={out}"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


@pytest.mark.slow
@needs_data
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="two processes need two cores")
def test_ddp_on_two_cpu_processes_splits_each_epoch(tmp_path):
    """One epoch: one process takes every batch; two ranks take half each (rounded up), and rank 0 alone
    writes results.json and the W&B run."""
    epoch = ["trainer.max_steps=1000", "trainer.max_epochs=1", "logger.wandb.mode=offline"]
    single = run_cli(tmp_path / "single", *epoch)
    assert single.returncode == 0, single.stderr[-2000:]
    ddp = run_cli(tmp_path / "ddp", *epoch, "trainer=ddp_cpu")
    assert ddp.returncode == 0, ddp.stderr[-2000:]
    one = json.loads((tmp_path / "single" / "results.json").read_text())
    two = json.loads((tmp_path / "ddp" / "results.json").read_text())
    assert two["status"] == "complete" and two["config"]["trainer"]["strategy"] == "ddp"
    assert two["metrics"]["train/steps"] == -(-one["metrics"]["train/steps"] // 2)
    assert two["threads"] == (os.cpu_count() or 1) // 2  # cores shared between the processes
    assert len(list((tmp_path / "ddp" / "wandb").glob("offline-run-*"))) == 1


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["trainer=gpu"], "trainer=gpu but torch sees no CUDA GPU here"),
        (["trainer=ddp_cpu", f"trainer.devices={(os.cpu_count() or 1) * 2}"], "CPU processes on"),
        (["trainer.devices=2"], "needs trainer.strategy=ddp"),
    ],
)
def test_devices_this_machine_cannot_run_fail_in_one_line(overrides, message):
    import torch

    if torch.cuda.is_available() and overrides == ["trainer=gpu"]:
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match=message):
        check_devices(compose([*overrides, "paths.output_dir=/tmp/x"]))


TINY_SWEEP = tiny_overrides(
    None,
    "data.limit_eval=20",
    "trainer.max_steps=6",
    "module.warmup_steps=2",
    "module.test_beam_size=1",
    "logger.wandb.mode=disabled",
)


@pytest.mark.slow
@needs_data
@pytest.mark.parametrize("launcher, jobs", [("joblib", 2), ("submitit_local", 1)])
def test_tiny_sweep_through_a_launcher(tmp_path, capsys, launcher, jobs):
    extra = ["hydra.launcher.timeout_min=10"] if launcher == "submitit_local" else []
    args = [
        "--sweep",
        "table3_e",
        "--root",
        str(tmp_path / "multirun"),
        "--results",
        str(tmp_path / "results"),
        "--launcher",
        launcher,
        "--jobs",
        str(jobs),
        "--seeds",
        "1",
        *TINY_SWEEP,
        f"data.cache_dir={tmp_path / 'cache'}",
        *extra,
    ]
    assert S.main(args) == 0, capsys.readouterr()
    assert "2 done, 0 skipped (already complete), 0 failed" in capsys.readouterr().out
    for name in ("h4-dk8-dv8-pos-sinusoidal-s1", "h4-dk8-dv8-pos-learned-s1"):
        results = json.loads((tmp_path / "results" / "table3_e" / name / "results.json").read_text())
        assert results["status"] == "complete" and results["config"]["seed"] == 1
        if jobs == 2:  # two jobs at once on two cores: one thread each, set before torch started
            assert results["threads"] == max((os.cpu_count() or 1) // 2, 1)
