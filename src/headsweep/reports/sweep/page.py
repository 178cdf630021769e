"""A sweep's report: `make report SWEEP=table3_a` writes reports/<sweep>.md, .html (the markdown rendered)
and .json (its cells, for the index), PNG plots, and reports/index.html linking every sweep's report and
every prune report (`--sweep all`: every sweep under --root).

    python -m headsweep.reports.build --sweep table3_a|all [--root results] [--out reports] [--samples 1000]
        [--stuck-threshold X]

Reads nothing but the runs' results.json files under results/<sweep>/ and the files they name
(hypotheses, metrics CSV; the test references from each run's data config), so it works offline and on
copied runs, and writes nothing there. A run that cannot be compared (unfinished, half-written, another
sweep's, files missing) is named with why, on stderr and in the report, and left out of every number.
One row per grid cell, seeds pooled: BLEU/chrF as mean ± sd over seeds, Δ test BLEU against the base cell
(tagged `base` by `make sweep`) with p-values from sacreBLEU's paired bootstrap (Holm-corrected), and the
paper's numbers for the matching Table 3 row; the rest of each cell in a collapsible block. Runs stuck on
an early plateau are flagged, kept in every number and shown beside them (report_stuck: the threshold is
chosen from every sweep's runs under --root, or given with --stuck-threshold); the report says whether the
budget was long enough (report_convergence). With WANDB_MODE=online the table also goes to W&B.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

from headsweep.data.files import atomic_write  # a page killed mid-write leaves the previous one whole
from headsweep.identity import COLUMNS, follows_width
from headsweep.reporting.html import page
from headsweep.reporting.markdown import figure, with_back_link, with_footer
from headsweep.reporting.markdown import table as markdown_table
from headsweep.reporting.stats import holm, mean_sd, ranking_agreement, seed_test
from headsweep.reports.pages.compare import report_section
from headsweep.reports.site import questions as Q
from headsweep.reports.site.experiments import run_identity
from headsweep.reports.site.index import index_record
from headsweep.reports.sweep import convergence as report_convergence
from headsweep.reports.sweep import stuck as report_stuck
from headsweep.reports.sweep.cells import Cell, ReportError, Run, group_cells, learning_curve, load_runs, varied_keys
from headsweep.reports.sweep.checks import init_check_section, update_check_section
from headsweep.reports.sweep.complete import incomplete
from headsweep.reports.sweep.lr import lr_section, split_grid_runs
from headsweep.reports.sweep.plots import learning_curves, plots, seed_spread
from headsweep.reports.sweep.protocol import protocol_lines, start_banner
from headsweep.reports.sweep.significance import paired_bootstrap
from headsweep.reports.sweep.similarity import similarity_curves
from headsweep.reports.sweep.table import (
    cell_details,
    decode_speed_columns,
    display,
    loss_note,
    machine_note,
    missing_words,
    p_words,
    reader_name,
    shows_paper,
    table,
    varies,
)
from headsweep.sizes import attention_flops
from headsweep.store import RUNS
from headsweep.store.pack import analysis_file
from headsweep.sweeps.paper import table3

SIZES = ("N", "d_model", "d_ff", "d_k", "d_v")  # compared with the paper relative to the base cell
SCALE = ("N", "d_model", "d_ff")  # a model size; a cell of another size is compared with the base scaled to it
METRICS = (
    ("val_ppl", "val/ppl"),
    ("val_bleu", "val/bleu"),
    ("test_bleu", "test/bleu"),
    ("test_chrf", "test/chrf"),
    ("test_ppl", "test/ppl"),
)
POOLING = (
    "p: sacreBLEU's paired bootstrap ({n} resamples, `--samples`) of the cell against the base on the test "
    "split, seeds pooled: each side's hypotheses of the seeds both cells have, concatenated in seed order, "
    "against the references repeated once per seed; so a resample draws (sentence, seed) pairs and compares "
    "the two cells on the same ones. p <= {floor:.3f}: no resample favoured the base, the smallest p "
    "{n} resamples can give (1 / ({n} + 1)), so a bound, not a value. p Holm: the same p-values adjusted "
    "by Holm's step-down method for comparing every cell with one base (family-wise error 0.05). p seeds: "
    "Welch's t-test of the cell's per-seed test BLEU against the base's."
)
PAPER = (
    "Paper: Vaswani et al. 2017, Table 3 (newstest2013 dev PPL per wordpiece and BLEU, 100k steps on WMT14 "
    "en→de), the row with the same settings, sizes relative to the base cell: our base (its sizes in Protocol "
    "above; d_model 256 by default) stands for the paper's base (d_model 512, N 6, d_ff 2048, d_k = d_v = 64), "
    "so our d_k 16 at d_model 256 is the paper's d_k 32; our PPL is per subword on our val split."
)
FLOPS = (
    "Attention FLOPs per token: the forward FLOPs of every attention sublayer (encoder self, decoder self, "
    "cross) per token, at {context} tokens of context, counted as Hoffmann et al. 2022 (appendix F) do: 2 per "
    "multiply-add of the projections, QK^T and the weighted values, 3 per attention weight for the softmax."
)


def settings(flat: dict) -> dict:
    """A run's Table 3 columns."""
    s = {col: flat[key] for key, col in COLUMNS.items()}
    s["pos"] = "learned" if s["pos"] == "learned" else "sinusoid"
    return s


