"""Look at the report site as a reader does. One line per problem; exit 1 when there is one.

    python -m headsweep.reports.site.check [reports] [--screenshots docs/img] [--no-browser]

The site, read from the HTML files (no browser needed; pure functions on what the pages hold, so each is
tested on tiny pages): every page is reachable by links from index.html and links back to it; no p-value
prints as 0.000 (in the text, or in a table column headed p...); no figure repeats a tick label on an axis
or draws two labels over each other, and no legend covers a plotted point or a filled band (a seed sd's,
a noise band) (read from the .ticks.json that reporting.plots.save_figure writes beside each PNG: a PNG
shows no ticks or boxes to a browser; a figure without one is named, not failed: an older command drew
it); every markdown twin's links open files that are there, twins rather than pages (GitHub).

Each page, opened in headless Chromium (Debian's `chromium`, driven by Playwright) at 1,280 x 900: every
image loads; no <pre> holds markdown (a heading, bold, an image or a pipe table left unrendered); nothing
is wider than the window (the page, or a table that would scroll); every image has a caption; the index
reads in three screens (at most 3 x 900 px tall: the table of every experiment has its own page).
--screenshots writes a PNG of each page's first screen (index.png, <sweep>.png, ...).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from headsweep.reporting.plots import covered, covered_bands, ticks_path

WIDTH, HEIGHT = 1280, 900
INDEX_SCREENS = 3  # the index's questions, answers and sweeps in three screens at most

# Everything is measured in the page itself; returns the facts, the checks are below in Python.
MEASURE = """() => ({
  broken: [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.getAttribute("src")),
  uncaptioned: [...document.images].filter(i => !i.closest("figure")?.querySelector("figcaption"))
                                   .map(i => i.getAttribute("src")),
  pre: [...document.querySelectorAll("pre")].map(p => p.textContent),
  width: document.documentElement.scrollWidth,
  height: document.documentElement.scrollHeight,
  wide_tables: [...document.querySelectorAll("table")].filter(t => t.scrollWidth > t.clientWidth + 1)
                                                      .map(t => t.rows[0].textContent.trim().slice(0, 60)),
})"""
MARKDOWN = ("\n#", "**", "![", "|---", "\n- ")


class CheckError(RuntimeError):
    """No browser to check with; the message says what to install."""


def browser_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if path is None:
        raise CheckError("no chromium on PATH: `apt-get install chromium` (Debian), then run this again")
    return path


def problems(facts: dict, max_height: int | None = None) -> list[str]:
    """What a reader would see wrong on a page, from MEASURE's facts; `max_height`: the most the page may be
    tall (px, in the window's width), or None."""
    found = [f"broken image {src}" for src in facts["broken"]]
    found += [f"image without a caption {src}" for src in facts["uncaptioned"]]
    found += [
        f"markdown left in a <pre>: {text.strip()[:60]!r}"
        for text in facts["pre"]
        if any(mark in "\n" + text for mark in MARKDOWN)
    ]
    if facts["width"] > WIDTH:
        found.append(f"the page is {facts['width']} px wide in a {WIDTH} px window")
    found += [f"table wider than the page (it scrolls): {head!r}" for head in facts["wide_tables"]]
    if max_height is not None and facts.get("height", 0) > max_height:
        found.append(
            f"the page is {facts['height']} px tall at {WIDTH} px wide, over {max_height} "
            f"({max_height // HEIGHT} screens): move a long part to a page of its own"
        )
    return found


# ----------------------------------------------------------------------------- the site, from the files


class PageFacts(HTMLParser):
    """What a page holds: its links, its images, its text (no script or style) and its tables' cells."""

    def __init__(self):
        super().__init__()
        self.links, self.images, self.text, self.tables = [], [], [], []
        self._skip = 0
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        elif tag == "img" and attrs.get("src"):
            self.images.append(attrs["src"])
        elif tag in ("script", "style"):
            self._skip += 1
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self.tables and self.tables[-1]:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip = max(0, self._skip - 1)
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag in ("p", "li", "tr", "td", "th", "h1", "h2", "h3", "div", "summary", "figcaption"):
            self.text.append("\n")

    def handle_data(self, data):
        if self._skip:
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def read_page(path: Path) -> dict:
    facts = PageFacts()
    facts.feed(path.read_text(errors="replace"))
    return {"links": facts.links, "images": facts.images, "text": "".join(facts.text), "tables": facts.tables}


def target(page: Path, href: str) -> Path | None:
    """The file a relative link of a page opens (no #anchor); None for a link elsewhere or within the page."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or not parts.path:
        return None
    return (page.parent / unquote(parts.path)).resolve()


def unreachable(pages: dict[Path, dict], index: Path) -> list[Path]:
    """The pages no chain of links from the index reaches."""
    seen, todo = {index.resolve()}, [index.resolve()]
    facts = {p.resolve(): f for p, f in pages.items()}
    while todo:
        here = todo.pop()
        for href in facts.get(here, {}).get("links", []):
            there = target(here, href)
            if there in facts and there not in seen:
                seen.add(there)
                todo.append(there)
    return [p for p in pages if p.resolve() not in seen]


def links_back(page: Path, facts: dict, index: Path) -> bool:
    return any(target(page, href) == index.resolve() for href in facts["links"])


# "p = 0.000", "p Holm <= 0.000", "(Welch p = 0.00)": a p-value of zero printed, where "< 0.001" is meant
ZERO_P = re.compile(r"\bp(?: [A-Za-z]+){0,2}:? ?(?:=|<=|≤|<)? ?0\.0+(?![0-9]*[1-9])")
ZERO_CELL = re.compile(r"^(?:=|<=|≤|<)? ?0\.0+$")


def zero_p_values(facts: dict) -> list[str]:
    """Each p-value of zero a reader would read on the page: in its words, or in a column headed p..."""
    found = [f"a p-value printed as zero: {m.group(0)!r}" for m in ZERO_P.finditer(facts["text"])]
    for rows in facts["tables"]:
        head = rows[0] if rows else []
        for i, name in enumerate(head):
            if re.match(r"p\b", name.strip()):
                found += [
                    f"a p-value printed as zero in column {name!r}: {row[i]!r}"
                    for row in rows[1:]
                    if i < len(row) and ZERO_CELL.match(row[i].strip())
                ]
    return found


def tick_problems(record: dict) -> list[str]:
    """A figure's ticks as save_figure recorded them: a label repeated on one axis, or two drawn over each
    other."""
    found = []
    for ax in record.get("axes", []):
        where = f"{record.get('figure', '?')} ({ax.get('title') or 'untitled axes'})"
        for axis in ("x", "y"):
            repeated = sorted(label for label, n in Counter(ax.get(axis, [])).items() if n > 1)
            found += [f"{where}: tick label {label!r} repeated on the {axis} axis" for label in repeated]
            found += [f"{where}: {axis} tick labels {a!r} and {b!r} overlap" for a, b in ax.get(f"{axis}_overlaps", [])]
    return found


def legend_problems(record: dict) -> list[str]:
    """A figure's legend drawn over plotted points or a filled band, a seed sd's or a noise band (save_figure
    records each legend's box, the points, the bands and the axes' box, in the PNG's pixels; a record from
    before bands were recorded has none)."""
    found = []
    for entry in record.get("legends", []):
        where = f"{record.get('figure', '?')} ({entry.get('title') or 'untitled axes'})"
        under = covered(entry["legend"], entry.get("points", []))
        if under:
            found.append(f"{where}: the legend covers {len(under)} plotted point{'s' * (len(under) > 1)}")
        bands = covered_bands(entry["legend"], entry.get("bands", []), entry.get("axes") or entry["legend"])
        if bands:
            found.append(f"{where}: the legend covers {bands} band{'s' * (bands > 1)} (a spread drawn as an area)")
    return found


def figure_problems(page: Path, facts: dict) -> tuple[list[str], list[str]]:
    """The page's figures' tick problems, and its figures with no tick record (drawn by an older command)."""
    found, unrecorded = [], []
    for src in facts["images"]:
        png = target(page, src)
        if png is None or not png.is_file():
            continue  # a broken image: the browser check names it
        record = ticks_path(png)
        if record.is_file():
            drawn = json.loads(record.read_text())
            found += tick_problems(drawn) + legend_problems(drawn)
        else:
            unrecorded.append(src)
    return found, unrecorded


MD_LINK = re.compile(r"\]\(([^)\s]+)\)|(?:src|href)=\"([^\"]+)\"")


def markdown_problems(md: Path) -> list[str]:
    """A markdown twin's links as GitHub follows them: each relative link or image opens a file beside it,
    and a link to a page opens its twin (x.md, not x.html, which GitHub shows as source)."""
    found = []
    for match in MD_LINK.finditer(md.read_text(errors="replace")):
        link = match.group(1) or match.group(2)
        there = target(md, link)
        if there is None:
            continue
        if not there.exists():
            found.append(f"a link to a file that is not there: {link}")
        elif there.suffix == ".html":
            found.append(f"a link to a page, not to its markdown twin: {link}")
    return found


def site_problems(folder: Path) -> tuple[dict[Path, list[str]], list[str]]:
    """Every .html under folder checked from its file, and every .md with a problem: {file: problems}; and
    the figures without a tick record (named, not failed)."""
    index = folder / "index.html"
    pages = {p: read_page(p) for p in sorted(folder.rglob("*.html"))}
    found: dict[Path, list[str]] = {p: [] for p in pages}
    unrecorded: list[str] = []
    if index not in pages:
        found[index] = ["no index.html: `make report` writes it"]
        return found, unrecorded
    for p in unreachable(pages, index):
        found[p].append("no chain of links from index.html reaches this page")
    for p, facts in pages.items():
        if p != index and not links_back(p, facts, index):
            found[p].append("no link back to index.html")
        found[p] += zero_p_values(facts)
        ticks, missing = figure_problems(p, facts)
        found[p] += ticks
        unrecorded += [f"{p.relative_to(folder).as_posix()}: {src}" for src in missing]
    for md in sorted(folder.rglob("*.md")):
        if issues := markdown_problems(md):
            found[md] = issues
    return found, unrecorded


# ----------------------------------------------------------------------------- each page, in Chromium


def check_site(folder: Path, screenshots: Path | None = None) -> dict[Path, list[str]]:
    """Every .html under folder, opened and measured: {page: problems}."""
    from playwright.sync_api import sync_playwright

    pages = sorted(folder.rglob("*.html"))
    found = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path(), args=["--no-sandbox"])
        try:
            view = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            for path in pages:
                view.goto(path.resolve().as_uri(), wait_until="load")
                index = path.resolve() == (folder / "index.html").resolve()
                found[path] = problems(view.evaluate(MEASURE), INDEX_SCREENS * HEIGHT if index else None)
                if screenshots is not None:
                    screenshots.mkdir(parents=True, exist_ok=True)
                    name = str(path.relative_to(folder).with_suffix("")).replace("/", "-")  # prune-x/prune
                    view.screenshot(path=str(screenshots / f"{name}.png"))
        finally:
            browser.close()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, nargs="?", default=Path("reports"), help="the reports folder")
    parser.add_argument("--screenshots", type=Path, help="write a PNG of each page's first screen here")
    parser.add_argument(
        "--no-browser",
        action="store_true",
        help="only the checks read from the files (links, p-values, ticks), no Chromium",
    )
    args = parser.parse_args(argv)
    found, unrecorded = site_problems(args.folder)
    if not args.no_browser:
        try:
            for page, issues in check_site(args.folder, args.screenshots).items():
                found.setdefault(page, []).extend(issues)
        except CheckError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    for line in unrecorded:
        print(f"note: no tick record beside this figure (drawn before save_figure wrote one; not checked): {line}")
    for page, issues in found.items():
        print(f"{page}: " + ("ok" if not issues else f"{len(issues)} problems"))
        for issue in issues:
            print(f"  {issue}")
    if not found:
        print(f"error: no .html under {args.folder}: run `make report` first", file=sys.stderr)
        return 2
    return 1 if any(found.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
