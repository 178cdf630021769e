"""Is a difference real? A sweep page answers with Table 3's rule (headsweep.reports.pages.verdicts), over seeds,
the unit of replication: Δ test BLEU with its 95 % Welch interval and Welch's p (verdicts.welch), Holm's
adjustment across the page's cells, and a direction (better, worse) claimed only where Holm p < ALPHA; otherwise,
and with fewer than 2 seeds on a side, inconclusive; and, whatever its Δ, not comparable where the cell is
under-trained by Table 3's one rule (verdicts.under_trained: most compared seeds stuck, or val PPL over 1.5x the
base's). So a sweep page and Table 3's cannot disagree on one cell.

sacreBLEU's paired bootstrap of a cell against the base on the test sentences (seeds pooled), read from the
runs' hypotheses and references, stays on the page as test-set noise: it resamples sentences, not seeds, so it
ignores the seed-to-seed spread and calls gaps the seeds do not support (row B's d_k 8: bootstrap p <= 0.001,
Welch p 0.217); no verdict rests on it. Holm's correction, Welch's t-test and Kendall's tau are in
headsweep.reporting.stats (the analysis comparison uses them too)."""

from __future__ import annotations

from pathlib import Path

from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from headsweep.data import DataError, read_lines
from headsweep.reporting.markdown import p_words

# the statistics themselves live below both analysis/ and reports/; imported here, where they were
from headsweep.reporting.stats import holm, mean_sd, ranking_agreement, seed_test  # noqa: F401
from headsweep.reports.pages.verdicts import (
    ALPHA,
    LEVEL,
    NOT_COMPARABLE,
    CrossClass,
    compare,
    interval_text,
    mean_of,
    under_trained,
)
from headsweep.reports.sweep.cells import Cell, ReportError, Run, hypotheses_path
from headsweep.store.references import configured_data_dir, run_data_dir  # noqa: F401 (read here by lengths, tests)
from headsweep.store.references import references as stored_references


def read_text_lines(path: Path) -> list[str]:
    """The trainer's own reader: .gz, strict UTF-8, \\n only."""
    try:
        return read_lines(Path(path))
    except DataError as e:
        raise ReportError(str(e)) from None


def references(run: Run) -> list[str]:
    """The test references as the run saw them (store.references: the file the run names, else its data.dir,
    cut at limit_eval, joined data.join lines at a time)."""
    try:
        return stored_references(run.results, run.dir.name)
    except DataError as e:
        raise ReportError(str(e)) from None


def paired_bootstrap(base: Cell, cell: Cell, n_samples: int = 1000) -> dict:
    """sacreBLEU's paired bootstrap test of `cell` against `base` on the seeds both have, pooled."""
    base_by_seed = {r.seed: r for r in base.runs}
    seeds = sorted(base_by_seed.keys() & {r.seed for r in cell.runs})
    if not seeds:
        return {"p": None, "note": "no seed in common with the base"}
    cell_by_seed = {r.seed: r for r in cell.runs}
    base_hyps, cell_hyps, refs = [], [], []
    for s in seeds:
        b, c = read_text_lines(hypotheses_path(base_by_seed[s])), read_text_lines(hypotheses_path(cell_by_seed[s]))
        ref = references(base_by_seed[s])
        if not len(b) == len(c) == len(ref):
            return {"p": None, "note": f"seed {s}: {len(b)} base and {len(c)} cell hypotheses, {len(ref)} references"}
        base_hyps += b
        cell_hyps += c
        refs += ref
    test = PairedTest(
        [("base", base_hyps), (cell.label, cell_hyps)], {"BLEU": BLEU()}, [refs], test_type="bs", n_samples=n_samples
    )
    signatures, scores = test()
    base_score, cell_score = scores["BLEU"]
    return {
        "p": cell_score.p_value,
        "seeds": seeds,
        "pooled_delta": cell_score.score - base_score.score,
        "signature": str(signatures["BLEU"]),
    }


# ----------------------------------------------------------------------------- over seeds: the verdict

BETTER, WORSE, INCONCLUSIVE = "better", "worse", "inconclusive"


