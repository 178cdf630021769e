"""Sweep specs: sweeps/<name>.yaml, W&B grid-sweep specs whose parameters are Hydra override keys, each merged
over sweeps/_base.yaml (what every spec shares). A spec's `variants:` are sweeps of their own, named
<spec>_<variant> (heads_fixed_dk_fp32: heads_fixed_dk with its variant fp32). Resolving a sweep name to its full
spec and checking it, expanding its grid (the seed apart: it makes a cell's jobs), naming cells, and writing the
full spec W&B reads (`python -m headsweep.sweeps.specs wandb <sweep> [--out FILE]`, `make wandb-spec`)."""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from headsweep.config import SWEEPS_DIR

# Keys each job sets itself; the same key on the command line would give every job one name/seed.
# module.lr_base, model.init_wo_base: the base cell's fan-ins, which planning sets from the sweep's base (mup).
RESERVED = (
    "seed",
    "run_name",
    "sweep",
    "cell",
    "tags",
    "hydra.sweep.dir",
    "hydra.sweep.subdir",
    "module.lr_base",
    "model.init_wo_base",
)
BASE = "_base"  # sweeps/_base.yaml; a file whose name starts with _ is no sweep
# A W&B sweep spec's top-level keys (docs.wandb.ai, "Sweep configuration options"), in the order written out.
WANDB_KEYS = (
    "name",
    "description",
    "entity",
    "project",
    "program",
    "method",
    "metric",
    "early_terminate",
    "run_cap",
    "command",
    "parameters",
)
# What a spec has besides W&B's keys: its variants, and whether it runs only as one of them.
SPEC_ONLY_KEYS = ("variants", "variants_only")
# A variant: constants added or changed (set), an axis narrowed to some of its values (only) or given its own
# values (grid: another model size), constants left at the config's default (unset), and its own description.
VARIANT_KEYS = ("description", "set", "only", "grid", "unset")


class SweepError(ValueError):
    """A bad sweep name, spec or override; the one-line message says what to change."""


def _read(path: Path):
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise SweepError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None


def sweep_names(specs_dir: Path = SWEEPS_DIR) -> dict[str, tuple[str, str | None]]:
    """{sweep name: (spec, variant or None)} of every spec in specs_dir and each of its variants."""
    names: dict[str, tuple[str, str | None]] = {}
    for path in sorted(specs_dir.glob("*.yaml")):
        if path.stem.startswith("_"):
            continue
        try:
            spec = _read(path)
        except SweepError:
            spec = None  # listed under its own name: loading it says what is wrong
        spec = spec if isinstance(spec, dict) else {}
        variants = spec.get("variants") or {}
        if not isinstance(variants, dict):
            variants = {}  # loading the spec says what is wrong
        own = [] if spec.get("variants_only") is True and variants else [(path.stem, (path.stem, None))]
        for name, pair in [*own, *((f"{path.stem}_{v}", (path.stem, str(v))) for v in variants)]:
            if name in names:
                first = names[name]
                raise SweepError(f"two sweeps are named {name}: {_where(*first)} and {_where(*pair)}; rename one")
            names[name] = pair
    return names


def available(specs_dir: Path = SWEEPS_DIR) -> list[str]:
    """Every sweep name: each spec's own (unless it runs only as its variants) and <spec>_<variant>."""
    return sorted(sweep_names(specs_dir))


def _where(spec: str, variant: str | None) -> str:
    return f"sweeps/{spec}.yaml" + (f" variant {variant}" if variant else "")


def spec_source(name: str, specs_dir: Path = SWEEPS_DIR) -> str:
    """Where a sweep is written: 'sweeps/table3_a.yaml', 'sweeps/heads_fixed_dk.yaml variant fp32'."""
    return _where(*sweep_names(specs_dir)[name])


