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


NUMBER = re.compile(r"^(<= )?[+-]?\d[\d.]*%?( ± [\d.]+%?)?\*?$|^—$")  # a number (± sd), a bound, a dash for none


def table(header: list[str], rows: list[list], align: bool = False) -> list[str]:
    """A pipe table, one line per row; any value is written with str(). `align`: numbers to the right,
    text to the left (a column is numbers when every cell is one, or a dash)."""
    rule = ["---"] * len(header)
    if align:
        rule = ["---:" if rows and all(NUMBER.match(str(r[i])) for r in rows) else ":---" for i in range(len(header))]
    return ["| " + " | ".join(cell_text(c) for c in header) + " |", "|" + "".join(f"{r}|" for r in rule),
            *["| " + " | ".join(cell_text(c) for c in row) + " |" for row in rows]]


def figure(src: str, caption: str, alt: str | None = None) -> str:
    """An image with its caption, on one line (an HTML block ends at the next blank line)."""
    alt = alt or caption
    return (f'<figure><img src="{html.escape(src)}" alt="{html.escape(alt)}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def details(summary: str, body: list[str], anchor: str | None = None) -> list[str]:
    """A collapsible block around markdown (the blank lines let the markdown inside render as markdown);
    `anchor` is its id, for links such as page.html#anchor."""
    opening = f'<details id="{html.escape(anchor)}">' if anchor else "<details>"
    return [f"{opening}<summary>{html.escape(summary)}</summary>", "", *body, "", "</details>", ""]
