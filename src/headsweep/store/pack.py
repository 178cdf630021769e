"""Stored runs small enough to travel: a GPU node takes the checkout only up to 64 MiB, and plain-text
hypotheses (31 MB over 242 runs) and full-colour analysis figures (12 MB) made results/ 48 MB.

- Hypotheses are stored gzipped (`<name>.gz`, gzip mtime 0 and no file name in the header, so the bytes are
  a function of the text alone and a re-export writes the same file). Every reader goes through
  `hypothesis_file` (plain or .gz, whichever is there) and data.files.read_lines (gunzips by suffix); a user
  reads one with `zcat <run>/hypotheses/test_2016_flickr.beam.en.gz | sacrebleu <references>`.
- Greedy test hypotheses are not kept where the run has beam ones (`redundant_greedy`): beam is what
  `test/bleu` and every table score, greedy differs from it in about 70% of lines (so it does not compress
  against it), and it was 17 KB of a run's 56. Its score (`test/bleu_greedy`, `scores[<split>.greedy]`) stays
  in results.json; the run directory (multirun/) keeps the file.
- metrics.csv is stored gzipped (`metrics.csv.gz`; `metrics_file` finds either, `open_text` reads either): a
  sparse table of 23 columns, 7 KB plain, 1.5 KB packed.
- Analysis figures are re-saved as palette PNGs (`shrink_png`: at most 256 colours, no dithering), which
  matplotlib's flat-colour plots survive unchanged to the eye at about a quarter of the bytes; analysis.json
  keeps every number, and `make analyze` redraws full-colour ones from a checkpoint.
- analysis.json is stored gzipped (`analysis/analysis.json.gz`, 115 KB plain, about 15 KB packed: the 12
  analysed runs held 1.4 MB of it); `analysis_file` finds either, `read_analysis` reads either, and
  `zcat <run>/analysis/analysis.json.gz | jq` reads it by hand. analysis.md stays plain: it is the page a
  reader opens in the browser.
- A run's stored outputs stay under RUN_LIMIT_BYTES (tests/test_store_size.py checks every run in results/).

    python -m headsweep.store.results_check migrate [--results results]  # make migrate-results
    python -m headsweep.store.results_check check [--results results]    # make results-check

`migrate` is idempotent and proves the numbers unchanged: every run's results.json is read before and after
(they are never rewritten: byte-identical), and every hypothesis file a record scores is re-scored with
sacreBLEU against the run's references before and after packing, each equal to the stored score.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
from pathlib import Path

from headsweep.store.record import RESULTS, read_record  # noqa: F401  (the record of a packed run)
from headsweep.store.store import RUNS

GZ = ".gz"
METRICS = "metrics.csv"
ANALYSIS = Path("analysis") / "analysis.json"  # a run's head analysis, relative to its directory
# a run's attention-rank measures (python -m headsweep.analysis.rank), beside results.json: a few KB, plain
ATTENTION_RANK = "attention_rank.json"
# One run's stored outputs (results.json, metrics.csv, gzipped hypotheses, analysis with palette PNGs), in
# bytes. Packed, the 242 shipped runs measure 0.04-0.50 MB (the largest: a run with the head analysis and its
# 8 figures); 1 MiB leaves room for a longer test set, and a run with full-colour figures and plain hypotheses
# (up to 1.16 MB before packing: 12 such runs) fails.
RUN_LIMIT_BYTES = 1 << 20
# results/ after `make migrate-results`, as `du -sh results` counts it (disk_bytes: blocks, folders too):
# 20 MiB was issue 50's bar at about 270 runs; every run is packed (the test before this one) and the store grows
# about 70 KiB a run, so the bar was 24 MiB from 285 runs on (2026-11-28). At 506 runs it measured 24.1 MiB (about
# 48 KiB a run, 2026-11-29): 32 MiB holds the ~170 runs the open issues plan; the tracked tree is 53 MiB, and a GPU
# node copies it whole (only ignored paths count against the 64 MiB carry).
RESULTS_LIMIT_BYTES = 32 * 2**20
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


def beside_beam(path: Path) -> bool:
    """A greedy hypothesis file (`<split>.greedy.<lang>[.gz]`, there or not) whose beam file of the same split
    and language is there: the store keeps the beam one, which test/bleu scores, and not this one."""
    path = Path(path)
    if ".greedy." not in path.name:
        return False
    split, rest = path.name.split(".greedy.", 1)
    return hypothesis_file(path.with_name(f"{split}.beam.{rest.removesuffix(GZ)}")).is_file()


def redundant_greedy(hyp_dir: Path) -> list[Path]:
    """The greedy hypothesis files of hyp_dir beside beam ones (beside_beam). A run decoded greedily only
    keeps its file."""
    return [p for p in sorted(Path(hyp_dir).glob("*.greedy.*")) if p.is_file() and beside_beam(p)]


def unpacked(run_dir: Path) -> bool:
    """A stored run that pack_dir would still change: a plain metrics.csv or analysis.json, or greedy
    hypotheses beside beam ones."""
    run_dir = Path(run_dir)
    return (
        (run_dir / METRICS).is_file()
        or (run_dir / ANALYSIS).is_file()
        or bool(redundant_greedy(run_dir / "hypotheses"))
    )


def pack_dir(run_dir: Path) -> dict:
    """Pack a stored run in place; idempotent. Plain hypotheses gzipped, greedy ones beside beam ones removed
    (after the beam file is packed and checked), metrics.csv and analysis.json gzipped, analysis figures shrunk.
    {"gzipped": n, "greedy_dropped": n, "metrics": n, "analyses": n, "pngs": n}."""
    run_dir = Path(run_dir)
    plain = [
        p
        for p in sorted((run_dir / "hypotheses").glob("*"))
        if p.is_file() and not p.name.startswith(".") and not p.name.endswith(GZ)
    ]
    for p in plain:
        gzip_file(p)
    greedy = redundant_greedy(run_dir / "hypotheses")
    for p in greedy:
        p.unlink()
    metrics = [gzip_file(run_dir / METRICS)] if (run_dir / METRICS).is_file() else []
    analyses = [gzip_file(run_dir / ANALYSIS)] if (run_dir / ANALYSIS).is_file() else []
    pngs = sum(shrink_png(p) for p in sorted((run_dir / "analysis").glob("*.png")))
    return {
        "gzipped": len(plain),
        "greedy_dropped": len(greedy),
        "metrics": len(metrics),
        "analyses": len(analyses),
        "pngs": pngs,
    }


def metrics_file(run_dir: Path) -> Path | None:
    """A stored run's metrics CSV (metrics.csv.gz, or metrics.csv before packing), else a run directory's
    csv/metrics.csv; None without one."""
    d = Path(run_dir)
    return next((p for p in (d / (METRICS + GZ), d / METRICS, d / "csv" / METRICS) if p.is_file()), None)


def analysis_file(run_dir: Path) -> Path | None:
    """A run's head analysis: analysis/analysis.json (a run directory, an unpacked run) or
    analysis/analysis.json.gz (a stored run); None where the run has none."""
    plain = Path(run_dir) / ANALYSIS
    return next((p for p in (plain, plain.with_name(plain.name + GZ)) if p.is_file()), None)


def read_attention_rank(run_dir: Path) -> dict | None:
    """A run's attention_rank.json as a dict; None where the run has none."""
    path = Path(run_dir) / ATTENTION_RANK
    return json.loads(path.read_text()) if path.is_file() else None


