"""The run store: one identity per experiment, the typed record (schema versions, corrupt records), one
writer per key (two real processes), and the migration of an old results/ tree without training."""

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import write_results
from headsweep import store
from headsweep.config import compose
from headsweep.reports.sweep.cells import load_runs
from headsweep.store.migrate import MigrationError, migrate
from headsweep.training.runs import export_run


def config(*overrides) -> dict:
    cfg = compose(["budget=ablation", "trainer.precision=32-true", "seed=1", *overrides])
    return OmegaConf.to_container(cfg, resolve=False)


def test_the_key_is_what_is_trained_and_scored_not_where_or_by_whom():
    base = store.experiment_key(config())
    assert len(base) == 12 and int(base, 16) >= 0
    # paths, names, threads, loggers, data location: the same experiment
    same = config(
        "run_name=other",
        "sweep=another",
        "tags=[x]",
        "threads=1",
        "logger.wandb.mode=disabled",
        "data.dir=/elsewhere",
        "paths.output_dir=/tmp/x",
    )
    assert store.experiment_key(same) == base
    # what is trained, how it is scored, the seed, precision, device and analysis: another experiment
    for changed in (
        ["seed=2"],
        ["model.heads=4"],
        ["trainer.precision=bf16-mixed"],
        ["trainer.max_steps=10"],
        ["module.peak_lr=0.001"],
        ["analysis=default"],
        ["model.init=xavier"],
    ):
        assert store.experiment_key(config(*changed)) != base, changed


def test_an_old_record_without_newer_settings_is_the_same_experiment_as_a_new_job():
    """A record from before a setting existed reads it at its old behaviour (store.ADDED_SETTINGS)."""
    new = config("model.init=xavier", "module.decay_by=steps_or_time")
    old = json.loads(json.dumps(new))
    del old["model"]["init"], old["model"]["kv_heads"], old["module"]["decay_by"]
    assert store.experiment_key(old) == store.experiment_key(new)
    assert store.experiment_key(config("model.init=fan_in")) != store.experiment_key(old)  # the default now


def test_records_round_trip_and_old_or_corrupt_ones_are_said(tmp_path):
    d = tmp_path / "run"
    record = store.Record("complete", config(), {"test/bleu": 30.0}, raw={"scores": {"x": 1}})
    store.write_record(d, record)
    back = store.read_record(d)
    assert back == record and json.loads((d / "results.json").read_text())["schema_version"] == 2
    old = tmp_path / "old"
    old.mkdir()
    (old / "results.json").write_text(json.dumps({"status": "complete", "config": {}, "metrics": {}}))
    store._V1_READ.clear()
    assert store.read_record(old).schema_version == 1
    assert store.schema_note().startswith("1 records of schema 1 read as version 1")
    assert store.schema_note() is None  # said once
    half = tmp_path / "half"
    half.mkdir()
    (half / "results.json").write_text('{"status": "compl')
    with pytest.raises(store.CorruptRecord, match=f"^{half / 'results.json'}: unreadable results.json"):
        store.read_record(half)
    assert (half / "results.json").read_text() == '{"status": "compl'  # never deleted


def finished_run_dir(run_dir: Path, bleu: float) -> Path:
    """A run directory as training leaves it (no training): record, hypotheses, metrics CSV."""
    (run_dir / "hypotheses").mkdir(parents=True)
    (run_dir / "hypotheses" / "test_2016_flickr.beam.en").write_text(f"{bleu}\n")
    (run_dir / "csv").mkdir()
    (run_dir / "csv" / "metrics.csv").write_text("step,val/bleu\n1149,30.0\n")
    write_results(
        run_dir,
        {
            "status": "complete",
            "config": config("tags=[row-A,base]"),
            "metrics": {"test/bleu": bleu},
            "output_dir": str(run_dir),
        },
    )
    return run_dir


def want(results: str, run_dir: str, view: str, started, out) -> None:
    """One sweep's job of the shared experiment: train (slowly) and export it, or show the stored run."""
    results, run_dir, view = Path(results), Path(run_dir), Path(view)
    key = store.experiment_key(config())

    def train():
        time.sleep(1.0)  # the other process asks for the key meanwhile
        finished_run_dir(run_dir, 30.0)
        export_run(run_dir, view)
        return {"test/bleu": 30.0}

    started.wait()
    metrics, trained = store.train_once(results, key, view, ["t"], train)
    out.put((view.parent.name, trained, metrics))


