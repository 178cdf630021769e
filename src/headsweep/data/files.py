"""Reading parallel text: one sentence per line, plain or gzipped, strictly UTF-8, pairs validated.

Every problem with the data or the data config is a one-line ``DataError`` that names the file (and
line) and says how to fix it, before any training starts.
"""

from __future__ import annotations

import gzip
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

DATA_ENV = "HEADSWEEP_DATA"  # conf/data/multi30k.yaml reads the data directory from it when set


class DataError(ValueError):
    """One-line, actionable message about bad data/config."""

    def __init__(self, message: str):
        # Messages often embed exception text; keep them on one line for logs and sweeps.
        super().__init__(" ".join(str(message).split()))


def split_files(dir: str | os.PathLike, split: str, lang: str) -> Path:
    """Return the file holding ``split`` in ``lang``: ``{split}.{lang}`` or ``{split}.{lang}.gz``."""
    base = Path(dir)
    for name in (f"{split}.{lang}", f"{split}.{lang}.gz"):
        if (base / name).is_file():
            return base / name
    raise DataError(
        f"missing data file for split '{split}': expected {base.absolute() / f'{split}.{lang}'} "
        f"or {split}.{lang}.gz in that directory"
    )


def read_lines(path: Path) -> list[str]:
    """Read a text file (optionally gzipped) strictly as UTF-8, one sentence per line."""
    opener = gzip.open if path.suffix == ".gz" else open
    lines = []
    try:
        with opener(path, "rb") as f:
            # Iterate over *bytes* lines: they split on b"\n" only, whereas str.splitlines()
            # would also split on U+2028/U+0085 etc. and silently misalign the two sides.
            for lineno, raw in enumerate(f, start=1):
                try:
                    lines.append(raw.decode("utf-8").rstrip("\r\n"))
                except UnicodeDecodeError as e:
                    raise DataError(
                        f"{path}: line {lineno}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at byte "
                        f"offset {e.start} of the line); re-encode the file as UTF-8"
                    ) from None
    except (OSError, EOFError) as e:  # corrupt/truncated gzip, permission denied, ...
        raise DataError(f"{path}: cannot read file ({type(e).__name__}: {e})") from None
    return lines


def clean_pairs(src: list[str], tgt: list[str], what: str) -> tuple[list[str], list[str]]:
    """Strip whitespace and drop pairs where either side is blank (logged with the count)."""
    pairs = [(s.strip(), t.strip()) for s, t in zip(src, tgt)]
    kept = [(s, t) for s, t in pairs if s and t]
    if len(kept) < len(pairs):
        log.warning("%s: dropped %d empty sentence pair(s) of %d", what, len(pairs) - len(kept), len(pairs))
    if not kept:
        raise DataError(f"{what}: no non-empty sentence pairs (split is empty)")
    return [s for s, _ in kept], [t for _, t in kept]


def atomic_write(path: Path, text: str) -> None:
    """Write via a temp file + os.replace so parallel sweep jobs never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
