"""Stuck runs and the convergence check of `make report` (report_stuck, report_convergence): a run stuck on an
early plateau is flagged and kept, each cell shown with and without its stuck runs, a cell whose seeds disagree
named, the threshold rule on known numbers and on the shipped runs, a bad --stuck-threshold refused in one
line before anything is written, and the last third's share of the val-loss drop by hand."""

import gzip
import os
import statistics
from pathlib import Path

import pytest

from headsweep.reports import build as B
from headsweep.reports.sweep import page as R
from headsweep.reports.sweep import stuck as S
from headsweep.reports.sweep import stuck_words as W
from headsweep.reports.sweep import summary as N
from headsweep.reports.sweep.convergence import last_third_share
from test_report import CELLS, REFS, make_run, write_curve

# Val loss at the validation nearest 40% of max_steps 800 (step 400: 320 is 80 from it, 120 from 200), and the
# test BLEU, per (h, seed). The base's median there is 3.25; h4's seed 3 sits 0.65 above it, the rest within 0.1.
EARLY = {
    (8, 1): (3.20, 30.0),
    (8, 2): (3.25, 32.0),
    (8, 3): (3.30, 31.0),
    (4, 1): (3.30, 29.0),
    (4, 2): (3.35, 28.0),
    (4, 3): (3.90, 20.0),
    (2, 1): (3.10, 33.0),
    (2, 2): (3.20, 32.5),
}


