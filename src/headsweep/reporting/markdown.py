"""Markdown for every report (a sweep's, the analysis of a model, the index): tables, figures with
captions, collapsible blocks. Figures and collapsible blocks are raw HTML inside the markdown, which
CommonMark (and so GitHub and markdown-it) passes through: a caption and a <details> have no markdown
syntax of their own."""

from __future__ import annotations

import html


def cell_text(value) -> str:
    """A value as a table cell: a pipe would end the cell, a newline the row."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(header: list[str], rows: list[list]) -> list[str]:
    """A pipe table, one line per row; any value is written with str()."""
    return ["| " + " | ".join(cell_text(c) for c in header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(cell_text(c) for c in row) + " |" for row in rows]]


def figure(src: str, caption: str, alt: str | None = None) -> str:
    """An image with its caption, on one line (an HTML block ends at the next blank line)."""
    alt = alt or caption
    return (f'<figure><img src="{html.escape(src)}" alt="{html.escape(alt)}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def details(summary: str, body: list[str]) -> list[str]:
    """A collapsible block around markdown: the blank lines let the markdown inside render as markdown."""
    return [f"<details><summary>{html.escape(summary)}</summary>", "", *body, "", "</details>", ""]
