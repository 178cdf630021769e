"""Stored runs small enough to travel (headsweep.store.pack): hypotheses gzipped deterministically and read
back by the report, by re-scoring and by `zcat | sacrebleu`; analysis figures re-saved small; the migration of
a store with every number unchanged, and idempotent."""

import gzip
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sacrebleu.metrics import BLEU, CHRF

from conftest import stored_run
from headsweep.data.files import read_lines
from headsweep.reports.pages import compare
from headsweep.reports.sweep.cells import hypotheses_path, load_runs
from headsweep.reports.sweep.significance import read_text_lines
from headsweep.store import pack as store_pack
from headsweep.store import results_check
from headsweep.training.runs import export_run
from test_store import config, finished_run_dir

REFS = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k" / "test_2016_flickr.en.gz"
if not REFS.is_file():
    REFS = Path("/work/shared/data/multi30k/test_2016_flickr.en.gz")
SACREBLEU = Path(sys.executable).parent / "sacrebleu"
needs_refs = pytest.mark.skipif(not REFS.is_file(), reason=f"no Multi30k test references at {REFS}")


def hypotheses() -> list[str]:
    """The references with every third sentence cut short: a translation that scores neither 0 nor 100."""
    refs = read_lines(REFS)
    return [" ".join(r.split()[:-2]) if i % 3 == 0 else r for i, r in enumerate(refs)]


def scored_run(
    results: Path, sweep: str = "table3_x", job: str = "h8-dk32-dv32-s1", seed: int = 1, greedy: bool = False
) -> Path:
    """A stored run whose record holds the sacreBLEU scores of its plain-text test hypotheses (beam; and
    greedy ones, every other line cut shorter, where greedy)."""
    refs = read_lines(REFS)
    beam = hypotheses()
    decodes = {"test_2016_flickr.beam": beam}
    if greedy:
        decodes["test_2016_flickr.greedy"] = [" ".join(h.split()[:-1]) if i % 2 else h for i, h in enumerate(beam)]
    out = f"multirun/{sweep}/{job}"
    record = {
        "status": "complete",
        "config": config(f"seed={seed}", f"sweep={sweep}", "tags=[base]"),
        "metrics": {"test/bleu": BLEU().corpus_score(beam, [refs]).score},
        "scores": {
            name: {"bleu": BLEU().corpus_score(h, [refs]).score, "chrf": CHRF().corpus_score(h, [refs]).score}
            for name, h in decodes.items()
        },
        "hypotheses": {name: f"{out}/hypotheses/{name}.en" for name in decodes},
        "references": {"test_2016_flickr": str(REFS)},
        "output_dir": out,
    }
    d = stored_run(results / sweep / job, record)
    (d / "hypotheses").mkdir()
    for name, h in decodes.items():
        (d / "hypotheses" / f"{name}.en").write_text("".join(x + "\n" for x in h))
    (d / "metrics.csv").write_text("step,val/bleu,val/loss\n575,20.0,3.0\n1149,30.0,2.5\n")
    return d


def test_gzip_is_deterministic_and_plain_gzip_reads_it(tmp_path):
    data = "ein Hund läuft\nA dog runs.\n".encode()
    packed = store_pack.gzip_bytes(data)
    assert packed == store_pack.gzip_bytes(data)  # no time or name in the header: same text, same bytes
    assert packed[4:8] == b"\0\0\0\0"  # MTIME
    (tmp_path / "h.en.gz").write_bytes(packed)
    assert subprocess.run(["gzip", "-dc", str(tmp_path / "h.en.gz")], capture_output=True, check=True).stdout == data


def test_gzip_file_replaces_the_plain_file_and_never_overwrites_other_text(tmp_path):
    p = tmp_path / "test.beam.en"
    p.write_text("a\nb\n")
    gz = store_pack.gzip_file(p)
    assert not p.exists() and gzip.decompress(gz.read_bytes()) == b"a\nb\n"
    assert store_pack.hypothesis_file(p) == gz  # the name a record lists finds the packed file
    p.write_text("other\n")
    with pytest.raises(store_pack.PackError, match="already exists with other text"):
        store_pack.gzip_file(p)
    assert p.read_text() == "other\n"  # both kept


