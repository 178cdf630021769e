"""Table 3 for one sweep: `make report SWEEP=table3_a` writes reports/<sweep>.md and .html with PNG plots.

    python -m headsweep.experiments.report --sweep table3_a [--root results] [--out reports] [--samples 1000]

Reads nothing but the runs' results.json files under results/<sweep>/ and the files they name
(hypotheses; the test references from each run's data config), so it works offline and on copied runs.
One row per grid cell, seeds pooled: BLEU/chrF/PPL as mean ± sd over seeds, Δ test BLEU against the
base cell (tagged `base` by `make sweep`) with a p-value from sacreBLEU's paired bootstrap, and the
paper's numbers for the matching Table 3 row. With WANDB_MODE=online the table also goes to W&B.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import statistics
import sys
from pathlib import Path

from headsweep.analysis.compare import report_section
from headsweep.experiments.cells import Cell, ReportError, group_cells, learning_curve, load_runs, varied_keys
from headsweep.experiments.paper import COLUMNS, table3
from headsweep.experiments.report_plots import learning_curves, plots
from headsweep.experiments.significance import holm, mean_sd, paired_bootstrap, ranking_agreement, seed_test

SIZES = ("N", "d_model", "d_ff", "d_k", "d_v")  # compared with the paper relative to the base cell
POOLING = ("p: sacreBLEU's paired bootstrap (1000 resamples unless --samples says otherwise) of the cell "
           "against the base on the test split, seeds pooled: each side's hypotheses of the seeds both cells "
           "have, concatenated in seed order, against the references repeated once per seed; so a resample "
           "draws (sentence, seed) pairs and compares the two cells on the same ones. p Holm: the same p-values "
           "adjusted by Holm's step-down method for comparing every cell with one base (family-wise error 0.05). "
           "p seeds: Welch's t-test of the cell's per-seed test BLEU against the base's.")


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


def summarize(cells: list[Cell], n_samples: int = 1000) -> dict:
    """Fill each cell's row; return what the report says around the table."""
    base = next((c for c in cells if c.base), None)
    rows = table3()
    base_settings = settings(base.runs[0].flat) if base else None
    paper_base = next(r for r in rows if r["row"] == "base")
    base_bleu, _ = mean_sd(base.values("test/bleu")) if base else (None, None)
    signature = None
    # a cell that differs from the base in a setting Table 3 has no column for (head dropout, say) has no
    # paper row, even when its Table 3 columns equal the base's
    other_keys = [k for k in varied_keys(cells) if k not in COLUMNS] if base and len(cells) > 1 else []
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
        row["delta"] = row["p"] = row["p_note"] = row["p_seeds"] = None
        if base is not None and c is not base:
            row["delta"] = None if row["test_bleu"] is None or base_bleu is None else row["test_bleu"] - base_bleu
            test = paired_bootstrap(base, c, n_samples)
            row["p"], row["p_note"] = test["p"], test.get("note")
            row["p_seeds"] = seed_test(base.values("test/bleu"), c.values("test/bleu"))
            signature = test.get("signature") or signature
        off_table = any(first.flat.get(k) != base.runs[0].flat.get(k) for k in other_keys)
        paper = None if off_table else paper_row(settings(first.flat), base_settings, rows)
        row["paper"] = paper
        row["paper_delta"] = paper["dev_bleu"] - paper_base["dev_bleu"] if paper and paper is not paper_base else None
    for c, adjusted in zip(cells, holm([c.row["p"] for c in cells])):
        c.row["p_holm"] = adjusted
    return {"base": base, "signature": signature, "ranking": ranking_stability(cells)}


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
    return {"half_step": half, "last_step": last, "tau": ranking_agreement(early, late),
            "order_half": [c.label for _, c in sorted(zip(early, cells), key=lambda t: -t[0])],
            "order_last": [c.label for _, c in sorted(zip(late, cells), key=lambda t: -t[0])]}


