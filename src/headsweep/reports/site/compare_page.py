"""compare.html and its twin: every experiment of the index's table (report_index.experiments) in parallel
coordinates, one axis per setting that differs, then test BLEU and PPL; brushable, drawn by compare.js (one local
file copied beside the pages: no network, no library)."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

from headsweep import reporting
from headsweep.data.files import atomic_write
from headsweep.reporting.html import page
from headsweep.reporting.markdown import with_back_link, with_footer
from headsweep.reports.site import experiments as report_index
from headsweep.store.pack import metrics_file, open_text

COMPARE_JS = Path(reporting.__file__).resolve().parent / "compare.js"  # beside the page code, wherever this module is
MAX_SHOWN = 10  # axes drawn before the reader picks others: more crowd the labels of a 1,200 px plot
# One colour per question, as many as there are questions: d3's ten, ten more of other hues, then golden-angle hues
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#393b79", "#e7ba52", "#ad494a", "#637939", "#a55194", "#6baed6", "#fd8d3c", "#74c476", "#9e9ac8", "#000000",
)  # fmt: skip
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


def colours(questions: list[str]) -> dict[str, str]:
    """A colour per question, no two alike (PALETTE, then hues 137.5 degrees apart)."""
    hue = lambda i: f"hsl({(i * 137.508) % 360:.0f},60%,38%)"  # noqa: E731
    return {q: PALETTE[i] if i < len(PALETTE) else hue(i) for i, q in enumerate(questions)}


def first_shown(keys: list[str], rows: list[dict], most: int = MAX_SHOWN - 2) -> set[str]:
    """The settings drawn before the reader picks (BLEU and PPL always are): those that set the most experiments
    apart from the setting's most common value, h, d_k, d_v first among equals."""

    def apart(k: str) -> int:
        values = Counter(json.dumps(r["settings"].get(k)) for r in rows)
        return len(rows) - values.most_common(1)[0][1]

    return set(sorted(keys, key=lambda k: (-apart(k), keys.index(k)))[:most])


def compare_data(records: list[dict], asks: dict[str, str], root: Path | None = None) -> dict:
    """The parallel-coordinates view's data: one row per experiment (report_index.experiments), an axis per
    setting that differs between them (numbers on a log2 or linear scale, words as categories), then test BLEU
    and PPL (means over seeds); `shown` on the MAX_SHOWN axes drawn first (the page's chooser draws the others),
    and a colour per question."""
    rows = report_index.experiments(records)
    keys = [k for k in report_index.columns(rows) if len({json.dumps(r["settings"].get(k)) for r in rows}) > 1]
    shown = first_shown(keys, rows)
    axes = []
    for k in keys:
        values = [r["settings"].get(k) for r in rows if r["settings"].get(k) is not None]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        kind = ("log" if k in LOG_AXES and min(values) > 0 else "linear") if numeric else "category"
        name = report_index.header(k)
        definition = report_index.definition(name)
        axes.append({"name": name, "kind": kind, "definition": definition, "format": k == "module.peak_lr"})
        axes[-1]["shown"] = k in shown
    axes += [
        {"name": "BLEU", "kind": "linear", "definition": report_index.definition("BLEU"), "format": False},
        {"name": "PPL", "kind": "log", "definition": report_index.definition("PPL"), "format": False},
    ]
    axes[-2]["shown"] = axes[-1]["shown"] = True

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
    return {"axes": axes, "rows": out, "colours": colours(sorted({r["question"] for r in out}))}


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
                "in that range (brushes on several axes combine; the lines and learning curves left out turn "
                "grey); double-click the axis to clear it. A name's link opens its cell. Hover an axis's name for "
                "its definition. (GitHub shows this page's text only: open reports/compare.html in a browser.)",
                "",
                f"The axes drawn: the {MAX_SHOWN} or fewer that set the most experiments apart, BLEU and PPL always; "
                "tick a box to draw another setting, untick one to hide it.",
                "",
                '<p id="pc-axes"></p>',
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
