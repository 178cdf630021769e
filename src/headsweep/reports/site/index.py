"""reports/index.html and its twin index.md: the questions with their current answers, a page of every sweep's
report by question (sweeps.html), every view across sweeps (explain, lengths, budget, budgets) and every prune
report (reports/prune-*/, rendered to prune.html beside its prune.md), each of which links back, and one table
of every experiment (report_index: each run counted once), sortable and filterable in the page itself. Markdown
links markdown (GitHub renders the twins); the pages link pages. Built from the reports' own <sweep>.json files
(what `make report` last found in each sweep), so rebuilding one sweep's report does not recompute the
others'."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

from headsweep.data.files import atomic_write  # a page killed mid-write leaves the previous one whole
from headsweep.reporting.html import page
from headsweep.reporting.markdown import figure, first_heading, table, with_back_link, with_footer
from headsweep.reports.site import experiments as report_index
from headsweep.reports.site import questions as Q
from headsweep.reports.site.compare_page import compare_data, compare_page, run_curve  # noqa: F401 (the site's API)
from headsweep.reports.site.glossary import GLOSSARY, write_glossary
from headsweep.reports.sweep.cells import Cell
from headsweep.reports.sweep.lr import phase_one_only
from headsweep.reports.sweep.stuck import correlation
from headsweep.reports.sweep.summary import budget_store, early_pool
from headsweep.reports.sweep.table import anchor
from headsweep.store import RUNS  # results/runs/: the store, no sweep

PRUNE_FIGURE = (
    "BLEU against the heads kept: hard-concrete gates with an L0 penalty, fine-tuned, beside Michel's "
    "importance pruning to the same counts without fine-tuning."
)


def index_record(sweep: str, title: str, cells: list[Cell], runs: list, left_out: list) -> dict:
    """What the index shows of one sweep: its page, its cells' numbers, what was left out."""
    return {
        "sweep": sweep,
        "title": title,
        "page": f"{sweep}.html",
        "runs": len(runs),
        "left_out": [[d.name, why] for d, why in left_out],
        "cells": [
            {
                "cell": c.label,
                "base": c.base,
                "anchor": anchor(c),
                "h": c.row["h"],
                "d_k": c.row["d_k"],
                "d_v": c.row["d_v"],
                **{
                    k: c.row[k]
                    for k in (
                        "params_M",
                        "attn_mflops",
                        "test_bleu",
                        "test_bleu_sd",
                        "delta",
                        "interval",  # Δ's 95% Welch interval over seeds
                        "p_welch",
                        "p_holm",  # Holm across the page's cells on the Welch p-values (Table 3's rule)
                        "verdict",  # better, worse, inconclusive, not comparable (under-trained); None: base
                        "under_trained",  # why a cell is not comparable (verdicts.under_trained), else None
                        "n_base",
                        "p_bootstrap",  # sacreBLEU's paired bootstrap: test-set noise, no verdict
                        "p_bootstrap_bound",
                        "test_chrf",
                        "val_bleu",
                        "n",
                        "precision",
                        "compile",
                    )
                },
                **report_index.cell_record(c),
            }
            for c in cells
        ],
    }


ABOUT_BEGIN, ABOUT_END = "<!-- about:begin -->", "<!-- about:end -->"


def with_about(md: str, lines: list[str]) -> str:
    """A view's markdown with what it is (its question, the other pages of it, a contents list) under its first
    heading, between markers, so rendering it again replaces the block rather than adding another."""
    if ABOUT_BEGIN in md and ABOUT_END in md:
        head, rest = md.split(ABOUT_BEGIN, 1)
        md = head.rstrip("\n") + "\n\n" + rest.split(ABOUT_END, 1)[1].lstrip("\n")
    if not lines:
        return md
    block = "\n".join([ABOUT_BEGIN, "", *lines, "", ABOUT_END])  # one blank line after it, fresh page or not
    return re.sub(r"^(# [^\n]*)\n*", lambda m: f"{m.group(1)}\n\n{block}\n\n", md, count=1, flags=re.M)


def about(questions: list[dict] | None, page_name: str, out_dir: Path, md: str) -> list[str]:
    if questions is None:
        return []
    return [
        *Q.banner(questions, page_name, out_dir),
        *Q.question_block(questions, page_name, out_dir),
        *Q.contents(md),
    ]


