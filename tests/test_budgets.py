"""make budgets (issue 68): a constant-rate trunk, checkpointed where each budget's cooldown starts, and cooldown
branches from those checkpoints. The key test: trunk then branch trains the weights of one uninterrupted wsd run of
the branch's budget, bit for bit on the CPU in fp32, and with its learning rate step for step (against a closed
form written here). Then: a killed trunk and a killed branch resume; bad budgets, cooldowns and trunks stop with one
line before anything starts; a branch is its own experiment, never a linear-decay run's."""

import csv
import gzip
import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from conftest import needs_data, stored_run, tiny_overrides
from headsweep.config import compose
from headsweep.store import experiment_key, flat_key
from headsweep.sweeps import budgets as B
from headsweep.sweeps import launch as L
from headsweep.sweeps import planning as P
from headsweep.sweeps.budget_plan import budget_steps, parse_budgets, plan_budgets
from headsweep.sweeps.budget_rates import chosen_rate
from headsweep.sweeps.reuse import find_reuse, finished_runs
from headsweep.sweeps.specs import SweepError
from headsweep.training.branch import check_branch
from headsweep.training.checks import ConfigError
from headsweep.training.schedules import budget_progress, cooldown_start, lr_factor
from headsweep.training.train import train

# 8 training batches an epoch (TINY's 200 pairs in 1024-token batches), a validation every 4 steps, a checkpoint
# every 3, fp32 on one thread: a branch point at 8 is an epoch's end, one at 12 is mid-epoch; both follow a
# validation, so a resume has to get both the data position and the RNG after them right.
RUN = [
    "data.limit_eval=20",
    "module.test_beam_size=1",
    "trainer.log_every_n_steps=1",
    "trainer.val_check_interval=4",
    "trainer.check_val_every_n_epoch=null",
    "callbacks.checkpoint.every_n_train_steps=3",
    "callbacks.checkpoint.every_n_epochs=null",
    "callbacks.checkpoint.save_top_k=-1",
    "logger.wandb.mode=disabled",
    "module.decay_by=steps",
    "module.decay_fraction=0.2",
    "trainer.precision=32-true",
    "threads=1",
    "trainer.enable_progress_bar=false",
]
PEAK, WARMUP = 2e-3, 4
B15 = ["callbacks.checkpoint.every_n_train_steps=1"]  # the 15-step branch's own checkpoints: 13, 14 and 15
B10 = ["callbacks.checkpoint.save_top_k=1"]  # the ablation budget's: Lightning rotates the branch's own files


def overrides(out: Path, *extra: str) -> list[str]:
    return tiny_overrides(out, *RUN, f"module.peak_lr={PEAK}", f"run_name={out.name}", *extra)


def closed_form(done: int, steps: int, fraction: float, shape: str) -> float:
    """The rate of step done + 1 of a wsd run of `steps` steps, written out (Hägele et al. 2024's wsd_schedule in
    epfml/schedules-and-scaling, with our linear warm-up to the peak): the peak until (1 - f) * steps steps are done,
    then 1 - t or 1 - sqrt(t) of it, t = (done - (1 - f) * steps) / (f * steps)."""
    warm = min((done + 1) / WARMUP, 1.0)
    hold = (1 - fraction) * steps
    t = min(max((done - hold) / (fraction * steps), 0.0), 1.0)
    return PEAK * min(warm, 1 - t if shape == "linear" else 1 - math.sqrt(t))


def rates(run: Path) -> dict[int, float]:
    rows = csv.DictReader(open(run / "csv" / "metrics.csv"))
    return {int(r["step"]): float(r["lr-Adam"]) for r in rows if r.get("lr-Adam")}


def weights(ckpt: Path) -> dict:
    return torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]


