"""The run store: one experiment, one run, one identity.

- Identity: `experiment_settings(flat)` are the settings that change what is trained and how it is scored
  (EXPERIMENT_KEYS, less NOT_EXPERIMENT); `experiment_key(config)` is the short hash of those settings and
  the seed of a resolved config. Everything that decides "the same experiment" (reuse when planning a
  sweep, the report's de-duplication) uses these two.
- Record: results.json, typed (`Record`, SCHEMA_VERSION), read and written only through `read_record` /
  `write_record`. A record without `schema_version` is version 1 (before the store); a half-written one
  raises `CorruptRecord`, one line naming the file, and is never deleted.
- Store: each experiment once, in results/runs/<key>/; the readable name results/<sweep>/<job> is a view, a
  relative symlink ../runs/<key>, listed in the record's `views` with the sweep's tags for it. One writer
  per key: `key_lock` (results/runs/.locks/<key>.lock) is held while a run of that key trains and exports.

    python -m headsweep.store migrate [--results results]

moves results/<sweep>/<job>/ directories of the old layout into the store (headsweep.store_migrate).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from headsweep.config import ROOT
from headsweep.data.files import atomic_write
from headsweep.model import resolve_heads
from headsweep.model.patterns import DEFAULT_PATTERNS
from headsweep.model.transformer import FIXED_KINDS

RESULTS = "results.json"
RUNS = "runs"  # results/runs/<key>/: the store
LOCKS = ".locks"  # results/runs/.locks/<key>.lock
SCHEMA_VERSION = 2  # 1: no schema_version, no views, machine paths; 2: the store's record

# What makes two runs the same experiment (and the same outputs: the analysis after training counts);
# paths, loggers, threads, launcher and names may differ.
# The device class counts: a GPU run is never taken for the CPU run of the same settings (bf16 kernels differ).
EXPERIMENT_KEYS = (
    "model.",
    "module.",
    "data.",
    "trainer.max_steps",
    "trainer.precision",
    "trainer.accelerator",
    "average_last",
    "analysis",
)
# Where the files come from, not what they hold (data.hub_fallback: where the same corpus is on the hub).
NOT_EXPERIMENT = ("data.dir", "data.cache_dir", "data.num_workers", "data.seed", "data.hub_fallback")


class StoreError(ValueError):
    """A view or store entry that cannot be written as asked; the one-line message says what to do."""


class CorruptRecord(ValueError):
    """A half-written or unreadable results.json: reports and planning leave it out with this line."""


# -- identity ---------------------------------------------------------------------------------------------

# Settings added after runs were recorded, with the value that reproduces those runs: a saved config
# without the key is read with it, so older reference results still compare as the same experiment.
ADDED_SETTINGS = {
    "model.concrete_gates": False,
    "module.l0_lambda": 0.0,
    "module.gate_lr": 0.05,
    "model.kv_heads": None,
    "model.fixed_heads": None,
    "model.fixed_patterns": None,
    # issue 42: runs before it used xavier on every attention projection, and decayed by
    # the larger of the step and time shares under every budget
    "model.init": "xavier",
    "model.init_kv_gain": 1.0,
    "module.decay_by": "steps_or_time",
}


def flatten_config(cfg: DictConfig) -> dict:
    """Leaf values by dotted key, interpolations unresolved, d_k/d_v as the model uses them, settings
    added since a saved run was made at their old behaviour (ADDED_SETTINGS)."""
    skip = {"seed", "run_name", "sweep", "cell", "tags", "paths", "logger"}
    out = {}

    def walk(node, prefix):
        for k, v in node.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict):
                walk(v, key + ".")
            else:
                out[key] = tuple(v) if isinstance(v, list) else v

    walk({k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items() if k not in skip}, "")
    out["model.d_k"], out["model.d_v"], _ = resolve_heads(
        out["model.d_model"], out["model.heads"], out["model.d_k"], out["model.d_v"]
    )
    for key, value in ADDED_SETTINGS.items():
        out.setdefault(key, value)
    _heads_as_used(out)
    return out


def _heads_as_used(out: dict) -> None:
    """kv_heads, fixed heads and their patterns as the model uses them, so that null and its meaning compare
    equal: kv_heads null is h; fixed_heads {kind: n} becomes one count per kind (0 where unset); null
    patterns are the default list."""
    out["model.kv_heads"] = resolve_heads(None, out["model.heads"], kv_heads=out["model.kv_heads"]).kv_heads
    out.pop("model.fixed_heads", None)  # a dict was walked into model.fixed_heads.<kind> leaves
    for kind in FIXED_KINDS:
        out.setdefault(f"model.fixed_heads.{kind}", 0)
    if out["model.fixed_patterns"] is None:
        out["model.fixed_patterns"] = DEFAULT_PATTERNS


def experiment_settings(flat: dict) -> dict:
    """The experiment settings of a flattened config (flatten_config: settings added since a saved
    run was made read at their old behaviour, so an old record and a new job compare equal)."""
    return {
        k: v
        for k, v in flat.items()
        if k.startswith(EXPERIMENT_KEYS)
        and ".".join(k.split(".")[:2]) not in NOT_EXPERIMENT
        and not k.startswith("module.model.")
    }


_SAVED: dict[str, dict] = {}


def saved_settings(config: dict) -> dict:
    """A saved run's experiment settings, flattened once per config: planning compares each job with every
    finished run, and building the OmegaConf tree each time made it take a minute."""
    key = json.dumps(config, sort_keys=True, default=str)
    if key not in _SAVED:
        _SAVED[key] = experiment_settings(flatten_config(OmegaConf.create(config)))
    return _SAVED[key]


def _unresolved(value) -> bool:
    return isinstance(value, str) and "${" in value


def settings_key(settings: dict, seed) -> str:
    """12 hex digits of sha256 over the canonical settings and seed. Values compare by repr (1 and 1.0
    differ, as they did when runs were compared key by key); a null and a missing key are the same."""
    canon = {k: repr(v) for k, v in settings.items() if v is not None and not _unresolved(v)}
    text = json.dumps({"settings": canon, "seed": seed}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def experiment_key(config: dict) -> str:
    """The key of a resolved config (a record's `config`): its experiment settings and seed."""
    return settings_key(saved_settings(config), config.get("seed"))


def model_key(config: dict) -> str:
    """The key of the trained model alone: the experiment's, less the analysis after training. Two
    experiments that differ only there (adopt_run: one sweep analyses the model another trained) measured
    one model: a view that pools runs counts it once."""
    settings = {k: v for k, v in saved_settings(config).items() if k != "analysis" and not k.startswith("analysis.")}
    return settings_key(settings, config.get("seed"))


def flat_key(flat: dict, seed) -> str:
    """The key of a planned job: its flattened settings (planning.compose_cell) and seed."""
    return settings_key(experiment_settings(flat), seed)


def settings_diff(config: dict, flat: dict, seed) -> tuple[list[str], dict, dict]:
    """The experiment settings (and seed) in which a saved run's config differs from a job's: the same
    comparison as the keys, spelled out for an error message."""
    theirs = dict(saved_settings(config))
    ours = experiment_settings(flat)
    ours.setdefault("trainer.precision", theirs.get("trainer.precision"))
    diff = [
        k
        for k in sorted(ours.keys() | theirs.keys())
        if repr(ours.get(k)) != repr(theirs.get(k)) and not _unresolved(ours.get(k))
    ]
    if config.get("seed") != seed:
        diff.insert(0, "seed")
    return diff, theirs, ours


# -- the record -------------------------------------------------------------------------------------------


@dataclass
class Record:
    """results.json. The report and planning read status, config, metrics and views; the rest (scores,
    params, hypotheses, machine, ...) stays as written, in `raw`."""

    status: str
    config: dict | None = None
    metrics: dict | None = None
    views: list[dict] = field(default_factory=list)  # [{"sweep", "job", "tags"}]: where the store shows it
    schema_version: int = SCHEMA_VERSION
    raw: dict = field(default_factory=dict)

    @property
    def seed(self):
        return (self.config or {}).get("seed")

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    def as_dict(self) -> dict:
        out = {"schema_version": self.schema_version, "status": self.status}
        if self.config is not None:
            out["config"] = self.config
        if self.metrics is not None:
            out["metrics"] = self.metrics
        out.update(self.raw)
        if self.views:
            out["views"] = self.views
        return out

    @classmethod
    def from_dict(cls, d: dict, version: int | None = None) -> Record:
        raw = {k: v for k, v in d.items() if k not in ("schema_version", "status", "config", "metrics", "views")}
        return cls(
            status=d.get("status"),
            config=d.get("config"),
            metrics=d.get("metrics"),
            views=list(d.get("views") or []),
            schema_version=version or d.get("schema_version") or 1,
            raw=raw,
        )

    def view(self, sweep: str, job: str) -> dict | None:
        return next((v for v in self.views if v.get("sweep") == sweep and v.get("job") == job), None)


_V1_READ: set[str] = set()


def read_record(run_dir: str | Path) -> Record | None:
    """The record in run_dir (None if there is none yet); CorruptRecord if it cannot be read whole."""
    path = Path(run_dir) / RESULTS
    if not path.is_file():
        return None
    try:
        d = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptRecord(f"{path}: unreadable {RESULTS} (half-written?): {e}") from None
    if not isinstance(d, dict) or not isinstance(d.get("status"), str):
        raise CorruptRecord(f"{path}: not a run record (no status)")
    if "schema_version" not in d:
        _V1_READ.add(str(path.resolve()))
    return Record.from_dict(d)


def write_record(run_dir: str | Path, record: Record) -> Path:
    """Atomically: a killed writer never leaves a half-written record."""
    path = Path(run_dir) / RESULTS
    atomic_write(path, json.dumps(record.as_dict(), indent=2, default=str))
    return path


def schema_note() -> str | None:
    """One line, once per report: how many records of schema 1 (before the store) were read as such since
    the last note."""
    if not _V1_READ:
        return None
    n = len(_V1_READ)
    _V1_READ.clear()
    return f"{n} records of schema 1 read as version 1 (run `python -m headsweep.store migrate` to move them into the store)"


# -- paths in a record --------------------------------------------------------------------------------------


def strings(obj):
    """Every string in a record's nested dicts and lists."""
    if isinstance(obj, dict):
        for v in obj.values():
            yield from strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from strings(v)
    elif isinstance(obj, str):
        yield obj


def map_strings(obj, fn):
    """`obj` with every string in its nested dicts and lists replaced by fn(string)."""
    if isinstance(obj, dict):
        return {k: map_strings(v, fn) for k, v in obj.items()}
    if isinstance(obj, list):
        return [map_strings(v, fn) for v in obj]
    return fn(obj) if isinstance(obj, str) else obj


def relative_paths(obj, roots: list[str]):
    """`obj` with every string that is an absolute path under one of `roots` (a checkout the run was trained
    or exported in) made relative to it: a record names no machine's directories."""
    prefixes = [root.rstrip("/") + "/" for root in sorted(roots, key=len, reverse=True)]
    return map_strings(obj, lambda s: next((s[len(p) :] for p in prefixes if s.startswith(p)), s))


def local_path(path: str | Path) -> Path:
    """A path a record names, on this machine: a relative one is relative to the checkout."""
    p = Path(path)
    return p if p.is_absolute() else ROOT / p


# -- the store ------------------------------------------------------------------------------------------------


def store_dir(results: Path, key: str) -> Path:
    return Path(results) / RUNS / key


_HELD: dict[str, int] = {}  # locks this process holds: taking one again (train, then export) does not wait


@contextlib.contextmanager
def key_lock(results: Path, key: str, wait_note=None):
    """Hold results/runs/.locks/<key>.lock: one process at a time trains, exports or adds a view to this
    experiment; the others wait (wait_note(path) is called once if they do). The OS drops it on exit."""
    path = Path(results) / RUNS / LOCKS / f"{key}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    held = str(path.resolve())
    if _HELD.get(held):
        _HELD[held] += 1
        try:
            yield path
        finally:
            _HELD[held] -= 1
        return
    with open(path, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if wait_note:
                wait_note(path)
            fcntl.flock(f, fcntl.LOCK_EX)
        _HELD[held] = 1
        try:
            yield path
        finally:
            _HELD.pop(held, None)


def stored_runs(results: Path, on_corrupt=None) -> list[tuple[Path, Record]]:
    """(store dir, record) of every complete experiment in results/runs/; a corrupt record is left out,
    named once through on_corrupt(line)."""
    out = []
    runs = Path(results) / RUNS
    for d in sorted(runs.iterdir()) if runs.is_dir() else []:
        if d.name.startswith(".") or not d.is_dir():
            continue
        try:
            record = read_record(d)
        except CorruptRecord as e:
            if on_corrupt:
                on_corrupt(str(e))
            continue
        if record is not None and record.complete:
            out.append((d, record))
    return out


def find(results: Path, key: str) -> Path | None:
    """The store dir of a complete experiment with this key, or None."""
    d = store_dir(results, key)
    try:
        record = read_record(d)
    except CorruptRecord:
        return None
    return d if record is not None and record.complete else None


def add_view(store: Path, sweep: str, job: str, tags: list[str], **extra) -> Record:
    """The view (sweep, job) in the record of `store`, with the sweep's tags for it; call under key_lock."""
    record = read_record(store)
    view = {"sweep": sweep, "job": job, "tags": list(tags), **extra}
    old = record.view(sweep, job)
    if old != view:
        record.views = [v for v in record.views if v is not old] + [view]
        write_record(store, record)
    return record


def link_view(store: Path, view: Path) -> Path:
    """results/<sweep>/<job> as the relative symlink ../runs/<key>. A view that is a real directory (the old
    layout) or names another experiment is never replaced: one line saying what to do."""
    view = Path(view)
    target = os.path.relpath(store, view.parent)
    if view.is_symlink():
        if os.readlink(view) == target:
            return view
        raise StoreError(f"{view} already names another experiment ({os.readlink(view)}); move it away first")
    if view.exists():
        raise StoreError(
            f"{view} is a directory of the old layout: run `python -m headsweep.store migrate "
            f"--results {view.parent.parent}` first"
        )
    view.parent.mkdir(parents=True, exist_ok=True)
    tmp = view.parent / f".{view.name}.link"
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, view)  # atomic: a reader sees no view or the whole one
    return view


def show(store: Path, view: Path, tags: list[str], **extra) -> Path:
    """The stored experiment `store` (results/runs/<key>) as `view` = results/<sweep>/<job>, with the
    sweep's tags for it, under the key's lock."""
    store, view = Path(store), Path(view)
    with key_lock(store.parent.parent, store.name):
        add_view(store, view.parent.name, view.name, tags, **extra)
        return link_view(store, view)


def train_once(results: Path, key: str, view: Path, tags: list[str], train, whole=None, wait_note=None):
    """(metrics, whether this process trained): under the key's lock, the stored experiment (whole by
    `whole(store dir)`, if given) is shown as `view`; else `train()` trains and exports it (its metrics)
    while the lock is held. Of two sweeps that want one key at once, one trains, the other waits, then
    shows the stored run: never two writers."""
    with key_lock(results, key, wait_note):
        stored = find(results, key)
        if stored is not None and (whole is None or whole(stored)):
            show(stored, view, tags)
            return read_record(stored).metrics, False
        return train(), True


def view_of(run_dir: Path) -> tuple[str, str] | None:
    """(sweep, job) when run_dir is results/<sweep>/<job> (a view or an old-layout directory)."""
    run_dir = Path(run_dir)
    return (run_dir.parent.name, run_dir.name) if run_dir.parent.name != RUNS else None


def publish_dir(tmp: Path, dest: Path) -> Path:
    """Put a fully written store directory in place by renames: `dest` is always the old or the new one.
    Never used on a view: a symlinked view is never renamed into a directory."""
    if dest.is_symlink():
        raise StoreError(f"{dest} is a view (a symlink), not a store directory")
    if dest.exists():
        old = dest.parent / f".{dest.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        dest.rename(old)
        tmp.rename(dest)
        shutil.rmtree(old)
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    from headsweep.store_migrate import MigrationError, migrate

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("migrate", help="move results/<sweep>/<job>/ into results/runs/<key>/, views as symlinks")
    m.add_argument("--results", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    try:
        migrate(args.results, out=sys.stdout)
    except (MigrationError, StoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def as_seen(record: Record, sweep: str, job: str) -> dict:
    """The record as this view shows it: the view's sweep and tags in its config (what the run of a sweep
    that shares it was tagged with there), and the first view it was shown in as `shared_from`."""
    results = record.as_dict()
    view = record.view(sweep, job)
    if view is None:
        return results
    first = record.views[0]
    # the learning-rate selection is the view's: a sweep that shows another sweep's grid run as a plain run
    # must not see it as a grid run (the record's own lr_select belongs to its first view)
    lr = view["lr_select"] if "lr_select" in view else (results["config"].get("lr_select") if view is first else None)
    results["config"] = {
        **results["config"],
        "sweep": view["sweep"],
        "tags": list(view.get("tags") or []),
        **({"lr_select": lr} if lr is not None or "lr_select" in results["config"] else {}),
    }
    if first is not view and "shared_from" not in results:
        results["shared_from"] = {
            "run": f"{first['sweep']}/{first['job']}",
            "sweep": first["sweep"],
            "tags": first.get("tags"),
        }
    return results