def prune_pages(out_dir: Path, questions: list[dict] | None = None) -> list[tuple[Path, str]]:
    """Each prune report's page (prune.md rendered, with its plot), and the report's first heading."""
    pages = []
    for md_path in sorted(out_dir.glob("prune-*/prune.md")):
        md = md_path.read_text()
        heading = first_heading(md, md_path.parent.name)
        if (md_path.parent / "prune.png").is_file() and "prune.png" not in md:
            md += "\n" + figure("prune.png", f"Figure 1. {PRUNE_FIGURE}") + "\n"
        md = with_back_link(md, "../index.md")
        name = md_path.relative_to(out_dir).with_suffix("").as_posix()
        md = with_about(md, about(questions, name, out_dir, md))
        atomic_write(md_path, md)  # the markdown twin links back too (GitHub shows it)
        html_path = md_path.with_suffix(".html")
        atomic_write(html_path, page(f"{md_path.parent.name}: {heading}", md))
        pages.append((html_path, heading))
    return pages


# The views across sweeps, each written by its own command: (markdown file pattern, what it answers, the command)
VIEWS = (
    ("explain.md", "heads or head width? BLEU against d_k across sweeps", "make explain"),
    ("lengths.md", "narrow heads against sentence length", "make lengths"),
    ("*-budget.md", "gaps at 1x and 2x the steps", "make budget"),
    ("budgets.md", "1x, 2x, 4x from one trunk per cell", "make budgets-report"),
    ("table3_h[0-9]*.md", "one card's rows, its own base", "make table3-report SUFFIX=_<card>"),
)


def page_of_a_view(sweep: str) -> str | None:
    """The command whose page a sweep's page would overwrite (make lengths writes reports/lengths.md), else
    None: the site's own pages and every cross-sweep view."""
    site = {
        "index.md": "make report",
        CELLS: "make report",
        SWEEPS: "make report",
        "glossary.md": "make report",
        "compare.md": "make report",
    }
    own = [(name, command) for name, command in site.items()] + [(pattern, command) for pattern, _, command in VIEWS]
    return next((command for pattern, command in own if fnmatch.fnmatchcase(f"{sweep}.md", pattern)), None)


def view_pages(out_dir: Path, questions: list[dict] | None = None) -> list[tuple[Path, str, str]]:
    """Each cross-sweep view found in out_dir as a page, rendered again from its markdown (an older command
    wrote only the markdown, or a page without the link back), with its first heading and what it answers."""
    pages = []
    for pattern, answers, _ in VIEWS:
        for md_path in sorted(out_dir.glob(pattern)):
            md = with_back_link(md_path.read_text())
            md = with_about(md, about(questions, md_path.stem, out_dir, md))
            atomic_write(md_path, md)  # the markdown twin links back too (GitHub shows it)
            html_path = md_path.with_suffix(".html")
            atomic_write(html_path, page(first_heading(md, md_path.stem), md))
            pages.append((html_path, first_heading(md, md_path.stem), answers))
    return pages


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def md_link(page_name: str) -> str:
    """A page's markdown twin (sweep.html -> sweep.md): the markdown links markdown, so the links work on
    GitHub; the HTML pages get .html (reporting.html.page rewrites them)."""
    return Path(page_name).with_suffix(".md").as_posix()


def sweep_item(r: dict, asks: dict[str, str], late: dict[str, str], shared: dict[str, int]) -> str:
    """One sweep in the index's list, on one line of its column: its name (its page's title on hover), runs,
    cells, and where its runs are shared or left out; an earlier protocol's page says what replaced it."""
    title = r["title"].replace('"', "'")
    notes = [f"{shared[r['sweep']]} shared"] if shared.get(r["sweep"]) else []
    notes += [f"{len(r['left_out'])} left out"] if r["left_out"] else []
    notes += [f"replaced by {late[r['sweep']]}"] if r["sweep"] in late else []
    return (
        f'- [{r["sweep"]}]({md_link(r["page"])} "{title}"): {counted(r["runs"], "run")}, '
        f"{counted(len(r['cells']), 'cell')}" + (f" ({'; '.join(notes)})" if notes else "")
    )


def with_edges(
    records: list[dict],
    asks: dict[str, str],
    late: dict[str, str],
    shared: dict[str, int],
    rate_checks: dict[str, int] | None = None,
) -> list[str]:
    """A question's sweeps, one line each, a sweep's grid-edge runs (<sweep>_edge) on that sweep's line: the list
    stays short as edges are added. rate_checks: {sweep: runs} of the edges that hold grid runs only (no page of
    their own: their sweep's page reads them)."""
    names = {r["sweep"] for r in records}
    edges = {r["sweep"].removesuffix("_edge"): r for r in records if r["sweep"].endswith("_edge")}
    items = []
    for r in records:
        if r["sweep"].endswith("_edge") and r["sweep"].removesuffix("_edge") in names:
            continue  # on its sweep's line
        item = sweep_item(r, asks, late, shared)
        if (e := edges.get(r["sweep"])) is not None:
            title = e["title"].replace('"', "'")
            item += f'; [edge]({md_link(e["page"])} "{title}"): {counted(e["runs"], "run")}'
        elif (n := (rate_checks or {}).get(f"{r['sweep']}_edge")) is not None:
            item += f"; edge: {counted(n, 'grid run')} past its grid (read on this page; `{r['sweep']}_edge`)"
        items.append(item)
    return items


