"""The questions, declared once (sweeps/_questions.yaml): checked before a page is written (a sweep that does
not exist, a cycle of superseded_by, an answer over a README line: one line each), rendered into the index's
first screen, the banner of a superseded page, and README.md's answers block, which must equal the rendering."""

from pathlib import Path

import pytest

from headsweep.config import ROOT
from headsweep.reports import build as B
from headsweep.reports.site import questions as Q
from headsweep.reports.sweep.cells import ReportError

SPECS = ROOT / "sweeps"


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "_questions.yaml"
    path.write_text(body)
    return path


GOOD = """
questions:
  - id: kv
    question: "Do shared K/V heads cost BLEU?"
    answer: "Not significantly: 0.75 BLEU (fan_in, 3 seeds)."
    evidence:
      - sweep: kv_heads_lr
        what: "fan_in, each cell's own rate"
      - sweep: kv_heads_init
        what: "one rate"
        superseded_by: kv_heads_lr
        why: "one rate for every cell"
      - sweep: kv_heads
        what: "xavier"
        superseded_by: kv_heads_init
        why: "xavier grew W^K, W^V with the sharing"
"""


def test_the_shipped_questions_file_loads_and_names_every_sweep_it_needs():
    questions = Q.load()
    ids = [q["id"] for q in questions]
    assert ids[0] == "table3" and "kv_heads" in ids  # Table 3's page first among the questions
    kv = next(q for q in questions if q["id"] == "kv_heads")
    assert Q.page_of(Q.current(kv)[0]) == "kv_heads_lr"
    assert {Q.page_of(e) for e in Q.earlier(kv)} == {"kv_heads", "kv_heads_init"}


@pytest.mark.parametrize(
    "change, message",
    [
        (("sweep: kv_heads_lr\n", "sweep: kv_heads_nonesuch\n"), "sweep 'kv_heads_nonesuch' does not exist"),
        (
            (
                "      - sweep: kv_heads_lr\n        what:",
                "      - sweep: kv_heads_lr\n        superseded_by: kv_heads\n        why: a loop\n        what:",
            ),
            "superseded_by goes round in a cycle: kv_heads_lr -> kv_heads -> kv_heads_init -> kv_heads_lr",
        ),
        (("superseded_by: kv_heads_lr", "superseded_by: table3_a"), "which is no page of the question"),
        (("0.75 BLEU (fan_in, 3 seeds).", "0.75 " + "word " * 30), "words; at most 30"),
        # a Table 3 question's verdicts come from reports/table3.json: its answer may not word one by hand
        (('    answer: "Not', '    verdicts: B\n    answer: "Agrees, not'), "its answer words a verdict ('Agrees')"),
        (('    answer: "Not', '    verdicts: F\n    answer: "Not'), "verdicts 'F' is not one of all, A, B, C, D, E"),
    ],
)
def test_bad_questions_fail_in_one_line(tmp_path, change, message):
    path = write(tmp_path, GOOD.replace(*change))
    with pytest.raises(ReportError) as e:
        Q.load(path, tmp_path)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_make_report_on_bad_questions_writes_no_page(tmp_path, monkeypatch, capsys):
    path = write(tmp_path, GOOD.replace("sweep: kv_heads_lr\n", "sweep: kv_heads_nonesuch\n"))
    monkeypatch.setattr(Q, "QUESTIONS", path)
    monkeypatch.setattr(Q.load, "__defaults__", (path, None, SPECS))
    root = tmp_path / "results"
    (root / "kv_heads" / "x-s1").mkdir(parents=True)
    (root / "kv_heads" / "x-s1" / "results.json").write_text("{}")
    out = tmp_path / "reports"
    assert B.main(["--sweep", "all", "--root", str(root), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "kv_heads_nonesuch' does not exist" in err[0]
    assert not out.exists()


def test_banner_index_and_readme_are_rendered_from_the_one_declaration(tmp_path):
    questions = Q.load(write(tmp_path, GOOD), tmp_path)
    out = tmp_path / "reports"
    out.mkdir()
    for page in ("kv_heads", "kv_heads_init", "kv_heads_lr"):
        (out / f"{page}.md").write_text(f"# {page}\n")
    banner = "\n".join(Q.banner(questions, "kv_heads", out))
    assert banner.startswith("> **Earlier protocol, superseded by [kv_heads_init](kv_heads_init.md)**")
    assert "itself replaced by [kv_heads_lr](kv_heads_lr.md), the current answer" in banner
    assert "xavier grew W^K, W^V with the sharing" in banner and "0.75 BLEU" in banner
    assert Q.banner(questions, "kv_heads_lr", out) == []  # the current page has none
    index = "\n".join(Q.index_section(questions, out))
    assert '| <a id="q-kv"></a>[Do shared K/V heads cost BLEU?](kv_heads_lr.md) | Not significantly: 0.75 BLEU' in index
    assert "[kv_heads_init](kv_heads_init.md): one rate for every cell<br>[kv_heads](kv_heads.md): xavier grew" in index
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{Q.BEGIN}\nold\n{Q.END}\n\nmore\n")
    assert Q.write_readme(readme, questions, out) and not Q.write_readme(readme, questions, out)
    text = readme.read_text()
    assert "| [Do shared K/V heads cost BLEU?](reports/kv_heads_lr.md) | Not significantly: 0.75 BLEU" in text
    assert text.endswith(f"{Q.END}\n\nmore\n")


def test_the_readme_block_is_the_rendering_of_the_questions_file():
    assert Q.main(["--readme", str(ROOT / "README.md"), "--check"]) == 0
