"""The W&B dashboard a user lands in, built from the same questions file as reports/: `make wandb-views`, run
after `make wandb-export` and `wandb sync`.

    python -m headsweep.reports.dashboard.views [--root results] [--out wandb-export/views] [--entity E]
        [--project headsweep-reference]

With wandb-workspaces (W&B's library for reports and workspaces as code), one W&B Report per question of
sweeps/_questions.yaml: its current answer, then one panel grid per evidence sweep (a runset of the sweep's runs,
by their tag, grouped by their cell there: config `cell_in.<sweep>`, which `make wandb-export` writes, so seeds
aggregate into mean and sd) holding val loss against step, test BLEU by cell, and a parallel-coordinates panel
over the settings the sweep varies (reports.sweep.cells.varied_keys); the superseded evidence in a section of its own,
each with why. Table 3's report adds the paper's numbers beside ours (reports.pages.table3's table, the same build).
A view-only entry (a page a command writes, such as explain or a prune report) is named with its command.
Plus one saved workspace view over the whole project, grouped by question, sweep, cell.

Offline first. Without WANDB_API_KEY, or with it and its server unreachable within a few seconds, every report
and the view are built (the library's objects validate offline) and their specs written to --out, one JSON per
question (`<id>.json`: the report as W&B stores it, each runset naming its entity/project, whose internal id
the server gives at save) and `_workspace.json`; one line says nothing was uploaded. With WANDB_API_KEY and a
reachable server: the project is checked first (it exists, every question has synced runs), then each report
and the view is saved (its runsets' saved form asks the server for the project's id; a save makes new copies,
it updates none) and their URLs are printed. A sweep without runs where the runs are is named in its report,
not drawn. Bad input (no runs, a project that does not exist, a question none of whose sweeps has runs): one
line each, nothing written and nothing saved.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import wandb_workspaces.reports.v2 as wr
import wandb_workspaces.workspaces as ws
from wandb_workspaces import expr
from wandb_workspaces.reports.v2 import internal

from headsweep.reports.dashboard.export import finished_runs
from headsweep.reports.dashboard.save import ViewsError, connect, reachable, save, server, synced_tags
from headsweep.reports.pages import table3 as T
from headsweep.reports.pages.table3_answers import answer_line
from headsweep.reports.pages.table3_page import verdicts_table
from headsweep.reports.site import questions as Q
from headsweep.reports.sweep.cells import ReportError, group_cells, load_runs, varied_keys
from headsweep.sizes import comparison_config
from headsweep.store import publish_dir

PROJECT = "headsweep-reference"  # wandb_export's default project
WORKSPACE_FILE = "_workspace.json"
MAX_GROUPS = 100  # W&B draws 10 runs or groups per panel unless told; a sweep has up to ~30 cells with its grid


# ----------------------------------------------------------------------------- what each question shows


def evidence_sweeps(q: dict, table3_rows: dict | None) -> tuple[list[dict], list[dict]]:
    """(current, superseded) entries, each {"sweep" or "view", what, ...}; Table 3's view stands for the rows'
    sweeps (those its record took: the CPU's, or a card's where only the card finished a row; the earlier
    protocol's always, the new start's where a row has run)."""
    current = []
    for e in Q.current(q):
        if e.get("view") == "table3" and table3_rows is not None:
            current += [
                {"sweep": s, "what": f"Table 3 row {row}, {table3_rows['protocols'][p]['title']}"}
                for p in table3_rows["protocols"]
                for row, by in table3_rows["rows"].items()
                if p == "earlier" or by[p]["base"]
                for s in by[p]["sweeps"]
            ]
        else:
            current.append(e)
    return current, Q.earlier(q)


def sweeps_of(questions: list[dict], table3_rows: dict | None) -> dict[str, list[str]]:
    """{question id: every sweep its report shows}."""
    out = {}
    for q in questions:
        current, earlier = evidence_sweeps(q, table3_rows)
        out[q["id"]] = list(dict.fromkeys(e["sweep"] for e in [*current, *earlier] if "sweep" in e))
    return out


def missing_runs(questions: list[dict], table3_rows: dict | None, counts: Counter, where: str) -> list[str]:
    """One line per question that names sweeps none of which has runs `where` (results/ offline, the project
    online): its report would show nothing."""
    lines = []
    for qid, sweeps in sweeps_of(questions, table3_rows).items():
        if sweeps and not any(counts.get(s) for s in sweeps):
            lines.append(f"question {qid!r}: no runs of its sweeps ({', '.join(sweeps)}) {where}")
    return lines


def settings_varied(root: Path, sweep: str) -> list[str]:
    """The config keys the sweep's cells differ in (its report's columns), as dotted keys; [] for one cell. A key
    that some run's exported config (sizes.comparison_config, as wandb_export logs it) holds as null has a gap
    on its axis, so it is left out."""
    runs, _ = load_runs(root / sweep, sweep) if (root / sweep).is_dir() else ([], [])
    cells = group_cells(runs)
    keys = varied_keys(cells) if len(cells) > 1 else []
    logged = [comparison_config(r.results["config"]) for r in runs]
    return [k for k in keys if all(config_value(c, k) is not None for c in logged)]


def config_value(config: dict, key: str):
    for part in key.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return config


def sweep_grid(entity: str, project: str, sweep: str, varied: list[str]):
    """The sweep's runs (tagged with it by wandb_export), grouped by their cell in it; three panels."""
    runset = wr.Runset(
        entity=entity,
        project=project,
        name=sweep,
        filters=expr.And(expr.Tags().isin([sweep])),
        groupby=[f"config.cell_in.{sweep}"],
    )
    spread = {"groupby_aggfunc": "mean", "groupby_rangefunc": "stddev", "aggregate": True}
    columns = [wr.ParallelCoordinatesPlotColumn(wr.Config(k)) for k in varied]
    columns += [wr.ParallelCoordinatesPlotColumn(wr.SummaryMetric(m)) for m in ("val/loss", "test/bleu")]
    return wr.PanelGrid(
        runsets=[runset],
        panels=[
            wr.LinePlot(
                title="val loss by step (mean, sd over seeds)",
                x="Step",
                y=["val/loss"],
                max_runs_to_show=MAX_GROUPS,
                layout=wr.Layout(x=0, y=0, w=8, h=6),
                **spread,
            ),
            wr.BarPlot(
                title="test BLEU by cell (mean, sd over seeds)",
                metrics=["test/bleu"],
                orientation="v",
                max_runs_to_show=MAX_GROUPS,
                max_bars_to_show=MAX_GROUPS,
                layout=wr.Layout(x=8, y=0, w=8, h=6),
                **spread,
            ),
            wr.ParallelCoordinatesPlot(
                title="the settings the sweep varies, val loss and test BLEU",
                columns=columns,
                layout=wr.Layout(x=16, y=0, w=8, h=6),
            ),
        ],
    )


