"""The questions the project answers, declared once in sweeps/_questions.yaml, and what is rendered from them:
the index's first screen (each question, its current answer, its page, the earlier evidence under it with why
it was replaced), the banner atop a superseded page, the question block atop every page, and README.md's
answers block. A number lives in the questions file only; every other place is rendered from it, so the
index, the banners and the README cannot disagree. A question with `verdicts:` (all, or one row A-E) gets Table 3's
verdicts after its answer wherever it is shown, rendered from reports/table3.json (table3_answers.answer_line); its
own answer may not word a verdict, so no verdict word is written by hand.

    python -m headsweep.reports.site.questions --readme README.md [--check]

Bad input (a sweep that does not exist, a superseded_by naming no page of its question, a cycle of
superseded_by, an answer longer than a README line) fails in one line (ReportError) before a page is written.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

from headsweep.config import ROOT, SWEEPS_DIR
from headsweep.data.files import atomic_write
from headsweep.reporting.html import slug
from headsweep.reports.sweep.cells import ReportError
from headsweep.sweeps.specs import SweepError, sweep_names

QUESTIONS = SWEEPS_DIR / "_questions.yaml"
STATUSES = ("answered", "running", "not run yet")
MAX_WORDS = 30  # one README line
TABLE3_JSON = "table3.json"  # reports/table3.json: Table 3's verdicts, computed once (headsweep.reports.pages.table3)
VERDICT_ROWS = ("all", "A", "B", "C", "D", "E")  # a question's `verdicts:`: every row's counts, or one row's cells
# a Table 3 verdict in words: only the line rendered from table3.json may say one
VERDICT_WORDS = re.compile(r"\b(agree|agrees|disagree|disagrees|inconclusive|comparable|hold|holds|do not)\b", re.I)
BEGIN, END = (
    "<!-- questions:begin (rendered by `make report` from sweeps/_questions.yaml) -->",
    "<!-- questions:end -->",
)


def page_of(entry: dict) -> str:
    """The page an evidence entry names: a sweep's report (<sweep>) or a view (explain, prune-x/prune)."""
    return entry.get("sweep") or entry.get("view")


def known_sweeps(root: Path | None, specs_dir: Path = SWEEPS_DIR) -> set[str]:
    """Every sweep a question may name: a spec or variant, or a folder of the checkout's results/ or of root
    (a device's run of a spec, NAME=...)."""
    try:
        names = set(sweep_names(specs_dir))
    except SweepError as e:
        raise ReportError(str(e)) from None
    for folder in {ROOT / "results", *([root] if root is not None else [])}:
        if folder.is_dir():
            names |= {d.name for d in folder.iterdir() if d.is_dir()}
    return names


