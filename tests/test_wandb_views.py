"""`make wandb-views`: one W&B report per question of sweeps/_questions.yaml and a workspace view, built with
wandb-workspaces and written as the specs W&B stores, with no network. Each report is read back from its JSON:
a runset per sweep of its question (runs by that sweep's tag, grouped by their cell in it), its answer, the
three panels, the superseded evidence apart; Table 3's shows the paper's numbers beside ours. Bad input: one
line each, nothing written; with an API key and no server, nothing waits."""

import gzip
import json
import socket
from collections import Counter

import pytest
import yaml

from headsweep.reports.dashboard import views as V
from headsweep.reports.dashboard.save import ViewsError, synced_tags
from headsweep.reports.pages import table3 as T
from headsweep.reports.site import questions as Q
from headsweep.sweeps.table3 import ROWS
from test_table3 import REFS, fake_run

PANELS = {"Run History Line Plot", "Bar Chart", "Parallel Coordinates Plot"}


def read_specs(out):
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


def blocks(spec: dict) -> list[dict]:
    return spec["report"]["spec"]["blocks"]


def text(block: dict) -> str:
    return block.get("content") or "".join(c.get("text", "") for c in block.get("children", []))


def grids(spec: dict) -> list[dict]:
    return [b["metadata"] for b in blocks(spec) if b["type"] == "panel-grid"]


def check_grid(grid: dict, sweep: str, entity: str, project: str) -> None:
    """One runset: the sweep's runs (by the tag wandb_export gives each run of it), grouped by the run's cell
    in that sweep (config cell_in.<sweep>), in the named project; val loss by step, test BLEU, the settings."""
    (runset,) = grid["runSets"]
    assert runset["name"] == sweep
    assert runset["project"] == {"entityName": entity, "name": project}
    (rule,) = runset["filters"]["filters"]
    assert (rule["key"], rule["op"], rule["value"]) == ({"section": "run", "name": "tags"}, "IN", [sweep])
    assert runset["grouping"] == [{"section": "config", "name": f"cell_in.value.{sweep}"}]
    panels = {p["viewType"]: p["config"] for p in grid["panelBankSectionConfig"]["panels"]}
    assert set(panels) == PANELS
    line, bar = panels["Run History Line Plot"], panels["Bar Chart"]
    assert (line["xAxis"], line["metrics"]) == ("_step", ["val/loss"]) and bar["metrics"] == ["test/bleu"]
    for p in (line, bar):  # a cell's seeds: one line or bar, their mean and sd
        assert (p["aggregate"], p["groupAgg"], p["groupArea"]) == (True, "mean", "stddev")
    columns = [c["accessor"] for c in panels["Parallel Coordinates Plot"]["columns"]]
    assert columns[-2:] == ["summary:val/loss", "summary:test/bleu"]


def test_each_shipped_question_has_a_report_of_its_sweeps_grouped_by_cell(tmp_path):
    root = tmp_path / "results"
    root.mkdir()
    questions = Q.load(root=root)  # the shipped file
    rows = T.build(root, T.read_paper(T.PAPER_CSV))  # no runs here: every row's sweeps still named
    synced = Counter(s for names in V.sweeps_of(questions, rows).values() for s in names)  # every sweep synced
    V.write_specs(V.build(questions, root, V.Where("ent", "proj", {}, synced, "in ent/proj"), rows), tmp_path / "views")
    specs = read_specs(tmp_path / "views")
    assert set(specs) == {q["id"] for q in questions} | {"_workspace"}
    for q in questions:
        spec = specs[q["id"]]
        assert spec["report"]["displayName"] == q["question"]
        assert spec["report"]["project"] == {"entityName": "ent", "name": "proj"}
        first = next(b for b in blocks(spec) if text(b))
        assert first["type"] == "markdown-block" and q["answer"] in text(first)
        current = [e["sweep"] for e in Q.current(q) if "sweep" in e]
        if any(e.get("view") == "table3" for e in q["evidence"]):
            current += [s for names in ROWS.values() for s in names]
        earlier = [e["sweep"] for e in Q.earlier(q)]
        assert [g["runSets"][0]["name"] for g in grids(spec)] == current + earlier
        for g, sweep in zip(grids(spec), current + earlier):
            check_grid(g, sweep, "ent", "proj")
        headings = [text(b) for b in blocks(spec) if b["type"] == "heading"]
        if earlier:  # the superseded evidence in its own section, after the current, each labelled with why
            cut = headings.index("Superseded evidence")
            assert headings.index("Current evidence") < cut
            for e in Q.earlier(q):
                assert f"{e['sweep']}: superseded by {e['superseded_by']}" in headings[cut:]
                assert any(e["why"] in text(b) for b in blocks(spec))
        else:
            assert "Superseded evidence" not in headings
        for e in q["evidence"]:
            if "view" in e and e["view"] != "table3":  # a page a command writes: named with its command
                assert any(e["command"] in text(b) for b in blocks(spec))
    ws = specs["_workspace"]["workspace"]
    assert (ws["entity"], ws["project"]) == ("ent", "proj")
    grouping = ws["spec"]["section"]["runSets"][0]["grouping"]
    assert grouping == [
        {"section": "run", "name": "jobType"},  # the question
        {"section": "config", "name": "sweep.value"},
        {"section": "run", "name": "group"},  # the cell
    ]