def answer_text(q: dict, table3: dict | None = None) -> str:
    """The question's answer; a Table 3 question's verdicts rendered from the record, as the index renders them."""
    status = q.get("status", "answered")
    verdicts = f" {answer_line(table3, q['verdicts'])}" if q.get("verdicts") and table3 is not None else ""
    lines = [f"**Current answer** ({status}): {q['answer']}{verdicts}", ""]
    if q.get("discussion"):
        lines += [f"Discussed in `{q['discussion']}`.", ""]
    lines.append(
        "Built by `make wandb-views` from `sweeps/_questions.yaml` and results/ (the answer reports/index.md shows). "
        "Each sweep's runs are grouped by their cell in it: a cell's seeds are one line or bar, its mean and sd; a "
        "cell named `<cell>-lr<v>` is seed 1 at a rate of the learning-rate grid that was not chosen."
    )
    return "\n".join(lines)


@dataclass
class Where:
    """What every report is built for: the W&B entity and project, each sweep's varied settings, and how many
    runs each sweep has where the runs are (results/ offline, the synced project online), named by `where`."""

    entity: str
    project: str
    varied: dict[str, list[str]]
    counts: Counter
    where: str


def entry_blocks(e: dict, at: Where, title: str, words: str) -> list:
    """An evidence entry: a heading, its words, and its sweep's panel grid; a sweep without runs `at.where` is
    named, not shown (an empty grid would read as a result); a view is named with the command that writes it."""
    if "view" in e:
        page = f"A page over other sweeps' runs: `{e['command']}` writes reports/{e['view']}.md."
        return [wr.H3(title), wr.P(f"{words}. {page}")]
    if not at.counts.get(e["sweep"]):
        return [wr.H3(title), wr.P(f"{words}. No runs of it {at.where}: not shown.")]
    return [wr.H3(title), wr.P(words), sweep_grid(at.entity, at.project, e["sweep"], at.varied.get(e["sweep"], []))]


