"""The explain page's points: each finished run of the sweeps read as a Point (its sizes, its protocol, its BLEU),
the protocol the fit is drawn from, and the budget every point must share."""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from headsweep.config import compose
from headsweep.reports.sweep.cells import ReportError, load_runs
from headsweep.sizes import model_of, shares_kv
from headsweep.store import flatten_config, model_key

SIZES = ("model.heads", "model.d_k", "model.d_v", "model.d_model", "model.d_ff")
# May differ between the cells of the fit: the sizes, what follows from them, and how a run was recorded.
FREE = (*SIZES, "model.kv_heads", "module.peak_lr", "trainer.precision", "trainer.max_time", "threads")
SETTINGS = ("model.", "module.", "trainer.max_steps", "data.max_tokens", "average_last")


@dataclass
class Point:
    sweep: str
    run: str
    h: int
    d_k: int
    d_v: int
    d_model: int
    precision: str
    bleu: float


def _settings(flat: dict) -> dict:
    return {
        k: v for k, v in flat.items() if k.startswith(SETTINGS) and k not in FREE and not k.startswith("module.model.")
    }


def read(root: Path, sweeps: list[str]) -> dict[str, tuple[list, list]]:
    """Each sweep's finished runs and the runs left out (load_runs), read once."""
    out = {}
    for sweep in sweeps:
        if not (root / sweep).is_dir():
            raise ReportError(f"no {root / sweep}: run `make sweep SWEEP={sweep}` first, or drop it from --sweeps")
        out[sweep] = load_runs(root / sweep)
    return out


@functools.cache
def default_lr(d_model: int) -> float:
    """The peak learning rate a cell of this width gets unless told otherwise (conf/module: width-scaled)."""
    return float(compose(["budget=ablation", f"model.d_model={d_model}"]).module.peak_lr)


# The training protocol (issue 42): how attention is initialised and what the schedule follows. The fit takes
# one protocol, never a mix: the init changes what the sizes cost (xavier's scale moves with h, d_k, d_v).
PROTOCOL = ("model.init", "module.decay_by")


def protocol_of(loaded: dict[str, tuple[list, list]], init: str | None = None) -> dict:
    """The protocol most runs of the view trained under, or the most common one with model.init `init`."""
    counts = Counter(
        tuple(r.flat.get(k) for k in PROTOCOL)
        for runs, _ in loaded.values()
        for r in runs
        if init is None or r.flat.get("model.init") == init
    )
    if not counts:
        raise ReportError(f"no run of the view trained with model.init={init}: drop --init, or run such a sweep")
    return dict(zip(PROTOCOL, counts.most_common(1)[0][0]))


def collect(
    root: Path, sweeps: list[str], loaded: dict | None = None, protocol: dict | None = None
) -> tuple[list[Point], list[str]]:
    """Each run of the sweeps that fits the view (the default model under `protocol`, by default the most
    common one), and one line per run left out (and why)."""
    loaded = loaded or read(root, sweeps)
    protocol = protocol or protocol_of(loaded)
    default = _settings(flatten_config(compose(["budget=ablation", *(f"{k}={v}" for k, v in protocol.items())])))
    points, left_out, seen = [], [], {}
    for sweep in sweeps:
        runs, unfinished = loaded[sweep]
        left_out += [f"{sweep}/{d.name}: {why}" for d, why in unfinished]
        for r in runs:
            other = {k: v for k, v in _settings(r.flat).items() if repr(default.get(k)) != repr(v)}
            if other:
                k = next(iter(other))
                left_out.append(f"{sweep}/{r.dir.name}: {k} = {other[k]!r} (default {default.get(k)!r})")
                continue
            f = r.flat
            lr, width_lr = f.get("module.peak_lr"), default_lr(f["model.d_model"])
            if isinstance(lr, (int, float)) and not math.isclose(lr, width_lr, rel_tol=1e-9):
                left_out.append(f"{sweep}/{r.dir.name}: module.peak_lr = {lr:g} (the width's default {width_lr:g})")
                continue
            if shares_kv(model_of(f)):  # shared K/V heads: another question
                left_out.append(f"{sweep}/{r.dir.name}: model.kv_heads = {f['model.kv_heads']} (not h)")
                continue
            same = model_key(r.results["config"])  # a run shown in several sweeps (or analysed twice) counts once
            if same in seen:
                left_out.append(f"{sweep}/{r.dir.name}: the same run as {seen[same]}")
                continue
            seen[same] = f"{sweep}/{r.dir.name}"
            points.append(
                Point(
                    sweep,
                    r.dir.name,
                    f["model.heads"],
                    f["model.d_k"],
                    f["model.d_v"],
                    f["model.d_model"],
                    str(f.get("trainer.precision")),
                    r.results["metrics"]["test/bleu"],
                )
            )
    return points, left_out


def check_budget(loaded: dict[str, tuple[list, list]]) -> int:
    """The one number of training steps every run of the view has; one line naming the odd sweep if not."""
    steps = {}
    for sweep, (runs, _) in loaded.items():
        for r in runs:
            steps.setdefault(r.flat["trainer.max_steps"], f"{sweep}/{r.dir.name}")
    if len(steps) > 1:
        found = ", ".join(f"{n} steps ({run})" for n, run in steps.items())
        raise ReportError(
            f"the sweeps ran different budgets: {found}; compare sweeps of one budget (drop the others from --sweeps)"
        )
    return next(iter(steps), 0)
