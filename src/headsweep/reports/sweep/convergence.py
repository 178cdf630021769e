"""Is the budget long enough? Two measurements each report states, and the verdict they lead to.

- The last third's share of the val-loss drop, per run: (L(2/3 T) - L(T)) / (L(first) - L(T)), where T is
  the step of the run's last validation, L(first) its val loss at its first validation (step 230 under
  budget=ablation: val loss at step 0 is not logged, so the drop counted is the one after it) and L(2/3 T)
  its val loss at two thirds of T, interpolated linearly between the validations on either side (767 of
  1,150: between 690 and 920). A converged run loses almost nothing in its last third.
- Kendall's tau between the cells' order by mean val BLEU at half the budget and at the end
  (summary.ranking_stability): 1 when the order was settled at half.

Rule: where the median share over the sweep's runs is above NOT_CONVERGED_SHARE (10%), the report says
"not converged: differences may be speeds of learning": a tenth of the loss still falling in the last third
means the curves are still descending, and a cell behind at the end may only be slower. On the 112
distinct shipped runs the median share is 18% (7% to 37%).
"""

from __future__ import annotations

import statistics

import numpy as np

from headsweep.reports.sweep.cells import Cell, Run, learning_curve

NOT_CONVERGED_SHARE = 0.10


def last_third_share(run: Run) -> dict | None:
    """{share, first, at, last} for one run: the share of its val-loss drop (first validation to last) that
    came after 2/3 of its last validation's step; None with fewer than two validations, when 2/3 of the
    way falls before the first one, or when val loss did not fall overall."""
    points = sorted((s, v["val/loss"]) for s, v in learning_curve(run).items() if "val/loss" in v)
    if len(points) < 2:
        return None
    (first, l_first), (last, l_last) = points[0], points[-1]
    at = 2 * last / 3
    drop = l_first - l_last
    if at < first or drop <= 0:
        return None
    l_at = float(np.interp(at, [s for s, _ in points], [v for _, v in points]))
    return {"share": (l_at - l_last) / drop, "first": first, "at": at, "last": last}


def convergence(cells: list[Cell]) -> dict:
    """Every run's share (by run directory), the median and range over them, and the verdict."""
    shares = {r.dir: last_third_share(r) for c in cells for r in c.runs}
    for c in cells:
        c.row["last_third"] = [(r.seed, shares[r.dir]["share"] if shares[r.dir] else None) for r in c.runs]
        c.row["last_third_words"] = "share of the val-loss drop in the last third of training: " + "; ".join(
            f"seed {seed} " + ("not measured" if share is None else f"{share:.0%}")
            for seed, share in c.row["last_third"]
        )
    values = [s["share"] for s in shares.values() if s]
    if not values:
        return {"n": 0, "unchecked": len(shares)}
    median = statistics.median(values)
    return {
        "n": len(values),
        "unchecked": len(shares) - len(values),
        "median": median,
        "min": min(values),
        "max": max(values),
        "firsts": sorted({s["first"] for s in shares.values() if s}),
        "lasts": sorted({s["last"] for s in shares.values() if s}),
        "not_converged": median > NOT_CONVERGED_SHARE,
    }


def words(conv: dict, ranking_lines: list[str], ranking: dict | None) -> list[str]:
    """The report's "Is the budget long enough?" section."""
    lines = ["## Is the budget long enough?", ""]
    if not conv["n"]:
        lines.append(
            "- Last third's share of the val-loss drop: no run has two validations with a falling val loss "
            "in its metrics CSV; not measured."
        )
    else:
        steps = lambda xs: " or ".join(map(str, xs))  # noqa: E731
        lines.append(
            f"- Val loss still falling at the end: a median {conv['median']:.0%} of each run's val-loss drop (from "
            f"its first validation, step {steps(conv['firsts'])}, to its last, step {steps(conv['lasts'])}) came in "
            f"the last third of training (range {conv['min']:.0%} to {conv['max']:.0%} over {conv['n']} runs; val "
            "loss at two thirds of the way interpolated between validations)"
            + (
                f"; {conv['unchecked']} run{'s' * (conv['unchecked'] != 1)} not measured (too few validations or no "
                "fall)"
                if conv["unchecked"]
                else ""
            )
            + "."
        )
    lines += [f"- {w}" for w in ranking_lines]
    if conv["n"] and conv["not_converged"]:
        settled = (
            ""
            if ranking is None or ranking.get("tau") is None
            else (
                " The cells' order did not change between half and full budget (tau 1), but the gaps between them may "
                "still."
                if ranking["tau"] == 1
                else f" The cells' order changed between half and full budget (tau {ranking['tau']:.2f})."
            )
        )
        lines.append(
            f"- **Not converged: differences may be speeds of learning.** More than "
            f"{NOT_CONVERGED_SHARE:.0%} of the val-loss drop (the median run's) came in the last third, so "
            f"a cell behind at this budget may only be learning slower.{settled}"
        )
    elif conv["n"]:
        lines.append(
            f"- The median run lost at most {NOT_CONVERGED_SHARE:.0%} of its val-loss drop in the last third: "
            "by this measure the curves have flattened at this budget."
        )
    return lines + [""]
