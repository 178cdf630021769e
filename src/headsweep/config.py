"""The one place that knows where the configs are and how to compose them.

conf/ holds the Hydra config groups (data, model, module, trainer, logger, callbacks, budget, experiment,
analysis); sweeps/ holds the W&B sweep specs. `compose(overrides)` gives the config `python -m
headsweep.train overrides` would run; `register_resolvers()` adds the ${auto_precision:}, ${width_scaled_lr:}
and ${attention_scaled_lr:} resolvers the configs use (the entry points and `compose` call it; importing this
module does not).
"""

from __future__ import annotations

from pathlib import Path

import torch
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]  # the repository (the package is installed editable)
CONF_DIR = ROOT / "conf"
SWEEPS_DIR = ROOT / "sweeps"
# Written by `python -m headsweep.bench.decode_speed --sweep NAME` into results/<sweep>/, read by the report.
DECODE_SPEED = "decode_speed.json"


def cpu_has_bf16() -> bool:
    """Native bf16 matmuls (AVX512-BF16 or AMX): without them bf16 runs 5-130x slower than fp32 here."""
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def auto_precision() -> str:
    """bf16 autocast on a GPU or a CPU with native bf16 matmuls, else fp32."""
    return "bf16-mixed" if torch.cuda.is_available() or cpu_has_bf16() else "32-true"


def width_scaled_lr(peak: float, at_d_model: int, d_model: int) -> float:
    """A peak learning rate tuned at one width, moved to another by d_model^-0.5, the scaling of the paper's
    schedule (lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)): wider models take smaller steps."""
    if int(d_model) < 1 or int(at_d_model) < 1:  # a negative width would give a complex rate, not an error
        raise ValueError(f"width_scaled_lr needs positive widths, got d_model={d_model} (tuned at {at_d_model})")
    return float(peak) * (int(at_d_model) / int(d_model)) ** 0.5


def attention_scaled_lr(peak: float, at_width: int, heads: int, d_v: int | None) -> float:
    """A peak learning rate tuned at one attention width h·d_v, moved to another by 1 / (h·d_v): under Adam
    each weight moves by about the learning rate per step, so the change of the attention output W_O (fan-in
    h·d_v) grows with its fan-in; this keeps it at the tuned width's. For sweeps that widen the attention
    beyond d_model (many heads at a fixed d_k, d_v)."""
    if d_v is None:
        raise ValueError("attention_scaled_lr needs model.d_v set (it scales by h * d_v)")
    if int(heads) < 1 or int(d_v) < 1:  # a bad size is reported as itself, not as a bad learning rate
        raise ValueError(f"attention_scaled_lr needs positive sizes, got heads={heads} d_v={d_v}")
    return float(peak) * int(at_width) / (int(heads) * int(d_v))


def register_resolvers() -> None:
    OmegaConf.register_new_resolver("auto_precision", auto_precision, replace=True)
    OmegaConf.register_new_resolver("width_scaled_lr", width_scaled_lr, replace=True)
    OmegaConf.register_new_resolver("attention_scaled_lr", attention_scaled_lr, replace=True)


def option(group: str, name: str = "default") -> dict:
    """One option file of a config group as plain values, e.g. option("analysis"): conf/analysis/default.yaml,
    for a command line that is not Hydra's to take its defaults from (make analyze)."""
    return OmegaConf.to_container(OmegaConf.load(CONF_DIR / group / f"{name}.yaml"), resolve=True)


def compose(overrides: list[str] = ()):
    """The `train` config with these command-line overrides, as Hydra composes it."""
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="train", overrides=list(overrides))
