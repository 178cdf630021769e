"""Configs compose, and a tiny end-to-end run writes results.json, W&B files and a reloadable checkpoint."""

import dataclasses
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from conftest import TINY_RUN, needs_data, tiny_overrides
from headsweep.config import CONF_DIR, compose
from headsweep.data import TranslationDataModule
from headsweep.model import TransformerConfig
from headsweep.training.checks import ConfigError, check_config
from headsweep.training.module import TranslationModule
from headsweep.training.runs import load_module
from headsweep.training.schedules import lr_factor
from headsweep.training.train import train


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


@pytest.mark.parametrize(
    "override",
    [f"{g}={o}" for g in ("data", "model", "module", "trainer", "logger", "callbacks") for o in group_options(g)]
    + [f"experiment={o}" for o in group_options("experiment")]
    + [f"budget={o}" for o in group_options("budget")],
)
def test_every_config_file_composes(override):
    cfg = compose([override, "paths.output_dir=/tmp/x"])
    OmegaConf.resolve(cfg)  # every interpolation resolves
    check_config(cfg)  # and the model it describes can be built
    assert cfg.data._target_ and cfg.module._target_ and cfg.trainer._target_


def test_bad_model_config_fails_before_data():
    cfg = compose(["model.heads=3", "paths.output_dir=/tmp/x"])
    with pytest.raises(ConfigError, match="heads=3 does not divide d_model=256: set d_k and d_v"):
        check_config(cfg)
    with pytest.raises(ConfigError, match="average_from=1.5 is a share of the training budget"):
        check_config(compose(["average_from=1.5", "paths.output_dir=/tmp/x"]))
    with pytest.raises(ConfigError, match="positions must be one of"):
        check_config(compose(["model.positions=rotary", "paths.output_dir=/tmp/x"]))


def test_tiny_run_writes_results(tiny_run):
    out = tiny_run
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "complete"
    for key in ("test/bleu", "test/bleu_greedy", "test/chrf", "val/bleu", "val/ppl", "train/tgt_tokens_per_s"):
        assert key in results["metrics"], key
    params = results["params"]
    assert params["total"] == params["embeddings"] + params["attention"] + params["ffn"] + params["norms"]
    assert params["attention"] == params["attn_enc_self"] + params["attn_dec_self"] + params["attn_cross"]
    scores = results["scores"]["test_2016_flickr.greedy"]
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    hyps = Path(results["hypotheses"]["test_2016_flickr.greedy"]).read_text().splitlines()
    assert len(hyps) == 40  # one line per test sentence (limit_eval), in file order
    assert results["config"]["model"]["heads"] == 2


def test_val_metrics_score_the_final_weights(tiny_run):
    """20 steps of 7- and 8-batch epochs (token budgets: the shuffle decides) end mid-epoch: one more
    validation scores the last weights, so val/* (the sweeps' metric) and test/* describe the same model."""
    import csv

    out, metrics = tiny_run, json.loads((tiny_run / "results.json").read_text())["metrics"]
    rows = [r for r in csv.DictReader(open(out / "csv" / "metrics.csv")) if r.get("val/bleu")]
    assert [int(r["step"]) for r in rows] == [7, 15, 20]  # the ends of epochs 0 and 1, then the final weights
    assert float(rows[-1]["val/ppl"]) == pytest.approx(metrics["val/ppl"])
    assert float(rows[-1]["val/bleu"]) == pytest.approx(metrics["val/bleu"])


