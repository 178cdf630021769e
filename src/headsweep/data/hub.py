"""Parallel text from the Hugging Face hub (datasets.load_dataset), after a quick check that the hub can be
reached at all: without one, `datasets` retries for half a minute before it fails."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

import datasets

from headsweep.data.files import DataError, clean_pairs

OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")  # set: datasets reads its local cache only


def unreachable(url: str, timeout: float) -> str | None:
    """Why no connection to the host and port of `url` opens within `timeout` seconds, or None: the quick
    check before a library that retries for minutes (datasets here, W&B in training.resume)."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=timeout).close()
    except OSError as e:
        return f"cannot reach {parsed.hostname}:{port} ({e.strerror or type(e).__name__})"
    return None


def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the hub cannot be reached from here, or None. With HF_HUB_OFFLINE or HF_DATASETS_OFFLINE set,
    None: `datasets` then answers from its cache at once."""
    if any(os.environ.get(k, "").lower() in ("1", "true", "yes", "on") for k in OFFLINE_ENV):
        return None
    return unreachable(os.environ.get("HF_ENDPOINT", "https://huggingface.co"), timeout)


def load_hub_pairs(name: str, config: str | None, split: str, columns: dict[str, str]) -> tuple[list[str], list[str]]:
    """(source sentences, target sentences) of one split; columns: {"src": column, "tgt": column}, where a
    dotted column ('translation.de') reads a nested field."""
    what = f"hub dataset '{name}'" + (f" (config {config})" if config else "")
    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # network, unknown name/split, ...: all become one line
        reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise DataError(f"could not load {what} split '{split}': {type(e).__name__}: {reason}") from None
    # flatten() turns nested fields into dotted column names ('translation.de'),
    # so the dotted paths in the columns can be read column-wise (fast) instead of per row.
    flat = ds.flatten()
    out = []
    for side in ("src", "tgt"):
        col = columns[side]
        if col not in flat.column_names:
            raise DataError(
                f"{what} split '{split}' has no column '{col}' (data.hub_columns.{side}); "
                f"available: {', '.join(flat.column_names)}"
            )
        out.append([x if isinstance(x, str) else "" for x in flat[col]])
    return clean_pairs(out[0], out[1], f"{what} split '{split}'")