@needs_refs
def test_migration_keeps_every_number_and_the_readers_read_the_packed_files(tmp_path):
    results = tmp_path / "results"
    d = scored_run(results)
    (d / "analysis").mkdir()
    analysis = {"pruning": {"fractions": [0.0, 0.5], "pools": {}}, "importance": {"raw": [[0.25, 0.75]]}}
    analysis_text = json.dumps(analysis, indent=1)
    (d / "analysis" / "analysis.json").write_text(analysis_text)
    record_bytes = (d / "results.json").read_bytes()
    plain = (d / "hypotheses" / "test_2016_flickr.beam.en").read_bytes()
    before = results_check.snapshot(results)
    assert results_check.mismatches(before[d.name][1]) == []  # the fake run's scores are its hypotheses'

    out = io.StringIO()
    assert results_check.migrate(results, out=out) == []
    assert "numbers unchanged" in out.getvalue()
    assert (d / "results.json").read_bytes() == record_bytes
    assert sorted(p.name for p in (d / "hypotheses").iterdir()) == ["test_2016_flickr.beam.en.gz"]
    # the head analysis: gzipped, the same text, read back by the report's reader
    assert sorted(p.name for p in (d / "analysis").iterdir()) == ["analysis.json.gz"]
    assert gzip.decompress((d / "analysis" / "analysis.json.gz").read_bytes()).decode() == analysis_text
    assert store_pack.read_analysis(d) == analysis
    assert compare._load({"base": [d]}) == ({"base": [analysis]}, 0)

    # the report: load_runs keeps the run and reads the packed hypotheses
    runs, left_out = load_runs(results / "table3_x", "table3_x")
    assert left_out == [] and hypotheses_path(runs[0]).name == "test_2016_flickr.beam.en.gz"
    assert read_text_lines(hypotheses_path(runs[0])) == plain.decode().splitlines()

    # an independent reader: zcat | sacreBLEU's command line gives the stored BLEU
    zcat = subprocess.run(["zcat", str(hypotheses_path(runs[0]))], capture_output=True, check=True).stdout
    cli = subprocess.run(
        [str(SACREBLEU), str(REFS), "-m", "bleu", "-b", "-w", "4"], input=zcat, capture_output=True, check=True
    )
    stored = store_pack.read_record(d).raw["scores"]["test_2016_flickr.beam"]["bleu"]
    assert float(cli.stdout) == pytest.approx(round(stored, 4), abs=1e-9)

    # idempotent: a second run packs nothing and still finds the numbers unchanged
    assert store_pack.pack_dir(d) == {"gzipped": 0, "greedy_dropped": 0, "metrics": 0, "analyses": 0, "pngs": 0}
    assert results_check.migrate(results, out=io.StringIO()) == []


def test_the_migration_check_sees_a_changed_analysis_and_a_plain_one_is_unpacked(tmp_path):
    d = tmp_path / "results" / "runs" / "abc"
    (d / "analysis").mkdir(parents=True)
    (d / "analysis" / "analysis.json").write_text('{"a": 1}')
    assert store_pack.unpacked(d)
    plain = results_check.analysis_digest(d)
    assert store_pack.pack_dir(d)["analyses"] == 1 and not store_pack.unpacked(d)
    assert results_check.analysis_digest(d) == plain  # plain or gzipped: the same text
    (d / "analysis" / "analysis.json.gz").write_bytes(store_pack.gzip_bytes(b'{"a": 2}'))
    assert results_check.analysis_digest(d) != plain
    before, after = {"abc": ("h" + plain, ())}, {"abc": ("h" + results_check.analysis_digest(d), ())}
    assert results_check.compare(before, after) == ["abc: results.json or analysis.json changed"]


@needs_refs
def test_greedy_hypotheses_beside_beam_ones_are_left_out_and_the_rest_still_rescores(tmp_path):
    """The store keeps the hypotheses test/bleu scores (beam); greedy ones beside them go, their score stays in
    results.json, and the check re-scores what is kept. A beam file gone is still an error."""
    from headsweep.reports.sweep.cells import learning_curve

    results = tmp_path / "results"
    d = scored_run(results, greedy=True)
    record_bytes = (d / "results.json").read_bytes()
    run = load_runs(results / "table3_x", "table3_x")[0][0]
    curve = learning_curve(run)
    out = io.StringIO()
    assert results_check.migrate(results, out=out) == [], out.getvalue()
    assert "1 greedy hypothesis files left out" in out.getvalue() and "1 metrics CSVs gzipped" in out.getvalue()
    assert sorted(p.name for p in (d / "hypotheses").iterdir()) == ["test_2016_flickr.beam.en.gz"]
    assert sorted(p.name for p in d.iterdir()) == ["hypotheses", "metrics.csv.gz", "results.json"]
    assert (d / "results.json").read_bytes() == record_bytes  # the greedy score is still there
    assert [name for name, *_ in results_check.rescore(d)] == ["test_2016_flickr.beam"]
    # the report reads the gzipped metrics CSV as it read the plain one
    assert (
        learning_curve(load_runs(results / "table3_x", "table3_x")[0][0])
        == curve
        == {
            576: {"val/bleu": 20.0, "val/loss": 3.0},
            1150: {"val/bleu": 30.0, "val/loss": 2.5},
        }
    )
    assert results_check.check(results, out=io.StringIO()) == []

    (d / "hypotheses" / "test_2016_flickr.beam.en.gz").unlink()
    with pytest.raises(store_pack.PackError, match="hypotheses of test_2016_flickr.beam are missing"):
        results_check.rescore(d)


