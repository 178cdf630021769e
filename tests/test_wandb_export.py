"""`make wandb-export`: every finished run of results/ once, as an offline W&B run (no network), read back with
W&B's own reader: its resolved config, its final scores as summary, its cell as group, the question it answers
as job type, every sweep that holds it as a tag."""

import os

import pytest

from conftest import fake_run
from headsweep.reports import wandb_export as W
from headsweep.reports.cells import ReportError
from test_wandb import read_offline_run

QUESTIONS = [
    {"id": "kv_heads", "evidence": [{"sweep": "kv_heads_lr"}], "planned": []},
]


def test_the_export_runs_offline_each_run_once_with_its_cell_as_group(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    root = tmp_path / "results"
    curve = "step,val/bleu,val/loss\n230,10.0,4.0\n1149,30.0,2.3\n"
    fake_run(root, "kv_heads_lr", "h8-kv2-s1", 1, 33.3, ["cell=h8-kv2", "model.kv_heads=2"], curve=curve)
    fake_run(root, "kv_heads_lr", "h8-kv8-s1", 1, 34.1, ["cell=h8-kv8"], curve=curve)
    # the base seen from a second sweep: one run, two views (a link, as the store makes them)
    (root / "table3_a").mkdir()
    os.symlink("../kv_heads_lr/h8-kv8-s1", root / "table3_a" / "h8-dk32-dv32-s1")
    out = tmp_path / "wandb-export"
    written = W.export(root, out, "test-project", questions=QUESTIONS)
    assert len(written) == 2  # three views, two runs

    read = {}
    for run_dir in written:
        record = read_offline_run_at(run_dir)
        read[record["run"]["run_group"]] = record
    assert set(read) == {"h8-kv2", "h8-kv8"}
    base = read["h8-kv8"]
    assert base["run"]["job_type"] == "kv_heads"
    assert {"kv_heads_lr", "table3_a", "q-kv_heads"} <= set(base["run"]["tags"])
    assert base["summary"]["test/bleu"] == pytest.approx(34.1)
    assert read["h8-kv2"]["config"]["model"]["kv_heads"] == 2
    assert W.history(root / "kv_heads_lr" / "h8-kv2-s1") == [
        (230, {"val/bleu": 10.0, "val/loss": 4.0}),
        (1149, {"val/bleu": 30.0, "val/loss": 2.3}),
    ]
    # nothing to export: one line
    with pytest.raises(ReportError, match="no finished runs of nonesuch"):
        W.finished_runs(root, ["nonesuch"])


def read_offline_run_at(offline_dir):
    """read_offline_run takes a run directory holding wandb/offline-run-*/: give it one."""
    holder = offline_dir.parent.parent / f"holder-{offline_dir.name}"
    (holder / "wandb").mkdir(parents=True)
    os.symlink(offline_dir, holder / "wandb" / offline_dir.name)
    return read_offline_run(holder)
