"""Stored runs small enough to travel: a GPU node takes the checkout only up to 64 MiB, and plain-text
hypotheses (31 MB over 242 runs) and full-colour analysis figures (12 MB) made results/ 48 MB.

- Hypotheses are stored gzipped (`<name>.gz`, gzip mtime 0 and no file name in the header, so the bytes are
  a function of the text alone and a re-export writes the same file). Every reader goes through
  `hypothesis_file` (plain or .gz, whichever is there) and data.files.read_lines (gunzips by suffix); a user
  reads one with `zcat <run>/hypotheses/test_2016_flickr.beam.en.gz | sacrebleu <references>`.
- Analysis figures are re-saved as palette PNGs (`shrink_png`: at most 256 colours, no dithering), which
  matplotlib's flat-colour plots survive unchanged to the eye at about a quarter of the bytes; analysis.json
  keeps every number, and `make analyze` redraws full-colour ones from a checkpoint.
- A run's stored outputs stay under RUN_LIMIT_BYTES (tests/test_store_size.py checks every run in results/).

    python -m headsweep.store_pack migrate [--results results]   # make migrate-results: pack the shipped runs
    python -m headsweep.store_pack check [--results results]     # every run re-scored, sizes against the limit

`migrate` is idempotent and proves the numbers unchanged: every run's results.json is read before and after
(they are never rewritten: byte-identical), and every hypothesis file a record scores is re-scored with
sacreBLEU against the run's references before and after packing, each equal to the stored score.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import sys
from pathlib import Path

from headsweep.data.files import read_lines
from headsweep.store import RESULTS, RUNS, read_record

GZ = ".gz"
# One run's stored outputs (results.json, metrics.csv, gzipped hypotheses, analysis with palette PNGs), in
# bytes. Packed, the 242 shipped runs measure 0.04-0.50 MB (the largest: a run with the head analysis and its
# 8 figures); 1 MiB leaves room for a longer test set, and a run with full-colour figures and plain hypotheses
# (up to 1.16 MB before packing: 12 such runs) fails.
RUN_LIMIT_BYTES = 1 << 20
# results/ after `make migrate-results`: what the issue asked for (<= 20 MB), so the checkout travels.
RESULTS_LIMIT_BYTES = 20 * 10**6
PNG_COLOURS = 256
STORED_TOL = 1e-9  # BLEU/chrF points: a re-score against the stored score (mismatches)


class PackError(ValueError):
    """A stored run whose numbers would change, or that cannot be packed; one line naming it."""


# -- writing ------------------------------------------------------------------------------------------------


def gzip_bytes(data: bytes) -> bytes:
    """Deterministic gzip: mtime 0 and no file name in the header, so equal text gives equal bytes."""
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as f:
        f.write(data)
    return out.getvalue()


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def gzip_file(path: Path) -> Path:
    """path -> path.gz (atomically, then the plain file goes); the .gz must decompress to the same bytes
    before the plain file is removed. An existing .gz of other text is an error, never overwritten."""
    path = Path(path)
    data = path.read_bytes()
    out = path.with_name(path.name + GZ)
    packed = gzip_bytes(data)
    if out.is_file() and gzip.decompress(out.read_bytes()) != data:
        raise PackError(f"{path}: {out.name} already exists with other text; move one away")
    if not out.is_file():
        _replace(out, packed)
    if gzip.decompress(out.read_bytes()) != data:  # checked from disk before the only other copy goes
        raise PackError(f"{out}: does not decompress to {path.name}; left both in place")
    path.unlink()
    return out


def shrink_png(path: Path) -> bool:
    """Re-save a PNG with a palette of at most PNG_COLOURS colours (no dithering: flat plot colours stay
    flat); True when it got smaller. A PNG already in palette mode is left as it is (idempotent)."""
    from PIL import Image

    with Image.open(path) as im:
        if im.mode == "P":
            return False
        im.load()
        rgba = im.convert("RGBA")
    if rgba.getextrema()[3] == (255, 255):
        q = rgba.convert("RGB").quantize(colors=PNG_COLOURS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    else:  # transparency kept: the fast octree quantizer is the one Pillow offers for RGBA
        q = rgba.quantize(colors=PNG_COLOURS, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    out = io.BytesIO()
    q.save(out, format="PNG", optimize=True)
    if out.tell() >= path.stat().st_size:
        return False
    _replace(path, out.getvalue())
    return True


def pack_dir(run_dir: Path) -> dict:
    """Gzip a stored run's plain hypotheses and shrink its analysis figures, in place; idempotent.
    {"gzipped": n, "pngs": n}."""
    run_dir = Path(run_dir)
    plain = [
        p
        for p in sorted((run_dir / "hypotheses").glob("*"))
        if p.is_file() and not p.name.startswith(".") and not p.name.endswith(GZ)
    ]
    for p in plain:
        gzip_file(p)
    pngs = sum(shrink_png(p) for p in sorted((run_dir / "analysis").glob("*.png")))
    return {"gzipped": len(plain), "pngs": pngs}


# -- reading --------------------------------------------------------------------------------------------------


def hypothesis_file(path: Path) -> Path:
    """The file holding these hypotheses: `path` itself, else `path.gz` (a packed store), else `path`
    (the caller says it is missing)."""
    path = Path(path)
    if path.is_file() or path.name.endswith(GZ):
        return path
    gz = path.with_name(path.name + GZ)
    return gz if gz.is_file() else path


# -- checking -------------------------------------------------------------------------------------------------


def run_dirs(results: Path) -> list[Path]:
    runs = Path(results) / RUNS
    return sorted(d for d in runs.iterdir() if d.is_dir() and not d.name.startswith(".")) if runs.is_dir() else []


def run_bytes(run_dir: Path) -> int:
    """The bytes of a run's stored files (apparent sizes; hidden lock and temporary files left out)."""
    return sum(p.stat().st_size for p in Path(run_dir).rglob("*") if p.is_file() and not p.name.startswith("."))


