"""Table 3 for one sweep: `make report SWEEP=table3_a` writes reports/<sweep>.md and .html with PNG plots.

    python -m headsweep.report --sweep table3_a [--root multirun] [--out reports] [--samples 1000]

Reads nothing but the runs' results.json files under multirun/<sweep>/ and the files they name
(hypotheses; the test references from each run's data config), so it works offline and on copied runs.
One row per grid cell, seeds pooled: BLEU/chrF/PPL as mean ± sd over seeds, Δ test BLEU against the
base cell (tagged `base` by `make sweep`) with a p-value from sacreBLEU's paired bootstrap, and the
paper's numbers for the matching Table 3 row. With WANDB_MODE=online the table also goes to W&B.
"""

from __future__ import annotations

import argparse
import html
import importlib
import json
import os
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from headsweep.paper import table3
from headsweep.params import CONF_DIR
from headsweep.runs import RESULTS, read_results
from headsweep.sweep import flatten_config, label_part

# Table 3's column for a config key; other varied keys show as the key itself.
COLUMNS = {"model.n_layers": "N", "model.d_model": "d_model", "model.d_ff": "d_ff", "model.heads": "h",
           "model.d_k": "d_k", "model.d_v": "d_v", "model.dropout": "P_drop",
           "module.label_smoothing": "eps_ls", "model.positions": "pos"}
SIZES = ("N", "d_model", "d_ff", "d_k", "d_v")  # compared with the paper relative to the base cell
POOLING = ("p: sacreBLEU's paired bootstrap (1000 resamples unless --samples says otherwise) of the cell "
           "against the base on the test split, seeds pooled: each side's hypotheses of the seeds both cells "
           "have, concatenated in seed order, against the references repeated once per seed; so a resample "
           "draws (sentence, seed) pairs and compares the two cells on the same ones.")


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


# ----------------------------------------------------------------------------- reading the runs


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


def varied_keys(cells: list[Cell]) -> list[str]:
    """Config keys that differ between cells and are constant within each (so not seeds), leaving out
    per-run paths (a value naming the run's directory) and module.model (a copy of model)."""
    keys = []
    for k in cells[0].runs[0].flat:
        if k.startswith("module.model.") or any(r.dir.name in str(r.flat.get(k)) for c in cells for r in c.runs):
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


# ----------------------------------------------------------------------------- significance


def read_lines(path: Path) -> list[str]:
    from headsweep.data import DataError, _read_lines  # the trainer's own reader: .gz, strict UTF-8, \n only

    try:
        return _read_lines(Path(path))
    except DataError as e:
        raise ReportError(str(e)) from None


def hypotheses_path(run: Run) -> Path:
    """The test hypotheses the run's test/bleu scores: beam, else greedy; found next to results.json if
    the run directory was moved."""
    split = run.results["config"]["data"]["test_split"]
    files = run.results.get("hypotheses", {})
    for key in (f"{split}.beam", f"{split}.greedy"):
        if key in files:
            path = Path(files[key])
            if not path.is_absolute():
                path = run.dir / path
            return path if path.is_file() else run.dir / "hypotheses" / path.name
    raise ReportError(f"{run.dir / RESULTS}: no test hypotheses listed for split {split}")


def references(run: Run) -> list[str]:
    """The test references as the run saw them: its data.dir/test_split.tgt_lang[.gz], cut at limit_eval."""
    from headsweep.data import DataError, split_files

    data = run.results["config"]["data"]
    split = data["test_split"]
    listed = run.results.get("references", {}).get(split)
    if listed and Path(listed).is_file():
        path = Path(listed)
    else:
        data_dir = Path(data["dir"])
        if not data_dir.is_absolute() and not data_dir.is_dir():
            data_dir = CONF_DIR.parent / data_dir  # relative to where `make sweep` ran: the repository
        try:
            path = split_files(data_dir, split, data["tgt_lang"])
        except DataError as e:
            raise ReportError(f"references of {run.dir.name}: {e}") from None
    lines = read_lines(path)
    return lines[: data["limit_eval"]] if data.get("limit_eval") else lines


