"""Packing the shipped runs and proving every number unchanged (headsweep.store.pack does the packing; this
module re-scores with sacreBLEU against the references, read as the reports read them: store.references).

    python -m headsweep.store.results_check migrate [--results results]   # make migrate-results
    python -m headsweep.store.results_check check [--results results]     # make results-check
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from headsweep.data import DataError
from headsweep.data.files import read_lines
from headsweep.store import RESULTS, RUNS, read_record
from headsweep.store.pack import (
    RESULTS_LIMIT_BYTES,
    RUN_LIMIT_BYTES,
    STORED_TOL,
    PackError,
    analysis_file,
    beside_beam,
    digest,
    disk_bytes,
    hypothesis_file,
    open_text,
    oversize,
    pack_dir,
    run_bytes,
    run_dirs,
    tree_bytes,
    unpacked,
)
from headsweep.store.references import references

# -- reading --------------------------------------------------------------------------------------------------


# -- checking -------------------------------------------------------------------------------------------------


def rescore(run_dir: Path) -> list[tuple[str, float, float, float, float]]:
    """(hypotheses name, stored BLEU, re-scored BLEU, stored chrF, re-scored chrF) of every test hypothesis
    file the record scores (results.json `scores`) that the store keeps, read through hypothesis_file, scored
    with sacreBLEU against the run's references (store.references: the file the run names,
    else its data.dir). Greedy hypotheses beside beam ones are not kept (store.pack.beside_beam): their
    score is not re-scored; any other missing file is an error."""
    from sacrebleu.metrics import BLEU, CHRF

    record = read_record(run_dir)
    if record is None or not record.complete:
        return []
    try:
        refs = references(record.as_dict(), Path(run_dir).name)
    except DataError as e:  # one line, as every other problem of the check
        raise PackError(f"{run_dir}: {e}") from None
    out = []
    for name, score in sorted((record.raw.get("scores") or {}).items()):
        listed = (record.raw.get("hypotheses") or {}).get(name)
        if listed is None:
            continue
        path = hypothesis_file(Path(run_dir) / "hypotheses" / Path(listed).name)
        if not path.is_file() and beside_beam(path):  # left out by design
            continue
        if not path.is_file():
            raise PackError(f"{run_dir}: the hypotheses of {name} are missing ({path.name})")
        hyps = read_lines(path)
        bleu, chrf = BLEU().corpus_score(hyps, [refs]).score, CHRF().corpus_score(hyps, [refs]).score
        out.append((name, score["bleu"], bleu, score.get("chrf", chrf), chrf))
    return out


def mismatches(scores: list[tuple]) -> list[str]:
    """Re-scores that are not the stored score. Within STORED_TOL: sacreBLEU's sums in another order (the
    stored score came from the trainer's process) differ in the last bits of a double, no more."""
    return [
        f"{name} re-scores BLEU {b1!r} chrF {c1!r}, stored {b0!r} {c0!r}"
        for name, b0, b1, c0, c1 in scores
        if abs(b1 - b0) > STORED_TOL or abs(c1 - c0) > STORED_TOL
    ]


def largest_gap(snap: dict) -> float:
    return max((max(abs(b1 - b0), abs(c1 - c0)) for _, s in snap.values() for _, b0, b1, c0, c1 in s), default=0.0)


def snapshot(results: Path) -> dict[str, tuple[str, tuple]]:
    """{run: (sha256 of results.json and of its analysis.json's text where it has one, its re-scores)}: what
    migrate compares before and after."""
    return {
        d.name: (digest(d / RESULTS) + analysis_digest(d), tuple(rescore(d)))
        for d in run_dirs(results)
        if (d / RESULTS).is_file()
    }


def analysis_digest(run_dir: Path) -> str:
    """sha256 of a run's analysis.json text, plain or gzipped (the same for both); "" without one."""
    path = analysis_file(run_dir)
    if path is None:
        return ""
    with open_text(path) as f:
        return ":" + hashlib.sha256(f.read().encode()).hexdigest()


