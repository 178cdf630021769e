"""The report's table and words: columns named as a reader names them, a table narrow enough for a
1,280 px window (the rest of each cell in a collapsible block below it), Δ with its Welch interval over seeds
and Holm's p (Table 3's rule: reports.sweep.significance), the paired bootstrap's p in the details as test-set
noise (at its floor printed as the bound it is), and one name per cell everywhere."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from headsweep.config import DECODE_SPEED  # bench.decode_speed writes it into results/<sweep>/
from headsweep.identity import COLUMNS
from headsweep.machine import label as machine_label
from headsweep.reporting.markdown import details, fmt_p, p_words  # noqa: F401 (re-exported)
from headsweep.reports.pages.verdicts import interval_text
from headsweep.reports.sweep.cells import Cell, learning_curve, val_loss_rises
from headsweep.reports.sweep.significance import seed_words

SIZE_KEYS = ("model.heads", "model.d_k", "model.d_v")  # every table shows them, varied or not


# Settings whose last part alone would not say what they are ("enc self": heads of what?)
READER_NAMES = {
    "model.fixed_heads.enc_self": "fixed enc-self heads",
    "model.fixed_heads.dec_self": "fixed dec-self heads",
    "model.fixed_heads.cross": "fixed cross heads",
    "model.init_kv_gain": "K/V init gain",
}


def reader_name(key: str) -> str:
    """Table 3's name for its settings (h, d_k, P_drop, ...), else the key's last part in words
    (model.head_dropout -> head dropout); fixed heads by the attention they fix (READER_NAMES)."""
    return COLUMNS.get(key) or READER_NAMES.get(key) or key.rsplit(".", 1)[-1].replace("_", " ")


def display(cell: Cell) -> str:
    """The one name of a cell in the table, the words and the plots."""
    return f"{cell.label} (base)" if cell.base else cell.label


def anchor(cell: Cell) -> str:
    return "cell-" + re.sub(r"[^A-Za-z0-9_.-]", "_", cell.label)


def fmt(value, digits: int = 2, sd=None) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        # a learning rate (2.83e-3) would print as 0.00 with fixed digits
        text = f"{value:.{digits + 1}g}" if 0 < abs(value) < 10**-digits else f"{value:.{digits}f}"
        return f"{text} ± {sd:.{digits}f}" if sd is not None else text
    return str(value)


def varies(cells: list[Cell], key: str, digits: int = 6) -> bool:
    return len({round(c.row[key], digits) for c in cells if c.row.get(key) is not None}) > 1


def shows_paper(cells: list[Cell]) -> bool:
    """Paper columns only where a cell other than the base has a Table 3 row to compare with."""
    return any(c.row.get("paper") for c in cells if not c.base)


def table(cells: list[Cell], keys: list[str]) -> tuple[list[str], list[list[str]]]:
    """Table 3's layout, narrowed: the settings (h, d_k, d_v and whatever else the sweep varies), the
    parameters and attention FLOPs where they differ, our scores, and the paper's matching row where
    any cell but the base has one."""
    extra = [k for k in keys if k not in SIZE_KEYS]
    params, flops = varies(cells, "params_M"), varies(cells, "attn_mflops")
    steps = any(c.row["steps"] != cells[0].row["steps"] or c.row["stopped_short"] for c in cells)
    paper = shows_paper(cells)
    measured = list(dict.fromkeys(k for c in cells for k in c.row.get("measured", {})))  # e.g. decoding speed
    scaled = any(c.row.get("against") for c in cells)  # some cells are compared with the base at their size
    stuck = any(c.row.get("stuck_seeds") for c in cells)  # report_stuck: a column only where a run is stuck
    columns = (
        ["cell", "h", "d_k", "d_v", *map(reader_name, extra)]
        + ["params (M)"] * params
        + ["attn MFLOP/token"] * flops
        + measured
        + ["steps"] * steps
        + ["BLEU test"]
        + ["stuck"] * stuck
        + ["against"] * scaled
        + ["Δ BLEU test", "95% CI", "p Holm", "chrF test", "BLEU val"]
        + ["paper row", "paper BLEU", "paper Δ BLEU"] * paper
    )
    body = []
    for c in cells:
        r, first = c.row, c.runs[0]
        row = [display(c), fmt(r["h"]), fmt(r["d_k"]), fmt(r["d_v"]), *[fmt(first.flat[k]) for k in extra]]
        row += [fmt(r["params_M"], 2)] * params + [fmt(r["attn_mflops"], 3)] * flops
        row += [r.get("measured", {}).get(k, "—") for k in measured]
        row += [f"{r['steps']:.0f}" + "*" * bool(r["stopped_short"])] * steps
        row += [fmt(r["test_bleu"], 2, r["test_bleu_sd"])]
        row += [f"{len(r['stuck_seeds'])} of {r['checked']}" if r.get("stuck_seeds") else "—"] * stuck
        row += [r.get("against") or ("—" if c.base or r.get("own_base") else "base")] * scaled
        row += [
            "—" if r["delta"] is None else f"{r['delta']:+.2f}",
            interval_text(r.get("interval")),  # over seeds (Welch); p Holm: Holm over the Welch p-values
            fmt_p(r.get("p_holm")),
            fmt(r["test_chrf"], 1, r["test_chrf_sd"]),
            fmt(r["val_bleu"], 2, r["val_bleu_sd"]),
        ]
        if paper:
            p = r["paper"] or {}
            row += [
                p.get("row", "—"),
                fmt(p.get("dev_bleu"), 1),
                "—" if r["paper_delta"] is None else f"{r['paper_delta']:+.1f}",
            ]
        body.append(row)
    return columns, body


def cell_details(c: Cell, n_samples: int) -> list[str]:
    """Everything about one cell the table leaves out, as a collapsible block."""
    r = c.row
    paper = r["paper"]
    parts = r["params"]
    lines = [
        f"- runs: {', '.join(run.dir.name for run in c.runs)} (seeds {', '.join(map(str, r['seeds']))})",
        f"- test BLEU per seed: {', '.join(f'{v:.2f}' for v in r['test_bleu_seeds'])}; test PPL "
        f"{fmt(r['test_ppl'], 2, r['test_ppl_sd'])}; val PPL {fmt(r['val_ppl'], 2, r['val_ppl_sd'])}",
        f"- steps: {r['steps']:.0f} of trainer.max_steps {r['max_steps']}"
        + "".join(f"; {s}, left out of the comparison" for s in r["stopped_short"]),
        f"- precision {r['precision']}; {r['compile']}",
        f"- parameters: {r['params_M']:.3f} M (attention {parts.get('attention', 0) / 1e6:.3f} M, feed-forward "
        f"{parts.get('ffn', 0) / 1e6:.3f} M, embeddings {parts.get('embeddings', 0) / 1e6:.3f} M); attention "
        f"{r['attn_mflops']:.3f} MFLOP per token at {r['flops_context']} tokens of context",
    ]
    if not c.base and r["delta"] is not None:
        against = (
            f"{r['against']} ({r.get('against_words') or 'the base at its size'})" if r.get("against") else "the base"
        )
        lines.append(
            f"- against {against}: Δ test BLEU {r['delta']:+.2f}, "
            + (f"{r.get('n_compared', r['n'])} seeds against {r['n_base']}, " if r["interval"] else "")
            + (f"on {r['machine_class']}, " if r.get("machine_class") else "")
            + f"{seed_words(r)}; verdict: {r['verdict']}"
            + (
                f"; left out (another machine class): {', '.join(r['class_left_out'])}"
                if r.get("class_left_out")
                else ""
            )
        )
        lines.append(
            f"- test-set noise within a seed, not a verdict: sacreBLEU's paired bootstrap over sentences "
            f"({n_samples} resamples, seeds pooled) p {fmt_p(r['p_bootstrap'], r['p_bootstrap_bound'])}"
            if r["p_bootstrap"] is not None
            else f"- no paired bootstrap: {r['p_bootstrap_note']}"
        )
    if not c.base and r.get("cross_class"):
        lines.append(f"- no comparison: {r['cross_class']}")
    if paper:
        lines.append(
            f"- paper: Table 3 row {paper['row']}, dev PPL {fmt(paper.get('dev_ppl'))}, dev BLEU "
            f"{fmt(paper.get('dev_bleu'), 1)}"
            + (f", params {paper['params_M']:.0f} M" if paper.get("params_M") else ", no parameter count")
        )
    lines += [f"- {w}" for w in missing_words(c)]
    lines.append(f"- {cell_loss_words(c)}")
    lines += [f"- {r[k]}" for k in ("early_words", "last_third_words") if r.get(k)]  # report_stuck, report_convergence
    return details(f"{display(c)}: runs, seeds, steps, val loss, precision, parameters, p-values", lines, anchor(c))


def missing_validations(c: Cell, metric: str = "val/bleu") -> list[tuple[int, list[int]]]:
    """(seed, steps) for each seed of the cell without a validation point at steps its other seeds have."""
    curves = [(run.seed, {s for s, v in learning_curve(run).items() if metric in v}) for run in c.runs]
    every = set().union(*(steps for _, steps in curves))
    return [(seed, sorted(every - steps)) for seed, steps in curves if every - steps]


def missing_words(c: Cell) -> list[str]:
    words = []
    for seed, steps in missing_validations(c):
        at = ", ".join(map(str, steps))
        words.append(
            f"{display(c)}: seed {seed} has no validation at step{'s' if len(steps) > 1 else ''} {at} "
            f"(no such row in its metrics CSV); the learning curve there is the mean of "
            f"{len(c.runs) - 1} of {len(c.runs)} seeds"
        )
    return words


def rise_words(rises: list[tuple[int, float, float]]) -> str:
    """Where a run's val loss went up: each step with the loss before and at it (4 decimals: a rise of a
    thousandth must not print as two equal numbers)."""
    return "; ".join(
        f"{'rose' if loss > prev else 'did not fall'} at step {step} ({prev:.4f} → {loss:.4f})"
        for step, prev, loss in rises
    )


def cell_loss_words(c: Cell) -> str:
    """The cell's details: the seeds whose val loss fell at every validation, each seed where it did not
    (step and values), and the seeds with too few validations to tell (said, not counted as falling)."""
    checks = [(run, val_loss_rises(run)) for run in c.runs]
    fell = [str(run.seed) for run, rises in checks if rises == []]
    parts = [f"fell at every validation in seed{'s' * (len(fell) > 1)} {', '.join(fell)}"] if fell else []
    parts += [f"seed {run.seed} (`{run.dir.name}`) {rise_words(rises)}" for run, rises in checks if rises]
    unchecked = [str(run.seed) for run, rises in checks if rises is None]
    if unchecked:
        parts.append(
            f"seed{'s' * (len(unchecked) > 1)} {', '.join(unchecked)} not checked: fewer than two "
            "validations in the metrics CSV"
        )
    return "val loss " + "; ".join(parts)


def loss_note(cells: list[Cell]) -> str:
    """The report's one line on divergence (the ablation budget validates every 230 steps): val loss fell at
    every validation after the first in all runs, or each run and cell where it rose, with the steps and
    values. A measurement, not a failure: the report is written either way."""
    checks = [(c, run, val_loss_rises(run)) for c in cells for run in c.runs]
    rose = [f"  - `{run.dir.name}` ({display(c)}): {rise_words(rises)}" for c, run, rises in checks if rises]
    unchecked = [f"`{run.dir.name}`" for _, run, rises in checks if rises is None]
    n = len(checks) - len(unchecked)
    if not n:
        return "Val loss not checked for a rise between validations: no run has two in its metrics CSV."
    if rose:
        line = f"Val loss did not fall at every validation in {len(rose)} of {n} runs:\n" + "\n".join(rose)
    else:
        line = "Val loss fell at every validation in " + ({1: "the one run", 2: "both runs"}.get(n) or f"all {n} runs")
    if unchecked:
        line += (
            "\n  - not checked" if rose else "; not checked"
        ) + f" ({len(unchecked)}, fewer than two validations in the metrics CSV): {', '.join(unchecked)}"
    return line + ("" if rose else ".")


def machine_note(cells: list[Cell]) -> str:
    """Which machines trained the runs (results.json's machine): bf16 numerics and speed differ between CPUs,
    so a sweep that mixes them says so. Runs from before results.json named the machine count as not recorded."""
    counts = Counter(machine_label(run.results.get("machine")) for c in cells for run in c.runs)
    if len(counts) == 1:
        name = next(iter(counts))
        if name == "not recorded":
            return (
                "Machine: not recorded in results.json (runs from before it named the machine; their commit "
                "messages and docs/ name it)."
            )
        return f"Every run trained on {name}."
    return (
        "Machines: "
        + "; ".join(
            f"{name}: {n} run{'' if n == 1 else 's'}"
            for name, n in sorted(counts.items(), key=lambda kv: (kv[0] == "not recorded", kv[0]))
        )
        + "."
    )


def decode_speed_columns(sweep_dir: Path) -> dict[str, dict[str, str]]:
    """{cell: {column: text}} for the report: KV cache per target token and beam sentences/s against the base
    (from decode_speed.json; empty where it was not run)."""
    path = Path(sweep_dir) / DECODE_SPEED
    if not path.is_file():
        return {}
    record = json.loads(path.read_text())
    return {
        r["cell"]: {
            "KV cache (KiB/token)": f"{r['kv_cache_bytes']['self_per_target_token'] / 1024:.1f}",
            f"beam {record['beam']} sent/s": f"{r['sentences_per_s']:.1f}",
            "speed vs base": f"{r['vs_base']:.2f}",
        }
        for r in record["cells"]
    }
