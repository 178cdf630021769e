"""The index's table of every experiment: the cells of every sweep's report (<sweep>.json), each run counted
once. A run two sweeps share (a copy with `shared_from`, an adopted model, or a view results/<sweep>/<job>
linking into a store) is one run: it is known by the run folder it resolves to. Runs of the same settings
are one row, whichever sweeps hold them, with a link to each sweep's cell. The table has a column for every
setting that differs anywhere among the rows, and always h, d_k, d_v, steps, precision and init."""

from __future__ import annotations

import json
import os
import statistics
from collections import Counter
from pathlib import Path

from headsweep.reports.sweep.cells import Cell, Run
from headsweep.reports.sweep.protocol import rate_text
from headsweep.reports.sweep.table import fmt, reader_name
from headsweep.store import RESULTS, experiment_settings

ALWAYS = ("model.heads", "model.d_k", "model.d_v")  # first, varied or not
LAST = ("trainer.max_steps", "trainer.precision", "model.init")  # before the scores, varied or not
# Short headers, so that the table's columns stay narrow (the rest: the setting's last part in words)
HEADERS = {
    "model.kv_heads": "kv heads",
    "model.fixed_heads.enc_self": "fixed enc",
    "model.fixed_heads.dec_self": "fixed dec",
    "model.fixed_heads.cross": "fixed cross",
    "model.head_dropout": "head drop",
    "model.init_kv_gain": "kv gain",
    "module.peak_lr": "peak lr",
    "trainer.accelerator": "device",
    "trainer.max_steps": "steps",
    "trainer.precision": "precision",
    "module.decay_by": "decay by",
}
NOTE = (
    "One row per experiment: runs of the same settings pooled over seeds, a run that several sweeps hold "
    "(a copy, or the same run folder) counted once; under its name, the cell in each sweep's report "
    "that holds it (`base`: the cell every other is compared with there). steps: trainer.max_steps, `2×` where it "
    "is twice the most common budget, `*` where a run stopped before it (trainer.max_time). BLEU: test BLEU (beam); "
    "PPL: test perplexity per subword (exp of the test NLL, teacher-forced, no label smoothing); mean ± sd "
    "over seeds. Δ BLEU and p-values are on each sweep's page, against its own base."
)


def run_identity(run: Run, depth: int = 8) -> str:
    """The run folder a run is, relative to its results root (results/<sweep>/<job>: the root two levels up):
    a copy's `shared_from` followed back to the run it was copied from, then symlinks resolved. The same
    run seen from two sweeps gets the same string."""
    root = run.dir.parent.parent
    here, results = run.dir, run.results
    for _ in range(depth):
        shared = (results or {}).get("shared_from") or {}
        if not shared.get("run"):
            break
        here = root / shared["run"]
        try:
            results = json.loads((here / RESULTS).read_text())
        except (OSError, ValueError):
            break  # the original is gone or unreadable: its name is still its identity
    return os.path.relpath(here.resolve(), root.resolve()).replace(os.sep, "/")


def cell_settings(run: Run) -> dict:
    """What the cell trains and how it is scored (reuse.experiment_settings: the one definition of the same
    experiment), as JSON values; the analysis run afterwards and per-run paths left out."""
    return {
        k: list(v) if isinstance(v, tuple) else v
        for k, v in experiment_settings(run.flat).items()
        if not k.startswith("analysis") and run.dir.name not in str(v)
    }


def cell_record(c: Cell) -> dict:
    """What the index needs of a cell beyond the sweep's own table: its settings and each run."""
    return {
        "settings": cell_settings(c.runs[0]),
        "runs": [
            {
                "id": run_identity(r),
                "seed": r.seed,
                "test_bleu": r.results["metrics"].get("test/bleu"),
                "test_ppl": r.results["metrics"].get("test/ppl"),
                "steps": r.results["metrics"].get("train/steps"),
            }
            for r in c.runs
        ],
    }


