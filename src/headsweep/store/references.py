"""A run's test references as it saw them, read from what the run recorded: the file its results.json names,
else its data.dir's test split, cut at limit_eval and joined data.join lines at a time (data.joining). The one
reader of them: the report's paired bootstrap (reports.sweep.significance) and the re-scoring of the stored runs
(store.results_check) both use it."""

from __future__ import annotations

import functools
from pathlib import Path

from headsweep.config import CONF_DIR, compose
from headsweep.data import DataError, read_lines, split_files
from headsweep.data.joining import join_lines
from headsweep.store.record import local_path


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


def references(results: dict, name: str) -> list[str]:
    """The test references of the run `name` whose results.json is `results` (DataError, naming the run, when
    they cannot be read)."""
    data = results["config"]["data"]
    split = data["test_split"]
    listed = results.get("references", {}).get(split)
    if listed and local_path(listed).is_file():
        path = local_path(listed)
    else:
        try:
            path = split_files(run_data_dir(data), split, data["tgt_lang"])
        except DataError as e:
            raise DataError(f"references of {name}: {e}") from None
    lines = read_lines(Path(path))
    return join_lines(lines[: data["limit_eval"]] if data.get("limit_eval") else lines, data.get("join", 1))