def paper_row(ours: dict, base: dict | None, rows: list[dict]) -> dict | None:
    """The Table 3 row with the same settings, sizes compared relative to the base cell (a small model's
    d_model 128 at a base of 256 is the paper's 256 at its base of 512)."""
    paper_base = next(r for r in rows if r["row"] == "base")
    want = {k: (v * paper_base[k] / base[k] if base and k in SIZES else v) for k, v in ours.items()}
    for row in rows:
        if row["row"] == "big":
            continue
        if all(abs(row[k] - v) < 1e-6 if isinstance(v, (int, float)) else row[k] == v for k, v in want.items()):
            return row
    return None


# ----------------------------------------------------------------------------- the numbers


def compile_setting(config: dict) -> str:
    """How a run's model was compiled: a `compile` key of module or trainer (newer runs), else eager."""
    for where in (config.get("module") or {}, config.get("trainer") or {}, config):
        if "compile" in where:
            value = where["compile"]
            return (
                "eager (not compiled)"
                if value in (None, False)
                else "compiled"
                if value is True
                else f"compiled ({value})"
            )
    return "eager (not compiled)"


def cell_numbers(c: Cell) -> dict:
    """What a cell is and scores, seeds pooled, before any comparison with the base."""
    first = c.runs[0]
    flops = attention_flops(first.results["config"]["model"])
    row = {
        **settings(first.flat),
        "params_M": first.results["params"]["total"] / 1e6,
        "params": dict(first.results["params"]),
        "attn_mflops": flops["attention_per_token"] / 1e6,
        "flops_context": flops["context"],
        "n": len(c.runs),
        "seeds": [r.seed for r in c.runs],
        "steps": statistics.fmean(r.results["metrics"].get("train/steps", 0) for r in c.runs),
        "max_steps": first.results["config"]["trainer"]["max_steps"],
        "precision": " / ".join(sorted({str(r.results["config"]["trainer"].get("precision")) for r in c.runs})),
        "compile": " / ".join(sorted({compile_setting(r.results["config"]) for r in c.runs})),
        "test_bleu_seeds": c.values("test/bleu"),
    }
    for name, metric in METRICS:
        row[name], row[name + "_sd"] = mean_sd(c.values(metric))
    return row


def scaled_settings(c: Cell, other_keys: list[str]) -> tuple:
    """A cell's settings with its size taken out: d_k and d_v relative to d_model, the rest as they are."""
    flat = c.runs[0].flat
    s = settings(flat)
    rest = sorted((k, repr(v)) for k, v in s.items() if k not in (*SCALE, "d_k", "d_v"))
    return (s["d_k"] / s["d_model"], s["d_v"] / s["d_model"], *rest, *(repr(flat.get(k)) for k in other_keys))


