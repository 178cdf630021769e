"""The statistics every report shares: mean ± sd over seeds, Holm's correction for several comparisons
with one base, Welch's t-test over seeds' scores, and Kendall's tau between two rankings (scipy)."""

from __future__ import annotations

import statistics

from scipy.stats import kendalltau, ttest_ind


def mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm's step-down adjustment for comparing several cells with one base: adjusted p_(i) =
    max over j <= i of min(1, (m - j + 1) p_(j)) in increasing order of p (None stays None)."""
    given = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m, out, running = len(given), [None] * len(p_values), 0.0
    for rank, (p, i) in enumerate(given):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def seed_test(base: list[float], cell: list[float]) -> float | None:
    """Welch's t-test of the per-seed scores (scipy): is the difference larger than the seed spread?"""
    if len(base) < 2 or len(cell) < 2:
        return None
    return float(ttest_ind(cell, base, equal_var=False).pvalue)


def ranking_agreement(early: list[float], late: list[float]) -> float | None:
    """Kendall's tau (scipy) between the cells' order at two points of training: 1 = the same ranking."""
    if len(early) < 2:
        return None
    return float(kendalltau(early, late).statistic)