def seed_comparison(ref: Cell, cell: Cell, metric: str = "test/bleu") -> dict:
    """The cell against its reference over seeds on one machine class (verdicts.compare, Table 3's rule): Δ, the
    95 % interval of mean(cell) - mean(ref) and Welch's p (both None below 2 seeds on a side, or where neither side
    varies), the class, and the seeds of another class left out. A cell whose reference ran on none of its
    classes gets no Δ, only `cross_class`: the one line saying which base to train."""
    try:
        comp = compare(cell.runs, ref.runs, metric)
    except CrossClass as e:
        return {"delta": None, "interval": None, "p_welch": None, "n_base": 0, "cross_class": str(e)}
    return {
        "delta": comp.delta,
        "interval": None if comp.interval is None else list(comp.interval),
        "p_welch": comp.p,
        "n_base": comp.n_base,
        "n_compared": comp.n,
        "machine_class": comp.machine_class,
        "class_left_out": comp.left_out,
        "stopped_out": comp.stopped,
        "cross_class": None,
        "compared_seeds": [r.seed for r in comp.cell_runs],  # under_trained_verdicts counts the stuck among these
        "val_ppl_pair": (mean_of(comp.cell_runs, "val/ppl"), mean_of(comp.base_runs, "val/ppl")),
    }


def holm_verdicts(rows: list[dict]) -> None:
    """Holm across the page's cells on their Welch p (every cell compared once, as verdicts.judge does for a
    Table 3 page), then each compared cell's word: better or worse only where Holm p < ALPHA."""
    for row, adjusted in zip(rows, holm([r.get("p_welch") for r in rows])):
        row["p_holm"] = adjusted
        if row.get("delta") is None:
            row["verdict"] = None
        elif adjusted is not None and adjusted < ALPHA:
            row["verdict"] = BETTER if row["delta"] > 0 else WORSE
        else:
            row["verdict"] = INCONCLUSIVE


def under_trained_verdicts(rows: list[dict], stuck_rule: str = "report_stuck's rule") -> None:
    """After holm_verdicts and the stuck flags (report_stuck.flag): a compared cell under-trained by Table 3's rule
    (verdicts.under_trained) is not comparable, its Δ kept and its reason in row["under_trained"]. Its p stays in
    the Holm family, as on Table 3, so the other cells' words do not depend on this rule."""
    for row in rows:
        row["under_trained"] = None
        if row.get("delta") is None:
            continue
        seeds = row.get("compared_seeds") or []
        stuck = len(set(row.get("stuck_seeds") or ()) & set(seeds))
        why = under_trained(stuck, len(seeds), tuple(row.get("val_ppl_pair") or (None, None)), stuck_rule)
        row["under_trained"] = why
        if why:
            row["verdict"] = NOT_COMPARABLE


def no_interval(row: dict) -> str:
    """Why a compared cell has no interval, in words."""
    n, n_base = row.get("n_compared", row["n"]), row["n_base"]
    if n == n_base == 1:
        return "one seed per side: no interval"
    if n < 2 or n_base < 2:
        return f"{n} seed{'s' * (n != 1)} against {n_base}: fewer than 2 on a side, so no interval"
    return "no spread over seeds on either side: no interval"


def seed_words(row: dict) -> str:
    """ "95% CI [lo, hi], Welch p = .., Holm p = .." of a compared cell, or why it has no interval."""
    if row["interval"] is None:
        return no_interval(row)
    return (
        f"{LEVEL:.0%} CI {interval_text(row['interval'])}, Welch {p_words(row['p_welch'])}, "
        f"Holm {p_words(row['p_holm'])}"
    )


def verdict_line(name: str, against: str, row: dict) -> str:
    """One compared cell's verdict in words (holm_verdicts' word): 'worse than the base by 1.20 BLEU (95% CI
    [...], Welch p, Holm p)', or 'inconclusive: -0.40 BLEU against the base (...)'; a cell with no base on its
    machine class says so; seeds of another class, left out, are named."""
    if row.get("cross_class"):
        return f"{name}: no verdict: {row['cross_class']}."
    d = row["delta"]
    others = row.get("class_left_out")
    left = f" Left out (another machine class): {', '.join(others)}." if others else ""
    left += f" Left out (stopped short): {', '.join(row['stopped_out'])}." if row.get("stopped_out") else ""
    if row["verdict"] == NOT_COMPARABLE:
        words = seed_words(row)
        return (
            f"{name}: not comparable: {row['under_trained']}, so its Δ {d:+.2f} BLEU against {against} ({words}) "
            f"reads the training, not the setting.{left}"
        )
    if row["verdict"] in (BETTER, WORSE):
        return f"{name}: {row['verdict']} than {against} by {abs(d):.2f} BLEU ({seed_words(row)}).{left}"
    if row["interval"] is None:
        return f"{name}: inconclusive: {d:+.2f} BLEU against {against}; {seed_words(row)}.{left}"
    return f"{name}: inconclusive: {d:+.2f} BLEU against {against} ({seed_words(row)}).{left}"
