"""Table 3 by one command (headsweep.sweeps.table3) and its page (headsweep.reports.pages.table3): the rows checked
before anything is planned, one base run shared by every row; the page on a tiny fake store (a row at the earlier
protocol, a row with only its learning-rate grid, a row not run, a run under another protocol left out, a row
under the new start, a row whose base ran on another machine class), its verdicts by hand; reports/table3.json
rendered into the page, the index and README, each saying the record's verdict for every cell."""

import gzip
import json
import os
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import write_results
from headsweep import store
from headsweep.config import SWEEPS_DIR, compose
from headsweep.reports.pages import table3 as T
from headsweep.reports.pages import table3_page as TP
from headsweep.reports.pages import table3_rows as R
from headsweep.reports.pages import verdicts as V
from headsweep.sweeps import table3 as P
from headsweep.sweeps.lr_select import LR_KEY, plan_lr
from headsweep.sweeps.sweep import parse_grid

SHIPPED = SWEEPS_DIR.parent / "results"
UNIT = ["model.init_wo_gain=1.0", "model.init_ff2_gain=1.0"]  # the earlier protocol's start (the default is 1/sqrt(6))


# -- the command ---------------------------------------------------------------------------------------------


def test_an_unknown_row_stops_with_one_line_naming_the_rows(capsys):
    assert P.main(["--rows", "F", "--dry"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: ROWS=F: no row F in Table 3; the rows are A, B, C, D, E (e.g. ROWS=A,D; empty: all)"]
    with pytest.raises(P.RowError, match="no row Z"):
        P.parse_rows("A,Z")
    assert P.parse_rows("d, a") == ["A", "D"] and P.parse_rows("") == list(P.ROWS)


def test_every_row_plans_todays_protocol_around_one_base_run(tmp_path, monkeypatch):
    """Each row's sweeps, planned as `make table3` plans them: fan_in, step decay, the ablation budget, and a
    base cell whose grid runs are one experiment in every row (the store holds it once): row B's shipped one."""
    monkeypatch.setattr("headsweep.config.cpu_has_bf16", lambda: True)
    keys = {}
    for row, names in P.ROWS.items():
        grid = parse_grid(P.row_grid(row))
        for name in names:
            lr = plan_lr(
                name, P.SEEDS, ["trainer.precision=bf16-mixed"], grid, results=tmp_path, budget=P.BUDGET, jobs=1
            )
            for c in lr.cells:
                assert c.flat["model.init"] == "fan_in" and c.flat["module.decay_by"] == "steps", (name, c.label)
                assert c.flat["trainer.max_steps"] == 1150, name
            (base,) = [c for c in lr.cells if c.base]
            keys[name] = {v: store.flat_key({**base.flat, LR_KEY: v}, 1) for v in grid}
            assert len(lr.cells) == {"A": 6, "B": 3, "C": 8, "D": 3, "E": 2}[row], name
    for rate in {v for k in keys.values() for v in k}:  # one base experiment per rate, whichever rows try it
        assert len({k[rate] for k in keys.values() if rate in k}) == 1, (rate, keys)
    shipped = SHIPPED / "table3_b_fan_in" / "h8-dk32-dv32-lr0.002-s1"
    if shipped.is_symlink():  # the store's run row B trained is the base every other row reuses
        assert Path(os.readlink(shipped)).name == keys["table3_a_fan_in"][0.002]


def test_each_row_runs_on_its_own_grid_and_the_page_names_every_grid(monkeypatch, capsys, bf16_cpu):
    """Rows A and C sweep 1e-3,2e-3,4e-3 (5e-4 won no earlier cell; 2e-3 needed an edge run nearly everywhere),
    the shipped rows stay on 5e-4,1e-3,2e-3: each sweep is handed its row's grid, and the protocol line says both."""
    seen = {}
    monkeypatch.setattr("headsweep.sweeps.sweep.main", lambda argv: seen.setdefault(argv[1], argv) and 0)
    assert P.main(["--dry", "--rows", "A,B,C,D,E", "trainer.accelerator=cpu"]) == 0
    grids = {name: next(a for a in argv if a.startswith("--lr-grid=")) for name, argv in seen.items()}
    want = {
        "table3_a_fan_in": "--lr-grid=1e-3,2e-3,4e-3",
        "table3_b_fan_in": "--lr-grid=5e-4,1e-3,2e-3",
        "table3_c": "--lr-grid=1e-3,2e-3,4e-3",
        "table3_d_dropout": "--lr-grid=5e-4,1e-3,2e-3",
        "table3_d_smoothing": "--lr-grid=5e-4,1e-3,2e-3",
        "table3_e": "--lr-grid=5e-4,1e-3,2e-3",
    }
    assert grids == want
    assert "from 5e-4,1e-3,2e-3 (rows A and C: 1e-3,2e-3,4e-3)" in capsys.readouterr().out
    from headsweep.reports.pages.table3_rows import EARLIER, PROTOCOLS

    assert "5e-4,1e-3,2e-3 (rows A and C: 1e-3,2e-3,4e-3)" in PROTOCOLS[EARLIER]["words"]


def test_the_default_start_runs_each_row_under_its_own_name_and_unit_keeps_the_earlier_rows(
    monkeypatch, capsys, bf16_cpu
):
    """`make table3` trains every row from the model's default residual-output gains (1/sqrt(6)) as <sweep>_start,
    beside the rows measured at gain 1 (their specs pin it); START=unit plans those rows under their own names."""
    from headsweep.model.transformer import TransformerConfig

    seen = {}
    monkeypatch.setattr("headsweep.sweeps.sweep.main", lambda argv: seen.setdefault(argv[1], argv) and 0)
    assert P.main(["--dry", "--rows", "C,D", "trainer.accelerator=cpu"]) == 0
    g = TransformerConfig().init_wo_gain
    assert g == pytest.approx(6**-0.5) and TransformerConfig().init_ff2_gain == g
    assert {argv[argv.index("--name") + 1] for argv in seen.values()} == {
        "table3_c_start",
        "table3_d_dropout_start",
        "table3_d_smoothing_start",
    }
    for argv in seen.values():  # the gains come after the spec's pinned 1.0, so they are the ones Hydra keeps
        assert argv[-2:] == [f"model.init_wo_gain={g!r}", f"model.init_ff2_gain={g!r}"], argv
    seen.clear()
    assert P.main(["--dry", "--rows", "C", "--start", "unit", "trainer.accelerator=cpu"]) == 0
    assert list(seen) == ["table3_c"] and "--name" not in seen["table3_c"]
    assert not any("init_wo_gain" in a for a in seen["table3_c"])
    assert "W^O and W_2 at gain 1 (the earlier start)" in capsys.readouterr().out


def test_a_cpu_without_bf16_units_runs_a_bf16_row_in_fp32_under_its_own_name_with_its_own_base(
    tmp_path, monkeypatch, capsys
):
    """Row B's runs are bf16; on an AVX2-only CPU (bf16 5-130x slower) each row is planned as <sweep>_start_fp32 at
    the machine's fp32, never pinned to bf16, and ONLY reaches make sweep. A bf16 CPU, or a command that sets the
    precision, keeps the rows' own names."""
    cfg = compose(["trainer.precision=bf16-mixed", f"paths.output_dir={tmp_path / 'table3_b_fan_in' / 'x-s1'}"])
    write_results(tmp_path / "table3_b_fan_in" / "x-s1", {"status": "complete", "config": OmegaConf.to_container(cfg)})
    seen = {}
    monkeypatch.setattr(
        "headsweep.sweeps.sweep.main", lambda argv: seen.setdefault(argv[argv.index("--name") + 1], argv) and 0
    )
    monkeypatch.setattr("headsweep.config.cpu_has_bf16", lambda: False)
    args = ["--dry", "--rows", "C,D", "--only", "*N4*", "--results", str(tmp_path), "trainer.accelerator=cpu"]
    assert P.main(args) == 0
    assert set(seen) == {"table3_c_start_fp32", "table3_d_dropout_start_fp32", "table3_d_smoothing_start_fp32"}
    for argv in seen.values():
        assert not any(a.startswith("trainer.precision=") for a in argv), argv
        assert argv[argv.index("--only") + 1] == "*N4*"
    out = capsys.readouterr().out
    assert "in fp32, this CPU having no bf16 units (sweeps named <sweep>_start_fp32, own base)" in out
    for bf16, extra, name, pin in (
        (True, [], "table3_c_start", "trainer.precision=bf16-mixed"),
        (False, ["trainer.precision=bf16-mixed"], "table3_c_start", "trainer.precision=bf16-mixed"),
    ):
        seen.clear()
        monkeypatch.setattr("headsweep.config.cpu_has_bf16", lambda b=bf16: b)
        assert P.main(["--dry", "--rows", "C", "--results", str(tmp_path), "trainer.accelerator=cpu", *extra]) == 0
        assert list(seen) == [name] and pin in seen[name], (bf16, seen)


def test_a_finished_run_under_another_start_in_a_row_is_one_line(tmp_path, capsys):
    """A run trained at gain 1 left in results/table3_c_start: the row would mix two starts; nothing runs."""
    run = tmp_path / "table3_c_start" / "h8-dk32-dv32-N4-dm256-ff1024-s1"
    cfg = compose(
        ["trainer.precision=bf16-mixed", "model.init_wo_gain=1.0", "model.init_ff2_gain=1.0", f"paths.output_dir={run}"]
    )
    write_results(run, {"status": "complete", "config": OmegaConf.to_container(cfg, resolve=True)})
    assert P.main(["--rows", "C", "--results", str(tmp_path), "--root", str(tmp_path / "multirun")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "h8-dk32-dv32-N4-dm256-ff1024-s1 was trained with W^O, W_2 gains 1, 1" in err[0]
    assert "a row never mixes two starts" in err[0] and not (tmp_path / "multirun").exists()


@pytest.mark.skipif(not (SHIPPED / "table3_b_fan_in").is_dir(), reason="no shipped table3_b_fan_in")
def test_row_b_is_the_shipped_sweep_and_finds_every_job_done(tmp_path, capsys, monkeypatch, bf16_cpu):
    monkeypatch.setattr("headsweep.config.cpu_has_bf16", lambda: True)
    assert P.main(["--rows", "B", "--start", "unit", "--dry", "--results", str(SHIPPED), "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # both phases: the grid (3 cells x 3 rates) and the chosen rates (3 cells x 3 seeds), nothing to train
    assert out.count("sweep table3_b_fan_in (") == 2 and out.count("9 jobs, 9 done, 0 to run") == 2, out
    assert not (tmp_path / "table3_b_fan_in").exists()  # a dry plan writes nothing


# -- the page ---------------------------------------------------------------------------------------------------

REFS = ["a man rides a red bike .", "two dogs play in the snow .", "a woman sings .", "kids run on the beach ."]
AMX = {"cpu": "Intel(R) Xeon(R) Processor", "cpu_class": "AVX512 + AMX (bf16 units)", "gpu": None, "torch": "2"}
EPYC = {"cpu": "AMD EPYC 7B13", "cpu_class": "AVX512 + AVX512-BF16 (bf16 units)", "gpu": None, "torch": "2"}
START = [f"model.init_wo_gain={R.START_GAIN!r}", f"model.init_ff2_gain={R.START_GAIN!r}"]


def fake_run(root: Path, data: Path, sweep: str, cell: str, overrides: list[str], seed: int, bleu: float, **kw) -> Path:
    """A finished run of `sweep` in the store (results/runs/<key>) and its view results/<sweep>/<job>: config at
    the earlier protocol unless `protocol` overrides say otherwise, test BLEU `bleu`, hypotheses that differ by
    cell and seed, a val-loss curve at `early` (step 460, 40% of 1,150) that falls by `drop` (0.7) to the end."""
    phase = kw.get("phase", "chosen")
    lr = kw.get("lr", 0.002)
    name = f"{cell}-lr{lr:g}-s{seed}" if phase == "grid" else f"{cell}-s{seed}"
    tag_cell = f"{cell}-lr{lr:g}" if phase == "grid" else cell
    tags = [f"cell-{tag_cell}", *(["base"] if kw.get("base", False) and phase != "grid" else [])]
    cfg = compose(
        [
            "budget=ablation",
            "trainer.precision=bf16-mixed",
            *overrides,
            *kw.get("protocol", ["model.init=fan_in", *UNIT]),
            f"seed={seed}",
            f"sweep={sweep}",
            f"run_name={name}",
            f"paths.output_dir={root / sweep / name}",
            f"tags=[{','.join(tags)}]",
            f"data.dir={data}",
            "data.test_split=test",
            f"module.peak_lr={lr}",
            *(
                [f"lr_select={{phase:{phase},grid:[0.0005,0.001,0.002],select_on:'val/loss'}}"]
                if kw.get("grid", True)
                else []
            ),
        ]
    )
    config = OmegaConf.to_container(cfg, resolve=True)
    run = store.store_dir(root, store.experiment_key(config))
    if store.read_record(run) is not None:  # the same experiment again (seed 1 at its grid's rate): one run, a view
        store.show(
            run, root / sweep / name, tags, **({"lr_select": config["lr_select"]} if kw.get("grid", True) else {})
        )
        return root / sweep / name
    (run / "hypotheses").mkdir(parents=True)
    hyps = [r if (i + seed + len(cell)) % 3 else r.replace("a ", "the ", 1) for i, r in enumerate(REFS)]
    (run / "hypotheses" / "test.beam.en").write_text("".join(h + "\n" for h in hyps))
    early, drop = kw.get("early", 3.0), kw.get("drop")  # drop: from step 460 to the end (0.7 when not given)
    curve = {230: early + 0.8, 460: early, 690: early - 0.4, 920: early - 0.6, 1150: early - 0.7}
    if drop is not None:
        curve.update({690: early - drop * 4 / 7, 920: early - drop * 6 / 7, 1150: early - drop})
    lines = ["epoch,step,train/loss,val/bleu,val/loss", *(f"0,{s - 1},,{bleu - 1},{v}" for s, v in curve.items())]
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")
    write_results(
        run,
        {
            "status": "complete",
            "run_name": name,
            "sweep": sweep,
            "config": config,
            "params": {"total": 7_577_600},
            "machine": kw.get("machine"),
            "hypotheses": {"test.beam": str(run / "hypotheses" / "test.beam.en")},
            "metrics": {
                "test/bleu": bleu,
                "test/chrf": 50.0,
                "val/bleu": bleu - 1,
                "val/ppl": kw.get("val_ppl", 12.0 - bleu / 10),
                "val/loss": kw.get("val_loss", early - 0.7),
                "test/ppl": 9.0,
                "train/steps": config["trainer"]["max_steps"],
            },
        },
    )
    store.show(run, root / sweep / name, tags)
    return root / sweep / name


def row_b(root: Path, data: Path, sweep: str = "table3_b_fan_in", offsets=(30.0, 30.3, 32.0), **kw) -> None:
    """Row B: the base d_k 32 at 30 +- 0.1; d_k 16 and d_k 8 at the given means, the same spread."""
    for seed, noise in zip((1, 2, 3), (-0.1, 0.0, 0.1)):
        for (dk, mean), base in zip(((32, offsets[0]), (16, offsets[1]), (8, offsets[2])), (True, False, False)):
            over = [f"model.d_k={dk}", "model.d_v=32"]
            fake_run(root, data, sweep, f"h8-dk{dk}-dv32", over, seed, mean + noise, base=base, **kw)


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    with gzip.open(d / "test.en.gz", "wt", encoding="utf-8") as f:
        f.write("".join(r + "\n" for r in REFS))
    return d


@pytest.fixture
def fake_root(tmp_path, data):
    root = tmp_path / "results"
    # row B: d_k 16 +0.3 (the paper's -0.4 is no clear effect: inside ±1, agrees); d_k 8 +2.0 (the paper's -0.7 is
    # a cost: the other side, beyond noise, disagrees)
    row_b(root, data)
    # a row B run under the xavier protocol: never in the table
    xavier = ["model.init=xavier", "module.decay_by=steps_or_time"]
    fake_run(root, data, "table3_b_fan_in", "h8-dk4-dv32", ["model.d_k=4"], 1, 10.0, protocol=xavier, grid=False)
    # row E: only its learning-rate grid so far (seed 1 at each rate)
    for lr in (0.0005, 0.001, 0.002):
        over = ["model.positions=learned"]
        fake_run(root, data, "table3_e", "h8-dk32-dv32-pos-learned", over, 1, 29.0, phase="grid", lr=lr)
    return root


def by_cell(rec: dict, protocol: str = R.EARLIER) -> dict:
    return {(c["row"], c["cell"]): c for c in rec["cells"] if c["protocol"] == protocol}


def test_the_record_holds_each_cells_verdict_its_interval_and_classes(fake_root, tmp_path):
    from scipy.stats import ttest_ind

    out = tmp_path / "reports"
    paths = T.write(fake_root, out)
    assert [p.name for p in paths] == ["table3.json", "table3.md", "table3.html", "table3.png"]
    rec = json.loads((out / "table3.json").read_text())
    b = by_cell(rec)
    dk16, dk8 = b[("B", "d_k 16")], b[("B", "d_k 8")]
    assert (dk16["verdict"], dk8["verdict"]) == ("agrees", "disagrees")
    assert dk16["paper_delta"] == pytest.approx(-0.4) and dk16["paper_effect"] == "no clear effect"
    assert dk8["paper_effect"] == "cost" and dk8["delta"] == pytest.approx(2.0)
    # the interval and p: scipy's Welch on the seeds, the reference the rule is stated in
    ref = ttest_ind([31.9, 32.0, 32.1], [29.9, 30.0, 30.1], equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert dk8["interval"] == pytest.approx([ci.low, ci.high], abs=1e-4) and dk8["p"] == pytest.approx(
        ref.pvalue, rel=1e-3
    )
    # Holm over the page's two p-values (closed form: the smaller times 2, the larger at least that)
    p16 = ttest_ind([30.2, 30.3, 30.4], [29.9, 30.0, 30.1], equal_var=False).pvalue
    small, large = sorted((p16, ref.pvalue))
    assert sorted((dk16["p_holm"], dk8["p_holm"])) == pytest.approx([2 * small, max(2 * small, large)], rel=1e-3)
    assert dk8["cell_class"] == dk8["base_class"] == "not recorded" and dk8["n"] == dk8["n_base"] == 3
    assert rec["rows"]["A"][R.EARLIER]["state"] == "not run yet"
    assert rec["rows"]["E"][R.EARLIER]["state"] == "partial (phase 1 only)"
    assert rec["rows"]["B"][R.EARLIER]["state"] == "complete"
    assert any("h8-dk4-dv32-s1: another protocol: model.init xavier" in n for n in rec["rows"]["B"][R.EARLIER]["notes"])
    # every paper cell is a line of the record under each protocol; none has run under the new start
    assert len(by_cell(rec)) == 18 and len(by_cell(rec, R.START)) == 18
    assert {c["verdict"] for c in by_cell(rec, R.START).values()} == {None} and rec["moved"] == []
    # the paper's cells none of ours matches, in our units: its N 2 at 6 is our N 1 at 3
    assert by_cell(rec)[("C", "N 1")]["state"] == "not run yet" and ("C", "d_model 128") in by_cell(rec)
    md = (out / "table3.md").read_text()
    assert "| B | d_k 8 | -0.7 (cost) | +2.00 [" in md and "| **disagrees** |" in md
    assert "No cell has run under the new start yet" in md


def test_a_cell_whose_base_ran_on_another_class_is_not_compared(tmp_path, data):
    """Row B's cells on the EPYC, its base on the Xeon: nothing computed, the verdict says which class the base
    ran on; a cell with seeds on both classes is compared on the base's, the others named and left out."""
    root = tmp_path / "results"
    for seed, noise in zip((1, 2, 3), (-0.1, 0.0, 0.1)):
        fake_run(
            root, data, "table3_b_fan_in", "h8-dk32-dv32", ["model.d_k=32"], seed, 30 + noise, base=True, machine=AMX
        )
        fake_run(root, data, "table3_b_fan_in", "h8-dk16-dv32", ["model.d_k=16"], seed, 29 + noise, machine=EPYC)
        where = AMX if seed == 1 else EPYC
        fake_run(root, data, "table3_b_fan_in", "h8-dk8-dv32", ["model.d_k=8"], seed, 29 + noise, machine=where)
    rec = T.build(root, T.read_paper(T.PAPER_CSV))
    b = by_cell(rec)
    dk16, dk8 = b[("B", "d_k 16")], b[("B", "d_k 8")]
    assert dk16["verdict"] == "not comparable" and dk16["reason"] == "base on AVX512 + AMX (bf16 units)"
    assert dk16["cell_class"] == EPYC["cpu_class"] and dk16["base_class"] == AMX["cpu_class"]
    assert dk16["delta"] is None and dk16["interval"] is None and dk16["p"] is None
    assert dk8["cell_class"] == dk8["base_class"] == AMX["cpu_class"] and dk8["n"] == 1 and dk8["n_base"] == 3
    assert dk8["left_out"] == [f"seed 2 ({EPYC['cpu_class']})", f"seed 3 ({EPYC['cpu_class']})"]
    assert dk8["verdict"] == "inconclusive" and dk8["interval"] is None and "fewer than 2 on a side" in dk8["reason"]
    md = TP.markdown(rec, None)
    assert "d_k 16: **not comparable**: base on AVX512 + AMX (bf16 units)." in md
    assert "| B | d_k 8 | -0.7 (cost) | -1.10 —, n 1/3, CPU AMX | **inconclusive** |" in md


def test_the_new_start_is_its_own_protocol_and_the_page_lists_what_moved(fake_root, data):
    """Row B again under the new start (gain 1/sqrt(6), sweeps <sweep>_start): each cell beside its earlier
    verdict; d_k 8 now +0.2 (inside ±1, no longer the paper's other side: inconclusive against a cost). A run at
    unit gain in a _start sweep is left out of it, named."""
    row_b(fake_root, data, "table3_b_fan_in_start", offsets=(30.0, 30.3, 30.2), protocol=["model.init=fan_in", *START])
    fake_run(fake_root, data, "table3_b_fan_in_start", "h8-dk16-dv32", ["model.d_k=16"], 4, 5.0)  # unit gain
    rec = T.build(fake_root, T.read_paper(T.PAPER_CSV))
    new = by_cell(rec, R.START)
    assert new[("B", "d_k 16")]["verdict"] == "agrees" and new[("B", "d_k 8")]["verdict"] == "inconclusive"
    assert new[("C", "N 4")]["state"] == "not run yet"
    assert rec["moved"] == [{"row": "B", "cell": "d_k 8", R.EARLIER: "disagrees", R.START: "inconclusive"}]
    assert any("another protocol: model.init_wo_gain 1" in n for n in rec["rows"]["B"][R.START]["notes"])
    md = TP.markdown(rec, None)
    assert "- B, d_k 8: disagrees → inconclusive" in md
    line = next(x for x in md.splitlines() if x.startswith("| B | d_k 8 |"))
    assert line.count("**disagrees**") == 1 and line.count("**inconclusive**") == 1


def test_a_row_only_a_card_finished_is_shown_whole_from_the_card_against_the_cards_own_base(fake_root, data):
    """Row A: the CPU has only a grid run, the H200 the whole row. The record takes every cell of row A, its base
    too, from the card, compared against the card's own base. A card's row still partial is not taken."""
    fake_run(fake_root, data, "table3_a_fan_in", "h1-dk256-dv256", ["model.heads=1"], 1, 25.0, phase="grid")
    fake_card_row_a(fake_root, data, {1: -0.1, 2: 0.1})
    paper = T.read_paper(T.PAPER_CSV)
    assert T.build(fake_root, paper)["rows"]["A"][R.EARLIER]["sweeps"] == ["table3_a_fan_in"]
    fake_card_row_a(fake_root, data, {3: 0.0})  # the third seed finishes the card's row
    rec = T.build(fake_root, paper)
    a = rec["rows"]["A"][R.EARLIER]
    assert a["sweeps"] == ["table3_a_fan_in_h200"] and a["state"] == "complete" and a["devices"] == ["bf16-mixed gpu"]
    assert a["instead_of"] == [["table3_a_fan_in"], "partial (phase 1 only)"]
    assert by_cell(rec)[("A", "h 1")]["delta"] == pytest.approx(-1.0)  # against the card's base (33), not 30
    assert "Shown from the card" in " ".join(a["notes"])


def test_an_fp32_cpu_class_row_is_named_then_shown_partial_once_ahead_in_seeds_then_whole(tmp_path, data):
    """Row B in bf16 has only a grid run; the same row in fp32 on an AVX2-only CPU (table3_b_fan_in_fp32, make table3
    there) is named on the page while it has no cell at 3 seeds, shown partial once it has more cells at 3 seeds
    than bf16, and whole, against its own base, once its third seeds land. Tails that are no machine class (an edge
    check, budget trunks) are never a row."""
    root = tmp_path / "results"
    avx2 = {"cpu": "AMD EPYC", "cpu_class": "AVX2, no bf16 units", "gpu": None, "torch": "2"}
    fake_run(root, data, "table3_b_fan_in", "h8-dk8-dv32", ["model.d_k=8"], 1, 25.0, phase="grid")
    fp32 = {"machine": avx2, "protocol": ["model.init=fan_in", *UNIT, "trainer.precision=32-true"]}
    fake_run(root, data, "table3_b_fan_in_fp32", "h8-dk8-dv32", ["model.d_k=8"], 1, 25.0, phase="grid", lr=1e-3, **fp32)
    b = T.build(root, T.read_paper(T.PAPER_CSV))["rows"]["B"][R.EARLIER]
    assert "table3_b_fan_in_fp32 (phase 1 only): 1 learning-rate grid run." in " ".join(b["notes"])
    fp32 = {"machine": avx2, "protocol": ["model.init=fan_in", *UNIT, "trainer.precision=32-true"]}
    for seed in (1, 2):
        for dk, bleu in ((32, 30.0), (16, 30.3)):  # d_k 8 later
            over = [f"model.d_k={dk}", "model.d_v=32"]
            fake_run(
                root,
                data,
                "table3_b_fan_in_fp32",
                f"h8-dk{dk}-dv32",
                over,
                seed,
                bleu + seed / 10,
                base=dk == 32,
                **fp32,
            )
    paper = T.read_paper(T.PAPER_CSV)
    b = T.build(root, paper)["rows"]["B"][R.EARLIER]
    assert b["sweeps"] == ["table3_b_fan_in"] and b["state"] == "partial (phase 1 only)"
    assert (
        "Also running on another machine class, shown here once complete or ahead in cells at 3 seeds: "
        "[table3_b_fan_in_fp32](table3_b_fan_in_fp32.md) (32-true cpu): "
        "0 of 3 cells at 3 seeds, 1 learning-rate grid run." in " ".join(b["notes"])
    )
    for dk, bleu in ((32, 30.0), (16, 30.3)):
        over = [f"model.d_k={dk}", "model.d_v=32"]
        fake_run(root, data, "table3_b_fan_in_fp32", f"h8-dk{dk}-dv32", over, 3, bleu + 0.3, base=dk == 32, **fp32)
    rec = T.build(root, paper)  # d_k 16 at 3 seeds against bf16's none: shown, partial; d_k 8 not run yet
    b = rec["rows"]["B"][R.EARLIER]
    assert b["sweeps"] == ["table3_b_fan_in_fp32"] and b["state"] == "partial (d_k 8: rate grid only (1 run))"
    assert "shown for having more cells with 3 seeds and a Δ (1) than the CPU's row (0)" in " ".join(b["notes"])
    assert by_cell(rec)[("B", "d_k 16")]["cell_class"] == avx2["cpu_class"]
    for seed in (1, 2, 3):
        over = ["model.d_k=8", "model.d_v=32"]
        fake_run(root, data, "table3_b_fan_in_fp32", "h8-dk8-dv32", over, seed, 32.0 + seed / 10, **fp32)
    rec = T.build(root, paper)
    b = rec["rows"]["B"][R.EARLIER]
    assert b["sweeps"] == ["table3_b_fan_in_fp32"] and b["state"] == "complete" and b["devices"] == ["32-true cpu"]
    assert "Shown from AVX2, no bf16 units in fp32: the bf16 table3_b_fan_in is partial (phase 1 only)" in " ".join(
        b["notes"]
    )
    dk8 = by_cell(rec)[("B", "d_k 8")]
    assert dk8["delta"] == pytest.approx(2.0) and dk8["cell_class"] == dk8["base_class"] == avx2["cpu_class"]
    shown = [TP.short_class(c) for c in (avx2["cpu_class"], AMX["cpu_class"], "AVX512 + AVX512-BF16 (bf16 units)")]
    assert shown == ["CPU AVX2", "CPU AMX", "CPU AVX512-BF16"]  # the page's base and cell lines name classes so
    for tail in ("_edge", "_budgets", "_edge_h200", "_h200"):
        (root / f"table3_b_fan_in{tail}").mkdir()
    assert R.class_suffixes(root, ["table3_b_fan_in"]) == ["_fp32", "_h200"]


def test_a_row_of_two_sweeps_takes_the_one_a_card_finished_and_compares_each_cell_within_its_class(tmp_path, data):
    """Row D: the CPU (AMX) ran the base, P_drop 0.2 and both smoothing cells; the H200 ran the dropout sweep whole
    (its own base, P_drop 0 and 0.2). The row takes the card's dropout sweep and the CPU's smoothing sweep; the base
    cell holds both machines' base runs, and each cell's Δ is against the base runs of its own class."""
    root = tmp_path / "results"
    h200 = {"cpu": "x", "cpu_class": "AVX2, no bf16 units", "gpu": "NVIDIA H200", "torch": "2"}
    gpu = ["trainer.accelerator=gpu"]
    for seed, noise in zip((1, 2, 3), (-0.1, 0.0, 0.1)):
        for sweep in ("table3_d_dropout", "table3_d_smoothing"):
            fake_run(root, data, sweep, "h8-dk32-dv32-base", [], seed, 30 + noise, base=True, machine=AMX)
        fake_run(
            root, data, "table3_d_dropout", "h8-dk32-dv32-drop0.2", ["model.dropout=0.2"], seed, 29 + noise, machine=AMX
        )
        for eps, bleu in ((0.0, 28.0), (0.2, 31.0)):
            over = [f"module.label_smoothing={eps}"]
            fake_run(root, data, "table3_d_smoothing", f"h8-dk32-dv32-ls{eps:g}", over, seed, bleu + noise, machine=AMX)
        card = "table3_d_dropout_h200"
        fake_run(root, data, card, "h8-dk32-dv32-base", gpu, seed, 34 + noise, base=True, machine=h200)
        for p_drop, bleu in ((0.0, 33.0), (0.2, 35.0)):
            over = [f"model.dropout={p_drop}", *gpu]
            fake_run(root, data, card, f"h8-dk32-dv32-drop{p_drop:g}", over, seed, bleu + noise, machine=h200)
    rec = T.build(root, T.read_paper(T.PAPER_CSV))
    d = rec["rows"]["D"][R.EARLIER]
    assert d["sweeps"] == ["table3_d_dropout_h200", "table3_d_smoothing"] and d["state"] == "complete"
    assert d["instead_of"][0] == ["table3_d_dropout", "table3_d_smoothing"]
    assert d["base"]["classes"] == {AMX["cpu_class"]: [1, 2, 3], "NVIDIA H200": [1, 2, 3]}
    assert "Two machines: table3_d_dropout_h200 from the card" in " ".join(d["notes"])
    cells = by_cell(rec)
    assert cells[("D", "P_drop 0")]["delta"] == pytest.approx(-1.0)  # against the card's base (34), not 30
    assert cells[("D", "P_drop 0.2")]["delta"] == pytest.approx(+1.0)
    assert cells[("D", "eps_ls 0")]["delta"] == pytest.approx(-2.0)  # against the CPU's base (30), not 34
    assert cells[("D", "eps_ls 0.2")]["delta"] == pytest.approx(+1.0)
    assert {cells[("D", k)]["base_class"] for k in ("P_drop 0", "eps_ls 0")} == {"NVIDIA H200", AMX["cpu_class"]}
    # the base on each class, written once: the CPU's the reference, the card's +4.0 (34 against 30)
    cal = rec["calibration"][R.EARLIER]
    assert cal["reference"] == AMX["cpu_class"] and [k["class"] for k in cal["classes"]] == [
        AMX["cpu_class"],
        "NVIDIA H200",
    ]
    card = cal["classes"][1]
    assert card["n"] == 3 and card["delta_bleu"] == pytest.approx(4.0) and card["p_bleu"] < 1e-4
    lo, hi = card["interval_bleu"]
    assert lo < 4.0 < hi and hi - 4.0 == pytest.approx(4.0 - lo, abs=1e-3)
    assert rec["calibration"][R.START] is None  # no row ran under the new start
    md = TP.markdown(rec, None)
    assert "**The base on each machine class**" in md and "| NVIDIA H200 | 3 (1, 2, 3) | 34.00 | +4.00 [" in md


def test_a_cell_chosen_at_its_grids_edge_is_named_unless_a_worse_run_past_the_edge_brackets_it(tmp_path, data):
    root = tmp_path / "results"
    cells = {
        "h8-dk32-dv32-pos-sinusoidal": ["model.positions=sinusoidal"],
        "h8-dk32-dv32-pos-learned": ["model.positions=learned"],
    }
    for (cell, over), base in zip(cells.items(), (True, False)):
        for lr, loss in ((0.0005, 3.0), (0.001, 2.5), (0.002, 2.3)):  # both choose 2e-3, the grid's top
            fake_run(root, data, "table3_e", cell, over, 1, 30.0, phase="grid", lr=lr, val_loss=loss)
        for seed in (1, 2, 3):
            fake_run(root, data, "table3_e", cell, over, seed, 30.0 + seed / 10, base=base)
    # the base at 4e-3, run by another sweep, did worse: its edge is bracketed; the learned cell's is open
    sinusoidal = cells["h8-dk32-dv32-pos-sinusoidal"]
    fake_run(
        root,
        data,
        "table3_e_edge",
        "h8-dk32-dv32-pos-sinusoidal",
        sinusoidal,
        1,
        20.0,
        phase="grid",
        lr=0.004,
        val_loss=3.1,
    )
    md = TP.markdown(T.build(root, T.read_paper(T.PAPER_CSV)), None)
    row_e = md.split("### Row E")[1].split("## New start")[0]
    assert (
        "**At the grid's edge: 1 of 2 cells** chose the smallest or the largest rate tried: "
        "h8-dk32-dv32-pos-learned (0.002)" in row_e
    )
    assert (
        "h8-dk32-dv32-pos-sinusoidal chose 0.002, the grid's edge, at val loss 2.300; the same experiment and "
        "seed past that edge, run by another sweep in results/, did worse: 0.004 (val loss 3.100)" in row_e
    )


def fake_card_row_a(root: Path, data: Path, seeds: dict) -> None:
    """Row A's cells (three of the paper's four and the base) as an H200 trained them: {seed: BLEU offset}."""
    cells = {"h8-dk32-dv32": (8, 33.0), "h1-dk256-dv256": (1, 32.0), "h4-dk64-dv64": (4, 33.5)}
    cells |= {"h16-dk16-dv16": (16, 31.0), "h32-dk8-dv8": (32, 28.0)}
    h200 = {"cpu": "x", "cpu_class": "AVX2, no bf16 units", "gpu": "NVIDIA H200", "torch": "2"}
    for seed, noise in seeds.items():
        for label, (h, bleu) in cells.items():
            over = [f"model.heads={h}", f"model.d_k={256 // h}", f"model.d_v={256 // h}", "trainer.accelerator=gpu"]
            fake_run(root, data, "table3_a_fan_in_h200", label, over, seed, bleu + noise, base=h == 8, machine=h200)


def test_a_cards_page_keeps_its_question_block_when_written_alone(fake_root, tmp_path):
    """`make table3-report SUFFIX=_h200` rewrites the card's page; the index puts its question block back (it is a
    question's evidence, sweeps/_questions.yaml), so the order of the two table3-report commands does not matter."""
    out = tmp_path / "r"
    assert T.main(["--root", str(fake_root), "--out", str(out), "--suffix", "_h200"]) == 0
    md = (out / "table3_h200.md").read_text()
    assert "<!-- about:begin -->" in md and "(index.md#q-table3_start)" in md


def test_a_missing_paper_csv_is_one_line(fake_root, tmp_path, capsys):
    assert T.main(["--root", str(fake_root), "--out", str(tmp_path / "r"), "--paper", str(tmp_path / "no.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: paper CSV") and "no.csv" in err[0]


# -- one record, rendered everywhere; one stuck rule on every page -------------------------------------------------

VERDICT = r"(agrees|disagrees|inconclusive|not comparable)"


def answer_says(text: str, rec: dict, protocol: str) -> dict:
    """{(row or None, cell): verdict} that a rendered answer line says for `protocol` (table3_record.answer_line's
    words: 'agrees 1 (d_k 16); disagrees 1 (d_k 8)'), one row's line at a time."""
    name = lambda p: p.get("brief") or p["title"]  # noqa: E731  (the answers name a protocol by its brief)
    titles = [name(p)[0].upper() + name(p)[1:] for p in rec["protocols"].values()]
    title = name(rec["protocols"][protocol])
    start = text.index(title[0].upper() + title[1:] + ": ")
    part = text[start:]
    ends = [part.find(t, 1) for t in titles if part.find(t, 1) > 0]
    part = part[: min(ends)] if ends else part
    return {cell: word for word, cells in re.findall(VERDICT + r" \d+ \(([^)]*)\)", part) for cell in cells.split(", ")}


def page_says(md: str, rec: dict) -> dict:
    """{(row, cell, protocol): verdict} of the page's verdicts table (the bold word in each protocol's column, and
    in the verdict-at-4x column as protocol "4x")."""
    out = {}
    protocols = list(rec["protocols"])
    at = any("at_4x" in c for c in rec["cells"])
    for line in md.splitlines():
        parts = [p.strip() for p in line.strip("|").split("|")]
        if len(parts) != 3 + 2 * (len(protocols) + at) or parts[0] not in "ABCDE" or not parts[0]:
            continue
        for i, protocol in enumerate([*protocols, *(["4x"] if at else [])]):
            word = re.fullmatch(r"\*\*" + VERDICT + r"\*\*", parts[4 + 2 * i])
            out[(parts[0], parts[1], protocol)] = word.group(1) if word else None
    return out


def mismatches(rec: dict, page: str, answers: dict[str, str]) -> list[str]:
    """Every place a rendered text says another verdict for a cell than reports/table3.json does. answers:
    {row letter: the text holding that row's rendered answer line}."""
    wrong = []
    said = page_says(page, rec)
    for c in rec["cells"]:
        if c.get("paper_index") is None:
            continue
        key = (c["row"], c["cell"], c["protocol"])
        if said.get(key, "absent") != c["verdict"]:
            wrong.append(f"page: {key} says {said.get(key, 'absent')}, the record {c['verdict']}")
        if "at_4x" in c and said.get((c["row"], c["cell"], "4x"), "absent") != c["at_4x"].get("verdict"):
            wrong.append(f"page at 4x: {key} says {said.get((c['row'], c['cell'], '4x'))}, the record {c['at_4x']}")
        for row, text in answers.items():
            if row == c["row"] and c["verdict"] is not None:
                got = answer_says(text, rec, c["protocol"]).get(c["cell"])
                if got != c["verdict"]:
                    wrong.append(f"answer of row {row}: {key} says {got}, the record {c['verdict']}")
    return wrong


def row_line(text: str, question: str) -> str:
    return next(line for line in text.splitlines() if question in line)


QUESTIONS = [
    {"id": "table3", "question": "Which rows hold?", "answer": "Every row.", "verdicts": "all"},
    {"id": "row_b", "question": "Does a narrower d_k cost BLEU?", "answer": "d_k 8 +2.0.", "verdicts": "B"},
]


def test_the_page_index_and_readme_render_each_verdict_from_the_record(fake_root, data, tmp_path):
    """Every verdict word the page, the index and README's answers show for a cell is table3.json's; a record
    changed after the page was written is caught (the checker can fail)."""
    from headsweep.reports.site import questions as Q

    row_b(fake_root, data, "table3_b_fan_in_start", offsets=(30.0, 30.3, 30.2), protocol=["model.init=fan_in", *START])
    out = tmp_path / "reports"
    T.write(fake_root, out)
    rec = json.loads((out / "table3.json").read_text())
    questions = [{**q, "evidence": [{"view": "table3", "command": "c"}], "planned": []} for q in QUESTIONS]
    readme = "\n".join(Q.readme_block(questions, out))
    index = "\n".join(Q.index_section(questions, out))
    page = (out / "table3.md").read_text()
    answers = {"B": row_line(readme, "narrower d_k")}
    assert mismatches(rec, page, answers) == []
    assert mismatches(rec, page, {"B": row_line(index, "narrower d_k")}) == []
    said = answer_says(answers["B"], rec, R.START)
    assert said == {"d_k 16": "agrees", "d_k 8": "inconclusive"}
    assert "B: agrees 1, disagrees 1" in row_line(readme, "Which rows hold?")
    # the record changes (say a rerun turns d_k 8 around); the page written before no longer says its verdict
    for c in rec["cells"]:
        if (c["row"], c["cell"], c["protocol"]) == ("B", "d_k 8", R.EARLIER):
            c["verdict"] = "agrees"
    (out / "table3.json").write_text(json.dumps(rec))
    readme = "\n".join(Q.readme_block(questions, out))
    assert mismatches(rec, page, {"B": row_line(readme, "narrower d_k")}) == [
        "page: ('B', 'd_k 8', 'earlier') says disagrees, the record agrees"
    ]


def test_a_cells_holm_p_is_its_sweeps_so_the_table3_page_and_the_sweep_page_print_one(fake_root, data, tmp_path):
    """Holm's family is the cell's sweep: row D's two dropout cells are corrected together, not with row B's two,
    so table3.json and each sweep's own page (`make report`) print the same Holm p for every cell."""
    from headsweep.reporting.stats import holm
    from headsweep.reports import build as B

    for seed, noise in zip((1, 2, 3), (-0.1, 0.0, 0.1)):
        for drop, mean in ((0.1, 30.0), (0.0, 29.0), (0.2, 29.8)):
            over = [f"model.dropout={drop}", "module.label_smoothing=0.1", "model.d_k=32", "model.d_v=32"]
            cell = "h8-dk32-dv32" if drop == 0.1 else f"h8-dk32-dv32-drop{drop:g}"
            fake_run(fake_root, data, "table3_d_dropout", cell, over, seed, mean + noise * (1 + drop), base=drop == 0.1)
    rec = T.build(fake_root, T.read_paper(T.PAPER_CSV))
    cells = [c for c in rec["cells"] if c["protocol"] == R.EARLIER and c.get("p") is not None]
    assert sorted(c["cell"] for c in cells) == ["P_drop 0", "P_drop 0.2", "d_k 16", "d_k 8"]
    out = tmp_path / "reports"
    assert B.main(["--sweep", "all", "--root", str(fake_root), "--out", str(out), "--samples", "20"]) == 0
    for c in cells:
        page = json.loads((out / f"{c['sweep']}.json").read_text())
        (mine,) = [x for x in page["cells"] if x["cell"] == c["label"]]
        assert c["p_holm"] == pytest.approx(mine["p_holm"], rel=1e-3), c["cell"]
        same = [x["p"] for x in cells if x["sweep"] == c["sweep"]]
        assert c["p_holm"] == pytest.approx(holm(same)[same.index(c["p"])], rel=1e-3)
    # the family matters here: over all four cells at once, some cell's Holm p would differ
    everyone = holm([c["p"] for c in cells])
    assert any(abs(a - c["p_holm"]) > 1e-3 * c["p_holm"] for a, c in zip(everyone, cells))


SHIPPED_REPORTS = SWEEPS_DIR.parent / "reports"


@pytest.mark.skipif(not (SHIPPED_REPORTS / "table3.json").is_file(), reason="no shipped reports/table3.json")
def test_the_shipped_page_index_and_readme_say_table3_jsons_verdicts():
    from headsweep.reports.site import questions as Q

    rec = json.loads((SHIPPED_REPORTS / "table3.json").read_text())
    index, readme = (SHIPPED_REPORTS / "index.md").read_text(), (SWEEPS_DIR.parent / "README.md").read_text()
    rows = {q["verdicts"]: q["question"] for q in Q.load() if q.get("verdicts") not in (None, "all")}
    assert set(rows) == set("ABCDE")  # every row's question renders its verdicts
    page = (SHIPPED_REPORTS / "table3.md").read_text()
    for text in (index, readme):
        assert mismatches(rec, page, {row: row_line(text, q) for row, q in rows.items()}) == []


def test_a_run_two_pages_show_is_flagged_stuck_alike_on_both(tmp_path, data):
    """d_k 16's seeds trained in heads_home beside a base whose early val loss is near theirs (excess 0.05-0.15);
    table3_b_fan_in shows the same runs beside another base 0.3 lower, where its own reading would flag seeds 2
    and 3 (0.40, 0.45 > 0.364). One rule, one reference (the run's home sweep's): neither page flags them."""
    from headsweep.reports import build as B
    from headsweep.reports.sweep import page as RP
    from headsweep.reports.sweep import summary as N

    root = tmp_path / "results"
    grid = {"phase": "chosen", "grid": [0.0005, 0.001, 0.002], "select_on": "val/loss"}
    for seed, early in zip((1, 2, 3), (3.40, 3.45, 3.50)):
        fake_run(
            root, data, "heads_home", "h8-dk32-dv32", ["model.d_k=32"], seed, 30.0 + seed / 10, base=True, early=early
        )
        view = fake_run(
            root, data, "heads_home", "h8-dk16-dv32", ["model.d_k=16"], seed, 30 - seed / 10, early=early + 0.1
        )
        store.show(view.resolve(), root / "table3_b_fan_in" / view.name, ["cell-h8-dk16-dv32"], lr_select=grid)
    for seed, early in zip((4, 5, 6), (3.10, 3.15, 3.20)):
        fake_run(
            root,
            data,
            "table3_b_fan_in",
            "h8-dk32-dv32",
            ["model.d_k=32"],
            seed,
            30.0 + seed / 10,
            base=True,
            early=early,
        )
    pool = N.early_pool(root)
    flags = {}
    for sweep in ("heads_home", "table3_b_fan_in"):
        runs, _ = RP.load_runs(root / sweep, sweep)
        cells = RP.group_cells(runs)
        RP.stuck_runs(cells, root, None, pool)
        flags[sweep] = {c.label: c.row["stuck_seeds"] for c in cells}
        if sweep == "table3_b_fan_in":  # its own reading, the reference this page alone would use
            RP.stuck_runs(cells, root, None, {**pool, "early": {}})
            assert {c.label: c.row["stuck_seeds"] for c in cells}["h8-dk16-dv32"] == [2, 3]
    assert flags["heads_home"]["h8-dk16-dv32"] == flags["table3_b_fan_in"]["h8-dk16-dv32"] == []
    rec = T.build(root, T.read_paper(T.PAPER_CSV), pool=pool)
    assert by_cell(rec)[("B", "d_k 16")]["stuck_seeds"] == []
    # and the sweep pages as `make report` writes them: no stuck run on either
    assert B.main(["--sweep", "all", "--root", str(root), "--out", str(tmp_path / "reports"), "--samples", "20"]) == 0
    for sweep in ("heads_home", "table3_b_fan_in"):
        md = (tmp_path / "reports" / f"{sweep}.md").read_text()
        assert "- No run is stuck: every checked run's excess is at most 0.364" in md, sweep
    # d_k 16's reference is heads_home's base: the page of table3_b_fan_in, whose own base is another cell of the
    # same label, names the sweep it was read in; heads_home's page, where it was read, does not
    fan_in = (tmp_path / "reports" / "table3_b_fan_in.md").read_text()
    home = (tmp_path / "reports" / "heads_home.md").read_text()
    assert "against heads_home/h8-dk32-dv32's median 3.450" in fan_in
    assert "heads_home/" not in home and "against h8-dk32-dv32's median 3.450" in home


def test_the_scatter_names_each_point_draws_y_equals_x_and_keeps_its_legend_off_the_data(fake_root, tmp_path):
    from matplotlib.lines import AxLine

    from headsweep.reporting.plots import covered, data_points, extent, pyplot

    T.write(fake_root, tmp_path / "reports")
    rec = json.loads((tmp_path / "reports" / "table3.json").read_text())
    compared = [c for c in rec["cells"] if c.get("delta") is not None and c["paper_delta"] is not None]
    fig = TP.scatter(rec)
    ax = fig.axes[0]
    # every compared cell's point carries its name, at the point
    named = {(t.get_text(), t.xy) for t in ax.texts}
    assert {(c["cell"], (c["paper_delta"], c["delta"])) for c in compared} <= named and compared
    # the diagonal: through (0, 0) at slope 1, whatever the view
    diagonal = [line for line in ax.lines if isinstance(line, AxLine)]
    assert [(line.get_xy1(), line.get_slope()) for line in diagonal] == [((0, 0), 1)]
    # the legend sits outside the axes, over no point
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend, box = extent(ax.get_legend(), renderer), extent(ax, renderer)
    assert legend[0] >= box[2] and covered(legend, data_points(ax, renderer)) == []
    pyplot().close(fig)


def test_a_row_run_at_one_rate_names_its_rate_checks_from_any_sweep_on_its_own_class(fake_root, data):
    """Issue 73: a row from the new start runs every cell at one rate, checked at half and twice it on seed 1 under
    another sweep name (<sweep>_edge). The row's notes list each checked cell's val loss per rate, the best in bold,
    and name a cell another rate did better for; a run on another machine class is no check of this one's rate."""
    row_b(fake_root, data, "table3_b_fan_in_start", offsets=(30.0, 30.3, 30.2), protocol=["model.init=fan_in", *START])
    edge = {"protocol": ["model.init=fan_in", *START], "phase": "grid"}
    dk8, dk32 = ["model.d_k=8", "model.d_v=32"], ["model.d_k=32", "model.d_v=32"]
    fake_run(fake_root, data, "table3_b_fan_in_start_edge", "h8-dk8-dv32", dk8, 1, 30.0, lr=0.001, val_loss=2.5, **edge)
    fake_run(fake_root, data, "table3_b_fan_in_start_edge", "h8-dk8-dv32", dk8, 1, 31.0, lr=0.004, val_loss=2.1, **edge)
    fake_run(
        fake_root, data, "table3_b_fan_in_start_edge", "h8-dk32-dv32", dk32, 1, 29.0, lr=0.001, val_loss=2.6, **edge
    )
    h200 = {"cpu": "x", "cpu_class": "AVX2, no bf16 units", "gpu": "NVIDIA H200", "torch": "2"}
    fake_run(fake_root, data, "table3_b_fan_in_start_h200", "h8-dk32-dv32", dk32, 1, 29.0, lr=0.004, val_loss=1.9,
             machine=h200, **edge)  # fmt: skip
    notes = " ".join(T.build(fake_root, T.read_paper(T.PAPER_CSV))["rows"]["B"][R.START]["notes"])
    assert "d_k 8 0.001 2.500, 0.002 2.300, **0.004 2.100**" in notes
    assert "0.001 2.600, **0.002 2.300**;" in notes  # the base: the card's 4e-3 (1.9) is not its check
    beaten = "**Another rate did better** for d_k 8 at 0.004 (2.100 against 2.300 at 0.002): that cell is read below"
    assert beaten in notes
    earlier = " ".join(T.build(fake_root, T.read_paper(T.PAPER_CSV))["rows"]["B"][R.EARLIER]["notes"])
    assert "Rate check" not in earlier  # a row with a grid says its edges as before


@pytest.mark.parametrize("sweep", ["table3_b_fan_in_start_budgets", "table3_b_fan_in_start_avx512_bf16_budgets"])
def test_a_new_start_cell_read_at_4x_gets_its_own_verdict_beside_the_1x_one(fake_root, data, sweep):
    """Issue 68: the Table 3 page's "verdict at 4x". Row B's cells under the new start, and its budgets sweep's 4x
    cooldown branches: the base at 35, d_k 8 at 33 (the paper's -0.7 is a cost; ours -2.0, clear of 0: agrees);
    d_k 16 has only a 2x branch, so it is not read at 4x. The 1x verdicts do not change. The budgets sweep may carry
    a machine class in its name (make budgets NAME=<sweep>_<class>_budgets, where the store's base is another
    class's): it is still the row's."""
    row_b(fake_root, data, "table3_b_fan_in_start", offsets=(30.0, 30.3, 30.2), protocol=["model.init=fan_in", *START])
    one_x = {(c["row"], c["cell"]): c["verdict"] for c in T.build(fake_root, T.read_paper(T.PAPER_CSV))["cells"]}
    for seed, noise in zip((1, 2, 3), (-0.1, 0.0, 0.1)):
        for dk, bleu, k in ((32, 35.0, 4), (8, 33.0, 4), (16, 36.0, 2)):
            role = f"budgets={{role:branch,budget:{k},base:{str(dk == 32).lower()}}}"
            over = [f"model.d_k={dk}", "model.d_v=32", "module.schedule=wsd", "module.cooldown=sqrt", role]
            over += [f"trainer.max_steps={1150 * k}"]
            fake_run(fake_root, data, sweep, f"h8-dk{dk}-dv32-{k}x-sqrt", over, seed, bleu + noise,
                     protocol=["model.init=fan_in", *START], grid=False)  # fmt: skip
    rec = T.build(fake_root, T.read_paper(T.PAPER_CSV))
    assert {(c["row"], c["cell"]): c["verdict"] for c in rec["cells"]} == one_x
    new = by_cell(rec, R.START)
    at = new[("B", "d_k 8")]["at_4x"]
    assert at["verdict"] == "agrees" and at["steps"] == 4600 and (at["n"], at["n_base"]) == (3, 3)
    assert at["delta"] == pytest.approx(-2.0) and at["interval"][1] < 0
    assert new[("B", "d_k 16")]["at_4x"] == {"state": "not run yet"}
    assert new[("C", "N 4")]["at_4x"] == {"state": "not run yet"}
    # one reading: the budgets page's gap, Holm p and word for d_k 8 at 4x are the ones the verdict rests on
    from headsweep.reports.pages import budgets_runs as BR

    ((_, branches),) = BR.by_class(BR.load(fake_root, [sweep]).branches)
    table, budgets = BR.cells(branches)
    g = BR.gaps(table, budgets)[next(c.cell_id for c in table if c.label == "h8-dk8-dv32")][4]["test/bleu"]
    assert at["delta"] == pytest.approx(g["diff"], abs=1e-4) and at["p_holm"] == pytest.approx(g["p_holm"], rel=1e-3)
    assert at["interval"] == pytest.approx([g["lo"], g["hi"]], abs=1e-4) and at["budgets_word"] == "worse"
    md = TP.markdown(rec, None)
    line = next(x for x in md.splitlines() if x.startswith("| B | d_k 8 |"))
    assert line.endswith("| -2.00 " + V.interval_text(at["interval"]) + ", n 3/3, not recorded | **agrees** |"), line
    assert "**At 4x** (1 cell read so far)" in md
    # a cell whose seeds run at the rate its check chose (1e-3) is read against that rate, not the row's
    from headsweep.reports.sweep.rate_check import rate_check_lines

    (line,) = rate_check_lines([("d_model 512", {0.001: 2.2, 0.002: 2.464}, 0.001)])
    assert "d_model 512 **0.001 2.200**, 0.002 2.464" in line and "Another rate" not in line
    assert line.endswith("ran at the best rate tried (tried on one side only: d_model 512).")


def test_a_rows_budgets_sweeps_are_its_sweeps_budgets_under_any_class_tail_and_no_others(tmp_path):
    """Issue 68: table3_budget reads <sweep>_budgets and <sweep>_<class>_budgets (the same cells' trunks on another
    machine class, under their own name), not another sweep's whose name merely starts alike, nor a sweep that is
    not a budgets sweep."""
    from headsweep.reports.pages.table3_budget import budgets_sweeps

    names = [
        "table3_c_start_budgets", "table3_c_start_avx512_bf16_budgets", "table3_c_start_fp32", "table3_c_start_edge",
        "table3_c_startling_budgets", "table3_d_dropout_start_avx512_bf16_budgets", "table3_c_start_fp32_budgets",
    ]  # fmt: skip
    for name in names:
        (tmp_path / name).mkdir()
    assert budgets_sweeps(tmp_path, ["table3_c_start"]) == [
        "table3_c_start_avx512_bf16_budgets", "table3_c_start_budgets", "table3_c_start_fp32_budgets"
    ]  # fmt: skip
    assert budgets_sweeps(tmp_path, ["table3_c_start_fp32"]) == ["table3_c_start_fp32_budgets"]
    assert budgets_sweeps(tmp_path, ["table3_d_dropout_start_h200", "table3_d_dropout_start"]) == [
        "table3_d_dropout_start_avx512_bf16_budgets"
    ]