def branch_of(trunk: Path, steps: int, point: int, shape: str) -> list[str]:
    key = experiment_key(json.loads((trunk / "results.json").read_text())["config"])
    ckpt = trunk / "branch_points" / f"step{point:06d}.ckpt"
    record = f"budgets={{role:branch,budget:1,trunk:'{key}',step:{point},checkpoint:'{ckpt}'}}"
    return ["module.schedule=wsd", f"module.cooldown={shape}", f"trainer.max_steps={steps}", record]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A trunk of 12 steps kept at 8 and 12; branches to 10 (sqrt, from 8) and 15 (linear, from 12); and the two
    wsd runs of 10 and 15 steps they must equal."""
    from conftest import DATA

    if not DATA.is_dir():
        pytest.skip(f"Multi30k not found at {DATA}")
    root = tmp_path_factory.mktemp("budgets")
    out = {name: root / name for name in ("trunk", "b10", "b15", "w10", "w15")}
    train(compose(overrides(out["trunk"], "module.schedule=constant", "trainer.max_steps=12",
                            "callbacks.branch_points.steps=[8,12]")))  # fmt: skip
    train(compose(overrides(out["b10"], *branch_of(out["trunk"], 10, 8, "sqrt"), *B10)))
    train(compose(overrides(out["b15"], *branch_of(out["trunk"], 15, 12, "linear"), *B15)))
    for steps, shape in ((10, "sqrt"), (15, "linear")):
        wsd = ["module.schedule=wsd", f"module.cooldown={shape}", f"trainer.max_steps={steps}"]
        train(compose(overrides(out[f"w{steps}"], *wsd)))
    return out


@needs_data
@pytest.mark.parametrize("branch, wsd, point", [("b10", "w10", 8), ("b15", "w15", 12)])
def test_a_branch_from_its_trunk_trains_the_weights_of_one_wsd_run(runs, branch, wsd, point):
    ours, theirs = weights(runs[branch] / "checkpoints" / "last.ckpt"), weights(runs[wsd] / "checkpoints" / "last.ckpt")
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours), "not bit-identical to the uninterrupted wsd run"
    a, b = (json.loads((runs[r] / "results.json").read_text()) for r in (branch, wsd))
    assert (
        a["metrics"]["val/loss"] == b["metrics"]["val/loss"]
        and a["metrics"]["train/steps"] == b["metrics"]["train/steps"]
    )
    # its curve is the whole budget's: the trunk's rows before the branch point, then its own, one per step
    losses = [r for r in csv.DictReader(open(runs[branch] / "csv" / "metrics.csv")) if r.get("train/loss")]
    assert [int(r["step"]) for r in losses] == list(range(a["metrics"]["train/steps"]))
    assert a["resumed_from_step"] is None  # it started from its trunk, it did not resume itself
    assert a["config"]["budgets"]["step"] == point and a["config"]["module"]["schedule"] == "wsd"


@needs_data
@pytest.mark.parametrize("branch, steps, shape", [("b10", 10, "sqrt"), ("b15", 15, "linear")])
def test_trunk_then_branch_rates_are_the_closed_form_wsd_step_for_step(runs, branch, steps, shape):
    logged = rates(runs[branch])
    assert sorted(logged) == list(range(steps))
    for done, rate in logged.items():
        assert rate == pytest.approx(closed_form(done, steps, 0.2, shape), rel=1e-12, abs=1e-15), done
    assert rates(runs["w" + branch[1:]]) == logged


def test_the_module_s_schedules_are_the_closed_form_at_the_real_budgets():
    """1x, 2x, 4x of 1,150 steps, warm-up 300: constant to the branch point, then wsd, is the closed form."""
    global WARMUP
    warmup, WARMUP = WARMUP, 300
    try:
        for steps in (1150, 2300, 4600):
            point = cooldown_start(steps, 0.2)
            assert point == round(0.8 * steps)
            for shape in ("linear", "sqrt"):
                for done in range(steps + 1):
                    progress = budget_progress(done, steps, 0.0, None)
                    kind = "constant" if done < point else "wsd"
                    ours = PEAK * lr_factor(kind, done + 1, WARMUP, progress, 0.0, 0.2, shape)
                    assert ours == pytest.approx(closed_form(done, steps, 0.2, shape), rel=1e-7, abs=1e-15)
                assert lr_factor("wsd", steps + 1, WARMUP, 1.0, 0.0, 0.2, shape) == 0.0
    finally:
        WARMUP = warmup


@needs_data
def test_the_trunk_keeps_its_branch_points_and_no_branch_deletes_them(runs):
    points = sorted(p.name for p in (runs["trunk"] / "branch_points").glob("*.ckpt"))
    assert points == ["step000008.ckpt", "step000012.ckpt"]
    assert torch.load(runs["trunk"] / "branch_points" / points[0], weights_only=False)["global_step"] == 8
    own = ["last.ckpt", *(f"step{s:06d}.ckpt" for s in (3, 6, 9, 12))]  # every 3 steps, all kept, and the last
    assert sorted(p.name for p in (runs["trunk"] / "checkpoints").glob("*.ckpt")) == own
    record = json.loads((runs["b10"] / "results.json").read_text())
    assert record["checkpoints"]["kept"] == [str(runs["b10"] / "checkpoints" / "step000010.ckpt")]


@needs_data
def test_a_killed_trunk_resumes_and_writes_the_same_branch_point(runs, tmp_path):
    killed = shutil.copytree(runs["trunk"], tmp_path / "trunk")
    (killed / "results.json").unlink()  # killed after step 9's checkpoint, before the branch point at 12
    shutil.copy(killed / "checkpoints" / "step000009.ckpt", killed / "checkpoints" / "last.ckpt")
    (killed / "branch_points" / "step000012.ckpt").unlink()
    train(compose(overrides(killed, "module.schedule=constant", "trainer.max_steps=12",
                            "callbacks.branch_points.steps=[8,12]", "run_name=trunk")))  # fmt: skip
    assert json.loads((killed / "results.json").read_text())["resumed_from_step"] == 9
    a, b = (weights(d / "branch_points" / "step000012.ckpt") for d in (killed, runs["trunk"]))
    assert all(torch.equal(a[k], b[k]) for k in a)


@needs_data
def test_a_killed_branch_resumes_from_its_own_checkpoint_onto_the_wsd_run(runs, tmp_path):
    killed = shutil.copytree(runs["b15"], tmp_path / "b15")
    (killed / "results.json").unlink()  # killed after its own checkpoint of step 13
    shutil.copy(killed / "checkpoints" / "step000013.ckpt", killed / "checkpoints" / "last.ckpt")
    cfg = compose(overrides(killed, *branch_of(runs["trunk"], 15, 12, "linear"), *B15, "run_name=b15"))
    cfg.budgets.checkpoint = str(tmp_path / "gone.ckpt")  # its trunk's checkpoint is not needed any more
    train(cfg)
    assert json.loads((killed / "results.json").read_text())["resumed_from_step"] == 13
    a, b = weights(killed / "checkpoints" / "last.ckpt"), weights(runs["w15"] / "checkpoints" / "last.ckpt")
    assert all(torch.equal(a[k], b[k]) for k in a)


@needs_data
def test_a_branch_whose_trunk_is_missing_or_other_stops_in_one_line_before_data(runs, tmp_path):
    out = tmp_path / "b"
    cfg = compose(overrides(out, *branch_of(runs["trunk"], 10, 8, "sqrt")))
    cfg.budgets.checkpoint = str(tmp_path / "trunk" / "branch_points" / "step000008.ckpt")
    with pytest.raises(ConfigError, match=r"the trunk's checkpoint after 8 steps is not there") as e:
        check_branch(cfg, out)
    assert "\n" not in str(e.value)
    other = compose(overrides(out, *branch_of(runs["trunk"], 10, 8, "sqrt"), "module.peak_lr=0.001"))
    with pytest.raises(
        ConfigError, match=r"trained with other settings than this branch \(1 differ, e.g. module.peak_lr"
    ):
        check_branch(other, out)
    wrong = compose(overrides(out, *branch_of(runs["trunk"], 10, 8, "sqrt")))
    wrong.budgets.trunk = "0123456789ab"
    with pytest.raises(ConfigError, match="holds the trunk .*, another run"):
        check_branch(wrong, out)


# ----- planning: no training -----

TINY = tiny_overrides(None)


def spec_dir(tmp_path: Path) -> Path:
    specs = tmp_path / "specs"
    specs.mkdir(parents=True, exist_ok=True)
    (specs / "tiny.yaml").write_text("method: grid\nparameters:\n  model.heads:\n    values: [2, 4]\n")
    return specs


def tiny_plan(tmp_path, *extra, budgets=(1, 2), shapes=("sqrt",), only=(), runs_from=None):
    return plan_budgets(
        "tiny",
        1,
        [*TINY, *extra],
        list(budgets),
        0.2,
        list(shapes),
        results=tmp_path / "results",
        specs_dir=spec_dir(tmp_path),
        root=tmp_path / "mr",
        only=list(only),
        runs_from=runs_from,
    )


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """(the plan of `tiny` at 1x and 2x in both shapes, its tmp dir): read it, never write under it."""
    tmp = tmp_path_factory.mktemp("plan")
    return tiny_plan(tmp, shapes=("sqrt", "linear")), tmp


def test_budgets_steps_and_branch_points():
    b = budget_steps([1, 2, 4], 0.2, ["sqrt"], 1150, 300)
    assert (b.steps, b.points, b.trunk_steps) == ([1150, 2300, 4600], [920, 1840, 3680], 3680)
    assert budget_steps([1, 1.5], 0.25, ["linear"], 1000, 300).points == [750, 1125]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--budgets", "1,4,2"], "BUDGETS=1,4,2 is not increasing"),
        (["--budgets", "2,2"], "BUDGETS=2,2 is not increasing"),
        (["--budgets", "0,1"], "BUDGETS=0,1: give multiples of the sweep's budget > 0"),
        (["--cooldown", "0"], "COOLDOWN=0.0: the share of each budget that cools down must be in (0, 1)"),
        (["--cooldown", "1"], "COOLDOWN=1.0: the share of each budget that cools down must be in (0, 1)"),
        (["--cooldown", "1.5"], "must be in (0, 1)"),
        (["--shapes", "cosine"], "SHAPES=cosine: each cooldown shape is one of linear, sqrt"),
        (["module.schedule=wsd"], "override module.schedule=wsd: make budgets sets it"),
        (["--only", "h3-*"], "--only 'h3-*' matches none of tiny_budgets's trunks and branches"),
        (["--from", "tiny_start"], "FROM=tiny_start: "),
    ],
)
def test_bad_input_stops_in_one_line_and_starts_nothing(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.setattr(L.subprocess, "run", lambda *a, **k: pytest.fail("a job was launched"))
    argv = ["--sweep", "tiny", "--specs", str(spec_dir(tmp_path)), "--root", str(tmp_path / "mr"), "--budget", ""]
    assert B.main([*argv, "--results", str(tmp_path / "results"), *args, *TINY]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "mr").exists() and not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "multiples, message",
    [
        ([1.01], "1.01 x 10 steps is 10.1, no whole number of steps"),
        ([0.4, 1], "each must start after warm-up (4 steps)"),
    ],
)
def test_budgets_that_do_not_fit_the_steps_stop_in_one_line(multiples, message):
    with pytest.raises(SweepError, match=re.escape(message)):
        budget_steps(multiples, 0.2, ["sqrt"], 10, 4)


def test_parse_budgets_keeps_whole_multiples_whole():
    assert parse_budgets("1, 2,4") == [1, 2, 4] and parse_budgets("1,1.5") == [1, 1.5]


def test_plan_names_trunks_and_branches_and_their_keys_are_the_composed_runs(planned, tmp_path):
    bp, where = planned
    here, tmp_path = tmp_path, where
    assert [j.name for j in bp.trunks.jobs] == ["h2-dk16-dv16-trunk-s1", "h4-dk8-dv8-trunk-s1"]
    assert [j.name for j in bp.branches.jobs][:4] == [
        "h2-dk16-dv16-1x-sqrt-s1",
        "h2-dk16-dv16-1x-linear-s1",
        "h2-dk16-dv16-2x-sqrt-s1",
        "h2-dk16-dv16-2x-linear-s1",
    ]
    trunk, branch = bp.trunks.jobs[0], bp.branches.jobs[2]
    assert "trainer.max_steps=10" not in bp.trunks.common  # the base budget, read; each job sets its own
    files = replace(bp.trunks, dir=here / "jobs")
    L.write_jobs(files, [trunk, branch])
    search = f"hydra.searchpath=[file://{(files.dir / '.jobs').resolve()}]"
    for job in (trunk, branch):  # composed as the launcher runs it: the key its results.json will have
        cfg = compose([*files.common, search, f"+{L.JOB_GROUP}={job.name}", "paths.output_dir=/tmp/x"])
        assert experiment_key(OmegaConf.to_container(cfg, resolve=True)) == bp.keys[job.name], job.name
        assert cfg.trainer.max_steps == (16 if job is trunk else 20)
    assert "trainer.max_steps=16" in trunk.overrides and "callbacks.branch_points.steps=[8,16]" in trunk.overrides
    assert "module.schedule=constant" in trunk.overrides and "trainer.max_steps=20" in branch.overrides
    record = B._record(branch)
    assert record["trunk"] == bp.keys[trunk.name] and record["step"] == 16 and record["budget"] == 2
    home = Path(os.path.abspath(tmp_path / "mr" / "tiny_budgets" / trunk.name))
    assert record["checkpoint"] == str(home / "branch_points" / "step000016.ckpt")
    assert branch.export == Path(os.path.abspath(tmp_path / "results" / "tiny_budgets" / branch.name))
    assert bp.rates["h2-dk16-dv16"] == (pytest.approx(2e-3 * (256 / 32) ** 0.5), "the config: no chosen rate")


def test_a_branch_is_its_own_experiment_and_never_a_linear_run_s(planned, tmp_path):
    bp, where = planned
    branch = bp.branches.jobs[0]  # h2's 1x branch: the same cell, seed and steps as the linear run
    linear = P.plan("tiny", 1, TINY, specs_dir=spec_dir(tmp_path), root=tmp_path / "mr", results=tmp_path / "results")
    plain = flat_key(linear.flats["h2-dk16-dv16"], 1)
    assert "trainer.max_steps=10" in branch.overrides and plain != bp.keys[branch.name]
    # nor is it the plain wsd run of its budget: it names its trunk and its step
    flat = {**bp.flats[branch.name]}
    del flat["budgets.trunk"], flat["budgets.step"]
    assert flat_key(flat, 1) != bp.keys[branch.name]
    # a stored branch is never shown as a job of the linear sweep
    record = {"status": "complete", "config": _config([*TINY, *branch.overrides]), "metrics": {}}
    assert experiment_key(record["config"]) == bp.keys[branch.name]  # the key its run records
    stored_run(tmp_path / "results" / "tiny_budgets" / branch.name, record)
    finished = finished_runs((tmp_path / "results").resolve())
    assert len(finished) == 1
    for job in linear.jobs:
        find_reuse(job, linear.flats[job.cell], finished)
        assert job.same_as is None and not job.done


def _config(overrides: list[str]) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(compose([*overrides, "paths.output_dir=/tmp/x"]), resolve=True)


def test_a_trunk_trained_with_other_settings_stops_the_plan_in_one_line(tmp_path):
    bp = tiny_plan(tmp_path)
    trunk = bp.trunks.jobs[0]
    from conftest import write_results

    other = _config([*TINY, *trunk.overrides, "module.peak_lr=0.001"])
    write_results(trunk.dir, {"status": "complete", "config": other, "metrics": {}})
    with pytest.raises(SweepError, match=r"holds a run trained with other settings than h2-dk16-dv16-trunk-s1 "
                                         r"\(module.peak_lr: 0.001 there"):  # fmt: skip
        tiny_plan(tmp_path)


def test_a_branch_whose_trunk_is_left_out_stops_before_anything_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(L.subprocess, "run", lambda *a, **k: pytest.fail("a job was launched"))
    bp = tiny_plan(tmp_path, only=["h2-dk16-dv16-1x-*"])
    with pytest.raises(SweepError, match="its trunk h2-dk16-dv16-trunk-s1 is not finished and --only leaves it out"):
        B.run_budgets(bp)


def test_dry_lists_the_trunks_then_the_branches_waiting_for_them(planned, capsys, monkeypatch):
    bp, tmp_path = planned
    monkeypatch.setattr(L.subprocess, "run", lambda *a, **k: pytest.fail("a job was launched"))
    assert B.run_budgets(bp, dry=True) == 0
    out = capsys.readouterr().out
    assert (
        "at 1x, 2x its 10 steps (10, 20), each cooling down over its last 20% (sqrt, linear) from a trunk of 16" in out
    )
    assert out.count("  to run  ") == 2 and out.count("  waits   ") == 8
    assert not (tmp_path / "results").exists() and not (tmp_path / "mr").exists()


def test_shapes_compared_on_the_same_trunks():
    from headsweep.sweeps.cooldown import compare_shapes

    runs = [
        {"cell": "c", "budget": 1, "shape": s, "seed": seed, "val/loss": 2.0 + d, "test/bleu": 30.0}
        for seed, d in ((1, 0.1), (2, 0.2), (3, 0.3))
        for s, d in (("sqrt", 0.0), ("linear", d))
    ]
    lines = compare_shapes(runs, "sqrt")
    # mean 0.2, sd 0.1, t(0.975, 2 df) = 4.302653 (tables): half-width 4.302653 * 0.1 / sqrt(3) = 0.248
    assert lines[1] == "    1x: 3 pairs, val loss +0.200 ± 0.248, test BLEU +0.000 ± 0.000"


@pytest.mark.slow
@needs_data
def test_make_budgets_end_to_end_through_the_launcher(tmp_path, capsys):
    """Two cells' trunks, then their branches at 1x and 2x in both shapes, through the real Hydra multirun; exported
    to results/; the shapes compared; the same command again runs nothing."""
    argv = ["--sweep", "tiny", "--specs", str(spec_dir(tmp_path)), "--root", str(tmp_path / "mr"), "--budget", "",
            "--results", str(tmp_path / "results"), "--jobs", "1", "--seeds", "1", "--shapes", "sqrt,linear",
            "--budgets", "1,2", *TINY, f"data.cache_dir={tmp_path / 'cache'}", "logger.wandb.mode=disabled",
            "trainer.precision=32-true", "threads=1"]  # fmt: skip
    assert B.main(argv) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "cooldown linear - sqrt, paired on the same trunk checkpoint" in out and "2 pairs" in out
    views = tmp_path / "results" / "tiny_budgets"
    names = sorted(p.name for p in views.iterdir() if not p.name.startswith("."))
    assert len(names) == 2 + 2 * 2 * 2 and "h2-dk16-dv16-2x-linear-s1" in names
    stored = gzip.open(views / "h2-dk16-dv16-2x-linear-s1" / "metrics.csv.gz", "rt")  # the store packs it
    curve = [int(r["step"]) for r in csv.DictReader(stored) if r["val/loss"]]
    assert curve == [7, 15, 20]  # the trunk's validations (each epoch: 8 steps), then its own of its last weights
    assert json.loads((views / ".budgets.json").read_text())["branch_steps"] == [8, 16]
    record = json.loads((views / "h2-dk16-dv16-2x-linear-s1" / "results.json").read_text())
    trunk = json.loads((views / "h2-dk16-dv16-trunk-s1" / "results.json").read_text())
    assert record["config"]["budgets"]["trunk"] == experiment_key(trunk["config"])
    assert record["config"]["budgets"]["step"] == 16 and record["config"]["trainer"]["max_steps"] == 20
    assert (record["config"]["module"]["schedule"], record["config"]["module"]["cooldown"]) == ("wsd", "linear")
    result = subprocess.run(
        [sys.executable, "-m", "headsweep.sweeps.budgets", *argv, "--dry"], capture_output=True, text=True
    )
    assert result.returncode == 0 and " to run " not in result.stdout, result.stdout


def test_each_cell_trains_at_the_rate_its_sweep_chose(tmp_path):
    """The chosen-rate record of the sweep's runs; before it, the choice its finished grid runs make; else none."""
    results = tmp_path / "results"

    def stored(name: str, lr: float, phase: str, loss: float, seed: int = 1) -> None:
        select = f"lr_select={{phase:{phase},grid:[0.001,0.002],select_on:'val/loss'}}"
        config = _config(["model.heads=2", f"module.peak_lr={lr}", f"seed={seed}", select])
        stored_run(results / "src" / name, {"status": "complete", "config": config, "metrics": {"val/loss": loss}})

    stored("c-lr0.001-s1", 0.001, "grid", 2.5)
    assert chosen_rate(results, "src", "c", [1]) is None  # the grid's 2e-3 has not finished
    stored("c-lr0.002-s1", 0.002, "grid", 2.3)
    assert chosen_rate(results, "src", "c", [1]) == (0.002, "src: its grid 0.001,0.002 of seed 1, by final val/loss")
    stored("c-s2", 0.001, "chosen", 2.4, seed=2)  # a chosen-rate run's record wins (for the test, another rate)
    assert chosen_rate(results, "src", "c", [1, 2]) == (0.001, "src/c-s2")


