"""Markdown for every report (a sweep's, the analysis of a model, the index): tables, figures with
captions, collapsible blocks. Figures and collapsible blocks are raw HTML inside the markdown, which
CommonMark (and so GitHub and markdown-it) passes through: a caption and a <details> have no markdown
syntax of their own."""

from __future__ import annotations

import html
import re


def cell_text(value) -> str:
    """A value as a table cell: a pipe would end the cell, a newline the row."""
    return str(value).replace("|", "\\|").replace("\n", " ")


NUMBER = re.compile(r"^(<=? )?[+-]?\d[\d.]*%?( ± [\d.]+%?)?\*?$|^—$")  # a number (± sd), a bound, a dash for none


INDEX = "index.md"  # the markdown twin: a page's HTML gets index.html (reporting.html.page)
GLOSSARY = "glossary.md"  # beside the index: the words the pages use in a sense of their own (docs/glossary.md)
BACK = "[← all reports]("


def with_back_link(markdown: str, index: str = INDEX) -> str:
    """A view's markdown with a link back to the index of every report, and to the glossary beside it, on its
    first line (an older first line, linking back only, replaced)."""
    glossary = index[: -len(INDEX)] + GLOSSARY if index.endswith(INDEX) else GLOSSARY
    link = f"{BACK}{index}) · [glossary: the words these pages use]({glossary})"
    if markdown.startswith(BACK):
        markdown = markdown.split("\n", 1)[1].lstrip("\n") if "\n" in markdown else ""
    return f"{link}\n\n{markdown}"


FOOTER = "*written by `"


def with_footer(markdown: str, module: str) -> str:
    """A page's markdown ending with the module that wrote it (`__spec__.name`, which stays the module's dotted
    name under `python -m`), so that a reader who wants to change a page knows where to look; a footer already
    there (the page written again) replaced."""
    body = markdown.split(f"\n---\n\n{FOOTER}", 1)[0].rstrip("\n")
    return f"{body}\n\n---\n\n{FOOTER}{module}`*\n"


def first_heading(markdown: str, default: str) -> str:
    return next((line.lstrip("# ").strip() for line in markdown.splitlines() if line.startswith("# ")), default)


def fmt_p(p: float | None, bound: bool = False) -> str:
    """A p-value to 3 decimals, "< 0.001" below what 3 decimals show (never "0.000"); `bound`: the
    bootstrap's floor (no resample favoured the other side), so at most this."""
    return "—" if p is None else f"<= {p:.3f}" if bound else "< 0.001" if p < 0.0005 else f"{p:.3f}"


def p_words(p: float, bound: bool = False) -> str:
    """ "p = 0.012", "p < 0.001", "p <= 0.002": a p-value in a sentence."""
    text = fmt_p(p, bound)
    return f"p {text}" if text[0] in "<>" else f"p = {text}"


def table(header: list[str], rows: list[list], align: bool = False) -> list[str]:
    """A pipe table, one line per row; any value is written with str(). `align`: numbers to the right,
    text to the left (a column is numbers when every cell is one, or a dash)."""
    rule = ["---"] * len(header)
    if align:
        rule = ["---:" if rows and all(NUMBER.match(str(r[i])) for r in rows) else ":---" for i in range(len(header))]
    return [
        "| " + " | ".join(cell_text(c) for c in header) + " |",
        "|" + "".join(f"{r}|" for r in rule),
        *["| " + " | ".join(cell_text(c) for c in row) + " |" for row in rows],
    ]


def figure(src: str, caption: str, alt: str | None = None) -> str:
    """An image with its caption, on one line (an HTML block ends at the next blank line)."""
    alt = alt or caption
    return (
        f'<figure><img src="{html.escape(src)}" alt="{html.escape(alt)}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def details(summary: str, body: list[str], anchor: str | None = None) -> list[str]:
    """A collapsible block around markdown (the blank lines let the markdown inside render as markdown);
    `anchor` is its id, for links such as page.html#anchor."""
    opening = f'<details id="{html.escape(anchor)}">' if anchor else "<details>"
    return [f"{opening}<summary>{html.escape(summary)}</summary>", "", *body, "", "</details>", ""]