def compare(before: dict, after: dict) -> list[str]:
    """One line per difference: a run gone or new, a results.json that changed, a score that moved or a
    re-score that is not the stored score. Greedy hypotheses that packing left out (beside beam ones) are
    not a difference; any other re-score that goes is."""
    lines = [f"{run}: gone after packing" for run in sorted(before.keys() - after.keys())]
    lines += [f"{run}: new after packing" for run in sorted(after.keys() - before.keys())]
    for run in sorted(before.keys() & after.keys()):
        (h0, s0), (h1, s1) = before[run], after[run]
        if h0 != h1:
            lines.append(f"{run}: results.json or analysis.json changed")
        kept = {name for name, *_ in s1}
        if tuple(x for x in s0 if x[0] in kept or not x[0].endswith(".greedy")) != s1:  # same text, same score
            lines.append(f"{run}: re-scores changed: {s0} -> {s1}")
        lines += [f"{run}: {line}" for line in mismatches(s1)]
    return lines


def migrate(results: Path, out=sys.stdout) -> list[str]:
    """Pack every stored run; the differences compare() finds (none: the numbers are unchanged)."""
    results = Path(results)
    if not (results / RUNS).is_dir():
        raise PackError(f"{results / RUNS}: no run store here; pass --results DIR (the folder holding runs/)")
    size0 = tree_bytes(results)
    print(
        f"{results}: {size0 / 1e6:.1f} MB; re-scoring every run's hypotheses before packing ...", file=out, flush=True
    )
    before = snapshot(results)
    disk0 = disk_bytes(results)
    done = {"gzipped": 0, "greedy_dropped": 0, "metrics": 0, "analyses": 0, "pngs": 0}
    for d in run_dirs(results):
        for k, n in pack_dir(d).items():
            done[k] += n
    after = snapshot(results)
    size1, disk1 = tree_bytes(results), disk_bytes(results)
    scored = sum(len(s) for _, s in after.values())
    analysed = sum(":" in h for h, _ in after.values())
    print(
        f"packed {len(after)} runs: {done['gzipped']} hypothesis files gzipped, {done['greedy_dropped']} greedy "
        f"hypothesis files left out (beam kept; their scores stay in results.json), {done['metrics']} metrics "
        f"CSVs gzipped, {done['analyses']} analysis.json gzipped, {done['pngs']} figures re-saved; {results}: "
        f"{size0 / 1e6:.1f} MB -> {size1 / 1e6:.1f} MB "
        f"in files, {disk0 / 2**20:.1f} MiB -> {disk1 / 2**20:.1f} MiB on disk (du)",
        file=out,
    )
    diff = compare(before, after)
    if diff:
        print(f"NUMBERS CHANGED ({len(diff)}): {diff[0]}", file=out)
    else:
        print(
            f"numbers unchanged: {len(after)} results.json byte-identical, {analysed} analysis.json the same text; "
            f"{scored} hypothesis files re-score "
            f"bit for bit the same before and after, each within {largest_gap(after):.1e} of its stored "
            f"BLEU and chrF (tolerance {STORED_TOL:g})",
            file=out,
        )
    return diff


def check(results: Path, out=sys.stdout) -> list[str]:
    """Every stored run re-scored (its hypotheses against its stored scores) and sized against the limit."""
    problems = []
    scored = 0
    runs = run_dirs(results)
    for d in runs:
        scores = rescore(d)
        scored += len(scores)
        problems += [f"{d.name}: {line}" for line in mismatches(scores)]
    problems += [f"{run}: {n / 1e6:.2f} MB > {RUN_LIMIT_BYTES / 1e6:.2f} MB" for run, n in oversize(results)]
    total, disk = tree_bytes(results), disk_bytes(results)
    if disk > RESULTS_LIMIT_BYTES:
        problems.append(f"{results}: {disk / 2**20:.1f} MiB on disk (du) > {RESULTS_LIMIT_BYTES / 2**20:.0f} MiB")
    problems += [f"{d.name}: not packed (make migrate-results)" for d in runs if unpacked(d)]
    print(
        f"{len(runs)} runs, {scored} hypothesis files re-scored, {results}: {total / 1e6:.1f} MB in "
        f"files, {disk / 2**20:.1f} MiB on disk (du), "
        f"largest run {max((run_bytes(d) for d in runs), default=0) / 1e6:.2f} MB; "
        + (f"{len(problems)} problems: {problems[0]}" if problems else "all ok"),
        file=out,
    )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, what in (("migrate", "pack every stored run, numbers compared"), ("check", "re-score and size")):
        p = sub.add_parser(name, help=what)
        p.add_argument("--results", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    try:
        bad = migrate(args.results) if args.command == "migrate" else check(args.results)
    except PackError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
