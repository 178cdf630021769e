"""Vaswani et al. 2017, Table 3, shipped with the package (resources/vaswani2017_table3.csv)."""

from __future__ import annotations

import csv
from importlib.resources import files

# Table 3's columns as config keys: (config key, Table 3 column, short name in run and cell names).
TABLE3_KEYS = (
    ("model.n_layers", "N", "N"),
    ("model.d_model", "d_model", "dm"),
    ("model.d_ff", "d_ff", "ff"),
    ("model.heads", "h", "h"),
    ("model.d_k", "d_k", "dk"),
    ("model.d_v", "d_v", "dv"),
    ("model.dropout", "P_drop", "drop"),
    ("module.label_smoothing", "eps_ls", "ls"),
    ("model.positions", "pos", "pos"),
)
COLUMNS = {key: column for key, column, _ in TABLE3_KEYS}
ALIASES = {key: alias for key, _, alias in TABLE3_KEYS}
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