QUESTIONS = [
    {
        "id": "table3",
        "question": "Table 3?",
        "answer": "Row B holds.",
        "evidence": [{"view": "table3", "command": "make table3-report"}],
    },
    {
        "id": "row_b",
        "question": "Row B?",
        "answer": "d_k 16 costs a BLEU.",
        "evidence": [
            {"sweep": "table3_b_fan_in", "what": "fan_in"},
            {"sweep": "table3_b", "what": "xavier", "superseded_by": "table3_b_fan_in", "why": "the init"},
        ],
    },
    {
        "id": "lengths",
        "question": "Lengths?",
        "answer": "No.",
        "evidence": [{"view": "lengths", "command": "make lengths"}],
    },
]


@pytest.fixture(scope="module")
def fake_root(tmp_path_factory):
    """Row B at today's protocol (2 seeds of 2 cells) and its superseded xavier sweep (read only: made once)."""
    top = tmp_path_factory.mktemp("wandb_views")
    data = top / "data"
    data.mkdir()
    with gzip.open(data / "test.en.gz", "wt", encoding="utf-8") as f:
        f.write("".join(r + "\n" for r in REFS))
    root = top / "results"
    for seed, noise in zip((1, 2), (-0.1, 0.1)):
        fake_run(root, data, "table3_b_fan_in", "h8-dk32-dv32", ["model.d_k=32"], seed, 30.0 + noise, base=True)
        fake_run(root, data, "table3_b_fan_in", "h8-dk16-dv32", ["model.d_k=16"], seed, 29.0 + noise)
    xavier = ["model.init=xavier", "module.decay_by=steps_or_time"]
    fake_run(root, data, "table3_b", "h8-dk32-dv32", ["model.d_k=32"], 1, 28.0, base=True, protocol=xavier)
    fake_run(root, data, "table3_b", "h8-dk8-dv32", ["model.d_k=8"], 1, 24.0, protocol=xavier)
    return root


@pytest.fixture
def questions_file(tmp_path):
    """The questions of Table 3, row B, and a view-only one, in a file of this test's own."""
    path = tmp_path / "questions.yaml"
    path.write_text(yaml.safe_dump({"questions": QUESTIONS}))
    return path


def run_main(questions, root, out, capsys, *extra):
    code = V.main(["--root", str(root), "--out", str(out), "--questions", str(questions), "--samples", "20", *extra])
    captured = capsys.readouterr()
    return code, captured.out.strip().splitlines(), captured.err.strip().splitlines()