def load_spec(name: str, specs_dir: Path = SWEEPS_DIR) -> tuple[dict, Path]:
    """(the sweep's full W&B spec: sweeps/_base.yaml, its spec's own keys over it, then its variant; the spec
    file). The spec's `name` is the sweep's."""
    names = sweep_names(specs_dir)
    if name not in names:
        path = specs_dir / f"{name}.yaml"
        if path.is_file() and not name.startswith("_"):
            variants = [n for n, (s, _) in names.items() if s == name]
            raise SweepError(f"{path} has variants_only: true: run one of its variants: {', '.join(variants)}")
        stems = sorted({s for s, _ in names.values() if name.startswith(f"{s}_")}, key=len)
        if stems:  # a variant its spec does not have
            spec, variant = stems[-1], name[len(stems[-1]) + 1 :]
            variants = [v for s, v in names.values() if s == spec and v]
            raise SweepError(
                f"unknown sweep '{name}': sweeps/{spec}.yaml has no variant '{variant}' (its variants: "
                f"{', '.join(variants) or 'none'}; a sweep is named <spec>_<variant>)"
            )
        raise SweepError(
            f"unknown sweep '{name}'; available: {', '.join(sorted(names)) or '(none)'} "
            f"(the files in {specs_dir} and their variants: <spec>_<variant>)"
        )
    stem, variant = names[name]
    path = specs_dir / f"{stem}.yaml"
    spec = _read(path)
    if not isinstance(spec, dict) or not isinstance(spec.get("parameters"), dict) or not spec["parameters"]:
        raise SweepError(f"{path}: no 'parameters' mapping: a W&B sweep spec with parameters keyed by override keys")
    if spec.get("name", stem) != stem:
        raise SweepError(f"{path}: name is {spec['name']!r}; a spec is named by its file: name: {stem}")
    if unknown := sorted(set(spec) - set(WANDB_KEYS) - set(SPEC_ONLY_KEYS)):
        raise SweepError(
            f"{path}: unknown key {unknown[0]!r}; a spec has W&B's keys ({', '.join(WANDB_KEYS)}) and "
            f"{', '.join(SPEC_ONLY_KEYS)}"
        )
    variants = spec.get("variants") or {}
    if not isinstance(variants, dict):
        raise SweepError(f"{path}: variants must map each variant's name to its overrides, got {variants!r}")
    base_path = specs_dir / f"{BASE}.yaml"
    base = _read(base_path) if base_path.is_file() else {}
    if not isinstance(base, dict) or not isinstance(base.get("parameters", {}), dict):
        raise SweepError(f"{base_path}: not a mapping of W&B sweep keys with a parameters mapping")
    merged = {**base, **{k: v for k, v in spec.items() if k not in SPEC_ONLY_KEYS}, "name": name}
    params = dict(spec["parameters"])
    params.update({k: p for k, p in (base.get("parameters") or {}).items() if k not in params})
    merged["parameters"] = params
    if variant is not None:
        merged = apply_variant(merged, stem, variant, {str(k): v for k, v in variants.items()}[variant])
    check_parameters(merged["parameters"], f"{path}" + (f" variant {variant}" if variant else ""))
    if merged.get("method") != "grid":
        raise SweepError(f"{path}: method is {merged.get('method')!r}; only 'grid' sweeps run here")
    return merged, path


def _axis_keys(key: str, values: list) -> set[str]:
    """The keys an axis sets: itself, and where its values are dicts (model={heads:8,d_k:8}) each of theirs."""
    keys = {key}
    parser = OverridesParser.create()
    for v in values:
        if isinstance(v, str) and v.startswith("{"):
            try:
                parsed = parser.parse_override(f"{key}={v}").value()
            except Exception:
                continue  # composing the cell says what is wrong with it
            if isinstance(parsed, dict):
                keys |= {f"{key}.{k}" for k in parsed}
    return keys


def apply_variant(spec: dict, stem: str, variant: str, block) -> dict:
    """The spec with its variant applied; anything a variant cannot mean stops with one line."""
    where = f"sweeps/{stem}.yaml variant {variant}"
    block = {} if block is None else block
    if not isinstance(block, dict) or (bad := sorted(set(block) - set(VARIANT_KEYS))):
        got = bad[0] if isinstance(block, dict) else type(block).__name__
        raise SweepError(f"{where}: {got!r} is not a variant key; a variant is a mapping of {', '.join(VARIANT_KEYS)}")
    params = {k: dict(p) if isinstance(p, dict) else p for k, p in spec["parameters"].items()}
    swept = {k: p["values"] for k, p in params.items() if isinstance(p, dict) and isinstance(p.get("values"), list)}
    parts = {}
    for part in ("set", "only", "grid"):
        parts[part] = block.get(part) or {}
        if not isinstance(parts[part], dict):
            raise SweepError(f"{where}: {part}: must map override keys to values, got {parts[part]!r}")
    unset = block.get("unset") or []
    if not isinstance(unset, list):
        raise SweepError(f"{where}: unset: must list keys, got {unset!r}")
    for part in ("only", "grid"):
        for key, values in parts[part].items():
            if key not in swept:
                raise SweepError(
                    f"{where}: {part}: {key} is not an axis of {stem} (its axes: "
                    f"{', '.join(swept) or 'none'}); a constant is changed with set:"
                )
            if not isinstance(values, list) or not values:
                raise SweepError(f"{where}: {part}: {key} needs a non-empty list of values, got {values!r}")
    if both := sorted(set(parts["only"]) & set(parts["grid"])):
        raise SweepError(f"{where}: {both[0]} is under both only: and grid:; give it one")
    for key, values in parts["only"].items():
        if missing := [v for v in values if v not in swept[key]]:
            raise SweepError(
                f"{where}: only: {key} lists {missing}, not among {stem}'s values {swept[key]}; "
                "only: picks some of the spec's cells (grid: gives an axis its own values)"
            )
        params[key] = {"values": [v for v in swept[key] if v in values]}  # the spec's order: its base first
    for key, values in parts["grid"].items():
        params[key] = {"values": list(values)}
    axes = {k: p["values"] for k, p in params.items() if k in swept}
    for key, value in parts["set"].items():
        if hit := next((a for a, vs in axes.items() if key in _axis_keys(a, vs)), None):
            raise SweepError(
                f"{where}: set: {key}: {stem} sweeps over {hit} ({axes[hit]}), which sets it; a variant "
                "changes settings, not the grid: drop it, or pick cells with only: or give the axis "
                "its own values with grid:"
            )
        params[key] = {"value": value}
    for key in unset:
        if key not in params or key in swept:
            constants = [k for k in params if k not in swept]
            raise SweepError(f"{where}: unset: {key} is not one of {stem}'s constants ({', '.join(constants)})")
        if key in parts["set"]:
            raise SweepError(f"{where}: {key} is both set and unset; give it one")
        del params[key]
    if "seed" in params:  # the seed last, as in every spec: W&B's grid is the cells x seeds
        params["seed"] = params.pop("seed")
    out = {**spec, "parameters": params}
    if "description" in block:
        out["description"] = block["description"]
    return out