def reference(c: Cell, cells: list[Cell], base: Cell | None, other_keys: list[str]) -> Cell | None:
    """What a cell is compared with: the base, but a cell of another model size (N, d_model, d_ff) is compared
    with the base scaled to its size (the same h, d_k / d_model, d_v / d_model and other settings:
    heads_by_width's h = 8 at d_model 512) where the sweep has that cell; that cell itself with the base. Row
    A's question at each width is which h is best there, not how a wider model compares with a narrower base."""
    if base is None or c is base:
        return None
    size = lambda x: tuple(settings(x.runs[0].flat)[k] for k in SCALE)  # noqa: E731
    if size(c) == size(base):
        return base
    like_base = scaled_settings(base, other_keys)
    return next(
        (o for o in cells if o is not c and size(o) == size(c) and scaled_settings(o, other_keys) == like_base), base
    )


def off_table_keys(cells: list[Cell], base: Cell | None) -> list[str]:
    """The varied settings Table 3 has no column for (head dropout, say): a cell that differs from the base in
    one has no paper row, even when its Table 3 columns equal the base's."""
    flats = [r.flat for c in cells for r in c.runs]
    return (
        [k for k in varied_keys(cells) if k not in COLUMNS and not follows_width(k, flats)]
        if base and len(cells) > 1
        else []
    )


def early_references(cells: list[Cell]) -> dict[str, Cell]:
    """Each cell's reference for early val loss (report_stuck): the base, or the base at the cell's model size
    where the sweep has it (the cell `reference` compares it with), that cell itself included; with no cell
    tagged base, the first cell stands in."""
    base = next((c for c in cells if c.base), cells[0])
    other_keys = off_table_keys(cells, base)
    size = lambda x: tuple(settings(x.runs[0].flat)[k] for k in SCALE)  # noqa: E731
    like_base = scaled_settings(base, other_keys)
    refs = {}
    for c in cells:
        if c is not base and size(c) != size(base) and scaled_settings(c, other_keys) == like_base:
            refs[c.label] = c  # the base at its size: its own runs set the normal early loss there
        else:
            refs[c.label] = reference(c, cells, base, other_keys) or base
    return refs


def early_pool(root: Path, sweeps: list[str] | None = None) -> dict:
    """What the stuck-run threshold is chosen from: the early excess of every distinct run of every sweep
    under root (or of `sweeps`) but a learning-rate grid's, a run copied into several sweeps once (the same seed,
    early val loss and test BLEU); the base runs' (runs of a cell that is its own reference) apart; early loss and
    test BLEU. Of every sweep under root, with the calibration sweeps' own pool ("calibration", the threshold's:
    report_stuck's docstring) where root holds them all, from the same reading of their runs. And "early": each
    run's one Early (report_index.run_identity -> Early), the one every page that shows the run flags it by, so a
    run flagged on one page is flagged on every page (stuck_runs)."""
    names = sweeps_in(root) if sweeps is None else list(sweeps)
    read = {sweep: sweep_early_entries(root, sweep) for sweep in names}
    entries = {sweep: got["entries"] for sweep, got in read.items()}
    pool = pooled(entries, names)
    calibration = list(report_stuck.CALIBRATION_SWEEPS)
    if sweeps is None and all(s in entries for s in calibration):
        pool["calibration"] = pooled(entries, calibration)
    # one reference per run: its home sweep's reading (the sweep that trained it, beside its own base at its rate),
    # else, where the home reads it as no seed of a cell (a grid run there), the first sweep by name
    pool["early"] = {}
    for sweep in names:
        for identity, (home, e) in read[sweep]["early"].items():
            if home == sweep or identity not in pool["early"]:
                pool["early"][identity] = e
    return pool


def sweep_early_entries(root: Path, sweep: str) -> dict:
    """One sweep's pooled runs: {"entries": [((seed, early loss, test BLEU), (name, excess, is a base run, early
    loss, BLEU))], "early": {run identity: (its home sweep, Early)}}."""
    # a learning-rate grid's runs start slowly at a small rate by design: no seeds of a cell, not pooled
    runs, grid_runs = split_grid_runs(load_runs(root / sweep, sweep)[0])
    if not runs:
        return {"entries": [], "early": {}}
    cells = group_cells(runs)
    refs = early_references(cells)
    early = report_stuck.early_losses(cells, report_stuck.same_rate_references(cells, refs, grid_runs))
    out, by_run = [], {}
    for c in cells:
        for r in c.runs:
            if r.dir in early:
                e, bleu = early[r.dir], r.results["metrics"]["test/bleu"]
                out.append(
                    ((r.seed, e.loss, bleu), (f"{sweep}/{r.dir.name}", e.excess, refs[c.label] is c, e.loss, bleu))
                )
                home = (r.results.get("shared_from") or {}).get("sweep") or sweep
                by_run[run_identity(r)] = (home, e)
    return {"entries": out, "early": by_run}


