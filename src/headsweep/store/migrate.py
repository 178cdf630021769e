"""Moving results/ of the old layout (results/<sweep>/<job>/, shared runs copied: `shared_from`) into the
store (headsweep.store.store), without training anything:

- each real results/<sweep>/<job>/ directory is an experiment: it moves to results/runs/<key>/ and its old
  name becomes a view, the symlink ../runs/<key>;
- a copy of another sweep's run (`shared_from` without `what`: copy_run made it) must be that run, file for
  file (hypotheses byte-identical; the key of its settings the same), else the migration stops with one
  line; then it becomes a view of that run, its sweep and tags kept in the record's `views`;
- a run another sweep trained and this one analysed (adopt_run: `what` in shared_from) is its own
  experiment (the analysis is an experiment setting);
- machine paths in each record become relative to the checkout they were trained or exported in, and the
  record says schema_version 2;
- a corrupt record is named and left where it is, as is a run that is not complete.

Idempotent: a second run finds nothing to move and prints so.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import sys
from pathlib import Path

from headsweep.store.record import (
    RESULTS,
    SCHEMA_VERSION,
    CorruptRecord,
    Record,
    experiment_key,
    read_record,
    relative_paths,
    strings,
    write_record,
)
from headsweep.store.store import RUNS, link_view, store_dir


class MigrationError(ValueError):
    """A copy that is not the run it claims to copy, or two directories of one experiment; one line."""


def machine_roots(raw: dict) -> list[str]:
    """The checkouts a record's absolute paths point into: what precedes /multirun/ or /results/."""
    return sorted(
        {s.split(marker, 1)[0] for s in absolute_paths(raw) for marker in ("/multirun/", "/results/") if marker in s}
    )


def absolute_paths(obj) -> list[str]:
    return [s for s in strings(obj) if s.startswith("/")]


def migrated(record: Record, sweep: str, job: str) -> Record:
    """The record as the store keeps it: relative paths, its own view, schema 2."""
    d = record.as_dict()
    d = relative_paths(d, machine_roots(d))
    new = Record.from_dict(d, version=SCHEMA_VERSION)
    if new.view(sweep, job) is None:
        new.views = [{"sweep": sweep, "job": job, "tags": list(new.config.get("tags") or [])}, *new.views]
    return new


def files(root: Path) -> set[str]:
    """A run directory's files, relative, its record aside."""
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and p.name != RESULTS and not p.name.startswith(".")
    }


def compare_copy(copy: Path, store: Path) -> tuple[list[str], list[str]]:
    """(files of both that differ in bytes, plus hypotheses on one side only; files only the copy has, e.g.
    a head analysis made on the copy after it was copied)."""
    fc, fs = files(copy), files(store)
    differ = {f for f in fc & fs if not filecmp.cmp(copy / f, store / f, shallow=False)}
    differ |= {f for f in fc ^ fs if f.startswith("hypotheses/")}
    return sorted(differ), sorted(fc - fs - differ)


def old_runs(results: Path) -> list[Path]:
    """results/<sweep>/<job>/ directories of the old layout (real directories with a record)."""
    return sorted(
        d
        for s in results.iterdir()
        if s.is_dir() and not s.is_symlink() and s.name != RUNS and not s.name.startswith(".")
        for d in s.iterdir()
        if d.is_dir() and not d.is_symlink() and not d.name.startswith(".") and (d / RESULTS).is_file()
    )


