"""The stuck runs' words on a sweep's page: how the threshold was chosen, each cell's BLEU with and without its stuck
seeds, the section and the one-line note. The rule itself (which run is stuck) is stuck.py's."""

from __future__ import annotations

from pathlib import Path

from headsweep.reporting.markdown import table as markdown_table
from headsweep.reports.sweep.cells import Cell
from headsweep.reports.sweep.stuck import (
    EARLY_SHARE,
    FLOOR_SPREADS,
    MIN_GROUP,
    Early,
    Threshold,
    correlation,
    disagreeing,
    gap_words,
    is_stuck,
)
from headsweep.reports.sweep.table import display, fmt

# ----------------------------------------------------------------------------- words


def threshold_words(t: Threshold) -> str:
    """The threshold, and how it was chosen, with its numbers."""
    if t.how == "given":
        return f"threshold {t.value:.3f}, given with --stuck-threshold (the data's rule not applied)"
    pooled = (
        f"the early excess of the {t.n_runs} distinct runs of the {t.n_sweeps} calibration sweeps (chosen before "
        "the threshold was, so that a new sweep cannot move an old sweep's flags)"
        if t.calibration
        else f"the early excess of the {t.n_runs} distinct runs of {t.n_sweeps} sweep{'s' * (t.n_sweeps != 1)} "
        f"in the results folder"
    )
    rule = (
        f"the midpoint of the widest gap between consecutive values of {pooled}, among the gaps above a floor "
        f"(the base runs' median excess plus {FLOOR_SPREADS} seed sds; seed sd: the sd of the {t.n_base} base "
        f"runs' excesses around their own cell's median) that leave at least {MIN_GROUP} runs above them"
    )
    if t.how == "data":
        return (
            f"threshold {t.value:.3f}, chosen from the data: {rule}; seed sd {t.seed_sd:.3f}, floor "
            f"{t.floor:.3f}, widest gap {t.gap[0]:.3f} → {t.gap[1]:.3f}"
        )
    why = "fewer than two base runs" if t.seed_sd is None else "no such gap"
    return (
        f"threshold {t.value:.3f}: the rule ({rule}) on the 112 shipped runs; the runs here cannot support "
        f"the rule ({why})"
    )


def bleu_text(mean_and_sd: tuple[float | None, float | None], n: int) -> str:
    return "—" if mean_and_sd[0] is None else f"{fmt(mean_and_sd[0], 2, mean_and_sd[1])} (n = {n})"


def with_without_table(cells: list[Cell]) -> list[str]:
    """Each cell's mean test BLEU over all its runs and without its stuck ones, and the Δ against the cell
    the main table compares it with, stuck runs left out on both sides."""
    by_label = {c.label: c for c in cells}
    rows = []
    for c in cells:
        r = c.row
        ref = by_label.get(r.get("against") or "") or next((o for o in cells if o.base), None)
        delta = (
            None
            if c.base or ref is None or r["bleu_kept"][0] is None or ref.row["bleu_kept"][0] is None
            else r["bleu_kept"][0] - ref.row["bleu_kept"][0]
        )
        stuck = ", ".join(f"s{s}" for s in r["stuck_seeds"]) or "—"
        rows.append(
            [
                display(c),
                f"{len(r['stuck_seeds'])} of {r['checked']}" if r["checked"] else "not checked",
                stuck,
                bleu_text(r["bleu_all"], len(c.runs)),
                bleu_text(r["bleu_kept"], r["n_kept"]),
                "—" if delta is None else f"{delta:+.2f}",
            ]
        )
    return markdown_table(
        [
            "cell",
            "stuck",
            "stuck seeds",
            "BLEU test, every run",
            "BLEU test, stuck runs left out",
            "Δ BLEU test, stuck left out",
        ],
        rows,
        align=True,
    )


