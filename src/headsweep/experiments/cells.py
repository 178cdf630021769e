"""The finished runs of a sweep, grouped into grid cells (seeds pooled): what `make report` tabulates.
Reads only what runs wrote: results.json, and the metrics CSV for learning curves."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from headsweep.experiments.specs import flatten_config, follows_heads
from headsweep.experiments.paper import COLUMNS
from headsweep.training.runs import RESULTS, read_results


class ReportError(ValueError):
    """Nothing to report, or unreadable run files; the one-line message says what to do."""


@dataclass
class Run:
    dir: Path
    results: dict
    flat: dict                # the config's leaf values by dotted key (d_k/d_v as the model uses them)
    cell: str
    seed: int
    base: bool


@dataclass
class Cell:
    label: str
    runs: list[Run]
    row: dict = field(default_factory=dict)  # the report's numbers, filled by summarize()

    @property
    def base(self) -> bool:
        return any(r.base for r in self.runs)

    def values(self, metric: str) -> list[float]:
        return [r.results["metrics"][metric] for r in self.runs if metric in r.results["metrics"]]


def load_runs(sweep_dir: Path) -> tuple[list[Run], list[tuple[Path, str]]]:
    """The complete runs (in name order) and the others, each with why it is not complete."""
    runs, unfinished = [], []
    for d in sorted(p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            results = read_results(d)
        except (OSError, json.JSONDecodeError) as e:
            unfinished.append((d, f"unreadable {RESULTS}: {e}"))
            continue
        if results is None:
            if (d / ".hydra").is_dir():  # a job directory; anything else in the sweep dir is not ours
                unfinished.append((d, f"no {RESULTS} (running, killed or crashed)"))
            continue
        if results.get("status") != "complete":
            unfinished.append((d, results.get("error") or f"status {results.get('status')!r}"))
            continue
        cfg = results["config"]
        tags = cfg.get("tags") or []
        cell = next((t[len("cell-"):] for t in tags if t.startswith("cell-")), None)
        if cell is None:  # not from `make sweep`: strip the seed from the name, h8-dk32-dv32-s1 -> h8-dk32-dv32
            name = results.get("run_name") or d.name
            cell = name.rsplit("-s", 1)[0]
        runs.append(Run(d, results, flatten_config(OmegaConf.create(cfg)), cell, cfg["seed"], "base" in tags))
    return runs, unfinished


# Settings that change how a run is recorded, not what it trains (checkpoint cadence, loggers): a cell
# whose runs were recorded differently is still the same cell, and gets no column for it.
BOOKKEEPING = ("module.model.", "callbacks.", "logger.")


def varied_keys(cells: list[Cell]) -> list[str]:
    """Config keys that differ between cells and are constant within each (so not seeds), leaving out
    per-run paths (a value naming the run's directory), module.model (a copy of model) and BOOKKEEPING."""
    keys = []
    for k in cells[0].runs[0].flat:
        if k.startswith(BOOKKEEPING) or any(r.dir.name in str(r.flat.get(k)) for c in cells for r in c.runs) \
                or follows_heads(k, [r.flat for c in cells for r in c.runs]):
            continue
        per_cell = [{repr(r.flat.get(k)) for r in c.runs} for c in cells]
        if all(len(v) == 1 for v in per_cell) and len(set.union(*per_cell)) > 1:
            keys.append(k)
    order = list(COLUMNS)
    return sorted(keys, key=lambda k: order.index(k) if k in order else len(order))


def group_cells(runs: list[Run]) -> list[Cell]:
    """One cell per label, the base first, then in the order of the varied settings."""
    by_label: dict[str, list[Run]] = {}
    for r in runs:
        by_label.setdefault(r.cell, []).append(r)
    cells = [Cell(label, sorted(rs, key=lambda r: r.seed)) for label, rs in by_label.items()]
    if len(cells) > 1:
        keys = varied_keys(cells)
        sort_value = lambda v: (isinstance(v, str), v if not isinstance(v, tuple) else str(v))  # noqa: E731
        cells.sort(key=lambda c: (not c.base, [sort_value(c.runs[0].flat[k]) for k in keys]))
    return cells


def learning_curve(run: Run) -> dict[int, dict[str, float]]:
    """{step: {"val/loss": .., "val/bleu": ..}} from the run's metrics CSV (results/ exports it as
    metrics.csv, a run directory has csv/metrics.csv); empty if there is none."""
    path = next((p for p in (run.dir / "metrics.csv", run.dir / "csv" / "metrics.csv") if p.is_file()), None)
    curve: dict[int, dict[str, float]] = {}
    if path is None:
        return curve
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            for key in ("val/loss", "val/bleu"):
                if row.get(key) and row.get("step"):
                    curve.setdefault(int(row["step"]) + 1, {})[key] = float(row[key])  # logged at step - 1
    return curve
