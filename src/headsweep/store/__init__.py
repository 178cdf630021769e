"""The run store: one experiment, one run, one identity.

- record (headsweep.store.record): results.json as a typed `Record`, read and written only through
  `read_record` / `write_record`, and the identity of an experiment (`experiment_settings`, `experiment_key`).
- store (headsweep.store.store): each experiment once, in results/runs/<key>/; results/<sweep>/<job> a view
  (a relative symlink ../runs/<key>); one writer per key (`key_lock`); `publish_dir`, the atomic folder publish.
- migrate (headsweep.store.migrate): results/ of the old layout into the store, without training:

    python -m headsweep.store migrate [--results results]
    python -m headsweep.store unshow results/<sweep>/<job> ...   (the view goes; the run stays in the store)

record imports nothing of the store, store imports record, migrate both; this file only gathers their names.
"""

from headsweep.config import ROOT
from headsweep.store.record import (
    _V1_READ,
    ADDED_SETTINGS,
    EXPERIMENT_KEYS,
    NOT_EXPERIMENT,
    RESULTS,
    SCHEMA_VERSION,
    CorruptRecord,
    Record,
    as_seen,
    experiment_key,
    experiment_settings,
    flat_key,
    flatten_config,
    local_path,
    map_strings,
    model_key,
    read_record,
    relative_paths,
    saved_settings,
    schema_note,
    settings_diff,
    settings_key,
    stopped_short,
    strings,
    write_record,
)
from headsweep.store.store import (
    LOCKS,
    RUNS,
    StoreError,
    add_view,
    find,
    key_lock,
    link_view,
    publish_dir,
    show,
    store_dir,
    stored_runs,
    train_once,
    unshow,
    view_of,
)

__all__ = [
    "ADDED_SETTINGS",
    "EXPERIMENT_KEYS",
    "LOCKS",
    "NOT_EXPERIMENT",
    "RESULTS",
    "ROOT",
    "RUNS",
    "SCHEMA_VERSION",
    "_V1_READ",
    "CorruptRecord",
    "Record",
    "StoreError",
    "add_view",
    "as_seen",
    "experiment_key",
    "experiment_settings",
    "find",
    "flat_key",
    "flatten_config",
    "key_lock",
    "link_view",
    "local_path",
    "map_strings",
    "model_key",
    "publish_dir",
    "read_record",
    "relative_paths",
    "saved_settings",
    "schema_note",
    "settings_diff",
    "settings_key",
    "show",
    "stopped_short",
    "store_dir",
    "stored_runs",
    "strings",
    "train_once",
    "unshow",
    "view_of",
    "write_record",
]