def verdicts(cells: list[Cell], alpha: float = 0.05) -> list[str]:
    """Each cell against the base in words: which differences survive Holm's correction, and whether the
    seed spread alone would also call them (Welch's t-test over the seeds' test BLEU)."""
    lines = []
    for c in cells:
        r = c.row
        if c.base or r["delta"] is None or r.get("p_holm") is None:
            continue
        direction = "better" if r["delta"] > 0 else "worse"
        seeds = ("; one seed per side, so nothing yet says whether training noise alone makes a difference "
                 "this large" if r["p_seeds"] is None else
                 f"; over seeds (n = {r['n']}) the difference is {'also' if r['p_seeds'] < alpha else 'not'} "
                 f"significant (Welch p = {r['p_seeds']:.3f})")
        if r["p_holm"] < alpha:
            lines.append(f"{c.label}: {direction} than the base by {abs(r['delta']):.2f} BLEU, significant after "
                         f"Holm's correction (p = {r['p_holm']:.3f}){seeds}.")
        else:
            lines.append(f"{c.label}: {r['delta']:+.2f} BLEU against the base, not significant after Holm's "
                         f"correction (p = {r['p_holm']:.3f}){seeds}.")
    return lines


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
                  "Δ BLEU test", "p", "p Holm", "p seeds", "paper row", "paper PPL", "paper BLEU", "paper Δ BLEU", "paper params (M)"])
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
               "—" if r.get("p_holm") is None else f"{r['p_holm']:.3f}",
               "—" if r["p_seeds"] is None else f"{r['p_seeds']:.3f}",
               paper.get("row", "—"), fmt(paper.get("dev_ppl")), fmt(paper.get("dev_bleu"), 1),
               "—" if r["paper_delta"] is None else f"{r['paper_delta']:+.1f}", fmt(paper.get("params_M"), 0)])
    return columns, body


# ----------------------------------------------------------------------------- plots


# ----------------------------------------------------------------------------- writing


def analysis_section(run_dirs: list[Path], out_dir: Path) -> str | None:
    """The head-analysis section for the runs that have analysis/analysis.json (`make analyze`, or
    analysis=... after training); None when there are none."""
    analysed = [d for d in run_dirs if (d / "analysis" / "analysis.json").is_file()]
    return report_section(analysed, out_dir) if analysed else None


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
    curves = learning_curves(sweep, cells, out_dir)
    images += [curves] if curves else []

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
    findings = verdicts(cells) + ranking_words(info["ranking"])

    md = [f"# {sweep}: Table 3 ablation", "", *[f"- {n}" for n in notes], "", markdown_table(columns, body), "",
          *(["## What the numbers say", "", *[f"- {f}" for f in findings], ""] if findings else []),
          *[f"![{p.stem}]({p.name})" for p in images], ""]
    section = analysis_section([r.dir for r in runs], out_dir)
    if section:
        md += ["", section, ""]
    md_path, html_path = out_dir / f"{sweep}.md", out_dir / f"{sweep}.html"
    md_path.write_text("\n".join(md))
    html_path.write_text(html_page(sweep, notes, findings, columns, body, images, section))
    project = first.get("logger", {}).get("wandb", {}).get("project", "headsweep")
    log_to_wandb(sweep, project, columns, body, images)
    return [md_path, html_path, *images]


def ranking_words(ranking: dict | None) -> list[str]:
    if not ranking or ranking["tau"] is None:
        return []
    return [f"Ranking over training: Kendall's tau {ranking['tau']:.2f} between the cells' order by mean val BLEU at "
            f"step {ranking['half_step']} ({', '.join(ranking['order_half'])}) and at step {ranking['last_step']} "
            f"({', '.join(ranking['order_last'])}); 1 means the order was already settled at half the budget."]


def html_page(sweep: str, notes: list[str], findings: list[str], columns: list[str], body: list[list[str]],
              images: list[Path], section: str | None) -> str:
    return "\n".join([
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(sweep)}: Table 3 ablation</title>",
        "<style>body{font-family:sans-serif;max-width:80em;margin:2em auto}table{border-collapse:collapse;"
        "font-size:90%}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style></head><body>",
        f"<h1>{html.escape(sweep)}: Table 3 ablation</h1>",
        "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>",
        html_table(columns, body),
        *([f"<h2>What the numbers say</h2><ul>{''.join(f'<li>{html.escape(f)}</li>' for f in findings)}</ul>"]
          if findings else []),
        *[f"<p><img src='{html.escape(p.name)}' alt='{html.escape(p.stem)}'></p>" for p in images],
        # the analysis section is markdown; shown as text rather than adding a markdown dependency
        f"<pre>{html.escape(section)}</pre>" if section else "",
        *[f"<p><img src='{html.escape(name)}' alt='{html.escape(name)}'></p>"
          for name in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", section or "")],
        "</body></html>",
    ])


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
