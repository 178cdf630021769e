"""The training targets preload jemalloc where it is installed (Makefile JEMALLOC): under glibc's malloc a CPU
job's resident memory grew to 6.5-10 GB, under jemalloc it stayed near 2 GB (docs/memory.md). What make would
run, read with `make -n`: the preload on every target that trains, none where JEMALLOC is empty or elsewhere."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRAINING = {
    "train": "-m headsweep.train",
    "smoke": "-m headsweep.train experiment=smoke",
    "sweep": "-m headsweep.sweeps.sweep",
    "table3": "-m headsweep.sweeps.table3",
    "budgets": "-m headsweep.sweeps.budgets",
}


def dry_run(target: str, *assignments: str) -> str:
    """What `make -n <target>` prints: the commands make would run."""
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", target, *assignments], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def command_of(target: str, *assignments: str) -> str:
    """The recipe line of `make -n <target>` that runs the target's module."""
    return next(line for line in dry_run(target, *assignments).splitlines() if TRAINING[target] in line)


@pytest.mark.parametrize("target", TRAINING)
def test_every_training_target_preloads_the_named_jemalloc(target):
    line = command_of(target, "JEMALLOC=/opt/x/libjemalloc.so.2")
    assert line.startswith("LD_PRELOAD=/opt/x/libjemalloc.so.2 .venv/bin/python -m ")


@pytest.mark.parametrize("target", TRAINING)
def test_an_empty_jemalloc_runs_glibcs_malloc(target):
    assert "LD_PRELOAD" not in command_of(target, "JEMALLOC=")


def test_a_target_that_does_not_train_keeps_glibcs_malloc():
    # the benchmark's timings are compared with earlier ones under the default allocator
    out = dry_run("bench", "JEMALLOC=/opt/x/libjemalloc.so.2")
    assert "-m headsweep.bench" in out and "LD_PRELOAD" not in out
