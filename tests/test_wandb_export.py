"""`make wandb-export`: every finished run of results/ once, as an offline W&B run (no network), read back with
W&B's own reader: its resolved config, its final scores as summary, its cell as group (and its cell in each
sweep that shows it), the question it answers as job type, every sweep that holds it as a tag."""

import os

import pytest
from omegaconf import OmegaConf

from conftest import fake_run, stored_run
from headsweep.config import compose
from headsweep.reports.dashboard import export as W
from headsweep.reports.sweep.cells import ReportError
from headsweep.store import show
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
    # sizes as a training run logs them: d_k null in the config (d_model / h), 32 in W&B; the attention FLOPs
    assert read["h8-kv2"]["config"]["model"]["d_k"] == 32 and read["h8-kv2"]["config"]["flops"]["context"] == 32
    assert base["config"]["cell_in"] == {"kv_heads_lr": "h8-kv8", "table3_a": "h8-kv8"}  # what wandb-views groups by
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


def test_a_grid_run_a_sweep_also_shows_as_its_chosen_cells_seed_is_that_cell(tmp_path):
    """make sweep LR_GRID=...: seed 1 at the chosen rate is the grid's run, shown twice in the sweep (as
    <cell>-lr<v>-s1 and as <cell>-s1). In W&B it is one of the cell's seeds, or the cell would aggregate one
    seed short; a rate the grid did not choose stays a cell of its own."""
    root = tmp_path / "results"
    grid = {"grid": [0.001, 0.002], "select_on": "val/loss"}

    def record(seed: int, lr: float, tags: list[str], phase: str) -> dict:
        cfg = OmegaConf.to_container(compose(["budget=ablation", f"seed={seed}", f"module.peak_lr={lr}"]))
        cfg.update(sweep="kv_heads_lr", cell=tags[0][len("cell-") :], tags=tags, lr_select={"phase": phase, **grid})
        return {"status": "complete", "config": cfg, "metrics": {"test/bleu": 30.0}}

    sweep = root / "kv_heads_lr"
    stored_run(sweep / "h8-kv2-lr0.001-s1", record(1, 0.001, ["cell-h8-kv2-lr0.001", "lr-grid"], "grid"))
    chosen = stored_run(sweep / "h8-kv2-lr0.002-s1", record(1, 0.002, ["cell-h8-kv2-lr0.002", "lr-grid"], "grid"))
    show(chosen, sweep / "h8-kv2-s1", ["cell-h8-kv2", "lr-chosen"], lr_select={"phase": "chosen", **grid})
    stored_run(sweep / "h8-kv2-s2", record(2, 0.002, ["cell-h8-kv2", "lr-chosen"], "chosen"))
    groups = {tuple(w["jobs"]): W.view_cells(d, w["jobs"]) for d, w in W.finished_runs(root).items()}
    assert groups == {
        ("kv_heads_lr/h8-kv2-lr0.001-s1",): ("h8-kv2-lr0.001", {"kv_heads_lr": "h8-kv2-lr0.001"}),
        ("kv_heads_lr/h8-kv2-lr0.002-s1", "kv_heads_lr/h8-kv2-s1"): ("h8-kv2", {"kv_heads_lr": "h8-kv2"}),
        ("kv_heads_lr/h8-kv2-s2",): ("h8-kv2", {"kv_heads_lr": "h8-kv2"}),
    }
