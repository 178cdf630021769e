"""The statistics every report shares: mean ± sd over seeds, Holm's correction for several comparisons
with one base, Welch's t-test over seeds' scores, Kendall's tau between two rankings (scipy), and ordinary
least squares with confidence intervals (the cross-sweep fit, the budget view's interaction), a paired t-interval
(make budgets' cooldown shapes on one trunk), the difference of two cells' means over seeds with its interval
(reports.pages.budgets) and a contrast of several cells' means (a cell's Δ at one length minus its Δ at another)."""

from __future__ import annotations

import math
import statistics

import numpy as np
from scipy import stats
from scipy.stats import kendalltau, ttest_ind


def mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def paired_interval(diffs: list[float]) -> tuple[float, float | None]:
    """(mean of paired differences, half-width of its 95% t-interval with n - 1 degrees of freedom; None for one)."""
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return mean, None
    return mean, float(stats.t.ppf(0.975, len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs)))


def difference_interval(base: list[float], cell: list[float], spread: tuple[float, int] | None = None) -> dict:
    """cell mean - base mean over seeds with a 95% interval and two-sided p: {diff, lo, hi, p, method}.
    Welch's t (scipy) where both have 2+ seeds; where the cell has one seed, its spread is taken to be the base's
    (t with n_base - 1 degrees of freedom, standard error sd_base * sqrt(1 + 1/n_base)): a budgets cell trains
    one seed, the base three. spread=(sd, dof): that seed sd instead of this base's own (the base's pooled over
    budgets: three seeds can agree to 0.01 BLEU by chance). No interval (lo, hi, p None) without 2+ seeds of the
    base, or where the spread is 0."""
    diff = statistics.fmean(cell) - statistics.fmean(base)
    out = {"diff": diff, "lo": None, "hi": None, "p": None, "method": None}
    if len(base) < 2 or not cell:
        return out
    if len(cell) >= 2:
        if statistics.stdev(cell) == 0 and statistics.stdev(base) == 0:
            return out
        test = ttest_ind(cell, base, equal_var=False)
        ci = test.confidence_interval(0.95)
        lo, hi, p, method = float(ci.low), float(ci.high), float(test.pvalue), "Welch"
    else:
        sd, dof = spread if spread is not None else (statistics.stdev(base), len(base) - 1)
        se = sd * math.sqrt(1 + 1 / len(base))
        if se == 0:
            return out
        half = float(stats.t.ppf(0.975, dof)) * se
        lo, hi, p, method = diff - half, diff + half, float(2 * stats.t.sf(abs(diff) / se, dof)), "base spread"
    if not all(math.isfinite(v) for v in (lo, hi, p)):  # no spread on either side: nothing to test against
        return out
    return {**out, "lo": lo, "hi": hi, "p": p, "method": method}


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


def ols(columns: dict[str, list[float]], y: list[float]) -> dict:
    """Ordinary least squares y = b0 + sum_k b_k x_k over every observation: each term's coefficient, its
    standard error, 95% CI (t with n - p degrees of freedom) and two-sided p. The residual variance is
    pooled over all observations, so it assumes one noise level for all of them."""
    X = np.column_stack([np.ones(len(y)), *columns.values()])
    y = np.asarray(y, dtype=float)
    n, k = X.shape
    if n <= k:
        raise ValueError(f"{n} observations cannot fit {k} coefficients")
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    resid = y - X @ beta
    sigma2 = resid @ resid / (n - k)
    se = np.sqrt(np.diag(sigma2 * np.linalg.pinv(X.T @ X)))
    t = stats.t.ppf(0.975, n - k)
    pvals = 2 * stats.t.sf(np.abs(beta / np.where(se > 0, se, np.inf)), n - k)
    r2 = 1 - (resid @ resid) / max(((y - y.mean()) ** 2).sum(), 1e-12)
    return {
        "n": n,
        "dof": n - k,
        "r2": float(r2),
        "sigma": float(math.sqrt(sigma2)),
        "terms": {
            name: {"coef": float(b), "se": float(s), "lo": float(b - t * s), "hi": float(b + t * s), "p": float(pv)}
            for name, b, s, pv in zip(["intercept", *columns], beta, se, pvals)
        },
    }


def contrast(groups: list[tuple[float, list[float]]]) -> dict:
    """sum_i a_i mean(x_i) over independent groups (a_i, x_i) with its 95% interval and two-sided p, Welch's
    unequal variances carried to several groups (Satterthwaite's degrees of freedom). With (+1, cell), (-1, base)
    it is Welch's t-test; with four cells, a difference of two differences (an interaction) over seeds.
    {estimate, lo, hi, p, dof}; lo, hi, p, dof None where a group has fewer than 2 values or nothing varies."""
    estimate = sum(a * statistics.fmean(x) for a, x in groups)
    out = {"estimate": estimate, "lo": None, "hi": None, "p": None, "dof": None}
    if any(len(x) < 2 for _, x in groups):
        return out
    parts = [a * a * statistics.variance(x) / len(x) for a, x in groups]
    se2 = sum(parts)
    if se2 == 0:
        return out
    dof = se2**2 / sum(v * v / (len(x) - 1) for v, (_, x) in zip(parts, groups))
    se = math.sqrt(se2)
    half = float(stats.t.ppf(0.975, dof)) * se
    p = float(2 * stats.t.sf(abs(estimate) / se, dof))
    return {**out, "lo": estimate - half, "hi": estimate + half, "p": p, "dof": dof}