def load(path: Path = QUESTIONS, root: Path | None = None, specs_dir: Path = SWEEPS_DIR) -> list[dict]:
    """The questions, checked: one line (ReportError) for the first thing wrong."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ReportError(f"{path}: cannot read the questions: {str(e).splitlines()[0]}") from None
    questions = (data or {}).get("questions") if isinstance(data, dict) else None
    if not isinstance(questions, list) or not questions:
        raise ReportError(f"{path}: no `questions:` list")
    known = known_sweeps(root, specs_dir)
    ids = set()
    for q in questions:
        where = f"{path.name}: question {q.get('id', '?')!r}" if isinstance(q, dict) else f"{path.name}"
        if not isinstance(q, dict) or not all(isinstance(q.get(k), str) and q[k] for k in ("id", "question", "answer")):
            raise ReportError(f"{where}: each question needs id, question and answer (strings)")
        if q["id"] in ids:
            raise ReportError(f"{where}: declared twice; a question is declared once")
        ids.add(q["id"])
        if q.get("status", "answered") not in STATUSES:
            raise ReportError(f"{where}: status {q.get('status')!r} is not one of {', '.join(STATUSES)}")
        if len(q["answer"].split()) > MAX_WORDS:
            raise ReportError(f"{where}: its answer has {len(q['answer'].split())} words; at most {MAX_WORDS}")
        if q.get("verdicts") is not None:
            if q["verdicts"] not in VERDICT_ROWS:
                raise ReportError(f"{where}: verdicts {q['verdicts']!r} is not one of {', '.join(VERDICT_ROWS)}")
            if said := VERDICT_WORDS.search(q["answer"]):
                raise ReportError(
                    f"{where}: its answer words a verdict ({said.group(0)!r}); Table 3's verdicts are rendered from "
                    f"reports/{TABLE3_JSON} after it (`verdicts:`): write the numbers only"
                )
        evidence = q.setdefault("evidence", []) or []
        q["evidence"] = evidence
        pages = []
        for e in evidence:
            if not isinstance(e, dict) or ("sweep" in e) == ("view" in e):
                raise ReportError(f"{where}: each evidence entry names one `sweep:` or one `view:`")
            if "sweep" in e and e["sweep"] not in known:
                raise ReportError(
                    f"{where}: sweep {e['sweep']!r} does not exist (no sweeps/ spec or variant, no results/ folder)"
                )
            if "view" in e and not e.get("command"):
                raise ReportError(f"{where}: view {e['view']!r} needs the `command:` that writes it")
            pages.append(page_of(e))
        for e in evidence:
            later = e.get("superseded_by")
            if later is not None and later not in pages:
                raise ReportError(f"{where}: {page_of(e)} is superseded_by {later!r}, which is no page of the question")
            if later is not None and not e.get("why"):
                raise ReportError(f"{where}: {page_of(e)} is superseded_by {later}: say `why:`")
        cycle = supersedes_cycle(evidence)
        if cycle:
            raise ReportError(f"{where}: superseded_by goes round in a cycle: {' -> '.join(cycle)}")
        q.setdefault("planned", [])
    return questions


def supersedes_cycle(evidence: list[dict]) -> list[str] | None:
    """A chain of superseded_by that comes back to where it started, or None."""
    later = {page_of(e): e.get("superseded_by") for e in evidence}
    for start in later:
        chain, here = [start], later[start]
        while here is not None:
            if here in chain:
                return [*chain[chain.index(here) :], here]
            chain.append(here)
            here = later.get(here)
    return None


def verdict_line(q: dict, reports: Path) -> str | None:
    """The question's verdicts rendered from reports/table3.json; None for a question without `verdicts:`."""
    from headsweep.reports.pages.table3_answers import answer_line

    if q.get("verdicts") is None:
        return None
    path = Path(reports) / TABLE3_JSON
    if not path.is_file():
        return f"Verdicts: reports/{TABLE3_JSON} not written yet (`make table3-report`)."
    return answer_line(json.loads(path.read_text()), q["verdicts"])


def answer_text(q: dict, reports: Path) -> str:
    """The answer as every page shows it: its words, then its verdicts rendered from table3.json where it has them."""
    line = verdict_line(q, reports)
    return q["answer"] + (f" {line}" if line else "")


def current(q: dict) -> list[dict]:
    return [e for e in q["evidence"] if not e.get("superseded_by")]


def earlier(q: dict) -> list[dict]:
    return [e for e in q["evidence"] if e.get("superseded_by")]


def find(questions: list[dict], page: str) -> tuple[dict, dict] | None:
    """The question a page answers and its evidence entry, or None."""
    return next(((q, e) for q in questions for e in q["evidence"] if page_of(e) == page), None)


def md_href(page: str, here: str = "") -> str:
    """The markdown twin of a page, relative to the page `here` (both relative to reports/)."""
    depth = here.count("/")
    return "../" * depth + f"{page}.md"


def exists(out_dir: Path, page: str) -> bool:
    return (out_dir / f"{page}.md").is_file()


def page_link(out_dir: Path, page: str, here: str = "", text: str | None = None) -> str:
    """A link to a page where it is written, else its name and that it is not written yet."""
    text = text or page
    return f"[{text}]({md_href(page, here)})" if exists(out_dir, page) else f"{text} (no page yet)"


# ----------------------------------------------------------------------------- the index's first screen


def index_section(questions: list[dict], out_dir: Path) -> list[str]:
    """Every question with its current answer and page, and the earlier evidence it replaced with why: one
    table, so that the whole list fits a reader's first screen. The other current pages of a question (another
    device, the grid's edge) are on its page and under Every sweep."""
    lines = [
        "## Questions and their current answers",
        "",
        "Each answer is its page's (the current protocol); the earlier protocol's pages are listed beside it with "
        "why they were replaced. Declared once in `sweeps/_questions.yaml`.",
        "",
        '<div id="questions">',
        "",
        "| question | current answer | earlier protocol (why replaced) |",
        "|---|---|---|",
    ]
    for q in questions:
        pages = current(q)
        main = page_of(pages[0]) if pages else None
        title = f"[{q['question']}]({md_href(main)})" if main and exists(out_dir, main) else q["question"]
        status = "" if q.get("status", "answered") == "answered" else f" *({q['status']})*"
        planned = [
            page_link(out_dir, name) if exists(out_dir, name) else f"`{name}` not run yet" for name in q["planned"]
        ]
        answer = answer_text(q, out_dir) + (f" Planned: {', '.join(planned)}." if planned else "")
        before = "<br>".join(f"{page_link(out_dir, page_of(e))}: {e['why']}" for e in earlier(q)) or "—"
        lines.append(f'| <a id="q-{q["id"]}"></a>{title}{status} | {answer} | {before} |')
    return [*lines, "", "</div>", ""]


