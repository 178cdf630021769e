"""The head analyses of a sweep's runs compared cell by cell: importance, pruning, redundancy.

Each analysed run (analysis/analysis.json) is reduced to a few numbers (`specialisation`); the report
groups the runs by its cells (heads_specialise: head dropout 0, 0.1, 0.2; fixed_heads: 0, 4, 7 fixed
encoder heads), each group's mean ± sd over seeds is set beside the base group's, and Welch's t-test over
seeds (Holm-corrected over every comparison of the section) says which differences are larger than the
seed spread. Where heads are fixed patterns, `headsweep.analysis.fixed.fixed_vs_learned_lines` adds what
the fixed and the learned heads each do. `make report SWEEP=<sweep>` adds the section when runs are analysed.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from headsweep.analysis.fixed import fixed_vs_learned_lines, pattern_of
from headsweep.analysis.importance import KIND_NAMES
from headsweep.reporting.markdown import figure, fmt_p, table
from headsweep.reporting.plots import pyplot, save_figure
from headsweep.reporting.stats import holm, mean_sd, seed_test
from headsweep.store.pack import read_analysis

# (key, column, format, words for a higher value, words for a lower one)
MEASURES = (
    ("bleu", "BLEU full", "{:.2f}", "higher full-model BLEU", "lower full-model BLEU"),
    ("prunable", "prunable", "{:.0%}", "more heads prunable", "fewer heads prunable"),
    ("kept_area", "BLEU kept (area)", "{:.0%}", "a flatter pruning curve", "a steeper pruning curve"),
    ("evenness", "importance evenness", "{:.3f}", "importance spread more evenly", "importance less even"),
    ("importance_cv", "importance CV", "{:.3f}", "importance less even (higher CV)", "importance more even (lower CV)"),
    ("mean_js", "mean JS (bits)", "{:.3f}", "heads further apart (less redundant)", "heads closer (more redundant)"),
    ("near_duplicates", "near-duplicate heads", "{:.1f}", "more near-duplicate heads", "fewer near-duplicate heads"),
)


def specialisation(a: dict) -> dict[str, float]:
    """One analysed run as numbers comparable across runs.

    bleu: the full model's BLEU (greedy, the analysis's sentences). prunable: the share of all heads removed
    in order of importance before BLEU first drops by more than the tolerance. kept_area: the area under that
    pruning curve over 0-100% removed, as a share of the full model's BLEU (1 = flat, pruning costs
    nothing). evenness: normalised entropy H(p) / log h of p = importance / sum over a layer's heads,
    averaged over layers and kinds (1 = every head equally important, 0 = one head carries the layer).
    importance_cv: a layer's sd / mean of importance, averaged likewise (0 = all equal). Evenness sits near 1
    whenever no head is negligible (0.995 on our h = 8 models), where the CV still separates models.
    mean_js: mean pairwise Jensen-Shannon divergence of the heads' attention, averaged over kinds.
    near_duplicates: how many learned heads are in a group of near-duplicates (closer than the analysis's
    redundancy threshold to another head of their kind), over all kinds. Fixed heads are not counted: the
    same pattern in every layer makes twins by construction; a learned head that copies one is.
    """
    pool = a["pruning"]["pools"]["all"]
    grid, curve, full = a["pruning"]["fractions"], pool["importance"]["bleu"], a["full"]["bleu"]
    area = sum((x1 - x0) * (y0 + y1) / 2 for x0, x1, y0, y1 in zip(grid, grid[1:], curve, curve[1:]))
    layers = [scores for kind in a["importance"]["raw"].values() for scores in kind]
    red = a.get("redundancy", {}).get("kinds", {})
    return {
        "bleu": full,
        "prunable": pool["prunable"]["importance"],
        "kept_area": area / (grid[-1] - grid[0]) / full if full > 0 else math.nan,
        "evenness": statistics.fmean(_evenness(s) for s in layers),
        "importance_cv": statistics.fmean(_cv(s) for s in layers),
        "mean_js": statistics.fmean(k["mean_js_bits"] for k in red.values()) if red else math.nan,
        "near_duplicates": float(
            sum(
                not pattern_of(a.get("fixed_heads"), kind, int(name.rsplit("H", 1)[1]))
                for kind, k in red.items()
                for g in k.get("groups", [])
                for name in g
            )
        )
        if red
        else math.nan,
    }


def _evenness(scores: list[float]) -> float:
    total = sum(scores)
    if len(scores) < 2 or total <= 0:
        return math.nan
    return -sum(s / total * math.log(s / total) for s in scores if s > 0) / math.log(len(scores))


def _cv(scores: list[float]) -> float:
    mean = statistics.fmean(scores)
    return statistics.pstdev(scores) / mean if len(scores) > 1 and mean > 0 else math.nan


def comparisons(groups: dict[str, list[dict]], base_name: str) -> list[dict]:
    """Every group (a cell's name: its runs' `specialisation`s) against the base group, measure by measure:
    means, sds, n, Welch's p over seeds and its Holm adjustment over all the comparisons."""
    out = []
    for name in (n for n in groups if n != base_name):
        for key, *_ in MEASURES:
            base = [v for v in (r[key] for r in groups[base_name]) if not math.isnan(v)]
            cell = [v for v in (r[key] for r in groups[name]) if not math.isnan(v)]
            if base and cell:
                constant = len(set(base)) == 1 and len(set(cell)) == 1  # no spread at all: nothing to test against
                out.append(
                    {
                        "cell": name,
                        "base": base_name,
                        "measure": key,
                        "base_values": base,
                        "values": cell,
                        "p": None if constant else seed_test(base, cell),
                    }
                )
    for c, p in zip(out, holm([c["p"] for c in out])):
        c["p_holm"] = p
    return out