def pooled(entries: dict[str, list], names: list[str]) -> dict:
    """The pool of the named sweeps' entries, a run several of them show once (the first sweep's view)."""
    seen: dict[tuple, tuple[str, float, bool, float, float]] = {}
    used = set()
    for sweep in names:
        for key, value in entries[sweep]:
            seen.setdefault(key, value)
            used.add(sweep)
    values = list(seen.values())
    return {
        "runs": [v[0] for v in values],
        "excesses": [v[1] for v in values],
        "base_excesses": [v[1] for v in values if v[2]],
        "pairs": [(v[3], v[4]) for v in values],
        "n_sweeps": len(used),
    }


def pooled_threshold(pool: dict) -> report_stuck.Threshold:
    """The stuck threshold chosen by report_stuck's rule: on the calibration sweeps' runs where the pool has
    them, else on every pooled run."""
    chosen = pool.get("calibration") or pool
    return report_stuck.choose_threshold(
        chosen["excesses"], chosen["base_excesses"], chosen["n_sweeps"], calibration="calibration" in pool
    )


def summarize(cells: list[Cell], n_samples: int = 1000) -> dict:
    """Fill each cell's row; return what the report says around the table."""
    base = next((c for c in cells if c.base), None)
    rows = table3()
    paper_base = next(r for r in rows if r["row"] == "base")
    for c in cells:
        c.row.update(cell_numbers(c))
    signature = None
    floor = 1 / (n_samples + 1)  # sacreBLEU's p = (resamples favouring the base + 1) / (n + 1)
    other_keys = off_table_keys(cells, base)
    for c in cells:
        row = c.row
        ref = reference(c, cells, base, other_keys)
        row.update(
            delta=None, p=None, p_note=None, p_seeds=None, against=None if ref is None or ref is base else ref.label
        )
        if ref is not None:
            row["delta"] = None if row["test_bleu"] is None else row["test_bleu"] - ref.row["test_bleu"]
            test = paired_bootstrap(ref, c, n_samples)
            row["p"], row["p_note"] = test["p"], test.get("note")
            row["p_seeds"] = seed_test(ref.values("test/bleu"), c.values("test/bleu"))
            signature = test.get("signature") or signature
        # at the floor, every smaller p is too: its Holm adjustment is a bound as well
        row["p_bound"] = row["p"] is not None and row["p"] <= floor * (1 + 1e-9)
        off_table = base is not None and any(c.runs[0].flat.get(k) != base.runs[0].flat.get(k) for k in other_keys)
        # sizes relative to what the cell is compared with: h = 32 at d_model 512 is row A's h = 32 (d_k 16)
        scale = settings((ref if ref is not None and ref is not base else base or c).runs[0].flat) if base else None
        paper = None if off_table else paper_row(settings(c.runs[0].flat), scale, rows)
        row["paper"] = paper
        row["paper_delta"] = paper["dev_bleu"] - paper_base["dev_bleu"] if paper and paper is not paper_base else None
    for c, adjusted in zip(cells, holm([c.row["p"] for c in cells])):
        c.row["p_holm"] = adjusted
    return {
        "base": base,
        "signature": signature,
        "ranking": ranking_stability(cells),
        "n_samples": n_samples,
        "other_keys": other_keys,
    }