def test_two_sweeps_wanting_one_experiment_at_once_train_it_once(tmp_path):
    results = tmp_path / "results"
    ctx = multiprocessing.get_context("spawn")
    started, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(
            target=want,
            args=(str(results), str(tmp_path / "mr" / s / "h8-s1"), str(results / s / "h8-s1"), started, out),
        )
        for s in ("a", "b")
    ]
    for p in procs:
        p.start()
    started.set()
    for p in procs:
        p.join(120)
    got = sorted(out.get(timeout=5) for _ in procs)
    assert sorted(trained for _, trained, _ in got) == [False, True]  # one writer, one reuse
    assert all(m == {"test/bleu": 30.0} for _, _, m in got)
    runs = [p for p in (results / "runs").iterdir() if not p.name.startswith(".")]
    assert (
        len(runs) == 1
        and os.readlink(results / "a" / "h8-s1") == os.readlink(results / "b" / "h8-s1") == f"../runs/{runs[0].name}"
    )
    trained_dir = tmp_path / "mr" / next(s for s, t, _ in got if t) / "h8-s1"
    assert not (tmp_path / "mr" / next(s for s, t, _ in got if not t) / "h8-s1").exists()  # never trained
    assert [v["sweep"] for v in store.read_record(runs[0]).views] == ["a", "b"] or [
        v["sweep"] for v in store.read_record(runs[0]).views
    ] == ["b", "a"]
    assert trained_dir.is_dir()


def old_run(results: Path, sweep: str, job: str, seed: int, bleu: float, tags: list[str], **extra) -> Path:
    """results/<sweep>/<job>/ as the old layout shipped it: a schema 1 record with the training machine's
    absolute paths, hypotheses, metrics CSV."""
    d = results / sweep / job
    (d / "hypotheses").mkdir(parents=True)
    (d / "hypotheses" / "test_2016_flickr.beam.en").write_text(f"hyp {sweep} {bleu}\n")
    (d / "metrics.csv").write_text("step,val/bleu\n1149,30.0\n")
    out = f"/work/runner/multirun/{sweep}/{job}"
    cfg = config(f"seed={seed}", f"sweep={sweep}", f"tags=[{','.join(tags)}]", f"paths.output_dir={out}")
    record = {
        "status": "complete",
        "run_name": job,
        "sweep": sweep,
        "config": cfg,
        "metrics": {"test/bleu": bleu},
        "hypotheses": {"test_2016_flickr.beam": f"{out}/hypotheses/test_2016_flickr.beam.en"},
        "references": {"test_2016_flickr": "/work/runner/../shared/data/multi30k/test_2016_flickr.en.gz"},
        "output_dir": out,
        "exported_from": out,
        **extra,
    }
    (d / "results.json").write_text(json.dumps(record))
    return d


def test_migration_moves_runs_into_the_store_and_copies_become_views(tmp_path):
    results = tmp_path / "results"
    x = old_run(results, "a", "h8-s1", 1, 30.0, ["row-A", "cell-h8", "base"])
    old_run(results, "a", "h8-s2", 2, 31.0, ["row-A", "cell-h8", "base"])
    copy = old_run(
        results,
        "b",
        "h8-s1",
        1,
        30.0,
        ["row-B", "cell-h8", "base"],
        shared_from={"run": "a/h8-s1", "sweep": "a", "tags": ["row-A"]},
    )
    (copy / "hypotheses" / "test_2016_flickr.beam.en").write_bytes(
        (x / "hypotheses" / "test_2016_flickr.beam.en").read_bytes()
    )
    hyp_bytes = (x / "hypotheses" / "test_2016_flickr.beam.en").read_bytes()
    corrupt = results / "b" / "h4-s1"
    corrupt.mkdir()
    (corrupt / "results.json").write_text('{"status": "complete", "conf')
    lines = []

    class Out:
        def write(self, text):
            lines.append(text)

    counts = migrate(results, out=Out())
    printed = "".join(lines)
    assert (counts["moved"], counts["copies"], counts["corrupt"], counts["entries"], counts["views"]) == (2, 1, 1, 2, 3)
    assert f"left in place: {corrupt / 'results.json'}: unreadable results.json" in printed
    key = store.experiment_key(
        json.loads((results / "runs" / os.readlink(x).split("/")[-1] / "results.json").read_text())["config"]
    )
    for view in (results / "a" / "h8-s1", results / "b" / "h8-s1"):
        assert view.is_symlink() and os.readlink(view) == f"../runs/{key}"
        assert (view / "hypotheses" / "test_2016_flickr.beam.en").read_bytes() == hyp_bytes
    assert corrupt.is_dir() and not corrupt.is_symlink()
    assert (corrupt / "results.json").read_text() == '{"status": "complete", "conf'  # left as it was
    text = (results / "runs" / key / "results.json").read_text()
    record = json.loads(text)
    assert record["schema_version"] == 2 and "/work/runner" not in text
    assert record["output_dir"] == "multirun/a/h8-s1"
    assert record["references"]["test_2016_flickr"] == "../shared/data/multi30k/test_2016_flickr.en.gz"
    assert record["views"] == [
        {"sweep": "a", "job": "h8-s1", "tags": ["row-A", "cell-h8", "base"]},
        {"sweep": "b", "job": "h8-s1", "tags": ["row-B", "cell-h8", "base"], "lr_select": None},
    ]
    # row B's report sees its base through its own view: sweep b, row B's tags; the corrupt one named
    runs, left_out = load_runs(results / "b", "b")
    assert [(r.dir.name, r.results["config"]["sweep"], r.base, r.cell) for r in runs] == [("h8-s1", "b", True, "h8")]
    assert [(d.name, why.split(" (")[0]) for d, why in left_out] == [("h4-s1", "unreadable results.json")]
    again = []
    migrate(results, out=type("O", (), {"write": lambda self, t: again.append(t)})())
    assert "(nothing to move)" in "".join(again) and len(list((results / "runs").iterdir())) == 2


