"""`make sweep`: the specs, grid x seeds expansion, bad input, resume, and one failure not stopping the rest."""

import gzip
import itertools
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from conftest import needs_data, seen, stored_run, tiny_overrides, write_results
from headsweep.config import SWEEPS_DIR, attention_scaled_lr, auto_precision, compose
from headsweep.store import as_seen, read_record
from headsweep.sweeps import launch as L
from headsweep.sweeps import lr_select as LS
from headsweep.sweeps import planning as P
from headsweep.sweeps import specs as SP
from headsweep.sweeps import sweep as S
from headsweep.sweeps import table3 as T3
from headsweep.sweeps.jobs import Job, Sweep
from headsweep.sweeps.specs import format_value
from headsweep.training.runs import is_complete

SPECS = sorted(p for p in SWEEPS_DIR.glob("*.yaml") if not p.stem.startswith("_"))  # the spec files
NAMES = SP.available()  # every sweep: each spec and each of its variants (<spec>_<variant>)
# The top-level keys of a W&B sweep spec (docs.wandb.ai, "Sweep configuration options").
WANDB_KEYS = {
    "program",
    "entity",
    "project",
    "description",
    "name",
    "method",
    "metric",
    "parameters",
    "early_terminate",
    "command",
    "run_cap",
}
# Every sweep's jobs as `make sweep SWEEP=<name> DRY=1` planned them from one file per sweep, before the specs had
# a base and variants (seed 1's names and overrides, the overrides common to every job, the seeds).
FROZEN = json.loads((Path(__file__).parent / "fixtures" / "planned_jobs.json").read_text())


SHIPPED = SWEEPS_DIR.parent / "results"
PINNED = ("model.init_wo_gain=", "model.init_ff2_gain=")  # the residual outputs' start its shipped runs had
# Studies written after the jobs were frozen (fan_in protocol, no runs planned from a file of their own before)
# (init_scale: the residual outputs' starting scale, heads_fixed_dk_mup_init: full muP; long_sequences: row A at 1 and 2
# sentence pairs per example, the base alone at 4 and 8)
AFTER_FREEZE = {
    "heads_wo_mirror",
    "heads_identical",
    "init_scale",
    "init_scale_wo0",
    "init_scale_edge",
    "init_scale_prenorm",
    "heads_fixed_dk_mup_init",
    "long_sequences",
    "long_sequences_rates",
    "long_sequences_rates_join2",
    "long_sequences_base_lengths",
}
TABLE3_ROWS = {s for row in T3.ROWS.values() for s in row}  # run by `make table3`, each cell at its own rate
MUP = {"heads_fixed_dk_mup", "heads_wo_mirror_mup"}  # issue 54's per-matrix rates as variants, none shipped yet
# Row D as the paper runs it (one setting at a time): two variants of table3_d's 3 x 3 grid sharing its base
PAPER_ROW_D = ("table3_d_dropout", "table3_d_smoothing")


def shipped_sweep(results: Path, name: str) -> None:
    """The shipped results/<name> under `results`, with the store entries its views link to (once migrated),
    and no other sweep's."""
    (results / name).symlink_to(SHIPPED / name)
    for view in (SHIPPED / name).iterdir():
        if view.is_symlink() and not (stored := results / "runs" / Path(os.readlink(view)).name).exists():
            stored.parent.mkdir(exist_ok=True)
            stored.symlink_to(view.resolve())


def test_every_ablation_has_a_small_and_a_paper_spec():
    studies = {
        "heads_specialise",
        "heads_fixed_dk",
        "heads_fixed_dk_fp32",
        "heads_fixed_dk_fp32_lr",
        "heads_by_width",
        "heads_budget_2x",
        "heads_budget_2x_fp32",
        "heads_budget_1x",
        "heads_by_width_512_fp32",
        "kv_heads",
        "fixed_heads",
        "kv_heads_init",
    }
    # issue 42's re-runs (table3_a_fan_in: row A for `make table3`), and row D one setting at a time (issue 50)
    fan_in = {"heads_fixed_dk_fan_in", "table3_b_fan_in", "fixed_heads_fan_in", "table3_a_fan_in"}
    row_d = set(PAPER_ROW_D)
    tables = {f"table3_{r}{s}" for r in "abcde" for s in ("", "_paper")}
    assert set(NAMES) == tables | studies | fan_in | row_d | AFTER_FREEZE | MUP
    assert set(NAMES) - fan_in - row_d - AFTER_FREEZE - MUP == set(FROZEN)
    # one file per study: the fp32, budget, learning-rate, init and paper-size sweeps are variants of these
    assert [p.stem for p in SPECS] == [
        "fixed_heads",
        "heads_budget",
        "heads_by_width",
        "heads_fixed_dk",
        "heads_identical",
        "heads_specialise",
        "heads_wo_mirror",
        "init_scale",
        "kv_heads",
        "long_sequences",
        *(f"table3_{r}" for r in "abcde"),
    ]


# What twins differ in: precision, budget, learning rate, init, and device or model size (group choices).
PROTOCOL = {
    "trainer.precision",
    "trainer.max_steps",
    "trainer.max_time",
    "module.peak_lr",
    "module.decay_by",
    "module.lr_scaling",
    "model.init",
    "model.init_kv_gain",
    "trainer",
    "model",
}


def same_grid(a: dict, b: dict) -> bool:
    """Twins: the same axes, each of one's values among the other's (the same cells or some of them), and the
    same constants but for the protocol (PROTOCOL)."""
    axes = [{k: p["values"] for k, p in s["parameters"].items() if "values" in p and k != "seed"} for s in (a, b)]
    constants = [
        {k: p["value"] for k, p in s["parameters"].items() if "value" in p and k not in PROTOCOL} for s in (a, b)
    ]
    if set(axes[0]) != set(axes[1]) or constants[0] != constants[1]:
        return False
    small, large = sorted(axes, key=lambda x: sum(map(len, x.values())))
    return all(v in large[k] for k, vs in small.items() for v in vs)


def twins(specs_dir: Path) -> list[tuple[str, str]]:
    """Pairs of sweeps from different spec files that are twins: one should be the other's variant."""
    names = SP.sweep_names(specs_dir)
    specs = {n: SP.load_spec(n, specs_dir)[0] for n in names}
    return [
        (a, b)
        for a, b in itertools.combinations(sorted(names), 2)
        if names[a][0] != names[b][0] and same_grid(specs[a], specs[b])
    ]


def test_no_spec_is_another_specs_twin(tmp_path):
    assert twins(SWEEPS_DIR) == []
    # what a twin looked like: table3_e's grid again in fp32, in a file of its own
    for name in ("_base", "table3_e", "table3_d"):
        (tmp_path / f"{name}.yaml").write_text((SWEEPS_DIR / f"{name}.yaml").read_text())
    spec = yaml.safe_load((SWEEPS_DIR / "table3_e.yaml").read_text())
    spec["name"] = "table3_e_fp32"
    spec["parameters"]["trainer.precision"] = {"value": "32-true"}
    del spec["variants"]
    (tmp_path / "table3_e_fp32.yaml").write_text(yaml.safe_dump(spec))
    assert twins(tmp_path) == [("table3_e", "table3_e_fp32"), ("table3_e_fp32", "table3_e_paper")]


def test_heads_fixed_dk_fp32_runs_fp32_on_any_cpu_and_takes_its_base_from_table3_a(tmp_path):
    # the shipped table3_a (alone: results/ may hold this sweep's copies already): its fp32 h = 8 runs are this
    # sweep's base, so only h = 16 / 32 train
    results = tmp_path / "results"
    results.mkdir()
    shipped_sweep(results, "table3_a")
    sweep = P.plan("heads_fixed_dk_fp32", seeds=3, budget="ablation", root=tmp_path, results=results)
    assert "trainer.precision=32-true" in sweep.common
    base = [j for j in sweep.jobs if j.base]
    assert [j.same_as.resolve() for j in base] == [
        (SHIPPED / "table3_a" / f"h8-dk32-dv32-s{s}").resolve() for s in (1, 2, 3)
    ]
    assert {j.cell for j in sweep.jobs if not j.base} == {"h16-dk32-dv32", "h32-dk32-dv32"}
    # with its own finished (fp32) jobs beside it, the spec's precision is not set a second time
    shipped_sweep(results, "heads_fixed_dk_fp32")
    resumed = P.plan("heads_fixed_dk_fp32", seeds=3, budget="ablation", root=tmp_path, results=results)
    assert resumed.common.count("trainer.precision=32-true") == 1 and any(j.done for j in resumed.jobs)