def test_a_run_decoded_greedily_only_keeps_its_greedy_hypotheses(tmp_path):
    hyp = tmp_path / "hypotheses"
    hyp.mkdir()
    (hyp / "test.greedy.en").write_text("a\n")
    (hyp / "val.beam.en").write_text("b\n")  # another split's beam does not stand in for it
    assert store_pack.pack_dir(tmp_path)["greedy_dropped"] == 0
    assert sorted(p.name for p in hyp.iterdir()) == ["test.greedy.en.gz", "val.beam.en.gz"]


def test_check_names_a_run_left_unpacked(tmp_path):
    results = tmp_path / "results"
    d = results / "runs" / "abc"
    (d / "hypotheses").mkdir(parents=True)
    (d / "metrics.csv").write_text("step\n1\n")
    out = io.StringIO()
    assert results_check.check(results, out=out) == ["abc: not packed (make migrate-results)"]


def test_disk_bytes_counts_what_du_counts(tmp_path):
    """The size bar is `du -sh results`: blocks, folders included, a hard link once, a symlink as a link."""
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "small").write_bytes(b"x" * 10)
    (tmp_path / "runs" / "a" / "big").write_bytes(b"y" * 50_000)
    (tmp_path / "runs" / "a" / "twin").hardlink_to(tmp_path / "runs" / "a" / "big")
    (tmp_path / "view").symlink_to("runs/a")
    du = subprocess.run(["du", "-s", "--block-size=1", str(tmp_path)], capture_output=True, check=True, text=True)
    assert store_pack.disk_bytes(tmp_path) == int(du.stdout.split()[0])


def test_compare_names_a_changed_record_a_moved_score_and_a_lost_run():
    s = (("t.beam", 30.0, 30.0, 50.0, 50.0),)
    before = {"a": ("h1", s), "b": ("h2", s)}
    after = {"a": ("h1x", (("t.beam", 30.0, 30.5, 50.0, 50.0),))}
    lines = results_check.compare(before, after)
    assert any(line.startswith("b: gone") for line in lines)
    assert "a: results.json or analysis.json changed" in lines
    assert any("re-scores BLEU 30.5" in line for line in lines)
    # a re-score in the last bits of a double is the same score; a hundredth of a point is not
    assert results_check.mismatches([("t", 30.0, 30.0 + 1e-13, 50.0, 50.0)]) == []
    assert results_check.mismatches([("t", 30.0, 30.01, 50.0, 50.0)]) != []
    # greedy hypotheses left out by packing are not a difference; beam ones gone are
    both = (("t.beam", 30.0, 30.0, 50.0, 50.0), ("t.greedy", 28.0, 28.0, 49.0, 49.0))
    assert results_check.compare({"a": ("h", both)}, {"a": ("h", both[:1])}) == []
    assert results_check.compare({"a": ("h", both)}, {"a": ("h", both[1:])}) != []


def test_figures_are_resaved_small_and_once(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from PIL import Image

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.imshow(np.random.default_rng(0).random((24, 24)), cmap="viridis")
    ax.plot([0, 23], [0, 23], color="red")
    png = tmp_path / "attention.png"
    fig.savefig(png, dpi=150)
    plt.close(fig)
    size, (w, h) = png.stat().st_size, Image.open(png).size
    assert store_pack.shrink_png(png) is True
    assert png.stat().st_size < size and Image.open(png).size == (w, h) and Image.open(png).mode == "P"
    assert store_pack.shrink_png(png) is False  # idempotent


def test_an_export_stores_hypotheses_gzipped(tmp_path):
    run = finished_run_dir(tmp_path / "multirun" / "s" / "h8-s1", 30.0)
    view = export_run(run, tmp_path / "results" / "s" / "h8-s1")
    assert sorted(p.name for p in (view / "hypotheses").iterdir()) == ["test_2016_flickr.beam.en.gz"]
    assert gzip.decompress((view / "hypotheses" / "test_2016_flickr.beam.en.gz").read_bytes()) == b"30.0\n"
    assert (run / "hypotheses" / "test_2016_flickr.beam.en").is_file()  # the run directory itself untouched


def test_check_fails_a_run_over_the_limit(tmp_path, monkeypatch):
    results = tmp_path / "results"
    d = results / "runs" / "abc"
    d.mkdir(parents=True)
    (d / "big.bin").write_bytes(b"x" * 2048)
    monkeypatch.setattr(store_pack, "RUN_LIMIT_BYTES", 1024)
    assert store_pack.oversize(results, 1024) == [("abc", 2048)]
    shutil.rmtree(d)
    assert store_pack.oversize(results, 1024) == []
