"""A Table 3 question's verdict line, read from reports/table3.json alone: what the index, README's answers and
W&B's reports print after a Table 3 answer. Apart from table3_record (which writes the record) so that the pages
that render answers need not import the page builders."""

from __future__ import annotations

from headsweep.reports.pages import verdicts as V
from headsweep.sweeps.table3 import ROWS

NOT_RUN = "not run yet"


def counts_text(cells: list[dict], names: bool = True) -> str:
    """'agrees 1 (d_k 8); inconclusive 2 (h 1, h 4)': verdicts in VERDICTS order, each with its cells."""
    parts = []
    for word in V.VERDICTS:
        which = [c["cell"] for c in cells if c["verdict"] == word]
        if which:
            parts.append(f"{word} {len(which)}" + (f" ({', '.join(which)})" if names else ""))
    waiting = [c for c in cells if c["verdict"] is None]
    if waiting and not parts:
        return NOT_RUN
    if waiting:
        parts.append(f"{NOT_RUN} {len(waiting)}")
    return ("; " if names else ", ").join(parts) or NOT_RUN


def answer_line(record: dict, rows: str) -> str:
    """A question's verdict line from reports/table3.json: rows 'all' (counts per row) or one row letter (each
    cell by name), under each protocol. The only place a Table 3 verdict word reaches an answer."""
    parts = []
    for protocol, p in record["protocols"].items():
        mine = [c for c in record["cells"] if c["protocol"] == protocol and c.get("paper_index") is not None]
        if rows == "all" and all(c["verdict"] is None for c in mine):
            text = NOT_RUN
        elif rows == "all":
            text = "; ".join(f"{r}: {counts_text([c for c in mine if c['row'] == r], names=False)}" for r in ROWS)
        else:
            text = counts_text([c for c in mine if c["row"] == rows])
        name = p.get("brief") or p["title"]
        parts.append(f"{name[0].upper()}{name[1:]}: {text}")
    return "Verdicts (reports/table3.json). " + ". ".join(parts) + "."
