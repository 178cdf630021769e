"""Table 3 as the paper lays it out, every cell beside the paper's, under the earlier protocol and the new start:
`make table3-report`.

    python -m headsweep.reports.pages.table3 [--root results] [--out reports] [--paper CSV] [--suffix _h100]
        [--readme README.md]

Writes reports/table3.json (every verdict, computed once: table3_record, by headsweep.reports.pages.verdicts's
rule), then renders from it reports/table3.md, .html and table3.png (table3_page) and the index's and README's
answers (reports/index.*, README.md's answers block: questions.answer_text); with --suffix, table3_<card>.*
alone. Reads only what runs wrote (results/<sweep>/, the sweeps of headsweep.sweeps.table3.ROWS: `<sweep>` for
the earlier protocol at unit gain, `<sweep>_start` for the new start) and the paper's Table 3 (a CSV; default the
one shipped with the package, the same file as ../shared/paper/vaswani2017_table3.csv). A run of another protocol
in a row's sweeps is named and left out, never mixed in. Stuck runs: report_stuck's one rule, as every sweep page
flags them (summary.early_pool).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from headsweep.data.files import atomic_write
from headsweep.reporting.html import page
from headsweep.reporting.markdown import with_back_link, with_footer
from headsweep.reports.pages.table3_page import markdown, plot
from headsweep.reports.pages.table3_paper import PAPER_CSV, read_paper
from headsweep.reports.pages.table3_record import record
from headsweep.reports.pages.table3_rows import PROTOCOLS, rows
from headsweep.reports.sweep.cells import ReportError


def build(root: Path, paper: list[dict], suffix: str = "", pool: dict | None = None) -> dict:
    """The record (reports/table3.json's content) of every row under each protocol. pool: report.early_pool(root)
    where the caller has it (the stuck threshold and each run's one reference)."""
    from headsweep.reports.sweep.summary import early_pool

    if not root.is_dir():
        raise ReportError(f"no results at {root}: pass --root DIR (the folder holding results/<sweep>/)")
    pool = early_pool(root) if pool is None else pool
    return record({p: rows(root, p, pool, suffix) for p in PROTOCOLS}, paper, root)


def write(
    root: Path,
    out: Path,
    paper_csv: Path = PAPER_CSV,
    suffix: str = "",
    pool: dict | None = None,
    n_samples: int | None = None,  # noqa: ARG001  (the sweep pages' bootstrap: no verdict here rests on it)
) -> list[Path]:
    """reports/table3.json, then the page rendered from it (.md, .html, .png)."""
    rec = build(root, read_paper(paper_csv), suffix, pool)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / f"table3{suffix}.json"
    atomic_write(json_path, json.dumps(rec, indent=1, ensure_ascii=False) + "\n")
    return [json_path, *render(json.loads(json_path.read_text()), out, suffix)]


def render(rec: dict, out: Path, suffix: str = "") -> list[Path]:
    """The page from the record as written (the json's own content, so the page cannot say otherwise); a card's
    rows (suffix '_h100') under their own names, table3_h100.*."""
    png = plot(rec, out / f"table3{suffix}.png")
    md = with_footer(with_back_link(markdown(rec, png)), __spec__.name)
    md_path, html_path = out / f"table3{suffix}.md", out / f"table3{suffix}.html"
    atomic_write(md_path, md)
    atomic_write(html_path, page("Table 3, every row, beside the paper", md))
    return [md_path, html_path, png]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path("results"))
    parser.add_argument("--out", type=Path, default=Path("reports"))
    parser.add_argument("--paper", type=Path, default=PAPER_CSV, help="the paper's Table 3 as CSV")
    parser.add_argument("--suffix", default="", help="the rows' sweeps under a GPU's name, e.g. _h100")
    parser.add_argument("--readme", type=Path, default=None, help="README.md whose answers block is rendered again")
    parser.add_argument("--samples", type=int, default=None, help=argparse.SUPPRESS)  # accepted, unused
    args = parser.parse_args(argv)
    try:
        from headsweep.reports.site import questions as Q
        from headsweep.reports.site.index import write_index

        questions = Q.load(root=args.root)  # checked before any page is written
        paths = write(args.root, args.out, args.paper, args.suffix)
        # the index puts each page's question block back, this page's too (a card's page is evidence as well)
        paths += write_index(args.out, args.root, questions)
        # the answers render the CPU rows' record (table3.json); a card's record changes none of them
        if not args.suffix and args.readme is not None and Q.write_readme(args.readme, questions):
            paths.append(args.readme)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