def test_tiny_run_logs_bleu_and_params_to_wandb(tiny_run):
    out, metrics = tiny_run, json.loads((tiny_run / "results.json").read_text())["metrics"]
    (log_file,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    # Read the offline run back with W&B's own reader: one JSON record per line.
    text = subprocess.run(
        [Path(sys.executable).parent / "wandb", "leet", "inspect", "--json", str(log_file)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    summary, config = {}, {}
    for line in text.splitlines():
        record = json.loads(line)
        if record.get("type") == "summary":
            summary.update(record["summary"].get("update", {}))
        if record.get("type") == "run":
            config = record["run"].get("config", config)
    assert summary["test/bleu"] == pytest.approx(metrics["test/bleu"])
    assert summary["val/bleu"] == pytest.approx(metrics["val/bleu"])
    results = json.loads((out / "results.json").read_text())
    assert summary["params/total"] == results["params"]["total"]
    assert summary["params/attn_cross"] == results["params"]["attn_cross"]


def test_checkpoint_reloads_into_identical_outputs(tiny_run):
    out = tiny_run
    results = json.loads((out / "results.json").read_text())
    module = load_module(results["checkpoints"]["last"])
    again = load_module(out)  # a run directory resolves to its last.ckpt
    src = torch.randint(4, module.hparams.vocab_size, (3, 7))
    tgt = torch.randint(4, module.hparams.vocab_size, (3, 5))
    with torch.no_grad():
        torch.testing.assert_close(module.net(src, tgt), again.net(src, tgt), rtol=0, atol=0)
    state = torch.load(results["checkpoints"]["last"], weights_only=False)["state_dict"]
    assert all(torch.equal(state[k], v) for k, v in module.state_dict().items())


@pytest.mark.slow
@needs_data
def test_same_seed_same_loss_curve(tmp_path):
    curves = []
    for name in ("a", "b"):
        out = tmp_path / name
        train(
            compose(
                tiny_overrides(
                    out, "logger.wandb.mode=disabled", "trainer.log_every_n_steps=1", "module.test_beam_size=1"
                )
            )
        )
        rows = (out / "csv" / "metrics.csv").read_text().splitlines()
        header = rows[0].split(",")
        col = header.index("train/loss")
        curves.append([r.split(",")[col] for r in rows[1:] if r.split(",")[col]])
    assert len(curves[0]) == 10 and curves[0] == curves[1]


def test_tiny_run_ends_annealed_and_records_threads(tiny_run):
    """The default linear schedule reaches zero at max_steps from the model's width-scaled peak;
    results.json names the threads it used."""
    out = tiny_run
    ckpt = torch.load(out / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 20
    peak = compose(tiny_overrides(out, *TINY_RUN)).module.peak_lr
    assert peak == pytest.approx(2e-3 * (256 / 32) ** 0.5)  # d_model 32: 2e-3 at 256, scaled by d_model^-0.5
    assert ckpt["lr_schedulers"][0]["base_lrs"] == [peak]
    last_lr = ckpt["lr_schedulers"][0]["_last_lr"][0]  # the rate after the last step
    assert last_lr == pytest.approx(0.0, abs=1e-12)
    assert json.loads((out / "results.json").read_text())["threads"] == torch.get_num_threads()


def test_tiny_run_records_the_machine_it_trained_on(tiny_run):
    """results.json names the CPU (as lscpu reads it from /proc/cpuinfo), its bf16 units and torch, so a
    sweep that mixes machines can say so."""
    machine = json.loads((tiny_run / "results.json").read_text())["machine"]
    cpuinfo = Path("/proc/cpuinfo").read_text()
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")]
    flags = set(next(line for line in cpuinfo.splitlines() if line.startswith("flags")).split(":", 1)[1].split())
    assert machine["cpu"] == names[0]
    bf16_units = "AMX" if "amx_tile" in flags else "AVX512-BF16" if "avx512_bf16" in flags else None
    assert (bf16_units or "no bf16 units") in machine["cpu_class"]
    assert machine["gpu"] is None and machine["torch"] == torch.__version__


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["trainer.max_steps=400", "module.warmup_steps=500"],
            "module.warmup_steps=500 is not shorter than trainer.max_steps=400",
        ),
        (["trainer.max_time='00:00:00:30'"], "trainer.max_time=00:00:00:30 is shorter than one validation"),
        (["trainer.max_time=25min"], 'write it as "DD:HH:MM:SS"'),
        (
            ["trainer.max_steps=-1", "trainer.max_time=null"],
            "module.schedule=linear decays to zero at the end of the budget",
        ),
        (["module.schedule=step"], "module.schedule must be one of linear, cosine, wsd, constant, inverse_sqrt"),
    ],
)
def test_budget_that_cannot_fit_fails_before_data(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_config(compose([*overrides, "paths.output_dir=/tmp/x"]))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["module.eval_every=0"], "module.eval_every=0: greedy val BLEU runs at every N-th validation; use N >= 1"),
        (["module.schedule=wsd", "module.decay_fraction=0"], "module.decay_fraction=0 is the share of the budget wsd"),
        (["module.label_smoothing=1.0"], "module.label_smoothing=1.0 must be in [0, 1)"),
        (["module.label_smoothing=-0.1"], "module.label_smoothing=-0.1 must be in [0, 1)"),
        (["data.max_len=300"], "data.max_len=300 is longer than model.max_len=256, the longest sequence the model has"),
    ],
)
def test_bad_module_and_length_settings_fail_before_data(overrides, message):
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        check_config(compose([*overrides, "paths.output_dir=/tmp/x"]))


def test_module_built_in_python_checks_its_settings_too():
    with pytest.raises(ValueError, match="module.eval_every=0"):
        TranslationModule(model={}, vocab_size=10, tokenizer_json="", eval_every=0)


# Code defaults that conf does not share, and why.
CODE_ONLY = {
    "data": {
        "hub_fallback": "None: code alone never reaches for the network; conf/data/multi30k.yaml names "
        "the hub's copy of Multi30k"
    }
}


def test_code_defaults_are_the_configs(monkeypatch):
    """One source for every default: the module, the data module and TransformerConfig, built from Python
    with their own defaults, are the experiment `make train` runs; and every key of their config group is a
    constructor argument."""
    monkeypatch.delenv("HEADSWEEP_DATA", raising=False)
    monkeypatch.delenv("HEADSWEEP_CACHE", raising=False)
    cfg = OmegaConf.to_container(compose(["paths.output_dir=/tmp/x"]), resolve=True)
    fields = {f.name: f.default for f in dataclasses.fields(TransformerConfig)}
    groups = {"module": (TranslationModule.__init__, {"model"}), "data": (TranslationDataModule.__init__, set())}
    for group, (init, passed) in groups.items():
        params = inspect.signature(init).parameters
        assert set(cfg[group]) - {"_target_"} <= set(params), group
        for key, value in cfg[group].items():
            if key in params and key not in passed and key not in CODE_ONLY.get(group, {}):
                default = params[key].default
                assert default == (tuple(value) if isinstance(value, list) else value), f"{group}.{key}"
    assert set(cfg["model"]) <= set(fields)
    assert {k: fields[k] for k in cfg["model"]} == cfg["model"]


def test_inverse_sqrt_needs_no_budget():
    """The paper's shape never anneals, so it needs no end: accepted without a step or time limit, and its
    rate is still above zero a million steps on."""
    cfg = compose(
        ["trainer.max_steps=-1", "trainer.max_time=null", "module.schedule=inverse_sqrt", "paths.output_dir=/tmp/x"]
    )
    assert check_config(cfg) is None
    assert lr_factor("inverse_sqrt", 10**6, 300, progress=1.0, warmup_progress=0.0) == pytest.approx(300**0.5 / 1e3)