def test_a_copy_whose_hypotheses_differ_stops_the_migration(tmp_path):
    results = tmp_path / "results"
    old_run(results, "a", "h8-s1", 1, 30.0, ["row-A"])
    copy = old_run(results, "b", "h8-s1", 1, 30.0, ["row-B"], shared_from={"run": "a/h8-s1", "sweep": "a"})
    with pytest.raises(MigrationError, match=f"{copy} is called a copy of .* files differ \\(e.g. hypotheses/"):
        migrate(results, out=open(os.devnull, "w"))
    assert copy.is_dir() and not copy.is_symlink()  # nothing of the copy lost


def test_a_view_of_the_old_layout_is_never_replaced(tmp_path):
    results = tmp_path / "results"
    run_dir = finished_run_dir(tmp_path / "mr" / "a" / "h8-s1", 30.0)
    (results / "a" / "h8-s1").mkdir(parents=True)  # a run directory of the old layout
    with pytest.raises(store.StoreError, match="a directory of the old layout: run `python -m headsweep.store migrate"):
        export_run(run_dir, results / "a" / "h8-s1")


def test_a_relative_data_dir_not_on_this_machine_reads_the_configured_corpus(tmp_path, monkeypatch):
    """A migrated record names its corpus relative to the checkout it trained in (.data/multi30k on a GPU
    machine): where that is not here, the report reads the references from this checkout's corpus."""
    from headsweep.reports.sweep.significance import configured_data_dir, run_data_dir

    monkeypatch.chdir(tmp_path)
    assert run_data_dir({"dir": ".data/not-here"}) == configured_data_dir()
    (tmp_path / "here").mkdir()
    assert run_data_dir({"dir": "here"}) == Path("here")  # a directory that is there is the run's own


def test_a_learning_rate_selection_belongs_to_its_view():
    """A grid run (make sweep LR_GRID=) shown by a plain sweep is a plain run there, and a plain run shown by
    a grid sweep is that sweep's grid run: lr_select is the view's, the record's own is its first view's."""
    grid = {"phase": "grid", "grid": [0.001, 0.002], "select_on": "val/loss"}
    record = store.Record.from_dict(
        {
            "status": "complete",
            "config": {"seed": 1, "sweep": "g", "lr_select": grid},
            "views": [
                {"sweep": "g", "job": "x-lr0.002-s1", "tags": ["lr-grid"]},
                {"sweep": "plain", "job": "x-s1", "tags": ["base"]},
                {
                    "sweep": "g2",
                    "job": "x-lr0.002-s1",
                    "tags": ["lr-grid"],
                    "lr_select": {**grid, "grid": [0.002, 0.004]},
                },
            ],
        }
    )
    assert store.as_seen(record, "g", "x-lr0.002-s1")["config"]["lr_select"] == grid
    assert store.as_seen(record, "plain", "x-s1")["config"]["lr_select"] is None
    assert store.as_seen(record, "g2", "x-lr0.002-s1")["config"]["lr_select"]["grid"] == [0.002, 0.004]
    assert store.as_seen(record, "plain", "x-s1")["config"]["tags"] == ["base"]
