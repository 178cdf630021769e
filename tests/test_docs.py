"""README.md and docs/ as a reader follows them: every relative link opens a file that is there; README short
(its answers one line per question, rendered from sweeps/_questions.yaml: test_questions.py); one finding in
one place: kv_heads_lr's numbers in at most two files of README.md and docs/."""

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
