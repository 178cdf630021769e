"""Every setting a run reads, with its type and range or choices: the tables kept next to the constructors that
take them (model, module, data, analysis, callbacks), and here those of the groups whose constructors are
Lightning's or W&B's (trainer, logger) and the top-level keys of conf/train.yaml. `SCHEMA` joins them under
their full keys; `check_types` and `check_ranges` (checks.check_config calls both before any data is read)
give one line for a key the schema lacks or a value it does not allow: which key, what was given, what is
allowed, what to do."""

from __future__ import annotations

import difflib

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from headsweep.analysis.settings import ANALYSIS_SETTINGS
from headsweep.data.datamodule import DATA_SETTINGS
from headsweep.model.config import MODEL_SETTINGS
from headsweep.schema import Setting, choice, either, flag, integer, items, mapping, nullable, number, share, text
from headsweep.training.callbacks import (
    BRANCH_POINTS_SETTINGS,
    CHECKPOINT_SETTINGS,
    HEAD_SIMILARITY_SETTINGS,
    LR_MONITOR_SETTINGS,
)
from headsweep.training.module import MODULE_SETTINGS

# pytorch_lightning.Trainer's arguments that conf/trainer/ sets.
TRAINER_SETTINGS = {
    "_target_": text(),
    "accelerator": choice("cpu", "gpu", "cuda", "mps", "tpu", "auto"),
    "devices": integer(1, 4096, specials=("auto",), fix="e.g. trainer.devices=1"),
    "num_nodes": integer(1, 4096),
    "strategy": choice("auto", "ddp", "ddp_spawn", "ddp_fork", "ddp_notebook", "fsdp", "deepspeed"),
    # Lightning's names, and its integer spellings of the full-precision ones
    "precision": choice(
        "32-true",
        "bf16-mixed",
        "16-mixed",
        "bf16-true",
        "16-true",
        "64-true",
        "32",
        "16",
        "bf16",
        "64",
        specials=(32, 16, 64),
        fix="e.g. trainer.precision=32-true or bf16-mixed",
    ),
    # >= 2: the warm-up takes at least one step and must end before the budget does
    "max_steps": integer(2, 10**8, specials=(-1,), fix="e.g. trainer.max_steps=1150, or -1 for no step limit"),
    "max_epochs": nullable(integer(1, 10**6, specials=(-1,), fix="e.g. -1 (no epoch limit: the steps or time end it)")),
    "max_time": nullable(
        text(
            pattern=r"\d+:\d+:\d+:\d+",
            pattern_text='a duration "DD:HH:MM:SS"',
            fix='write it as "DD:HH:MM:SS", e.g. "00:00:25:00", or null for no time limit',
        )
    ),
    "val_check_interval": nullable(
        either(
            integer(1, 10**8),
            number(0.0, 1.0, lo_open=True),
            fix="e.g. 230 (steps), 0.5 (of an epoch), or null (once per epoch)",
        )
    ),
    "check_val_every_n_epoch": nullable(integer(1, 10**6)),
    "gradient_clip_val": nullable(number(0.0, 10**6, lo_open=True, fix="e.g. 1.0, or null for no clipping")),
    "log_every_n_steps": integer(1, 10**6),
    "num_sanity_val_steps": integer(0, 10**6, specials=(-1,)),
    "use_distributed_sampler": flag(),
    "enable_progress_bar": flag(),
    "default_root_dir": text(),
}

# conf/logger/: WandbLogger's and CSVLogger's arguments.
WANDB_SETTINGS = {
    "_target_": text(),
    "project": text(pattern=r"\S+", pattern_text="a project name"),
    "name": nullable(text()),
    "group": nullable(text()),
    "job_type": nullable(text()),
    "tags": items(text()),
    "mode": choice(
        "online", "offline", "disabled", "dryrun", fix="e.g. logger.wandb.mode=offline (or WANDB_MODE=offline)"
    ),
    "save_dir": text(),
    "log_model": flag(specials=("all",)),
}
CSV_SETTINGS = {
    "_target_": text(),
    "save_dir": text(),
    "name": nullable(text()),
    "version": nullable(either(text(), integer(0, 10**9))),
    "flush_logs_every_n_steps": integer(1, 10**6),
}

# The top-level keys of conf/train.yaml.
TOP_SETTINGS = {
    "seed": integer(0, 2**32 - 1, fix="e.g. seed=1"),
    "run_name": nullable(text(pattern=r"[^/\s]+", pattern_text="a name without spaces or /")),
    "sweep": nullable(text(pattern=r"[^/\s]+", pattern_text="a name without spaces or /")),
    "cell": nullable(text()),
    "tags": items(text(), fix="e.g. tags=[smoke]"),
    "average_last": integer(0, 1000, fix="e.g. average_last=5 (the paper's), or 0 for no averaging"),
    "average_from": share(fix="e.g. average_from=0.9"),
    "threads": nullable(integer(1, 1024, fix="e.g. threads=2, or null for torch's default")),
    "machine_class": nullable(text()),
    "export_dir": nullable(text()),
    "lr_select": nullable(mapping()),  # written by make sweep LR_GRID= (experiments.lr_select), a record
    "budgets": nullable(mapping()),  # written by make budgets (sweeps.budgets): a trunk's or a branch's place
    "paths.output_dir": text(),
    "init_from": nullable(text()),
}


def _under(prefix: str, table: dict[str, Setting]) -> dict[str, Setting]:
    return {f"{prefix}.{key}": s for key, s in table.items()}