def experiments(records: list[dict]) -> list[dict]:
    """The rows: every distinct run of the records, grouped by its cell's settings (in the records' order)."""
    rows: dict[str, dict] = {}
    seen: set[str] = set()
    for record in records:
        for c in record["cells"]:
            if "runs" not in c:
                continue  # a report from before the index counted runs: named in the list of sweeps
            key = json.dumps(c["settings"], sort_keys=True)
            row = rows.setdefault(
                key, {"settings": c["settings"], "label": c["cell"], "named_in": 0, "runs": [], "where": []}
            )
            row["where"].append((record["sweep"], record["page"], c["anchor"], c["base"]))
            if len(c["cell"]) < len(row["label"]):  # the plainest name: h8-dk32-dv32, not ...-fixed_enc0
                row["label"], row["named_in"] = c["cell"], len(row["where"]) - 1
            for r in c["runs"]:
                if r["id"] not in seen:
                    seen.add(r["id"])
                    row["runs"].append(r)
    return [row for row in rows.values() if row["runs"]]


def shared_runs(records: list[dict]) -> dict[str, int]:
    """Per sweep: how many of its runs another sweep's report holds too (the same run, counted once)."""
    holders: dict[str, set[str]] = {}
    for record in records:
        for c in record["cells"]:
            for r in c.get("runs", []):
                holders.setdefault(r["id"], set()).add(record["sweep"])
    return {
        record["sweep"]: len({r["id"] for c in record["cells"] for r in c.get("runs", []) if len(holders[r["id"]]) > 1})
        for record in records
    }


def counts(records: list[dict]) -> str:
    """The table's size in words: experiments, distinct runs, and the run folders the sweeps list."""
    rows = experiments(records)
    distinct = sum(len(r["runs"]) for r in rows)
    listed = sum(len(c["runs"]) for record in records for c in record["cells"] if "runs" in c)
    return (
        f"{len(rows)} experiments, {distinct} distinct runs"
        + (
            f" ({listed} as the sweeps list them: {listed - distinct} held by more than one sweep)"
            if listed != distinct
            else ""
        )
        + "."
    )


def columns(rows: list[dict]) -> list[str]:
    """The settings shown: h, d_k, d_v, every setting that differs between rows (a setting only some rows
    record counts as differing: "—" where it is not recorded), then steps, precision and init. So no two
    rows look the same."""
    union = set().union(*(r["settings"] for r in rows)) if rows else set()
    varied = [
        k
        for k in sorted(union, key=lambda k: (not k.startswith("model."), k))
        if k not in (*ALWAYS, *LAST) and len({json.dumps(r["settings"].get(k)) for r in rows}) > 1
    ]
    return [k for k in (*ALWAYS, *varied, *LAST) if k in union]


# What each column holds, shown above the table (and the hover text of its header)
DEFINITIONS = {
    "question": "the question of sweeps/_questions.yaml its sweeps answer (sort by it to group the rows)",
    "cell": "the cell's name (h, d_k, d_v and what else it sets; where several rows share a name, "
    "the settings that tell them apart in brackets), linking its details in a sweep's report",
    "in sweeps": "each sweep holding the row's runs, linking the cell there (`base`: that sweep's base)",
    "h": "attention heads per layer",
    "d_k": "query/key width per head",
    "d_v": "value width per head",
    "d_model": "model width",
    "d_ff": "feed-forward width",
    "N": "layers in the encoder and in the decoder",
    "kv heads": "key/value heads shared by the h query heads (h: none shared)",
    "fixed enc": "encoder self-attention heads with a fixed positional pattern",
    "fixed dec": "decoder self-attention heads with a fixed positional pattern",
    "fixed cross": "cross-attention heads with a fixed positional pattern",
    "head drop": "probability of dropping a whole head in training",
    "kv gain": "the factor on W^K and W^V at init (1: the init's own scale)",
    "peak lr": "the learning rate at the end of warm-up",
    "device": "cpu or gpu",
    "steps": "trainer.max_steps (× the most common; * a run stopped early)",
    "precision": "training precision (32-true: fp32; bf16-mixed)",
    "init": "the attention projections' init (xavier: the earlier protocol's; fan_in: the current)",
    "decay by": "what the schedule's decay follows (steps, or the larger of step and time shares)",
    "runs": "distinct runs (seeds) pooled",
    "BLEU": "test BLEU (beam 4), mean ± sd over seeds",
    "PPL": "test perplexity per subword, mean ± sd over seeds",
}


