"""Settings a sweep writes into every job as plain values, so that results.json and the comparison of
runs (same experiment or not) see numbers, not interpolations that resolve differently elsewhere:

- trainer.precision and trainer.accelerator depend on the machine (${auto_precision:} is bf16-mixed on a
  CPU with bf16 matmul units, fp32 elsewhere). A sweep never mixes them: its finished jobs in
  results/<sweep>/ fix them for the rest, and a machine that cannot run that precision stops the sweep.
- module.peak_lr depends on the cell's width (${width_scaled_lr:...}).
"""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from headsweep.config import cpu_has_bf16
from headsweep.sweeps.specs import SweepError
from headsweep.training.runs import RESULTS, is_complete, read_results

SHARED = ("trainer.precision", "trainer.accelerator")  # one value per sweep
# written into each job as a plain value (init_ff2_gain: a sweep may tie it to W^O's, '${model.init_wo_gain}')
RESOLVED = (*SHARED, "module.peak_lr", "model.init_ff2_gain")


def _get(config: dict, key: str):
    node = config
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def finished_values(sweep_results: Path) -> dict[str, dict]:
    """{key: {value: a job that ran with it}} over the complete jobs in results/<sweep>/."""
    found: dict[str, dict] = {key: {} for key in SHARED}
    for path in sorted(sweep_results.glob(f"*/{RESULTS}")):
        if path.parent.name.startswith(".") or not is_complete(path.parent):
            continue
        config = read_results(path.parent)["config"]
        for key in SHARED:
            found[key].setdefault(
                str(_get(config, key) or ("cpu" if key == "trainer.accelerator" else "32-true")), path.parent.name
            )
    return found


def shared_overrides(name: str, results: Path | None, extra: list[str]) -> list[str]:
    """Overrides that keep the sweep on the precision and device its finished jobs ran with; one line of
    SweepError where that cannot be (finished jobs disagree, the command asks for another value, or this
    machine cannot run it)."""
    if results is None or not (results / name).is_dir():
        return []
    asked = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in extra if "=" in o}
    out = []
    for key, values in finished_values(results / name).items():
        if len(values) > 1:
            jobs = ", ".join(f"{job} {v}" for v, job in values.items())
            raise SweepError(
                f"{results / name} mixes {key} ({jobs}): a sweep compares cells in one precision "
                "and on one device; move the odd jobs away"
            )
        if not values:
            continue
        ((value, job),) = values.items()
        if key in asked and asked[key] != value:
            raise SweepError(
                f"{results / name} ran {key}={value} ({job}) and the sweep's spec or command asks for "
                f"{key}={asked[key]}: a sweep never mixes them; drop the override or start the sweep "
                f"anew elsewhere (--results DIR)"
            )
        if (
            key == "trainer.precision"
            and value.startswith("bf16")
            and not cpu_has_bf16()
            and not torch.cuda.is_available()
        ):
            raise SweepError(
                f"{results / name} ran {value} ({job}) and this CPU has no bf16 matmul units "
                "(bf16 runs 5-130x slower than fp32 here): finish the sweep on a CPU with AVX512-BF16 "
                "or AMX, or start it anew elsewhere (--results DIR)"
            )
        if key == "trainer.accelerator" and value == "gpu" and not torch.cuda.is_available():
            raise SweepError(
                f"{results / name} ran on a GPU ({job}) and this machine has none: a sweep never "
                "mixes devices; finish it on a GPU or start it anew elsewhere (--results DIR)"
            )
        if key not in asked:
            out.append(f"{key}={value}")
    return out


def resolved_values(cfg: DictConfig) -> dict:
    """{key: value} of each RESOLVED key whose composed value is an interpolation (pass them on as
    key=value overrides)."""
    out = {}
    for key in RESOLVED:
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent)
        if node is not None and leaf in node and OmegaConf.is_interpolation(node, leaf):
            out[key] = OmegaConf.select(cfg, key)
    return out