def ranking_stability(cells: list[Cell]) -> dict | None:
    """Kendall's tau between the cells' mean val BLEU at the validation nearest half the budget and at the
    end: does a cell that ends worse only learn slower, or is it worse throughout?"""
    curves = [[learning_curve(r) for r in c.runs] for c in cells]
    steps = set.intersection(*[{s for curve in cs for s, v in curve.items() if "val/bleu" in v} for cs in curves])
    if len(cells) < 2 or len(steps) < 2:
        return None
    last = max(steps)
    half = min(steps, key=lambda s: abs(s - last / 2))
    at = lambda step: [statistics.fmean(curve[step]["val/bleu"] for curve in cs if step in curve) for cs in curves]  # noqa: E731
    early, late = at(half), at(last)
    return {
        "half_step": half,
        "last_step": last,
        "tau": ranking_agreement(early, late),
        "order_half": [c.label for _, c in sorted(zip(early, cells), key=lambda t: -t[0])],
        "order_last": [c.label for _, c in sorted(zip(late, cells), key=lambda t: -t[0])],
    }


def verdicts(cells: list[Cell], alpha: float = 0.05) -> list[str]:
    """Each cell against the base in words: which differences survive Holm's correction, and whether the
    seed spread alone would also call them (Welch's t-test over the seeds' test BLEU)."""
    lines = []
    for c in cells:
        r = c.row
        if c.base or r["delta"] is None or r.get("p_holm") is None:
            continue
        direction = "better" if r["delta"] > 0 else "worse"
        ref = f"{r['against']} (the base at its size)" if r.get("against") else "the base"
        seeds = (
            "; one seed per side, so nothing yet says whether training noise alone makes a difference this large"
            if r["p_seeds"] is None
            else f"; over seeds (n = {r['n']}) the difference is {'also' if r['p_seeds'] < alpha else 'not'} "
            f"significant (Welch {p_words(r['p_seeds'])})"
        )
        p = p_words(r["p_holm"], r["p_bound"])
        if r["p_holm"] < alpha:
            lines.append(
                f"{display(c)}: {direction} than {ref} by {abs(r['delta']):.2f} BLEU, significant after "
                f"Holm's correction ({p}){seeds}."
            )
        else:
            lines.append(
                f"{display(c)}: {r['delta']:+.2f} BLEU against {ref}, not significant after Holm's "
                f"correction ({p}){seeds}."
            )
    return lines


def ranking_words(ranking: dict | None, cells: list[Cell]) -> list[str]:
    if not ranking or ranking["tau"] is None:
        return []
    name = {c.label: display(c) for c in cells}
    order = lambda labels: ", ".join(name[label] for label in labels)  # noqa: E731
    return [
        f"Ranking over training: Kendall's tau {ranking['tau']:.2f} between the cells' order by mean val BLEU at "
        f"step {ranking['half_step']} ({order(ranking['order_half'])}) and at step {ranking['last_step']} "
        f"({order(ranking['order_last'])}); 1 means the order was already settled at half the budget."
    ]


# ----------------------------------------------------------------------------- writing


def title(sweep: str, cells: list[Cell], keys: list[str]) -> str:
    """The sweep, what it varies, and its Table 3 row (from the jobs' row tag) where it has one."""
    tags = cells[0].runs[0].results["config"].get("tags") or []
    row = next((t[len("row-") :] for t in tags if t.startswith("row-")), None)
    varied = ", ".join(map(reader_name, keys)) if len(cells) > 1 else "one cell"
    return f"{sweep}: test BLEU by {varied}" + (f" (Table 3, row {row})" if row else "")


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def shown_path(path: Path) -> Path:
    """A path as a reader of the shipped page can follow it: relative to the checkout, never this machine's."""
    return path.relative_to(Path.cwd()) if path.is_absolute() and path.is_relative_to(Path.cwd()) else path