def definition(head: str) -> str:
    return DEFINITIONS.get(head, "the setting of that name (every run records it in results.json)")


def header(key: str) -> str:
    return HEADERS.get(key) or reader_name(key)


# One number format per quantity, whatever value a row holds: rates as 2e-3, gains to 3 digits
FORMATS = {"module.peak_lr": rate_text, "model.init_kv_gain": lambda v: f"{v:.3g}"}


def value(v, key: str | None = None) -> str:
    if v is None:
        return "—"
    if key in FORMATS and isinstance(v, (int, float)) and not isinstance(v, bool):
        return FORMATS[key](v)
    return f"{v:.4g}" if isinstance(v, float) and not v.is_integer() else str(v)


def distinguished(rows: list[dict], keys: list[str]) -> list[str]:
    """Each row's name; a name several rows share gets the settings that tell those rows apart."""
    by_label: dict[str, list[dict]] = {}
    for row in rows:
        by_label.setdefault(row["label"], []).append(row)
    names = []
    for row in rows:
        same = by_label[row["label"]]
        if len(same) == 1:
            names.append(row["label"])
            continue
        differ = [k for k in keys if len({json.dumps(r["settings"].get(k)) for r in same}) > 1]
        names.append(
            row["label"] + " (" + ", ".join(f"{header(k)} {value(row['settings'].get(k), k)}" for k in differ) + ")"
        )
    return names


def steps_text(row: dict, usual: int | None) -> str:
    steps = row["settings"].get("trainer.max_steps")
    text = str(steps)
    if usual and isinstance(steps, int) and steps != usual:
        text += f" ({steps / usual:g}×)"
    if any(r.get("steps") is not None and isinstance(steps, int) and r["steps"] < steps for r in row["runs"]):
        text += "*"
    return text


def runs_text(runs: list[dict]) -> str:
    """How many runs; a seed that two distinct runs share (the same experiment trained twice) said."""
    repeated = sorted((seed, n) for seed, n in Counter(r["seed"] for r in runs).items() if n > 1)
    return str(len(runs)) + (f" (seed {', '.join(f'{seed} ×{n}' for seed, n in repeated)})" if repeated else "")


def mean_sd_text(values: list[float], digits: int) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    return fmt(statistics.fmean(values), digits, statistics.stdev(values) if len(values) > 1 else None)


def table(records: list[dict], asks: dict[str, str] | None = None) -> tuple[list[str], list[list[str]]]:
    """The index's table: its header and one row per experiment (markdown cells). asks: {sweep: the id of
    the question it answers}, for the question column."""
    asks = asks or {}
    rows = experiments(records)
    keys = columns(rows)
    usual = Counter(r["settings"].get("trainer.max_steps") for r in rows).most_common(1)[0][0] if rows else None
    # the name alone in its column (the cells page keeps it on one line), the sweeps last, where they may wrap
    head = ["question", "cell", *map(header, keys), "runs", "BLEU", "PPL", "in sweeps"]
    body = []
    for row, name in zip(rows, distinguished(rows, keys)):
        asked = sorted({asks[sweep] for sweep, *_ in row["where"] if sweep in asks})
        _, named_page, named_anchor, _ = row["where"][row["named_in"]]
        md_page = Path(named_page).with_suffix(".md").as_posix()
        sweeps = ", ".join(
            f"[{sweep}]({Path(page).with_suffix('.md').as_posix()}#{anchor})" + (" base" if base else "")
            for sweep, page, anchor, base in row["where"]
        )
        cells = [", ".join(asked) or "—", f"[{name}]({md_page}#{named_anchor})"]
        cells += [
            steps_text(row, usual) if k == "trainer.max_steps" else value(row["settings"].get(k), k) for k in keys
        ]
        cells += [
            runs_text(row["runs"]),
            mean_sd_text([r["test_bleu"] for r in row["runs"]], 2),
            mean_sd_text([r["test_ppl"] for r in row["runs"]], 2),
            sweeps,
        ]
        body.append(cells)
    return head, body
