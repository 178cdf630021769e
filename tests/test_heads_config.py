"""model.kv_heads and model.fixed_heads as settings: bad values and mismatched checkpoints fail in one line
before any data is read, old runs stay the same experiment, the sweeps' cells, and decode_speed."""

import json
import re
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from conftest import needs_data, tiny_overrides
from headsweep.config import SWEEPS_DIR, compose
from headsweep.identity import default_run_name
from headsweep.store import flatten_config
from headsweep.sweeps import sweep as S
from headsweep.sweeps.params import count_for, matched_d_ff
from headsweep.training.checks import ConfigError, check_config, check_resume
from headsweep.training.train import train

NO_DATA = "data.dir=/nonexistent"  # a check that reads data would fail on this instead


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.kv_heads=3", r"model\.kv_heads=3 must divide heads=8 .*use one of 1, 2, 4, 8"),
        ("model.kv_heads=0", r"model\.kv_heads=0 must divide heads=8"),
        ("model.fixed_patterns=[cur,up]", r"model\.fixed_patterns: unknown fixed attention pattern 'up'"),
        ("model.fixed_heads={enc_self:9}", r"model\.fixed_heads\.enc_self: 9 fixed heads but heads=8: at most 8"),
        ("model.fixed_heads={enc_self:8}", r"model\.fixed_heads\.enc_self=8 but model\.fixed_patterns lists 7"),
        ("model.fixed_heads={cross:2}", r"model\.fixed_heads\.cross: fixed heads go in enc_self or dec_self"),
        ("model.fixed_heads={dec_self:3}", r"model\.fixed_heads\.dec_self: patterns \['next'\] look at later tokens"),
        ("model={kv_heads:2,fixed_heads:{enc_self:1}}", r"fixed heads with kv_heads=2 < heads=8: .* not both"),
    ],
)
def test_bad_head_settings_fail_in_one_line_before_data(override, message):
    with pytest.raises(ConfigError, match=message) as e:
        check_config(compose([override, NO_DATA, "paths.output_dir=/tmp/x"]))
    assert "\n" not in str(e.value)


