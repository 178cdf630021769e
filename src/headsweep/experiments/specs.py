"""Sweep specs: sweeps/<name>.yaml, W&B grid-sweep specs whose parameters are Hydra override keys. Loading
and checking one, expanding its grid (the seed apart: it makes a cell's jobs), and naming cells."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from headsweep.config import SWEEPS_DIR
from headsweep.experiments.paper import ALIASES
from headsweep.model import head_sizes
from headsweep.model.patterns import DEFAULT_PATTERNS
from headsweep.model.transformer import FIXED_KINDS

# Keys each job sets itself; the same key on the command line would give every job one name/seed.
RESERVED = ("seed", "run_name", "sweep", "cell", "tags", "hydra.sweep.dir", "hydra.sweep.subdir")


class SweepError(ValueError):
    """A bad sweep name, spec or override; the one-line message says what to change."""


def available(specs_dir: Path = SWEEPS_DIR) -> list[str]:
    return sorted(p.stem for p in specs_dir.glob("*.yaml"))


def load_spec(name: str, specs_dir: Path = SWEEPS_DIR) -> tuple[dict, Path]:
    path = specs_dir / f"{name}.yaml"
    if not path.is_file():
        raise SweepError(f"unknown sweep '{name}'; available: {', '.join(available(specs_dir)) or '(none)'} "
                         f"(the files in {specs_dir})")
    try:
        spec = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise SweepError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("parameters"), dict) or not spec["parameters"]:
        raise SweepError(f"{path}: no 'parameters' mapping: a W&B sweep spec with parameters keyed by override keys")
    if spec.get("method") != "grid":
        raise SweepError(f"{path}: method is {spec.get('method')!r}; only 'grid' sweeps run here")
    for key, p in spec["parameters"].items():
        if key in RESERVED and key != "seed":
            raise SweepError(f"{path}: parameter '{key}' is set by the sweep itself")
        if not isinstance(p, dict) or not (("value" in p) ^ ("values" in p)):
            raise SweepError(f"{path}: parameter '{key}' needs exactly one of 'value' or 'values' (a grid)")
        values = [p["value"]] if "value" in p else p["values"]
        if not isinstance(values, list) or not values:
            raise SweepError(f"{path}: parameter '{key}': 'values' must be a non-empty list")
        if any(v is None for v in values):
            raise SweepError(f"{path}: parameter '{key}' has a null value; W&B would pass it as the string None")
    return spec, path


def format_value(value) -> str:
    """A YAML value as Hydra reads it on the command line (what W&B's ${args_no_hyphens} passes, but
    with Hydra's spelling of booleans)."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def split_parameters(spec: dict) -> tuple[list[str], list[list[str]]]:
    """(constant overrides, grid cells): a cell is one override per `values` parameter (the seed apart: it
    makes the jobs of a cell); the first cell, made of every parameter's first value, is the base.
    W&B's grid is the same product with the seed as one more axis."""
    params = {k: p for k, p in spec["parameters"].items() if k != "seed"}
    constants = [f"{k}={format_value(p['value'])}" for k, p in params.items() if "value" in p]
    axes = [[f"{k}={format_value(v)}" for v in p["values"]] for k, p in params.items() if "values" in p]
    return constants, [list(cell) for cell in itertools.product(*axes)]


# Settings added after runs were recorded, with the value that reproduces those runs: a saved config
# without the key is read with it, so older reference results still compare as the same experiment.
ADDED_SETTINGS = {"model.concrete_gates": False, "module.l0_lambda": 0.0, "module.gate_lr": 0.05,
                  "model.kv_heads": None, "model.fixed_heads": None, "model.fixed_patterns": None,
                  # issue 42: runs before it used xavier on every attention projection, and decayed by
                  # the larger of the step and time shares under every budget
                  "model.init": "xavier", "model.init_kv_gain": 1.0, "module.decay_by": "steps_or_time"}
# Cell-name parts of settings outside Table 3 (label_part): h8-dk32-dv32-kv2, ...-fixed_enc7.
LABEL_ALIASES = {"model.kv_heads": "kv", "model.init_kv_gain": "kvgain", **{f"model.fixed_heads.{kind}": f"fixed_{kind.split('_')[0]}"
                                             for kind in FIXED_KINDS}}


def flatten_config(cfg: DictConfig) -> dict:
    """Leaf values by dotted key, interpolations unresolved, d_k/d_v as the model uses them, settings
    added since a saved run was made at their old behaviour (ADDED_SETTINGS)."""
    skip = {"seed", "run_name", "sweep", "cell", "tags", "paths", "logger"}
    out = {}

    def walk(node, prefix):
        for k, v in node.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict):
                walk(v, key + ".")
            else:
                out[key] = tuple(v) if isinstance(v, list) else v

    walk({k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items() if k not in skip}, "")
    out["model.d_k"], out["model.d_v"] = head_sizes(out["model.d_model"], out["model.heads"], out["model.d_k"],
                                                    out["model.d_v"])  # null means d_model / h
    for key, value in ADDED_SETTINGS.items():
        out.setdefault(key, value)
    _heads_as_used(out)
    return out


