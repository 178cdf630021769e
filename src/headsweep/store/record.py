"""The run record, results.json, and the identity of an experiment.

- Identity: `experiment_settings(flat)` are the settings that change what is trained and how it is scored
  (EXPERIMENT_KEYS, less NOT_EXPERIMENT); `experiment_key(config)` is the short hash of those settings and
  the seed of a resolved config. Everything that decides "the same experiment" (reuse when planning a
  sweep, the report's de-duplication) uses these two.
- Record: results.json, typed (`Record`, SCHEMA_VERSION), read and written only through `read_record` /
  `write_record`. A record without `schema_version` is version 1 (before the store); a half-written one
  raises `CorruptRecord`, one line naming the file, and is never deleted.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from headsweep.config import ROOT
from headsweep.data.files import atomic_write
from headsweep.identity import flat_heads_as_used
from headsweep.model import resolve_heads

RESULTS = "results.json"
SCHEMA_VERSION = 2  # 1: no schema_version, no views, machine paths; 2: the store's record

# What makes two runs the same experiment (and the same outputs: the analysis after training counts);
# paths, loggers, threads, launcher and names may differ.
# The device class counts: a GPU run is never taken for the CPU run of the same settings (bf16 kernels differ);
# so does machine_class where set (null, every run before it, leaves the key as it was).
# A cooldown branch of `make budgets` counts the trunk it continues (its key) and the step it leaves it at: a branch
# is never another run's experiment, whatever its schedule (the rest of the budgets record is not identity).
EXPERIMENT_KEYS = (
    "model.",
    "module.",
    "data.",
    "trainer.max_steps",
    "trainer.precision",
    "trainer.accelerator",
    "average_last",
    "analysis",
    "budgets.trunk",
    "budgets.step",
    "machine_class",
)
# Where the files come from, not what they hold (data.hub_fallback: where the same corpus is on the hub).
NOT_EXPERIMENT = ("data.dir", "data.cache_dir", "data.num_workers", "data.seed", "data.hub_fallback")


class CorruptRecord(ValueError):
    """A half-written or unreadable results.json: reports and planning leave it out with this line."""


# -- identity ---------------------------------------------------------------------------------------------

# Settings added after runs were recorded, with the value that reproduces those runs: a saved config
# without the key is read with it, so older reference results still compare as the same experiment.
ADDED_SETTINGS = {
    "model.concrete_gates": False,
    "module.l0_lambda": 0.0,
    "module.gate_lr": 0.05,
    "model.kv_heads": None,
    "model.fixed_heads": None,
    "model.fixed_patterns": None,
    # issue 42: runs before it used xavier on every attention projection, and decayed by
    # the larger of the step and time shares under every budget
    "model.init": "xavier",
    "model.init_kv_gain": 1.0,
    "module.decay_by": "steps_or_time",
    # issue 53: every head drawn on its own, unperturbed
    "model.init_heads": "independent",
    "model.init_heads_noise": 0.0,
    # the residual outputs' starting scale: W^O and W_2 as drawn
    "model.init_wo": "fan_in",
    "model.init_wo_base": None,
    "model.init_wo_gain": 1.0,
    "model.init_ff2_gain": 1.0,
    # issue 70: one sentence pair per example
    "data.join": 1,
    # issue 68: wsd decayed linearly
    "module.cooldown": "linear",
}
# Settings added at a default that trains what was trained before them: left out of the identity at that value,
# so every run recorded before them keeps its key (and results/runs/<key>/), while any other value is another
# experiment.
NEUTRAL_SETTINGS = {
    "model.init_heads": "independent",
    "model.init_heads_noise": 0.0,
    "model.init_wo": "fan_in",
    "model.init_wo_gain": 1.0,
    "model.init_ff2_gain": 1.0,
    "data.join": 1,
    "module.cooldown": "linear",
}


def flatten_config(cfg: DictConfig | dict) -> dict:
    """Leaf values by dotted key, interpolations unresolved, d_k/d_v as the model uses them, settings
    added since a saved run was made at their old behaviour (ADDED_SETTINGS). A saved run's config (a plain
    dict from its results.json) is read as it is: building its OmegaConf tree took 60 ms a run, most of a
    `make report`."""
    skip = {"seed", "run_name", "sweep", "cell", "tags", "paths", "logger"}
    out = {}

    def walk(node, prefix):
        for k, v in node.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict):
                walk(v, key + ".")
            else:
                out[key] = tuple(v) if isinstance(v, list) else v

    tree = cfg if isinstance(cfg, dict) else OmegaConf.to_container(cfg, resolve=False)
    walk({k: v for k, v in tree.items() if k not in skip}, "")
    out["model.d_k"], out["model.d_v"], _ = resolve_heads(
        out["model.d_model"], out["model.heads"], out["model.d_k"], out["model.d_v"]
    )
    for key, value in ADDED_SETTINGS.items():
        out.setdefault(key, value)
    flat_heads_as_used(out)
    return out


def experiment_settings(flat: dict) -> dict:
    """The experiment settings of a flattened config (flatten_config: settings added since a saved
    run was made read at their old behaviour, so an old record and a new job compare equal)."""
    from headsweep.model.lr_scaling import is_identity  # torch-free arithmetic on the flat settings

    # per-matrix rates whose factors are all 1 (lr_scaling none, or the base cell) train what no scaling does
    same_rates = is_identity(flat)
    # likewise W^O's mup init at the base's own fan-in (factor 1), and a base that no mup init reads
    same_wo = flat.get("model.init_wo", "fan_in") == "fan_in" or flat.get("model.init_wo_base") == (
        flat["model.heads"] * flat["model.d_v"]
    )
    return {
        k: v
        for k, v in flat.items()
        if k.startswith(EXPERIMENT_KEYS)
        and ".".join(k.split(".")[:2]) not in NOT_EXPERIMENT
        and not k.startswith("module.model.")
        and not (same_rates and k.startswith(("module.lr_scaling", "module.lr_base")))
        and not (same_wo and k in ("model.init_wo", "model.init_wo_base"))
    }


_SAVED: dict[str, dict] = {}


def saved_settings(config: dict) -> dict:
    """A saved run's experiment settings, flattened once per config: planning compares each job with every
    finished run, and building the OmegaConf tree each time made it take a minute."""
    key = json.dumps(config, sort_keys=True, default=str)
    if key not in _SAVED:
        _SAVED[key] = experiment_settings(flatten_config(config))
    return _SAVED[key]


def _unresolved(value) -> bool:
    return isinstance(value, str) and "${" in value


def settings_key(settings: dict, seed) -> str:
    """12 hex digits of sha256 over the canonical settings and seed. Values compare by repr (1 and 1.0
    differ, as they did when runs were compared key by key); a null and a missing key are the same, and so are a
    NEUTRAL_SETTINGS default and a missing key."""
    canon = {
        k: repr(v)
        for k, v in settings.items()
        if v is not None and not _unresolved(v) and not (k in NEUTRAL_SETTINGS and v == NEUTRAL_SETTINGS[k])
    }
    text = json.dumps({"settings": canon, "seed": seed}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def experiment_key(config: dict) -> str:
    """The key of a resolved config (a record's `config`): its experiment settings and seed."""
    return settings_key(saved_settings(config), config.get("seed"))


def model_key(config: dict) -> str:
    """The key of the trained model alone: the experiment's, less the analysis after training. Two
    experiments that differ only there (adopt_run: one sweep analyses the model another trained) measured
    one model: a view that pools runs counts it once."""
    settings = {k: v for k, v in saved_settings(config).items() if k != "analysis" and not k.startswith("analysis.")}
    return settings_key(settings, config.get("seed"))


def flat_key(flat: dict, seed) -> str:
    """The key of a planned job: its flattened settings (planning.compose_cell) and seed."""
    return settings_key(experiment_settings(flat), seed)


def settings_diff(config: dict, flat: dict, seed) -> tuple[list[str], dict, dict]:
    """The experiment settings (and seed) in which a saved run's config differs from a job's: the same
    comparison as the keys, spelled out for an error message."""
    theirs = dict(saved_settings(config))
    ours = experiment_settings(flat)
    ours.setdefault("trainer.precision", theirs.get("trainer.precision"))
    diff = [
        k
        for k in sorted(ours.keys() | theirs.keys())
        if repr(ours.get(k)) != repr(theirs.get(k)) and not _unresolved(ours.get(k))
    ]
    if config.get("seed") != seed:
        diff.insert(0, "seed")
    return diff, theirs, ours


# -- the record -------------------------------------------------------------------------------------------


@dataclass
class Record:
    """results.json. The report and planning read status, config, metrics and views; the rest (scores,
    params, hypotheses, machine, ...) stays as written, in `raw`."""

    status: str
    config: dict | None = None
    metrics: dict | None = None
    views: list[dict] = field(default_factory=list)  # [{"sweep", "job", "tags"}]: where the store shows it
    schema_version: int = SCHEMA_VERSION
    raw: dict = field(default_factory=dict)

    @property
    def seed(self):
        return (self.config or {}).get("seed")

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    def as_dict(self) -> dict:
        out = {"schema_version": self.schema_version, "status": self.status}
        if self.config is not None:
            out["config"] = self.config
        if self.metrics is not None:
            out["metrics"] = self.metrics
        out.update(self.raw)
        if self.views:
            out["views"] = self.views
        return out

    @classmethod
    def from_dict(cls, d: dict, version: int | None = None) -> Record:
        raw = {k: v for k, v in d.items() if k not in ("schema_version", "status", "config", "metrics", "views")}
        return cls(
            status=d.get("status"),
            config=d.get("config"),
            metrics=d.get("metrics"),
            views=list(d.get("views") or []),
            schema_version=version or d.get("schema_version") or 1,
            raw=raw,
        )

    def view(self, sweep: str, job: str) -> dict | None:
        return next((v for v in self.views if v.get("sweep") == sweep and v.get("job") == job), None)


_V1_READ: set[str] = set()


def read_record(run_dir: str | Path) -> Record | None:
    """The record in run_dir (None if there is none yet); CorruptRecord if it cannot be read whole."""
    path = Path(run_dir) / RESULTS
    if not path.is_file():
        return None
    try:
        d = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptRecord(f"{path}: unreadable {RESULTS} (half-written?): {e}") from None
    if not isinstance(d, dict) or not isinstance(d.get("status"), str):
        raise CorruptRecord(f"{path}: not a run record (no status)")
    if "schema_version" not in d:
        _V1_READ.add(str(path.resolve()))
    return Record.from_dict(d)


def write_record(run_dir: str | Path, record: Record) -> Path:
    """Atomically: a killed writer never leaves a half-written record."""
    path = Path(run_dir) / RESULTS
    atomic_write(path, json.dumps(record.as_dict(), indent=2, default=str))
    return path


def schema_note() -> str | None:
    """One line, once per report: how many records of schema 1 (before the store) were read as such since
    the last note."""
    if not _V1_READ:
        return None
    n = len(_V1_READ)
    _V1_READ.clear()
    return (
        f"{n} records of schema 1 read as version 1 "
        "(run `python -m headsweep.store migrate` to move them into the store)"
    )


# -- paths in a record --------------------------------------------------------------------------------------


def strings(obj):
    """Every string in a record's nested dicts and lists."""
    if isinstance(obj, dict):
        for v in obj.values():
            yield from strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from strings(v)
    elif isinstance(obj, str):
        yield obj


def map_strings(obj, fn):
    """`obj` with every string in its nested dicts and lists replaced by fn(string)."""
    if isinstance(obj, dict):
        return {k: map_strings(v, fn) for k, v in obj.items()}
    if isinstance(obj, list):
        return [map_strings(v, fn) for v in obj]
    return fn(obj) if isinstance(obj, str) else obj


def relative_paths(obj, roots: list[str]):
    """`obj` with every string that is an absolute path under one of `roots` (a checkout the run was trained
    or exported in) made relative to it: a record names no machine's directories."""
    prefixes = [root.rstrip("/") + "/" for root in sorted(roots, key=len, reverse=True)]
    return map_strings(obj, lambda s: next((s[len(p) :] for p in prefixes if s.startswith(p)), s))


def local_path(path: str | Path) -> Path:
    """A path a record names, on this machine: a relative one is relative to the checkout."""
    p = Path(path)
    return p if p.is_absolute() else ROOT / p


def as_seen(record: Record, sweep: str, job: str) -> dict:
    """The record as this view shows it: the view's sweep and tags in its config (what the run of a sweep
    that shares it was tagged with there), and the first view it was shown in as `shared_from`."""
    results = record.as_dict()
    view = record.view(sweep, job)
    if view is None:
        return results
    first = record.views[0]
    # the learning-rate selection is the view's: a sweep that shows another sweep's grid run as a plain run
    # must not see it as a grid run (the record's own lr_select belongs to its first view)
    lr = view["lr_select"] if "lr_select" in view else (results["config"].get("lr_select") if view is first else None)
    results["config"] = {
        **results["config"],
        "sweep": view["sweep"],
        "tags": list(view.get("tags") or []),
        **({"lr_select": lr} if lr is not None or "lr_select" in results["config"] else {}),
    }
    if first is not view and "shared_from" not in results:
        results["shared_from"] = {
            "run": f"{first['sweep']}/{first['job']}",
            "sweep": first["sweep"],
            "tags": first.get("tags"),
        }
    return results


def stopped_short(results: dict) -> str | None:
    """'stopped at step 1046 of 1150 by trainer.max_time 00:01:30:00': a run its time cap ended before
    trainer.max_steps; None for a run that trained them all (or records no step count). Such a run is no run of its
    budget: its rate had not decayed. The rate choice refuses it; a verdict leaves it out, named."""
    steps = results.get("metrics", {}).get("train/steps")
    trainer = results.get("config", {}).get("trainer") or {}
    cap = trainer.get("max_steps")
    if steps is None or cap is None or int(cap) < 0 or int(steps) >= int(cap):
        return None
    return f"stopped at step {int(steps)} of {int(cap)} by trainer.max_time {trainer.get('max_time')}"
