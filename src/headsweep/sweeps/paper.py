"""Vaswani et al. 2017, Table 3, shipped with the package (resources/vaswani2017_table3.csv)."""

from __future__ import annotations

import csv
from importlib.resources import files

from headsweep.identity import TABLE3_KEYS  # the columns as config keys: cells are named by them

INT_COLUMNS = ("N", "d_model", "d_ff", "h", "d_k", "d_v", "train_steps")
FLOAT_COLUMNS = ("P_drop", "eps_ls", "dev_ppl", "dev_bleu", "params_M")


def table3() -> list[dict]:
    """Every row of Table 3 as a dict; empty cells (no figure in the paper) are None."""
    text = (files("headsweep") / "resources" / "vaswani2017_table3.csv").read_text()
    rows = []
    for row in csv.DictReader(text.splitlines()):
        for key in INT_COLUMNS:
            row[key] = int(row[key])
        for key in FLOAT_COLUMNS:
            row[key] = float(row[key]) if row[key] else None
        rows.append(row)
    return rows


def model_overrides(row: dict) -> dict:
    """The model settings of a Table 3 row, as keys of conf/model."""
    out = {key.split(".", 1)[1]: row[column] for key, column, _ in TABLE3_KEYS if key.startswith("model.")}
    out["positions"] = "learned" if row["pos"] == "learned" else "sinusoidal"
    return out