def tree_bytes(root: Path) -> int:
    """The bytes of every file under root, symlinks not followed (a view is its link, not the run again)."""
    return sum(p.lstat().st_size for p in Path(root).rglob("*") if not p.is_dir() or p.is_symlink())


def digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def rescore(run_dir: Path) -> list[tuple[str, float, float, float, float]]:
    """(hypotheses name, stored BLEU, re-scored BLEU, stored chrF, re-scored chrF) of every test hypothesis
    file the record scores (results.json `scores`), read through hypothesis_file, scored with sacreBLEU against
    the run's references (reports.significance.references: the file the run names, else its data.dir)."""
    from sacrebleu.metrics import BLEU, CHRF

    from headsweep.reports.cells import as_run
    from headsweep.reports.significance import references

    record = read_record(run_dir)
    if record is None or not record.complete:
        return []
    run = as_run(Path(run_dir), record.as_dict())
    refs = references(run)
    out = []
    for name, score in sorted((record.raw.get("scores") or {}).items()):
        listed = (record.raw.get("hypotheses") or {}).get(name)
        if listed is None:
            continue
        path = hypothesis_file(Path(run_dir) / "hypotheses" / Path(listed).name)
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
    """{run: (sha256 of results.json, its re-scores)}: what migrate compares before and after."""
    return {d.name: (digest(d / RESULTS), tuple(rescore(d))) for d in run_dirs(results) if (d / RESULTS).is_file()}


def compare(before: dict, after: dict) -> list[str]:
    """One line per difference: a run gone or new, a results.json that changed, a score that moved or a
    re-score that is not the stored score."""
    lines = [f"{run}: gone after packing" for run in sorted(before.keys() - after.keys())]
    lines += [f"{run}: new after packing" for run in sorted(after.keys() - before.keys())]
    for run in sorted(before.keys() & after.keys()):
        (h0, s0), (h1, s1) = before[run], after[run]
        if h0 != h1:
            lines.append(f"{run}: results.json changed")
        if s0 != s1:  # the same text scores the same, bit for bit
            lines.append(f"{run}: re-scores changed: {s0} -> {s1}")
        lines += [f"{run}: {line}" for line in mismatches(s1)]
    return lines


def oversize(results: Path, limit: int = RUN_LIMIT_BYTES) -> list[tuple[str, int]]:
    return [(d.name, n) for d in run_dirs(results) if (n := run_bytes(d)) > limit]


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
    gz = pngs = 0
    for d in run_dirs(results):
        done = pack_dir(d)
        gz, pngs = gz + done["gzipped"], pngs + done["pngs"]
    after = snapshot(results)
    size1 = tree_bytes(results)
    scored = sum(len(s) for _, s in after.values())
    print(
        f"packed {len(after)} runs: {gz} hypothesis files gzipped, {pngs} figures re-saved; {results}: "
        f"{size0 / 1e6:.1f} MB -> {size1 / 1e6:.1f} MB",
        file=out,
    )
    diff = compare(before, after)
    if diff:
        print(f"NUMBERS CHANGED ({len(diff)}): {diff[0]}", file=out)
    else:
        print(
            f"numbers unchanged: {len(after)} results.json byte-identical; {scored} hypothesis files re-score "
            f"bit for bit the same before and after, each within {largest_gap(after):.1e} of its stored "
            f"BLEU and chrF (tolerance {STORED_TOL:g})",
            file=out,
        )
    return diff


def check(results: Path, out=sys.stdout) -> list[str]:
    """Every stored run re-scored (its hypotheses against its stored scores) and sized against the limit."""
    problems = []
    scored = 0
    for d in run_dirs(results):
        scores = rescore(d)
        scored += len(scores)
        problems += [f"{d.name}: {line}" for line in mismatches(scores)]
    problems += [f"{run}: {n / 1e6:.2f} MB > {RUN_LIMIT_BYTES / 1e6:.2f} MB" for run, n in oversize(results)]
    total = tree_bytes(results)
    if total > RESULTS_LIMIT_BYTES:
        problems.append(f"{results}: {total / 1e6:.1f} MB > {RESULTS_LIMIT_BYTES / 1e6:.0f} MB")
    print(
        f"{len(run_dirs(results))} runs, {scored} hypothesis files re-scored, {results}: {total / 1e6:.1f} MB, "
        f"largest run {max((run_bytes(d) for d in run_dirs(results)), default=0) / 1e6:.2f} MB; "
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
