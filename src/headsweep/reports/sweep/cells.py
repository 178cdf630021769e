"""The finished runs of a sweep, grouped into grid cells (seeds pooled): what `make report` tabulates.
Reads only what runs wrote: results.json, the metrics CSV for learning curves, the test hypotheses; a run
whose files are missing or from another sweep is left out, with why."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from headsweep.identity import COLUMNS, cell_tag, default_cell, follows_heads
from headsweep.store import NOT_EXPERIMENT, RESULTS, CorruptRecord, as_seen, flatten_config, read_record
from headsweep.store.pack import hypothesis_file, metrics_file, open_text


class ReportError(ValueError):
    """Nothing to report, or unreadable run files; the one-line message says what to do."""


@dataclass
class Run:
    dir: Path
    results: dict
    flat: dict  # the config's leaf values by dotted key (d_k/d_v as the model uses them)
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


def load_runs(sweep_dir: Path, sweep: str | None = None) -> tuple[list[Run], list[tuple[Path, str]]]:
    """The usable runs (in name order) and the others, each with why it is left out: not finished, an
    unreadable or half-written results.json, a run of another sweep (when `sweep` is given), or files the
    report needs that are missing. Reads only; nothing under sweep_dir is written. A run of the store is seen
    through its view: this sweep's job name and tags for it (a run two sweeps share is one run, two views)."""
    runs, left_out = [], []
    for d in sorted(p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            record = read_record(d)
        except (OSError, CorruptRecord) as e:
            left_out.append((d, str(e).split(": ", 1)[-1] if str(e).startswith(str(d)) else str(e)))
            continue
        results = as_seen(record, sweep_dir.name, d.name) if record is not None else None
        if results is None:
            left_out.append((d, f"no {RESULTS} (running, killed or crashed)"))
            continue
        if results.get("status") != "complete":
            left_out.append((d, results.get("error") or f"status {results.get('status')!r}"))
            continue
        try:
            run = as_run(d, results)
        except (KeyError, TypeError, ValueError) as e:
            left_out.append((d, f"{RESULTS} lacks what a finished run records ({type(e).__name__}: {e})"))
            continue
        if why := problem(run, sweep):
            left_out.append((d, why))
        else:
            runs.append(run)
    return runs, left_out


def as_run(d: Path, results: dict) -> Run:
    cfg = results["config"]
    tags = cfg.get("tags") or []
    cell = cell_label(results, d.name)
    return Run(d, results, flatten_config(cfg), cell, cfg["seed"], "base" in tags)


def cell_label(results: dict, name: str) -> str:
    """A run's cell as a view shows it (`results` as store.as_seen gives it): its cell tag first (a run another
    sweep made and this one adopted keeps its old `cell` key), else the config's cell, else its name unseeded."""
    cfg = results["config"]
    return cell_tag(cfg.get("tags")) or cfg.get("cell") or default_cell(results.get("run_name") or name)


def problem(run: Run, sweep: str | None) -> str | None:
    """Why a finished run cannot be compared with the others, in a few words; None when it can."""
    # the config's sweep: a view of a shared run (as_seen) or an adopted run (adopt_run) has the new sweep's there
    theirs = run.results["config"].get("sweep") or run.results.get("sweep")
    if sweep is not None and theirs is not None and theirs != sweep:
        return f"a run of sweep '{theirs}' (the config in its {RESULTS}), not of {sweep}"
    if "test/bleu" not in run.results.get("metrics", {}):
        return f"no test/bleu among the metrics of its {RESULTS}"
    if metrics_csv(run) is None:
        return "no metrics CSV (metrics.csv, or csv/metrics.csv in a run directory): no learning curve"
    try:
        hyps = hypotheses_path(run)
    except ReportError as e:
        return str(e).split(": ", 1)[-1]
    return None if hyps.is_file() else f"its test hypotheses are missing ({hyps})"


def hypotheses_path(run: Run) -> Path:
    """The test hypotheses the run's test/bleu scores: beam, else greedy; found next to results.json if
    the run directory was moved."""
    split = run.results["config"]["data"]["test_split"]
    files = run.results.get("hypotheses", {})
    for key in (f"{split}.beam", f"{split}.greedy"):
        if key in files:
            path = Path(files[key])
            # a copy next to results.json (results/) comes first; the store keeps it gzipped (store_pack)
            beside = hypothesis_file(run.dir / "hypotheses" / path.name)
            return beside if beside.is_file() else path if path.is_absolute() else run.dir / path
    raise ReportError(f"{run.dir / RESULTS}: no test hypotheses listed for split {split}")


# Settings that change how a run is recorded, not what it trains (checkpoint cadence, loggers): a cell
# whose runs were recorded differently is still the same cell, and gets no column for it.
# threads: how a job used the machine (a 1-thread job of a 2-job sweep, or OMP_NUM_THREADS), not what it trained
# trainer.devices: which card of a GPU sweep a job had (jobs spread round-robin), not what it trained
# lr_select: where a cell's module.peak_lr came from (make sweep LR_GRID=); the rate itself is module.peak_lr
BOOKKEEPING = ("module.model.", "callbacks.", "logger.", "threads", "trainer.devices", "lr_select")


def names_the_run(run: Run, value) -> bool:
    """Whether a config value is a per-run path: it names the run's view (results/<sweep>/<job>) or the job
    it trained as, which differ for a run another sweep shares (the store shows it under this sweep's name)."""
    names = {run.dir.name, run.results.get("run_name")} - {None, ""}
    return any(n in str(value) for n in names)


def varied_keys(cells: list[Cell]) -> list[str]:
    """Config keys that differ between cells and are constant within each (so not seeds), leaving out
    per-run paths (names_the_run), module.model (a copy of model) and BOOKKEEPING."""
    keys = []
    every = set.intersection(*(set(r.flat) for c in cells for r in c.runs))
    for k in cells[0].runs[0].flat:
        # where the data come from is no setting (store.NOT_EXPERIMENT); a key that only newer runs record and
        # flatten_config has no old behaviour for is not one either (a copied older run has none of it)
        if (
            k.startswith(BOOKKEEPING)
            or ".".join(k.split(".")[:2]) in NOT_EXPERIMENT
            or k not in every
            or any(names_the_run(r, r.flat.get(k)) for c in cells for r in c.runs)
            or follows_heads(k, [r.flat for c in cells for r in c.runs])
        ):
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
        cells.sort(key=lambda c: (not c.base, [sort_value(c.runs[0].flat.get(k)) for k in keys]))
    return cells


def metrics_csv(run: Run) -> Path | None:
    """The run's metrics CSV: results/ stores it as metrics.csv.gz (store.pack), a run directory has
    csv/metrics.csv."""
    return metrics_file(run.dir)


def learning_curve(run: Run) -> dict[int, dict[str, float]]:
    """{step: {"val/loss": .., "val/bleu": ..}} from the run's metrics CSV; empty if there is none."""
    path = metrics_csv(run)
    curve: dict[int, dict[str, float]] = {}
    if path is None:
        return curve
    with open_text(path) as f:
        for row in csv.DictReader(f):
            for key in ("val/loss", "val/bleu"):
                if row.get(key) and row.get("step"):
                    curve.setdefault(int(row["step"]) + 1, {})[key] = float(row[key])  # logged at step - 1
    return curve


def val_loss_rises(run: Run) -> list[tuple[int, float, float]] | None:
    """(step, previous val/loss, val/loss) at each validation after the first where val/loss did not fall
    below the one before; [] when it fell every time, None when the metrics CSV has fewer than two
    validations (nothing to compare). A measurement for the report: training that diverges at a learning
    rate shows first as a validation loss that goes up, long before test BLEU is computed."""
    points = sorted((step, v["val/loss"]) for step, v in learning_curve(run).items() if "val/loss" in v)
    if len(points) < 2:
        return None
    return [(step, prev, loss) for (_, prev), (step, loss) in zip(points, points[1:]) if loss >= prev]