def notes(sweep_dir: Path, runs: list, cells: list[Cell], info: dict, left_out: list) -> list[str]:
    """The bullets above the table: what was compared, how, what is the same in every cell, and what
    was left out."""
    first, base = runs[0].results["config"], info["base"]
    seeds = sorted({len(c.runs) for c in cells})
    lines = [
        f"{counted(len(runs), 'run')} ({' or '.join(map(str, seeds))} seed{'' if seeds == [1] else 's'} per cell) in "
        f"{counted(len(cells), 'cell')} from "
        f"`{shown_path(sweep_dir)}`; "
        + (f"base cell: {base.label}." if base else "no cell is tagged `base`: no Δ BLEU or p-values."),
        f"Test split `{first['data']['test_split']}` ({first['data']['src_lang']}→{first['data']['tgt_lang']}), "
        f"test BLEU decoded with beam {first['module']['test_beam_size']}, val BLEU greedy; "
        + ("one seed per cell (no sd). " if seeds == [1] else "mean ± sd over seeds. ")
        + "Δ BLEU test: a cell's mean minus the base's; p Holm: paired bootstrap against the base, Holm-corrected "
        "(see Method).",
    ]
    scaled = sorted({c.row["against"] for c in cells if c.row.get("against")})
    if scaled:
        lines.append(
            "Cells of another model size (N, d_model, d_ff) than the base are compared with the base scaled to "
            f"their size ({', '.join(scaled)}: the same h, d_k / d_model and d_v / d_model; column "
            "'against'), and that cell with the base; one Holm correction covers every comparison."
        )
    same = [f"{cells[0].row['params_M']:.2f} M parameters"] * (not varies(cells, "params_M"))
    same += [f"{cells[0].row['steps']:.0f} training steps"] * all(c.row["steps"] == c.row["max_steps"] for c in cells)
    for key in ("precision", "compile"):
        if len({c.row[key] for c in cells}) == 1:
            same.append(("precision " if key == "precision" else "") + cells[0].row[key])
    if same:
        lines.append("Every cell: " + ", ".join(same) + ".")
    if any(c.row["steps"] < c.row["max_steps"] for c in cells):
        lines.append("\\* stopped before trainer.max_steps (trainer.max_time): those cells trained fewer steps.")
    if not shows_paper(cells):
        other = ", ".join(map(reader_name, info["other_keys"])) or "the settings varied here"
        lines.append(
            f"No cell but the base has a row in the paper's Table 3 ({other}: not among its settings), "
            "so the table has no paper columns; the base's row is in its details."
        )
    lines += [f"{c.label}: no p-value: {c.row['p_note']}." for c in cells if c.row["p_note"]]
    lines += [w for c in cells for w in missing_words(c)]
    if "stuck" in info:
        lines.append(report_stuck.note(cells, info["stuck"]["early"], info["stuck"]["threshold"]))
    if info.get("convergence", {}).get("not_converged"):
        lines.append("Not converged: differences may be speeds of learning (see Is the budget long enough?).")
    lines.append(loss_note(cells))  # does training diverge at this learning rate (the open issue on d_model 512)?
    lines.append(machine_note(cells))
    if left_out:
        lines.append(
            f"Left out of the table and of every number ({len(left_out)}):\n"
            + "\n".join(f"  - `{d.name}`: {why}" for d, why in left_out)
        )
    return lines


def sweep_markdown(
    head: str,
    notes_: list[str],
    cells: list[Cell],
    keys: list[str],
    info: dict,
    figures: list[tuple[Path, str]],
    section: str | None,
    top: list[str] = (),
) -> str:
    """The page: title, what it is (top: the banner of a superseded page, its question, protocol and
    command, the pages of the same question), a contents list where it is long, notes, the table and each
    cell's details, the findings, the figures, the head analysis where the runs have one, the method."""
    findings = verdicts(cells)
    method = [
        POOLING.format(n=info["n_samples"], floor=1 / (info["n_samples"] + 1)),
        PAPER,
        FLOPS.format(context=cells[0].row["flops_context"]),
    ]
    if info["signature"]:
        method.append(f"sacreBLEU paired bootstrap signature: `{info['signature']}`.")
    figures_note = (
        []
        if varies(cells, "params_M")
        else [f"Every cell has {cells[0].row['params_M']:.2f} M parameters: no plot against parameters.", ""]
    )
    status = incomplete(info["sweep"], cells) if info.get("sweep") else None
    md = [
        *[f"- {n}" for n in notes_],
        "",
        *markdown_table(*table(cells, keys), align=True),
        "",
        "Per cell:",
        "",
        *[line for c in cells for line in cell_details(c, info["n_samples"])],
        *(["## What the numbers say", "", *[f"- {f}" for f in findings], ""] if findings else []),
        *(
            report_stuck.section(cells, info["stuck"]["early"], info["stuck"]["threshold"], info["stuck"]["pooled_r"])
            if "stuck" in info
            else []
        ),
        *(
            report_convergence.words(info["convergence"], ranking_words(info["ranking"], cells), info["ranking"])
            if "convergence" in info
            else []
        ),
        "## Figures",
        "",
        *figures_note,
        *[
            line
            for i, (path, caption) in enumerate(figures, 1)
            for line in (figure(path.name, f"Figure {i}. {caption}"), "")
        ],
    ]
    if section:
        md += [section, ""]
    md += ["## Method", "", *[f"- {m}" for m in method], ""]
    first = [f"> {status}", ""] if status else []
    return "\n".join([f"# {head}", "", *first, *top, *Q.contents("\n".join(md)), "", *md])


