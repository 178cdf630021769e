"""Packing a sweep's jobs onto GPUs: several jobs side by side on one card, jobs spread over the cards.

The default model (d_model 256, ~2k-token batches) uses a few percent of a modern GPU, and a job's step is
mostly Python and kernel launches: N processes on one card keep it busier than one. How many fit is the
card's free memory over one job's footprint: the largest peak that finished GPU runs recorded in their
results.json (machine.gpu_memory_peak_gib, torch's reserved memory plus the CUDA context), else
DEFAULT_FOOTPRINT_GIB, a measured small-model job with margin. Each job is mostly one CPU thread feeding its
card, so by default N is at most the cores; asked for (JOBS=N), up to twice that, so that a sweep a little
larger than the cores runs in one wave (on an H200 with 16 cores, 16 packed row-A jobs took 3.5 min each and
2 alone 1.8 min: a second wave of 2 costs more than 2 more jobs in the first).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from headsweep.sweeps.specs import SweepError
from headsweep.training.runs import RESULTS

DEFAULT_FOOTPRINT_GIB = 3.0  # a d_model 256 job with 2k-token batches and its CUDA context, with margin
MEMORY_SHARE = 0.9  # leave a tenth of the free memory for fragmentation and the driver


@dataclass(frozen=True)
class Card:
    index: int
    name: str
    free_gib: float
    total_gib: float


def cards() -> list[Card]:
    """The CUDA devices this process sees, with their free memory now."""
    found = []
    for i in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(i)
        found.append(Card(i, torch.cuda.get_device_name(i), free / 2**30, total / 2**30))
    return found


def device_slug(name: str) -> str:
    """A sweep-name suffix for a card, e.g. 'NVIDIA H100 80GB HBM3' -> 'h100', 'NVIDIA H200' -> 'h200'."""
    words = [w.lower() for w in re.split(r"[\s_-]+", name.replace("NVIDIA", "")) if w]
    model = next((w for w in words if any(c.isdigit() for c in w)), None)  # H100, A100, 4090, V100
    return "".join(c for c in (model or "gpu") if c.isalnum())


def measured_footprint(results_root: Path | None) -> float | None:
    """The largest per-job GPU memory peak (GiB) recorded by finished GPU runs under results_root."""
    if results_root is None or not results_root.is_dir():
        return None
    peaks = []
    # the store (each run once) and any sweep folder of the old layout; a view is its store entry again
    for path in {p.resolve() for p in results_root.glob(f"*/*/{RESULTS}")}:
        try:
            machine = json.loads(path.read_text()).get("machine") or {}
        except (OSError, json.JSONDecodeError):
            continue
        if machine.get("gpu_memory_peak_gib"):
            peaks.append(float(machine["gpu_memory_peak_gib"]))
    return max(peaks) if peaks else None


def packed_jobs(asked: int | None, found: list[Card], footprint_gib: float, cores: int) -> int:
    """Jobs at once over all cards: as many as the least free card holds, times the cards, at most one per
    core; `asked` (JOBS=N) is checked against the same limit. One line of SweepError when it cannot fit."""
    if not found:
        raise SweepError(
            "trainer=gpu but torch sees no CUDA GPU here: train on the CPU (trainer=cpu) "
            "or run the sweep on a machine with a GPU"
        )
    per_card = min(int(c.free_gib * MEMORY_SHARE // footprint_gib) for c in found)
    fit = per_card * len(found)
    least = min(found, key=lambda c: c.free_gib)
    if fit < 1:
        raise SweepError(
            f"one job needs ~{footprint_gib:.1f} GiB of GPU memory and {least.name} (cuda:{least.index}) "
            f"has {least.free_gib:.1f} GiB free: free the card or train on the CPU (trainer=cpu)"
        )
    limit = min(fit, cores)
    if asked is None:
        return limit
    if asked > fit:
        raise SweepError(
            f"JOBS={asked}: {asked} jobs of ~{footprint_gib:.1f} GiB each do not fit in the free memory of "
            f"{len(found)} x {least.name} ({least.free_gib:.1f} GiB free on cuda:{least.index}, "
            f"{MEMORY_SHARE:.0%} usable): at most {fit}; use JOBS={fit} or fewer"
        )
    if asked > 2 * cores:  # asked for, up to two per core: one wave instead of a short second one
        raise SweepError(
            f"JOBS={asked}: each GPU job is mostly one CPU thread feeding its card and this machine has "
            f"{cores} cores; use JOBS={min(fit, 2 * cores)} or fewer"
        )
    return asked


def device_override(job_index: int, n_cards: int) -> list[str]:
    """The card of the job_index-th job: round-robin over the cards (none to name with one card)."""
    return [] if n_cards <= 1 else [f"trainer.devices=[{job_index % n_cards}]"]
