"""Is a difference real? sacreBLEU's paired bootstrap of a cell against the base on the test sentences
(seeds pooled), read from the runs' hypotheses and references. Holm's correction, Welch's t-test over
seeds and Kendall's tau are in headsweep.reporting.stats (the analysis comparison uses them too)."""

from __future__ import annotations

import functools
from pathlib import Path

from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from headsweep.config import CONF_DIR, compose
from headsweep.data import DataError, read_lines, split_files
from headsweep.data.joining import join_lines

# the statistics themselves live below both analysis/ and reports/; imported here, where they were
from headsweep.reporting.stats import holm, mean_sd, ranking_agreement, seed_test  # noqa: F401
from headsweep.reports.cells import Cell, ReportError, Run, hypotheses_path
from headsweep.store import local_path


def read_text_lines(path: Path) -> list[str]:
    """The trainer's own reader: .gz, strict UTF-8, \\n only."""
    try:
        return read_lines(Path(path))
    except DataError as e:
        raise ReportError(str(e)) from None


def run_data_dir(data: dict) -> Path:
    """A run's data.dir; a relative one that is not there from here is relative to where `make sweep` ran:
    the repository. Where that checkout's corpus is not on this machine (a record names no machine's
    directories: a run trained on a copy in <checkout>/.data/multi30k), the corpus this checkout is
    configured with (conf/data: data.dir), the same files by name."""
    data_dir = Path(data["dir"])
    if data_dir.is_absolute() or data_dir.is_dir():
        return data_dir
    return CONF_DIR.parent / data_dir if (CONF_DIR.parent / data_dir).is_dir() else configured_data_dir()


@functools.cache
def configured_data_dir() -> Path:
    configured = Path(compose([]).data.dir)
    return configured if configured.is_absolute() else CONF_DIR.parent / configured


def references(run: Run) -> list[str]:
    """The test references as the run saw them: its data.dir/test_split.tgt_lang[.gz], cut at limit_eval, and
    joined data.join lines at a time as its examples were (data.joining; a run from before the setting: 1)."""
    data = run.results["config"]["data"]
    split = data["test_split"]
    listed = run.results.get("references", {}).get(split)
    if listed and local_path(listed).is_file():
        path = local_path(listed)
    else:
        try:
            path = split_files(run_data_dir(data), split, data["tgt_lang"])
        except DataError as e:
            raise ReportError(f"references of {run.dir.name}: {e}") from None
    lines = read_text_lines(path)
    return join_lines(lines[: data["limit_eval"]] if data.get("limit_eval") else lines, data.get("join", 1))


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
