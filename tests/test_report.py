"""`make report` on fixture runs: the numbers (mean, sd, Δ) by hand, the p-value from sacreBLEU itself,
the paper's rows, the files written, the W&B table and the analysis hook."""

import gzip
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from conftest import write_results
from headsweep.config import compose
from headsweep.reports import build as B
from headsweep.reports.sweep import page as R
from headsweep.reports.sweep import summary as N

REFS = [
    "a man is riding a red bike down the street .",
    "two dogs play in the snow .",
    "a woman sings on a stage .",
    "children are running on the beach .",
    "an old man reads a newspaper .",
    "not used: limit_eval cuts the test split before this line .",
]
# Per cell: hypotheses of the test split, test BLEU per seed (the numbers the table averages).
CELLS = {
    8: {
        "bleu": [30.0, 32.0],
        "hyps": [
            "a man is riding a red bike down the street .",
            "two dogs play in snow .",
            "a woman sings on the stage .",
            "kids are running on the beach .",
            "an old man reads a paper .",
        ],
    },
    4: {
        "bleu": [29.0, 28.0],
        "hyps": [
            "a man rides a bike on the street .",
            "two dogs are playing in the snow .",
            "a woman is singing .",
            "children run at the beach .",
            "an old man reads a newspaper .",
        ],
    },
    2: {
        "bleu": [27.0],
        "hyps": ["a man on a bike .", "dogs in snow .", "a woman .", "children running .", "old man newspaper ."],
    },
}


def make_run(root: Path, data_dir: Path, h: int, seed: int, bleu: float, hyps: list[str]) -> Path:
    d_k = 256 // h
    cell = f"h{h}-dk{d_k}-dv{d_k}"
    run = root / f"{cell}-s{seed}"
    (run / "hypotheses").mkdir(parents=True)
    cfg = compose(
        [
            f"model.heads={h}",
            f"seed={seed}",
            "sweep=table3_a",
            f"run_name={cell}-s{seed}",
            f"tags=[row-A,cell-{cell}{',base' if h == 8 else ''}]",
            f"paths.output_dir={run}",
            f"data.dir={data_dir}",
            "data.test_split=test",
            "data.limit_eval=5",
            "module.test_beam_size=1",
            "trainer.max_steps=800",
        ]
    )
    hyp = run / "hypotheses" / "test.beam.en"
    # seed 2 of a cell translates one sentence differently: the seeds are not copies of each other
    hyp.write_text("".join(h + "\n" for h in (hyps if seed == 1 else hyps[1:] + hyps[:1])))
    results = {
        "status": "complete",
        "run_name": f"{cell}-s{seed}",
        "sweep": "table3_a",
        "config": OmegaConf.to_container(cfg, resolve=True),
        "params": {"total": 7_577_600},
        "hypotheses": {"test.beam": str(hyp)},
        "metrics": {
            "test/bleu": bleu,
            "test/chrf": 50.0 + bleu,
            "val/bleu": bleu - 1,
            "val/ppl": 10.0 - bleu / 10,
            "test/ppl": 9.0,
            "train/steps": 800,
        },
    }
    write_results(run, results)
    (run / "metrics.csv").write_text("epoch,step,train/loss,val/bleu,val/loss\n")  # no validation rows
    return run