# ----------------------------------------------------------------------------- atop each page


def banner(questions: list[dict], page: str, out_dir: Path) -> list[str]:
    """A superseded page's first words: what replaced it, why, and the link; [] for a current page."""
    found = find(questions, page)
    if not found or not found[1].get("superseded_by"):
        return []
    q, e = found
    later = e["superseded_by"]
    # follow the chain to the page that holds the answer now, so a reader lands on it in one click
    by = {page_of(x): x.get("superseded_by") for x in q["evidence"]}
    now = later
    while by.get(now):
        now = by[now]
    tail = f" (itself replaced by {page_link(out_dir, now, page)}, the current answer)" if now != later else ""
    return [
        f"> **Earlier protocol, superseded by {page_link(out_dir, later, page)}**{tail}: {e['why']}. "
        f"The current answer: {answer_text(q, out_dir)}",
        "",
    ]


def question_block(questions: list[dict], page: str, out_dir: Path) -> list[str]:
    """The question the page answers (linking the index's entry), and the other pages of that question."""
    found = find(questions, page)
    if not found:
        return ["- **Question:** none declared in `sweeps/_questions.yaml` (a page of its own)."]
    q, e = found
    index = md_href("index", page)
    lines = [f"- **Question:** [{q['question']}]({index}#q-{q['id']}) This page: {e.get('what', page)}."]
    others = []
    for x in q["evidence"]:
        if page_of(x) == page:
            continue
        notes = [x.get("what", ""), *(["superseded"] if x.get("superseded_by") else [])]
        if not exists(out_dir, page_of(x)):
            notes.append("no page yet")
        link = f"[{page_of(x)}]({md_href(page_of(x), page)})" if exists(out_dir, page_of(x)) else page_of(x)
        others.append(f"{link} ({'; '.join(n for n in notes if n)})")
    if others:
        lines.append("- **Same question:** " + "; ".join(others) + ".")
    return lines


# ----------------------------------------------------------------------------- README.md


def readme_block(questions: list[dict], reports: Path = ROOT / "reports") -> list[str]:
    """README's answers: one line per question (its answer, <= 30 words) linking its page's markdown twin,
    where that page is written (a question still running may have none yet)."""
    lines = [BEGIN, "", "| question | current answer |", "|---|---|"]
    for q in questions:
        pages = current(q)
        main = page_of(pages[0]) if pages else None
        there = main is not None and (reports / f"{main}.md").is_file()
        link = f"[{q['question']}]({reports.name}/{main}.md)" if there else q["question"]
        lines.append(f"| {link} | {answer_text(q, reports)} |")
    return [*lines, "", END]


def with_readme_block(text: str, block: list[str]) -> str:
    if BEGIN not in text or END not in text:
        raise ReportError(f"README.md has no `{BEGIN}` ... `{END}` markers for the answers block")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    return head + "\n".join(block) + tail


def write_readme(path: Path, questions: list[dict], reports: Path | None = None) -> bool:
    """README.md's answers block rendered again (links into `reports`, beside README by default); True where it
    changed."""
    text = path.read_text()
    new = with_readme_block(text, readme_block(questions, reports or path.parent / "reports"))
    if new != text:
        atomic_write(path, new)
    return new != text


def contents(markdown: str, least: int = 3) -> list[str]:
    """A contents line for a page of at least `least` second-level sections (its ## headings)."""
    heads = [line[3:].strip() for line in markdown.splitlines() if line.startswith("## ")]
    if len(heads) < least:
        return []
    return ["- **Contents:** " + " · ".join(f"[{h}](#{slug(h)})" for h in heads)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--readme", type=Path, default=Path("README.md"))
    parser.add_argument("--root", type=Path, default=Path("results"))
    parser.add_argument("--check", action="store_true", help="exit 1 where README's block is not the rendering")
    args = parser.parse_args(argv)
    try:
        questions = load(root=args.root)
        if args.check:
            text = args.readme.read_text()
            if with_readme_block(text, readme_block(questions, args.readme.parent / "reports")) != text:
                print(f"{args.readme}: the answers block differs from sweeps/_questions.yaml: `make report`")
                return 1
            return 0
        changed = write_readme(args.readme, questions)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{args.readme}: answers block {'rewritten' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