def index_markdown(
    records: list[dict],
    prunes: list[tuple[Path, str]],
    out_dir: Path,
    unreported: list[str],
    views: list[tuple[Path, str, str]] = (),
    questions: list[dict] | None = None,
    early_r: tuple[float, int] | None = None,
) -> str:
    """The index, three screens at most: the questions with their current answers first, then the pages across
    sweeps (every sweep by question, the table of every experiment, the views), the prune reports, and the
    glossary."""
    questions = questions or []
    lines = [
        "# headsweep reports",
        "",
        f"The words these pages use in their own sense (card, edge, stuck, start, ...): [the glossary]({GLOSSARY}). "
        f"Every experiment in one table: [{CELLS_TITLE.lower()}]({CELLS}). Every sweep by question: "
        f"[{SWEEPS_TITLE.lower()}]({SWEEPS}).",
        "",
        *(Q.index_section(questions, out_dir) if questions else []),
    ]
    lines += ["## Across sweeps", ""]
    waiting = f"; {len(unreported)} with runs but no report yet" if unreported else ""
    lines += [
        f"- [{SWEEPS_TITLE}]({SWEEPS}): {counted(len(records), 'sweep')} by the question each answers{waiting}",
        f"- [{CELLS_TITLE}]({CELLS}): {report_index.counts(records)[:-1]}; sortable and filterable",
        "- [Every experiment in parallel coordinates](compare.md): settings to BLEU and PPL, brushable",
    ]
    # here, not on each sweep's page: every `make report` rewrites the index, whichever sweep it builds
    if early_r is not None:
        lines.append(
            f"- Early val loss against final test BLEU (Pearson) over the {early_r[1]} distinct runs in results/ "
            "(every sweep's, with a page or not): "
            f"r = {early_r[0]:.2f} (below 0: a run that starts slowly ends lower; [stuck]({GLOSSARY}))"
        )
    lines += [f"- [{heading}]({md_link(p.name)}): {answers}" for p, heading, answers in views] or [
        f"- no views yet: {', '.join(command for *_, command in VIEWS)}"
    ]
    lines += ["", "## Pruning reports", ""]
    lines += [
        f"- [{p.parent.name}]({md_link(p.relative_to(out_dir).as_posix())}): {heading}" for p, heading in prunes
    ] or ["- none yet: `make prune CKPT=<run dir>`"]
    return "\n".join([*lines, ""])


SWEEPS, SWEEPS_TITLE = "sweeps.md", "Every sweep"


def sweeps_markdown(
    records: list[dict],
    unreported: list[str],
    questions: list[dict] | None = None,
    rate_checks: dict[str, int] | None = None,
) -> str:
    """sweeps.md: every sweep's page by the question it answers (two columns), a sweep's grid-edge runs on its
    line, the earlier protocols' pages saying what replaced them, and the sweeps with runs but no page yet. Its
    own page, not the index's: the list grows with every sweep, the index stays within three screens.
    rate_checks: {sweep: runs} of the sweeps in results/ holding learning-rate grid runs only, which get no page
    (`make report` refuses them) and are read on the pages of the sweeps whose rates they check."""
    questions, rate_checks = questions or [], rate_checks or {}
    asks = {Q.page_of(e): q["id"] for q in questions for e in q["evidence"]}
    late = {Q.page_of(e): e["superseded_by"] for q in questions for e in q["evidence"] if e.get("superseded_by")}
    old = [r["sweep"] for r in records if any("runs" not in c for c in r["cells"])]
    shared = report_index.shared_runs(records)
    lines = [f"# {SWEEPS_TITLE}, by question", ""]
    lines += ["By the question each answers ([the questions and their current answers](index.md#questions)); hover "
              "a name for its page's title. `shared`: runs another sweep holds too (counted once in the table of "
              f"[{CELLS_TITLE.lower()}]({CELLS})).", "", '<div id="sweeps">', ""]  # fmt: skip
    by_question: dict[str, list[dict]] = {}
    for r in sorted(records, key=lambda r: r["sweep"]):
        by_question.setdefault(asks.get(r["sweep"], "no question declared"), []).append(r)
    order = [q["id"] for q in questions if q["id"] in by_question] + sorted(set(by_question) - set(asks.values()))
    for qid in order:
        items = with_edges(by_question[qid], asks, late, shared, rate_checks)
        lines += [f"- **{qid}**", *("  " + item for item in items)]
    lines += ["- Runs but no report yet (`make report SWEEP=<name>`): " + ", ".join(unreported)] * bool(unreported)
    names = {r["sweep"] for r in records}
    if alone := sorted(n for n in rate_checks if n.removesuffix("_edge") not in names):
        # a rate grid's phase 1 while it runs, or rates tried for another sweep's cells: no cells of their own
        lines += [
            "- Learning-rate grid runs only, no page of their own (the pages of the sweeps they check read them "
            "from results/; a grid whose phase 2 is to come resumes with its `make sweep ... LR_GRID=`): "
            + ", ".join(f"{n} ({counted(rate_checks[n], 'run')})" for n in alone)
        ]
    lines += [f"- {name}: report older than the table of every experiment: `make report SWEEP={name}`" for name in old]
    lines += ["", "</div>", ""]
    return with_back_link("\n".join(lines))


