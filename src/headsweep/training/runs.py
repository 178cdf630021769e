"""The run directory: writing results.json (atomically, in one place), finding and reloading what a run
wrote (results, checkpoints, its data module), and exporting a finished run's small outputs."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import pickle
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import hydra
import torch

from headsweep import store
from headsweep.data.files import atomic_write
from headsweep.store import RESULTS, CorruptRecord, Record, map_strings, read_record, write_record
from headsweep.store import pack as store_pack
from headsweep.training.module import TranslationModule


class RunError(ValueError):
    """A missing or unusable run, checkpoint or vocabulary; the message says what to do."""


def run_dir_of(ckpt: str | Path) -> Path:
    """The run directory of a checkpoint (<run>/checkpoints/x.ckpt), or the run directory itself."""
    path = Path(ckpt)
    if path.is_dir():
        return path
    return path.parent.parent if path.parent.name == "checkpoints" else path.parent


def write_json(path: Path, obj: dict) -> None:
    """Atomically: a killed run never leaves a half-written file. A run's record (results.json) goes
    through store.write_record, typed."""
    path = Path(path)
    if path.name == RESULTS:
        write_record(path.parent, Record.from_dict(obj, version=obj.get("schema_version") or store.SCHEMA_VERSION))
    else:
        atomic_write(path, json.dumps(obj, indent=2, default=str))


def write_lines(path: Path, lines: list[str]) -> Path:
    """One sentence per line (hypotheses, references), atomically."""
    atomic_write(path, "".join(line + "\n" for line in lines))
    return path


def update_results(run_dir: Path, key: str, name: str, entry: dict) -> None:
    """results[key][name] = entry: under a lock, re-read just before writing, replaced atomically, so
    neither a crash nor another evaluation of the same run loses what the file already holds."""
    with open(run_dir / ".results.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = read_record(run_dir)
        record.raw.setdefault(key, {})[name] = entry
        write_record(run_dir, record)


def read_results(run_dir: str | Path) -> dict | None:
    """A run's record as a dict (store.read_record; CorruptRecord if half-written), None if it has none."""
    record = read_record(run_dir)
    return record.as_dict() if record is not None else None


def is_complete(run_dir: str | Path) -> bool:
    try:
        record = read_record(run_dir)
    except (OSError, CorruptRecord):
        return False
    return record is not None and record.complete


def resolve_checkpoint(ckpt: str | Path) -> Path:
    """A checkpoint file from a file or a run directory (its checkpoints/last.ckpt)."""
    path = Path(ckpt)
    if path.is_dir():
        path = path / "checkpoints" / "last.ckpt"
    if not path.is_file():
        raise RunError(f"checkpoint not found: {path}; pass CKPT=<run dir>/checkpoints/<file>.ckpt or a run directory")
    return path


def load_module(ckpt: str | Path, map_location: str = "cpu"):
    """The TranslationModule of a checkpoint, in eval mode; one clear error if it is not one of ours."""
    path = resolve_checkpoint(ckpt)
    try:
        module = TranslationModule.load_from_checkpoint(path, map_location=map_location, weights_only=False)
    except (pickle.UnpicklingError, EOFError) as e:  # not a torch file at all
        raise RunError(f"{path} is not a headsweep checkpoint ({type(e).__name__}: {e})") from None
    except (KeyError, TypeError, RuntimeError) as e:
        raise RunError(
            f"{path} is not a headsweep checkpoint or does not match this code: {str(e).splitlines()[0]}"
        ) from None
    return module.eval()


def load_weights(module: TranslationModule, ckpt: str | Path) -> Path:
    """Start `module` from a checkpoint's weights (fine-tuning: the optimizer and schedule start afresh).
    Every weight must fit, except the hard-concrete gates, which a model trained without them lacks
    and which start open."""
    source = load_module(ckpt)
    if source.hparams.tokenizer_json != module.hparams.tokenizer_json:
        raise RunError(
            f"init_from={ckpt} was trained with another vocabulary than this run builds: fine-tune with "
            "the run's own data settings"
        )
    try:
        missing, unexpected = module.load_state_dict(source.state_dict(), strict=False)
    except RuntimeError as e:  # a shape differs
        raise RunError(f"init_from={ckpt} is another model: {str(e).splitlines()[1].strip()}") from None
    missing = [k for k in missing if not k.endswith("concrete.log_alpha")]
    if missing or unexpected:
        raise RunError(
            f"init_from={ckpt} is another model ({len(missing)} weights missing, {len(unexpected)} "
            f"unexpected, e.g. {(missing + unexpected)[0]}): fine-tune with the run's own model settings"
        )
    return resolve_checkpoint(ckpt)