def verdict_words(found: list[dict], alpha: float = 0.05) -> list[str]:
    """Per cell, one sentence: the direction of each measure against the base, with mean ± sd and
    Welch/Holm p, and which differences survive the correction."""
    spec = {key: (fmt, up, down) for key, _, fmt, up, down in MEASURES}
    words = []
    for name in dict.fromkeys(c["cell"] for c in found):  # the cells in the report's order, once each
        these = [c for c in found if c["cell"] == name]
        parts, real = [], []
        for c in these:
            fmt, up, down = spec[c["measure"]]
            (m1, s1), (m0, s0) = mean_sd(c["values"]), mean_sd(c["base_values"])
            said = up if m1 > m0 else down
            if c["p"] is not None:
                p = f"Welch p {fmt_p(c['p'])}, Holm {fmt_p(c['p_holm'])}"
            else:
                p = (
                    "one seed in a cell: no spread, no test"
                    if min(len(c["values"]), len(c["base_values"])) < 2
                    else "no seed spread: no test"
                )
            parts.append(f"{said} ({_pm(m1, s1, fmt)} vs {_pm(m0, s0, fmt)}; {p})")
            if c["p_holm"] is not None and c["p_holm"] < alpha:
                real.append(said)
        n1, n0 = len(these[0]["values"]), len(these[0]["base_values"])
        tested = any(c["p"] is not None for c in these)
        tail = (
            f"Larger than the seed spread after Holm (p < {alpha:g}): {', '.join(real)}."
            if real
            else f"None of these differences is larger than the seed spread after Holm (p < {alpha:g})."
            if tested
            else "Nothing was tested: a seed spread needs two analysed seeds in each cell."
        )
        seeds = lambda n: f"{n} seed" + ("" if n == 1 else "s")  # noqa: E731
        words.append(
            f"{name} against {these[0]['base']} ({seeds(n1)} vs {seeds(n0)}): " + "; ".join(parts) + ". " + tail
        )
    return words


def _pm(mean: float, sd: float | None, fmt: str) -> str:
    return fmt.format(mean) + (f" ± {fmt.format(sd)}" if sd is not None else "")


def report_section(run_dirs: dict[str, list[Path]], out_dir: Path, sweep: str, base: str | None) -> str:
    """A markdown section comparing the head analyses of a sweep's cells.

    run_dirs: {cell name: its run directories}, in the report's order; only runs with analysis/analysis.json
    count. base: the base cell's name, which every other cell is compared with; when it is None (no cell
    tagged base) or none of its runs is analysed, the cells are tabulated but not compared: comparing with
    whichever cell happens to come first would read as if it were the base.

    Overlays the pruning curves (importance order, all heads), one line per cell, mean ± sd over seeds, into
    out_dir/<sweep>_pruning.png (linked by file name, so the markdown belongs in out_dir; per sweep, as every
    sweep's report shares out_dir), tabulates the `specialisation` measures and says what differs beyond the
    seed spread; with fixed heads, what the fixed and the learned heads each do.
    """
    title = "## Head analysis: importance, pruning, redundancy by cell"
    groups, skipped = _load(run_dirs)
    if not groups:
        return (
            f"{title}\n\nNo run has `analysis/analysis.json` yet: run "
            "`make analyze CKPT=<run dir>` for each run of the sweep.\n"
        )
    analyses = [a for runs in groups.values() for a in runs]
    png = _plot_curves(groups, analyses[0]["pruning"]["fractions"], Path(out_dir) / f"{sweep}_pruning.png")
    measured = {name: [specialisation(a) for a in runs] for name, runs in groups.items()}
    rows = []
    for name, runs in measured.items():
        row = [name, len(runs)]
        for key, _, fmt, *_ in MEASURES:
            values = [v for v in (r[key] for r in runs) if not math.isnan(v)]
            row.append(_pm(*mean_sd(values), fmt) if values else "–")
        rows.append(row)

    s = analyses[0]["settings"]
    compared = base in groups and len(groups) > 1
    against = (
        (f", each cell against {base} (Welch's t-test over seeds, Holm-corrected over every comparison below)")
        if compared
        else ""
    )
    lines = [
        title,
        "",
        f"Per run, on the first {s['sentences_decoded']} sentences of `{analyses[0]['split']}` (greedy BLEU): heads "
        f"removed in order of increasing importance (Michel et al. 2019) over all attention kinds, {s['step']:.0%} "
        f"per step. **Prunable**: the largest share removed before BLEU first falls more than {s['tolerance']:g} "
        "below the full model's. **BLEU kept (area)**: the area under the pruning curve as a share of the full "
        "model's BLEU (higher = flatter). **Importance evenness**: normalised entropy of importance over a layer's "
        "heads, averaged over layers (1 = all heads equally important); **importance CV**: a layer's sd / mean of "
        "importance, averaged over layers (0 = all equal). **Mean JS**: mean pairwise Jensen-Shannon "
        "divergence between heads' attention (lower = more redundant); **near-duplicate heads**: how many heads "
        f"are within {s.get('redundancy_threshold', 0.2):g} bits of another head of their kind "
        "(learned heads only: copies of a fixed pattern are twins by construction). Mean ± sd over "
        f"seeds{against}; the test BLEU (beam) with its paired bootstrap is in the table above.",
        "",
        figure(
            png.name,
            "Pruning curves: BLEU as heads are removed in order of increasing importance, over all "
            f"attention kinds, one line per cell, {seeds_words(groups)}.",
        ),
        "",
    ]
    lines += [*table(["cell", "runs", *[col for _, col, *_ in MEASURES]], rows), ""]
    words = (
        verdict_words(comparisons(measured, base))
        if compared
        else []
        if base in groups
        else [f"No run of the base cell{f' ({base})' if base else ''} is analysed: no cell is compared with it."]
    )
    lines += [f"- {w}" for w in words + _twin_words(analyses)] + [""]
    lines += fixed_vs_learned_lines(groups, base if base in groups else None)
    if skipped:
        lines += [f"({skipped} analysed run(s) left out: analysed with another --step.)", ""]
    return "\n".join(lines)