GAIN = "0.4082482904638631"  # 1/sqrt(6): the residual outputs' chosen starting scale, the model's default
UNIT = ("model.init_wo_gain=1.0", "model.init_ff2_gain=1.0")  # the start every row was first measured under


def test_the_residual_init_gains_reach_every_trunk_and_branch_and_their_keys(tmp_path):
    """Trunks under the chosen start (the default, or ARGS=model.init_wo_gain=.. model.init_ff2_gain=..): each job
    composes with the gains, and every key (and the trunk key a branch names) differs from the unit-gain plan's."""
    unit = tiny_plan(tmp_path / "unit", *UNIT)
    small = tiny_plan(tmp_path / "small", f"model.init_wo_gain={GAIN}", f"model.init_ff2_gain={GAIN}")
    assert tiny_plan(tmp_path / "default").keys == small.keys  # the chosen start is the default
    assert [j.name for j in small.branches.jobs] == [j.name for j in unit.branches.jobs]
    for name, key in small.keys.items():
        assert key != unit.keys[name], name
        assert small.flats[name]["model.init_wo_gain"] == small.flats[name]["model.init_ff2_gain"] == float(GAIN)
    branch = small.branches.jobs[0]
    assert B._record(branch)["trunk"] == small.keys[small.trunk_of[branch.name].name] != unit.keys[branch.name]
    files = replace(small.trunks, dir=tmp_path / "jobs")
    L.write_jobs(files, [branch])
    search = f"hydra.searchpath=[file://{(files.dir / '.jobs').resolve()}]"
    cfg = compose([*files.common, search, f"+{L.JOB_GROUP}={branch.name}", "paths.output_dir=/tmp/x"])
    assert cfg.model.init_wo_gain == cfg.model.init_ff2_gain == float(GAIN)
    assert experiment_key(OmegaConf.to_container(cfg, resolve=True)) == small.keys[branch.name]


