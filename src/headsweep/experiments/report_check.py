"""Look at the report site as a reader does: every page of a reports folder opened in headless Chromium
(Debian's `chromium`, driven by Playwright) at 1,280 x 900, then checked. One line per problem.

    python -m headsweep.experiments.report_check [reports] [--screenshots docs/img]

Checks: every image loads; no <pre> holds markdown (a heading, bold, an image or a pipe table left
unrendered); nothing is wider than the window (the page, or a table that would scroll); every image
has a caption. --screenshots writes a PNG of each page's first screen (index.png, <sweep>.png, ...).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

WIDTH, HEIGHT = 1280, 900

# Everything is measured in the page itself; returns the facts, the checks are below in Python.
MEASURE = """() => ({
  broken: [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.getAttribute("src")),
  uncaptioned: [...document.images].filter(i => !i.closest("figure")?.querySelector("figcaption"))
                                   .map(i => i.getAttribute("src")),
  pre: [...document.querySelectorAll("pre")].map(p => p.textContent),
  width: document.documentElement.scrollWidth,
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


def problems(facts: dict) -> list[str]:
    """What a reader would see wrong on a page, from MEASURE's facts."""
    found = [f"broken image {src}" for src in facts["broken"]]
    found += [f"image without a caption {src}" for src in facts["uncaptioned"]]
    found += [f"markdown left in a <pre>: {text.strip()[:60]!r}" for text in facts["pre"]
              if any(mark in "\n" + text for mark in MARKDOWN)]
    if facts["width"] > WIDTH:
        found.append(f"the page is {facts['width']} px wide in a {WIDTH} px window")
    found += [f"table wider than the page (it scrolls): {head!r}" for head in facts["wide_tables"]]
    return found


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
                found[path] = problems(view.evaluate(MEASURE))
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
    args = parser.parse_args(argv)
    try:
        found = check_site(args.folder, args.screenshots)
    except CheckError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
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