def test_offline_it_writes_every_spec_and_says_nothing_was_uploaded(
    fake_root, questions_file, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    out = tmp_path / "views"
    code, lines, err = run_main(questions_file, fake_root, out, capsys, "--entity", "me", "--project", "p")
    assert code == 0 and err == [] and len(lines) == 1
    assert lines[0].startswith(f"wrote 3 report specs (one per question) and the workspace view's to {out}/; nothing")
    assert "nothing uploaded (no WANDB_API_KEY: `make wandb-export`, then `wandb sync --project p " in lines[0]
    specs = read_specs(out)
    assert set(specs) == {"table3", "row_b", "lengths", "_workspace"}
    # row B: its sweep's settings as parallel axes (d_k varies), the xavier sweep apart
    (current, earlier) = grids(specs["row_b"])
    check_grid(current, "table3_b_fan_in", "me", "p")
    check_grid(earlier, "table3_b", "me", "p")
    axes = [c["accessor"] for p in current["panelBankSectionConfig"]["panels"] for c in p["config"].get("columns", [])]
    assert "config:model.value.d_k" in axes
    # Table 3: the page's verdicts table (the paper's Δ beside ours, from its record); a runset per row sweep that
    # has runs, the others named
    assert [g["runSets"][0]["name"] for g in grids(specs["table3"])] == ["table3_b_fan_in"]
    assert any(f"No runs of it under {fake_root}: not shown" in text(b) for b in blocks(specs["table3"]))
    (table,) = [text(b) for b in blocks(specs["table3"]) if b["type"] == "markdown-block" and "paper Δ BLEU" in text(b)]
    lines = table.splitlines()
    # d_k 16 at our d_model 256 is the paper's d_k 32 at 512: dev BLEU 25.4 against its base's 25.8, -0.4
    (dk16,) = [x for x in lines if x.startswith("| B | d_k 16 | -0.4 (no clear effect) | -1.00 [")]
    assert "n 2/2" in dk16 and "**inconclusive**" in dk16
    assert any(x.startswith("| B | d_k 8 |") and "not run yet" in x for x in lines)
    # a view-only question: its page and command, no runset
    assert grids(specs["lengths"]) == [] and any("make lengths" in text(b) for b in blocks(specs["lengths"]))


def test_bad_input_is_one_line_each_and_nothing_is_written(fake_root, questions_file, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    out = tmp_path / "views"
    out.mkdir()
    (out / "row_b.json").write_text("the last good spec")
    empty = tmp_path / "empty"
    empty.mkdir()
    code, lines, err = run_main(questions_file, empty, out, capsys)
    assert code == 2 and err == [f"error: no finished runs under {empty}: nothing to show"]
    # two questions whose sweeps (known to the checkout) have no run here: a line each
    questions = yaml.safe_load(questions_file.read_text())
    questions["questions"][1]["evidence"] = [{"sweep": "table3_e"}, {"sweep": "table3_b_fan_in_edge"}]
    questions["questions"][2]["evidence"] = [{"sweep": "kv_heads_lr"}]
    questions_file.write_text(yaml.safe_dump(questions))
    code, lines, err = run_main(questions_file, fake_root, out, capsys)
    assert code == 2 and lines == []
    assert err == [
        f"error: question 'row_b': no runs of its sweeps (table3_e, table3_b_fan_in_edge) under {fake_root}",
        f"error: question 'lengths': no runs of its sweeps (kv_heads_lr) under {fake_root}",
    ]
    assert [p.name for p in out.iterdir()] == ["row_b.json"] and (
        out / "row_b.json"
    ).read_text() == "the last good spec"


def test_with_a_key_and_no_server_nothing_waits_and_nothing_is_uploaded(
    fake_root, questions_file, tmp_path, capsys, monkeypatch
):
    with socket.socket() as s:  # a port nobody listens on: refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setattr("wandb.Api", lambda *a, **k: pytest.fail("no server: wandb.Api must not be asked"))
    code, lines, err = run_main(questions_file, fake_root, tmp_path / "views", capsys)
    assert code == 0 and err == [] and f"nothing uploaded (http://127.0.0.1:{port} unreachable" in lines[0]
    assert len(read_specs(tmp_path / "views")) == 4


class FakeApi:
    """What wandb.Api answers about a project: {entity/project: [each run's tags]}; a missing one has no id."""

    def __init__(self, projects: dict):
        self.projects = projects

    def project(self, name, entity):
        tags = self.projects.get(f"{entity}/{name}")

        class Project:
            @property
            def id(self):
                if tags is None:
                    raise ValueError(f"Project {name} not found")
                return "UHJvamVjdDox"

        return Project()

    def runs(self, path, per_page=50):
        return [type("Run", (), {"tags": t})() for t in self.projects[path]]


def test_online_a_missing_project_or_one_without_a_questions_runs_is_one_line(fake_root, questions_file):
    api = FakeApi({"me/empty": [], "me/p": [["table3_b", "q-row_b"], ["table3_b"]]})
    for project, words in (("nope", "me/nope: no such project on "), ("empty", "me/empty: no synced runs: ")):
        with pytest.raises(ViewsError) as e:
            synced_tags(api, "me", project, "sync them")
        assert len(e.value.lines) == 1 and e.value.lines[0].startswith(words)
    synced = synced_tags(api, "me", "p", "sync them")
    assert synced["table3_b"] == 2
    questions = Q.load(questions_file, root=fake_root)
    rows = T.build(fake_root, T.read_paper(T.PAPER_CSV))
    # row B's superseded sweep was synced, none of Table 3's rows was
    rows_sweeps = ", ".join(s for names in ROWS.values() for s in names)
    assert V.missing_runs(questions, rows, synced, "in me/p") == [
        f"question 'table3': no runs of its sweeps ({rows_sweeps}) in me/p"
    ]


def test_the_parallel_axes_are_the_settings_a_sweep_varies_as_its_runs_log_them(fake_root, tmp_path):
    """Row A moves h with d_k = d_v = d_model / h: the config holds null for d_k, the export logs it as the
    model uses it (as a training run does), so h, d_k and d_v are axes; a setting some run logs as null
    would draw a gap, and is left out."""
    root = tmp_path / "results"
    data = fake_root.parent / "data"
    for heads, bleu in ((8, 30.0), (4, 29.5)):
        fake_run(root, data, "table3_a_fan_in", f"h{heads}", [f"model.heads={heads}"], 1, bleu, base=heads == 8)
    assert V.settings_varied(root, "table3_a_fan_in") == ["model.heads", "model.d_k", "model.d_v"]
    assert V.settings_varied(fake_root, "table3_b_fan_in") == ["model.d_k"]
    for base in ("null", "256"):  # a setting null in one cell (the default), set in the other
        fake_run(root, data, "wo", f"wo{base}", [f"model.init_wo_base={base}"], 1, 30.0, base=base == "null")
    assert V.settings_varied(root, "wo") == []