def test_the_plan_note_keeps_every_command_s_trunks_and_branches(tmp_path):
    """The base at 3 seeds and the other cells at 1 are two commands: the note the page reads lists both."""
    B.write_note(tiny_plan(tmp_path, only=["h2-*"]))
    B.write_note(tiny_plan(tmp_path, only=["h4-*"]))
    note = json.loads((tmp_path / "results" / "tiny_budgets" / ".budgets.json").read_text())
    planned = note["planned"]
    assert sorted(n for n, j in planned.items() if j["role"] == "trunk") == [
        "h2-dk16-dv16-trunk-s1",
        "h4-dk8-dv8-trunk-s1",
    ]
    assert planned["h4-dk8-dv8-2x-sqrt-s1"] == {
        "role": "branch",
        "base": False,
        "trunk": "h4-dk8-dv8-trunk-s1",
        "budget": 2,
    }
    assert planned["h2-dk16-dv16-1x-sqrt-s1"]["base"] is True and len(planned) == 2 + 2 * 2


def test_a_rate_chosen_under_other_settings_is_not_borrowed(tmp_path):
    """The source sweep's chosen rate counts only for its own settings: trunks under the chosen start do not take
    the rate a unit-gain sweep chose; the plan says why and keeps the config's. FROM= names the same cells' sweep
    at the plan's settings, whose rate it takes."""
    linear = P.plan("tiny", 1, TINY, specs_dir=spec_dir(tmp_path), root=tmp_path / "mr", results=None)
    job = next(j for j in linear.jobs if j.cell == "h2-dk16-dv16")
    select = "lr_select={phase:chosen,grid:[0.001,0.002],select_on:'val/loss'}"

    def stored(sweep: str, lr: float, *more: str) -> None:
        config = _config([*linear.common, *job.overrides, f"module.peak_lr={lr}", select, *more])
        stored_run(tmp_path / "results" / sweep / job.name, {"status": "complete", "config": config, "metrics": {}})

    stored("tiny", 0.001, *UNIT)
    assert tiny_plan(tmp_path, *UNIT).rates["h2-dk16-dv16"] == (0.001, "tiny/h2-dk16-dv16-s1")
    bp = tiny_plan(tmp_path)  # the default start
    rate, why = bp.rates["h2-dk16-dv16"]
    assert rate == pytest.approx(2e-3 * (256 / 32) ** 0.5)  # the config's, as no chosen rate
    assert why == (
        f"the config: tiny's runs of h2-dk16-dv16 trained with other settings (model.init_ff2_gain: 1.0 there, {GAIN} "
        "here): set ARGS=module.peak_lr=<v> to choose"
    )
    assert B._record(bp.trunks.jobs[0])["rate_from"] == why  # its quote survives the job's override
    stored("tiny_start", 0.004)
    bp = tiny_plan(tmp_path, runs_from="tiny_start")
    assert bp.rates["h2-dk16-dv16"] == (0.004, "tiny_start/h2-dk16-dv16-s1") and bp.runs_from == "tiny_start"


