"""reports/index.html and its twin index.md: a link to every sweep's report, every view across sweeps
(explain, lengths, budget, budgets) and every prune report (reports/prune-*/, rendered to prune.html beside its
prune.md), each of which links back, and one table of every experiment (report_index: each run counted
once), sortable and filterable in the page itself. Markdown links markdown (GitHub renders the twins);
the pages link pages. Built from the reports' own <sweep>.json files (what `make report` last found in each
sweep), so rebuilding one sweep's report does not recompute the others'."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from headsweep.data.files import atomic_write  # a page killed mid-write leaves the previous one whole
from headsweep.reporting.html import page
from headsweep.reporting.markdown import figure, first_heading, table, with_back_link, with_footer
from headsweep.reports.site import experiments as report_index
from headsweep.reports.site import questions as Q
from headsweep.reports.sweep.cells import Cell
from headsweep.reports.sweep.table import anchor
from headsweep.store import RUNS  # results/runs/: the store, no sweep
from headsweep.store.pack import metrics_file, open_text

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
                        "p_holm",
                        "p_bound",
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
        md = head.rstrip("\n") + "\n" + rest.split(ABOUT_END, 1)[1].lstrip("\n")
    if not lines:
        return md
    out, placed = [], False
    for line in md.split("\n"):
        out.append(line)
        if not placed and line.startswith("# "):
            out += ["", ABOUT_BEGIN, "", *lines, "", ABOUT_END, ""]
            placed = True
    return "\n".join(out)


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
    ("*-budget.md", "the gaps to the base at 1x and 2x the steps", "make budget"),
    ("budgets.md", "each cell against the base at 1x, 2x and 4x the steps, one trunk per cell", "make budgets-report"),
)


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


def index_markdown(
    records: list[dict],
    prunes: list[tuple[Path, str]],
    out_dir: Path,
    unreported: list[str],
    views: list[tuple[Path, str, str]] = (),
    questions: list[dict] | None = None,
) -> str:
    """The index: the questions with their current answers first (the first screen), then every page by
    question, the views, the prune reports and the table of every experiment."""
    questions = questions or []
    asks = {Q.page_of(e): q["id"] for q in questions for e in q["evidence"]}
    late = {Q.page_of(e): e["superseded_by"] for q in questions for e in q["evidence"] if e.get("superseded_by")}
    head, rows = report_index.table(records, asks)
    old = [r["sweep"] for r in records if any("runs" not in c for c in r["cells"])]
    shared = report_index.shared_runs(records)
    lines = ["# headsweep reports", "", *(Q.index_section(questions, out_dir) if questions else [])]
    lines += ["## Every sweep", ""]
    for r in sorted(records, key=lambda r: (asks.get(r["sweep"]) is None, asks.get(r["sweep"], ""), r["sweep"])):
        left = f"; {len(r['left_out'])} left out" if r["left_out"] else ""
        also = f" ({shared[r['sweep']]} also in another sweep)" if shared.get(r["sweep"]) else ""
        question = f"question {asks[r['sweep']]}" if r["sweep"] in asks else "no question declared"
        replaced = f"; earlier protocol, replaced by {late[r['sweep']]}" if r["sweep"] in late else ""
        lines.append(
            f"- [{r['title']}]({md_link(r['page'])}): {counted(r['runs'], 'run')}{also} in "
            f"{counted(len(r['cells']), 'cell')}{left} ({question}{replaced})"
        )
    lines += [f"- {name}: runs but no report yet: `make report SWEEP={name}`" for name in unreported]
    lines += [
        f"- {name}: its report is older than the table below, which leaves it out: `make report SWEEP={name}`"
        for name in old
    ]
    lines += ["", "## Across sweeps", ""]
    lines += ["- [Every experiment in parallel coordinates](compare.md): settings to BLEU and PPL, brushable"]
    lines += [f"- [{heading}]({md_link(p.name)}): {answers}" for p, heading, answers in views] or [
        f"- none yet: {', '.join(command for *_, command in VIEWS)}"
    ]
    lines += ["", "## Pruning reports", ""]
    lines += [
        f"- [{p.parent.name}]({md_link(p.relative_to(out_dir).as_posix())}): {heading}" for p, heading in prunes
    ] or ["- none yet: `make prune CKPT=<run dir>`"]
    lines += [
        "",
        "## Every experiment",
        "",
        report_index.counts(records) + " " + report_index.NOTE,
        "",
        "Columns: " + "; ".join(f"**{h}** {report_index.definition(h)}" for h in head) + ".",
        "",
        "Click a column's header to sort by it (the question column groups the rows by question); type in the "
        "box to keep the rows holding every word typed (e.g. `kv_heads 32-true`). A cell's name opens its "
        "details in its sweep's report; a name shared by several rows carries what differs.",
        "",
        f'<p><input id="filter" type="search" placeholder="filter the experiments" '
        f'aria-label="filter the experiments"> <span id="shown">{len(rows)}</span> of {len(rows)} experiments</p>',
        "",
        '<div id="cells">',
        "",
        *table(head, rows, align=True),
        "",
        "</div>",
        "",
    ]
    return "\n".join(lines)


COMPARE_JS = Path(__file__).resolve().parents[2] / "reporting" / "compare.js"
LOG_AXES = ("model.heads", "model.d_k", "model.d_v", "model.kv_heads", "module.peak_lr", "model.d_model", "model.d_ff")


def run_curve(root: Path | None, run_id: str) -> list[list[float]]:
    """A run's val BLEU (greedy) at each validation, from the metrics CSV it wrote ([] where there is none)."""
    if root is None:
        return []
    path = metrics_file(root / run_id)
    if path is None:
        return []
    points = []
    with open_text(path) as f:
        for row in csv.DictReader(f):
            try:
                points.append([int(float(row["step"])), round(float(row["val/bleu"]), 2)])
            except (KeyError, TypeError, ValueError):
                continue  # a row of another metric
    return points


