"""The shipped runs as W&B runs: `make wandb-export` writes one offline W&B run per finished run of results/
(each run once, however many sweeps show it) into an ignored folder, and `wandb sync` then puts them in a
user's own project, to compare in W&B's dashboard.

    python -m headsweep.reports.dashboard.export [--root results] [--out wandb-export] [--project headsweep-reference]
        [--sweeps a,b]

Each W&B run carries the run's resolved config as a training run logs it (results.json's, d_k and d_v as the
model uses them, with the parameter counts and attention FLOPs: sizes.comparison_config), its final metrics
as the summary, one history row per validation (metrics.csv: val BLEU, chrF, loss, PPL at each step, and the
training loss and rate logged between), its cell as the group (a cell's seeds aggregate in the dashboard), its
cell in each sweep that shows it as config `cell_in.<sweep>` (what `make wandb-views` groups each sweep's runs
by: a shared run may be a different cell in another sweep), the question it answers (sweeps/_questions.yaml) as
the job type, and every sweep that holds it as a tag. A learning-rate grid run that a sweep also shows as its
chosen cell's seed 1 is that cell (so the cell's seeds aggregate whole), not its grid cell `<cell>-lr<v>`. Reads
results/ only, writes only under --out (emptied first, so an export is never mixed with an older one). W&B runs
offline here whatever WANDB_MODE says: nothing leaves the machine until `wandb sync`.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import sys
from pathlib import Path

from headsweep.reports.site import questions as Q
from headsweep.reports.sweep.cells import ReportError, cell_label
from headsweep.sizes import comparison_config
from headsweep.store import RESULTS, RUNS, as_seen, read_record
from headsweep.store.pack import metrics_file, open_text
from headsweep.sweeps.lr_select import GRID_PHASE


def finished_runs(root: Path, only: list[str] | None = None) -> dict[Path, dict]:
    """{run folder (resolved): {"sweeps": [...], "jobs": [...]}} for every finished run a sweep of root shows
    (results/<sweep>/<job>, a link into the store or a folder of its own), each run once."""
    found: dict[Path, dict] = {}
    if not root.is_dir():
        raise ReportError(f"no results under {root}: nothing to export")
    for sweep_dir in sorted(d for d in root.iterdir() if d.is_dir() and d.name != RUNS):
        if only and sweep_dir.name not in only:
            continue
        for job in sorted(sweep_dir.iterdir()):
            path = job / RESULTS
            if not job.is_dir() or not path.is_file():
                continue
            try:
                status = json.loads(path.read_text()).get("status")
            except ValueError:
                continue  # half-written: the report names it; nothing to export
            if status != "complete":
                continue
            entry = found.setdefault(job.resolve(), {"sweeps": [], "jobs": []})
            entry["sweeps"].append(sweep_dir.name)
            entry["jobs"].append(f"{sweep_dir.name}/{job.name}")
    if only and not found:
        raise ReportError(f"no finished runs of {', '.join(only)} under {root}")
    return found


def number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def history(run_dir: Path) -> list[tuple[int, dict]]:
    """(step, metrics) of each row of the run's metrics.csv that holds a number, rows of one step merged, in
    step order: a validation's val/* row and the train/* rows logged between."""
    path = metrics_file(run_dir)
    if path is None:
        found = list(run_dir.glob("csv/**/metrics.csv"))
        if not found:
            return []
        path = found[0]
    steps: dict[int, dict] = {}
    with open_text(path) as f:
        for row in csv.DictReader(f):
            step = number(row.get("step") or "")
            values = {
                k: v
                for k, v in ((k, number(t or "")) for k, t in row.items() if k not in ("step", "epoch"))
                if v is not None and not k.startswith(("params/", "test/"))
            }
            if step is not None and values:
                steps.setdefault(int(step), {}).update(values)
    return sorted(steps.items())


def view_cells(run_dir: Path, jobs: list[str]) -> tuple[str, dict[str, str]]:
    """The run's group and {sweep: its cell there} over its views `jobs` (sweep/job), each as the sweep's
    report sees it (cells.cell_label of store.as_seen). Where a sweep shows the run twice, as a learning-rate
    grid run and as its chosen cell's seed, the chosen cell wins: the grid's `<cell>-lr<v>` would split the
    cell's seeds. The group: its cell in the sweep that trained it (config `sweep`) where that shows it as a
    cell's seed, else in the first sweep that does, else in the first sweep."""
    record = read_record(run_dir)
    cells: dict[str, tuple[str, bool]] = {}
    for job in jobs:
        sweep, name = job.split("/", 1)
        seen = as_seen(record, sweep, name)
        grid = (seen["config"].get("lr_select") or {}).get("phase") == GRID_PHASE
        if sweep not in cells or (cells[sweep][1] and not grid):
            cells[sweep] = (cell_label(seen, name), grid)
    trained = (record.config or {}).get("sweep")
    order = sorted(cells, key=lambda s: (cells[s][1], s != trained))  # seeds of a cell first, its own sweep first
    return cells[order[0]][0], {s: c for s, (c, _) in cells.items()}


def export(root: Path, out: Path, project: str, only: list[str] | None = None, questions=None) -> list[Path]:
    """One offline W&B run per finished run under root, in out/wandb/; the run folders written."""
    import wandb

    questions = Q.load(root=root) if questions is None else questions
    asks = {Q.page_of(e): q["id"] for q in questions for e in q["evidence"]}
    runs = finished_runs(root, only)
    if out.exists():
        shutil.rmtree(out)  # an export is whole: never one mixed with an older export's runs
    out.mkdir(parents=True)
    os.environ["WANDB_MODE"] = "offline"  # nothing leaves the machine: `wandb sync` uploads, by the user's choice
    os.environ.setdefault("WANDB_SILENT", "true")
    written = []
    for run_dir, where in runs.items():
        results = json.loads((run_dir / RESULTS).read_text())
        # as a training run logs its config: d_k, d_v resolved (null where the model derives them), params, flops
        config = comparison_config(results["config"], results.get("params"))
        config["views"] = where["jobs"]
        cell, config["cell_in"] = view_cells(run_dir, where["jobs"])
        asked = sorted({asks[s] for s in where["sweeps"] if s in asks})
        run = wandb.init(
            project=project,
            dir=str(out),
            mode="offline",
            group=cell,
            job_type=asked[0] if asked else "no-question",
            tags=sorted({*where["sweeps"], *(f"q-{a}" for a in asked)}),
            name=where["jobs"][0].replace("/", ":"),
            reinit=True,
        )
        run.config.update(config)  # as the training runs log theirs: one config record, read back alike
        for step, values in history(run_dir):
            run.log(values, step=step)
        run.summary.update({k: v for k, v in results.get("metrics", {}).items() if isinstance(v, (int, float))})
        run.summary.update({f"params/{k}": v for k, v in (results.get("params") or {}).items()})
        written.append(Path(run.dir).parent)
        run.finish()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path("results"))
    parser.add_argument("--out", type=Path, default=Path("wandb-export"))
    parser.add_argument("--project", default="headsweep-reference")
    parser.add_argument("--sweeps", default="", help="comma-separated sweeps (default: every sweep under --root)")
    args = parser.parse_args(argv)
    try:
        written = export(args.root, args.out, args.project, [s for s in args.sweeps.split(",") if s] or None)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"wrote {len(written)} offline W&B runs under {args.out}/wandb/; to put them in your own project: "
        f"`wandb login`, then `wandb sync --project {args.project} {args.out}/wandb/offline-run-*`"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