def migrate(results: Path, out=None) -> dict:
    """Move results/ into the store; print what was done; the counts."""
    out = out or sys.stdout
    results = Path(results)
    if not results.is_dir():
        raise MigrationError(f"no {results}: pass --results DIR, the folder holding <sweep>/<job>/results.json")
    counts = {"moved": 0, "copies": 0, "corrupt": 0, "incomplete": 0, "v1": 0}
    copies = []
    for d in old_runs(results):
        try:
            record = read_record(d)
        except CorruptRecord as e:
            print(f"  left in place: {e}", file=out)
            counts["corrupt"] += 1
            continue
        if not record.complete:
            print(f"  left in place: {d} (status {record.status!r}: not a finished run)", file=out)
            counts["incomplete"] += 1
            continue
        shared = record.raw.get("shared_from")
        if shared and not shared.get("what"):  # copy_run's copy: handled once every original is in the store
            copies.append((d, record))
            continue
        counts["v1"] += record.schema_version < SCHEMA_VERSION
        key = experiment_key(record.config)
        dest = store_dir(results, key)
        if dest.exists():
            raise MigrationError(
                f"{d} and {dest} hold the same experiment ({key}) and neither is a copy of the "
                "other: two measurements of one experiment; move one away and run again"
            )
        write_record(d, migrated(record, d.parent.name, d.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        d.rename(dest)
        link_view(dest, d)
        counts["moved"] += 1
    for d, record in copies:
        counts["v1"] += record.schema_version < SCHEMA_VERSION
        share_copy(results, d, record, out)
        counts["copies"] += 1
    views = relink(results)
    entries = (
        sum(1 for p in (results / RUNS).iterdir() if not p.name.startswith(".")) if (results / RUNS).is_dir() else 0
    )
    left = (
        [
            f"{d}: {p}"
            for d in sorted((results / RUNS).glob(f"*/{RESULTS}"))
            for p in absolute_paths(read_record(d.parent).as_dict())
        ]
        if entries
        else []
    )
    print(
        f"migrated {results}: {counts['moved']} runs moved into {results / RUNS}/, {counts['copies']} copies made "
        f"views of the run they copy ({counts['v1']} records of schema 1 now schema {SCHEMA_VERSION}); the store "
        f"holds {entries} experiments shown as {views} views; left in place: {counts['corrupt']} corrupt, "
        f"{counts['incomplete']} unfinished" + ("" if counts["moved"] or counts["copies"] else " (nothing to move)"),
        file=out,
    )
    for line in left:
        print(f"  an absolute path is left in {line}", file=out)
    return {**counts, "entries": entries, "views": views}


def share_copy(results: Path, copy: Path, record: Record, out) -> None:
    """A copy_run copy as a view of the run it copied, once its files are that run's, byte for byte."""
    source = results / record.raw["shared_from"]["run"]
    try:
        original = read_record(source)
    except CorruptRecord as e:
        raise MigrationError(f"{copy} copies {source}, whose record is corrupt: {e}") from None
    if original is None:
        raise MigrationError(f"{copy} copies {source}, which is not in {results}: restore it and run again")
    key = experiment_key(original.config)
    if experiment_key(record.config) != key:
        raise MigrationError(f"{copy} is called a copy of {source} but its settings or seed differ; move it away")
    store = store_dir(results, key)
    if source.resolve() != store.resolve():
        raise MigrationError(f"{source} is not in the store yet ({store}); run the migration again")
    differ, only_copy = compare_copy(copy, store)
    if differ or not any(f.startswith("hypotheses/") for f in files(store)):
        raise MigrationError(
            f"{copy} is called a copy of {source} but {len(differ)} files differ (e.g. "
            f"{(differ or ['its hypotheses are missing'])[0]}); hypotheses must be byte-identical: "
            "move it away or restore it"
        )
    for f in only_copy:  # made on the copy later (make analyze): the same model's, so the experiment's
        (store / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(copy / f, store / f)
    if only_copy:
        print(
            f"  {copy.parent.name}/{copy.name}: {len(only_copy)} files only the copy had (e.g. {only_copy[0]}) "
            f"kept in {store}",
            file=out,
        )
    stored = read_record(store)
    view = {
        "sweep": copy.parent.name,
        "job": copy.name,
        "tags": list(record.config.get("tags") or []),
        "lr_select": record.config.get("lr_select"),
    }  # the copy's own selection (make sweep LR_GRID=)
    if stored.view(copy.parent.name, copy.name) is None:
        stored.views.append(view)
        write_record(store, stored)
    shutil.rmtree(copy)  # every byte of it is in the store, its sweep and tags in the view
    link_view(store, copy)


def relink(results: Path) -> int:
    """Every view a stored record lists as a symlink (a migration cut short between the move and the link
    is finished here); the number of views."""
    n = 0
    for d in sorted((results / RUNS).iterdir()) if (results / RUNS).is_dir() else []:
        if d.name.startswith("."):
            continue
        try:
            record = read_record(d)
        except CorruptRecord:
            continue
        for v in record.views if record else []:
            view = results / v["sweep"] / v["job"]
            if not view.is_symlink():
                link_view(d, view)
            elif os.path.realpath(view) != os.path.realpath(d):
                raise MigrationError(f"{view} links to {os.readlink(view)}, but {d} lists it as its view")
            n += 1
    return n