def table3_block(record: dict):
    """The Table 3 page's verdicts table, rendered from its record (reports/table3.json's content)."""
    return wr.MarkdownBlock("\n".join(verdicts_table(record)))


def question_report(q: dict, at: Where, table3_rows: dict | None):
    current, earlier = evidence_sweeps(q, table3_rows)
    blocks = [wr.MarkdownBlock(answer_text(q, table3_rows))]
    if any(e.get("view") == "table3" for e in Q.current(q)) and table3_rows is not None:
        blocks += [wr.H2("Table 3 beside the paper"), table3_block(table3_rows)]
    blocks.append(wr.H2("Current evidence"))
    for e in current:
        blocks += entry_blocks(e, at, Q.page_of(e), e.get("what", ""))
    if earlier:
        blocks += [wr.H2("Superseded evidence"), wr.P("Earlier protocols, each replaced by a later page (and why).")]
        for e in earlier:
            words = f"Why replaced: {e['why']}. What it ran: {e.get('what', '')}"
            blocks += entry_blocks(e, at, f"{Q.page_of(e)}: superseded by {e['superseded_by']}", words)
    return wr.Report(
        entity=at.entity,
        project=at.project,
        title=q["question"][:128],
        description=f"headsweep question {q['id']}: its current answer and the runs behind it",
        blocks=blocks,
        width="fluid",
    )


def workspace(entity: str, project: str):
    """The project's saved view: every run grouped by question (job type), the sweep that trained it, cell."""
    spread = {"groupby_aggfunc": "mean", "groupby_rangefunc": "stddev", "aggregate": True}
    return ws.Workspace(
        entity=entity,
        project=project,
        name="headsweep: questions, sweeps, cells",
        sections=[
            ws.Section(
                name="Validation",
                is_open=True,
                panels=[
                    wr.LinePlot(title="val loss", x="Step", y=["val/loss"], **spread),
                    wr.LinePlot(title="val BLEU", x="Step", y=["val/bleu"], **spread),
                ],
            ),
            ws.Section(
                name="Test",
                is_open=True,
                panels=[
                    wr.BarPlot(title="test BLEU", metrics=["test/bleu"], orientation="v", **spread),
                    wr.BarPlot(title="test chrF", metrics=["test/chrf"], orientation="v", **spread),
                ],
            ),
        ],
        settings=ws.WorkspaceSettings(x_axis="Step", max_runs=MAX_GROUPS),
        runset_settings=ws.RunsetSettings(
            groupby=[expr.Metric("JobType"), expr.Config("sweep"), expr.Metric("Group")],
        ),
    )


def build(questions: list[dict], root: Path, at: Where, table3_rows: dict | None) -> dict:
    """{"reports": {question id: Report}, "workspace": Workspace}, built offline; at.varied filled from root."""
    sweeps = {s for names in sweeps_of(questions, table3_rows).values() for s in names}
    at.varied = {s: settings_varied(root, s) for s in sorted(sweeps) if at.counts.get(s)}
    reports = {q["id"]: question_report(q, at, table3_rows) for q in questions}
    return {"reports": reports, "workspace": workspace(at.entity, at.project)}


# ----------------------------------------------------------------------------- specs, offline