CELLS, CELLS_TITLE = "cells.md", "Every experiment"


def cells_markdown(records: list[dict], asks: dict[str, str]) -> str:
    """cells.md: the table of every experiment (report_index: each run counted once), sortable and filterable,
    its columns defined above it."""
    head, rows = report_index.table(records, asks)
    return with_back_link(
        "\n".join(
            [
                f"# {CELLS_TITLE}",
                "",
                report_index.counts(records) + " " + report_index.NOTE,
                "",
                "Columns: " + "; ".join(f"**{h}** {report_index.definition(h)}" for h in head) + ".",
                "",
                "Click a column's header to sort by it (the question column groups the rows by question); type in "
                "the box to keep the rows holding every word typed (e.g. `kv_heads 32-true`). A cell's name opens "
                "its details in its sweep's report; a name shared by several rows carries what differs. The table "
                "scrolls sideways.",
                "",
                f'<p><input id="filter" type="search" placeholder="filter the experiments" '
                f'aria-label="filter the experiments"> <span id="shown">{len(rows)}</span> of {len(rows)} '
                "experiments</p>",
                "",
                '<div id="cells">',
                "",
                *table(head, rows, align=True),
                "",
                "</div>",
                "",
            ]
        )
    )


def write_index(
    out_dir: Path, root: Path | None = None, questions: list[dict] | None = None, pool: dict | None = None
) -> list[Path]:
    """index.md and index.html in out_dir, and the prune reports' pages; the sweeps of `root` without
    a report are named. questions: sweeps/_questions.yaml, loaded (read here when None). pool: summary.early_pool
    of root (computed here when not passed), whose early loss against test BLEU over every sweep's runs the index
    states."""
    questions = Q.load(root=root) if questions is None else questions
    records = []
    for path in sorted(out_dir.glob("*.json")):
        record = json.loads(path.read_text())
        if isinstance(record, dict) and "cells" in record and (out_dir / record.get("page", "")).is_file():
            records.append(record)
    reported = {r["sweep"] for r in records}
    unreported = (
        sorted(
            d.name
            for d in root.iterdir()
            if d.is_dir() and d.name not in reported and d.name != RUNS and any(d.glob("*/results.json"))
        )
        if root is not None and root.is_dir()
        else []
    )
    prunes = prune_pages(out_dir, questions)
    views = view_pages(out_dir, questions)
    asks = {Q.page_of(e): q["id"] for q in questions for e in q["evidence"]}
    compare = compare_page(out_dir, records, asks, root)
    cells = cells_markdown(records, asks)
    cells = with_footer(cells, __spec__.name)
    atomic_write(out_dir / CELLS, cells)
    atomic_write(out_dir / "cells.html", page(CELLS_TITLE.lower(), cells))
    glossary = write_glossary(out_dir)
    # a budgets store's trunks and branches are read on the budgets page (a view below), not as a sweep page
    unreported = [n for n in unreported if not budget_store(root / n)]
    rate_checks = {n: k for n in unreported if (k := phase_one_only(root / n))}
    unreported = [n for n in unreported if n not in rate_checks]
    sweeps = with_footer(sweeps_markdown(records, unreported, questions, rate_checks), __spec__.name)
    atomic_write(out_dir / SWEEPS, sweeps)
    atomic_write(out_dir / "sweeps.html", page(SWEEPS_TITLE.lower(), sweeps))
    if pool is None and root is not None and root.is_dir():
        pool = early_pool(root)  # every builder that writes the index (report, table3-report, the views) states it
    pairs = (pool or {}).get("pairs") or []
    r = correlation(pairs)
    md = index_markdown(
        records, prunes, out_dir, unreported, views, questions, (r, len(pairs)) if r is not None else None
    )
    md = with_footer(md, __spec__.name)
    atomic_write(out_dir / "index.md", md)
    atomic_write(out_dir / "index.html", page("headsweep reports", md))
    return [
        out_dir / "index.md",
        out_dir / "index.html",
        out_dir / "cells.html",
        out_dir / "sweeps.html",
        glossary,
        compare,
        *(p for p, _ in prunes),
        *(p for p, *_ in views),
    ]
