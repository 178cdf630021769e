"""reports/glossary.html and its twin: the words the pages use in a sense of their own (card, edge, stuck, start,
...), rendered from one source, docs/glossary.md, so the docs and the site cannot define a word two ways. Every
page links it from its first line (reporting.markdown.with_back_link)."""

from __future__ import annotations

import re
from pathlib import Path

from headsweep.config import ROOT
from headsweep.data.files import atomic_write
from headsweep.reporting.html import page
from headsweep.reporting.markdown import BACK, GLOSSARY, INDEX, first_heading
from headsweep.reports.sweep.cells import ReportError

SOURCE = ROOT / "docs" / "glossary.md"
RELATIVE = re.compile(r"\]\((?![a-z]+:|#)([^)\s]+)\)")  # a link to another file (the docs' own relative links)


def glossary_markdown(source: Path = SOURCE) -> str:
    """The glossary's markdown as the site shows it: a link back to the index first; the source may link only
    within itself (a link to another docs file would open nothing under reports/)."""
    try:
        text = source.read_text()
    except OSError as e:
        raise ReportError(f"{source}: cannot read the glossary ({e.strerror}); it is the site's one source") from None
    if found := RELATIVE.search(text):
        raise ReportError(f"{source}: links {found.group(1)}, which the site's copy cannot open; link only #terms")
    return f"{BACK}{INDEX})\n\n{text}"


def write_glossary(out_dir: Path, source: Path = SOURCE) -> Path:
    """glossary.md and glossary.html in out_dir, rendered from source; the page's path."""
    md = glossary_markdown(source)
    atomic_write(out_dir / GLOSSARY, md)
    atomic_write(out_dir / "glossary.html", page(first_heading(md, "Glossary").lower(), md))
    return out_dir / "glossary.html"