def test_heads_by_width_512_fp32_is_row_a_at_d_model_512_in_fp32_at_the_width_scaled_peak(tmp_path):
    sweep = P.plan("heads_by_width_512_fp32", seeds=1, budget="ablation", root=tmp_path, results=tmp_path / "results")
    assert "trainer.precision=32-true" in sweep.common
    assert [j.cell for j in sweep.jobs] == ["h8-dk64-dv64", "h1-dk512-dv512", "h32-dk16-dv16"]
    for job in sweep.jobs:
        cfg = compose([*sweep.common, *job.overrides])
        assert (cfg.model.d_model, cfg.model.d_ff) == (512, 2048)
        assert cfg.module.peak_lr == pytest.approx(2e-3 * (256 / 512) ** 0.5)  # the paper's d_model^-0.5 scaling
        # the ablation budget's steps, with a time cap (a safety net) that a ~2.5 h fp32 job does not reach
        assert cfg.trainer.max_steps == 1150 and cfg.trainer.max_time == "00:05:00:00"


def test_heads_fixed_dk_fp32_lr_cuts_the_peak_by_the_attention_width_and_copies_its_base(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    shipped_sweep(results, "table3_a")
    sweep = P.plan("heads_fixed_dk_fp32_lr", seeds=1, budget="ablation", root=tmp_path, results=results)
    lr = {j.cell: float(dict(o.split("=", 1) for o in j.overrides)["module.peak_lr"]) for j in sweep.jobs}
    assert lr == pytest.approx({"h8-dk32-dv32": 2e-3, "h16-dk32-dv32": 1e-3, "h32-dk32-dv32": 5e-4})  # 2e-3·256/(h·32)
    assert sweep.jobs[0].same_as.resolve() == (SHIPPED / "table3_a" / "h8-dk32-dv32-s1").resolve()
    assert sweep.jobs[2].same_as is None
    cfg = compose([*sweep.common, *sweep.jobs[2].overrides])
    assert cfg.module.peak_lr == pytest.approx(5e-4) and cfg.model.heads == 32
    with pytest.raises(ValueError, match="needs model.d_v set"):
        attention_scaled_lr(2e-3, 256, 8, None)


def test_heads_specialise_analyses_every_job(tmp_path):
    sweep = P.plan("heads_specialise", seeds=2, root=tmp_path)
    assert [j.cell for j in sweep.jobs[:3]] == [
        "h8-dk32-dv32-head_dropout0",
        "h8-dk32-dv32-head_dropout0.1",
        "h8-dk32-dv32-head_dropout0.2",
    ] and len(sweep.jobs) == 6
    cfg = compose([*sweep.common, *sweep.jobs[2].overrides])
    assert cfg.model.head_dropout == 0.2 and cfg.analysis.step == 0.2 and cfg.analysis.split == "val"


@pytest.mark.parametrize("name", NAMES)
def test_spec_is_a_wandb_grid_sweep(name, tmp_path):
    """The full spec `make wandb-spec` writes for every sweep, read back as `wandb sweep` reads it."""
    from wandb.sdk.launch.sweeps.utils import load_sweep_config

    out = tmp_path / f"{name}.yaml"
    assert SP.main(["wandb", name, "--out", str(out)]) == 0
    spec = load_sweep_config(str(out))
    assert spec == SP.wandb_spec(name)
    assert set(spec) <= WANDB_KEYS, set(spec) - WANDB_KEYS
    assert spec["name"] == name and spec["method"] == "grid" and spec["project"] == "headsweep"
    assert spec["metric"] == {"name": "val/bleu", "goal": "maximize"}
    assert spec["command"] == ["${env}", "${interpreter}", "-m", "headsweep.train", "${args_no_hyphens}"]
    for key, p in spec["parameters"].items():
        values = [p["value"]] if "value" in p else p["values"]
        assert None not in values, key  # W&B would pass the string None


def test_spec_metric_is_logged_by_the_trainer(tiny_run):
    """What a W&B agent maximises is a metric a run reports, in its results.json and in its CSV log."""
    results = json.loads((tiny_run / "results.json").read_text())
    logged = (tiny_run / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    for name in NAMES:
        metric = SP.wandb_spec(name)["metric"]["name"]
        assert isinstance(results["metrics"].get(metric), float) and metric in logged, (name, metric)


@pytest.mark.parametrize("name", NAMES)
def test_every_grid_point_composes_into_the_jobs_it_planned_before_variants(name, tmp_path, bf16_cpu, monkeypatch):
    """Every sweep, spec and variant alike, composes each cell (its model built on the meta device) and plans
    the jobs, names and overrides it planned as a file of its own (FROZEN): its finished runs stay its jobs."""
    monkeypatch.setattr("headsweep.config.cpu_has_bf16", lambda: True)  # ${auto_precision:} as when frozen
    # a _fan_in variant's shipped runs ran at per-cell rates (LR_GRID, test_shipped_...): plan it from no results
    # so did the sweeps written after the freeze (heads_wo_mirror's h 32 seeds at 1e-3, the _mup variants)
    # and Table 3's rows as `make table3` runs them (a rate per cell): row E's shipped runs, the others' to come
    fresh = name.endswith("_fan_in") or name in AFTER_FREEZE | MUP | TABLE3_ROWS
    results = tmp_path / "results" if fresh else SWEEPS_DIR.parent / "results"
    sweep = P.plan(name, seeds=1, budget="ablation", root=tmp_path, results=results, jobs=1, cores=2)
    # the starting scale every shipped sweep pins (gain 1) came after the plans were frozen: compared without it
    sweep.common = [c for c in sweep.common if not c.startswith(PINNED)]
    spec, _ = SP.load_spec(name)
    n_cells = 1
    for key, p in spec["parameters"].items():
        n_cells *= len(p.get("values", [None])) if key != "seed" else 1  # seeds make jobs, not cells
    assert len(sweep.jobs) == n_cells and len({j.name for j in sweep.jobs}) == n_cells
    assert [j.base for j in sweep.jobs] == [True] + [False] * (n_cells - 1)
    assert not tmp_path.joinpath(name).exists()  # planning writes nothing
    if name in AFTER_FREEZE:  # nothing frozen to agree with: composing every cell (above) is the check
        return
    if name.endswith("_fan_in"):  # issue 42's protocol as a variant: its spec's jobs, only the protocol differs
        # the spec's shipped runs fix its precision for every job; the variant has none yet, so each job names it
        frozen, protocol = (
            FROZEN[name.removesuffix("_fan_in")],
            ("model.init=", "module.decay_by=", "trainer.precision="),
        )
        same = lambda overrides: " ".join(o for o in overrides.split(" ") if not o.startswith(protocol))  # noqa: E731
        assert [same(f"{j.name} {' '.join(j.overrides)}") for j in sweep.jobs] == [
            same(j) for j in frozen["seed_1_jobs"]
        ]
        derived = (*protocol, "sweep=", "trainer.accelerator=")  # its name; the device its spec's runs fixed
        assert [c for c in sorted(sweep.common) if not c.startswith(derived)] == [
            c for c in frozen["common"] if not c.startswith(derived)
        ]
        assert "model.init=fan_in" in sweep.common and "model.init=xavier" in frozen["common"]
        return
    if name in PAPER_ROW_D:  # some of table3_d's cells, named by the one setting each varies
        grid = {" ".join(j.split(" ")[1:]) for j in FROZEN["table3_d"]["seed_1_jobs"]}
        assert {" ".join(j.overrides) for j in sweep.jobs} <= grid and sweep.jobs[0].name == (
            "h8-dk32-dv32-drop0.1" if name.endswith("dropout") else "h8-dk32-dv32-ls0.1"
        ) + "-s1"
        assert sorted(sweep.common) == sorted(c.replace("table3_d", name) for c in FROZEN["table3_d"]["common"])
        return
    if name.endswith("_mup"):  # issue 54's per-matrix rates as a variant: its spec's (fan_in) jobs, plus the base
        spec_name = name.removesuffix("_mup") + ("_fan_in" if f"{name.removesuffix('_mup')}_fan_in" in NAMES else "")
        plain = P.plan(spec_name, seeds=1, budget="ablation", root=tmp_path, results=tmp_path / "r", jobs=1, cores=2)
        added = ("module.lr_base=", "trainer.precision=")
        same = lambda job: [o for o in job.overrides if not o.startswith(added)]  # noqa: E731
        assert [(j.name, same(j)) for j in sweep.jobs] == [(j.name, same(j)) for j in plain.jobs]
        base = sweep.jobs[0].overrides  # every job scales from the base cell's fan-ins, h 8 d_v 32 d_ff 1024
        assert all("module.lr_base={w_o:256,ff_w2:1024}" in j.overrides for j in sweep.jobs), base
        assert "module.lr_scaling=mup" in sweep.common and "module.lr_scaling=mup" not in plain.common
        return
    if name not in FROZEN:  # a sweep written after the plans were frozen (heads_wo_mirror): checked above
        return
    frozen = FROZEN[name]
    assert [f"{j.name} {' '.join(j.overrides)}" for j in sweep.jobs] == frozen["seed_1_jobs"]
    assert sorted(sweep.common) == frozen["common"] and SP.spec_seeds(spec) == frozen["seeds"]


@pytest.mark.parametrize("name", ["table3_c", "table3_a_paper", "groups"])
def test_job_file_composes_the_same_config_as_its_overrides(name, tmp_path):
    """What a job trains (its job file, merged by Hydra) is what was validated (its command-line form)."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "groups.yaml").write_text(
        yaml.safe_dump(
            {
                "method": "grid",
                "parameters": {  # config group choices
                    "model": {"values": ["tiny", "small"]},
                    "budget": {"values": ["short"]},
                    "model.heads": {"values": [2]},
                },
            }
        )
    )
    sweep = P.plan(name, seeds=1, root=tmp_path, specs_dir=specs if name == "groups" else SWEEPS_DIR)
    L.write_jobs(sweep, sweep.jobs)
    search = f"hydra.searchpath=[file://{(sweep.dir / '.jobs').resolve()}]"
    for job in sweep.jobs[:3]:
        via_file = compose([*sweep.common, search, f"+{L.JOB_GROUP}={job.name}"])
        via_cli = compose([*sweep.common, *job.overrides, f"run_name={job.name}", f"tags=[{','.join(job.tags)}]"])
        assert via_file == via_cli, job.name
        assert via_file.run_name == job.name and via_file.sweep == name


def test_grid_times_seeds(tmp_path):
    sweep = P.plan("table3_a", seeds=3, root=tmp_path, budget="short")
    assert "budget=short" in sweep.common and "sweep=table3_a" in sweep.common
    cells = ["h8-dk32-dv32", "h1-dk256-dv256", "h2-dk128-dv128", "h4-dk64-dv64", "h16-dk16-dv16", "h32-dk8-dv8"]
    # seed-major: every cell once before any second seed
    assert [j.name for j in sweep.jobs] == [f"{c}-s{s}" for s in (1, 2, 3) for c in cells]
    job = sweep.jobs[7]
    precision = f"trainer.precision={auto_precision()}"  # machine-dependent: written into each job as a value
    assert (job.cell, job.seed, job.overrides) == (
        "h1-dk256-dv256",
        2,
        ["model.heads=1", precision, "module.peak_lr=0.002", "seed=2"],
    )
    assert job.dir == tmp_path / "table3_a" / "h1-dk256-dv256-s2"
    assert job.tags == ["row-A", "cell-h1-dk256-dv256"]
    assert sweep.jobs[6].tags == ["row-A", "cell-h8-dk32-dv32", "base"]

    b = P.plan("table3_b", seeds=1, root=tmp_path)
    assert [j.name for j in b.jobs] == ["h8-dk32-dv32-s1", "h8-dk16-dv32-s1", "h8-dk8-dv32-s1"]
    assert "model.d_v=32" in b.common  # a `value:` parameter is common to every job
    d = P.plan("table3_d", seeds=2, root=tmp_path)
    assert len(d.jobs) == 18 and d.jobs[0].name == "h8-dk32-dv32-drop0.1-ls0.1-s1"
    c = P.plan("table3_c", seeds=1, root=tmp_path)
    assert [j.cell for j in c.jobs][:2] == ["h8-dk32-dv32-N3-dm256-ff1024", "h8-dk32-dv32-N1-dm256-ff1024"]


def test_paper_scale_is_one_option_away(capsys, tmp_path):
    assert S.main(["--sweep", "table3_a", "--scale", "paper", "--dry", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "sweep table3_a_paper (" in out and "table3_a.yaml)" in out and "model=paper_base trainer=gpu" in out
    assert "h1-dk512-dv512-s1" in out and "h2-" not in out  # the paper's row A: d_k = 512 / h


def test_launcher_settings_are_checked_against_the_chosen_launcher(tmp_path, capsys, no_launch):
    args = [
        "--sweep",
        "table3_e",
        "--root",
        str(tmp_path),
        "--results",
        str(tmp_path / "results"),
        "--dry",
        "--jobs",
        "1",
        "hydra.launcher.n_jobs=2",
    ]
    assert S.main([*args, "--launcher", "joblib"]) == 0
    assert "hydra/launcher=joblib" in capsys.readouterr().out
    assert S.main(args) == 2  # the basic launcher has no n_jobs
    assert "Could not override 'hydra.launcher.n_jobs'" in capsys.readouterr().err
    assert S.main([*args, "--launcher", "slurm"]) == 2
    assert "unknown launcher 'slurm'; one of basic, joblib, submitit" in capsys.readouterr().err


def test_unknown_sweep_lists_the_available_ones(capsys):
    assert S.main(["--sweep", "table3_z", "--dry"]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "unknown sweep 'table3_z'; available: fixed_heads, fixed_heads_fan_in, heads_budget_1x, heads_budget_2x, "
        "heads_budget_2x_fp32, heads_by_width, heads_by_width_512_fp32, heads_fixed_dk, heads_fixed_dk_fan_in, "
        "heads_fixed_dk_fp32, heads_fixed_dk_fp32_lr, heads_fixed_dk_mup, heads_fixed_dk_mup_init, heads_identical, "
        "heads_specialise, heads_wo_mirror, heads_wo_mirror_mup, init_scale, init_scale_edge, init_scale_prenorm, "
        "init_scale_wo0, kv_heads,"
        in err
    )


def write_spec(tmp_path, parameters: dict) -> Path:
    specs = tmp_path / "specs"
    specs.mkdir(exist_ok=True)
    (specs / "bad.yaml").write_text(yaml.safe_dump({"method": "grid", "parameters": parameters}))
    return specs


@pytest.fixture
def no_launch(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("a job was launched")

    monkeypatch.setattr(L.subprocess, "run", fail)


@pytest.mark.parametrize(
    "parameters, message",
    [
        (
            {"model.heads": {"values": [8]}, "model.head": {"values": [1, 2]}},
            "parameter 'model.head' is not a config key or value here: Could not override 'model.head'.",
        ),
        ({"model.heads": {"values": [8, 3]}}, "cell model.heads=3: model config: heads=3 does not divide d_model=256"),
        ({"run_name": {"values": ["a", "b"]}}, "parameter 'run_name' is set by the sweep itself"),
        ({"seed": {"values": [1.5]}}, "parameter 'seed' must list integers"),
        ({"model.d_k": {"values": [None]}}, "has a null value"),
    ],
)
def test_bad_spec_stops_before_any_job_with_one_line(tmp_path, capsys, no_launch, parameters, message):
    specs = write_spec(tmp_path, parameters)
    assert S.main(["--sweep", "bad", "--specs", str(specs), "--root", str(tmp_path / "mr")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "mr").exists()


def write_variant_spec(tmp_path, variants: dict, **spec) -> Path:
    """A spec `v` (row E with a constant) with `variants`, over a base that sets the seeds."""
    specs = tmp_path / "specs"
    specs.mkdir(exist_ok=True)
    (specs / "_base.yaml").write_text(yaml.safe_dump({"method": "grid", "parameters": {"seed": {"values": [1, 2]}}}))
    (specs / "v.yaml").write_text(
        yaml.safe_dump(
            {
                "parameters": {
                    "model": {"values": ["{positions:sinusoidal,dropout:0.1}", "{positions:learned,dropout:0.1}"]},
                    "model.heads": {"value": 8},
                },
                "variants": variants,
                **spec,
            }
        )
    )
    return specs


@pytest.mark.parametrize(
    "variants, sweep, message",
    [
        (
            {"fp32": {"set": {"trainer.precision": "32-true"}}},
            "v_fp16",
            "unknown sweep 'v_fp16': sweeps/v.yaml has no variant 'fp16' (its variants: fp32;",
        ),
        ({"h4": {"set": {"model": "{positions:learned}"}}}, "v_h4", "set: model: v sweeps over model"),
        (
            {"drop": {"set": {"model.dropout": 0.2}}},
            "v_drop",
            "set: model.dropout: v sweeps over model",
        ),  # in its dicts
        (
            {"one": {"only": {"model": ["{positions:rope,dropout:0.1}"]}}},
            "v_one",
            "only: model lists ['{positions:rope,dropout:0.1}'], not among v's values",
        ),
        (
            {"one": {"only": {"model.heads": [8]}}},
            "v_one",
            "only: model.heads is not an axis of v (its axes: model, seed)",
        ),
        ({"x": {"unset": ["model.d_k"]}}, "v_x", "unset: model.d_k is not one of v's constants (model.heads)"),
        ({"x": {"trainer.precision": "32-true"}}, "v_x", "'trainer.precision' is not a variant key"),
        ({"x": {"set": {"run_name": "a"}}}, "v_x", "parameter 'run_name' is set by the sweep itself"),
    ],
)
def test_a_bad_variant_stops_before_any_job_with_one_line(tmp_path, capsys, no_launch, variants, sweep, message):
    specs = write_variant_spec(tmp_path, variants)
    assert S.main(["--sweep", sweep, "--specs", str(specs), "--root", str(tmp_path / "mr"), "--dry"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "mr").exists()


def test_a_spec_run_only_as_its_variants_and_two_sweeps_of_one_name_stop_with_one_line(tmp_path, capsys, no_launch):
    specs = write_variant_spec(tmp_path, {"1x": {}, "2x": {"set": {"trainer.max_steps": 20}}}, variants_only=True)
    assert SP.available(specs) == ["v_1x", "v_2x"]
    assert S.main(["--sweep", "v", "--specs", str(specs), "--root", str(tmp_path / "mr"), "--dry"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "v.yaml has variants_only: true: run one of its variants: v_1x, v_2x" in err
    (specs / "v_2x.yaml").write_text("parameters:\n  model.heads:\n    values: [8, 4]\n")
    assert S.main(["--sweep", "v_1x", "--specs", str(specs), "--root", str(tmp_path / "mr"), "--dry"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "two sweeps are named v_2x: sweeps/v.yaml variant 2x and sweeps/v_2x.yaml" in err


def test_a_variant_is_its_spec_over_the_base_with_its_overrides(tmp_path):
    """The base under the spec (the spec's own keys win), then the variant: set adds or changes a constant,
    only keeps some of an axis' values in the spec's order (its first value the base), grid gives an axis its
    own values, unset drops a constant."""
    specs = write_variant_spec(
        tmp_path,
        {
            "fp32": {
                "description": "in fp32",
                "set": {"trainer.precision": "32-true", "model.heads": 4},
                "only": {"model": ["{positions:learned,dropout:0.1}"]},
            },
            "paper": {"grid": {"model": ["{positions:learned,dropout:0.3}"]}, "unset": ["model.heads"]},
        },
        description="row E",
        metric={"name": "val/loss", "goal": "minimize"},
    )
    (specs / "_base.yaml").write_text(
        yaml.safe_dump(
            {
                "project": "p",
                "method": "grid",
                "metric": {"name": "val/bleu"},
                "parameters": {"seed": {"values": [1, 2]}, "model.d_k": {"value": 8}},
            }
        )
    )
    own, _ = SP.load_spec("v", specs)
    assert own == {
        "project": "p",
        "method": "grid",
        "metric": {"name": "val/loss", "goal": "minimize"},
        "name": "v",
        "description": "row E",
        "parameters": {
            "model": {"values": ["{positions:sinusoidal,dropout:0.1}", "{positions:learned,dropout:0.1}"]},
            "model.heads": {"value": 8},
            "model.d_k": {"value": 8},
            "seed": {"values": [1, 2]},
        },
    }
    fp32 = SP.wandb_spec("v_fp32", specs)
    assert (fp32["name"], fp32["description"], fp32["metric"]["name"]) == ("v_fp32", "in fp32", "val/loss")
    assert fp32["parameters"] == {
        "model": {"values": ["{positions:learned,dropout:0.1}"]},
        "model.heads": {"value": 4},
        "model.d_k": {"value": 8},
        "trainer.precision": {"value": "32-true"},
        "seed": {"values": [1, 2]},
    }
    paper = SP.load_spec("v_paper", specs)[0]["parameters"]
    assert paper == {
        "model": {"values": ["{positions:learned,dropout:0.3}"]},
        "model.d_k": {"value": 8},
        "seed": {"values": [1, 2]},
    }
    sweep = P.plan("v_fp32", seeds=None, root=tmp_path / "mr", specs_dir=specs)
    assert [j.name for j in sweep.jobs] == ["h4-dk8-dv64-s1", "h4-dk8-dv64-s2"] and "sweep=v_fp32" in sweep.common


def test_wandb_spec_of_a_variant_is_the_file_it_replaced(tmp_path):
    """sweeps/heads_fixed_dk_fp32.yaml as it was written by hand (W&B's keys), the independent reference for
    what `make wandb-spec SWEEP=heads_fixed_dk_fp32` writes now."""
    command = ["${env}", "${interpreter}", "-m", "headsweep.train", "${args_no_hyphens}"]
    was = {
        "name": "heads_fixed_dk_fp32",
        "description": "h = 8, 16, 32 at a fixed head width d_k = d_v = 32 (d_model 256) in fp32, beside rows A and B",
        "project": "headsweep",
        "program": "src/headsweep/train.py",
        "method": "grid",
        "metric": {"name": "val/bleu", "goal": "maximize"},
        "command": command,
        "parameters": {
            "model.heads": {"values": [8, 16, 32]},
            "model.d_k": {"value": 32},
            "model.d_v": {"value": 32},
            "trainer.precision": {"value": "32-true"},
            "model.init": {"value": "xavier"},
            "module.decay_by": {"value": "steps_or_time"},
            # pinned since (issue 67) so its shipped runs stay its jobs whatever conf/model's start
            "model.init_wo_gain": {"value": 1.0},
            "model.init_ff2_gain": {"value": 1.0},
            "seed": {"values": [1, 2, 3]},
        },
    }
    out = tmp_path / "spec.yaml"
    assert SP.main(["wandb", "heads_fixed_dk_fp32", "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text()) == was
    assert out.read_text().startswith(
        "# Written by `make wandb-spec SWEEP=heads_fixed_dk_fp32` from "
        "sweeps/heads_fixed_dk.yaml variant fp32 over sweeps/_base.yaml"
    )


def test_bad_override_stops_before_any_job(tmp_path, capsys, no_launch, bf16_cpu):
    assert S.main(["--sweep", "table3_e", "--root", str(tmp_path), "model.positons=learned"]) == 2
    assert "Could not override 'model.positons'" in capsys.readouterr().err
    assert S.main(["--sweep", "table3_e", "--root", str(tmp_path), "seed=3"]) == 2
    assert "seed is set per job by the sweep" in capsys.readouterr().err


def fake_results(run_dir: Path, status: str = "complete") -> None:
    write_results(run_dir, {"status": status, "error": "boom"})


def test_dry_lists_jobs_done_and_to_run_and_runs_nothing(tmp_path, capsys, no_launch):
    fake_results(tmp_path / "table3_a" / "h1-dk256-dv256-s1")
    assert (
        S.main(
            [
                "--sweep",
                "table3_a",
                "--dry",
                "--seeds",
                "1",
                "--root",
                str(tmp_path),
                "--results",
                str(tmp_path / "results"),
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    jobs = [line.split() for line in lines if line.startswith("  ")]
    assert len(jobs) == 6
    assert jobs[1][:2] == ["done", "h1-dk256-dv256-s1"] and jobs[1][2] == "model.heads=1" and jobs[1][-1] == "seed=1"
    assert all(j[:2] == ["to", "run"] for k, j in enumerate(jobs) if k != 1)
    assert lines[-1].startswith("would run: ") and "+sweep_job=h8-dk32-dv32-s1,h2-dk128-dv128-s1," in lines[-1]
    assert sorted(p.name for p in (tmp_path / "table3_a").iterdir()) == ["h1-dk256-dv256-s1"]


def test_resume_skips_finished_jobs_and_reruns_unfinished_ones(tmp_path, monkeypatch, capsys):
    sweep = P.plan("table3_e", seeds=2, root=tmp_path)
    finished, killed, failed = sweep.jobs[0], sweep.jobs[1], sweep.jobs[2]
    fake_results(finished.dir)
    killed.dir.mkdir(parents=True)
    (killed.dir / "train.log").write_text("killed mid-training\n")
    (killed.dir / "checkpoints").mkdir()
    fake_results(failed.dir, status="failed")
    launched = []

    def fake_multirun(cmd, **kwargs):  # a launcher whose jobs all finish
        names = next(a for a in cmd if a.startswith(f"+{L.JOB_GROUP}=")).split("=", 1)[1].split(",")
        launched.extend(names)
        for name in names:
            assert (sweep.dir / ".jobs" / L.JOB_GROUP / f"{name}.yaml").is_file()
            assert not (sweep.dir / name).exists()  # unfinished output was set aside before the rerun
            fake_results(sweep.dir / name)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(L.subprocess, "run", fake_multirun)
    assert L.run(sweep) == 0
    assert launched == [j.name for j in sweep.jobs[1:]]
    assert all(is_complete(j.dir) for j in sweep.jobs)
    kept = sorted(p.name.rsplit(".", 1)[0] for p in (sweep.dir / ".incomplete").iterdir())
    assert kept == [killed.name, failed.name]
    assert "3 done, 1 skipped (already complete), 0 failed" in capsys.readouterr().out

    launched.clear()
    assert L.run(sweep) == 0 and launched == []  # the same command again: nothing left to run
    assert "nothing to run" in capsys.readouterr().out


def test_only_runs_the_matching_jobs_and_the_full_command_the_rest(tmp_path, monkeypatch, capsys):
    full = P.plan("table3_e", seeds=2, root=tmp_path)
    sweep = P.plan("table3_e", seeds=2, root=tmp_path, only=["*-s2"])
    assert [j.name for j in sweep.jobs] == [j.name for j in full.jobs]  # same names and dirs as the full sweep
    second = [j.name for j in full.jobs if j.seed == 2]
    assert L.run(sweep, dry=True) == 0
    listed = [line.split()[:2] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert [name for state, name in listed if state == "later"] == [j.name for j in full.jobs if j.seed == 1]
    launched = []

    def fake_multirun(cmd, **kwargs):
        names = next(a for a in cmd if a.startswith(f"+{L.JOB_GROUP}=")).split("=", 1)[1].split(",")
        launched.append(names)
        for name in names:
            fake_results(sweep.dir / name)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(L.subprocess, "run", fake_multirun)
    assert L.run(sweep) == 0 and launched == [second]
    assert f"({len(second)} more left out by --only)" in capsys.readouterr().out
    assert L.run(sweep) == 0 and len(launched) == 1  # every selected job is complete: nothing runs
    assert L.run(P.plan("table3_e", seeds=2, root=tmp_path)) == 0
    assert launched[1] == [j.name for j in full.jobs if j.seed == 1]  # the full command runs only the rest


def test_only_matching_no_job_stops_with_one_line(tmp_path, capsys, no_launch):
    results = str(tmp_path / "results")  # not the shipped row E (run at the ablation budget)
    args = ["--sweep", "table3_e", "--seeds", "1", "--root", str(tmp_path), "--results", results, "--only", "*-s1,h3-*"]
    assert S.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --only 'h3-*' matches none of table3_e's jobs") and "\n" not in err


def test_summary_names_each_failure_and_its_log(tmp_path, monkeypatch, capsys):
    sweep = P.plan("table3_e", seeds=2, root=tmp_path)

    def fake_multirun(cmd, **kwargs):
        fake_results(sweep.jobs[0].dir)
        sweep.jobs[1].dir.mkdir()
        (sweep.jobs[1].dir / "results.json").write_text(
            json.dumps({"status": "failed", "error": "DataError: bad file", "log": "/x/train.log"})
        )
        sweep.jobs[2].dir.mkdir()
        (sweep.jobs[2].dir / "train.log").write_text("")  # killed: a log, no results.json
        fake_results(sweep.jobs[3].dir)
        return subprocess.CompletedProcess(cmd, 1)

    monkeypatch.setattr(L.subprocess, "run", fake_multirun)
    assert L.run(sweep) == 1
    out = capsys.readouterr().out
    assert "2 done, 0 skipped (already complete), 2 failed" in out
    assert f"failed {sweep.jobs[1].name}: DataError: bad file (log: /x/train.log)" in out
    assert (
        f"failed {sweep.jobs[2].name}: no results.json: killed or crashed (log: {sweep.jobs[2].dir}/train.log)" in out
    )


TINY = tiny_overrides(None, "logger.wandb.mode=offline")


@pytest.mark.slow
@needs_data
def test_tiny_sweep_end_to_end_then_report(tmp_path, capsys, monkeypatch):
    """table3_e (2 cells x 1 seed) through the real Hydra multirun, then its report; then nothing to rerun."""
    from headsweep.reports.sweep.page import write_report

    args = [
        "--sweep",
        "table3_e",
        "--root",
        str(tmp_path / "multirun"),
        "--results",
        str(tmp_path / "results"),
        "--jobs",
        "1",
        "--seeds",
        "1",
        *TINY,
        f"data.cache_dir={tmp_path / 'cache'}",
    ]
    assert S.main(args) == 0, capsys.readouterr()
    assert "2 done, 0 skipped (already complete), 0 failed" in capsys.readouterr().out
    runs = {
        p.name: json.loads((p / "results.json").read_text()) for p in (tmp_path / "multirun" / "table3_e").glob("h*")
    }
    assert set(runs) == {"h4-dk8-dv8-pos-sinusoidal-s1", "h4-dk8-dv8-pos-learned-s1"}
    learned = runs["h4-dk8-dv8-pos-learned-s1"]
    assert learned["status"] == "complete" and "val/bleu" in learned["metrics"]  # the specs' metric
    cfg = learned["config"]
    assert (cfg["model"]["positions"], cfg["seed"], cfg["sweep"]) == ("learned", 1, "table3_e")
    # the composed config's own tags (experiment=smoke's) stay; the sweep adds its row and cell
    assert cfg["tags"] == ["smoke", "row-E", "cell-h4-dk8-dv8-pos-learned"]
    assert cfg["logger"]["wandb"]["group"] == cfg["cell"] == "h4-dk8-dv8-pos-learned"  # the cell's seeds aggregate
    assert list((tmp_path / "multirun" / "table3_e" / "h4-dk8-dv8-pos-learned-s1" / "wandb").glob("offline-run-*"))
    # exported into the store, each job a view: results/table3_e/<job> -> ../runs/<key>, its record schema 2
    view = tmp_path / "results" / "table3_e" / "h4-dk8-dv8-pos-learned-s1"
    assert view.is_symlink() and os.readlink(view).startswith("../runs/")
    assert seen(view)["schema_version"] == 2 and seen(view)["views"] == [
        {"sweep": "table3_e", "job": view.name, "tags": cfg["tags"]}
    ]

    paths = write_report("table3_e", tmp_path / "multirun", tmp_path / "reports", n_samples=100)
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    assert "| h4-dk8-dv8-pos-sinusoidal (base) |" in (tmp_path / "reports" / "table3_e.md").read_text()

    monkeypatch.setattr(L.subprocess, "run", lambda *a, **k: pytest.fail("a finished job was launched again"))
    assert S.main(args) == 0 and "nothing to run" in capsys.readouterr().out


@pytest.mark.slow  # two Hydra jobs in a subprocess
@needs_data
def test_a_failing_job_does_not_stop_the_others(tmp_path, capsys):
    """The real multirun, Hydra's basic launcher: both jobs fail on their data (data.max_len), fast; the
    second still ran after the first had failed, and each failure is recorded where the summary finds it."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "fail.yaml").write_text(
        yaml.safe_dump({"method": "grid", "parameters": {"data.max_len": {"values": [1, 2]}}})
    )
    root = tmp_path / "multirun"
    args = [
        "--sweep",
        "fail",
        "--specs",
        str(specs),
        "--root",
        str(root),
        "--results",
        str(tmp_path / "results"),
        "--jobs",
        "1",
        "--seeds",
        "1",
        *TINY,
        f"data.cache_dir={tmp_path / 'c'}",
    ]
    assert S.main(args) == 1
    out = capsys.readouterr().out
    assert "0 done, 0 skipped (already complete), 2 failed" in out
    for n in (1, 2):
        job = root / "fail" / f"h4-dk8-dv8-max_len{n}-s1"
        error = f"DataError: split 'train': every pair is longer than data.max_len={n}; raise it"
        assert json.loads((job / "results.json").read_text())["error"] == error
        assert f"failed {job.name}: {error} (log: {job}/train.log)" in out
        assert "every pair is longer" in (job / "train.log").read_text()


def test_jobs_share_the_cores(tmp_path):
    sweep = P.plan("table3_e", seeds=1, root=tmp_path, jobs=2, cores=2)
    assert {"hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "threads=1"} <= set(sweep.common)
    assert sweep.threads == 1
    cfg = compose([*sweep.common, *sweep.jobs[0].overrides])
    assert cfg.threads == 1
    assert P.plan("table3_e", seeds=1, root=tmp_path, jobs=1, cores=2).threads is None


@pytest.mark.parametrize(
    "jobs, launcher, message",
    [
        (0, "basic", "JOBS=0: run between 1 and 2 jobs at once"),
        (3, "basic", "JOBS=3: run between 1 and 2 jobs at once"),
        (2, "submitit", "JOBS=2 runs local jobs in parallel with the joblib launcher, not submitit"),
    ],
)
def test_bad_jobs_stop_before_any_job(tmp_path, jobs, launcher, message):
    with pytest.raises(S.SweepError, match=re.escape(message)):
        P.plan("table3_e", seeds=1, root=tmp_path, jobs=jobs, cores=2, launcher=launcher)


def test_cells_with_unequal_steps_are_refused(tmp_path, capsys, no_launch):
    specs = write_spec(tmp_path, {"trainer.max_steps": {"values": [600, 900]}})
    assert S.main(["--sweep", "bad", "--specs", str(specs), "--root", str(tmp_path / "mr")]) == 2
    assert "the cells would train for unequal or unlimited steps" in capsys.readouterr().err


def job_config(sweep: Sweep, job: Job, **changes) -> dict:
    """The config `job` records, trained with the job's own settings unless `changes` says."""
    cfg = compose([*sweep.common, *job.overrides, f"run_name={job.name}"])
    for key, value in changes.items():
        OmegaConf.update(cfg, key, value)
    resolved = OmegaConf.to_container(cfg, resolve=False)
    resolved["module"]["model"] = resolved["model"]
    return resolved


def finished_export(sweep: Sweep, job: Job, **changes) -> None:
    """A complete results/ entry for `job` (in the store, with its view)."""
    stored_run(job.export, {"status": "complete", "config": job_config(sweep, job, **changes)})


def test_results_folder_counts_as_done_and_must_match(tmp_path, capsys, no_launch):
    results = tmp_path / "results"
    sweep = P.plan("table3_e", seeds=1, root=tmp_path / "mr", results=results, jobs=1)
    finished_export(sweep, sweep.jobs[0])
    again = P.plan("table3_e", seeds=1, root=tmp_path / "mr", results=results, jobs=1)
    assert [j.done for j in again.jobs] == [True, False]
    finished_export(sweep, sweep.jobs[1], **{"trainer.max_steps": 123})
    with pytest.raises(
        S.SweepError,
        match=r"holds a run with other settings than job h8-dk32-dv32-pos-learned-s1 "
        r"\(1 differ, e.g. trainer.max_steps: 123 there, 2100 here\)",
    ):
        P.plan("table3_e", seeds=1, root=tmp_path / "mr", results=results, jobs=1)


def test_killed_job_with_a_checkpoint_resumes_in_place(tmp_path, monkeypatch, capsys):
    sweep = P.plan("table3_e", seeds=1, root=tmp_path, jobs=1)
    killed = sweep.jobs[0]
    (killed.dir / "checkpoints").mkdir(parents=True)
    (killed.dir / "checkpoints" / "last.ckpt").write_bytes(b"")
    monkeypatch.setattr(L.subprocess, "run", lambda cmd, **k: subprocess.CompletedProcess(cmd, 0))
    L.run(sweep)
    assert (killed.dir / "checkpoints" / "last.ckpt").is_file() and not (tmp_path / "table3_e" / ".incomplete").exists()
    assert f"{killed.name}: resumes from {killed.dir / 'checkpoints' / 'last.ckpt'}" in capsys.readouterr().out


def test_jobs_finished_in_their_run_directory_are_exported(tmp_path, monkeypatch, capsys):
    sweep = P.plan("table3_e", seeds=1, root=tmp_path / "mr", results=tmp_path / "results", jobs=1)
    job = sweep.jobs[0]
    write_results(job.dir, {"status": "complete", "config": job_config(sweep, job)})
    (job.dir / "hypotheses").mkdir()
    (job.dir / "hypotheses" / "test.greedy.en").write_text("a\n")
    (job.dir / "checkpoints").mkdir()
    (job.dir / "checkpoints" / "last.ckpt").write_bytes(b"big")
    monkeypatch.setattr(L.subprocess, "run", lambda cmd, **k: subprocess.CompletedProcess(cmd, 0))
    L.run(sweep)
    exported = job.export / "hypotheses" / "test.greedy.en.gz"  # the store keeps hypotheses gzipped (store.pack)
    assert is_complete(job.export) and gzip.decompress(exported.read_bytes()) == b"a\n"
    assert not (job.export / "checkpoints").exists()
    assert json.loads((job.export / "results.json").read_text())["exported_from"] == str(job.dir)
    assert job.export.is_symlink() and (job.export.parent.parent / os.readlink(job.export)).parent.name == "runs"


@pytest.mark.parametrize("name", NAMES)
def test_local_jobs_are_the_wandb_grid(name, tmp_path):
    """W&B's grid method proposes every combination of the `values` lists (the seed included) with the
    `value` parameters fixed; `make sweep` must run exactly those runs, each once (the full spec `make
    wandb-spec` writes: base, spec and variant)."""
    spec = SP.wandb_spec(name)
    params = spec["parameters"]
    assert params["seed"] == {"values": [1, 2, 3]}  # the seed is a sweep parameter
    names = list(params)
    combos = [
        dict(zip(names, combo))
        for combo in itertools.product(*[p["values"] if "values" in p else [p["value"]] for p in params.values()])
    ]
    for combo in combos:  # an interpolated value: the number W&B's command line composes to
        interpolated = [k for k, v in combo.items() if isinstance(v, str) and "${" in v]
        if interpolated:
            cfg = compose([f"sweep={name}", *(f"{k}={format_value(v)}" for k, v in combo.items())])
            combo.update({k: OmegaConf.select(cfg, k) for k in interpolated})
    grid = {tuple(sorted(combo.items())) for combo in combos}
    sweep = P.plan(name, seeds=None, root=tmp_path)
    ours = set()
    for job in sweep.jobs:
        given = dict(o.split("=", 1) for o in [*sweep.common, *job.overrides] if o.split("=", 1)[0] in params)
        ours.add(tuple(sorted((k, v if v.startswith("{") else yaml.safe_load(v)) for k, v in given.items())))
    assert ours == grid and len(sweep.jobs) == len(grid)  # SEEDS=N overriding the spec's: test_grid_times_seeds


def test_a_run_another_sweep_already_made_is_shown_not_copied_nor_trained(tmp_path, monkeypatch, capsys):
    """Table 3's base row is one experiment in rows A and B: h8 of table3_a (d_k = d_v = d_model/h = 32
    by default) is table3_b's base (d_k = d_v = 32 set), seed for seed: one run in the store, two views."""
    results = tmp_path / "results"
    a = P.plan("table3_a", seeds=1, root=tmp_path / "mr", results=results, jobs=1)
    finished_export(a, a.jobs[0])
    (a.jobs[0].export / "metrics.csv").write_text("step,val/bleu\n1150,30.0\n")
    finished_export(a, a.jobs[1])  # h1: like no job of table3_b
    b = P.plan("table3_b", seeds=2, root=tmp_path / "mr", results=results, jobs=1)
    assert [j.same_as and j.same_as.resolve() for j in b.jobs] == [
        a.jobs[0].export.resolve(),
        None,
        None,
        None,
        None,
        None,
    ]  # seed 2: not run
    other_steps = P.plan("table3_b", seeds=1, extra=["trainer.max_steps=700"], root=tmp_path / "mr", results=results)
    assert other_steps.jobs[0].same_as is None
    # heads_specialise's h8, head dropout 0 trains the same model but is analysed after training: not a copy
    assert P.plan("heads_specialise", seeds=1, root=tmp_path / "mr", results=results).jobs[0].same_as is None
    assert L.run(b, dry=True) == 0
    dry = capsys.readouterr().out
    assert f"shared  {b.jobs[0].name}" in dry and f"+sweep_job={b.jobs[1].name}," in dry
    monkeypatch.setattr(L.subprocess, "run", lambda cmd, **k: subprocess.CompletedProcess(cmd, 0))
    L.run(b)
    view = b.jobs[0].export
    assert view.is_symlink() and os.readlink(view) == os.readlink(a.jobs[0].export)  # ../runs/<key>: one run
    assert sorted(p.name for p in (results / "runs").iterdir() if not p.name.startswith(".")) == sorted(
        os.readlink(j.export).split("/")[-1] for j in a.jobs[:2]
    )  # h8 and h1, each stored once
    copied = seen(view)
    assert copied["status"] == "complete" and copied["config"]["sweep"] == "table3_b"
    assert "row-B" in copied["config"]["tags"] and "base" in copied["config"]["tags"]
    assert copied["shared_from"]["run"] == f"table3_a/{a.jobs[0].name}" and copied["shared_from"]["sweep"] == "table3_a"
    assert (b.jobs[0].export / "metrics.csv").read_text() == "step,val/bleu\n1150,30.0\n"
    assert not any(j.same_as for j in P.plan("table3_b", seeds=2, root=tmp_path / "mr", results=results, jobs=1).jobs)


def test_a_model_another_sweep_trained_is_analysed_not_trained_again(tmp_path, monkeypatch, capsys):
    """heads_specialise's head dropout 0 is table3_a's h8 model (same settings and seed) plus the analysis:
    while that run's checkpoint is on disk the job analyses a copy of the run instead of training it."""
    results = tmp_path / "results"
    a = P.plan("table3_a", seeds=1, root=tmp_path / "mr", results=results, jobs=1)
    h8 = a.jobs[0]
    finished_export(a, h8)
    for sub in ("checkpoints", "hypotheses", "wandb"):  # the run directory as training left it
        (h8.dir / sub).mkdir(parents=True)
    (h8.dir / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    (h8.dir / "hypotheses" / "test.greedy.en").write_text("a\n")
    saved = json.loads((h8.export / "results.json").read_text())
    saved |= {"output_dir": str(h8.dir), "checkpoints": {"last": str(h8.dir / "checkpoints" / "last.ckpt")}}
    for d in (h8.dir, h8.export):
        write_results(d, saved)

    ckpt = h8.dir / "checkpoints" / "last.ckpt"
    ckpt.rename(ckpt.with_suffix(".away"))  # no checkpoint here (results/ cloned on another machine): it trains
    assert P.plan("heads_specialise", seeds=1, root=tmp_path / "mr", results=results).jobs[0].trained_as is None
    ckpt.with_suffix(".away").rename(ckpt)
    hs = P.plan("heads_specialise", seeds=1, root=tmp_path / "mr", results=results, jobs=1)
    job = hs.jobs[0]
    assert [j.trained_as and j.trained_as.resolve() for j in hs.jobs] == [h8.export.resolve(), None, None]
    assert job.same_as is None
    assert L.run(hs, dry=True) == 0
    assert f"reuse   {job.name}" in capsys.readouterr().out and not job.dir.exists()
    launched = []

    def fake_multirun(cmd, **kwargs):  # train finds the adopted run complete and only analyses it
        launched.extend(next(a for a in cmd if a.startswith(f"+{L.JOB_GROUP}=")).split("=", 1)[1].split(","))
        assert is_complete(job.dir) and not job.done  # trained, not yet analysed: not done
        (job.dir / "analysis").mkdir()
        (job.dir / "analysis" / "analysis.json").write_text("{}")
        return subprocess.CompletedProcess(cmd, 1)  # the other two jobs "fail"

    monkeypatch.setattr(L.subprocess, "run", fake_multirun)
    assert L.run(hs) == 1
    assert launched == [j.name for j in hs.jobs]  # the adopted job still runs: its analysis is the work
    adopted = json.loads((job.dir / "results.json").read_text())
    assert adopted["run_name"] == job.name and adopted["config"]["sweep"] == "heads_specialise"
    assert adopted["config"]["analysis"] == job.analysis and adopted["config"]["analysis"]["split"] == "val"
    assert adopted["output_dir"] == str(job.dir) and adopted["checkpoints"]["last"].startswith(str(job.dir) + "/")
    assert adopted["shared_from"]["run"] == f"table3_a/{h8.name}" and adopted["shared_from"]["sweep"] == "table3_a"
    assert (job.dir / "checkpoints" / "last.ckpt").stat().st_ino == (h8.dir / "checkpoints" / "last.ckpt").stat().st_ino
    assert not (job.dir / "wandb").exists() and (job.dir / "hypotheses" / "test.greedy.en").read_text() == "a\n"
    assert json.loads((h8.dir / "results.json").read_text())["config"]["sweep"] == "table3_a"  # the source untouched
    again = P.plan("heads_specialise", seeds=1, root=tmp_path / "mr", results=results, jobs=1)  # export matches
    assert [j.done for j in again.jobs] == [True, False, False] and is_complete(job.export)


def test_shipped_reference_results_are_done_under_their_budget(tmp_path, bf16_cpu):
    """Every job under results/<sweep>/ is the job `make sweep SWEEP=<sweep> SEEDS=<its highest seed>` plans under
    its default budget (ablation), the same settings and seed, and counts as done: resuming a reference sweep never
    mixes configs, and `make sweep SWEEP=table3_a DRY=1` lists its 18 jobs done."""
    shipped = SWEEPS_DIR.parent / "results"
    sweeps = sorted(d.name for d in shipped.iterdir() if d.name in NAMES)  # specs and variants alike
    assert {"table3_a", "table3_b", "heads_specialise", "heads_fixed_dk_fp32", "kv_heads_init"} <= set(sweeps)
    for name in sweeps:
        on_disk = {d.name for d in (shipped / name).iterdir() if d.is_dir() and not d.name.startswith(".")}
        grids = {
            json.dumps((as_seen(read_record(shipped / name / d), name, d)["config"].get("lr_select") or {}).get("grid"))
            for d in on_disk
        }
        if grids != {"null"}:  # run with LR_GRID: both phases, at the grid its runs recorded
            (grid,) = grids
            lr = LS.plan_lr(name, None, [], json.loads(grid), results=shipped, budget="ablation", root=tmp_path)
            jobs = lr.grid_sweep.jobs + LS.chosen_sweep(lr)[0].jobs
        else:  # seeds 1..N, N the highest on disk, as the report's "Reproduce" line (heads_identical: the base's s4)
            seeds = max(int(d.rsplit("-s", 1)[1]) for d in on_disk)
            jobs = P.plan(name, seeds=max(seeds, 3), budget="ablation", root=tmp_path, results=shipped).jobs
        assert on_disk <= {j.name for j in jobs}, name
        assert {j.name for j in jobs if j.done} == on_disk, name
    table3_a = P.plan("table3_a", seeds=None, budget="ablation", root=tmp_path, results=shipped)
    assert len(table3_a.jobs) == 18 and all(j.done for j in table3_a.jobs)


def test_planning_a_grid_sweep_without_its_grid_names_the_grid_to_pass(tmp_path, bf16_cpu):
    """Runs whose rate a grid chose differ from a plan without the grid only in module.peak_lr: the one line
    says which grid they ran with and how to pass it, not only that the settings differ."""
    shipped = SWEEPS_DIR.parent / "results"
    with pytest.raises(
        S.SweepError,
        match=r"h16-dk32-dv32-s1 holds a run with other settings than job h16-dk32-dv32-s1 "
        r"\(1 differ, e.g. module.peak_lr: 0.001 there, 0.002 here\); it ran with the "
        r"learning-rate grid 0.0005,0.001,0.002: plan with that grid "
        r"\(LR_GRID=0.0005,0.001,0.002, --lr-grid=0.0005,0.001,0.002\)$",
    ):
        P.plan("heads_fixed_dk_fan_in", seeds=None, budget="ablation", root=tmp_path, results=shipped)
    results = tmp_path / "results"  # another setting differs too: the usual advice, no grid named
    sweep = P.plan("table3_e", seeds=1, root=tmp_path / "mr", results=results, jobs=1)
    finished_export(
        sweep,
        sweep.jobs[0],
        **{"trainer.max_steps": 123, "module.peak_lr": 0.001, "lr_select": {"phase": "chosen", "grid": [0.001, 0.002]}},
    )
    with pytest.raises(S.SweepError, match=r"2 differ, .*; move it away or pass --results DIR$"):
        P.plan("table3_e", seeds=1, root=tmp_path / "mr", results=results, jobs=1)


def test_a_sweep_keeps_the_precision_its_finished_jobs_ran_with(tmp_path, monkeypatch):
    """Precision is machine-dependent (${auto_precision:}); a sweep's finished jobs fix it for the rest,
    and every way of mixing precisions stops the plan with one line."""
    results = tmp_path / "results"
    a = P.plan("table3_a", seeds=1, root=tmp_path / "mr", results=results, jobs=1, extra=["trainer.precision=32-true"])
    finished_export(a, a.jobs[0])
    again = P.plan("table3_a", seeds=1, root=tmp_path / "mr", results=results, jobs=1)  # no override: adopts it
    assert "trainer.precision=32-true" in again.common and again.jobs[0].done
    with pytest.raises(S.SweepError, match=r"ran trainer.precision=32-true .* asks for trainer.precision=bf16-mixed"):
        P.plan("table3_a", seeds=1, root=tmp_path / "mr", results=results, extra=["trainer.precision=bf16-mixed"])
    # a job of another precision is not the same experiment: table3_b's base is not copied from it
    b = P.plan("table3_b", seeds=1, root=tmp_path / "mr", results=results, extra=["trainer.precision=bf16-mixed"])
    assert b.jobs[0].same_as is None
    finished_export(a, a.jobs[1], **{"trainer.precision": "bf16-mixed"})  # a second precision in one sweep
    with pytest.raises(
        S.SweepError, match=r"mixes trainer.precision \(h1-dk256-dv256-s1 bf16-mixed, h8-dk32-dv32-s1 32-true"
    ):
        P.plan("table3_a", seeds=1, root=tmp_path / "mr", results=results)


def test_a_bf16_sweep_stops_on_a_cpu_without_bf16_units(tmp_path, monkeypatch):
    results = tmp_path / "results"
    a = P.plan("table3_b", seeds=1, root=tmp_path / "mr", results=results, extra=["trainer.precision=bf16-mixed"])
    finished_export(a, a.jobs[0])
    monkeypatch.setattr("headsweep.sweeps.sweep_settings.cpu_has_bf16", lambda: False)
    with pytest.raises(S.SweepError, match="no bf16 matmul units"):
        P.plan("table3_b", seeds=1, root=tmp_path / "mr", results=results)


def test_cells_in_different_precisions_are_refused(tmp_path):
    specs = write_spec(tmp_path, {"trainer.precision": {"values": ["32-true", "bf16-mixed"]}})
    with pytest.raises(S.SweepError, match="different trainer.precision"):
        P.plan("bad", seeds=1, root=tmp_path, specs_dir=specs)
    # precision pinned: on a CPU without bf16 units the two trainers' precisions would differ first
    specs = write_spec(tmp_path, {"trainer": {"values": ["cpu", "gpu"]}, "trainer.precision": {"value": "bf16-mixed"}})
    with pytest.raises(S.SweepError, match="different trainer.accelerator"):
        P.plan("bad", seeds=1, root=tmp_path, specs_dir=specs)


def test_each_width_gets_its_scaled_learning_rate_as_a_plain_value(tmp_path):
    sweep = P.plan("heads_by_width", seeds=1, root=tmp_path)
    lr = {j.name.split("-")[3]: dict(o.split("=", 1) for o in j.overrides)["module.peak_lr"] for j in sweep.jobs}
    assert {k: float(v) for k, v in lr.items()} == pytest.approx({"dm128": 2e-3 * 2**0.5, "dm512": 2e-3 / 2**0.5})
    cfg = compose([*sweep.common, *sweep.jobs[0].overrides])
    assert cfg.module.peak_lr == pytest.approx(2e-3 * 2**0.5) and not OmegaConf.is_interpolation(cfg.module, "peak_lr")


def test_a_sweep_named_apart_from_its_spec_notes_the_spec_beside_its_runs(tmp_path):
    """make sweep NAME=: results/<name>/.sweep.json names the spec (or variant), so its report counts what that
    spec plans; a sweep under its spec's own name needs no note."""
    results = tmp_path / "results"
    named = P.plan("kv_heads_init", seeds=1, root=tmp_path / "mr", results=results, name_as="kv_heads_lr")
    L.note_spec(named)
    assert json.loads((results / "kv_heads_lr" / ".sweep.json").read_text()) == {
        "sweep": "kv_heads_lr",
        "spec": "kv_heads_init",
    }
    own = P.plan("table3_a", seeds=1, root=tmp_path / "mr", results=results)
    L.note_spec(own)
    assert not (results / "table3_a" / ".sweep.json").exists()


def test_a_job_whose_run_the_store_holds_keeps_its_view_as_its_export():
    """results/<sweep>/<job> is a link into the store; the job must keep that path, not the store entry it resolves
    to, or what it writes for this sweep (its learning-rate selection, its tags) lands in the shared record."""
    sweep = P.plan("table3_b", seeds=1, budget="ablation", root=SWEEPS_DIR.parent / "multirun", results=SHIPPED)
    base = sweep.jobs[0]
    if not (SHIPPED / "table3_b" / base.name).is_symlink():
        pytest.skip("the shipped results are not in this checkout")
    assert base.export == SHIPPED.absolute() / "table3_b" / base.name and base.export.is_symlink() and base.done