@pytest.fixture
def sweep_dir(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with gzip.open(data / "test.en.gz", "wt", encoding="utf-8") as f:  # references may be gzipped
        f.write("".join(r + "\n" for r in REFS))
    root = tmp_path / "multirun"
    for h, cell in CELLS.items():
        for seed, bleu in enumerate(cell["bleu"], start=1):
            make_run(root / "table3_a", data, h, seed, bleu, cell["hyps"])
    killed = root / "table3_a" / "h16-dk16-dv16-s1"
    (killed / ".hydra").mkdir(parents=True)  # a job killed before it wrote results.json
    failed = root / "table3_a" / "h32-dk8-dv8-s1"
    failed.mkdir()
    write_results(failed, {"status": "failed", "error": "DataError: bad"})
    return root


def rows_by_label(root):
    runs, unfinished = R.load_runs(root / "table3_a")
    cells = R.group_cells(runs)
    N.summarize(cells, n_samples=200)
    return cells, {c.label: c.row for c in cells}, unfinished


def test_numbers_match_hand_computed_values(sweep_dir):
    cells, rows, unfinished = rows_by_label(sweep_dir)
    assert [c.label for c in cells] == ["h8-dk32-dv32", "h2-dk128-dv128", "h4-dk64-dv64"]  # base, then by h
    assert sorted(d.name for d, _ in unfinished) == ["h16-dk16-dv16-s1", "h32-dk8-dv8-s1"]
    base, h4, h2 = rows["h8-dk32-dv32"], rows["h4-dk64-dv64"], rows["h2-dk128-dv128"]
    assert base["test_bleu"] == pytest.approx(31.0) and base["test_bleu_sd"] == pytest.approx(2**0.5)
    assert h4["test_bleu"] == pytest.approx(28.5) and h4["test_bleu_sd"] == pytest.approx(0.5**0.5)
    assert h4["delta"] == pytest.approx(28.5 - 31.0) and h2["delta"] == pytest.approx(27.0 - 31.0)
    assert h2["n"] == 1 and h2["test_bleu_sd"] is None  # one seed: no sd rather than 0
    assert h4["val_bleu"] == pytest.approx(27.5) and h4["test_chrf"] == pytest.approx(78.5)
    assert base["delta"] is None and base["p_bootstrap"] is None and base["interval"] is None


def test_p_value_is_sacrebleus_paired_bootstrap_over_pooled_seeds(sweep_dir):
    _, rows, _ = rows_by_label(sweep_dir)
    refs = REFS[:5]  # limit_eval=5
    seeded = lambda hyps, seed: hyps if seed == 1 else hyps[1:] + hyps[:1]  # noqa: E731
    base = seeded(CELLS[8]["hyps"], 1) + seeded(CELLS[8]["hyps"], 2)
    h4 = seeded(CELLS[4]["hyps"], 1) + seeded(CELLS[4]["hyps"], 2)
    _, scores = PairedTest(
        [("base", base), ("h4", h4)], {"BLEU": BLEU()}, [refs + refs], test_type="bs", n_samples=200
    )()
    assert rows["h4-dk64-dv64"]["p_bootstrap"] == scores["BLEU"][1].p_value
    # h2 has seed 1 only: compared with the base's seed 1
    _, scores = PairedTest(
        [("base", CELLS[8]["hyps"]), ("h2", CELLS[2]["hyps"])], {"BLEU": BLEU()}, [refs], test_type="bs", n_samples=200
    )()
    assert rows["h2-dk128-dv128"]["p_bootstrap"] == scores["BLEU"][1].p_value
    assert 0 < rows["h2-dk128-dv128"]["p_bootstrap"] <= 1


def test_paper_rows_match_by_settings_relative_to_the_base(sweep_dir):
    _, rows, _ = rows_by_label(sweep_dir)
    assert rows["h8-dk32-dv32"]["paper"]["row"] == "base"
    paper_h4 = rows["h4-dk64-dv64"]["paper"]  # d_model 256 here, 512 in the paper: d_k 64 is its 128
    assert (paper_h4["row"], paper_h4["h"], paper_h4["d_k"], paper_h4["dev_bleu"]) == ("A", 4, 128, 25.5)
    assert rows["h4-dk64-dv64"]["paper_delta"] == pytest.approx(25.5 - 25.8)
    assert rows["h2-dk128-dv128"]["paper"] is None  # the paper has no h=2


def test_paper_row_lookup_for_other_rows():
    rows = N.paper_row.__globals__["table3"]()
    small = {
        "N": 3,
        "d_model": 256,
        "d_ff": 1024,
        "h": 8,
        "d_k": 32,
        "d_v": 32,
        "P_drop": 0.1,
        "eps_ls": 0.1,
        "pos": "sinusoid",
    }
    match = lambda **kw: N.paper_row({**small, **kw}, small, rows)  # noqa: E731
    assert (match(d_k=8)["row"], match(d_k=8)["dev_bleu"]) == ("B", 25.1)  # d_k 16 at the paper's scale
    assert match(N=1)["dev_bleu"] == 23.7 and match(d_model=512, d_k=64, d_v=64)["dev_bleu"] == 26.0
    assert match(d_ff=2048)["dev_bleu"] == 26.2
    assert match(P_drop=0.0)["dev_bleu"] == 24.6 and match(eps_ls=0.2)["dev_bleu"] == 25.7
    assert match(pos="learned")["row"] == "E" and match(P_drop=0.0, eps_ls=0.0) is None


def test_report_files(sweep_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    out = tmp_path / "reports"
    paths = R.write_report("table3_a", sweep_dir, out, n_samples=100)
    # equal parameter counts: no plot against parameters, a line saying so
    assert [p.name for p in paths] == ["table3_a.md", "table3_a.html", "table3_a.json", "table3_a-bleu.png"]
    assert paths[3].read_bytes()[:4] == b"\x89PNG"
    md = paths[0].read_text()
    # attention FLOPs differ (the softmax's h x context term, 3 x 3 x 6 x 32 from h = 2 to h = 8): a column
    assert (
        "| cell | h | d_k | d_v | attn MFLOP/token | BLEU test | Δ BLEU test | 95% CI | p Holm | chrF test | "
        "BLEU val | paper row | paper BLEU | paper Δ BLEU |"
    ) in md
    assert (
        "| h8-dk32-dv32 (base) | 8 | 32 | 32 | 5.020 | 31.00 ± 1.41 | — | — | — "
        "| 81.0 ± 1.4 | 30.00 ± 1.41 | base | 25.8 | — |" in md
    )
    assert "| h2-dk128-dv128 | 2 | 128 | 128 | 5.015 | 27.00 | -4.00 | — | — |" in md  # one seed: no interval
    assert "800 training steps" in md and "Every cell has 7.58 M parameters: no plot" in md
    assert "seeds pooled" in md and "nrefs:1|bs:100|seed:12345" in md
    assert "  - `h16-dk16-dv16-s1`: no results.json" in md and "  - `h32-dk8-dv8-s1`: DataError: bad" in md
    html = paths[1].read_text()
    assert '<td style="text-align:right">31.00 ± 1.41</td>' in html and 'src="table3_a-bleu.png"' in html
    # the page's last line names the module that wrote it, in the markdown and in the page
    assert md.endswith("\n---\n\n*written by `headsweep.reports.sweep.page`*\n")
    assert "written by <code>headsweep.reports.sweep.page</code>" in html


def test_a_seed_its_time_cap_stopped_short_is_flagged_and_left_out_of_its_cells_comparison(sweep_dir, tmp_path):
    """h4's seed 2 trained 700 of its 800 steps (trainer.max_time): the table flags the cell, its details name the
    seed, and its Δ is seed 1's alone (store.stopped_short, the rule the rate choice and Table 3's verdicts use)."""
    run = sweep_dir / "table3_a" / "h4-dk64-dv64-s2"
    record = json.loads((run / "results.json").read_text())
    record["metrics"]["train/steps"] = 700
    write_results(run, record)
    md = R.write_report("table3_a", sweep_dir, tmp_path / "reports", n_samples=20)[0].read_text()
    seed1 = CELLS[4]["bleu"][0]
    assert f"| h4-dk64-dv64 | 4 | 64 | 64 | 5.017 | 750* | 28.50 ± 0.71 | {seed1 - 31.0:+.2f} | — |" in md
    assert "Left out (stopped short): seed 2 (stopped at step 700 of 800 by trainer.max_time" in md
    assert "\\* a seed stopped before trainer.max_steps (trainer.max_time): left out of the cell's comparison" in md
    assert "- steps: 750 of trainer.max_steps 800; seed 2: stopped at step 700 of 800 by trainer.max_time" in md


def test_no_runs_is_one_clear_error(tmp_path, capsys):
    assert B.main(["--sweep", "table3_b", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run `make sweep SWEEP=table3_b` first" in err


def test_wandb_table_only_when_online(sweep_dir, tmp_path, monkeypatch):
    import wandb

    logged = []

    class FakeRun:
        def log(self, data):
            logged.append(data)

        def finish(self):
            pass

    monkeypatch.setattr(wandb, "init", lambda **kw: logged.append(kw) or FakeRun())
    monkeypatch.setenv("WANDB_MODE", "offline")
    R.write_report("table3_a", sweep_dir, tmp_path / "r1", n_samples=50)
    assert logged == []
    monkeypatch.setenv("WANDB_MODE", "online")
    R.write_report("table3_a", sweep_dir, tmp_path / "r2", n_samples=50)
    init, data = logged
    assert init["group"] == "table3_a" and init["job_type"] == "report"
    assert isinstance(data["table3"], wandb.Table) and len(data["table3"].data) == 3
    assert "BLEU test" in data["table3"].columns and "table3_a-bleu" in data


def test_analysis_section_for_analysed_runs(sweep_dir, tmp_path, monkeypatch):
    run = sweep_dir / "table3_a" / "h4-dk64-dv64-s1"
    (run / "analysis").mkdir()
    (run / "analysis" / "analysis.json").write_text("{}")
    calls = []
    monkeypatch.setattr(
        R,
        "report_section",
        lambda groups, out_dir, sweep, base: calls.append((groups, out_dir, sweep, base)) or "## Heads\n\nfrom analyze",
    )
    R.write_report("table3_a", sweep_dir, tmp_path / "r", n_samples=50)
    # grouped by cell under the table's name for it; cells without an analysed run are not passed, the
    # base's name is, to say that it has none
    assert calls == [({"h4-dk64-dv64": [run]}, tmp_path / "r", "table3_a", "h8-dk32-dv32 (base)")]
    assert "\n## Heads\n\nfrom analyze\n" in (tmp_path / "r" / "table3_a.md").read_text()

    # more analysed cells: the base first (what every other cell is compared with), then the table's order
    analysed = [sweep_dir / "table3_a" / name for name in ("h2-dk128-dv128-s1", "h8-dk32-dv32-s2", "h8-dk32-dv32-s1")]
    for d in analysed:
        (d / "analysis").mkdir()
        (d / "analysis" / "analysis.json").write_text("{}")
    R.write_report("table3_a", sweep_dir, tmp_path / "r3", n_samples=50)
    groups = calls[-1][0]
    assert list(groups) == ["h8-dk32-dv32 (base)", "h2-dk128-dv128", "h4-dk64-dv64"]  # as the table (by h)
    assert groups["h8-dk32-dv32 (base)"] == [analysed[2], analysed[1]]  # in seed order

    for d in [run, *analysed]:  # no analysed run: no section
        (d / "analysis" / "analysis.json").unlink()
    R.write_report("table3_a", sweep_dir, tmp_path / "r2", n_samples=50)
    assert "from analyze" not in (tmp_path / "r2" / "table3_a.md").read_text()


def test_holm_adjustment_by_hand():
    from headsweep.reports.sweep.significance import holm

    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> monotone: 0.06
    assert holm([0.01, 0.04, 0.03, 0.005, None]) == pytest.approx([0.03, 0.06, 0.06, 0.02, None])
    assert holm([0.5, 0.9]) == [1.0, 1.0]


def test_a_contrast_of_two_cells_is_welchs_test_and_constant_cells_only_shift_it():
    """reporting.stats.contrast against scipy's Welch t-test: (+1, cell), (-1, base) is that test; two more cells
    that do not vary add their difference to the estimate and nothing to the interval's width or p."""
    from scipy.stats import ttest_ind

    from headsweep.reporting.stats import contrast

    cell, base = [34.54, 34.84, 34.1], [36.36, 36.79]
    welch = ttest_ind(cell, base, equal_var=False)
    ci = welch.confidence_interval(0.95)
    two = contrast([(1, cell), (-1, base)])
    assert two["estimate"] == pytest.approx(sum(cell) / 3 - sum(base) / 2)
    assert (two["lo"], two["hi"], two["p"]) == pytest.approx((ci.low, ci.high, welch.pvalue))
    four = contrast([(1, cell), (-1, base), (-1, [35.0, 35.0]), (1, [35.5, 35.5])])
    assert four["estimate"] == pytest.approx(two["estimate"] + 0.5)
    assert four["hi"] - four["lo"] == pytest.approx(ci.high - ci.low) and four["dof"] == pytest.approx(two["dof"])
    assert contrast([(1, cell), (-1, [36.0])])["lo"] is None  # one seed: no spread to test against


def test_welch_over_seeds_and_holm_on_its_p_in_the_table(sweep_dir):
    """The significance a sweep page shows is Table 3's rule (issue 69): Welch over seeds, Holm on its p."""
    from scipy.stats import ttest_ind

    cells, rows, _ = rows_by_label(sweep_dir)
    h4, h2 = rows["h4-dk64-dv64"], rows["h2-dk128-dv128"]
    welch = ttest_ind([29.0, 28.0], [30.0, 32.0], equal_var=False)
    ci = welch.confidence_interval(0.95)
    assert h4["p_welch"] == pytest.approx(welch.pvalue) and h4["interval"] == pytest.approx([ci.low, ci.high])
    assert h4["p_holm"] == pytest.approx(welch.pvalue)  # the one Welch p of the page: Holm leaves it
    assert h2["p_welch"] is None and h2["p_holm"] is None and h2["interval"] is None  # one seed: no spread
    assert h4["p_holm"] != pytest.approx(h4["p_bootstrap"])  # not the bootstrap's
    words = N.verdicts(cells)
    assert len(words) == 2 and all(w.split(": ")[1] == "inconclusive" for w in words)
    assert any(w.startswith("h4-dk64-dv64: ") and "Welch p" in w and "Holm p" in w for w in words)
    assert any(w.startswith("h2-dk128-dv128: ") and "1 seed against 2" in w and "no interval" in w for w in words)


def write_curve(run: Path, points: dict[int, tuple[float, float]]) -> None:
    """A metrics CSV as Lightning writes it (validation logged at step - 1)."""
    lines = ["epoch,step,train/loss,val/bleu,val/loss"]
    lines += [f"0,{s - 1},,{bleu},{loss}" for s, (bleu, loss) in points.items()]
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")


def test_learning_curves_and_ranking_stability(sweep_dir, tmp_path):
    # val BLEU at steps 400 and 800: h4 leads at half the budget, the base at the end
    curves = {
        8: {400: (10.0, 4.0), 800: (30.0, 2.0)},
        4: {400: (12.0, 3.9), 800: (28.0, 2.1)},
        2: {400: (5.0, 4.5), 800: (26.0, 2.3)},
    }
    for run in (sweep_dir / "table3_a").glob("h*-s*"):
        h = int(run.name.split("-")[0][1:])
        if h in curves:
            write_curve(run, curves[h])
    cells, _, _ = rows_by_label(sweep_dir)
    from headsweep.reports.sweep.plots import cell_curve

    base = next(c for c in cells if c.base)
    assert cell_curve(base, "val/bleu") == ([400, 800], [10.0, 30.0], [0.0, 0.0])
    ranking = N.ranking_stability(cells)
    assert (ranking["half_step"], ranking["last_step"]) == (400, 800)
    assert ranking["order_half"] == ["h4-dk64-dv64", "h8-dk32-dv32", "h2-dk128-dv128"]
    assert ranking["order_last"] == ["h8-dk32-dv32", "h4-dk64-dv64", "h2-dk128-dv128"]
    assert ranking["tau"] == pytest.approx(1 / 3)  # one discordant pair of three
    paths = R.write_report("table3_a", sweep_dir, tmp_path / "reports", n_samples=100)
    assert (tmp_path / "reports" / "table3_a-curves.png") in paths
    md = (tmp_path / "reports" / "table3_a.md").read_text()
    assert "## What the numbers say" in md and "Kendall's tau 0.33" in md and "p Holm" in md


def test_a_cell_off_table_3_has_no_paper_row_and_bookkeeping_gets_no_column(tmp_path):
    """heads_specialise's cells differ from the base only in head dropout (no Table 3 column) and, for runs
    recorded by another version, in checkpoint cadence: the first must not borrow the paper's base row, the
    second must not become a column of the table."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "test.en").write_text("".join(r + "\n" for r in REFS))
    root = tmp_path / "results" / "heads_specialise"
    for seed in (1, 2):
        make_run(root, data, 8, seed, 30.0 + seed, CELLS[8]["hyps"])
        run = make_run(root / "hd", data, 8, seed, 28.0 + seed, CELLS[4]["hyps"])
        moved = root / f"h8-dk32-dv32-head_dropout0.1-s{seed}"
        run.rename(moved)
        results = json.loads((moved / "results.json").read_text())
        cfg = results["config"]
        cfg["model"]["head_dropout"] = 0.1
        cfg["callbacks"]["checkpoint"]["every_n_train_steps"] = 7
        cfg["tags"] = ["cell-h8-dk32-dv32-head_dropout0.1"]
        results["hypotheses"]["test.beam"] = str(moved / "hypotheses" / "test.beam.en")
        write_results(moved, results)
    (root / "hd").rmdir()
    runs, _ = R.load_runs(root)
    cells = R.group_cells(runs)
    N.summarize(cells, n_samples=100)
    assert R.varied_keys(cells) == ["model.head_dropout"]
    base, hd = cells
    assert base.base and base.row["paper"]["row"] == "base"
    assert hd.label == "h8-dk32-dv32-head_dropout0.1" and hd.row["paper"] is None and hd.row["paper_delta"] is None
    assert hd.row["delta"] == pytest.approx(-2.0)


def test_paths_of_runs_another_sweep_shares_are_no_columns(tmp_path):
    """A sweep that shows runs of another sweep (the store's views) names them its own way: the paths in
    their configs name the job they trained as, not this sweep's view, and must not become columns."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "test.en").write_text("".join(r + "\n" for r in REFS))
    root = tmp_path / "results" / "heads_fixed_dk_fan_in"
    for h in (8, 4):
        run = make_run(root, data, h, 1, 30.0 + h, CELLS[h]["hyps"])
        view = root / f"{run.name[:-3]}-lr0.002-s1"  # this sweep's name for the shared run
        run.rename(view)
        results = json.loads((view / "results.json").read_text())
        results["hypotheses"]["test.beam"] = str(view / "hypotheses" / "test.beam.en")
        write_results(view, results)
    runs, _ = R.load_runs(root)
    assert [r.results["run_name"] for r in runs] != [r.dir.name for r in runs]
    assert runs[0].dir.name not in runs[0].flat["trainer.default_root_dir"]  # it names the job it trained as
    assert R.varied_keys(R.group_cells(runs)) == ["model.heads", "model.d_k", "model.d_v"]


def curves_for_every_run(sweep_dir: Path, rising: str | None = None) -> None:
    """Validation every 230 steps, val loss falling in every run; in `rising` (a run's name) it goes up once,
    at step 690."""
    for run in (sweep_dir / "table3_a").glob("h*-s*"):
        if (
            not (run / "results.json").is_file()
            or json.loads((run / "results.json").read_text())["status"] != "complete"
        ):
            continue
        losses = [4.0, 3.0, 2.5, 2.2, 2.1] if run.name != rising else [4.0, 3.0, 3.1234, 2.2, 2.1]
        write_curve(run, {230 * (i + 1): (10.0 + i, loss) for i, loss in enumerate(losses)})


def test_val_loss_that_rises_once_is_named_with_its_run_cell_and_step(sweep_dir, tmp_path):
    """A run whose val loss goes up once (step 690, 3.0 -> 3.1234) is named in the notes, with its cell,
    and in its cell's details; the other runs are not, and the report is still written."""
    curves_for_every_run(sweep_dir, rising="h4-dk64-dv64-s2")
    paths = R.write_report("table3_a", sweep_dir, tmp_path / "reports", n_samples=50)
    md = paths[0].read_text()
    assert (
        "- Val loss did not fall at every validation in 1 of 5 runs:\n"
        "  - `h4-dk64-dv64-s2` (h4-dk64-dv64): rose at step 690 (3.0000 → 3.1234)\n" in md
    )
    assert "fell at every validation in all" not in md
    assert (
        "- val loss fell at every validation in seed 1; seed 2 (`h4-dk64-dv64-s2`) rose at step 690 "
        "(3.0000 → 3.1234)" in md
    )
    assert md.count("rose at step") == 2  # the note and h4's details; no other run or cell


def test_val_loss_falling_throughout_is_one_line_for_all_runs(sweep_dir, tmp_path):
    curves_for_every_run(sweep_dir)
    md = R.write_report("table3_a", sweep_dir, tmp_path / "reports", n_samples=50)[0].read_text()
    assert "- Val loss fell at every validation in all 5 runs.\n" in md
    assert md.count("- val loss fell at every validation in seeds 1, 2\n") == 2  # the base's and h4's details
    assert "- val loss fell at every validation in seed 1\n" in md and "rose at step" not in md


def test_val_loss_check_counts_equal_losses_and_skips_runs_without_two_validations(sweep_dir):
    from headsweep.reports.sweep.cells import val_loss_rises

    runs, _ = R.load_runs(sweep_dir / "table3_a")
    assert all(val_loss_rises(r) is None for r in runs)  # the fixture's CSVs have no validation rows
    write_curve(runs[0].dir, {230: (1.0, 3.0), 460: (2.0, 3.0), 690: (3.0, 2.0)})  # flat at 460: not a fall
    assert val_loss_rises(runs[0]) == [(460, 3.0, 3.0)]
    cells = R.group_cells(runs)
    note = R.notes(sweep_dir / "table3_a", runs, cells, N.summarize(cells, n_samples=50), [])
    assert any(
        line.startswith("Val loss did not fall at every validation in 1 of 1 runs:\n")
        and "did not fall at step 460 (3.0000 → 3.0000)" in line
        and "not checked (4," in line
        for line in note
    )


def test_a_copied_older_run_missing_newer_keys_groups_by_the_settings_alone(tmp_path):
    """A base copied from an older sweep lacks keys added to the config since (data.hub_fallback, model.kv_heads):
    where the data come from is no setting, and kv_heads takes its old behaviour (= h), so the only varied
    key is kv_heads, the base sorts first, and nothing raises on the missing keys."""
    from conftest import fake_run

    fake_run(tmp_path, "kv", "z-base-s1", 1, 30.0, ["model.kv_heads=8"])  # loads last
    old = tmp_path / "kv" / "z-base-s1" / "results.json"
    results = json.loads(old.read_text())
    del results["config"]["data"]["hub_fallback"], results["config"]["model"]["kv_heads"]
    results["config"]["tags"] = ["cell-h8-dk32-dv32-kv8", "base"]
    old.write_text(json.dumps(results))
    for kv in (2, 4):
        fake_run(tmp_path, "kv", f"kv{kv}-s1", 1, 25.0, [f"model.kv_heads={kv}"])
    runs, left_out = R.load_runs(tmp_path / "kv", "kv")
    cells = R.group_cells(runs)
    assert not left_out and R.varied_keys(cells) == ["model.kv_heads"]
    assert [c.runs[0].flat["model.kv_heads"] for c in cells] == [8, 2, 4] and cells[0].base


def test_p_values_below_three_decimals_print_as_a_bound_not_as_zero():
    from headsweep.reports.sweep.table import fmt_p, p_words

    assert [fmt_p(p) for p in (0.0004, 0.0005, 0.012)] == ["< 0.001", "0.001", "0.012"]
    assert p_words(0.0001) == "p < 0.001" and p_words(0.03) == "p = 0.030"
    assert p_words(0.002, bound=True) == "p <= 0.002" and fmt_p(None) == "—"


def make_sized_run(
    root: Path,
    data_dir: Path,
    d_model: int,
    h: int,
    seed: int,
    bleu: float,
    hyps: list[str],
    threads: int | None = None,
):
    d_k = d_model // h
    cell = f"h{h}-dk{d_k}-dv{d_k}-dm{d_model}-ff{4 * d_model}"
    run = root / f"{cell}-s{seed}"
    (run / "hypotheses").mkdir(parents=True)
    cfg = compose(
        [
            f"model.heads={h}",
            f"model.d_model={d_model}",
            f"model.d_ff={4 * d_model}",
            f"seed={seed}",
            "sweep=heads_by_width",
            f"run_name={cell}-s{seed}",
            f"tags=[cell-{cell}{',base' if (d_model, h) == (128, 8) else ''}]",
            f"paths.output_dir={run}",
            f"data.dir={data_dir}",
            "data.test_split=test",
            "data.limit_eval=5",
            "module.test_beam_size=1",
            f"threads={'null' if threads is None else threads}",
        ]
    )
    hyp = run / "hypotheses" / "test.beam.en"
    hyp.write_text("".join(x + "\n" for x in hyps))
    results = {
        "status": "complete",
        "run_name": f"{cell}-s{seed}",
        "sweep": "heads_by_width",
        "config": OmegaConf.to_container(cfg, resolve=True),
        "params": {"total": 1_000_000 * d_model},
        "hypotheses": {"test.beam": str(hyp)},
        "metrics": {
            "test/bleu": bleu,
            "test/chrf": 50.0,
            "val/bleu": bleu,
            "val/ppl": 9.0,
            "test/ppl": 9.0,
            "train/steps": cfg.trainer.max_steps,
        },
    }
    write_results(run, results)
    (run / "metrics.csv").write_text("epoch,step,train/loss,val/bleu,val/loss\n")


def test_a_cell_of_another_width_is_compared_with_the_base_scaled_to_its_width(tmp_path):
    """heads_by_width: h = 32 at d_model 512 against h = 8 at d_model 512 (its size's base), not against the
    d_model 128 base; h = 8 at d_model 512 against the base; h = 2 at d_model 128 against the base. The
    widths ran with other thread settings (d_model 128 as 1-thread jobs of a 2-job sweep, 512 alone), as the
    shipped sweep did: threads are no setting to compare cells by."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "test.en").write_text("".join(r + "\n" for r in REFS))
    root = tmp_path / "multirun" / "heads_by_width"
    good, bad = CELLS[8]["hyps"], CELLS[4]["hyps"]
    bleus = {(128, 8): [30.0, 31.0], (128, 2): [32.0, 33.0], (512, 8): [36.0, 38.0], (512, 32): [33.0, 34.0]}
    for (d_model, h), values in bleus.items():
        for seed, bleu in enumerate(values, start=1):
            make_sized_run(root, data, d_model, h, seed, bleu, good if h == 8 else bad, 1 if d_model == 128 else None)
    runs, _ = R.load_runs(root)
    assert "threads" not in R.varied_keys(R.group_cells(runs))
    assert sorted({r.flat["module.peak_lr"] for r in runs}) == pytest.approx([2e-3 / 2**0.5, 2e-3 * 2**0.5])  # width
    cells = R.group_cells(runs)
    N.summarize(cells, n_samples=100)
    rows = {c.label: c.row for c in cells}
    wide_h32, wide_h8 = rows["h32-dk16-dv16-dm512-ff2048"], rows["h8-dk64-dv64-dm512-ff2048"]
    assert wide_h32["against"] == "h8-dk64-dv64-dm512-ff2048" and wide_h32["delta"] == pytest.approx(33.5 - 37.0)
    assert wide_h8["against"] is None and wide_h8["delta"] == pytest.approx(37.0 - 30.5)
    assert rows["h2-dk64-dv64-dm128-ff512"]["against"] is None
    assert rows["h2-dk64-dv64-dm128-ff512"]["delta"] == pytest.approx(32.5 - 30.5)
    # the paper's row A h = 32 (d_k 16 at d_model 512) is this cell's row, read relative to its own size's base
    assert (wide_h32["paper"]["row"], wide_h32["paper"]["h"], wide_h32["paper"]["d_k"]) == ("A", 32, 16)
    columns, body = R.table(cells, R.varied_keys(cells))
    against = [dict(zip(columns, row))["against"] for row in body]
    assert sorted(against) == ["base", "base", "h8-dk64-dv64-dm512-ff2048", "—"]
    assert sorted({dict(zip(columns, row))["peak lr"] for row in body}) == ["0.00141", "0.00283"]  # not 0.00
    assert any(
        "worse than h8-dk64-dv64-dm512-ff2048 (the base at its size)" in w
        or "against h8-dk64-dv64-dm512-ff2048 (the base at its size)" in w
        for w in N.verdicts(cells)
    )


def test_report_names_the_machines_a_sweep_mixed(sweep_dir, tmp_path):
    """Runs that record their machine are counted by it; runs from before results.json named one are
    'not recorded'. One machine for every run is one line without counts."""
    runs = sorted(
        r
        for r in (sweep_dir / "table3_a").glob("h*-s*")
        if (r / "results.json").is_file() and json.loads((r / "results.json").read_text())["status"] == "complete"
    )
    amx = {
        "cpu": "Intel(R) Xeon(R) Processor",
        "cpu_class": "AVX512 + AMX (bf16 units)",
        "gpu": None,
        "torch": "2.13.0",
    }
    epyc = {"cpu": "AMD EPYC 7B13", "cpu_class": "AVX2, no bf16 units", "gpu": None, "torch": "2.13.0"}

    def record(machines):
        for run, machine in zip(runs, machines):
            results = json.loads((run / "results.json").read_text())
            results.pop("machine", None)
            if machine:
                results["machine"] = machine
            write_results(run, results)
        return R.write_report("table3_a", sweep_dir, tmp_path / "reports", n_samples=20)[0].read_text()

    assert len(runs) == 5
    md = record([amx, amx, epyc, None, amx])
    assert (
        "- Machines: AMD EPYC 7B13 (AVX2, no bf16 units): 1 run; Intel(R) Xeon(R) Processor "
        "(AVX512 + AMX (bf16 units)): 3 runs; not recorded: 1 run.\n" in md
    )
    md = record([epyc] * 5)
    assert "- Every run trained on AMD EPYC 7B13 (AVX2, no bf16 units).\n" in md
    md = record([None] * 5)
    assert (
        "- Machine: not recorded in results.json (runs from before it named the machine; their commit "
        "messages and docs/ name it).\n" in md
    )


# issue 39: what a reader sees on the pages


def test_no_p_value_below_0001_prints_as_zero():
    from headsweep.reports.pages import budget
    from headsweep.reports.pages import compare as C

    assert budget.p_text(2e-5) == "< 0.001" and budget.p_text(0.0123) == "0.012"
    found = [
        {
            "cell": "a",
            "base": "b",
            "measure": "bleu",
            "values": [30.0, 30.1, 30.2],
            "base_values": [20.0, 20.1, 20.2],
            "p": 3e-6,
            "p_holm": 2e-5,
        }
    ]
    words = " ".join(C.verdict_words(found))
    assert "Welch p < 0.001, Holm < 0.001" in words and "0.000" not in words


def seed_cell(label: str, seeds: int, base: bool = False, **flat):
    """A cell for the plots alone: its runs' settings and the report's numbers."""
    from types import SimpleNamespace

    from headsweep.reports.sweep.cells import Cell

    runs = [SimpleNamespace(flat=flat, base=base, seed=s) for s in range(1, seeds + 1)]
    ys = [30.0 + flat.get("model.heads", 1) / 10 + s / 5 for s in range(seeds)]
    sd = (sum((y - sum(ys) / seeds) ** 2 for y in ys) / (seeds - 1)) ** 0.5 if seeds > 1 else None
    return Cell(
        label,
        runs,
        {
            "test_bleu_seeds": ys,
            "seeds": list(range(1, seeds + 1)),
            "test_bleu": sum(ys) / seeds,
            "test_bleu_sd": sd,
            "params_M": 2.5 if flat.get("model.d_model") == 128 else 26.2,
        },
    )


def heads_by_width_cells(seeds: int = 3):
    cells = []
    for d_model, hs, lr in ((128, (8, 1, 2, 4, 16), 0.00282843), (512, (1, 8, 32), 0.00141421)):
        for h in hs:
            flat = {
                "model.d_model": d_model,
                "model.d_ff": 4 * d_model,
                "model.heads": h,
                "model.d_k": d_model // h,
                "model.d_v": d_model // h,
                "module.peak_lr": lr,
            }
            cells.append(seed_cell(f"h{h}-dm{d_model}", seeds, base=(d_model, h) == (128, 8), **flat))
    return cells


KEYS = ["model.d_model", "model.d_ff", "model.heads", "model.d_k", "model.d_v", "module.peak_lr"]


def test_heads_by_width_plots_bleu_against_h_one_line_per_d_model():
    from headsweep.reports.sweep import plots as P

    fig, caption = P.bleu_figure("heads_by_width", heads_by_width_cells(), KEYS)
    ax = fig.axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ax.get_xlabel() == "h" and ticks == ["1", "2", "4", "8", "16", "32"]  # each h once, none a cell's name
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "d_model 128" in legend and "d_model 512" in legend
    assert [len(line.get_xdata()) for line in ax.get_lines() if line.get_label().startswith("d_model")] == [5, 3]
    assert "against cell" not in caption and "one line per d_model" in caption
    P.pyplot().close(fig)


def test_each_lines_base_is_dashed_in_its_lines_colour():
    """Cells compared with the base at their own width (row "against") get that base drawn in their line's colour,
    beside the sweep's base in its own line's: a single base line in another line's colour would read as that
    line's base."""
    from headsweep.reports.sweep import plots as P

    cells = heads_by_width_cells()
    for c in cells:
        if c.runs[0].flat["model.d_model"] == 512:
            c.row["against"] = "h8-dm512"
    fig, caption = P.bleu_figure("heads_by_width", cells, KEYS)
    ax = fig.axes[0]
    colour = {line.get_label(): line.get_color() for line in ax.get_lines() if line.get_label().startswith("d_model")}
    dashed = {
        line.get_label(): (line.get_color(), line.get_ydata()[0])
        for line in ax.get_lines()
        if line.get_linestyle() == "--"
    }
    mean = {c.label: c.row["test_bleu"] for c in cells}
    assert dashed == {
        "h8-dm128 (base)": (colour["d_model 128"], mean["h8-dm128"]),
        "h8-dm512": (colour["d_model 512"], mean["h8-dm512"]),
    }
    assert colour["d_model 128"] != colour["d_model 512"] and "each line's base cell's mean" in caption
    P.pyplot().close(fig)


def test_a_plot_without_a_numeric_axis_names_its_cells_not_against_cell():
    from headsweep.reports.sweep import plots as P

    keys = ["model.init", "module.decay_by"]
    cells = [
        seed_cell(f"{init}-{decay}", 3, base=i == 0, **{"model.heads": 8, "model.init": init, "module.decay_by": decay})
        for i, (init, decay) in enumerate((("xavier", "steps"), ("fan_in", "steps"), ("fan_in", "time")))
    ]
    fig, caption = P.bleu_figure("s", cells, keys)
    assert "against cell" not in caption and "named by its settings" in caption
    assert len({t.get_text() for t in fig.axes[0].get_xticklabels()}) == 3
    P.pyplot().close(fig)
    # h repeats across the cells, d_k does not within each h: BLEU against d_k, one line per h
    cells = [
        seed_cell(f"h{h}-dk{dk}", 3, base=dk == 32, **{"model.heads": h, "model.d_k": dk, "model.d_v": dv})
        for h, dk, dv in ((8, 32, 32), (8, 8, 32), (32, 8, 8))
    ]
    fig, caption = P.bleu_figure("s", cells, ["model.heads", "model.d_k", "model.d_v"])
    assert fig.axes[0].get_xlabel() == "d_k" and "one line per h" in caption
    P.pyplot().close(fig)


def test_params_plot_labels_do_not_overlap():
    from headsweep.reports.sweep import plots as P

    fig, _ = P.params_figure("heads_by_width", heads_by_width_cells())
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    texts = [t for t in [*ax.texts, *(ax.get_legend().get_texts() if ax.get_legend() else [])] if t.get_text()]
    boxes = [t.get_window_extent(renderer) for t in texts]
    assert len(texts) >= 8  # every cell named once
    overlapping = [
        (a.get_text(), b.get_text())
        for i, (a, ba) in enumerate(zip(texts, boxes))
        for b, bb in zip(texts[i + 1 :], boxes[i + 1 :])
        if ba.overlaps(bb)
    ]
    assert overlapping == []
    P.pyplot().close(fig)


def test_plots_of_one_seed_per_cell_do_not_claim_a_mean_over_seeds(tmp_path):
    from headsweep.reports.pages import compare as C
    from headsweep.reports.sweep import plots as P
    from test_compare import analysis, write_runs

    groups = write_runs(tmp_path, {"a": [analysis(0.0)], "b (base)": [analysis(0.1)]})
    md = C.report_section(groups, tmp_path / "out", "s", "b (base)")
    caption = md[md.index("<figcaption>") : md.index("</figcaption>")]
    assert "one seed" in caption and "mean ± sd" not in caption
    cells = heads_by_width_cells(seeds=1)
    for fig, caption in (P.bleu_figure("s", cells, KEYS), P.params_figure("s", cells)):
        assert "one seed" in caption and "mean ± sd" not in caption and "mean over seeds" not in caption
        P.pyplot().close(fig)
    fig, caption = P.bleu_figure("s", heads_by_width_cells(seeds=3), KEYS)
    assert "mean over seeds" in caption
    P.pyplot().close(fig)


def test_a_one_seed_figure_says_so_and_spans_the_seed_noise():
    """One seed per cell: "(1 seed)" in the title, a y-range at least 4 seed sds wide (the sd measured on the
    cells with 3 seeds: report_plots.seed_spread) and the base's ± 1 sd shaded, so two cells 0.3 BLEU apart
    do not fill the plot as an effect would."""
    from headsweep.reports.sweep import plots as P

    cells = [
        seed_cell(f"h{h}", 1, base=h == 8, **{"model.heads": h, "model.d_k": 256 // h, "model.d_v": 256 // h})
        for h in (4, 8, 16)
    ]
    for c, bleu in zip(cells, (34.0, 34.2, 34.3)):
        c.row.update(test_bleu=bleu, test_bleu_seeds=[bleu])
    fig, caption = P.bleu_figure("s", cells, ["model.heads", "model.d_k", "model.d_v"], spread=0.6)
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    assert "(1 seed)" in ax.get_title() and hi - lo >= 4 * 0.6 - 1e-9
    assert "base ± one seed sd (0.60)" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert "spans at least 4 seed sds (0.60 BLEU" in caption
    P.pyplot().close(fig)
    fig, caption = P.bleu_figure("s", heads_by_width_cells(seeds=3), KEYS, spread=0.6)  # seeds show their own
    assert "(1 seed)" not in fig.axes[0].get_title() and "seed sds" not in caption
    P.pyplot().close(fig)


def test_every_sweeps_pages_skip_a_sweep_stopped_in_phase_1_but_a_named_one_stops():
    from headsweep.reports.build import sweep_pages

    def write(name):
        if name == "grid_only":
            raise R.PhaseOneOnly("only the learning-rate grid's runs so far")
        return [Path(f"{name}.md")]

    assert sweep_pages(["a", "grid_only", "b"], write, every=True) == [Path("a.md"), Path("b.md")]
    with pytest.raises(R.PhaseOneOnly):
        sweep_pages(["a", "grid_only"], write, every=False)


def test_title_names_the_row_most_cells_carry_not_the_shared_bases():
    # row D's sweep shows its base through row B's run (one experiment, stored once): the title must say row D
    from types import SimpleNamespace

    from headsweep.reports.sweep.page import title

    def cell(*tags):
        return SimpleNamespace(runs=[SimpleNamespace(results={"config": {"tags": list(tags)}})])

    cells = [cell("row-B", "base"), cell("row-D", "cell-drop0"), cell("row-D", "cell-drop0.2")]
    assert title("table3_d_dropout_start_h200", cells, ["model.dropout"]).endswith("(Table 3, row D)")
    assert "Table 3" not in title("other", [cell("base"), cell("x")], ["model.heads"])


def test_a_budgets_store_gets_no_sweep_page_and_the_index_points_to_the_budgets_page(tmp_path):
    """`make budgets`' trunks and branches (runs recording budgets.role) are cells of one trunk at several budgets,
    not cells against a base: SWEEP=all skips them with one line, by name they stop with it, and the index does not
    ask for their sweep page (the budgets page, one of its views, reads them)."""
    from headsweep.reports.build import sweep_pages
    from headsweep.reports.site.index import write_index

    data = tmp_path / "data"
    data.mkdir()
    with gzip.open(data / "test.en.gz", "wt", encoding="utf-8") as f:
        f.write("".join(r + "\n" for r in REFS))
    root = tmp_path / "results"
    for seed in (1, 2):
        run = make_run(root / "table3_c_budgets", data, 8, seed, 30.0, CELLS[8]["hyps"])
        results = json.loads((run / "results.json").read_text())
        results["config"]["budgets"] = {"role": "branch", "trunk": "abc"}
        (run / "results.json").write_text(json.dumps(results))
    out = tmp_path / "reports"
    out.mkdir()
    with pytest.raises(R.BudgetStore, match="make budgets-report"):
        R.write_report("table3_c_budgets", root, out, n_samples=10)
    assert sweep_pages(["table3_c_budgets"], lambda n: R.write_report(n, root, out, n_samples=10), every=True) == []
    assert not (out / "table3_c_budgets.md").exists()
    write_index(out, root, questions=[])
    index = (out / "index.md").read_text() + (out / "sweeps.md").read_text()
    assert "table3_c_budgets" not in index  # no "runs but no report yet": the budgets page (a view) reads it


def make_joined_run(
    root: Path, data_dir: Path, h: int, join: int, seed: int, bleu: float, hyps: list[str], base_join: int = 1
):
    """A lengths run: row A's h at data.join sentence pairs per example (test hypotheses joined as its data); the
    sweep's base is h 8 at base_join."""
    d_k = 256 // h
    cell = f"h{h}-dk{d_k}-dv{d_k}-join{join}"
    run = root / f"{cell}-s{seed}"
    (run / "hypotheses").mkdir(parents=True)
    cfg = compose(
        [
            f"model.heads={h}",
            f"data.join={join}",
            f"data.max_len={128 * join}",
            f"seed={seed}",
            "sweep=long_sequences",
            f"run_name={cell}-s{seed}",
            f"tags=[cell-{cell}{',base' if (h, join) == (8, base_join) else ''}]",
            f"paths.output_dir={run}",
            f"data.dir={data_dir}",
            "data.test_split=test",
            "data.limit_eval=4",
            "module.test_beam_size=1",
        ]
    )
    hyp = run / "hypotheses" / "test.beam.en"
    joined = [" ".join(hyps[i : i + join]) for i in range(0, 4, join)]
    hyp.write_text("".join(x + "\n" for x in joined))
    results = {
        "status": "complete",
        "run_name": f"{cell}-s{seed}",
        "sweep": "long_sequences",
        "config": OmegaConf.to_container(cfg, resolve=True),
        "params": {"total": 7_577_600},
        "hypotheses": {"test.beam": str(hyp)},
        "metrics": {
            "test/bleu": bleu,
            "test/chrf": 50.0,
            "val/bleu": bleu,
            "val/ppl": 9.0,
            "test/ppl": 9.0,
            "train/steps": cfg.trainer.max_steps,
        },
    }
    write_results(run, results)
    (run / "metrics.csv").write_text("epoch,step,train/loss,val/bleu,val/loss\n")


def test_a_cell_at_another_length_is_compared_with_the_base_at_its_length(tmp_path):
    """The lengths sweep: h = 32 at join 2 against h = 8 at join 2 (its length's base), not against the join 1
    base, although data.max_len differs between the lengths (it follows data.join); h = 8 at join 2 against
    nothing (BLEU over joined segments is another test set); h = 32 at join 1 against the base. No joined cell
    has a paper row (Table 3 joins nothing)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "test.en").write_text("".join(r + "\n" for r in REFS))
    root = tmp_path / "multirun" / "long_sequences"
    good, bad = CELLS[8]["hyps"], CELLS[4]["hyps"]
    bleus = {(8, 1): [30.0, 31.0], (32, 1): [28.0, 29.0], (8, 2): [36.0, 38.0], (32, 2): [33.0, 34.0]}
    for (h, join), values in bleus.items():
        for seed, bleu in enumerate(values, start=1):
            make_joined_run(root, data, h, join, seed, bleu, good if h == 8 else bad)
    runs, _ = R.load_runs(root)
    cells = R.group_cells(runs)
    assert {"data.join", "data.max_len"} <= set(R.varied_keys(cells))
    N.summarize(cells, n_samples=100)
    rows = {c.label: c.row for c in cells}
    long_h32, long_h8 = rows["h32-dk8-dv8-join2"], rows["h8-dk32-dv32-join2"]
    assert long_h32["against"] == "h8-dk32-dv32-join2" and long_h32["delta"] == pytest.approx(33.5 - 37.0)
    assert long_h32["against_words"] == "the base at its length"
    # the base at another length is compared with nothing: joined segments are another test set
    assert long_h8["against"] is None and long_h8["delta"] is None and long_h8["own_base"]
    assert rows["h32-dk8-dv8-join1"]["against"] is None
    assert rows["h32-dk8-dv8-join1"]["delta"] == pytest.approx(28.5 - 30.5)
    assert long_h32["paper"] is None and long_h8["paper"] is None and rows["h32-dk8-dv8-join1"]["paper"] is not None
    assert long_h32["p_bootstrap"] is not None  # the paired bootstrap pairs joined hypotheses with joined references
    assert N.early_references(cells)["h32-dk8-dv8-join2"].label == "h8-dk32-dv32-join2"
    md = R.write_report("long_sequences", root.parent, tmp_path / "out", n_samples=20)[0].read_text()
    assert "h8-dk32-dv32-join2: the base at its length, compared with no cell of another length" in md
    assert "# long_sequences: test BLEU by h, d_k, d_v, join\n" in md  # max len follows the join: not in the title
    assert any(
        "against h8-dk32-dv32-join2 (the base at its length)" in w
        or "than h8-dk32-dv32-join2 (the base at its length)" in w
        for w in N.verdicts(cells)
    )


def test_a_base_of_joined_pairs_has_no_paper_row(tmp_path):
    """long_sequences_base_lengths: the base alone at join 8 and 4, its base cell at join 8. Table 3's base is
    one sentence pair an example, so neither cell, the base included, is shown beside a paper row."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "test.en").write_text("".join(r + "\n" for r in REFS))
    root = tmp_path / "multirun" / "long_sequences"  # its runs as the fixture writes them (sweep long_sequences)
    for join, values in {8: [6.0, 7.0], 4: [15.0]}.items():
        for seed, bleu in enumerate(values, start=1):
            make_joined_run(root, data, 8, join, seed, bleu, CELLS[8]["hyps"], base_join=8)
    runs, _ = R.load_runs(root)
    cells = R.group_cells(runs)
    N.summarize(cells, n_samples=20)
    rows = {c.label: c.row for c in cells}
    assert rows["h8-dk32-dv32-join8"]["paper"] is None and rows["h8-dk32-dv32-join4"]["paper"] is None
    assert rows["h8-dk32-dv32-join4"]["own_base"]  # compared with nothing: another test set
    md = R.write_report("long_sequences", root.parent, tmp_path / "out", n_samples=20)[0].read_text()
    assert "- No cell has a row in the paper's Table 3 (" in md and "so the table has no paper columns.\n" in md
    assert "paper: Table 3 row base" not in md


def test_a_cells_gap_at_two_lengths_is_compared_over_seeds(tmp_path):
    """per_length.length_interactions: h 32's Δ at join 2 minus its Δ at join 1, over the four cells' seeds, is
    (33.5 - 37.0) - (28.75 - 30.5) = -1.75 with a Welch-Satterthwaite interval; with a single seed somewhere there is
    an estimate and no interval."""
    from headsweep.reporting.stats import contrast
    from headsweep.reports.sweep.per_length import length_interactions

    data = tmp_path / "data"
    data.mkdir()
    (data / "test.en").write_text("".join(r + "\n" for r in REFS))
    root = tmp_path / "multirun" / "long_sequences"
    bleus = {(8, 1): [30.0, 31.0], (32, 1): [28.0, 29.5], (8, 2): [36.0, 38.0], (32, 2): [33.0, 34.0], (1, 2): [37.0]}
    bleus[(1, 1)] = [35.0, 35.4]
    for (h, join), values in bleus.items():
        for seed, bleu in enumerate(values, start=1):
            make_joined_run(root, data, h, join, seed, bleu, CELLS[8]["hyps"])
    runs, _ = R.load_runs(root)
    cells = R.group_cells(runs)
    base = next(c for c in cells if c.label == "h8-dk32-dv32-join1")
    want = contrast([(1, bleus[(32, 2)]), (-1, bleus[(8, 2)]), (-1, bleus[(32, 1)]), (1, bleus[(8, 1)])])
    assert want["estimate"] == pytest.approx((33.5 - 37.0) - (28.75 - 30.5)) and want["lo"] < want["estimate"]
    lines = length_interactions(cells, base)
    assert lines == [
        "h 1: its Δ at join 2 minus its Δ at join 1: -4.70 BLEU; no interval (1, 2, 2, 2 seeds: 2 needed in each "
        "cell).",
        f"h 32: its Δ at join 2 minus its Δ at join 1: -1.75 BLEU (95% CI [{want['lo']:+.2f}, {want['hi']:+.2f}], "
        f"Welch-Satterthwaite over seeds, p = {want['p']:.3f}, Holm p = {want['p']:.3f}; seeds 2, 2, 2, 2): no change "
        "with length shown (Holm p >= 0.05).",
    ]
    assert length_interactions([c for c in cells if c.runs[0].flat["data.join"] == 1], base) == []


def test_the_slope_over_h_at_two_lengths_is_one_contrast_of_every_cells_seeds(tmp_path):
    """per_length.length_slopes: test BLEU and final val loss per doubling of h, fitted by least squares on log2 h
    at each length (numpy's polyfit on the cell means as the reference), and their difference with one interval
    over every cell's seeds; a flat join 1 against a falling join 2 reads steeper; an h at one length only is
    left out of the fit, an h under 2 seeds at a length too (named), and cells of two machine classes get no
    number."""
    import numpy as np

    from headsweep.reporting.stats import contrast
    from headsweep.reports.sweep.per_length import length_slopes

    data = tmp_path / "data"
    data.mkdir()
    (data / "test.en").write_text("".join(r + "\n" for r in REFS))
    root = tmp_path / "multirun" / "long_sequences"
    # (h, join): BLEU per seed; val loss = 3 - BLEU / 20 (rises as BLEU falls). h 4 only at join 1: not fitted
    bleus = {(1, 1): [30.0, 31.0], (8, 1): [30.5, 30.9], (32, 1): [29.8, 31.0], (4, 1): [20.0, 21.0]}
    bleus |= {(1, 2): [32.0, 33.2], (8, 2): [29.0, 30.0], (32, 2): [26.1, 27.0]}
    bleus |= {(16, 1): [30.0, 30.5], (16, 2): [20.0]}  # one seed at join 2: no interval, so left out, named
    for (h, join), values in bleus.items():
        for seed, bleu in enumerate(values, start=1):
            make_joined_run(root, data, h, join, seed, bleu, CELLS[8]["hyps"])
            path = root / f"h{h}-dk{256 // h}-dv{256 // h}-join{join}-s{seed}" / "results.json"
            results = json.loads(path.read_text())
            results["metrics"]["val/loss"] = 3 - bleu / 20
            path.write_text(json.dumps(results))
    runs, _ = R.load_runs(root)
    cells = R.group_cells(runs)
    base = next(c for c in cells if c.label == "h8-dk32-dv32-join1")
    hs = [1, 8, 32]

    def fit(join, f=lambda b: b):
        return np.polyfit(np.log2(hs), [np.mean([f(b) for b in bleus[(h, join)]]) for h in hs], 1)[0]

    w = np.log2(hs) - np.log2(hs).mean()
    w = w / (w * w).sum()
    diff = contrast([(s * a, bleus[(h, j)]) for s, j in ((1, 2), (-1, 1)) for a, h in zip(w, hs)])
    assert diff["estimate"] == pytest.approx(fit(2) - fit(1)) and diff["lo"] < diff["estimate"] < diff["hi"]
    bleu_line, loss_line = length_slopes(cells, base)
    assert bleu_line.startswith(
        "Test BLEU per doubling of h (least-squares slope over h 1, 8, 32; h 16 left out, under 2 seeds at a length; "
        "BLEU; 95% CI"
    )
    assert f"at join 1 {fit(1):+.2f} [" in bleu_line and f"at join 2 {fit(2):+.2f} [" in bleu_line
    assert (
        f"join 2 minus join 1 {diff['estimate']:+.2f} [{diff['lo']:+.2f}, {diff['hi']:+.2f}], p = {diff['p']:.3f}:"
        in (bleu_line)
    )
    assert diff["p"] < 0.05 and bleu_line.endswith(
        "steeper at join 2 (one test over every h for this metric, no Holm)."
    )
    assert f"at join 2 {fit(2, lambda b: 3 - b / 20):+.3f} [" in loss_line and "steeper at join 2" in loss_line
    # one seed of join 2's h 32 on another machine class: no slope is read across classes
    run = next(r for c in cells if c.label == "h32-dk8-dv8-join2" for r in c.runs)
    run.results["machine"] = {**run.results.get("machine", {}), "cpu_class": "Intel Xeon (AMX)"}
    assert length_slopes(cells, base)[0].startswith("Slope on log2 h at join 2 against join 1: not computed")
    assert length_slopes([c for c in cells if c.runs[0].flat["data.join"] == 1], base) == []


def test_the_bleu_figure_of_lengths_puts_h_on_the_axis_and_a_line_per_join_never_max_len():
    """data.max_len follows data.join (one value per join): neither the axis nor a line of its own. With h varied,
    h is the axis and each join a line; with the base alone, join is the axis."""
    from headsweep.reports.sweep.plots import bleu_axes

    def cell(h, join):
        flat = {"model.heads": h, "model.d_k": 256 // h, "model.d_v": 256 // h, "data.join": join}
        return seed_cell(f"h{h}-join{join}", 2, base=h == 8, **flat, **{"data.max_len": 128 if join == 1 else 256})

    keys = ["model.heads", "model.d_k", "model.d_v", "data.max_len", "data.join"]
    cells = [cell(h, join) for h in (8, 32, 1) for join in (1, 8, 4)]
    assert bleu_axes(cells, keys) == ("model.heads", ["data.join"])
    assert bleu_axes([cell(8, join) for join in (1, 8, 4)], ["data.max_len", "data.join"]) == ("data.join", [])
    # a max_len that does not follow the join is a setting of its own: a line
    odd = cells + [seed_cell("h8-join4-max_len512", 2, **{**cells[2].runs[0].flat, "data.max_len": 512})]
    assert bleu_axes(odd, keys) == ("model.heads", ["data.max_len", "data.join"])


def test_the_best_h_and_the_ranking_are_read_one_length_at_a_time():
    """Best h per length (per_length.best_per_length): the highest mean at each length whose cells vary h, with
    its verdict against its length's base; a length with the base alone says nothing; one length, no words.
    The ranking over training takes the base's length alone (same_length)."""
    from headsweep.reports.sweep.per_length import best_per_length, same_length

    def cell(h, join, bleu, delta=None, verdict=None):
        c = seed_cell(f"h{h}-join{join}", 2, base=h == 8, **{"model.heads": h, "data.join": join})
        c.row = {"test_bleu": bleu, "delta": delta, "verdict": verdict}
        return c

    cells = [
        cell(8, 1, 35.7),
        cell(32, 1, 35.1, -0.6, "inconclusive"),
        cell(8, 2, 36.4),
        cell(4, 2, 37.0, 0.6, "better"),
    ]
    cells.append(cell(8, 8, 6.7))
    assert best_per_length(cells) == [
        "Best h at join 1 by mean test BLEU: h 8 (35.70, 2 seeds; the base at this length: no cell's mean is above "
        "it); 2 cells of h at this length.",
        "Best h at join 2 by mean test BLEU: h 4 (37.00, 2 seeds; +0.60 against the base at this length, better); "
        "2 cells of h at this length.",
    ]
    assert best_per_length([c for c in cells if c.runs[0].flat["data.join"] == 1]) == []
    assert [c.label for c in same_length(cells, cells[0])] == ["h8-join1", "h32-join1"]
    assert same_length(cells, None) == cells


def test_the_rank_table_reads_each_seeds_measure_and_leaves_out_cells_with_none(tmp_path):
    """The sweep page's attention-rank table (reports.sweep.ranks): per cell, the encoder heads' logit rank
    averaged over layers and heads, then mean ± sd over the seeds measured; its share of min(n, d_k); the
    cross-attention entropy beside a uniform head's. A cell with no measure is not in the table."""
    from headsweep.reports.sweep.ranks import rank_rows, rank_section

    data = tmp_path / "data"
    data.mkdir()
    (data / "test.en").write_text("".join(r + "\n" for r in REFS))
    root = tmp_path / "multirun" / "long_sequences"
    for (h, join), values in {(8, 1): [30.0, 31.0], (32, 2): [33.0, 34.0]}.items():
        for seed, bleu in enumerate(values, start=1):
            make_joined_run(root, data, h, join, seed, bleu, CELLS[8]["hyps"])

    def measure(logit: list[list[float]], cross: float) -> dict:
        layers = [{"entropy": [1.0] * len(x), "logit_rank": x, "map_rank": [10.0] * len(x)} for x in logit]
        return {
            "heads": 32,
            "d_k": 8,
            "kinds": {
                "enc_self": {"keys": 110.0, "uniform_entropy": 4.6, "layers": layers},
                "cross": {"keys": 110.0, "uniform_entropy": 4.6, "layers": [{"entropy": [cross, cross]}]},
            },
        }

    (root / "h32-dk8-dv8-join2-s1" / "attention_rank.json").write_text(json.dumps(measure([[7, 8], [6, 7]], 4.6)))
    (root / "h32-dk8-dv8-join2-s2" / "attention_rank.json").write_text(json.dumps(measure([[4, 4], [4, 4]], 4.4)))
    runs, _ = R.load_runs(root)
    cells = R.group_cells(runs)
    assert rank_rows(cells) == [
        [
            "h32-dk8-dv8-join2",
            "32",
            "8",
            "110",
            "5.5 ± 2.1",
            "69%",
            "10.0 ± 0.0",
            "1.00 ± 0.00",
            "4.50 ± 0.14 (4.60)",
            "2",
        ]
    ]
    assert "## Attention rank" in rank_section(cells) and rank_section(cells[:1]) is None


def test_a_sweep_named_like_a_views_page_is_refused_and_no_spec_is(tmp_path):
    """A sweep page is reports/<sweep>.md: a sweep named `lengths` would overwrite `make lengths`' page (the
    long-sequence sweep was first run under that name). Refused before anything is read or written; no sweep
    spec or variant in sweeps/ has such a name, nor has any folder of results/."""
    from headsweep.sweeps.specs import sweep_names

    with pytest.raises(R.ReportError, match=r"over the page of `make lengths`"):
        R.write_report("lengths", tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert R.page_of_a_view("table3_h200") == "make table3-report SUFFIX=_<card>" and R.page_of_a_view("cells")
    assert [s for s in sweep_names() if R.page_of_a_view(s)] == []
    assert [d.name for d in Path("results").iterdir() if R.page_of_a_view(d.name)] == []