@pytest.fixture
def sweep_root(tmp_path):
    """results/table3_a with a base (h8), a cell with one stuck seed (h4) and one with none (h2)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "test.en").write_text("".join(r + "\n" for r in REFS))
    root = tmp_path / "results"
    for (h, seed), (early, bleu) in EARLY.items():
        run = make_run(root / "table3_a", data, h, seed, bleu, CELLS[h]["hyps"])
        # validations at 200, 400, 600, 800; a stuck run stays high, then falls late
        write_curve(
            run, {200: (5.0, early + 0.8), 400: (10.0, early), 600: (20.0, early - 0.5), 800: (25.0, early - 0.7)}
        )
    return root


def cells_of(root):
    runs, _ = R.load_runs(root / "table3_a")
    cells = R.group_cells(runs)
    N.summarize(cells, n_samples=20)
    return cells, {c.label: c for c in cells}


def test_the_stuck_seed_is_flagged_and_the_cell_shown_with_and_without_it(sweep_root):
    cells, by = cells_of(sweep_root)
    info = R.stuck_runs(cells, sweep_root, None, None)
    early = info["early"]
    h4 = by["h4-dk64-dv64"]
    stuck_run = next(r for r in h4.runs if r.seed == 3)
    assert early[stuck_run.dir].step == 400
    assert early[stuck_run.dir].reference_median == pytest.approx(3.25)
    assert early[stuck_run.dir].excess == pytest.approx(0.65)
    # at the end (step 800) every fixture curve sits 0.7 below its early value: the gap stays 0.65
    assert early[stuck_run.dir].end_excess == pytest.approx((3.90 - 0.7) - statistics.median([2.50, 2.55, 2.60]))
    # the tiny pool has no gap above its floor with 3 runs beyond: the shipped value, said so
    assert info["threshold"].how == "shipped" and info["threshold"].value == S.SHIPPED_THRESHOLD
    assert h4.row["stuck_seeds"] == [3]
    assert by["h8-dk32-dv32"].row["stuck_seeds"] == [] and by["h2-dk128-dv128"].row["stuck_seeds"] == []
    assert [c.label for c in S.disagreeing(cells)] == ["h4-dk64-dv64"]
    # with and without, computed here from the fixture's numbers
    every, kept = [29.0, 28.0, 20.0], [29.0, 28.0]
    assert h4.row["bleu_all"] == pytest.approx((statistics.fmean(every), statistics.stdev(every)))
    assert h4.row["bleu_kept"] == pytest.approx((statistics.fmean(kept), statistics.stdev(kept)))
    assert h4.row["n_kept"] == 2
    # no silent exclusion: the table's mean is every run's
    assert h4.row["test_bleu"] == pytest.approx(statistics.fmean(every))


def test_a_slow_learner_is_told_from_a_plateau_by_its_gap_at_the_end(sweep_root):
    """A flagged run whose gap to the base closes by the end (P_drop 0.2 at the ablation budget) reads
    differently from one that keeps it: the gap at the last validation is reported beside the early one."""
    cells, by = cells_of(sweep_root)
    slow = next(r for r in by["h4-dk64-dv64"].runs if r.seed == 3)
    # the same early value, then it catches up: 0.1 above the base's median end loss (2.55)
    write_curve(slow.dir, {200: (5.0, 4.70), 400: (10.0, 3.90), 600: (20.0, 3.00), 800: (25.0, 2.65)})
    cells, by = cells_of(sweep_root)
    info = R.stuck_runs(cells, sweep_root, None, None)
    e = info["early"][next(r for r in by["h4-dk64-dv64"].runs if r.seed == 3).dir]
    assert e.excess == pytest.approx(0.65) and e.end_excess == pytest.approx(0.10)
    assert S.gap_words(e) == "+0.650 at step 400, +0.100 at the end"
    assert S.gap_words(e, step=False) == "+0.650, +0.100 at the end"


def test_report_names_the_stuck_run_and_the_disagreeing_cell(sweep_root, tmp_path):
    out = tmp_path / "reports"
    md = R.write_report("table3_a", sweep_root, out, n_samples=20)[0].read_text()
    assert (
        "- 1 run stuck on an early plateau (early val loss more than 0.364 above the base's median; column "
        "'stuck'); kept in every number, shown without them under Stuck runs; seeds disagree in h4-dk64-dv64." in md
    )
    assert "## Stuck runs" in md and "(step 400)" in md
    assert (
        "- Stuck (1 of 8 runs checked; each with its gap to the reference early and at the end, which a plateau "
        "keeps and a slower learner narrows): `h4-dk64-dv64-s3` 3.900 at step 400 (+0.650, +0.650 at the end), "
        "test BLEU 20.00." in md
    )
    assert (
        "- Seeds disagree (some stuck, some not), so the cell's mean mixes two outcomes: h4-dk64-dv64 "
        "(stuck: seed 3 of 3)." in md
    )
    assert "the runs here cannot support the rule (no such gap)" in md
    every, kept = [29.0, 28.0, 20.0], [29.0, 28.0]
    base = statistics.fmean([30.0, 32.0, 31.0])
    row = (
        f"| h4-dk64-dv64 | 1 of 3 | s3 | {statistics.fmean(every):.2f} ± {statistics.stdev(every):.2f} (n = 3) | "
        f"{statistics.fmean(kept):.2f} ± {statistics.stdev(kept):.2f} (n = 2) | "
        f"{statistics.fmean(kept) - base:+.2f} |"
    )
    assert row in md
    # the main table keeps every run and marks the cell
    assert (
        "| stuck |" in md.splitlines()[next(i for i, line in enumerate(md.splitlines()) if line.startswith("| cell"))]
    )
    assert f"| {statistics.fmean(every):.2f} ± {statistics.stdev(every):.2f} | 1 of 3 |" in md
    assert "seed 3 3.900 at step 400 (+0.650) STUCK" in md  # the cell's details
    # convergence: every fixture curve is early + 0.8, early, early - 0.5, early - 0.7 at steps 200..800; at
    # 2/3 of 800 (533.3) early - 0.333, so each run's share of its drop of 1.5 is (0.7 - 0.333) / 1.5 = 0.244
    share = (0.7 - 0.5 * (800 * 2 / 3 - 400) / 200) / 1.5
    assert share == pytest.approx(0.2444, abs=1e-4)
    assert (
        f"a median {share:.0%} of each run's val-loss drop" in md
        and f"range {share:.0%} to {share:.0%} over 8 runs" in md
    )
    assert "**Not converged: differences may be speeds of learning.**" in md
    assert "Kendall's tau" in md.split("## Is the budget long enough?")[1]


def test_a_given_threshold_is_used_and_stated(sweep_root, tmp_path):
    md = R.write_report("table3_a", sweep_root, tmp_path / "r", n_samples=20, stuck_threshold=0.09)[0].read_text()
    # h4 seed 2 is 0.10 above the base's median, seed 1 0.05: at 0.09 seeds 2 and 3 are stuck
    assert "threshold 0.090, given with --stuck-threshold" in md
    assert "- 2 runs stuck on an early plateau" in md and "h4-dk64-dv64 (stuck: seeds 2, 3 of 3)" in md


def test_threshold_rule_on_known_numbers():
    base = [-0.02, 0.0, 0.02]  # sd 0.02, median 0: floor 0 + 5 x 0.02 = 0.1
    pooled = base + [0.05, 0.12, 0.2, 0.25, 0.5, 0.55, 0.6, 0.9]
    t = S.choose_threshold(pooled, base, n_sweeps=2)
    # above the floor: 0.12 0.2 0.25 0.5 0.55 0.6 0.9; 0.6 -> 0.9 is widest but leaves one run above it,
    # 0.55 -> 0.6 two: the widest of the rest is 0.25 -> 0.5
    assert t.how == "data" and t.seed_sd == pytest.approx(0.02) and t.floor == pytest.approx(0.1)
    assert t.gap == pytest.approx((0.25, 0.5)) and t.value == pytest.approx(0.375)
    assert (t.n_runs, t.n_base, t.n_sweeps) == (11, 3, 2)
    assert S.choose_threshold(pooled, [0.0]).how == "shipped"  # one base run: no seed spread
    assert S.choose_threshold(base + [0.5, 0.6], base).value == S.SHIPPED_THRESHOLD  # no gap with 3 above


def test_a_new_sweep_does_not_move_an_old_sweeps_flags(sweep_root, monkeypatch):
    """The threshold is chosen on the calibration sweeps where the results folder holds them: a later sweep of
    slow cells (row C's N 4 moved it from 0.353 to 0.576 when every run was pooled) changes no earlier flag."""
    import json
    import shutil

    later = sweep_root / "table3_c"
    for run in (sweep_root / "table3_a").iterdir():
        h = int(run.name[1 : run.name.index("-")])
        seed = int(run.name.rsplit("-s", 1)[1])
        shutil.copytree(run, later / run.name)
        path = later / run.name / "results.json"
        results = json.loads(path.read_text())
        results["sweep"] = results["config"]["sweep"] = later.name
        if h != 8:  # the base is shared: the same runs, pooled once
            # every other cell of the later sweep trains slowly: 1.26-1.78 above its base at step 400
            early = (5.0 if h == 4 else 4.5) + seed / 100
            write_curve(later / run.name, {200: (5.0, early + 0.8), 400: (10.0, early), 800: (25.0, early - 0.7)})
            results["metrics"]["test/bleu"] = 10.0 + seed
        path.write_text(json.dumps(results))

    def h4_seed3_flagged() -> tuple[bool, float]:
        cells, by = cells_of(sweep_root)
        info = R.stuck_runs(cells, sweep_root, None, None)
        return by["h4-dk64-dv64"].row["stuck_seeds"] == [3], info["threshold"].value

    # the fallback control: everything pooled, the later sweep's runs open a gap 0.65 -> 1.26 and h4 seed 3 of
    # the earlier sweep (+0.65) is no longer flagged
    monkeypatch.setattr(S, "CALIBRATION_SWEEPS", ("absent",))
    assert h4_seed3_flagged() == (False, pytest.approx((0.65 + 1.26) / 2))
    # the earlier sweep as the calibration set: its own rule (no gap: the shipped value), whatever lands later
    monkeypatch.setattr(S, "CALIBRATION_SWEEPS", ("table3_a",))
    pool = N.early_pool(sweep_root)
    assert pool["calibration"]["n_sweeps"] == 1 and len(pool["runs"]) == 13  # 8 + the later sweep's 5 slow runs
    assert N.pooled_threshold(pool).calibration
    assert h4_seed3_flagged() == (True, S.SHIPPED_THRESHOLD)


def test_the_rule_on_the_shipped_runs_gives_the_documented_threshold_and_the_issues_stuck_runs():
    """Issue 42 counted 20 stuck runs of 112: every kv 1 and kv 2 run, every h = 1 run at d_model 512 (against
    the base at that width), three of six h = 32 / d_k = 32 runs, two head-dropout-0.2 runs. The shipped
    sweeps whose runs were complete when the rule was chosen (heads_fixed_dk_fp32_lr was still landing seeds)."""
    root = Path(__file__).resolve().parents[1] / "results"
    sweeps = [
        "fixed_heads",
        "heads_budget_2x",
        "heads_budget_2x_fp32",
        "heads_by_width",
        "heads_by_width_512_fp32",
        "heads_fixed_dk",
        "heads_fixed_dk_fp32",
        "heads_specialise",
        "kv_heads",
        "table3_a",
        "table3_b",
    ]
    if not all((root / s).is_dir() for s in sweeps):
        pytest.skip("the shipped results are not in this checkout")
    pool = N.early_pool(root, sweeps)
    t = S.choose_threshold(pool["excesses"], pool["base_excesses"], pool["n_sweeps"])
    assert t.how == "data" and t.value == pytest.approx(S.SHIPPED_THRESHOLD, abs=5e-4)
    assert t.gap == pytest.approx((0.337, 0.391), abs=5e-4) and t.seed_sd == pytest.approx(0.029, abs=5e-4)
    stuck = sorted(name for name, x in zip(pool["runs"], pool["excesses"]) if x > t.value)
    kv = [
        f"kv_heads/h8-dk32-dv32-ff{ff}-kv{kv}-s{s}"
        for ff, kv in ((1024, 1), (1024, 2), (1313, 2), (1361, 1))
        for s in (1, 2, 3)
    ]
    assert stuck == sorted(
        kv
        + [f"heads_by_width/h1-dk512-dv512-dm512-ff2048-s{s}" for s in (1, 2, 3)]
        + [
            "heads_fixed_dk/h32-dk32-dv32-s3",
            "heads_fixed_dk_fp32/h32-dk32-dv32-s1",
            "heads_fixed_dk_fp32/h32-dk32-dv32-s3",
            "heads_specialise/h8-dk32-dv32-head_dropout0.2-s1",
            "heads_specialise/h8-dk32-dv32-head_dropout0.2-s2",
        ]
    )


def test_a_bad_stuck_threshold_is_one_line_and_writes_nothing(sweep_root, tmp_path, capsys):
    out = tmp_path / "reports"
    for bad in (
        ["--stuck-threshold", "0"],
        ["--stuck-threshold", "10"],
        ["--stuck-threshold=-1"],
        ["--stuck-threshold", "nan"],
        ["--stuck-threshold", "inf"],
        ["--stuck-threshold", "abc"],
    ):
        assert B.main(["--sweep", "table3_a", "--root", str(sweep_root), "--out", str(out), *bad]) == 2, bad
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: --stuck-threshold: got ") and "between 0 and 10" in err
        assert not out.exists()
    with pytest.raises(R.ReportError, match="--stuck-threshold: got 12"):  # the function refuses it as well
        R.write_report("table3_a", sweep_root, out, stuck_threshold=12)
    assert not out.exists()


def test_last_third_share_by_hand(sweep_root):
    runs, _ = R.load_runs(sweep_root / "table3_a")
    run = runs[0]
    write_curve(run.dir, {200: (1.0, 5.0), 400: (2.0, 4.0), 600: (3.0, 3.0), 800: (4.0, 2.5)})
    # two thirds of 800 is 533.3: 4.0 - (133.3 / 200) x 1.0 = 3.333 there; (3.333 - 2.5) / (5.0 - 2.5) = 1/3
    got = last_third_share(run)
    assert got["share"] == pytest.approx(1 / 3) and (got["first"], got["last"]) == (200, 800)
    write_curve(run.dir, {200: (1.0, 5.0)})
    assert last_third_share(run) is None  # one validation: nothing to say


def test_a_learning_rate_grids_runs_are_not_pooled_for_the_threshold():
    """At a small peak rate a grid run starts slowly by design (kv_heads_lr's base at 5e-4 sits ~0.7 above the
    base at step 460): pooled, such runs moved the threshold from 0.313 to 0.667. They are no seeds of a cell."""
    root = Path(__file__).resolve().parents[1] / "results"
    if not (root / "kv_heads_lr").is_dir():
        pytest.skip("the shipped results are not in this checkout")
    assert any("-lr0.0005-" in p.name for p in (root / "kv_heads_lr").iterdir())  # the grid runs are there
    pool = N.early_pool(root, ["kv_heads_lr"])
    assert pool["runs"] and not any("-lr0." in name for name in pool["runs"])
    assert len(pool["runs"]) == len(
        {os.path.realpath(p) for p in (root / "kv_heads_lr").iterdir() if p.is_dir() and "-lr0." not in p.name}
    )  # each chosen-rate run once


def at_rate(run: Path, rate: float, **config) -> None:
    """Rewrite a fixture run's results.json: its peak rate, and any other config keys."""
    import json

    path = run / "results.json"
    results = json.loads(path.read_text())
    results["config"]["module"]["peak_lr"] = rate
    results["config"].update(config)
    if "run_name" in config:
        results["run_name"] = config["run_name"]
    path.write_text(json.dumps(results))


def test_a_run_at_another_rate_is_compared_with_the_base_at_that_rate(sweep_root, tmp_path):
    """Issue 54: h4 chose 1e-3 and the base 2e-3. Its early loss is compared with the base's LR-grid run at
    1e-3 (early loss 3.60, a slower start at the lower rate), not with the base's seeds at 2e-3 (median 3.25),
    and the report names the reference; without a base run at 1e-3 it falls back to the base's rate, said so."""
    import shutil

    sweep = sweep_root / "table3_a"
    for seed in (1, 2, 3):
        at_rate(sweep / f"h4-dk64-dv64-s{seed}", 1e-3)
    for seed in (1, 2, 3):  # the base at its chosen rate 2e-3 (make_run's default), the rest at 2e-3 too
        at_rate(sweep / f"h8-dk32-dv32-s{seed}", 2e-3)
    for seed in (1, 2):
        at_rate(sweep / f"h2-dk128-dv128-s{seed}", 2e-3)

    def cells_and_grid():
        runs, _ = R.load_runs(sweep)
        runs, grid = R.split_grid_runs(runs)
        cells = R.group_cells(runs)
        N.summarize(cells, n_samples=20)
        return cells, {c.label: c for c in cells}, grid

    cells, by, grid = cells_and_grid()
    assert grid == []
    early = R.stuck_runs(cells, sweep_root, None, None, grid)["early"]
    h4 = {r.seed: early[r.dir] for r in by["h4-dk64-dv64"].runs}
    assert h4[1].reference == "h8-dk32-dv32 (at lr 0.002; none at 0.001)"  # no base run at 1e-3: the base's own
    assert h4[1].reference_median == pytest.approx(3.25)

    grid_run = sweep / "h8-dk32-dv32-lr0.001-s1"
    shutil.copytree(sweep / "h8-dk32-dv32-s1", grid_run)
    name = "h8-dk32-dv32-lr0.001-s1"
    record = {"phase": "grid", "grid": [0.001, 0.002], "select_on": "val/loss"}
    at_rate(grid_run, 1e-3, run_name=name, tags=["row-A", "cell-h8-dk32-dv32-lr0.001"], lr_select=record)
    write_curve(grid_run, {200: (4.0, 4.4), 400: (8.0, 3.60), 600: (18.0, 3.1), 800: (24.0, 2.9)})

    cells, by, grid = cells_and_grid()
    assert [r.dir.name for r in grid] == [name]
    info = R.stuck_runs(cells, sweep_root, None, None, grid)
    early = info["early"]
    h4 = {r.seed: early[r.dir] for r in by["h4-dk64-dv64"].runs}
    assert {e.reference for e in h4.values()} == {"h8-dk32-dv32 at lr 0.001"}
    assert [round(e.excess, 6) for e in h4.values()] == [round(x - 3.60, 6) for x in (3.30, 3.35, 3.90)]
    assert by["h4-dk64-dv64"].row["stuck_seeds"] == []  # 3.90 is 0.30 above the base at its rate: not stuck
    h2 = {e.reference for r in by["h2-dk128-dv128"].runs for e in [early[r.dir]]}
    assert h2 == {"h8-dk32-dv32"}  # at the base's own rate: the base's seeds
    md = R.write_report("table3_a", sweep_root, tmp_path / "reports", n_samples=20)[0].read_text()
    assert "against h8-dk32-dv32 at lr 0.001's median 3.600" in md


def test_early_loss_against_bleu_pooled_over_every_sweep_is_on_the_index_and_each_page_keeps_its_own(
    sweep_root, tmp_path
):
    """The pooled Pearson r over every sweep's runs changes whenever any sweep's run lands, so it lives on the index
    (rewritten by every `make report`); a sweep's page states its own runs' r only. Both against the stdlib's
    Pearson over the fixture's (early loss, BLEU) pairs, and the pooled one grows with a second sweep's runs."""
    out = tmp_path / "reports"
    assert B.main(["--sweep", "table3_a", "--root", str(sweep_root), "--out", str(out), "--samples", "20"]) == 0
    own = statistics.correlation([e for e, _ in EARLY.values()], [b for _, b in EARLY.values()])
    page = (out / "table3_a.md").read_text()
    assert f"over this sweep's {len(EARLY)} runs: r = {own:.2f}" in page
    assert "distinct runs in results/" not in page
    index = (out / "index.md").read_text()
    pooled_words = "distinct runs in results/ (every sweep's, with a page or not): r ="
    assert f"over the {len(EARLY)} {pooled_words} {own:.2f}" in index
    # a second sweep lands: table3_a's runs again (pooled once), but its h 2 starts slowly and ends low. The index's
    # pool counts those two new runs; table3_a's page is as it was
    import json
    import shutil

    later = {(2, 1): (4.40, 12.0), (2, 2): (4.30, 14.0)}
    for run in (sweep_root / "table3_a").iterdir():
        shutil.copytree(run, sweep_root / "table3_c" / run.name)
        path = sweep_root / "table3_c" / run.name / "results.json"
        results = json.loads(path.read_text())
        results["sweep"] = results["config"]["sweep"] = "table3_c"
        key = (int(run.name[1 : run.name.index("-")]), int(run.name.rsplit("-s", 1)[1]))
        if key in later:
            early, results["metrics"]["test/bleu"] = later[key]
            write_curve(path.parent, {200: (5.0, early + 0.8), 400: (10.0, early), 800: (25.0, early - 0.7)})
        path.write_text(json.dumps(results))
    assert B.main(["--sweep", "table3_c", "--root", str(sweep_root), "--out", str(out), "--samples", "20"]) == 0
    both = [*EARLY.values(), *later.values()]
    pooled = statistics.correlation([e for e, _ in both], [b for _, b in both])
    index = (out / "index.md").read_text()
    assert f"over the {len(both)} {pooled_words} {pooled:.2f}" in index and pooled != own
    assert (out / "table3_a.md").read_text() == page
    # make table3-report writes the index too: the same line, not an index without it
    from headsweep.reports.pages import table3 as T

    assert T.main(["--root", str(sweep_root), "--out", str(out)]) == 0
    assert f"over the {len(both)} {pooled_words} {pooled:.2f}" in (out / "index.md").read_text()


def test_a_size_cell_read_against_its_own_seeds_says_what_that_can_and_cannot_catch():
    """Row C's N 4 has no base of its size: its reference is itself, so its excess is scatter around its own
    median. The words must not read like a check against the base (a whole cell on a plateau would pass), and one
    seed against itself is no check at all."""
    from types import SimpleNamespace

    def cell(label, losses, base=False):
        early = [
            (s, S.Early(460, x, label, statistics.median(losses), x - statistics.median(losses)), None)
            for s, x in enumerate(losses, 1)
        ]
        return SimpleNamespace(label=label, base=base, row={"early": early})

    three = S.early_words(cell("N4", [2.80, 2.79, 3.30]), 0.364)
    assert "against its own seeds' median 2.800 (it is its size's reference" in three and "+0.500) STUCK" in three
    assert "no base to check it against net of its final gap, so a cell stuck whole does not show" in three
    one = S.early_words(cell("N4", [2.797]), 0.364)
    assert "against itself (its size's reference, one seed)" in one
    base = S.early_words(cell("base", [2.74, 2.73], base=True), 0.364)
    assert "against base's median 2.735" in base  # the base against its own seeds is the rule itself


def test_a_size_cell_stuck_whole_shows_against_the_base_net_of_its_final_gap(tmp_path):
    """Row C's sizes have no base of their size, so against their own median a cell whose every seed sat on a
    plateau passes. Against the base net of the final gap it shows: N 4 starts 0.6 above the base at step 460 and
    ends 0.1 above it (net +0.5, stuck, every seed); N 1 is 0.4 above throughout (a smaller model, net 0)."""
    from test_table3 import REFS as T3_REFS
    from test_table3 import fake_run

    data = tmp_path / "data"
    data.mkdir()
    with gzip.open(data / "test.en.gz", "wt", encoding="utf-8") as f:
        f.write("".join(r + "\n" for r in T3_REFS))
    root = tmp_path / "results"
    sweep = "table3_c_start"
    for seed in (1, 2, 3):
        fake_run(root, data, sweep, "h8-N3", [], seed, 30.0 + seed / 10, base=True, early=3.0 + seed / 100)
        fake_run(root, data, sweep, "h8-N4", ["model.n_layers=4"], seed, 28.0, early=3.6 + seed / 100, drop=1.2)
        fake_run(root, data, sweep, "h8-N1", ["model.n_layers=1"], seed, 27.0, early=3.4 + seed / 100)
    runs, _ = R.load_runs(root / sweep, sweep)
    cells = R.group_cells(runs)
    by = {c.label: c for c in cells}
    info = R.stuck_runs(cells, root, 0.364, None)
    n4 = [info["early"][r.dir] for r in by["h8-N4"].runs]
    assert all(e.reference == "h8-N4" and abs(e.excess) < 0.02 for e in n4)  # against itself: nothing to see
    assert [round(e.net, 3) for e in n4] == [0.5, 0.5, 0.5] and all(e.net_reference == "h8-N3" for e in n4)
    assert by["h8-N4"].row["stuck_seeds"] == [1, 2, 3]
    assert by["h8-N1"].row["stuck_seeds"] == [] and by["h8-N3"].row["stuck_seeds"] == []
    assert [round(info["early"][r.dir].net, 3) for r in by["h8-N1"].runs] == [0.0, 0.0, 0.0]
    assert info["early"][by["h8-N3"].runs[0].dir].net is None  # the base is the rule itself
    words = by["h8-N4"].row["early_words"]
    assert "and against h8-N3 net of the gap at the end" in words and "(+0.000; net +0.500) STUCK" in words
    section = "\n".join(W.section(cells, info["early"], info["threshold"]))
    assert "also read against the base at its rate (h8-N3), net of the gap at the end" in section
    assert "against h8-N3 net of the end gap +0.500" in section