def paired_bootstrap(base: Cell, cell: Cell, n_samples: int = 1000) -> dict:
    """sacreBLEU's paired bootstrap test of `cell` against `base` on the seeds both have, pooled."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    base_by_seed = {r.seed: r for r in base.runs}
    seeds = sorted(base_by_seed.keys() & {r.seed for r in cell.runs})
    if not seeds:
        return {"p": None, "note": "no seed in common with the base"}
    cell_by_seed = {r.seed: r for r in cell.runs}
    base_hyps, cell_hyps, refs = [], [], []
    for s in seeds:
        b, c = read_lines(hypotheses_path(base_by_seed[s])), read_lines(hypotheses_path(cell_by_seed[s]))
        ref = references(base_by_seed[s])
        if not len(b) == len(c) == len(ref):
            return {"p": None, "note": f"seed {s}: {len(b)} base and {len(c)} cell hypotheses, {len(ref)} references"}
        base_hyps += b
        cell_hyps += c
        refs += ref
    test = PairedTest([("base", base_hyps), (cell.label, cell_hyps)], {"BLEU": BLEU()}, [refs],
                      test_type="bs", n_samples=n_samples)
    signatures, scores = test()
    base_score, cell_score = scores["BLEU"]
    return {"p": cell_score.p_value, "seeds": seeds, "pooled_delta": cell_score.score - base_score.score,
            "signature": str(signatures["BLEU"])}


# ----------------------------------------------------------------------------- the table


def mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def summarize(cells: list[Cell], n_samples: int = 1000) -> dict:
    """Fill each cell's row; return what the report says around the table."""
    base = next((c for c in cells if c.base), None)
    rows = table3()
    base_settings = settings(base.runs[0].flat) if base else None
    paper_base = next(r for r in rows if r["row"] == "base")
    base_bleu, _ = mean_sd(base.values("test/bleu")) if base else (None, None)
    signature = None
    for c in cells:
        first = c.runs[0]
        row = c.row
        row.update(settings(first.flat))
        row["params_M"] = first.results["params"]["total"] / 1e6
        row["n"] = len(c.runs)
        row["steps"] = statistics.fmean(r.results["metrics"].get("train/steps", 0) for r in c.runs)
        row["max_steps"] = first.results["config"]["trainer"]["max_steps"]
        for name, metric in (("val_ppl", "val/ppl"), ("val_bleu", "val/bleu"), ("test_bleu", "test/bleu"),
                             ("test_chrf", "test/chrf"), ("test_ppl", "test/ppl")):
            row[name], row[name + "_sd"] = mean_sd(c.values(metric))
        row["seeds"] = [r.seed for r in c.runs]
        row["test_bleu_seeds"] = c.values("test/bleu")
        row["delta"] = row["p"] = row["p_note"] = None
        if base is not None and c is not base:
            row["delta"] = None if row["test_bleu"] is None or base_bleu is None else row["test_bleu"] - base_bleu
            test = paired_bootstrap(base, c, n_samples)
            row["p"], row["p_note"] = test["p"], test.get("note")
            signature = test.get("signature") or signature
        paper = paper_row(settings(first.flat), base_settings, rows)
        row["paper"] = paper
        row["paper_delta"] = paper["dev_bleu"] - paper_base["dev_bleu"] if paper and paper is not paper_base else None
    return {"base": base, "signature": signature}


def fmt(value, digits: int = 2, sd=None) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        text = f"{value:.{digits}f}"
        return f"{text} ± {sd:.{digits}f}" if sd is not None else text
    return str(value)


def table(cells: list[Cell], keys: list[str]) -> tuple[list[str], list[list[str]]]:
    """Table 3's layout: the settings (h, d_k, d_v and whatever else the sweep varies), then our numbers,
    then the paper's for the matching row."""
    extra = [k for k in keys if k not in ("model.heads", "model.d_k", "model.d_v")]
    columns = (["", "h", "d_k", "d_v"] + [COLUMNS.get(k, k) for k in extra]
               + ["params (M)", "steps", "PPL val", "BLEU val", "BLEU test", "chrF test", "n seeds",
                  "Δ BLEU test", "p", "paper row", "paper PPL", "paper BLEU", "paper Δ BLEU", "paper params (M)"])
    body = []
    for c in cells:
        r, first = c.row, c.runs[0]
        paper = r["paper"] or {}
        stopped = "*" if r["steps"] < r["max_steps"] else ""
        body.append(
            ["base" if c.base else c.label, fmt(r["h"]), fmt(r["d_k"]), fmt(r["d_v"])]
            + [fmt(first.flat[k]) for k in extra]
            + [fmt(r["params_M"], 1 if r["params_M"] >= 1 else 3), f"{r['steps']:.0f}{stopped}", fmt(r["val_ppl"], 2, r["val_ppl_sd"]),
               fmt(r["val_bleu"], 2, r["val_bleu_sd"]), fmt(r["test_bleu"], 2, r["test_bleu_sd"]),
               fmt(r["test_chrf"], 1, r["test_chrf_sd"]), str(r["n"]),
               "—" if r["delta"] is None else f"{r['delta']:+.2f}",
               "—" if r["p"] is None else f"{r['p']:.3f}",
               paper.get("row", "—"), fmt(paper.get("dev_ppl")), fmt(paper.get("dev_bleu"), 1),
               "—" if r["paper_delta"] is None else f"{r['paper_delta']:+.1f}", fmt(paper.get("params_M"), 0)])
    return columns, body