def test_the_note_keeps_every_shape_with_the_first_command_s_first(tmp_path):
    """SHAPES=sqrt for every cell, then SHAPES=sqrt,linear for one branch, then SHAPES=sqrt for the next trunk: the
    note names both shapes, sqrt first (the page expects a finished trunk's branches in that shape only)."""
    B.write_note(tiny_plan(tmp_path, only=["h2-*"]))
    B.write_note(tiny_plan(tmp_path, shapes=("sqrt", "linear"), only=["h2-dk16-dv16-1x-linear-s1"]))
    B.write_note(tiny_plan(tmp_path, only=["h4-*"]))
    note = json.loads((tmp_path / "results" / "tiny_budgets" / ".budgets.json").read_text())
    assert note["shapes"] == ["sqrt", "linear"]
    assert "h2-dk16-dv16-1x-linear-s1" in note["planned"] and "h2-dk16-dv16-2x-linear-s1" not in note["planned"]


XEON = {"cpu": "Intel(R) Xeon(R) Processor", "cpu_class": "AVX512 + AMX (bf16 units)", "gpu": None}
EPYC = {"cpu": "AMD EPYC", "cpu_class": "AVX512 + AVX512-BF16 (bf16 units)", "gpu": None}


def trained_on(bp, trunk_name: str, machine: dict, sweep: str) -> None:
    """The plan's trunk `trunk_name` as finished on `machine`, shown as results/<sweep>/<its name>."""
    trunk = next(j for j in bp.trunks.jobs if j.name == trunk_name)
    config = _config([*bp.trunks.common, *trunk.overrides])
    assert experiment_key(config) == bp.keys[trunk.name]  # the run the plan would take over
    stored_run(bp.results / sweep / trunk.name, {"status": "complete", "config": config, "machine": machine})