def analysis_section(sweep: str, cells: list[Cell], out_dir: Path) -> str | None:
    """The head-analysis section for the runs that have analysis/analysis.json (`make analyze`, or
    analysis=... after training), grouped by the report's cells under their display names, in the table's
    order (the base first, which the section compares every other cell with); None when none is analysed."""
    groups = {display(c): [r.dir for r in c.runs if analysis_file(r.dir)] for c in cells}
    groups = {name: dirs for name, dirs in groups.items() if dirs}
    base = next((display(c) for c in cells if c.base), None)
    return report_section(groups, out_dir, sweep, base) if groups else None


def log_to_wandb(sweep: str, project: str, columns: list[str], body: list[list[str]], images: list[Path]) -> bool:
    """The table (and plots) as a W&B run of the sweep's group; only with WANDB_MODE=online."""
    if os.environ.get("WANDB_MODE") != "online":
        return False
    import wandb

    run = wandb.init(project=project, group=sweep, job_type="report", name=f"report-{sweep}")
    run.log(
        {
            "table3": wandb.Table(columns=[c or "cell" for c in columns], data=body),
            **{p.stem: wandb.Image(str(p)) for p in images},
        }
    )
    run.finish()
    return True


def stuck_runs(
    cells: list[Cell], root: Path, threshold: float | None, pool: dict | None, grid_runs: list[Run] = ()
) -> dict:
    """Flag the stuck runs (report_stuck) in each cell's row: the threshold given, else chosen from the runs
    under root (`pool`: early_pool(root), computed here when not passed; pooled_threshold). Each run by the pool's
    one Early of it where the pool has it (the same flag on every page), else against its reference here at its
    own rate where the reference has runs there (`grid_runs`: the sweep's LR grid)."""
    # the pool also when the threshold is given: it holds each run's one Early, the reference every page uses
    pool = pool if pool is not None else early_pool(root)
    if threshold is not None:
        chosen = report_stuck.Threshold(report_stuck.check_threshold(threshold), "given")
    else:
        chosen = pooled_threshold(pool)
    refs = report_stuck.same_rate_references(cells, early_references(cells), list(grid_runs))
    early = report_stuck.early_losses(cells, refs)
    # the one rule: a run the pool has read is flagged by its one Early (early_pool), whichever page this is
    canonical = pool.get("early") or {}
    for c in cells:
        for r in c.runs:
            if (e := canonical.get(run_identity(r))) is not None:
                early[r.dir] = e
    report_stuck.flag(cells, early, chosen.value)
    pairs = pool.get("pairs") or []
    return {
        "early": early,
        "threshold": chosen,
        "pooled_r": (report_stuck.correlation(pairs), len(pairs)) if pairs else None,
    }