def check_parameters(parameters: dict, where: str) -> None:
    for key, p in parameters.items():
        if key in RESERVED and key != "seed":
            raise SweepError(f"{where}: parameter '{key}' is set by the sweep itself")
        if not isinstance(p, dict) or not (("value" in p) ^ ("values" in p)):
            raise SweepError(f"{where}: parameter '{key}' needs exactly one of 'value' or 'values' (a grid)")
        values = [p["value"]] if "value" in p else p["values"]
        if not isinstance(values, list) or not values:
            raise SweepError(f"{where}: parameter '{key}': 'values' must be a non-empty list")
        if any(v is None for v in values):
            raise SweepError(f"{where}: parameter '{key}' has a null value; W&B would pass it as the string None")


def wandb_spec(name: str, specs_dir: Path = SWEEPS_DIR) -> dict:
    """The sweep's full spec as `wandb sweep` reads it: W&B's keys only, in W&B's documented order."""
    spec, _ = load_spec(name, specs_dir)
    return {k: spec[k] for k in WANDB_KEYS if k in spec}


def write_wandb_spec(name: str, out: Path | None, specs_dir: Path = SWEEPS_DIR) -> str:
    """The full W&B spec as YAML, written to `out` when given; a header says where it comes from."""
    spec = wandb_spec(name, specs_dir)  # first: a bad name or spec stops here with its one line
    text = (
        f"# Written by `make wandb-spec SWEEP={name}` from {spec_source(name, specs_dir)} over "
        f"sweeps/{BASE}.yaml: edit those, not this.\n"
        f"#   wandb sweep {out or '<this file>'}; wandb agent <sweep id>\n"
        + yaml.safe_dump(spec, sort_keys=False, allow_unicode=True, width=120)
    )
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    return text


def format_value(value) -> str:
    """A YAML value as Hydra reads it on the command line (what W&B's ${args_no_hyphens} passes, but
    with Hydra's spelling of booleans)."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def record_override(key: str, record) -> str:
    """A record (dicts, lists, numbers, strings, null) as one Hydra override `key=value`, e.g. lr_select={..}
    (the job file turns it into config: launch.job_config)."""

    def value(v):
        if v is None:
            return "null"
        if isinstance(v, list | tuple):
            return "[" + ",".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ",".join(f"{k}:{value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, float):
            return repr(v)
        if isinstance(v, str):  # quoted; a quote inside escaped (Hydra's grammar), e.g. a rate's origin "x's runs"
            return "'" + v.replace("'", "\\'") + "'"
        return str(v)

    return f"{key}={value(record)}"


def split_parameters(spec: dict) -> tuple[list[str], list[list[str]]]:
    """(constant overrides, grid cells): a cell is one override per `values` parameter (the seed apart: it
    makes the jobs of a cell); the first cell, made of every parameter's first value, is the base.
    W&B's grid is the same product with the seed as one more axis."""
    params = {k: p for k, p in spec["parameters"].items() if k != "seed"}
    constants = [f"{k}={format_value(p['value'])}" for k, p in params.items() if "value" in p]
    axes = [[f"{k}={format_value(v)}" for v in p["values"]] for k, p in params.items() if "values" in p]
    return constants, [list(cell) for cell in itertools.product(*axes)]


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Sweep specs: list the sweep names, or write one sweep's full "
        "W&B spec (sweeps/_base.yaml + its spec + its variant)"
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--specs", type=Path, default=SWEEPS_DIR, help="where the sweep specs are")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", parents=[common], help="every sweep name, with the spec (and variant) it comes from")
    w = sub.add_parser("wandb", parents=[common], help="the full W&B spec of a sweep, for `wandb sweep`")
    w.add_argument("sweep", help="a sweep, e.g. table3_a or heads_fixed_dk_fp32 (spec heads_fixed_dk, variant fp32)")
    w.add_argument("--out", type=Path, default=None, help="write it here (default: print it)")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            for name, pair in sweep_names(args.specs).items():
                print(f"{name:28} {_where(*pair)}")
        else:
            text = write_wandb_spec(args.sweep, args.out, args.specs)
            print(f"wrote {args.out}; run: wandb sweep {args.out}" if args.out else text, end="\n" if args.out else "")
    except SweepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
