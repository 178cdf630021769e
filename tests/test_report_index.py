"""The index's table of every experiment: a run that several sweeps hold counted once, before the run store
(copies with `shared_from`) and after it (sweep folders linking to one run folder); one row per experiment
with a column for every setting that differs, and a 2x budget visible."""

import json
import os
from pathlib import Path

from headsweep.reports.site import experiments as I
from headsweep.reports.sweep.cells import Run


def run_at(path: Path, shared_from: str | None = None) -> Run:
    path.mkdir(parents=True, exist_ok=True)
    results = {"status": "complete", **({"shared_from": {"run": shared_from}} if shared_from else {})}
    (path / "results.json").write_text(json.dumps(results))
    return Run(path, results, {}, "c", 1, False)


def test_a_run_seen_from_several_sweeps_is_known_by_the_run_folder_it_is(tmp_path):
    root = tmp_path / "results"
    original = run_at(root / "table3_a" / "h8-s1")
    copy = run_at(root / "table3_b" / "h8-s1", shared_from="table3_a/h8-s1")
    copy_of_copy = run_at(root / "fixed_heads" / "h8-fixed0-s1", shared_from="table3_b/h8-s1")
    other_seed = run_at(root / "table3_a" / "h8-s2")
    assert I.run_identity(original) == I.run_identity(copy) == I.run_identity(copy_of_copy) == "table3_a/h8-s1"
    assert I.run_identity(other_seed) == "table3_a/h8-s2"

    # the run store: one folder per experiment, each sweep's job a link to it (and a copy made before the move)
    stored = root / "runs" / "k1"
    run_at(stored)
    (root / "kv_heads").mkdir()
    os.symlink(os.path.relpath(stored, root / "kv_heads"), root / "kv_heads" / "h8-kv8-s1")
    (root / "heads_fixed_dk").mkdir()
    os.symlink(stored, root / "heads_fixed_dk" / "h8-s1")
    linked = [
        Run(root / s / j, {"status": "complete"}, {}, "c", 1, False)
        for s, j in (("kv_heads", "h8-kv8-s1"), ("heads_fixed_dk", "h8-s1"))
    ]
    old_copy = run_at(root / "heads_specialise" / "h8-hd0-s1", shared_from="kv_heads/h8-kv8-s1")
    assert {I.run_identity(r) for r in (*linked, old_copy)} == {"runs/k1"}
    # an original that is gone: its name is still its identity
    assert I.run_identity(run_at(root / "b" / "x", shared_from="gone/y-s1")) == "gone/y-s1"


SETTINGS = {
    "model.heads": 8,
    "model.d_k": 32,
    "model.d_v": 32,
    "model.d_model": 256,
    "model.head_dropout": 0.0,
    "trainer.max_steps": 1150,
    "trainer.precision": "32-true",
    "model.init": "xavier",
}


def cell(name, runs, base=False, **changed):
    return {
        "cell": name,
        "anchor": f"cell-{name}",
        "base": base,
        "settings": {**SETTINGS, **changed},
        "runs": [{"id": i, "seed": s, "test_bleu": b, "test_ppl": 9.0, "steps": st} for i, s, b, st in runs],
    }


def record(sweep, cells):
    return {"sweep": sweep, "page": f"{sweep}.html", "cells": cells}


RECORDS = [
    record(
        "table3_a",
        [
            cell("h8-dk32-dv32", [("a/1", 1, 34.0, 1150), ("a/2", 2, 36.0, 1150)], base=True),
            cell("h4-dk64-dv64", [("a/3", 1, 33.0, 1150)], **{"model.heads": 4, "model.d_k": 64, "model.d_v": 64}),
        ],
    ),
    # row B's base is row A's h = 8: the same two runs (copies)
    record("table3_b", [cell("h8-dk32-dv32", [("a/1", 1, 34.0, 1150), ("a/2", 2, 36.0, 1150)], base=True)]),
    # head dropout 0 is the same experiment, trained again: a third run, seed 1 a second time
    record(
        "heads_specialise",
        [
            cell("h8-dk32-dv32-head_dropout0", [("s/1", 1, 35.0, 1150)], base=True),
            cell("h8-dk32-dv32-head_dropout0.1", [("s/2", 1, 30.0, 1150)], **{"model.head_dropout": 0.1}),
        ],
    ),
    record(
        "budget_2x",
        [cell("h8-dk32-dv32", [("b/1", 1, 38.0, 2300), ("b/2", 2, 37.0, 2100)], **{"trainer.max_steps": 2300})],
    ),
]