def write_report(
    sweep: str,
    root: Path = Path("results"),
    out_dir: Path = Path("reports"),
    n_samples: int = 1000,
    stuck_threshold: float | None = None,
    pool: dict | None = None,
    questions: list[dict] | None = None,
    spread: float | None = None,
) -> list[Path]:
    """One sweep's report files. stuck_threshold: --stuck-threshold (None: chosen from the runs under root,
    `pool` where the caller has it). questions: sweeps/_questions.yaml, loaded (read here when None).
    spread: the seed sd a one-seed figure's y-range shows (seed_spread(root) when None)."""
    try:
        report_stuck.check_threshold(stuck_threshold)
    except ValueError as e:
        raise ReportError(str(e)) from None
    sweep_dir = root / sweep
    if not sweep_dir.is_dir():
        raise ReportError(
            f"no runs of sweep '{sweep}': {sweep_dir} does not exist; run `make sweep SWEEP={sweep}` first"
        )
    runs, left_out = load_runs(sweep_dir, sweep)
    for d, why in left_out:
        print(f"{sweep}: left out {d.name}: {why}", file=sys.stderr)
    runs, grid_runs = split_grid_runs(runs)  # a learning-rate grid's runs (LR_GRID=) are no seeds of their cells
    if not runs and grid_runs:
        raise PhaseOneOnly(
            f"only the learning-rate grid's runs in {sweep_dir} so far ({len(grid_runs)} of phase 1): the "
            "report's cells are the seeds at each cell's chosen rate (phase 2); resume the same "
            "`make sweep ... LR_GRID=...` command"
        )
    if not runs:
        raise ReportError(
            f"no usable runs in {sweep_dir} ({len(left_out)} left out); run or resume `make sweep SWEEP={sweep}` first"
        )
    cells = group_cells(runs)
    # before any file is written: a page that cannot state its protocol is not written at all
    top = protocol_lines(sweep, cells, grid_runs)
    questions = Q.load(root=root) if questions is None else questions
    top = [
        *Q.banner(questions, sweep, out_dir),
        *start_banner(cells),
        *Q.question_block(questions, sweep, out_dir),
        *top,
    ]
    keys = varied_keys(cells) if len(cells) > 1 else ["model.heads"]
    info = summarize(cells, n_samples)
    info["sweep"] = runs[0].results["config"].get("sweep") or sweep  # the name it ran under (its spec's, or NAME=)
    info["stuck"] = stuck_runs(cells, root, stuck_threshold, pool, grid_runs)
    info["convergence"] = report_convergence.convergence(cells)
    speed = decode_speed_columns(sweep_dir)
    for c in cells:
        c.row["measured"] = speed.get(c.label, {})
    out_dir.mkdir(parents=True, exist_ok=True)
    curves = learning_curves(sweep, cells, out_dir)
    lr_md, lr_figures = lr_section(sweep, cells, grid_runs, out_dir, root)
    similarity = similarity_curves(sweep, cells, out_dir)  # where runs logged it (issue 53)
    spread = seed_spread(root) if spread is None else spread
    figures = plots(sweep, cells, keys, out_dir, spread) + [f for f in (curves, similarity) if f] + lr_figures
    head = title(sweep, cells, keys)
    checks = (init_check_section(cells), update_check_section(cells))  # at init, and in the first steps
    sections = [s for s in (lr_md, analysis_section(sweep, cells, out_dir), *checks) if s]
    md = sweep_markdown(
        head,
        notes(sweep_dir, runs, cells, info, left_out),
        cells,
        keys,
        info,
        figures,
        "\n\n".join(sections) or None,
        top,
    )
    md_path, html_path, json_path = (out_dir / f"{sweep}{ext}" for ext in (".md", ".html", ".json"))
    md = with_footer(with_back_link(md), __spec__.name)
    atomic_write(md_path, md)
    atomic_write(html_path, page(head, md))
    atomic_write(json_path, json.dumps(index_record(sweep, head, cells, runs, left_out), indent=1))
    project = runs[0].results["config"].get("logger", {}).get("wandb", {}).get("project", "headsweep")
    log_to_wandb(sweep, project, *table(cells, keys), [p for p, _ in figures])
    return [md_path, html_path, json_path, *(p for p, _ in figures)]


class PhaseOneOnly(ReportError):
    """A sweep with only its learning-rate grid's runs so far: no cells to report until phase 2."""


def sweeps_in(root: Path) -> list[str]:
    """The sweeps with a run under root (results/<sweep>/<run>/results.json; results/runs/ is the store, whose
    runs the sweeps show)."""
    return (
        sorted(d.name for d in root.iterdir() if d.is_dir() and d.name != RUNS and any(d.glob("*/results.json")))
        if root.is_dir()
        else []
    )


def stuck_threshold_arg(text: str | None) -> float | None:
    """--stuck-threshold's value, or one line (ReportError) saying what is allowed."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = text
    try:
        return report_stuck.check_threshold(value)
    except ValueError as e:
        raise ReportError(str(e)) from None
