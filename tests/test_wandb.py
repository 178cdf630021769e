"""What the W&B dashboard gets: a sweep job's offline run read back with W&B's own reader (`wandb leet
inspect`, no network) carries the resolved sizes, its cell as group, its sweep as job type and tag, and the
final scores in its summary; the attention FLOPs by hand; `make sync`'s command."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, needs_data
from headsweep.config import compose
from headsweep.sizes import attention_flops, comparison_config
from headsweep.sweeps import sweep as S
from headsweep.sweeps import sync
from headsweep.sweeps.launch import JOB_GROUP, write_jobs
from headsweep.training.train import train


def read_offline_run(run_dir: Path) -> dict:
    """The run record, the config and the summary of the run's .wandb file, as W&B's own reader prints
    them (one JSON record per line)."""
    (log_file,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    text = subprocess.run(
        [Path(sys.executable).parent / "wandb", "leet", "inspect", "--json", str(log_file)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    out = {"run": {}, "config": {}, "summary": {}}
    for line in text.splitlines():
        record = json.loads(line)
        kind = record.get("type")
        if kind == "run":
            out["run"] = record["run"]
        elif kind in ("config", "summary"):
            out[kind].update(record[kind].get("update", {}))
    return out


@needs_data  # about 10 s on an idle 2-core CPU
def test_a_row_a_job_reads_back_with_resolved_sizes_its_cell_as_group_and_its_scores(tmp_path):
    """The base job of table3_a as `make sweep` writes it (its job file), at a tiny budget: d_k is null in
    the config (d_model / h) and 32 in W&B."""
    tiny = [
        "experiment=smoke",
        f"data.dir={DATA}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.limit_train=200",
        "data.limit_eval=40",
        "data.vocab_size=300",
        "data.max_tokens=1024",
        "trainer.max_steps=10",
        "module.warmup_steps=4",
        "logger.wandb.mode=offline",
        "model.d_model=256",
        "model.d_ff=256",
    ]
    sweep = S.plan("table3_a", seeds=1, extra=tiny, root=tmp_path / "multirun")
    job = sweep.jobs[0]
    write_jobs(sweep, [job])
    cfg = compose(
        [
            *sweep.common,
            f"hydra.searchpath=[file://{(sweep.dir / '.jobs').resolve()}]",
            f"+{JOB_GROUP}={job.name}",
            f"paths.output_dir={job.dir}",
        ]
    )
    assert cfg.model.d_k is None and cfg.cell is None  # resolved by the run, not by the sweep
    metrics = train(cfg)

    run = read_offline_run(job.dir)
    config, summary = run["config"], run["summary"]
    assert (config["model"]["heads"], config["model"]["d_k"], config["model"]["d_v"]) == (8, 32, 32)
    assert config["cell"] == "h8-dk32-dv32" and config["sweep"] == "table3_a"
    assert run["run"]["run_group"] == "h8-dk32-dv32"  # the seeds of a cell aggregate
    assert run["run"]["job_type"] == "table3_a" and "table3_a" in run["run"]["tags"]
    results = json.loads((job.dir / "results.json").read_text())
    assert config["params"]["total"] == results["params"]["total"] == summary["params/total"]
    assert config["flops"]["attention_per_token"] == attention_flops(results["config"]["model"])["attention_per_token"]
    for key in ("test/bleu", "test/chrf", "val/bleu"):
        assert summary[key] == pytest.approx(metrics[key]), key
    assert results["config"]["model"]["d_k"] is None  # results.json keeps the config as composed


def test_attention_flops_by_hand():
    """h = 2, d_k = 3, d_v = 5, d_model = 8, one layer (3 sublayers), 4 tokens of context."""
    model = {"d_model": 8, "heads": 2, "d_k": 3, "d_v": 5, "n_layers": 1}
    flops = attention_flops(model, context=4)
    projections = 2 * 8 * (2 * 3) * 2 + 2 * 8 * (2 * 5) + 2 * (2 * 5) * 8  # Q and K, V, output
    per_key = 2 * 2 * 3 + 3 * 2 + 2 * 2 * 5  # QK^T, softmax, weights x values
    assert flops["attention_projections_per_token"] == 3 * projections
    assert flops["attention_per_token"] == 3 * (projections + 4 * per_key)
    # row A: h x d_k fixed, so only the softmax moves the count; grouped-query attention shrinks K and V
    row_a = [attention_flops({"d_model": 256, "heads": h, "d_k": None, "d_v": None, "n_layers": 3}) for h in (1, 8)]
    assert row_a[0]["attention_projections_per_token"] == row_a[1]["attention_projections_per_token"]
    assert row_a[1]["attention_per_token"] - row_a[0]["attention_per_token"] == 9 * 3 * 7 * 32
    gqa = attention_flops({**model, "kv_heads": 1}, context=4)
    assert flops["attention_projections_per_token"] - gqa["attention_projections_per_token"] == 3 * 2 * 8 * (3 + 5)


def test_comparison_config_resolves_sizes_without_touching_the_original():
    config = {
        "model": {"d_model": 256, "heads": 4, "d_k": None, "d_v": 16, "n_layers": 3},
        "module": {"model": {"d_model": 256, "heads": 4, "d_k": None, "d_v": 16, "n_layers": 3}},
    }
    out = comparison_config(config, {"total": 10})
    assert (out["model"]["d_k"], out["model"]["d_v"], out["module"]["model"]["d_k"]) == (64, 16, 64)
    assert out["params"] == {"total": 10} and out["flops"]["context"] == 32
    assert config["model"]["d_k"] is None and "kv_heads" not in out["model"]
    assert comparison_config({"model": {**config["model"], "kv_heads": None}})["model"]["kv_heads"] == 4


def test_attention_flops_are_counted_at_the_context_a_joined_example_holds():
    """data.join k pairs an example: k times the context per token; no data section (older runs) joins nothing."""
    model = {"d_model": 256, "heads": 8, "d_k": None, "d_v": None, "n_layers": 3}
    one, two = (comparison_config({"model": model, "data": {"join": k}})["flops"] for k in (1, 2))
    assert (one["context"], two["context"]) == (32, 64)
    assert two["attention_per_token"] - one["attention_per_token"] == 32 * one["attention_per_context_token"]
    assert comparison_config({"model": model})["flops"] == one


def test_sync_uploads_every_offline_run_of_the_sweep(tmp_path, monkeypatch, capsys):
    for run in ("h8-dk32-dv32-s1", "h4-dk64-dv64-s1"):
        (tmp_path / "table3_a" / run / "wandb" / f"offline-run-2026_{run}").mkdir(parents=True)
    (tmp_path / "table3_a" / "h8-dk32-dv32-s1" / "wandb" / "latest-run").symlink_to(
        tmp_path / "table3_a" / "h8-dk32-dv32-s1" / "wandb" / "offline-run-2026_h8-dk32-dv32-s1"
    )
    (tmp_path / "table3_b" / "h8-dk8-dv32-s1" / "wandb" / "offline-run-x").mkdir(parents=True)  # another sweep
    monkeypatch.setenv("WANDB_MODE", "offline")
    calls = []
    monkeypatch.setattr(
        sync.subprocess, "run", lambda cmd, env: calls.append((cmd, env)) or subprocess.CompletedProcess(cmd, 0)
    )
    assert sync.main(["--sweep", "table3_a", "--root", str(tmp_path)]) == 0
    ((cmd, env),) = calls
    assert cmd[1] == "sync" and [Path(p).name for p in cmd[2:]] == [
        "offline-run-2026_h4-dk64-dv64-s1",
        "offline-run-2026_h8-dk32-dv32-s1",
    ]
    assert "WANDB_MODE" not in env
    assert sync.main(["--sweep", "table3_c", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no offline W&B runs under" in err


def test_wandb_that_cannot_start_steps_down_a_mode_and_says_why(tmp_path, monkeypatch):
    """W&B that cannot start never stops training: online goes offline, offline goes disabled (wandb 0.17's
    `MailboxError: transport failed` on a GPU node, 21 jobs packed), and the run's record keeps the reasons."""
    import wandb
    from pytorch_lightning.loggers import WandbLogger

    from headsweep.training.train import make_loggers

    real, asked = wandb.init, []

    def init(*args, **kwargs):
        asked.append(kwargs.get("mode"))
        if kwargs.get("mode") != "disabled":
            raise RuntimeError(f"transport failed ({kwargs.get('mode')})")
        return real(*args, **kwargs)

    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    cfg = compose([f"paths.output_dir={tmp_path}", "run_name=r"])
    cfg.logger.wandb.mode = "offline"
    loggers, info = make_loggers(cfg, tmp_path)
    (w,) = [lg for lg in loggers if isinstance(lg, WandbLogger)]
    assert info["mode"] == "disabled" and info["fell_back"] == "RuntimeError: transport failed (offline)"
    w.log_metrics({"x": 1.0}, step=0)  # a disabled run takes every call and writes nothing
    assert asked == ["offline", "disabled"]
    assert not (tmp_path / "wandb").exists() or not any((tmp_path / "wandb").glob("offline-run-*"))
    wandb.finish()


