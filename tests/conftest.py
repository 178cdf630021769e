"""What the tests share: where the Multi30k files are, the overrides of a tiny training run, and one such
run trained once for the whole test session (`tiny_run`), which the tests of training, evaluation and
analysis read; a test that writes into a run takes a copy (`copy_run_dir`); a finished run's files
without any training (`fake_run`), for the cross-sweep views. Hand-built records go through the typed
record (`write_results`), and into the store with a view (`stored_run`), as exports do."""

import os
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from headsweep.config import register_resolvers
from headsweep.store import SCHEMA_VERSION, Record, experiment_key, read_record, show, store_dir, write_record

# ../shared beside the checkout, or where HEADSWEEP_DATA points (a GPU machine gets the files inside the checkout)
DATA = Path(os.environ.get("HEADSWEEP_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k")
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"Multi30k not found at {DATA}")
register_resolvers()

# A run of a few seconds: the smoke experiment on 200 training pairs, a 300-subword vocabulary, 10 steps.
TINY = [
    "experiment=smoke",
    f"data.dir={DATA}",
    "data.limit_train=200",
    "data.limit_eval=40",
    "data.vocab_size=300",
    "data.max_tokens=1024",
    "trainer.max_steps=10",
    "module.warmup_steps=4",
]

# The session's run: 20 steps (epochs of 7 and 8 batches) with checkpoints every 6 (the last 3 kept: steps 12, 18 and
# the final 20, which ends between two of them as a time cap or the ablation budget's 1,150 steps do), the
# average of those after 85% of the budget (18 and 20), 2 heads a layer, an offline W&B run.
TINY_RUN = [
    "model.heads=2",
    "trainer.max_steps=20",
    "callbacks.checkpoint.save_top_k=3",
    "callbacks.checkpoint.every_n_train_steps=6",
    "callbacks.checkpoint.every_n_epochs=null",
    "average_last=3",
    "average_from=0.85",
    "logger.wandb.mode=offline",
    "run_name=tiny",
]


def tiny_overrides(out: Path | None, *extra: str) -> list[str]:
    """TINY writing to `out` (its vocabulary cached beside it), then `extra`: later overrides win."""
    paths = [f"paths.output_dir={out}", f"data.cache_dir={out.parent / 'cache'}"] if out is not None else []
    return [*TINY, *paths, *extra]


if workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0):  # `make test`: a worker per core, a thread each
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
SESSION_THREADS = torch.get_num_threads()  # torch's own count for this process, before any test sets one


@pytest.fixture(autouse=True)
def _torch_threads():
    """A training with `threads` set calls torch.set_num_threads for the whole process (also from a module- or
    session-scoped fixture): every test starts and ends at the session's count, so a test that reads torch's
    thread count (the tiny run's record) sees the one the tiny run trained with."""
    torch.set_num_threads(SESSION_THREADS)
    yield
    torch.set_num_threads(SESSION_THREADS)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """The one real training of `make test`: a finished run directory (TINY + TINY_RUN). Read it; copy it
    (copy_run_dir) to write into it."""
    if not DATA.is_dir():
        pytest.skip(f"Multi30k not found at {DATA}")
    from headsweep.config import compose
    from headsweep.training.train import train

    out = tmp_path_factory.mktemp("tiny") / "run"
    torch.set_num_threads(SESSION_THREADS)  # whatever an earlier fixture left: the count the tests compare with
    train(compose(tiny_overrides(out, *TINY_RUN)))
    return out


def copy_run_dir(run: Path, dest: Path) -> Path:
    """A copy of a finished run to write into (its W&B files left behind); results.json still names the
    original's checkpoint and hypothesis files, which hold the same bytes."""
    shutil.copytree(run, dest, ignore=shutil.ignore_patterns("wandb"))
    return dest


def write_results(run_dir: Path, results: dict) -> Path:
    """A hand-built results.json in run_dir, through the typed record (store.write_record)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    return write_record(run_dir, Record.from_dict(results, version=results.get("schema_version", SCHEMA_VERSION)))


def stored_run(view: Path, results: dict) -> Path:
    """A finished run as an export leaves it: the record in results/runs/<key>/ and `view` =
    results/<sweep>/<job> linking to it, the view's tags the config's. The store dir."""
    stored = store_dir(view.parent.parent, experiment_key(results["config"]))
    if read_record(stored) is None:
        write_results(stored, results)
    show(stored, view, list(results["config"].get("tags") or []))
    return stored


def seen(view: Path) -> dict:
    """A view's record as the report reads it (its sweep and tags: store.as_seen)."""
    from headsweep.store import as_seen

    return as_seen(read_record(view), view.parent.name, view.name)


@pytest.fixture
def bf16_cpu(monkeypatch):
    """Plan the shipped bf16 sweeps as on the CPU class most of their bases trained on (Xeon AMX): a test that
    reads their plan would otherwise stop where an AVX2-only CPU refuses to resume them (the refusal has its own
    test), or find another class's base job planned here (classes.class_bases, tested apart) on another CPU."""
    import headsweep.machine

    monkeypatch.setattr("headsweep.sweeps.sweep_settings.cpu_has_bf16", lambda: True)
    monkeypatch.setattr("headsweep.config.cpu_has_bf16", lambda: True)  # ${auto_precision:}
    here = headsweep.machine.this_class
    monkeypatch.setattr(
        "headsweep.sweeps.classes.this_class", lambda on_gpu: here(on_gpu) if on_gpu else "AVX512 + AMX (bf16 units)"
    )


@pytest.fixture
def run_copy(tiny_run, tmp_path) -> Path:
    return copy_run_dir(tiny_run, tmp_path / "run")


def fake_run(root, sweep, name, seed, bleu, overrides=(), curve="step,val/bleu\n1149,30.0\n", **extra):
    """root/sweep/name as a finished ablation run leaves it in results/, and no more: its config composed from
    `overrides` (fp32 unless they say otherwise), test BLEU `bleu`, a metrics CSV `curve`, test hypotheses."""
    from headsweep.config import compose

    cfg = compose(["budget=ablation", "trainer.precision=32-true", f"seed={seed}", *overrides])
    d = root / sweep / name
    d.mkdir(parents=True)
    hyps = d / "hypotheses" / "test_2016_flickr.beam.en"  # what the report needs of a finished run
    hyps.parent.mkdir()
    hyps.write_text("a\n")
    (d / "metrics.csv").write_text(curve)
    results = {
        "status": "complete",
        "config": OmegaConf.to_container(cfg, resolve=False),
        "metrics": {"test/bleu": bleu},
        "hypotheses": {"test_2016_flickr.beam": str(hyps)},
        **extra,
    }
    write_results(d, results)
