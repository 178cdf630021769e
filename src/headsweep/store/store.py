"""The store: each experiment once, in results/runs/<key>/; the readable name results/<sweep>/<job> is a view,
a relative symlink ../runs/<key>, listed in the record's `views` with the sweep's tags for it. One writer per
key: `key_lock` (results/runs/.locks/<key>.lock) is held while a run of that key trains and exports.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from pathlib import Path

from headsweep.store.record import CorruptRecord, Record, read_record, write_record

RUNS = "runs"  # results/runs/<key>/: the store
LOCKS = ".locks"  # results/runs/.locks/<key>.lock


class StoreError(ValueError):
    """A view or store entry that cannot be written as asked; the one-line message says what to do."""


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


def unshow(view: Path) -> list[str]:
    """Take the view results/<sweep>/<job> away: its symlink and its entry in the record, under the key's lock.
    The run stays in results/runs/<key>; the views that still show it are returned ([]: none now)."""
    view = Path(view)
    if not view.is_symlink():
        raise StoreError(f"{view} is no view (a symlink into results/{RUNS}/): nothing to take away")
    stored = Path(os.path.realpath(view))
    with key_lock(stored.parent.parent, stored.name):
        record = read_record(stored)
        record.views = [v for v in record.views if (v.get("sweep"), v.get("job")) != (view.parent.name, view.name)]
        write_record(stored, record)
        view.unlink()
    return [f"{v['sweep']}/{v['job']}" for v in record.views]


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
    """Put a fully written directory in place by renames: `dest` is always the old or the new one (the one
    publish of the store and of training.runs). Never used on a view: a symlinked view is never renamed into a
    directory."""
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