# Every setting, by its full key, in the order they are checked: a key's value may be interpolated from
# keys above it (data.seed: ${seed}, module.peak_lr from model.d_model), which are checked first.
SCHEMA: dict[str, Setting] = {
    **TOP_SETTINGS,
    **_under("model", MODEL_SETTINGS),
    **_under("data", DATA_SETTINGS),
    **_under("module", MODULE_SETTINGS),
    **_under("trainer", TRAINER_SETTINGS),
    **_under("callbacks.checkpoint", CHECKPOINT_SETTINGS),
    **_under("callbacks.lr_monitor", LR_MONITOR_SETTINGS),
    **_under("callbacks.head_similarity", HEAD_SIMILARITY_SETTINGS),
    **_under("callbacks.branch_points", BRANCH_POINTS_SETTINGS),
    **_under("logger.wandb", WANDB_SETTINGS),
    **_under("logger.csv", CSV_SETTINGS),
    **_under("analysis", ANALYSIS_SETTINGS),
}
GROUPS = ("model", "data", "module", "trainer", "callbacks", "logger", "analysis", "budget", "experiment")


class SchemaError(ValueError):
    """A key the schema lacks or a value it does not allow (checks.check_config raises it as ConfigError)."""


def config_keys(cfg: DictConfig) -> dict[str, object]:
    """The settings in `cfg` by full key, unresolved."""
    return flat(OmegaConf.to_container(cfg, resolve=False))


def flat(tree: dict) -> dict[str, object]:
    """A config's values by full key: the schema's keys are leaves (a mapping such as model.fixed_heads is one
    setting), anything else is walked into."""
    found: dict[str, object] = {}

    def walk(node: dict, prefix: str) -> None:
        for name, value in node.items():
            key = f"{prefix}{name}"
            if key not in SCHEMA and isinstance(value, dict):
                walk(value, f"{key}.")
            else:
                found[key] = value

    walk(tree, "")
    return found


def where(key: str) -> str:
    """The conf/ file that sets a key."""
    group = key.split(".", 1)[0]
    return f"conf/{group}/" if group in GROUPS and "." in key else "conf/train.yaml"


def show(value) -> str:
    """A value as given, on one line and short."""
    shown = "null" if value is None else repr(value) if isinstance(value, (str, list, dict)) else str(value)
    shown = " ".join(shown.split())
    return shown if len(shown) <= 60 else shown[:57] + "..."


def value_of(cfg: DictConfig, key: str):
    """The key's resolved value as plain Python; `...` (Ellipsis) for one only a Hydra run can resolve
    (${hydra:runtime.output_dir} when composed by a test or a sweep's planning)."""
    try:
        value = OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
    except InterpolationResolutionError as e:
        if "HydraConfig was not set" in str(e):
            return ...
        reason = " ".join(str(e).splitlines()[0].split())
        raise SchemaError(
            f"{key}: its value cannot be resolved ({reason}): give it a plain value "
            f"(on the command line or in {where(key)})"
        ) from None
    if isinstance(value, DictConfig | type(OmegaConf.create([]))):
        return OmegaConf.to_container(value, resolve=True)
    return value


def unknown_key(key: str, value) -> str:
    group = key.rsplit(".", 1)[0] + "." if "." in key else ""
    siblings = [k for k in SCHEMA if k.startswith(group) and "." not in k[len(group) :]]
    close = difflib.get_close_matches(key, siblings, n=1)
    hint = f"did you mean {close[0]}?" if close else f"the settings there are {', '.join(siblings[:12])}"
    return (
        f"{key}={show(value)} is not a setting of this project (not in its schema, training/schema.py): "
        f"{hint} Fix the name, or drop it"
    )


def bad_value(key: str, value, setting: Setting) -> str:
    fix = setting.fix or f"set {key} to such a value on the command line or in {where(key)}"
    return f"{key} must be {setting.allowed()}, got {show(value)}: {fix}"


class Unresolved(str):
    """A value check_types could not resolve: the message, raised by check_ranges in its key's turn (a bad
    model.d_model makes module.peak_lr's interpolation fail: model.d_model's own message comes first)."""


def check_types(cfg: DictConfig) -> dict[str, object]:
    """Every key is in the schema and of its type; the resolved values by key. Raises SchemaError."""
    present = config_keys(cfg)
    for key, raw in present.items():
        if key not in SCHEMA:
            raise SchemaError(unknown_key(key, raw))
    try:  # every value at once where all resolve (inside a Hydra run, or with paths.output_dir given)
        resolved = flat(OmegaConf.to_container(cfg, resolve=True))
    except Exception:  # noqa: BLE001 - key by key below, to name the one that does not resolve
        resolved = None
    values = {}
    for key, setting in SCHEMA.items():  # in the schema's order: interpolated keys after their sources
        if key not in present:
            continue
        try:
            value = resolved[key] if resolved is not None else value_of(cfg, key)
        except SchemaError as e:
            values[key] = Unresolved(str(e))
            continue
        if value is ...:
            continue
        if not setting.type_ok(value):
            raise SchemaError(bad_value(key, value, setting))
        values[key] = value
    return values


def check_ranges(values: dict[str, object]) -> None:
    """Every value (of the right type: check_types has run) within its range or choices."""
    for key, value in values.items():
        if isinstance(value, Unresolved):
            raise SchemaError(str(value))
        if not SCHEMA[key].in_range(value):
            raise SchemaError(bad_value(key, value, SCHEMA[key]))