def section(cells: list[Cell], early: dict[Path, Early], t: Threshold) -> list[str]:
    """The report's "Stuck runs" section: the rule, the flagged runs, the cells with and without them, the
    cells whose seeds disagree, and how well early val loss predicts test BLEU."""
    steps = sorted({e.step for e in early.values()})
    runs = [(c, r) for c in cells for r in c.runs]
    stuck = [(c, r, early[r.dir]) for c, r in runs if r.dir in early and is_stuck(early[r.dir], t.value)]
    nets = {e.net_reference for e in early.values() if e.net is not None}
    unchecked = [r.dir.name for _, r in runs if r.dir not in early]
    refs = sorted({e.reference for e in early.values()})
    lines = ["## Stuck runs", ""]
    if not early:
        return lines + ["No run has a val loss in its metrics CSV: nothing to check for an early plateau.", ""]
    lines.append(
        f"- Early val loss: each run's val loss at the validation nearest {EARLY_SHARE:.0%} of "
        f"trainer.max_steps (step{'s' * (len(steps) > 1)} {', '.join(map(str, steps))}), minus the median "
        f"of its reference cell's runs there (the base, or the base at the cell's model size, at the cell's own "
        f"peak rate where it has runs there, its LR-grid run included: {', '.join(refs)}). A run is stuck on an "
        f"early plateau when that excess is above the "
        f"{threshold_words(t)}."
    )
    if nets:  # row C's sizes without a base of their size: their own median alone cannot see a cell stuck whole
        lines.append(
            "- A cell that is its own size's reference (no base of its size) is also read against the base at its "
            f"rate ({', '.join(sorted(nets))}), net of the gap at the end: its early gap minus its end gap. A model "
            "of another size keeps about its final gap throughout; a cell stuck whole on a plateau it left later "
            "sits further above early. Stuck when that is above the same threshold."
        )
    if stuck:
        lines.append(
            f"- Stuck ({len(stuck)} of {len(runs) - len(unchecked)} runs checked; each with its gap to the "
            "reference early and at the end, which a plateau keeps and a slower learner narrows): "
            + "; ".join(
                f"`{r.dir.name}` {e.loss:.3f} at step {e.step} ({gap_words(e, step=False)}), test BLEU "
                f"{r.results['metrics']['test/bleu']:.2f}"
                for c, r, e in stuck
            )
            + "."
        )
    else:
        lines.append(
            f"- No run is stuck: every checked run's excess is at most {t.value:.3f} "
            f"(the largest: {max(e.excess for e in early.values()):+.3f})."
        )
    split = disagreeing(cells)
    if split:
        named = [
            f"{display(c)} (stuck: seed{'s' * (len(c.row['stuck_seeds']) > 1)} "
            f"{', '.join(map(str, c.row['stuck_seeds']))} of {c.row['checked']})"
            for c in split
        ]
        lines.append(
            "- Seeds disagree (some stuck, some not), so the cell's mean mixes two outcomes: " + "; ".join(named) + "."
        )
    elif stuck:
        lines.append("- No cell's seeds disagree: a cell's seeds are all stuck or none is.")
    if unchecked:
        lines.append(f"- Not checked (no val loss in the metrics CSV): {', '.join(unchecked)}.")
    pairs = [(early[r.dir].loss, r.results["metrics"]["test/bleu"]) for _, r in runs if r.dir in early]
    r_sweep = correlation(pairs)
    if r_sweep is not None:
        # every sweep's runs pooled is on the index, which every `make report` rewrites: here it would go stale
        # whenever another sweep's run lands
        lines.append(
            f"- Early val loss against final test BLEU (Pearson) over this sweep's {len(pairs)} runs: "
            f"r = {r_sweep:.2f} (every sweep's runs pooled: [the index](index.md#across-sweeps))."
        )
    lines.append("")
    if stuck:
        lines += [
            "Every run stays in the table above and in every p-value; here each cell's test BLEU with and "
            "without its stuck runs (mean ± sd over seeds, n runs):",
            "",
            *with_without_table(cells),
            "",
        ]
    return lines


def note(cells: list[Cell], early: dict[Path, Early], t: Threshold) -> str:
    """The one bullet above the table."""
    n = sum(len(c.row["stuck_seeds"]) for c in cells)
    if not early:
        return "Stuck runs: not checked (no val loss in any metrics CSV)."
    if not n:
        return f"No run is stuck on an early plateau (early val loss threshold {t.value:.3f}; see Stuck runs)."
    split = disagreeing(cells)
    return (
        f"{n} run{'s' * (n != 1)} stuck on an early plateau (early val loss more than {t.value:.3f} above the "
        f"base's median; column 'stuck'); kept in every number, shown without them under Stuck runs"
        + (f"; seeds disagree in {', '.join(display(c) for c in split)}" if split else "")
        + "."
    )