def load_datamodule(run_dir: str | Path, **overrides):
    """Rebuild a run's data module from its results.json config (setup() not yet called)."""
    results = read_results(run_dir)
    if results is None or results.get("status") != "complete":
        raise RunError(f"no complete {RESULTS} in {run_dir}: the run did not finish; pass a finished run's checkpoint")
    data_cfg = {**results["config"]["data"], **overrides}
    return hydra.utils.instantiate(data_cfg)


@dataclass
class FinishedRun:
    checkpoint: Path
    dir: Path
    results: dict
    module: TranslationModule
    datamodule: object  # TranslationDataModule, set up


def load_run(ckpt: str | Path) -> FinishedRun:
    """A finished run from a checkpoint or its directory: its results, module and set-up data module,
    with the vocabularies checked against each other (what evaluate, analyze and the bench load)."""
    if not str(ckpt).strip():
        raise RunError("no checkpoint given: pass CKPT=<run dir> or <run dir>/checkpoints/<file>.ckpt")
    path = resolve_checkpoint(ckpt)
    run_dir = run_dir_of(path)
    results = read_results(run_dir)
    datamodule = load_datamodule(run_dir)  # one clear error if the run did not finish
    datamodule.setup()
    module = load_module(path)
    check_vocabulary(module, datamodule)
    warn_if_not_final(path, results)
    return FinishedRun(path, run_dir, results, module, datamodule)


def warn_if_not_final(path: Path, results: dict) -> None:
    """Runs trained before the final step was checkpointed (FinalStepCheckpoint) kept an earlier step as
    last.ckpt: what loads it then describes other weights than the run's scores. Say so, once."""
    trained = results.get("metrics", {}).get("train/steps")
    if path.name != "last.ckpt" or trained is None:
        return
    step = torch.load(path, map_location="cpu", mmap=True, weights_only=False).get("global_step")
    if step is not None and step != int(trained):
        logging.getLogger(__name__).warning(
            "%s holds step %d but the run trained %d steps and its results.json scores step %d (a run from before "
            "the final step was checkpointed): what follows describes step %d",
            path,
            step,
            int(trained),
            int(trained),
            step,
        )


def check_vocabulary(module, datamodule) -> None:
    """The checkpoint's tokenizer must be the data module's, or ids would mean other words."""
    if module.hparams.tokenizer_json != datamodule.tokenizer_json:
        raise RunError(
            f"vocabulary mismatch: the checkpoint was trained with another tokenizer than {datamodule.tokenizer_path}; "
            "evaluate with the run's own data settings (same vocab_size, tokenizer and training data)"
        )


# What a finished run keeps when exported (results/<sweep>/<job>/): small, text or PNG, never checkpoints
# or W&B files. The metrics CSV holds the learning curves the report plots.
EXPORTED = {"hypotheses": "hypotheses", "csv/metrics.csv": "metrics.csv", "analysis": "analysis"}