def test_a_cell_tag_longer_than_wandb_allows_is_cut_to_one_it_accepts():
    """heads_identical's cells are named by four settings: `cell-h8-...-noise0.01` is 66 characters, and W&B
    refused to start such a run (wandb.Settings: tags of 1-64 characters), failing the job before step one."""
    import wandb
    from omegaconf import OmegaConf

    from headsweep.training.train import WANDB_TAG_CHARS, wandb_tags

    long = "cell-h8-dk32-dv32-attndrop0-head_dropout0-init-identical-noise0.01"
    other = "cell-h8-dk32-dv32-attndrop0-head_dropout0-init-identical-noise0.02"
    with pytest.raises(Exception, match="64 characters"):
        wandb.Settings(run_tags=(long,))
    cfg = OmegaConf.create({"sweep": "heads_identical"})
    tags = wandb_tags(cfg, OmegaConf.create({"tags": ["base", long]}))
    assert tags[0] == "base" and tags[-1] == "heads_identical"  # short tags unchanged, the sweep's added
    assert len(tags[1]) == WANDB_TAG_CHARS and tags[1].startswith(long[:50])
    assert wandb.Settings(run_tags=tuple(tags)).run_tags == tuple(tags)
    assert wandb_tags(cfg, OmegaConf.create({"tags": [other]}))[0] != tags[1]  # still one tag per cell