# ----------------------------------------------------------------------------- plots


def plots(sweep: str, cells: list[Cell], keys: list[str], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    # BLEU against the varied setting: on a number axis when the first varied key tells every cell apart
    # (h in row A, d_k in row B; log2 for sizes per head), else one slot per cell named by its settings.
    key = keys[0]
    numeric = (all(isinstance(c.runs[0].flat[key], (int, float)) for c in cells)
               and len({c.runs[0].flat[key] for c in cells}) == len(cells))
    xlabel = COLUMNS.get(key, key) if numeric or len(keys) == 1 else "cell"
    xs = [c.runs[0].flat[key] if numeric else i for i, c in enumerate(cells)]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for x, c in zip(xs, cells):
        ys = c.row["test_bleu_seeds"]
        ax.scatter([x] * len(ys), ys, color="0.6", s=14, zorder=2, label="one seed" if c is cells[0] else None)
        ax.errorbar([x], [c.row["test_bleu"]], yerr=[c.row["test_bleu_sd"] or 0], fmt="o", color="C0",
                    capsize=4, zorder=3, label="mean ± sd over seeds" if c is cells[0] else None)
    base = next((c for c in cells if c.base), None)
    if base is not None:
        ax.axhline(base.row["test_bleu"], color="C1", ls="--", lw=1, label="base")
    if numeric and key in ("model.heads", "model.d_k", "model.d_v") and min(xs) > 0:
        ax.set_xscale("log", base=2)
    if numeric:
        ax.set_xticks(sorted(xs), [str(x) for x in sorted(xs)])
    else:
        shown = [k for k in keys if k not in ("model.heads", "model.d_k", "model.d_v")] or keys
        names = [str(c.runs[0].flat[key]) if len(keys) == 1 else
                 "-".join(label_part(k, c.runs[0].flat[k]) for k in shown) for c in cells]
        ax.set_xticks(xs, names, rotation=30 if len(keys) > 1 else 0, ha="right" if len(keys) > 1 else "center",
                      fontsize=8)
        ax.set_xlim(-0.5, len(cells) - 0.5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("test BLEU")
    ax.set_title(f"{sweep}: test BLEU vs {xlabel}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out_dir / f"{sweep}-bleu.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for c in cells:
        ax.errorbar([c.row["params_M"]], [c.row["test_bleu"]], yerr=[c.row["test_bleu_sd"] or 0], fmt="o",
                    color="C1" if c.base else "C0", capsize=4)
        ax.annotate("base" if c.base else c.label, (c.row["params_M"], c.row["test_bleu"]), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("parameters (M)")
    ax.set_ylabel("test BLEU")
    ax.set_title(f"{sweep}: test BLEU vs parameters (mean ± sd over seeds)")
    fig.tight_layout()
    paths.append(out_dir / f"{sweep}-params.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


# ----------------------------------------------------------------------------- writing


def analysis_section(run_dirs: list[Path], out_dir: Path) -> str | None:
    """Markdown from headsweep.analyze.report_section for the runs that have analysis/analysis.json
    (written by `make analyze`); None when there are none or that function does not exist yet."""
    analysed = [d for d in run_dirs if (d / "analysis" / "analysis.json").is_file()]
    if not analysed:
        return None
    try:
        module = importlib.import_module("headsweep.analyze")
    except ModuleNotFoundError as e:
        if e.name != "headsweep.analyze":
            raise  # a bug inside analyze, not its absence
        return None
    report_section = getattr(module, "report_section", None)
    return report_section(analysed, out_dir) if report_section else None


def log_to_wandb(sweep: str, project: str, columns: list[str], body: list[list[str]], images: list[Path]) -> bool:
    """The table (and plots) as a W&B run of the sweep's group; only with WANDB_MODE=online."""
    if os.environ.get("WANDB_MODE") != "online":
        return False
    import wandb

    run = wandb.init(project=project, group=sweep, job_type="report", name=f"report-{sweep}")
    run.log({"table3": wandb.Table(columns=[c or "cell" for c in columns], data=body),
             **{p.stem: wandb.Image(str(p)) for p in images}})
    run.finish()
    return True


def markdown_table(columns: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])


def html_table(columns: list[str], body: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>\n" for row in body)
    return f"<table>\n<tr>{head}</tr>\n{rows}</table>"


def write_report(sweep: str, root: Path = Path("results"), out_dir: Path = Path("reports"),
                 n_samples: int = 1000) -> list[Path]:
    sweep_dir = root / sweep
    if not sweep_dir.is_dir():
        raise ReportError(f"no runs of sweep '{sweep}': {sweep_dir} does not exist; run `make sweep SWEEP={sweep}` first")
    runs, unfinished = load_runs(sweep_dir)
    if not runs:
        raise ReportError(f"no finished runs in {sweep_dir} ({len(unfinished)} unfinished); "
                          f"run or resume `make sweep SWEEP={sweep}` first")
    cells = group_cells(runs)
    keys = varied_keys(cells) if len(cells) > 1 else ["model.heads"]
    info = summarize(cells, n_samples)
    columns, body = table(cells, keys)
    out_dir.mkdir(parents=True, exist_ok=True)
    images = plots(sweep, cells, keys, out_dir)

    first = runs[0].results["config"]
    notes = [
        f"{len(runs)} finished runs in {len(cells)} cells from `{sweep_dir}`; test split "
        f"`{first['data']['test_split']}` ({first['data']['src_lang']}→{first['data']['tgt_lang']}), "
        f"test BLEU decoded with beam {first['module']['test_beam_size']}; val BLEU is greedy.",
        "Numbers: mean ± sd (sample sd) over seeds; Δ BLEU test: mean test BLEU of the cell minus the base's.",
        POOLING if info["base"] else "No cell is tagged `base`: no Δ BLEU or p-values.",
        "Paper: Vaswani et al. 2017, Table 3 (newstest2013 dev PPL per wordpiece and BLEU, 100k steps on "
        "WMT14 en→de), the row with the same settings, sizes relative to the base cell (our base's d_model, "
        "N, d_ff, d_k, d_v are the paper's base sizes); our PPL is per subword on our val split.",
    ]
    if info["signature"]:
        notes.append(f"sacreBLEU paired bootstrap signature: `{info['signature']}`.")
    if any(c.row["steps"] < c.row["max_steps"] for c in cells):
        notes.append("\\* stopped before trainer.max_steps (trainer.max_time): those cells trained fewer steps.")
    if any(c.row["p_note"] for c in cells):
        notes += [f"{c.label}: no p-value: {c.row['p_note']}." for c in cells if c.row["p_note"]]
    if unfinished:
        notes.append("Not finished (not in the table): " + "; ".join(f"{d.name}: {why}" for d, why in unfinished))

    md = [f"# {sweep}: Table 3 ablation", "", *[f"- {n}" for n in notes], "", markdown_table(columns, body), "",
          *[f"![{p.stem}]({p.name})" for p in images], ""]
    section = analysis_section([r.dir for r in runs], out_dir)
    if section:
        md += ["", section, ""]
    md_path, html_path = out_dir / f"{sweep}.md", out_dir / f"{sweep}.html"
    md_path.write_text("\n".join(md))
    html_body = "\n".join([
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(sweep)}: Table 3 ablation</title>",
        "<style>body{font-family:sans-serif;max-width:80em;margin:2em auto}table{border-collapse:collapse;"
        "font-size:90%}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style></head><body>",
        f"<h1>{html.escape(sweep)}: Table 3 ablation</h1>",
        "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>",
        html_table(columns, body),
        *[f"<p><img src='{html.escape(p.name)}' alt='{html.escape(p.stem)}'></p>" for p in images],
        # the analysis section is markdown; shown as text rather than adding a markdown dependency
        f"<pre>{html.escape(section)}</pre>" if section else "",
        *[f"<p><img src='{html.escape(name)}' alt='{html.escape(name)}'></p>"
          for name in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", section or "")],
        "</body></html>",
    ])
    html_path.write_text(html_body)
    project = first.get("logger", {}).get("wandb", {}).get("project", "headsweep")
    log_to_wandb(sweep, project, columns, body, images)
    return [md_path, html_path, *images]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", required=True, help="the sweep's name, e.g. table3_a")
    parser.add_argument("--root", type=Path, default=Path("results"),
                        help="where the sweeps' finished runs are (results/<sweep>/<run>; multirun for run directories)")
    parser.add_argument("--out", type=Path, default=Path("reports"), help="where the report goes")
    parser.add_argument("--samples", type=int, default=1000, help="paired bootstrap resamples")
    args = parser.parse_args(argv)
    try:
        paths = write_report(args.sweep, args.root, args.out, args.samples)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
