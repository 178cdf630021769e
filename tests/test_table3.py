"""Table 3 by one command (headsweep.sweeps.table3) and its page (headsweep.reports.table3): the rows checked
before anything is planned, one base run shared by every row, today's protocol only; the page on a tiny fake
store (a row at today's protocol, a row with only its learning-rate grid, a row not run, a run under another
protocol left out), its verdicts by hand."""

import gzip
import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import write_results
from headsweep import store
from headsweep.config import SWEEPS_DIR, compose
from headsweep.reports import table3 as T
from headsweep.reports.cells import Cell
from headsweep.sweeps import table3 as P
from headsweep.sweeps.lr_select import LR_KEY, parse_grid, plan_lr

SHIPPED = SWEEPS_DIR.parent / "results"


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


def test_each_row_runs_on_its_own_grid_and_the_page_names_every_grid(monkeypatch, capsys):
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
    from headsweep.reports.table3 import PROTOCOL_WORDS

    assert "5e-4,1e-3,2e-3 (rows A and C: 1e-3,2e-3,4e-3)" in PROTOCOL_WORDS


def test_the_default_start_runs_each_row_under_its_own_name_and_unit_keeps_the_earlier_rows(monkeypatch, capsys):
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
def test_row_b_is_the_shipped_sweep_and_finds_every_job_done(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("headsweep.config.cpu_has_bf16", lambda: True)
    assert P.main(["--rows", "B", "--start", "unit", "--dry", "--results", str(SHIPPED), "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # both phases: the grid (3 cells x 3 rates) and the chosen rates (3 cells x 3 seeds), nothing to train
    assert out.count("sweep table3_b_fan_in (") == 2 and out.count("9 jobs, 9 done, 0 to run") == 2, out
    assert not (tmp_path / "table3_b_fan_in").exists()  # a dry plan writes nothing


# -- the page ---------------------------------------------------------------------------------------------------

REFS = ["a man rides a red bike .", "two dogs play in the snow .", "a woman sings .", "kids run on the beach ."]


def fake_run(root: Path, data: Path, sweep: str, cell: str, overrides: list[str], seed: int, bleu: float, **kw) -> Path:
    """A finished run of `sweep` (as the store's view shows it): config at today's protocol unless
    `protocol` overrides say otherwise, test BLEU `bleu`, hypotheses that differ by cell and seed."""
    phase = kw.get("phase", "chosen")
    lr = kw.get("lr", 0.002)
    name = f"{cell}-lr{lr:g}-s{seed}" if phase == "grid" else f"{cell}-s{seed}"
    tag_cell = f"{cell}-lr{lr:g}" if phase == "grid" else cell
    base = kw.get("base", False) and phase != "grid"
    run = root / sweep / name
    cfg = compose(
        [
            "budget=ablation",
            "trainer.precision=bf16-mixed",
            *overrides,
            *kw.get("protocol", ["model.init=fan_in"]),
            f"seed={seed}",
            f"sweep={sweep}",
            f"run_name={name}",
            f"paths.output_dir={run}",
            f"tags=[cell-{tag_cell}{',base' if base else ''}]",
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
    (run / "hypotheses").mkdir(parents=True)
    hyps = [r if (i + seed + len(cell)) % 3 else r.replace("a ", "the ", 1) for i, r in enumerate(REFS)]
    (run / "hypotheses" / "test.beam.en").write_text("".join(h + "\n" for h in hyps))
    write_results(
        run,
        {
            "status": "complete",
            "run_name": name,
            "sweep": sweep,
            "config": OmegaConf.to_container(cfg, resolve=True),
            "params": {"total": 7_577_600},
            "hypotheses": {"test.beam": str(run / "hypotheses" / "test.beam.en")},
            "metrics": {
                "test/bleu": bleu,
                "test/chrf": 50.0,
                "val/bleu": bleu - 1,
                "val/ppl": 12.0 - bleu / 10,
                "val/loss": kw.get("val_loss", 2.4),
                "test/ppl": 9.0,
                "train/steps": 1150,
            },
        },
    )
    (run / "metrics.csv").write_text("epoch,step,train/loss,val/bleu,val/loss\n")
    return run


@pytest.fixture
def fake_root(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with gzip.open(data / "test.en.gz", "wt", encoding="utf-8") as f:
        f.write("".join(r + "\n" for r in REFS))
    root = tmp_path / "results"
    b = "table3_b_fan_in"
    # row B: base d_k 32 at 30 +- ~0.1; d_k 16 one BLEU worse (the paper's way), d_k 8 two better (the
    # opposite of the paper's -0.7, beyond the seed spread)
    for seed, noise in zip((1, 2, 3), (-0.1, 0.0, 0.1)):
        fake_run(root, data, b, "h8-dk32-dv32", ["model.d_k=32", "model.d_v=32"], seed, 30.0 + noise, base=True)
        fake_run(root, data, b, "h8-dk16-dv32", ["model.d_k=16", "model.d_v=32"], seed, 29.0 + noise)
        fake_run(root, data, b, "h8-dk8-dv32", ["model.d_k=8", "model.d_v=32"], seed, 32.0 + noise)
    # a row B run under the earlier protocol: never in the table
    fake_run(
        root,
        data,
        b,
        "h8-dk4-dv32",
        ["model.d_k=4", "model.d_v=32"],
        1,
        10.0,
        protocol=["model.init=xavier", "module.decay_by=steps_or_time"],
        grid=False,
    )
    # row E: only its learning-rate grid so far (seed 1 at each rate)
    for lr in (0.0005, 0.001, 0.002):
        fake_run(
            root,
            data,
            "table3_e",
            "h8-dk32-dv32-pos-learned",
            ["model.positions=learned"],
            1,
            29.0,
            phase="grid",
            lr=lr,
        )
    return root


def test_the_page_shows_every_row_beside_the_paper(fake_root, tmp_path):
    out = tmp_path / "reports"
    paths = T.write(fake_root, out, n_samples=100)
    assert [p.name for p in paths] == ["table3.md", "table3.html", "table3.png"] and all(p.is_file() for p in paths)
    md = (out / "table3.md").read_text()
    rows = T.build(fake_root, T.read_paper(T.PAPER_CSV), n_samples=100)
    assert rows["A"]["status"] == "not run yet" and "`make table3 ROWS=A`" in md
    assert rows["E"]["status"] == "partial (phase 1 only)" and "only the learning-rate grid" in md
    b = {c.label: c for c in rows["B"]["cells"]}
    assert list(b) == ["h8-dk32-dv32", "h8-dk8-dv32", "h8-dk16-dv32"]  # the xavier run is not a cell
    assert any("h8-dk4-dv32-s1" in n and "another protocol: model.init xavier" in w for n, w in rows["B"]["left_out"])
    # the paper's numbers: d_k 16 at our base 32 is its d_k 32 at 64 (25.4 against 25.8), d_k 8 its 16 (25.1)
    assert b["h8-dk16-dv32"].row["paper"]["dev_bleu"] == 25.4 and b["h8-dk8-dv32"].row["paper"]["dev_bleu"] == 25.1
    assert b["h8-dk16-dv32"].row["paper_delta"] == pytest.approx(-0.4)
    assert b["h8-dk16-dv32"].row["delta"] == pytest.approx(-1.0)
    assert b["h8-dk8-dv32"].row["dppl"] == pytest.approx(-0.2)  # val PPL 12 - BLEU/10
    j = rows["B"]["judge"]
    assert [c.label for c in j["agree"]] == ["h8-dk16-dv32"] and [c.label for c in j["disagree"]] == ["h8-dk8-dv32"]
    assert j["rho"] is None  # two cells: no rank correlation
    assert "1 of 2 cells move BLEU the paper's way" in md and "h8-dk8-dv32 (ours +2.00, paper -0.7)" in md
    assert rows["B"]["status"] == "complete"
    assert "0.002" in md and "| 25.8 |" in md  # the chosen rate; the paper's base BLEU beside ours


def test_the_papers_cells_we_have_not_run_are_lines_of_the_table_and_make_a_row_partial(fake_root, tmp_path):
    """Row D with its dropout half only: the row is partial, naming the paper's cells none of ours matches, and
    the table prints each of them in our units with the paper's numbers, as it prints a row never run."""
    data = tmp_path / "data"
    for seed, noise in zip((1, 2, 3), (-0.1, 0.0, 0.1)):
        base = ["model.d_k=32", "model.d_v=32"]
        fake_run(fake_root, data, "table3_d_dropout", "h8-dk32-dv32-drop0.1", base, seed, 30.0 + noise, base=True)
        drop0 = [*base, "model.dropout=0.0"]
        fake_run(fake_root, data, "table3_d_dropout", "h8-dk32-dv32-drop0", drop0, seed, 30.5 + noise)
    rows = T.build(fake_root, T.read_paper(T.PAPER_CSV), n_samples=100)
    assert rows["D"]["status"] == (
        "partial (table3_d_smoothing not run yet; 3 of the paper's 4 cells not run yet: P_drop 0.2; eps_ls 0; "
        "eps_ls 0.2)"
    )
    assert [line[0] for line in rows["D"]["unrun_lines"]] == ["D"] * 3
    assert all(len(line) == len(T.HEADER) for r in rows.values() for line in r["unrun_lines"])
    # row C never ran: the paper's N 2, 4, 8 at its 6 are our N 1, 2, 4 at our 3; its d_model 256 our 128 (d_k 16)
    c = rows["C"]["unrun_lines"]
    assert [line[1] for line in c[:3]] == ["1", "2", "4"] and c[0][T.HEADER.index("paper BLEU (dev)")] == "23.7"
    assert c[3][1:7] == ["", "128", "", "", "16", "16"] and c[0][T.HEADER.index("our val PPL")] == "not run yet"
    assert rows["B"]["status"] == "complete" and rows["B"]["unrun_lines"] == []  # both paper cells matched
    md = T.markdown(rows, None, "")
    table = md[md.index("## The table") :]
    assert table.splitlines()[4].startswith("| base |")  # the base first, as in the paper


def test_a_missing_paper_csv_is_one_line(fake_root, tmp_path, capsys):
    assert T.main(["--root", str(fake_root), "--out", str(tmp_path / "r"), "--paper", str(tmp_path / "no.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: paper CSV") and "no.csv" in err[0]


def cell(label, delta, paper_delta, p_seeds, base=False):
    c = Cell(label, [])
    c.row.update(delta=delta, paper_delta=paper_delta, p_seeds=p_seeds)
    if base:
        c.row["delta"] = None
    return c


def test_a_disagreement_inside_seed_noise_is_not_a_disagreement():
    cells = [
        cell("base", None, None, None, base=True),
        cell("x", -0.5, -0.9, 0.01),  # agrees
        cell("y", +0.3, -0.4, 0.40),  # opposite sign, Welch p 0.4: noise
        cell("z", +1.5, -0.6, 0.001),  # opposite sign, beyond noise
        cell("w", +0.2, 0.0, 0.5),  # the paper saw no change, neither do we
        cell("v", +0.2, -0.2, None),  # one seed: nothing says it is beyond noise
    ]
    j = T.judge(cells)  # a cell without runs is no base: the base's row has no Δ either way
    assert [c.label for c in j["agree"]] == ["x", "w"]
    assert [c.label for c in j["noise"]] == ["y", "v"] and [c.label for c in j["disagree"]] == ["z"]
    # Spearman by hand over the five cells: ranks (1, 3, 2, 5, 4) and (1, 4, 5, 2.5, 2.5)
    assert j["rho"] == pytest.approx(0.5 / 95**0.5)
    lines = T.verdict_lines("Q", j)
    assert any("inside seed noise, so not a disagreement" in line and "y (ours +0.30" in line for line in lines)


def test_a_cell_chosen_at_its_grids_edge_is_named_unless_a_worse_run_past_the_edge_brackets_it(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with gzip.open(data / "test.en.gz", "wt", encoding="utf-8") as f:
        f.write("".join(r + "\n" for r in REFS))
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
    fake_run(
        root,
        data,
        "table3_e_edge",
        "h8-dk32-dv32-pos-sinusoidal",
        cells["h8-dk32-dv32-pos-sinusoidal"],
        1,
        20.0,
        phase="grid",
        lr=0.004,
        val_loss=3.1,
    )
    md = T.markdown(T.build(root, T.read_paper(T.PAPER_CSV), n_samples=50), None, "")
    row_e = md.split("### Row E")[1].split("## Figure")[0]
    assert (
        "**At the grid's edge: 1 of 2 cells** chose the smallest or the largest rate tried: "
        "h8-dk32-dv32-pos-learned (0.002)" in row_e
    )
    assert (
        "h8-dk32-dv32-pos-sinusoidal chose 0.002, the grid's edge, at val loss 2.300; the same experiment and "
        "seed past that edge, run by another sweep in results/, did worse: 0.004 (val loss 3.100)" in row_e
    )


def test_a_row_only_a_card_finished_is_shown_whole_from_the_card_against_the_cards_own_base(fake_root, tmp_path):
    """Row A: the CPU has only a grid run, the H200 the whole row. The page takes every cell of row A, its base
    too, from the card (a row never mixes devices) and says so; the base line atop the table stays the CPU
    rows'. A card's row still partial is not taken."""
    data = tmp_path / "data"
    fake_run(fake_root, data, "table3_a_fan_in", "h1-dk256-dv256", ["model.heads=1"], 1, 25.0, phase="grid")
    card = "table3_a_fan_in_h200"
    fake_card_row_a(fake_root, data, {1: -0.1, 2: 0.1})
    paper = T.read_paper(T.PAPER_CSV)
    rows = T.build(fake_root, paper, n_samples=50)
    assert rows["A"]["sweeps"] == ["table3_a_fan_in"] and rows["A"]["status"] == "partial (phase 1 only)"
    fake_card_row_a(fake_root, data, {3: 0.0})  # the third seed finishes the card's row
    rows = T.build(fake_root, paper, n_samples=50)
    a = rows["A"]
    assert a["sweeps"] == [card] and a["status"] == "complete" and a["devices"] == ["bf16-mixed gpu"]
    assert a["instead_of"] == (["table3_a_fan_in"], "partial (phase 1 only)")
    delta = {c.label: c.row["delta"] for c in a["cells"] if not c.base}
    assert delta["h1-dk256-dv256"] == pytest.approx(-1.0)  # against the card's base (33), not the CPU's (30)
    md = T.markdown(rows, None, "")
    table = md[md.index("## The table") :].splitlines()
    assert table[4].startswith("| base |") and "30.00 ± 0.10" in table[4]  # row B's CPU base stays atop
    assert table[5].startswith("| A: base on h200 |") and "33.00 ± 0.10" in table[5]
    assert "Shown from the card: the CPU's `table3_a_fan_in` is partial (phase 1 only)" in md


def fake_card_row_a(root: Path, data: Path, seeds: dict) -> None:
    """Row A's five cells (the paper's four and the base) as an H200 trained them: {seed: BLEU offset}."""
    cells = {"h8-dk32-dv32": (8, 33.0), "h1-dk256-dv256": (1, 32.0), "h4-dk64-dv64": (4, 33.5)}
    cells |= {"h16-dk16-dv16": (16, 31.0), "h32-dk8-dv8": (32, 28.0)}
    for seed, noise in seeds.items():
        for label, (h, bleu) in cells.items():
            over = [f"model.heads={h}", f"model.d_k={256 // h}", f"model.d_v={256 // h}", "trainer.accelerator=gpu"]
            fake_run(root, data, "table3_a_fan_in_h200", label, over, seed, bleu + noise, base=h == 8)
