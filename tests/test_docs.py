"""README.md and docs/ as a reader follows them: every relative link opens a file that is there; README short
(its answers one line per question, rendered from sweeps/_questions.yaml: test_questions.py); one finding in
one place: kv_heads_lr's numbers in at most two files of README.md and docs/."""

import ast
import re
from pathlib import Path

from headsweep.config import ROOT

LINK = re.compile(r"\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_relative_link_of_readme_and_docs_opens_a_file():
    broken = []
    for page in pages():
        for href in LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", href) or href.startswith("#"):
                continue
            if not (page.parent / href.split("#", 1)[0]).exists():
                broken.append(f"{page.relative_to(ROOT)}: {href}")
    assert broken == []


def test_readme_is_short_and_a_finding_is_written_in_one_place():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 160
    # kv_heads_lr's answer: 4 and 2 K/V heads cost 0.75 and 0.73 BLEU (33.31 ± 0.36, 33.33 ± 0.68 against 34.06)
    numbers = re.compile(r"0\.75\W{1,8}(?:and\W+)?0\.73\b|33\.31 ± 0\.36|33\.33 ± 0\.68")
    holding = [p.relative_to(ROOT).as_posix() for p in pages() if numbers.search(p.read_text())]
    assert len(holding) <= 2, holding


ISSUE = re.compile(r"\bissues? #?\d+", re.I)


def test_no_reader_facing_doc_names_an_issue_number():
    """The README and docs say what a change was about (or link its note), not the ticket's number; the dated
    lab notes, a history, may."""
    said = [
        f"{page.relative_to(ROOT)}: {m}"
        for page in pages()
        if "notes" not in page.relative_to(ROOT).parts
        for m in ISSUE.findall(page.read_text())
    ]
    assert said == []


def page_strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module that can reach a page or a terminal: every one but the docstrings."""
    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


LINE = "not measured (run recorded before issue 54)"


def test_no_string_the_code_writes_names_an_issue_number(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""A docstring may (issue 7)."""\nLINE = "not measured (run recorded before issue 54)"\n')
    assert [text for _, text in page_strings(bad) if ISSUE.search(text)] == [LINE]  # the check can fail
    said = [
        f"{path.relative_to(ROOT)}:{line}: {text[:60]!r}"
        for path in sorted((ROOT / "src" / "headsweep").rglob("*.py"))
        for line, text in page_strings(path)
        if ISSUE.search(text)
    ]
    assert said == []
