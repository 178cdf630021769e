"""Parallel text from the Hugging Face hub (datasets.load_dataset), after a quick check that the hub can be
reached at all: without one, `datasets` retries for half a minute before it fails."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

import datasets

from headsweep.data.files import DATA_ENV, DataError, clean_pairs

log = logging.getLogger("headsweep.data.datamodule")  # the data module's own lines: where a reader looks

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


def choose_source(source: str, data_dir: str, hub_fallback: dict | None, missing_dir) -> str:
    """local or hub: source=local takes the hub's copy (hub_fallback) when `data_dir` does not exist, where the
    hub can be reached; `missing_dir()` raises the missing folder's own error where the config names no copy."""
    if source == "hub":
        return "hub"
    d = Path(data_dir).absolute()
    if d.is_dir():
        log.info("data: local files in %s", d)
        return "local"
    if not hub_fallback:
        missing_dir()  # raises: the folder and how to point elsewhere
    name = hub_fallback["name"]
    if reason := hub_unreachable():
        raise DataError(
            f"no data directory at {d}, and its copy on the Hugging Face hub ({name}) is out of "
            f"reach ({reason}): put the files there (or point data.dir=PATH or {DATA_ENV}=PATH at "
            "them), or run where huggingface.co can be reached"
        )
    log.warning("data: %s not found; the same corpus from the Hugging Face hub instead (%s)", d, name)
    return "hub"
