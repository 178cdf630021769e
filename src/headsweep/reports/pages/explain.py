"""One view across sweeps: which size carries the BLEU cost, the number of heads h, the query/key width per
head d_k, or the model width d_model? Every finished cell of the named sweeps (or of every sweep in
results/) at one budget, test BLEU against d_k coloured by h and marked by d_model, and a least-squares fit

    BLEU = b0 + b_h log2 h + b_dk log2 d_k + b_dm log2 d_model + e

on the runs (seeds as replicates of their cell), with 95% confidence intervals; where the sweeps ran in
different precisions (a sweep never mixes them) the fit adds an offset for bf16 rather than assume none.
The fit is repeated with each cell left out in turn, to show how far one cell moves each coefficient.

    python -m headsweep.reports.pages.explain [--sweeps table3_a,table3_b,heads_fixed_dk,heads_by_width]
                                            [--root results] [--out reports]

It also answers "how does the best h change with model size": at each d_model, row A's cells there (d_k =
d_v = d_model / h, so only h varies) side by side, the best h, and which h a Welch test over the seeds
cannot tell apart from it.

Only cells that differ from the default model in these sizes enter the fit, each at its width's default
learning rate, all under one training protocol (model.init, module.decay_by: the one most runs share, or
--init's); a cell with another change (head dropout, fixed heads, another protocol, ...) is listed as left
out. Reads only results/.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

from headsweep.config import compose
from headsweep.data.files import atomic_write  # a page killed mid-write leaves the previous one whole
from headsweep.reporting.html import page
from headsweep.reporting.markdown import figure as md_figure
from headsweep.reporting.markdown import first_heading, fmt_p, with_back_link, with_footer
from headsweep.reports.pages.explain_data import check_budget, collect, protocol_of, read
from headsweep.reports.pages.explain_fit import (
    best_h_by_width,
    best_h_figure,
    best_h_lines,
    figure,
    fit,
    fit_without_each_cell,
    influence_lines,
)
from headsweep.reports.site.index import write_index  # the view's question block, as make report
from headsweep.reports.sweep.cells import ReportError
from headsweep.store import RUNS


def write(root: Path, sweeps: list[str], out: Path, loaded: dict | None = None, init: str | None = None) -> Path:
    loaded = loaded or read(root, sweeps)
    steps = check_budget(loaded)
    protocol = protocol_of(loaded, init)
    points, left_out = collect(root, sweeps, loaded, protocol)
    why = (
        f"--init {init}" if init else "the protocol most runs of the view share"
    ) + "; `make explain ARGS='--init xavier'` or `'--init fan_in'` fits one"
    result = fit(points)
    out.mkdir(parents=True, exist_ok=True)
    png = figure(points, out / "explain-bleu-dk.png")
    precisions = sorted({p.precision for p in points})
    lines = [
        f"# Heads or head width? Every cell at {steps} steps",
        "",
        f"Sweeps read ({len(sweeps)}): {', '.join(sweeps)}.",
        "",
        f"{result['n']} runs in {len({(p.h, p.d_k, p.d_model) for p in points})} cells, every one trained under "
        f"{', '.join(f'{k} {v}' for k, v in protocol.items())} ({why}; runs of another protocol are left out, "
        "below); "
        f"precision {', '.join(precisions)}"
        + (
            " (mixed across sweeps, never within one: the fit has a term for it; see docs/throughput.md)"
            if len(precisions) > 1
            else ""
        ),
        "",
        md_figure(
            png.name,
            "Figure 1. Test BLEU (beam 4) of each cell, mean ± sd over its seeds, against the "
            "query/key width per head; coloured by h, marked by d_model.",
        ),
        "",
        "Least squares on every run (seeds as replicates): BLEU = b0 + b_h log2 h + b_dk log2 d_k + "
        "b_dm log2 d_model (+ b_bf16 where the sweeps' precisions differ); a size that does not vary is left "
        "out.",
        "",
        "| term | coefficient (BLEU per doubling; bf16: offset) | 95% CI | p |",
        "|---|---:|---:|---:|",
    ]
    for name, t in result["terms"].items():
        lines.append(f"| {name} | {t['coef']:+.2f} | [{t['lo']:+.2f}, {t['hi']:+.2f}] | {fmt_p(t['p'])} |")
    lines += ["", f"R² {result['r2']:.2f}, residual sd {result['sigma']:.2f} BLEU, {result['dof']} degrees of freedom."]
    lines += influence_lines(fit_without_each_cell(points))
    best, best_protocol = best_h_by_width(points), protocol
    if not best:
        # row A at several widths ran under another protocol only (xavier): its best h, said to be that protocol's
        for other in sorted({r.flat.get("model.init") for runs, _ in loaded.values() for r in runs} - {None}):
            if other == protocol.get("model.init"):
                continue
            best_protocol = protocol_of(loaded, other)
            best = best_h_by_width(collect(root, sweeps, loaded, best_protocol)[0])
            if best:
                lines += [
                    "",
                    f"No row A cells at several widths under {words(protocol)}: the best h below is under "
                    f"{words(best_protocol)}, the protocol those cells ran with.",
                ]
                break
    lines += best_h_lines(best)
    if best:
        png_h = best_h_figure(best, out / "explain-best-h.png")
        lines += [
            "",
            md_figure(
                png_h.name,
                "Figure 2. Row A at each width: test BLEU against h (d_k = d_model / h), "
                f"mean ± sd over seeds; the best h ringed; under {words(best_protocol)}.",
            ),
        ]
    if left_out:
        lines += ["", *left_out_summary(left_out)]
    path = out / "explain.md"
    md = with_footer(with_back_link("\n".join(lines) + "\n"), __spec__.name)
    atomic_write(path, md)
    atomic_write(path.with_suffix(".html"), page(first_heading(md, "explain"), md))
    return path


def words(protocol: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in protocol.items())


def left_out_summary(left_out: list[str]) -> list[str]:
    """The runs left out, one line per sweep with each reason counted (the reasons repeat per seed: a line per
    run made the page end in hundreds of lines), the full list folded."""
    by_sweep: dict[str, Counter] = {}
    for line in left_out:
        where, _, why = line.partition(": ")
        why = re.sub(r"the same run as \S+", "the same run as another sweep's, counted there", why)
        by_sweep.setdefault(where.split("/", 1)[0], Counter())[why] += 1
    lines = [f"## Left out ({len(left_out)} runs)", ""]
    for sweep, reasons in by_sweep.items():
        lines.append(f"- {sweep}: " + "; ".join(f"{why} ({n})" for why, n in reasons.most_common()))
    folded = ["<details><summary>Every run left out</summary>", "", *[f"- {x}" for x in left_out], "", "</details>"]
    return [*lines, "", *folded]


def at_the_ablation_budget(root: Path) -> tuple[dict[str, tuple[list, list]], list[str]]:
    """Every sweep in root whose finished runs trained the ablation budget's steps, as read(), and one line
    naming each other sweep and its steps (the default view: the 2x-budget sweeps are `make budget`'s)."""
    steps = compose(["budget=ablation"]).trainer.max_steps
    names = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != RUNS)  # runs/: the store, no sweep
    keep, other = {}, []
    for name, (runs, unfinished) in read(root, names).items():
        odd = sorted({r.flat["trainer.max_steps"] for r in runs} - {steps})
        if odd:
            other.append(f"{name} ({', '.join(map(str, odd))} steps)")
        else:
            keep[name] = (runs, unfinished)
    return keep, ([f"left out, not at the ablation budget's {steps} steps: {', '.join(other)}"] if other else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sweeps",
        default="",
        help="comma-separated sweeps (default: every sweep in --root at the ablation budget's steps)",
    )
    parser.add_argument("--root", type=Path, default=Path("results"))
    parser.add_argument("--out", type=Path, default=Path("reports"))
    parser.add_argument(
        "--init",
        choices=["xavier", "fan_in"],
        default=None,
        help="fit the runs of this model.init (default: the protocol most runs share)",
    )
    args = parser.parse_args(argv)
    try:
        named = [s for s in args.sweeps.split(",") if s]
        loaded, said = (read(args.root, named), []) if named else at_the_ablation_budget(args.root)
        for line in said:
            print(line)
        path = write(args.root, list(loaded), args.out, loaded, args.init)
        index = write_index(args.out, args.root)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(map(str, [path, *index])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
