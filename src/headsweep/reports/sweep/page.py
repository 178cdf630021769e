"""A sweep's report: `make report SWEEP=table3_a` writes reports/<sweep>.md, .html (the markdown rendered)
and .json (its cells, for the index), PNG plots, and reports/index.html linking every sweep's report and
every prune report (`--sweep all`: every sweep under --root).

    python -m headsweep.reports.build --sweep table3_a|all [--root results] [--out reports] [--samples 1000]
        [--stuck-threshold X]

Reads nothing but the runs' results.json files under results/<sweep>/ and the files they name
(hypotheses, metrics CSV; the test references from each run's data config), so it works offline and on
copied runs, and writes nothing there. A run that cannot be compared (unfinished, half-written, another
sweep's, files missing) is named with why, on stderr and in the report, and left out of every number.
One row per grid cell, seeds pooled: BLEU/chrF as mean ± sd over seeds, Δ test BLEU against the base cell (tagged
`base` by `make sweep`) with its 95% Welch interval over seeds and Holm's p across the cells (Table 3's verdict
rule: reports.sweep.significance; sacreBLEU's paired bootstrap stays in each cell's details as test-set noise, not a
verdict), and the paper's numbers for the matching Table 3 row; the rest of each cell in a collapsible block. Runs
stuck on an early plateau are flagged, kept in every number and shown beside them (report_stuck: the threshold is
chosen from every sweep's runs under --root, or given with --stuck-threshold); the report says whether the budget
was long enough (report_convergence). With WANDB_MODE=online the table also goes to W&B.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from headsweep.data.files import atomic_write  # a page killed mid-write leaves the previous one whole
from headsweep.identity import follows_join
from headsweep.reporting.html import page
from headsweep.reporting.markdown import figure, with_back_link, with_footer
from headsweep.reporting.markdown import table as markdown_table
from headsweep.reports.pages.compare import report_section
from headsweep.reports.site import questions as Q
from headsweep.reports.site.experiments import run_identity
from headsweep.reports.site.index import index_record, page_of_a_view
from headsweep.reports.sweep import convergence as report_convergence
from headsweep.reports.sweep import stuck as report_stuck
from headsweep.reports.sweep import stuck_words
from headsweep.reports.sweep.cells import Cell, ReportError, Run, group_cells, load_runs, varied_keys
from headsweep.reports.sweep.checks import init_check_section, update_check_section
from headsweep.reports.sweep.complete import incomplete
from headsweep.reports.sweep.lr import lr_section, split_grid_runs
from headsweep.reports.sweep.method import method_notes
from headsweep.reports.sweep.per_length import best_per_length, length_interactions, length_slopes
from headsweep.reports.sweep.plots import learning_curves, plots, seed_spread
from headsweep.reports.sweep.protocol import protocol_lines, start_banner
from headsweep.reports.sweep.ranks import rank_section
from headsweep.reports.sweep.significance import under_trained_verdicts
from headsweep.reports.sweep.similarity import similarity_curves
from headsweep.reports.sweep.summary import (
    budget_store,
    early_of,
    early_pool,
    pooled_threshold,
    ranking_words,
    summarize,
    verdicts,
)
from headsweep.reports.sweep.table import (
    cell_details,
    decode_speed_columns,
    display,
    loss_note,
    machine_note,
    missing_words,
    reader_name,
    shows_paper,
    table,
    varies,
)
from headsweep.store.pack import analysis_file

# ----------------------------------------------------------------------------- writing


def title(sweep: str, cells: list[Cell], keys: list[str]) -> str:
    """The sweep, what it varies, and its Table 3 row (the row tag most of its cells' runs carry) where it has one.
    Not the first cell's alone: a base shared with another row's sweep carries that row's tag."""
    rows = [
        t[len("row-") :] for c in cells for t in (c.runs[0].results["config"].get("tags") or []) if t.startswith("row-")
    ]
    row = max(sorted(set(rows)), key=rows.count) if rows else None
    keys = [k for k in keys if k != "data.max_len" or not follows_join(k, [c.runs[0].flat for c in cells])]
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
        + "Δ BLEU test: a cell's mean minus the base's; 95% CI: its Welch interval over seeds (the seed is the unit "
        "of replication); p Holm: Welch's p, Holm-corrected across the page's cells; better or worse only where p "
        "Holm < 0.05 (Table 3's rule; see Method).",
    ]
    scaled = sorted({c.row["against"] for c in cells if c.row.get("against")})
    if scaled:
        words = {w for c in cells if (w := c.row.get("against_words"))}
        other = " or ".join(
            ["model size (N, d_model, d_ff)"] * any("size" in w for w in words)
            + ["length (data.join, sentence pairs per example)"] * any("length" in w for w in words)
        )
        lines.append(
            f"Cells of another {other} than the base are compared with the base at their "
            + " and ".join(["size"] * ("size" in other) + ["length"] * ("length" in other))
            + f" ({', '.join(scaled)}: the same h, d_k / d_model and d_v / d_model; column "
            "'against'), and that cell with the base; one Holm correction covers every comparison."
        )
    if own := [c.label for c in cells if c.row.get("own_base")]:
        lines.append(
            f"{', '.join(own)}: the base at {'their lengths' if len(own) > 1 else 'its length'}, compared with "
            "no cell of another length (BLEU over joined segments is another test set, not a harder one)."
        )
    same = [f"{cells[0].row['params_M']:.2f} M parameters"] * (not varies(cells, "params_M"))
    same += [f"{cells[0].row['steps']:.0f} training steps"] * all(c.row["steps"] == c.row["max_steps"] for c in cells)
    for key in ("precision", "compile"):
        if len({c.row[key] for c in cells}) == 1:
            same.append(("precision " if key == "precision" else "") + cells[0].row[key])
    if same:
        lines.append("Every cell: " + ", ".join(same) + ".")
    if any(c.row["stopped_short"] for c in cells):
        lines.append(
            "\\* a seed stopped before trainer.max_steps (trainer.max_time): left out of the cell's comparison, "
            "named in its details."
        )
    if not shows_paper(cells):
        other = ", ".join(map(reader_name, info["other_keys"])) or "the settings varied here"
        in_details = "; the base's row is in its details" if any(c.row.get("paper") for c in cells) else ""
        lines.append(
            f"No cell{' but the base' * bool(in_details)} has a row in the paper's Table 3 ({other}: not among its "
            f"settings), so the table has no paper columns{in_details}."
        )
    lines += [f"{c.label}: no paired bootstrap: {note}." for c in cells if (note := c.row["p_bootstrap_note"])]
    lines += [w for c in cells for w in missing_words(c)]
    if "stuck" in info:
        lines.append(stuck_words.note(cells, info["stuck"]["early"], info["stuck"]["threshold"]))
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
    findings = verdicts(cells) + best_per_length(cells) + length_interactions(cells, info["base"])
    findings += length_slopes(cells, info["base"])
    method = method_notes(cells, info["n_samples"], info["signature"])
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
        *(stuck_words.section(cells, info["stuck"]["early"], info["stuck"]["threshold"]) if "stuck" in info else []),
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
    cells: list[Cell],
    root: Path,
    threshold: float | None,
    pool: dict | None,
    grid_runs: list[Run] = (),
    here: tuple[str, ...] = (),
) -> dict:
    """Flag the stuck runs (report_stuck) in each cell's row: the threshold given, else chosen from the runs
    under root (`pool`: early_pool(root), computed here when not passed; pooled_threshold). Each run by the pool's
    one Early of it where the pool has it (the same flag on every page), else against its reference here at its
    own rate where the reference has runs there (`grid_runs`: the sweep's LR grid). here: the sweeps this page
    reads; a reference read in another sweep is named <that sweep>/<its cell> (the label is that sweep's)."""
    # the pool also when the threshold is given: it holds each run's one Early, the reference every page uses
    pool = pool if pool is not None else early_pool(root)
    if threshold is not None:
        chosen = report_stuck.Threshold(report_stuck.check_threshold(threshold), "given")
    else:
        chosen = pooled_threshold(pool)
    early = early_of(cells, list(grid_runs))
    # the one rule: a run the pool has read is flagged by its one Early (early_pool), whichever page this is
    canonical, read_in = pool.get("early") or {}, pool.get("early_sweep") or {}
    for c in cells:
        for r in c.runs:
            if (e := canonical.get(identity := run_identity(r))) is not None:
                elsewhere = here and read_in.get(identity) not in (None, *here)
                early[r.dir] = replace(e, reference=f"{read_in[identity]}/{e.reference}") if elsewhere else e
    report_stuck.flag(cells, early, chosen.value)
    return {"early": early, "threshold": chosen}


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
    if clash := page_of_a_view(sweep):
        raise ReportError(
            f"sweep '{sweep}' would write reports/{sweep}.md over the page of `{clash}`: run it under another "
            "name (NAME=..., or rename its spec)"
        )
    sweep_dir = root / sweep
    if not sweep_dir.is_dir():
        raise ReportError(
            f"no runs of sweep '{sweep}': {sweep_dir} does not exist; run `make sweep SWEEP={sweep}` first"
        )
    if budget_store(sweep_dir):
        raise BudgetStore(
            f"{sweep_dir} holds `make budgets`' trunks and branches: read them with `make budgets-report` "
            "(reports/budgets.md), not as a sweep page"
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
    info["stuck"] = stuck_runs(cells, root, stuck_threshold, pool, grid_runs, here=(sweep,))
    under_trained_verdicts([c.row for c in cells])  # Table 3's rule, once the stuck seeds are known
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
    sections = [s for s in (lr_md, analysis_section(sweep, cells, out_dir), rank_section(cells), *checks) if s]
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


class BudgetStore(ReportError):
    """A sweep of budget trunks and branches: the budgets page reads it (make budgets-report), no sweep page."""


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