def compare_data(records: list[dict], asks: dict[str, str], root: Path | None = None) -> dict:
    """The parallel-coordinates view's data: one row per experiment (report_index.experiments), an axis per
    setting that differs between them (numbers on a log2 or linear scale, words as categories), then test BLEU
    and PPL (means over seeds)."""
    rows = report_index.experiments(records)
    keys = [k for k in report_index.columns(rows) if len({json.dumps(r["settings"].get(k)) for r in rows}) > 1]
    axes = []
    for k in keys:
        values = [r["settings"].get(k) for r in rows if r["settings"].get(k) is not None]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        kind = ("log" if k in LOG_AXES and min(values) > 0 else "linear") if numeric else "category"
        name = report_index.header(k)
        axes.append(
            {"name": name, "kind": kind, "definition": report_index.definition(name), "format": k == "module.peak_lr"}
        )
    axes += [
        {"name": "BLEU", "kind": "linear", "definition": report_index.definition("BLEU"), "format": False},
        {"name": "PPL", "kind": "log", "definition": report_index.definition("PPL"), "format": False},
    ]

    def mean(xs):
        xs = [x for x in xs if x is not None]
        return round(sum(xs) / len(xs), 2) if xs else None

    out = []
    for row, name in zip(rows, report_index.distinguished(rows, report_index.columns(rows))):
        settings = [row["settings"].get(k) for k in keys]
        settings = [
            v if v is None or isinstance(v, (int, float)) and not isinstance(v, bool) else str(v) for v in settings
        ]
        bleu, ppl = mean([r["test_bleu"] for r in row["runs"]]), mean([r["test_ppl"] for r in row["runs"]])
        _, page, anchor, _ = row["where"][row["named_in"]]
        asked = sorted({asks[sweep] for sweep, *_ in row["where"] if sweep in asks}) or ["no question"]
        out.append(
            {
                "name": name,
                "question": asked[0],
                "href": f"{Path(page).with_suffix('.html').as_posix()}#{anchor}",
                "values": [*settings, bleu, ppl],
                "bleu": bleu,
                "ppl": ppl,
                "curves": [{"seed": r["seed"], "points": run_curve(root, r["id"])} for r in row["runs"]],
            }
        )
    return {"axes": axes, "rows": out}


def compare_page(out_dir: Path, records: list[dict], asks: dict[str, str], root: Path | None = None) -> Path:
    """compare.html (and its twin): every experiment in parallel coordinates, brushable, drawn by compare.js,
    one local file copied beside the pages (no network, no library)."""
    data = json.dumps(compare_data(records, asks, root), separators=(",", ":")).replace("<", "\\u003c")
    md = with_back_link(
        "\n".join(
            [
                "# Every experiment in parallel coordinates",
                "",
                "One line per experiment (the rows of the index's table), from each setting that differs to its "
                "test BLEU and PPL (means over seeds), coloured by question. Drag along an axis to keep the lines "
                "in that range (brushes on several axes combine); double-click the axis to clear it. A name's "
                "link opens its cell. Hover an axis's name for its definition. (GitHub shows this page's text "
                "only: open reports/compare.html in a browser.)",
                "",
                '<p id="pc-legend"></p>',
                "",
                '<div id="pc"></div>',
                "",
                '<p id="pc-count"></p>',
                "",
                "The kept experiments, best BLEU first (the first 40); tick one to draw its runs' learning curves "
                "(val BLEU, greedy, at each validation; one line per seed) below the list.",
                "",
                '<ol id="pc-list"></ol>',
                "",
                '<div id="pc-curves"></div>',
                "",
                f'<script type="application/json" id="pc-data">{data}</script>',
                "",
                '<script src="compare.js"></script>',
                "",
            ]
        )
    )
    atomic_write(out_dir / "compare.js", COMPARE_JS.read_text())
    md = with_footer(md, __spec__.name)
    atomic_write(out_dir / "compare.md", md)
    atomic_write(out_dir / "compare.html", page("every experiment in parallel coordinates", md))
    return out_dir / "compare.html"


def write_index(out_dir: Path, root: Path | None = None, questions: list[dict] | None = None) -> list[Path]:
    """index.md and index.html in out_dir, and the prune reports' pages; the sweeps of `root` without
    a report are named. questions: sweeps/_questions.yaml, loaded (read here when None)."""
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
    md = index_markdown(records, prunes, out_dir, unreported, views, questions)
    md = with_footer(md, __spec__.name)
    atomic_write(out_dir / "index.md", md)
    atomic_write(out_dir / "index.html", page("headsweep reports", md))
    return [out_dir / "index.md", out_dir / "index.html", compare, *(p for p, _ in prunes), *(p for p, *_ in views)]