def report_spec(report) -> dict:
    """The report as W&B stores it (the library's own saved form), built offline: each runset's project is named
    (entity, name) but not looked up, the one step of the saved form that asks the server (for its id)."""
    offline = copy.copy(report)
    blocks, projects = [], []
    for b in report.blocks:
        if isinstance(b, wr.PanelGrid):
            grid = copy.copy(b)
            runsets = []
            for rs in b.runsets:
                projects.append(internal.Project(entity_name=rs.entity, name=rs.project))
                bare = copy.copy(rs)  # the same runset (its id too) with no project to look up
                bare.entity, bare.project = "", ""
                runsets.append(bare)
            grid.runsets = runsets
            b = grid
        blocks.append(b)
    offline.blocks = blocks
    model = offline._to_model()
    named = iter(projects)
    for block in model.spec.blocks:
        for rs in getattr(getattr(block, "metadata", None), "run_sets", None) or []:
            rs.project = next(named)
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def write_specs(views: dict, out: Path) -> list[Path]:
    """One JSON per question and the workspace's, all in place at once (out/ is the old set or the new)."""
    tmp = out.parent / f".{out.name}.new"
    shutil.rmtree(tmp, ignore_errors=True)  # a killed writer's leftovers
    tmp.mkdir(parents=True)
    try:
        for qid, report in views["reports"].items():
            (tmp / f"{qid}.json").write_text(json.dumps({"question": qid, "report": report_spec(report)}, indent=1))
        spec = views["workspace"]._to_model().model_dump(mode="json", by_alias=True, exclude_none=True)
        (tmp / WORKSPACE_FILE).write_text(json.dumps({"workspace": spec}, indent=1))
        publish_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(out.glob("*.json"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path("results"))
    parser.add_argument("--out", type=Path, default=Path("wandb-export/views"))
    parser.add_argument("--entity", default=os.environ.get("WANDB_ENTITY", ""), help="default: the key's own")
    parser.add_argument("--project", default=PROJECT, help="the project `wandb sync` put the runs in")
    parser.add_argument("--samples", type=int, default=None, help=argparse.SUPPRESS)  # accepted; Table 3 uses none
    parser.add_argument("--questions", type=Path, default=Q.QUESTIONS)
    args = parser.parse_args(argv)
    hint = f"`make wandb-export`, then `wandb sync --project {args.project} wandb-export/wandb/offline-run-*`"
    keyed = bool(os.environ.get("WANDB_API_KEY"))
    try:
        questions = Q.load(args.questions, root=args.root)
        runs = finished_runs(args.root) if args.root.is_dir() else {}
        counts = Counter(s for where in runs.values() for s in where["sweeps"])
        if not counts:
            raise ViewsError([f"no finished runs under {args.root}: nothing to show"])
        table3 = any(e.get("view") == "table3" for q in questions for e in q["evidence"])
        rows = T.build(args.root, T.read_paper(T.PAPER_CSV)) if table3 else None
        if problems := missing_runs(questions, rows, counts, f"under {args.root}"):
            raise ViewsError(problems)
        online = keyed and reachable(server())  # never a wait on wandb.ai without a key to use it with
        at = Where(args.entity, args.project, {}, counts, f"under {args.root}")
        if online:
            api, at.entity = connect(args.entity)
            at.counts, at.where = synced_tags(api, at.entity, at.project, hint), f"in {at.entity}/{at.project}"
            if problems := missing_runs(questions, rows, at.counts, f"{at.where}: {hint}"):
                raise ViewsError(problems)
        views = build(questions, args.root, at, rows)
        written = write_specs(views, args.out)
        urls = save(views) if online else []
    except ViewsError as e:
        print("\n".join(f"error: {line}" for line in e.lines), file=sys.stderr)
        return 2
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if online:
        print(f"saved {len(urls) - 1} reports and the workspace view in {at.entity}/{at.project}:", *urls, sep="\n")
    else:
        why = f"{server()} unreachable" if keyed else "no WANDB_API_KEY"
        print(
            f"wrote {len(written) - 1} report specs (one per question) and the workspace view's to {args.out}/; "
            f"nothing uploaded ({why}: {hint}, then run it again with WANDB_API_KEY set to save them)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
