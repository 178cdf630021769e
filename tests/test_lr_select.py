"""`make sweep LR_GRID=...`: a peak learning rate chosen per cell by seed 1's final val loss (lr_select):
the two phases' plans, the choice from synthetic results, seed 1 reused, bad input, the dry listing, the
report's section. No training: the launcher is faked as in test_sweep.py."""

import math
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from conftest import fake_run, needs_data, seen, stored_run, tiny_overrides, write_results
from headsweep import store
from headsweep.config import compose
from headsweep.reports.sweep.page import write_report
from headsweep.sweeps import launch as L
from headsweep.sweeps import lr_select as LR
from headsweep.sweeps import sweep as S
from headsweep.sweeps.jobs import Job
from headsweep.training.runs import is_complete

TINY = tiny_overrides(None, "logger.wandb.mode=offline")

GRID = [5e-4, 1e-3, 2e-3]
CELLS = ["h8-dk32-dv32-pos-sinusoidal", "h8-dk32-dv32-pos-learned"]  # table3_e's cells, the base first


@pytest.fixture
def no_launch(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("a job was launched")

    monkeypatch.setattr(L.subprocess, "run", fail)


def plan(tmp_path, seeds=2, grid=GRID, **kw):
    return LR.plan_lr("table3_e", seeds, [], grid, root=tmp_path / "mr", results=tmp_path / "results", **kw)


def finish(lr, job, val_loss, test_loss=2.0):
    """`job` finished as a run leaves results/<sweep>/<run>: its composed config, the two losses."""
    cfg = compose([*lr.grid_sweep.common, *job.overrides, f"run_name={job.name}", f"tags=[{','.join(job.tags)}]"])
    config = OmegaConf.to_container(cfg, resolve=False)
    config["module"]["model"] = config["model"]
    record = {"status": "complete", "config": config, "metrics": {"val/loss": val_loss, "test/loss": test_loss}}
    if job.export.parent.parent.name == "results":  # an export: into the store, with its view
        stored_run(job.export, record)
    else:  # the run directory
        write_results(job.export, record)


def grid_losses(lr, losses: dict[str, list[float]], **kw):
    for c in lr.cells:
        for v, loss in zip(GRID, losses[c.label]):
            finish(lr, c.grid_jobs[v], loss, **kw)


def test_phase_1_is_seed_1_of_every_cell_at_every_rate_and_composes(tmp_path):
    lr = plan(tmp_path)
    jobs = lr.grid_sweep.jobs
    assert [j.name for j in jobs] == [f"{c}-lr{v}-s1" for c in CELLS for v in ("0.0005", "0.001", "0.002")]
    job = jobs[4]  # pos-learned at 1e-3
    assert job.seed == 1 and job.cell == f"{CELLS[1]}-lr0.001" and not job.base and not jobs[0].base
    assert job.export == (tmp_path / "results" / "table3_e" / job.name).resolve()
    assert job.tags == ["row-E", f"cell-{CELLS[1]}-lr0.001", "lr-grid", "lr0.001"]
    assert "base" not in jobs[0].tags  # a grid run is no seed (nor base) of its cell for any reader of results/
    # the job file (what trains) composes the rate and its record
    L.write_jobs(lr.grid_sweep, [job])
    cfg = compose(
        [
            *lr.grid_sweep.common,
            f"hydra.searchpath=[file://{(lr.grid_sweep.dir / '.jobs').resolve()}]",
            f"+{L.JOB_GROUP}={job.name}",
        ]
    )
    assert cfg.module.peak_lr == 1e-3 and cfg.model.positions == "learned" and cfg.seed == 1
    assert OmegaConf.to_container(cfg.lr_select) == {"phase": "grid", "grid": GRID, "select_on": "val/loss"}
    assert "module.peak_lr" not in " ".join(lr.grid_sweep.common)  # per job, not common
    assert [c.default_lr for c in lr.cells] == [2e-3, 2e-3]  # conf/module's peak at d_model 256


def test_phase_2_takes_each_cells_lowest_val_loss_and_reuses_seed_1(tmp_path):
    lr = plan(tmp_path)
    assert LR.chosen_sweep(lr) == (LR.replace(lr.grid_sweep, jobs=[]), CELLS)  # nothing finished: both wait
    # test losses ranked the other way: the choice must not see them
    grid_losses(lr, {CELLS[0]: [2.40, 2.31, 2.35], CELLS[1]: [2.50, 2.45, 2.30]}, test_loss=9.0)
    chosen, waiting = LR.chosen_sweep(lr)
    assert waiting == []
    assert [j.name for j in chosen.jobs] == [f"{c}-s{s}" for s in (1, 2) for c in CELLS]  # seed-major
    rate = {
        j.name: float(next(o for o in j.overrides if o.startswith("module.peak_lr=")).split("=")[1])
        for j in chosen.jobs
    }
    assert rate == {f"{CELLS[0]}-s1": 1e-3, f"{CELLS[0]}-s2": 1e-3, f"{CELLS[1]}-s1": 2e-3, f"{CELLS[1]}-s2": 2e-3}
    s1 = {j.name: j for j in chosen.jobs}
    assert s1[f"{CELLS[0]}-s1"].same_as == lr.cells[0].grid_jobs[1e-3].export  # the selecting run: copied
    assert s1[f"{CELLS[1]}-s1"].same_as == lr.cells[1].grid_jobs[2e-3].export
    assert s1[f"{CELLS[0]}-s2"].same_as is None
    assert s1[f"{CELLS[0]}-s1"].base and s1[f"{CELLS[0]}-s1"].tags == [
        "row-E",
        f"cell-{CELLS[0]}",
        "base",
        "lr-chosen",
        "lr0.001",
    ]
    record = LR._record_of(s1[f"{CELLS[1]}-s2"])
    assert record == {
        "phase": "chosen",
        "grid": GRID,
        "select_on": "val/loss",
        "chosen": 2e-3,
        "default": 2e-3,
        "val_loss": [2.50, 2.45, 2.30],
        "grid_runs": [f"{CELLS[1]}-lr{v}-s1" for v in ("0.0005", "0.001", "0.002")],
    }


def test_ties_go_to_the_smaller_rate_and_a_diverged_run_loses():
    assert LR.choose({2e-3: 2.3, 1e-3: 2.3, 5e-4: 2.4}) == 1e-3
    assert LR.choose({1e-3: 2.3000004, 2e-3: 2.3}) == 1e-3  # within 1e-6: a tie
    assert LR.choose({1e-3: 2.31, 2e-3: 2.30}) == 2e-3
    assert LR.choose({5e-4: 2.9, 1e-3: math.inf, 2e-3: math.inf}) == 5e-4
    assert LR.choose({2e-3: math.inf, 1e-3: math.inf}) == 1e-3  # every rate diverged: the smallest


def test_a_cell_waits_while_one_of_its_grid_runs_is_missing_and_nan_counts_as_worst(tmp_path):
    lr = plan(tmp_path, seeds=1)
    finish(lr, lr.cells[0].grid_jobs[5e-4], 2.4)
    finish(lr, lr.cells[0].grid_jobs[1e-3], float("nan"))
    finish(lr, lr.cells[0].grid_jobs[2e-3], 2.6)
    finish(lr, lr.cells[1].grid_jobs[5e-4], 2.4)
    chosen, waiting = LR.chosen_sweep(lr)
    assert waiting == [CELLS[1]] and [j.name for j in chosen.jobs] == [f"{CELLS[0]}-s1"]
    assert LR._record_of(chosen.jobs[0])["chosen"] == 5e-4 and LR._record_of(chosen.jobs[0])["val_loss"][1] is None


def test_a_grid_run_its_time_cap_stopped_short_cannot_choose_and_says_how_to_finish_it(tmp_path, capsys, no_launch):
    """A grid run its time cap ended at step 1046 of its budget (its rate not yet decayed) is no full run: the sweep
    stops with one line naming it and the way to finish it, before it chooses anything."""
    lr = plan(tmp_path)
    grid_losses(lr, {CELLS[0]: [2.40, 2.31, 2.35], CELLS[1]: [2.50, 2.45, 2.30]})
    short = lr.cells[1].grid_jobs[2e-3].export  # the one that would win
    record = seen(short)
    cap, max_time = record["config"]["trainer"]["max_steps"], record["config"]["trainer"]["max_time"]
    record["metrics"]["train/steps"] = 1046
    write_results(short.resolve(), record)
    assert store.stopped_short(record) == f"stopped at step 1046 of {cap} by trainer.max_time {max_time}"
    assert store.stopped_short({**record, "metrics": {"train/steps": cap}}) is None
    args = ["--sweep", "table3_e", "--seeds", "2", "--lr-grid", "5e-4,1e-3,2e-3", "--dry"]
    assert S.main([*args, "--root", str(tmp_path / "mr"), "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{CELLS[1]}-lr0.002-s1" in err, err
    assert f"stopped at step 1046 of {cap}" in err and "longer ARGS=trainer.max_time" in err


@pytest.mark.parametrize(
    "grid, message",
    [
        ("0,1e-3", "--lr-grid 0,1e-3: 0 is not a learning rate > 0"),
        ("-1e-3,1e-3", "-1e-3 is not a learning rate > 0"),
        ("1e-3,fast", "'fast' is not a number"),
        ("1e-3", "a grid needs at least two different rates"),
        ("1e-3,0.001", "a grid needs at least two different rates"),
    ],
)
def test_a_bad_grid_stops_with_one_line_before_anything(tmp_path, capsys, no_launch, grid, message):
    assert (
        S.main(
            [
                "--sweep",
                "table3_e",
                f"--lr-grid={grid}",
                "--root",
                str(tmp_path / "mr"),
                "--results",
                str(tmp_path / "results"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "mr").exists()


def test_a_grid_with_a_spec_or_command_that_sets_the_rate_is_refused(tmp_path, capsys, no_launch):
    args = ["--lr-grid", "5e-4,1e-3", "--root", str(tmp_path / "mr"), "--results", str(tmp_path / "results")]
    assert S.main(["--sweep", "heads_fixed_dk_fp32_lr", *args]) == 2  # its cells' rates vary by the spec
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the spec sets module.peak_lr and --lr-grid chooses it per cell" in err
    assert S.main(["--sweep", "table3_e", *args, "module.peak_lr=1e-3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "override module.peak_lr=1e-3: --lr-grid sets module.peak_lr per job" in err
    assert not (tmp_path / "mr").exists()


def test_selection_on_a_test_split_cannot_be_asked_for(tmp_path, capsys, no_launch):
    # by construction: one number, the validation loss; no option names another
    assert LR.SELECT_ON == "val/loss"
    with pytest.raises(SystemExit):
        S.main(
            [
                "--sweep",
                "table3_e",
                "--lr-grid",
                "5e-4,1e-3",
                "--lr-select-on",
                "test/loss",
                "--root",
                str(tmp_path / "mr"),
            ]
        )
    assert "unknown option --lr-select-on" in capsys.readouterr().err
    assert not (tmp_path / "mr").exists()


def test_dry_lists_both_phases_and_runs_nothing(tmp_path, capsys, no_launch):
    args = [
        "--sweep",
        "table3_e",
        "--seeds",
        "2",
        "--lr-grid",
        "5e-4,1e-3,2e-3",
        "--dry",
        "--root",
        str(tmp_path / "mr"),
        "--results",
        str(tmp_path / "results"),
    ]
    assert S.main(args) == 0
    out = capsys.readouterr().out
    assert out.count("to run  ") == 6 and "waits for its grid runs (0 of 3 finished)" in out
    lr = plan(tmp_path)
    grid_losses(lr, {CELLS[0]: [2.40, 2.31, 2.35], CELLS[1]: [2.50, 2.45, 2.30]})
    assert S.main(args) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines() if line.startswith("  ")]
    assert [line[:2] for line in lines if line[0] == "done"] == [
        ["done", f"{c}-lr{v}-s1"] for c in CELLS for v in ("0.0005", "0.001", "0.002")
    ]
    assert [line[:2] for line in lines if line[0] == "shared"] == [["shared", f"{c}-s1"] for c in CELLS]
    assert [line[2] for line in lines if line[:2] == ["to", "run"]] == [f"{c}-s2" for c in CELLS]
    assert f"{CELLS[0]}: chosen module.peak_lr=0.001 (val/loss 0.0005: 2.4000, 0.001: 2.3100, 0.002: 2.3500" in out
    assert not (tmp_path / "mr").exists() and not (tmp_path / "results" / "table3_e" / f"{CELLS[0]}-s1").exists()


def test_one_command_runs_both_phases_then_nothing(tmp_path, monkeypatch, capsys):
    lr = plan(tmp_path)
    losses = {f"{CELLS[0]}-lr{v}-s1": x for v, x in zip(("0.0005", "0.001", "0.002"), (2.40, 2.31, 2.35))}
    losses |= {f"{CELLS[1]}-lr{v}-s1": x for v, x in zip(("0.0005", "0.001", "0.002"), (2.50, 2.45, 2.30))}
    launched = []

    def fake_multirun(cmd, **kwargs):  # every job finishes, as a run leaves its directory
        names = next(a for a in cmd if a.startswith(f"+{L.JOB_GROUP}=")).split("=", 1)[1].split(",")
        launched.append(names)
        jobs = {j.name: j for j in [*lr.grid_sweep.jobs, *LR.chosen_sweep(lr)[0].jobs]}
        for name in names:
            job = jobs[name]
            run = Job(**{**job.__dict__, "export": lr.grid_sweep.dir / name})  # finish() writes here
            finish(lr, run, losses.get(name, 2.2))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(L.subprocess, "run", fake_multirun)
    assert LR.run_lr(lr) == 0
    assert launched == [[j.name for j in lr.grid_sweep.jobs], [f"{c}-s2" for c in CELLS]]  # seed 1: not retrained
    results = tmp_path / "results" / "table3_e"
    copied = seen(results / f"{CELLS[1]}-s1")
    assert copied["shared_from"]["run"] == f"table3_e/{CELLS[1]}-lr0.002-s1"
    assert copied["config"]["lr_select"]["phase"] == "chosen" and copied["config"]["lr_select"]["chosen"] == 2e-3
    assert copied["config"]["module"]["peak_lr"] == 2e-3 and f"cell-{CELLS[1]}" in copied["config"]["tags"]
    trained = seen(results / f"{CELLS[0]}-s2")
    assert trained["config"]["lr_select"]["chosen"] == 1e-3 and trained["config"]["module"]["peak_lr"] == 1e-3
    grid_run = seen(results / f"{CELLS[0]}-lr0.001-s1")
    assert grid_run["config"]["lr_select"] == {"phase": "grid", "grid": GRID, "select_on": "val/loss"}
    assert all(is_complete(results / n) for n in [*losses, *(f"{c}-s{s}" for c in CELLS for s in (1, 2))])
    out = capsys.readouterr().out
    assert f"{CELLS[1]}-s1: the same experiment as" in out and "phase 2 of 2" in out
    # the two copies were shown with their selection, the trained jobs recorded it themselves: nothing to amend
    assert out.count("recorded its learning rate") == 0
    # the same command again (a fresh plan, as a rerun makes): nothing trains
    lr = plan(tmp_path)
    assert LR.run_lr(lr) == 0 and len(launched) == 2


def test_a_sweep_cut_short_in_phase_2_leaves_its_copied_views_recorded_as_chosen(tmp_path, monkeypatch):
    """Seed 1 at the chosen rate is a view of the grid run, shown before phase 2 trains; a session that ends
    while seeds 2-3 train (Ctrl-C here; a kill never reaches the end at all) must not leave that view reading
    as a grid run (lr_select of phase grid): the report and the next plan would see two grids."""
    lr = plan(tmp_path)
    grid_losses(lr, {CELLS[0]: [2.40, 2.31, 2.35], CELLS[1]: [2.50, 2.45, 2.30]})

    def ctrl_c(cmd, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(L.subprocess, "run", ctrl_c)
    assert LR.run_lr(plan(tmp_path)) == 130
    for cell, rate in ((CELLS[0], 1e-3), (CELLS[1], 2e-3)):
        view = seen(tmp_path / "results" / "table3_e" / f"{cell}-s1")
        assert view["config"]["lr_select"]["phase"] == "chosen" and view["config"]["lr_select"]["chosen"] == rate
        assert view["shared_from"]["run"] == f"table3_e/{cell}-lr{rate:g}-s1"


def test_report_shows_the_grid_the_choice_and_both_comparisons(tmp_path):
    root, data = tmp_path / "results", tmp_path / "data"
    data.mkdir()
    (data / "test_2016_flickr.en").write_text("a\n")  # the reference of fake_run's one hypothesis
    grid = "[0.001,0.002]"
    rows = {"h8-dk32-dv32": (2e-3, [2.30, 2.20], [33.0, 34.0]), "h4-dk64-dv64": (1e-3, [2.25, 2.40], [33.5, 31.0])}
    for cell, (chosen, val, bleu) in rows.items():
        heads = cell[1]
        tags = ",".join([f"cell-{cell}", *(["base"] if heads == "8" else [])])
        for v, loss, b in zip((1e-3, 2e-3), val, bleu):
            fake_run(
                root,
                "g",
                f"{cell}-lr{v:g}-s1",
                1,
                b,
                [
                    f"model.heads={heads}",
                    f"module.peak_lr={v}",
                    f"lr_select={{phase:grid,grid:{grid}}}",
                    f"tags=[cell-{cell}-lr{v:g},lr-grid]",
                    "sweep=g",
                    f"data.dir={data}",
                ],
                curve=f"step,val/loss\n229,3.5\n1149,{loss}\n",
                metrics={"test/bleu": b, "val/loss": loss},
                params={"total": 7_577_600},
            )
        for seed in (1, 2, 3):
            b = bleu[[1e-3, 2e-3].index(chosen)] if seed == 1 else 30.0 + seed + (heads == "8")
            fake_run(
                root,
                "g",
                f"{cell}-s{seed}",
                seed,
                b,
                [
                    f"model.heads={heads}",
                    f"module.peak_lr={chosen}",
                    "sweep=g",
                    f"tags=[{tags}]",
                    f"lr_select={{phase:chosen,grid:{grid},chosen:{chosen},default:0.002}}",
                    f"data.dir={data}",
                ],
                metrics={"test/bleu": b, "val/loss": 2.2},
                params={"total": 7_577_600},
            )
    # another sweep ran the base's experiment (seed 1) at 4e-3, past the grid's top, and did worse
    fake_run(
        root,
        "other",
        "h8-dk32-dv32-lr0.004-s1",
        1,
        20.0,
        ["model.heads=8", "module.peak_lr=0.004", "sweep=other", f"data.dir={data}"],
        metrics={"test/bleu": 20.0, "val/loss": 3.1},
        params={"total": 7_577_600},
    )
    paths = write_report("g", root, tmp_path / "reports", n_samples=10)
    md = paths[0].read_text()
    assert "6 runs (3 seeds per cell) in 2 cells" in md  # the 4 grid runs are no seeds of their cells
    assert "## Learning rate chosen per cell" in md
    assert "| h8-dk32-dv32 (base) | 2.3000 | **2.2000** | 0.002 | 0.002 |" in md
    assert "| h4-dk64-dv64 | **2.2500** | 2.4000 | 0.001 | 0.002 |" in md  # h = 4 chose 1e-3
    # at the default rate (2e-3, seed 1): h4 31.0 vs base 34.0; at the chosen: 33.5 vs 34.0; seeds 2..N: 32.5 vs 33.5
    assert "31.00 (-3.00)" in md and "33.50 (-0.50)" in md and "32.50 (-1.00) (n=2)" in md
    assert (tmp_path / "reports" / "g-lr.png").is_file()
    # with a grid of two rates every choice is an edge: the report says the optimum may lie beyond it, unless
    # a run past the edge in results/ did worse (the base's 4e-3 run of sweep `other`)
    assert (
        "**At the grid's edge: 1 of 2 cells** chose the smallest or the largest rate tried: h4-dk64-dv64 (0.001)." in md
    )
    assert (
        "- h8-dk32-dv32 chose 0.002, the grid's edge, at val loss 2.200; the same experiment and seed past that "
        "edge, run by another sweep in results/, did worse: 0.004 (val loss 3.100)."
    ) in md


def test_a_choice_inside_the_grid_is_said_and_one_at_its_edge_is_flagged():
    from headsweep.reports.sweep.lr import edge_lines

    grid = dict.fromkeys("abc", [5e-4, 1e-3, 2e-3])  # each cell's grid
    assert edge_lines({"a": 1e-3, "b": 1e-3}, grid) == [
        "- Every cell's chosen rate lies inside the grid (0.0005 to 0.002).",
        "",
    ]
    flagged = edge_lines({"a": 1e-3, "b": 2e-3, "c": 5e-4}, grid)[0]
    assert "2 of 3 cells" in flagged and "b (0.002)" in flagged and "c (0.0005)" in flagged and "a (" not in flagged
    # a run past b's edge that did worse brackets b; one past c's that did better keeps c flagged, and names it
    lines = edge_lines(
        {"a": 1e-3, "b": 2e-3, "c": 5e-4}, grid, {"b": {4e-3: 3.1}, "c": {2.5e-4: 2.0}}, {"a": 2.3, "b": 2.2, "c": 2.4}
    )
    assert "1 of 3 cells" in lines[0] and "c (0.0005) [past it, in results/: 0.00025 val loss 2.000]" in lines[0]
    assert (
        lines[1].startswith("- b chose 0.002, the grid's edge, at val loss 2.200;")
        and "0.004 (val loss 3.100)" in lines[1]
    )
    assert edge_lines({"b": 2e-3}, grid, {"b": {4e-3: 3.1}}, {"b": 2.2})[0] == (
        "- Every cell's chosen rate lies inside the grid (0.0005 to 0.002), "
        "or at its edge with a worse run past it (below)."
    )


def test_a_cell_chooses_within_its_own_grid_when_another_cell_s_grid_was_widened(tmp_path):
    """kv_heads_lr's shape: the base's grid was widened to 4e-3 by a later command, kv 4's never was. kv 4 chose
    among its own three rates (no "waits" for a 4e-3 run nobody planned), its row says which rate was not in
    its grid, and its choice at the top of its own grid is flagged as an edge, the base's 2e-3 is not."""
    from headsweep.reports.sweep.lr import cell_grids, edge_lines, grid_words

    root, data = tmp_path / "results", tmp_path / "data"
    data.mkdir()
    (data / "test_2016_flickr.en").write_text("a\n")
    losses = {
        "h8-dk32-dv32": {5e-4: 2.9, 1e-3: 2.4, 2e-3: 2.2, 4e-3: 3.1},
        "h4-dk64-dv64": {5e-4: 2.9, 1e-3: 2.4, 2e-3: 2.3},
    }
    for cell, rates in losses.items():
        heads = cell[1]
        for v, loss in rates.items():
            grid = "[0.0005,0.001,0.002,0.004]" if v == 4e-3 else "[0.0005,0.001,0.002]"
            fake_run(
                root,
                "g",
                f"{cell}-lr{v:g}-s1",
                1,
                30.0,
                [
                    f"model.heads={heads}",
                    f"module.peak_lr={v}",
                    f"lr_select={{phase:grid,grid:{grid}}}",
                    f"tags=[cell-{cell}-lr{v:g},lr-grid]",
                    "sweep=g",
                    f"data.dir={data}",
                ],
                curve=f"step,val/loss\n229,3.5\n1149,{loss}\n",
                metrics={"test/bleu": 30.0, "val/loss": loss},
                params={"total": 7_577_600},
            )
        tags = ",".join([f"cell-{cell}", *(["base"] if heads == "8" else [])])
        for seed in (1, 2):
            fake_run(
                root,
                "g",
                f"{cell}-s{seed}",
                seed,
                30.0,
                [
                    f"model.heads={heads}",
                    "module.peak_lr=0.002",
                    "sweep=g",
                    f"tags=[{tags}]",
                    "lr_select={phase:chosen,grid:[0.0005,0.001,0.002],chosen:0.002,default:0.002}",
                    f"data.dir={data}",
                ],
                metrics={"test/bleu": 30.0, "val/loss": 2.2},
                params={"total": 7_577_600},
            )
    md = write_report("g", root, tmp_path / "reports", n_samples=10)[0].read_text()
    assert "| h8-dk32-dv32 (base) | 2.9000 | 2.4000 | **2.2000** | 3.1000 | 0.002 | 0.002 |" in md
    assert "| h4-dk64-dv64 | 2.9000 | 2.4000 | **2.3000** | not in its grid | 0.002 | 0.002 |" in md
    assert "waits" not in md
    assert (
        "its grid (the cells' grids differ: 0.0005, 0.001, 0.002, 0.004 for h8-dk32-dv32; "
        "0.0005, 0.001, 0.002 for h4-dk64-dv64)"
    ) in md
    assert (
        "**At the grid's edge: 1 of 2 cells** chose the smallest or the largest rate tried: h4-dk64-dv64 (0.002)." in md
    )
    grids = {"a": [1e-3, 2e-3, 4e-3], "b": [5e-4, 1e-3, 2e-3]}
    assert edge_lines({"a": 2e-3, "b": 1e-3}, grids)[0] == "- Every cell's chosen rate lies inside its own grid."
    assert cell_grids({}) == {} and grid_words(["a"], {"a": [1e-3, 2e-3]}) == "the grid 0.001, 0.002"


@pytest.mark.slow  # three tiny trainings through the real Hydra multirun
@needs_data
def test_tiny_lr_grid_end_to_end(tmp_path, capsys, monkeypatch):
    """table3_e's learned-positions cell (--only), grid 1e-3, 2e-3, 2 seeds: 2 grid runs, the choice, 1 more run;
    every run records its rate's origin in its config; the same command again trains nothing."""
    cell = "h4-dk8-dv8-pos-learned"
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
        "2",
        "--lr-grid",
        "1e-3,2e-3",
        "--only",
        f"{cell}-*",
        *TINY,
        f"data.cache_dir={tmp_path / 'cache'}",
    ]
    assert S.main(args) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "2 done, 0 skipped" in out and "1 done, 1 skipped" in out  # phase 2: seed 1 copied, not trained
    results = tmp_path / "results" / "table3_e"
    runs = {p.name: seen(p) for p in results.glob("h*")}
    assert set(runs) == {f"{cell}-lr0.001-s1", f"{cell}-lr0.002-s1", f"{cell}-s1", f"{cell}-s2"}
    losses = {v: runs[f"{cell}-lr{v:g}-s1"]["metrics"]["val/loss"] for v in (1e-3, 2e-3)}
    best = min(losses, key=losses.get)
    for seed in (1, 2):
        cfg = runs[f"{cell}-s{seed}"]["config"]
        assert cfg["module"]["peak_lr"] == best and cfg["lr_select"]["chosen"] == best
        assert cfg["lr_select"]["val_loss"] == [losses[1e-3], losses[2e-3]] and f"lr{best:g}" in cfg["tags"]
    assert runs[f"{cell}-lr0.001-s1"]["config"]["lr_select"]["phase"] == "grid"
    assert runs[f"{cell}-s1"]["shared_from"]["run"] == f"table3_e/{cell}-lr{best:g}-s1"
    assert runs[f"{cell}-s1"]["metrics"] == runs[f"{cell}-lr{best:g}-s1"]["metrics"]
    paths = write_report("table3_e", tmp_path / "results", tmp_path / "reports", n_samples=10)
    assert "## Learning rate chosen per cell" in paths[0].read_text()
    monkeypatch.setattr(L.subprocess, "run", lambda *a, **k: pytest.fail("a finished job was launched again"))
    assert S.main(args) == 0


def test_a_wider_grid_run_for_some_cells_is_recorded_as_their_edge_extension_only(tmp_path, capsys):
    """Issue 54: the grid ran for both cells; a later command widens it to 4e-3 with ONLY picking one cell's edge
    run. That cell's grid becomes the wider one, recorded as an extension of the old; the other cell keeps the grid
    its runs were recorded under: it neither waits for a 4e-3 run it never needed nor is re-recorded with it."""
    lr = plan(tmp_path)
    grid_losses(lr, {CELLS[0]: [2.40, 2.31, 2.30], CELLS[1]: [2.50, 2.45, 2.35]})  # the base chose the edge
    wider = [*GRID, 4e-3]
    edge = f"{CELLS[0]}-lr0.004-s1"
    lr = plan(tmp_path, grid=wider, only=[edge])
    base, other = lr.cells
    assert (base.grid, base.extended_from) == (wider, GRID)
    assert (other.grid, other.extended_from) == (GRID, None)
    assert [j.name for j in lr.grid_sweep.jobs if not j.done] == [edge]  # the one job this command trains
    assert LR.chosen_sweep(lr)[1] == [CELLS[0]]  # only the widened cell waits, for its edge run
    assert LR._record_of(other.grid_jobs[1e-3])["grid"] == GRID
    finish(lr, base.grid_jobs[4e-3], 2.60)
    LR.record_selection(lr.grid_sweep, out=sys.stdout)
    results = tmp_path / "results" / "table3_e"
    widened = {"phase": "grid", "grid": wider, "select_on": "val/loss", "extended_from": GRID}
    assert seen(results / f"{CELLS[0]}-lr0.001-s1")["config"]["lr_select"] == widened
    kept = {"phase": "grid", "grid": GRID, "select_on": "val/loss"}
    assert all(seen(results / f"{CELLS[1]}-lr{v:g}-s1")["config"]["lr_select"] == kept for v in GRID)
    chosen, waiting = LR.chosen_sweep(lr)
    assert waiting == []
    records = {j.cell: LR._record_of(j) for j in chosen.jobs}
    assert records[CELLS[0]]["grid"] == wider and records[CELLS[0]]["chosen"] == 2e-3  # 4e-3 did worse
    assert records[CELLS[0]]["extended_from"] == GRID and len(records[CELLS[0]]["val_loss"]) == 4
    assert records[CELLS[1]]["grid"] == GRID and "extended_from" not in records[CELLS[1]]
    # the same wider command without ONLY plans every cell at every rate: the other cell's edge then too
    lr = plan(tmp_path, grid=wider)
    assert [c.grid for c in lr.cells] == [wider, wider] and lr.cells[1].extended_from == GRID


def _plain_runs(tmp_path, seeds, loss, names=None):
    """table3_e planned without a grid, its runs finished in the store ({job: store dir}); val loss `loss(cell)`;
    `names` renames views."""
    from headsweep.sweeps import planning

    plain = planning.plan("table3_e", seeds, [], root=tmp_path / "mr", results=tmp_path / "results")
    stored = {}
    for job in plain.jobs:
        cfg = compose([*plain.common, *job.overrides, f"run_name={job.name}", f"tags=[{','.join(job.tags)}]"])
        config = OmegaConf.to_container(cfg, resolve=False)
        config["module"]["model"] = config["model"]
        view = job.export.parent / (names or {}).get(job.name, job.name)
        record = {"status": "complete", "config": config, "metrics": {"val/loss": loss(job.cell)}}
        stored[job.name] = stored_run(view, record).resolve()
    return stored, config["module"]["peak_lr"]


def test_a_grid_over_a_sweep_first_planned_at_one_rate_uses_its_seeds_and_never_overwrites_them(
    tmp_path, monkeypatch, capsys
):
    """table3_e run at one rate (2 seeds a cell), then a grid under the same name: each cell's plain seed 1 is the
    grid's run at that rate (not trained again). A cell whose grid chooses that rate keeps its plain seeds; one
    whose grid chooses another waits, its plain seed 2 never overwritten, until the line's command takes that view
    away (the run stays in the store); then its plain seed 1 gives way to the chosen grid run and seed 2 trains."""
    from headsweep.store.__main__ import main as store_main

    stored, rate = _plain_runs(tmp_path, 2, lambda cell: 2.35 if cell == CELLS[0] else 2.30)
    grid, half = [rate / 2, rate], f"{rate / 2:g}"
    losses = {f"{CELLS[0]}-lr{half}-s1": 2.20, f"{CELLS[1]}-lr{half}-s1": 2.50}  # cell 0 wants rate / 2
    launched = []

    def fake_multirun(cmd, **kwargs):
        names = next(a for a in cmd if a.startswith(f"+{L.JOB_GROUP}=")).split("=", 1)[1].split(",")
        launched.append(names)
        fresh = plan(tmp_path, seeds=2, grid=grid)
        jobs = {j.name: j for j in [*fresh.grid_sweep.jobs, *LR.chosen_sweep(fresh)[0].jobs]}
        for name in names:
            finish(fresh, Job(**{**jobs[name].__dict__, "export": fresh.grid_sweep.dir / name}), losses.get(name, 2.2))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(L.subprocess, "run", fake_multirun)
    lr = plan(tmp_path, seeds=2, grid=grid)
    assert [c.grid_jobs[rate].same_as is not None for c in lr.cells] == [True, True]  # the plain seed 1s: adopted
    assert LR.run_lr(lr) == 1  # cell 0 waits on its plain seed 2
    assert launched == [[f"{c}-lr{half}-s1" for c in CELLS]]  # only the new rate trained
    results = tmp_path / "results" / "table3_e"

    def real(name):
        return (results / name).resolve()

    assert [real(f"{c}-lr{rate:g}-s1") for c in CELLS] == [stored[f"{c}-s1"] for c in CELLS]
    # cell 1 chose the plain rate: its plain seeds are its chosen seeds, with the selection
    assert seen(results / f"{CELLS[1]}-s2")["config"]["lr_select"]["chosen"] == rate
    assert real(f"{CELLS[1]}-s2") == stored[f"{CELLS[1]}-s2"]
    # cell 0 chose rate / 2: its plain views untouched, one line naming the view and the command
    assert [real(f"{CELLS[0]}-s{k}") for k in (1, 2)] == [stored[f"{CELLS[0]}-s{k}"] for k in (1, 2)]
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(f"  {CELLS[0]}: waits"))
    assert f"{CELLS[0]}-s2 trained at {rate:g} before the grid, which chose {half}" in line
    command = line.split("python -m headsweep.store ", 1)[1].split()
    assert command == ["unshow", str(results / f"{CELLS[0]}-s2")]
    assert store_main(command) == 0
    assert "shown by no sweep now" in capsys.readouterr().out
    assert (stored[f"{CELLS[0]}-s2"] / "results.json").is_file()  # the run stays in the store
    # the same command again: seed 1 gives way to the chosen grid run (the plain run stays shown as its grid
    # run at its rate), seed 2 trains at rate / 2
    assert LR.run_lr(plan(tmp_path, seeds=2, grid=grid)) == 0
    assert launched[1:] == [[f"{CELLS[0]}-s2"]]
    assert real(f"{CELLS[0]}-s1") == real(f"{CELLS[0]}-lr{half}-s1")
    assert real(f"{CELLS[0]}-lr{rate:g}-s1") == stored[f"{CELLS[0]}-s1"]
    assert seen(results / f"{CELLS[0]}-s2")["config"]["module"]["peak_lr"] == rate / 2
    assert f"{CELLS[0]}-s1: gave way to the chosen rate's grid run" in capsys.readouterr().out
    assert LR.run_lr(plan(tmp_path, seeds=2, grid=grid)) == 0 and len(launched) == 2  # then nothing


def test_a_grid_run_the_sweep_shows_under_another_name_is_refused_in_one_line(tmp_path):
    """A run the grid would show as <cell>-lr<v>-s1 that the sweep already shows under a name other than its
    cell's plain seed view would be counted twice by its page: one line; under another sweep name it is shared."""
    _, rate = _plain_runs(tmp_path, 1, lambda cell: 2.3, names={f"{CELLS[0]}-s1": f"{CELLS[0]}-copy-s1"})
    with pytest.raises(LR.SweepError) as e:
        plan(tmp_path, seeds=1, grid=[rate / 2, rate])
    assert str(e.value).count("\n") == 0
    assert f"table3_e already shows {CELLS[0]}-copy-s1, the experiment of grid run {CELLS[0]}-lr{rate:g}-s1" in str(
        e.value
    )
    assert "NAME=table3_e_edge" in str(e.value)
    lr = plan(tmp_path, seeds=1, grid=[rate / 2, rate], name_as="table3_e_edge")
    shared = lr.cells[0].grid_jobs[rate]
    assert shared.same_as is not None and shared.export.parent.name == "table3_e_edge"
    assert lr.cells[0].grid_jobs[rate / 2].same_as is None  # the other rate trains
