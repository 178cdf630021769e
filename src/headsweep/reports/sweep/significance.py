"""Is a difference real? sacreBLEU's paired bootstrap of a cell against the base on the test sentences
(seeds pooled), read from the runs' hypotheses and references. Holm's correction, Welch's t-test over
seeds and Kendall's tau are in headsweep.reporting.stats (the analysis comparison uses them too)."""

from __future__ import annotations

from pathlib import Path

from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from headsweep.data import DataError, read_lines

# the statistics themselves live below both analysis/ and reports/; imported here, where they were
from headsweep.reporting.stats import holm, mean_sd, ranking_agreement, seed_test  # noqa: F401
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