def on_class(monkeypatch, machine: dict) -> None:
    monkeypatch.setattr("headsweep.sweeps.budget_plan.this_class", lambda on_gpu: machine["cpu_class"])


def test_a_trunk_the_store_holds_from_another_class_is_trained_again_here_under_its_own_identity(tmp_path, monkeypatch):
    """The base's trunk of another budgets sweep, trained on a Xeon: planned on the Xeon, it is shown (nothing
    trains); planned on an EPYC, every trunk and branch gets machine_class=<the EPYC's class>, so the trunk trains
    here under a key of its own, its branches continue it (their trunk key is the new one), and the plan says why.
    On the Xeon the plan is what it was: an old run's key never moves."""
    on_class(monkeypatch, XEON)
    xeon = tiny_plan(tmp_path)
    base = "h2-dk16-dv16-trunk-s1"
    trained_on(xeon, base, XEON, "other_budgets")

    again = tiny_plan(tmp_path)
    assert again.keys == xeon.keys and not again.notes
    assert next(j for j in again.trunks.jobs if j.name == base).same_as is not None

    on_class(monkeypatch, EPYC)
    epyc = tiny_plan(tmp_path)
    here = EPYC["cpu_class"]
    assert epyc.notes == [
        f"  the store's {base} trained on {XEON['cpu_class']}, and this machine is {here}: every trunk and branch "
        f"is planned under machine_class='{here}' (its own identity), so no cell here is read against another "
        "class's base"
    ]
    assert all(f["machine_class"] == here for f in epyc.flats.values())
    assert set(epyc.keys) == set(xeon.keys) and all(epyc.keys[n] != xeon.keys[n] for n in xeon.keys)
    assert not any(j.same_as or j.done for j in [*epyc.trunks.jobs, *epyc.branches.jobs])
    branch = next(j for j in epyc.branches.jobs if epyc.trunk_of[j.name].name == base)
    assert B._record(branch)["trunk"] == epyc.keys[base] != xeon.keys[base]
    assert f"machine_class='{here}'" in " ".join(epyc.trunks.common)

    # a later command on the EPYC, the class left unset: the sweep's own runs name it, so the same keys again
    trained_on(epyc, base, EPYC, "tiny_budgets")
    later = tiny_plan(tmp_path)
    assert later.keys == epyc.keys and next(j for j in later.trunks.jobs if j.name == base).done
    assert f"machine_class='{here}'" in " ".join(later.trunks.common)
    (tmp_path / "results" / "tiny_budgets" / base).unlink()

    # a cell alone on the EPYC still needs its class's base: planned under the class, and the line says select it
    lone = tiny_plan(tmp_path, only=["h4-*"])
    assert lone.keys == epyc.keys and lone.notes[0].endswith(f"the base's trunks are not selected ({base}, ...): "
                                                             "select them too")  # fmt: skip


def test_a_sweep_whose_own_base_trained_on_another_class_stops_a_run_here_in_one_line(tmp_path, monkeypatch):
    """results/<name>/ holds the base's trunk from a Xeon: on an EPYC, training the other cell into that sweep
    would read it against the Xeon's base; one line names the sweep, both classes and a name for this class's own."""
    on_class(monkeypatch, XEON)
    trained_on(tiny_plan(tmp_path), "h2-dk16-dv16-trunk-s1", XEON, "tiny_budgets")
    on_class(monkeypatch, EPYC)
    message = (
        r"^tiny_budgets's h2-dk16-dv16-trunk-s1 trained on AVX512 \+ AMX \(bf16 units\) and this machine is "
        r"AVX512 \+ AVX512-BF16 \(bf16 units\): .* \(NAME=tiny_budgets_avx512-bf16, its base first\)"
    )
    with pytest.raises(SweepError, match=message):
        tiny_plan(tmp_path, only=["h4-*"])
    on_class(monkeypatch, XEON)
    assert not tiny_plan(tmp_path, only=["h4-*"]).notes  # on the base's own class the cell plans as before
