"""Table 3's page, the paper's side: its rows from the CSV, each of our cells matched to the paper's cell with the
same settings (sizes relative to each base: our d_model 128 at 256 is the paper's 256 at 512), the paper's cells
none of ours matches, and a cell's short name ('N 4', 'P_drop 0.2'). Used by headsweep.reports.pages.table3."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from headsweep.reports.sweep.cells import ReportError
from headsweep.reports.sweep.summary import SIZES, paper_row, settings
from headsweep.sweeps.paper import FLOAT_COLUMNS, INT_COLUMNS

PAPER_CSV = Path(__file__).resolve().parents[2] / "resources" / "vaswani2017_table3.csv"
SETTING_COLUMNS = ("N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls", "pos")


def read_paper(path: Path) -> list[dict]:
    """The paper's Table 3 rows from a CSV (headsweep/resources/vaswani2017_table3.csv's columns)."""
    if not Path(path).is_file():
        raise ReportError(f"paper CSV {path} not found: pass --paper with Vaswani et al.'s Table 3 as CSV")
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                for key in INT_COLUMNS:
                    row[key] = int(row[key])
                for key in FLOAT_COLUMNS:
                    row[key] = float(row[key]) if row[key] else None
            except (KeyError, TypeError, ValueError) as e:
                raise ReportError(f"paper CSV {path}: not Table 3's columns ({type(e).__name__}: {e})") from None
            rows.append(row)
    if not any(r["row"] == "base" for r in rows):
        raise ReportError(f"paper CSV {path}: no row named base")
    return rows


def paper_base(paper: list[dict]) -> dict:
    return next(r for r in paper if r["row"] == "base")


def paper_cells(paper: list[dict], row: str) -> list[dict]:
    return [p for p in paper if p["row"] == row]


def match(ours: dict, base: dict, paper: list[dict]) -> tuple[dict | None, float | None, float | None]:
    """(the paper's cell with our cell's settings, its Δ dev BLEU and Δ dev PPL against its base); Nones where
    the paper has no such cell (or it is the paper's base)."""
    p = paper_row(ours, base, paper)
    b = paper_base(paper)
    if p is None or p is b:
        return p, None, None
    return p, p["dev_bleu"] - b["dev_bleu"], p["dev_ppl"] - b["dev_ppl"]


def ours_of(p: dict, paper: list[dict], base: dict) -> dict:
    """A paper cell's Table 3 columns in our units: sizes scaled by our base over the paper's (its N 2 at 6 is
    our N 1 at 3), every other setting as printed."""
    b = paper_base(paper)
    out = {}
    for k in SETTING_COLUMNS:
        v = p[k] * base[k] / b[k] if k in SIZES else p[k]
        out[k] = int(round(v)) if k in SIZES else v
    return out


def short_name(ours: dict, ref: dict) -> str:
    """'h 16', 'N 4', 'P_drop 0.2', 'pos learned': where a cell differs from its base, d_k and d_v left out
    where they follow h or d_model (as row A's and C's do)."""
    keys = [k for k in SETTING_COLUMNS if ours[k] != ref[k]]
    if "h" in keys or "d_model" in keys:
        keys = [k for k in keys if k not in ("d_k", "d_v")]
    return ", ".join(f"{k} {ours[k]:g}" if isinstance(ours[k], float) else f"{k} {ours[k]}" for k in keys) or "base"


def run_settings(run) -> dict:
    return settings(run.flat)


def f(x, fmt="{:.2f}", none="—") -> str:
    return none if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def setting_strings(ours: dict, ref: dict | None) -> list[str]:
    """Table 3's layout: a setting is printed where it differs from `ref` (every one where ref is None)."""
    out = []
    for k in SETTING_COLUMNS:
        v = ours[k]
        out.append("" if ref is not None and ref[k] == v else f"{v:g}" if isinstance(v, float) else str(v))
    return out