def fake_checkpoint(path: Path, **model) -> Path:
    """What check_config reads of a checkpoint: its hyper-parameters (Lightning's layout)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    base = OmegaConf.to_container(compose([]).model, resolve=True)
    for key in ("kv_heads", "fixed_heads", "fixed_patterns"):  # a checkpoint from before these settings
        base.pop(key)
    torch.save({"hyper_parameters": {"model": {**base, **model}}, "state_dict": {}, "global_step": 3}, path)
    return path


@pytest.mark.parametrize(
    "saved, overrides, message",
    [
        (
            {"kv_heads": 2},
            ["model.kv_heads=null"],
            "model.kv_heads: 2 and this run builds model.kv_heads: null (= heads)",
        ),
        ({}, ["model.kv_heads=1"], "model.kv_heads: null (= heads) and this run builds model.kv_heads: 1"),
        (
            {"fixed_heads": {"enc_self": 7}},
            [],
            "model.fixed_heads: enc_self 7 (cur prev next left3 right3 first last) "
            "and this run builds model.fixed_heads: none",
        ),
        (
            {"fixed_heads": {"enc_self": 2}},
            ["model.fixed_heads={enc_self:2}", "model.fixed_patterns=[prev,cur]"],
            "model.fixed_heads: enc_self 2 (cur prev) and this run builds model.fixed_heads: enc_self 2 (prev cur)",
        ),
    ],
)
def test_init_from_checkpoint_of_other_heads_fails_in_one_line_before_data(tmp_path, saved, overrides, message):
    fake_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt", **saved)
    with pytest.raises(
        ConfigError,
        match=re.escape(
            f"init_from={tmp_path / 'run'} was trained with {message}; fine-tune with the checkpoint's setting"
        ),
    ) as e:
        check_config(compose([*overrides, f"init_from={tmp_path / 'run'}", NO_DATA, "paths.output_dir=/tmp/x"]))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "saved, override",
    [
        ({}, "model.kv_heads=8"),
        ({"kv_heads": None}, "model.fixed_heads={enc_self:0}"),
        ({"kv_heads": 8, "fixed_heads": {}}, "model.kv_heads=null"),
    ],
)
def test_checkpoint_of_the_same_heads_spelled_otherwise_passes(tmp_path, saved, override):
    fake_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt", **saved)
    check_config(compose([override, f"init_from={tmp_path / 'run'}", NO_DATA, "paths.output_dir=/tmp/x"]))


def test_resuming_a_run_of_other_heads_fails_in_one_line(tmp_path):
    fake_checkpoint(tmp_path / "checkpoints" / "last.ckpt", kv_heads=4)
    cfg = compose([f"paths.output_dir={tmp_path}", NO_DATA])
    with pytest.raises(
        ConfigError,
        match=re.escape(
            f"{tmp_path} holds a run trained with model.kv_heads: 4 and this "
            "run builds model.kv_heads: null (= heads); resume it with its own"
        ),
    ):
        check_resume(cfg, tmp_path)
    check_resume(compose([f"paths.output_dir={tmp_path}", "model.kv_heads=4"]), tmp_path)  # its own: fine


@needs_data
def test_fine_tuning_a_real_checkpoint_with_other_kv_heads_fails_before_data(tmp_path):
    """A tiny run with kv_heads = 2 trains, then fine-tuning it with every head its own K/V stops in one line
    naming the setting (before: a torch size-mismatch error after the data was read)."""
    out = tmp_path / "gqa"
    metrics = train(compose(tiny_overrides(out, "model.kv_heads=2", "logger.wandb.mode=offline")))
    assert metrics["test/bleu"] >= 0
    overrides = [o for o in tiny_overrides(tmp_path / "ft", f"init_from={out}") if not o.startswith("data.dir=")]
    cfg = compose([*overrides, NO_DATA])
    with pytest.raises(
        ConfigError, match=re.escape("model.kv_heads: 2 and this run builds model.kv_heads: null (= heads)")
    ) as e:
        train(cfg)
    assert "\n" not in str(e.value)


def test_run_names_say_shared_and_fixed_heads():
    names = [
        default_run_name(compose([*o, "seed=1"]))
        for o in ([], ["model.kv_heads=8"], ["model.kv_heads=2"], ["model.fixed_heads={enc_self:7,dec_self:0}"])
    ]
    assert names == ["h8-dk32-dv32-s1", "h8-dk32-dv32-s1", "h8-dk32-dv32-kv2-s1", "h8-dk32-dv32-fixed_enc7-s1"]


def test_null_and_explicit_defaults_are_the_same_experiment():
    old = OmegaConf.to_container(compose([]))
    for key in ("kv_heads", "fixed_heads", "fixed_patterns"):  # a results.json from before these settings
        del old["model"][key]
    old = OmegaConf.create(old)
    same = [
        compose([o])
        for o in (
            "model.kv_heads=8",
            "model.fixed_heads={enc_self:0,dec_self:0}",
            "model.fixed_patterns=[cur,prev,next,left3,right3,first,last]",
        )
    ]
    flats = [flatten_config(c) for c in (old, compose([]), *same)]
    assert all(f == flats[0] for f in flats), [set(f.items()) ^ set(flats[0].items()) for f in flats]
    assert flatten_config(compose(["model.kv_heads=4"]))["model.kv_heads"] == 4
    assert flatten_config(compose(["model.fixed_heads={enc_self:4}"]))["model.fixed_heads.enc_self"] == 4


def test_kv_sweep_cells_and_parameter_matched_d_ff():
    sweep = S.plan("kv_heads", seeds=1)
    cells = [compose([*sweep.common, *j.overrides]).model for j in sweep.jobs]
    assert [(c.kv_heads, c.d_ff) for c in cells] == [(8, 1024), (4, 1024), (2, 1024), (1, 1024), (2, 1313), (1, 1361)]
    assert [j.cell for j in sweep.jobs[:2]] == ["h8-dk32-dv32-ff1024-kv8", "h8-dk32-dv32-ff1024-kv4"]
    vocab = compose([]).data.vocab_size
    models = [OmegaConf.to_container(c, resolve=True) for c in cells]
    base = count_for(models[0], vocab)["total"]
    slope = 2 * 3 * (2 * 256 + 1)  # parameters per unit of d_ff: two matrices and a bias in 2N layers
    for m in models[4:]:  # the widened cells: the nearest d_ff to the base's count
        assert abs(count_for(m, vocab)["total"] - base) <= slope / 2
        assert m["d_ff"] == matched_d_ff({**m, "d_ff": 1024}, vocab, base)


def test_fixed_sweep_cells_and_table3_a_names_unchanged():
    sweep = S.plan("fixed_heads", seeds=1)
    assert [j.cell for j in sweep.jobs] == [f"h8-dk32-dv32-fixed_enc{n}" for n in (0, 4, 7)]
    assert [compose([*sweep.common, *j.overrides]).model.fixed_heads.enc_self for j in sweep.jobs] == [0, 4, 7]
    assert [j.cell for j in S.plan("table3_a", seeds=1).jobs][:2] == ["h8-dk32-dv32", "h1-dk256-dv256"]


def test_spec_comment_counts_are_current():
    text = (SWEEPS_DIR / "kv_heads.yaml").read_text()
    base = count_for(OmegaConf.to_container(compose([]).model, resolve=True), compose([]).data.vocab_size)["total"]
    assert f"{base:,}" in text and yaml.safe_load(text)["name"] == "kv_heads"


@needs_data
def test_decode_speed_times_every_cell_against_the_base(tmp_path):
    from headsweep.bench.decode_speed import decode_speed
    from headsweep.reports.sweep.table import decode_speed_columns as report_columns

    record = decode_speed(
        "kv_heads", tmp_path / "results", tmp_path / "multirun", sentences=2, beam=2, precision="32-true"
    )
    rows = {r["cell"]: r for r in record["cells"]}
    assert len(rows) == 6 and record["weights"].startswith("random")
    assert [r["kv_cache_vs_base"] for r in record["cells"][:4]] == [1.0, 0.5, 0.25, 0.125]
    assert rows["h8-dk32-dv32-ff1024-kv8"]["vs_base"] == 1.0 and all(r["sentences_per_s"] > 0 for r in rows.values())
    assert rows["h8-dk32-dv32-ff1024-kv8"]["kv_cache_bytes"]["self_per_target_token"] == 3 * 2 * 8 * 32 * 4
    saved = json.loads((tmp_path / "results" / "kv_heads" / "decode_speed.json").read_text())
    assert saved["cells"] == record["cells"] and saved["cpu"] == record["cpu"] and "bf16" in saved["cpu"]
    assert (
        report_columns(tmp_path / "results" / "kv_heads")["h8-dk32-dv32-ff1024-kv1"]["KV cache (KiB/token)"] == "0.8"
    )  # 768 B


@needs_data
def test_decode_speed_plans_a_sweep_with_the_budget_its_shipped_runs_trained_with(tmp_path, bf16_cpu):
    """results/kv_heads holds ablation-budget runs: composed at another budget they would be "other
    settings" and the bench would stop before timing anything."""
    from headsweep.bench.decode_speed import cell_models

    cells, _, precision, _ = cell_models("kv_heads", Path("results"), tmp_path / "multirun")
    assert len(cells) == 6 and all(c["config"].trainer.max_steps == 1150 for c in cells)
    assert precision == "bf16-mixed"  # the shipped runs' precision, whatever this CPU would choose