def _heads_as_used(out: dict) -> None:
    """kv_heads, fixed heads and their patterns as the model uses them, so that null and its meaning compare
    equal: kv_heads null is h; fixed_heads {kind: n} becomes one count per kind (0 where unset); null
    patterns are the default list."""
    if out["model.kv_heads"] is None:
        out["model.kv_heads"] = out["model.heads"]
    out.pop("model.fixed_heads", None)  # a dict was walked into model.fixed_heads.<kind> leaves
    for kind in FIXED_KINDS:
        out.setdefault(f"model.fixed_heads.{kind}", 0)
    if out["model.fixed_patterns"] is None:
        out["model.fixed_patterns"] = DEFAULT_PATTERNS


def follows_heads(key: str, flats: list[dict]) -> bool:
    """kv_heads that equals h in every run is no setting of its own (no head shares its keys and values):
    no column or name part for it where h varies."""
    return key == "model.kv_heads" and all(f.get(key) == f.get("model.heads") for f in flats)


def follows_width(key: str, flats: list[dict]) -> bool:
    """A peak learning rate scaled by d_model^-0.5 in every run (conf/module: width_scaled_lr, the paper's
    schedule) moves with the model size, not as a setting of its own: Table 3 has no column for it."""
    if key != "module.peak_lr":
        return False
    scaled = {round(f[key] * f["model.d_model"] ** 0.5, 9) for f in flats if f.get(key) is not None}
    return len(scaled) == 1 and all(f.get(key) is not None for f in flats)


def label_part(key: str, value) -> str:
    alias = ALIASES.get(key) or LABEL_ALIASES.get(key) or key.rsplit(".", 1)[-1]
    text = f"{value:g}" if isinstance(value, float) else str(value)
    part = f"{alias}{text}" if isinstance(value, (int, float)) else f"{alias}-{text}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", part)


def cell_labels(flats: list[dict]) -> list[str]:
    """h8-dk32-dv32, plus each other setting that differs between the cells (N3-dm256-..., drop0.1-...)."""
    varied = [k for k in flats[0] if len({repr(f.get(k)) for f in flats}) > 1
              and k not in ("model.heads", "model.d_k", "model.d_v") and not follows_heads(k, flats)]
    varied.sort(key=lambda k: list(ALIASES).index(k) if k in ALIASES else len(ALIASES))  # Table 3's order
    return ["-".join([f"h{f['model.heads']}-dk{f['model.d_k']}-dv{f['model.d_v']}"]
                     + [label_part(k, f[k]) for k in varied]) for f in flats]


def row_tag(name: str) -> str:
    m = re.match(r"table3_([a-e])(_|$)", name)
    return f"row-{m.group(1).upper()}" if m else f"sweep-{name}"


def spec_seeds(spec: dict) -> list[int]:
    """The seeds a spec's `seed` parameter lists (what `wandb agent` runs), else [1]."""
    p = spec["parameters"].get("seed")
    if p is None:
        return [1]
    values = [p["value"]] if "value" in p else p["values"]
    if not all(isinstance(v, int) for v in values):
        raise SweepError(f"parameter 'seed' must list integers, got {values}")
    return values