def export_run(run_dir: str | Path, dest: str | Path) -> Path:
    """A complete run's small outputs into the store, results/runs/<key>/ (results.json last, via a
    temporary directory and a rename, so an interrupted export never looks complete and a finished one is
    never half-replaced), shown as `dest` = results/<sweep>/<job>, a view (store.link_view). Under the
    key's lock; an experiment the store already holds whole is not written again, only shown."""
    run_dir, dest = Path(run_dir), Path(dest)
    results = _complete_results(run_dir, "export")
    if not isinstance(results.get("config"), dict):
        raise RunError(f"{run_dir / RESULTS} names no config: its experiment is unknown, nothing to export")
    key = store.experiment_key(results["config"])
    root, sweep, job = dest.parent.parent, dest.parent.name, dest.name
    stored = store.store_dir(root, key)
    tags = list(results["config"].get("tags") or [])
    with store.key_lock(root, key):
        if not _holds(stored, run_dir):
            tmp = _fresh_tmp(stored)
            tmp.mkdir(parents=True)
            for src_name, dst_name in EXPORTED.items():
                src = run_dir / src_name
                if src.is_dir():
                    shutil.copytree(src, tmp / dst_name, ignore=shutil.ignore_patterns("*.ckpt", "wandb"))
                elif src.is_file():
                    shutil.copy2(src, tmp / dst_name)
            store_pack.pack_dir(tmp)  # hypotheses gzipped, figures small: the store travels (store_pack)
            old = read_record(stored) if stored.is_dir() else None
            exported = {**results, "exported_from": str(run_dir), "exported_at": time.strftime("%Y-%m-%d %H:%M:%S")}
            # machine paths relative to the checkout (a record names no machine's directories)
            exported = store.relative_paths(exported, [str(store.ROOT)])
            record = Record.from_dict(exported, version=store.SCHEMA_VERSION)
            record.views = old.views if old else []
            write_record(tmp, record)
            store.publish_dir(tmp, stored)
        store.add_view(stored, sweep, job, tags)
        return store.link_view(stored, dest)


def _holds(stored: Path, run_dir: Path) -> bool:
    """The store already holds this experiment whole: complete, with the head analysis where the run has one."""
    try:
        record = read_record(stored)
    except CorruptRecord:
        return False
    return (
        record is not None
        and record.complete
        and (store_pack.analysis_file(stored) is not None or store_pack.analysis_file(run_dir) is None)
    )


# What of a run directory belongs to its W&B run or to analyses of its model, not to its training.
NOT_TRAINING = (RESULTS, "wandb", "wandb_id", "analysis", "prune", ".*")


def adopt_run(
    export: str | Path, dest: str | Path, *, sweep: str, run_name: str, tags: list[str], analysis: dict | None
) -> Path:
    """The run directory behind an exported run (`export`'s output_dir, checkpoints hard-linked) as a
    trained, not yet analysed run of another sweep at `dest`: the same model, with the new sweep's name,
    tags and analysis settings; where it came from under `shared_from`. Paths in results.json that
    pointed into the old directory point into the new one."""
    export, dest = Path(export), Path(dest)
    exported = _complete_results(export, "adopt")
    src = store.local_path(exported["output_dir"])
    results, tmp = _complete_results(src, "adopt"), _fresh_tmp(dest)
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns(*NOT_TRAINING), copy_function=_link_or_copy)
    config = {**results["config"], "sweep": sweep, "run_name": run_name, "tags": list(tags), "analysis": analysis}
    views = exported.get("views") or [{"sweep": export.parent.name, "job": export.name}]  # its first view's name
    shared = {
        "run": f"{views[0]['sweep']}/{views[0]['job']}",
        "sweep": results["config"].get("sweep"),
        "tags": results["config"].get("tags"),
        "what": "the trained model (checkpoint); analysed here",
    }
    adopted = _rebase({**results, "sweep": sweep, "run_name": run_name, "config": config}, str(src), str(dest))
    write_json(tmp / RESULTS, {**adopted, "shared_from": shared})
    return store.publish_dir(tmp, dest)


def _link_or_copy(src: str, dst: str) -> str:
    """Checkpoints are large and never change once written: a hard link where the file system allows."""
    try:
        os.link(src, dst)
        return dst
    except OSError:
        return shutil.copy2(src, dst)


def _rebase(obj, old: str, new: str):
    """`obj` with every string that is the path `old`, or a path under it, moved under `new`."""
    return map_strings(obj, lambda s: new + s[len(old) :] if s == old or s.startswith(old + os.sep) else s)


def _complete_results(run_dir: Path, verb: str) -> dict:
    try:
        results = read_results(run_dir)
    except CorruptRecord as e:
        raise RunError(f"{e}: nothing to {verb}") from None
    if not results or results.get("status") != "complete":
        raise RunError(f"{run_dir} has no complete {RESULTS}: nothing to {verb}")
    return results


def _fresh_tmp(dest: Path) -> Path:
    """The temporary sibling a directory is written into before `store.publish_dir` renames it to `dest`."""
    tmp = dest.parent / f".{dest.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    return tmp