def read_analysis(run_dir: Path) -> dict | None:
    """A run's analysis.json as a dict, plain or gzipped (analysis_file); None where it has none."""
    path = analysis_file(run_dir)
    if path is None:
        return None
    with open_text(path) as f:
        return json.load(f)


def open_text(path: Path):
    """A text file opened for reading, gunzipped where its name ends in .gz (csv.DictReader reads either)."""
    path = Path(path)
    return gzip.open(path, "rt", encoding="utf-8", newline="") if path.name.endswith(GZ) else path.open(newline="")


def hypothesis_file(path: Path) -> Path:
    """The file holding these hypotheses: `path` itself, else `path.gz` (a packed store), else `path`
    (the caller says it is missing)."""
    path = Path(path)
    if path.is_file() or path.name.endswith(GZ):
        return path
    gz = path.with_name(path.name + GZ)
    return gz if gz.is_file() else path


def run_dirs(results: Path) -> list[Path]:
    runs = Path(results) / RUNS
    return sorted(d for d in runs.iterdir() if d.is_dir() and not d.name.startswith(".")) if runs.is_dir() else []


def run_bytes(run_dir: Path) -> int:
    """The bytes of a run's stored files (apparent sizes; hidden lock and temporary files left out)."""
    return sum(p.stat().st_size for p in Path(run_dir).rglob("*") if p.is_file() and not p.name.startswith("."))


def tree_bytes(root: Path) -> int:
    """The bytes of every file under root, symlinks not followed (a view is its link, not the run again)."""
    return sum(p.lstat().st_size for p in Path(root).rglob("*") if not p.is_dir() or p.is_symlink())


def disk_bytes(root: Path) -> int:
    """What `du -s` counts under root (folders included, blocks not bytes, hard links once): on a 4 KiB-block
    file system every small file and folder costs at least 4 KiB, so a store of many small runs takes about
    1.1x its apparent size."""
    seen, total = set(), 0
    for p in [Path(root), *Path(root).rglob("*")]:
        st = p.lstat()
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def oversize(results: Path, limit: int = RUN_LIMIT_BYTES) -> list[tuple[str, int]]:
    return [(d.name, n) for d in run_dirs(results) if (n := run_bytes(d)) > limit]