def _load(run_dirs: dict[str, list[Path]]) -> tuple[dict[str, list[dict]], int]:
    """The analyses by cell, in the given order, cells without one left out; and how many analyses were
    left out for another pruning grid than the first one's (their curves cannot be averaged point by point)."""
    groups: dict[str, list[dict]] = {}
    grid, skipped = None, 0
    for name, dirs in run_dirs.items():
        for a in (read_analysis(d) for d in dirs):
            if a is None:
                continue
            grid = grid or a["pruning"]["fractions"]
            if a["pruning"]["fractions"] != grid:
                skipped += 1
                continue
            groups.setdefault(name, []).append(a)
    return groups, skipped


def _twin_words(analyses: list[dict]) -> list[str]:
    """Does redundancy predict cheap pruning? Spearman's rho per kind, summarised over the runs."""
    per_kind: dict[str, list[float]] = {}
    for a in analyses:
        for kind, k in a.get("redundancy", {}).get("kinds", {}).items():
            rho = k["twin_vs_loss_increase"]["spearman_rho"]
            if rho is not None and not math.isnan(rho):
                per_kind.setdefault(kind, []).append(rho)
    if not per_kind:
        return []
    said = ", ".join(
        f"{KIND_NAMES[kind]} {statistics.fmean(r):+.2f}"
        + (f" ± {statistics.stdev(r):.2f}" if len(r) > 1 else "")
        + f" (n = {len(r)})"
        for kind, r in per_kind.items()
    )
    return [
        "Does redundancy predict cheap pruning? Spearman's ρ between a head's JS to its nearest twin and the "
        f"loss increase when it alone is removed (whole split), mean ± sd over runs: {said} (ρ > 0: heads with a "
        "near twin cost less)."
    ]


def seeds_words(groups: dict[str, list]) -> str:
    """What a line of the pruning plot is: a mean ± sd only where a cell has more than one seed."""
    counts = {len(runs) for runs in groups.values()}
    if counts == {1}:
        return "one seed per cell (no spread)"
    if 1 in counts:
        return "mean ± sd over seeds where a cell has several, one seed (no band) where it has one"
    return "mean ± sd over seeds"


def _plot_curves(groups: dict[str, list[dict]], grid: list[float], png: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    xs = [100 * f for f in grid]
    for name, runs in groups.items():
        curves = [a["pruning"]["pools"]["all"]["importance"]["bleu"] for a in runs]
        mean = [statistics.fmean(c) for c in zip(*curves)]
        (line,) = ax.plot(xs, mean, "o-", ms=3, label=f"{name} (n={len(curves)})")
        if len(curves) > 1:
            sd = [statistics.stdev(c) for c in zip(*curves)]
            ax.fill_between(
                xs,
                [m - d for m, d in zip(mean, sd)],
                [m + d for m, d in zip(mean, sd)],
                color=line.get_color(),
                alpha=0.15,
                lw=0,
            )
    ax.set_xlabel("heads removed, all attention kinds (%)")
    ax.set_ylabel("BLEU")
    ax.set_title(f"pruning by importance, {seeds_words(groups)}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, png, dpi=110)
    plt.close(fig)
    return png