def test_one_row_per_experiment_each_run_once_a_column_for_what_varies():
    head, body = I.table(RECORDS, {"table3_a": "row_a", "table3_b": "row_b"})
    assert head == [
        "question",
        "cell",
        "h",
        "d_k",
        "d_v",
        "head drop",
        "steps",
        "precision",
        "init",
        "runs",
        "BLEU",
        "PPL",
        "in sweeps",
    ]
    assert len(body) == 4  # h8 (three sweeps), h4, head dropout 0.1, h8 at 2x
    assert [row[0] for row in body] == ["row_a, row_b", "row_a", "—", "—"]  # h8 answers both questions
    body = [row[1:] for row in body]
    h8 = body[0]
    # h8-dk32-dv32 names two rows (1x and 2x the steps): each carries what tells it apart
    assert h8[0] == "[h8-dk32-dv32 (steps 1150)](table3_a.md#cell-h8-dk32-dv32)"  # the name alone: one line
    assert h8[-1] == (  # every sweep holding the row's runs, last
        "[table3_a](table3_a.md#cell-h8-dk32-dv32) base, [table3_b](table3_b.md#cell-h8-dk32-dv32) base, "
        "[heads_specialise](heads_specialise.md#cell-h8-dk32-dv32-head_dropout0) base"
    )
    assert h8[8:-1] == ["3 (seed 1 ×2)", "35.00 ± 1.00", "9.00 ± 0.00"]  # a/1, a/2, s/1: the copies not again
    assert body[3][0].startswith("[h8-dk32-dv32 (steps 2300)]")
    assert body[3][5] == "2300 (2×)*"  # twice the usual budget, one run stopped before it
    assert body[2][4] == "0.1" and h8[4] == "0.0"
    assert (
        I.counts(RECORDS)
        == "4 experiments, 7 distinct runs (9 as the sweeps list them: 2 held by more than one sweep)."
    )
    assert I.shared_runs(RECORDS) == {"table3_a": 2, "table3_b": 2, "heads_specialise": 0, "budget_2x": 0}


def test_a_setting_only_some_runs_record_is_a_column_with_a_dash():
    newer = record("kv", [cell("h8-kv2", [("k/1", 1, 30.0, 1150)], **{"model.kv_heads": 2})])
    head, body = I.table([RECORDS[0], newer])
    assert "kv heads" in head
    column = head.index("kv heads")
    assert [row[column] for row in body] == ["—", "—", "2"]
    # an old report without runs is left out of the table (the index names it)
    assert (
        I.table([{"sweep": "old", "page": "old.html", "cells": [{"cell": "x", "anchor": "a", "base": True}]}])[1] == []
    )


def test_the_question_column_groups_rows_and_a_rate_has_one_format():
    lr = record(
        "kv_lr",
        [
            cell("h8-lr", [("l/1", 1, 34.0, 1150)], base=True, **{"module.peak_lr": 0.002}),
            cell("h8-lr", [("l/2", 1, 33.0, 1150)], **{"module.peak_lr": 0.0005, "model.init_kv_gain": 1.3333333}),
        ],
    )
    head, body = I.table([RECORDS[0], lr], {"table3_a": "row_a", "kv_lr": "kv_heads"})
    assert [row[0] for row in body] == ["row_a", "row_a", "kv_heads", "kv_heads"]
    rate, gain = head.index("peak lr"), head.index("kv gain")
    assert [row[rate] for row in body[2:]] == ["2e-3", "5e-4"] and body[3][gain] == "1.33"
    assert body[3][1].startswith("[h8-lr (kv gain 1.33, peak lr 5e-4)]")
    assert all(I.definition(h) != I.definition("no such column") for h in head)  # every column defined


def test_the_parallel_coordinates_page_has_an_axis_per_varied_setting_and_a_line_per_experiment(tmp_path):
    from headsweep.reports.site import index as S

    data = S.compare_data(RECORDS, {"table3_a": "row_a"})
    names = [a["name"] for a in data["axes"]]
    assert names == ["h", "d_k", "d_v", "head drop", "steps", "BLEU", "PPL"]  # precision, init: the same everywhere
    assert len(data["rows"]) == 4 and data["rows"][0]["question"] == "row_a"
    assert data["rows"][0]["values"] == [8, 32, 32, 0.0, 1150, 35.0, 9.0] and data["rows"][0]["href"].endswith(
        ".html#cell-h8-dk32-dv32"
    )
    assert data["rows"][0]["curves"][0] == {"seed": 1, "points": []}  # no results root: no curves
    run = tmp_path / "results" / "a" / "1"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text("step,train/loss,val/bleu\n19,5.0,\n229,,10.5\n1149,,30.25\n")
    assert S.run_curve(tmp_path / "results", "a/1") == [[229, 10.5], [1149, 30.25]]  # validations only
    page = S.compare_page(tmp_path, RECORDS, {}).read_text()
    assert '<script src="compare.js"></script>' in page and (tmp_path / "compare.js").is_file()
    assert '<a href="index.html">' in page  # back to the index


def test_the_parallel_coordinates_page_draws_ten_axes_first_and_a_colour_per_question():
    from headsweep.reports.site import compare_page as S

    # 13 experiments over 12 varied settings, each answering its own question: more than the ten colours of old
    varied = [f"model.knob{i}" for i in range(12)]
    cells = [
        cell(
            f"c{j}",
            [(f"q{j}/1", 1, 30.0 + j, 1150)],
            base=j == 0,
            **{k: (j if i <= j else 0) for i, k in enumerate(varied)},
        )
        for j in range(13)
    ]
    records = [record(f"sweep{j}", [c]) for j, c in enumerate(cells)]
    data = S.compare_data(records, {f"sweep{j}": f"question{j:02d}" for j in range(13)})
    assert len(data["axes"]) == 12 + 2  # every varied setting can be drawn (the page's chooser)
    shown = [a["name"] for a in data["axes"] if a["shown"]]
    assert len(shown) == 10 and shown[-2:] == ["BLEU", "PPL"]
    # the settings drawn first set the most experiments apart: knob0 (12 of 13) to knob7, not knob8 to knob11
    assert shown[:8] == [I.header(k) for k in varied[:8]]
    colours = data["colours"]
    assert sorted(colours) == sorted({r["question"] for r in data["rows"]}) and len(colours) == 13
    assert len(set(colours.values())) == 13  # one colour per question, none shared
    assert len(set(S.colours([f"q{i}" for i in range(40)]).values())) == 40  # past the palette too
