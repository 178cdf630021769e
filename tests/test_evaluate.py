"""`python -m headsweep.training.evaluate` and checkpoint averaging, on the session's tiny run."""

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import DATA, copy_run_dir, write_results
from headsweep.bench.decoding import bench_decoding
from headsweep.training import averaging, evaluate
from headsweep.training.averaging import average_state_dicts
from headsweep.training.runs import load_datamodule, load_module, load_run

SACREBLEU = Path(sys.executable).parent / "sacrebleu"
N_EVAL = 40  # data.limit_eval: sentences in val and test
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"Multi30k not found at {DATA}")


@pytest.fixture(scope="module")
def run(tiny_run, tmp_path_factory) -> Path:
    """A copy of the session's tiny run (conftest.TINY_RUN: 20 steps, checkpoints every 6, the last 3 kept:
    12, 18, 20, and the average of those after 85% of the budget, 18 and 20) for these tests to write
    evaluations into; tests that only read use `tiny_run` itself."""
    return copy_run_dir(tiny_run, tmp_path_factory.mktemp("eval") / "run")


def results(run: Path) -> dict:
    return json.loads((run / "results.json").read_text())


def step_checkpoints(run: Path) -> list[Path]:
    return sorted((run / "checkpoints").glob("step*.ckpt"), key=averaging.checkpoint_step)


def reference_file(tmp_path: Path, split: str) -> Path:
    """The split's English side straight from the data file (first N_EVAL lines), not via headsweep."""
    with gzip.open(DATA / f"{split}.en.gz", "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(N_EVAL)]
    path = tmp_path / f"{split}.ref.en"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def sacrebleu_cli(ref: Path, hyp: Path, metric: str) -> float:
    out = subprocess.run(
        [str(SACREBLEU), str(ref), "-i", str(hyp), "-m", metric, "-b", "-w", "4"],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip())


def test_average_state_dicts_is_the_mean(tmp_path):
    a = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.5]), "n": torch.tensor([3])}
    b = {"w": torch.tensor([3.0, -2.0]), "b": torch.tensor([1.5]), "n": torch.tensor([3])}
    for name, sd in (("a", a), ("b", b)):
        torch.save({"state_dict": sd}, tmp_path / f"{name}.ckpt")
    mean = average_state_dicts([tmp_path / "a.ckpt", tmp_path / "b.ckpt"])
    assert torch.equal(mean["w"], torch.tensor([2.0, 0.0])) and torch.equal(mean["b"], torch.tensor([1.0]))
    assert torch.equal(mean["n"], torch.tensor([3]))  # integer buffers are not averaged


def test_the_weights_training_ended_with_are_checkpointed(tiny_run):
    """Lightning saves only at multiples of every_n_train_steps; the final step (20) is saved too, as a step
    checkpoint (so averaging includes it) and as last.ckpt (what evaluation and analysis load)."""
    assert [averaging.checkpoint_step(p) for p in step_checkpoints(tiny_run)] == [12, 18, 20]
    last = torch.load(tiny_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == results(tiny_run)["metrics"]["train/steps"] == 20
    final = torch.load(step_checkpoints(tiny_run)[-1], map_location="cpu", weights_only=False)["state_dict"]
    assert all(torch.equal(final[k], v) for k, v in last["state_dict"].items())


def test_an_older_runs_earlier_last_checkpoint_is_named_when_loaded(tiny_run, tmp_path, caplog):
    old = copy_run_dir(tiny_run, tmp_path / "old")
    shutil.copy(old / "checkpoints" / "step000018.ckpt", old / "checkpoints" / "last.ckpt")
    load_run(old)
    assert "holds step 18 but the run trained 20 steps" in caplog.text
    caplog.clear()
    load_run(tiny_run)
    assert "holds step" not in caplog.text


def test_training_scores_the_averaged_checkpoints(tiny_run):
    r = results(tiny_run)
    avg, split = r["averaged"], r["config"]["data"]["test_split"]
    last_two = step_checkpoints(tiny_run)[-2:]
    assert avg["checkpoints"] == [str(p) for p in last_two]  # step 12 (60% of the budget) left out
    assert avg["budget_spent"] == [0.9, 1.0]
    for name in ("greedy", "beam"):
        assert avg["scores"][f"{split}.{name}"]["bleu_signature"].startswith("nrefs:1|case:mixed")
        assert len(Path(avg["hypotheses"][f"{split}.{name}"]).read_text().splitlines()) == N_EVAL
    assert r["metrics"]["test_avg/bleu"] == avg["scores"][f"{split}.beam"]["bleu"]
    assert r["metrics"]["test_avg/bleu_greedy"] == avg["scores"][f"{split}.greedy"]["bleu"]
    # averaged.ckpt loads like any checkpoint, and holds the mean of the two checkpoints' weights,
    # computed here by hand in float64.
    saved = load_module(tiny_run / "checkpoints" / averaging.AVERAGED).state_dict()
    states = [torch.load(p, map_location="cpu", weights_only=False)["state_dict"] for p in last_two]
    assert not torch.equal(states[0]["net.embed.weight"], states[1]["net.embed.weight"])
    for key, value in saved.items():
        expected = (states[0][key].double() + states[1][key].double()) / 2
        torch.testing.assert_close(value.double(), expected, rtol=0, atol=1e-6)


def test_evaluate_reproduces_the_runs_test_decodes(run):
    """Greedy and beam (the run's beam size and alpha) on last.ckpt give the very lines trainer.test wrote."""
    r = results(run)
    split, module_cfg = r["config"]["data"]["test_split"], r["config"]["module"]
    assert evaluate.main(["--ckpt", str(run), "--beam", "1"]) == 0
    assert (
        evaluate.main(
            [
                "--ckpt",
                str(run),
                "--beam",
                str(module_cfg["test_beam_size"]),
                "--alpha",
                str(module_cfg["length_penalty"]),
            ]
        )
        == 0
    )
    evals = results(run)["evaluations"]
    for decoder, ours in (("greedy", "beam1"), ("beam", f"beam{module_cfg['test_beam_size']}-a0.6")):
        entry = evals[f"{split}.{ours}"]
        assert Path(entry["hypotheses"]).read_text() == Path(r["hypotheses"][f"{split}.{decoder}"]).read_text()
        assert entry["bleu"] == r["scores"][f"{split}.{decoder}"]["bleu"]


def test_bleu_and_chrf_equal_the_sacrebleu_command_line(run, tmp_path, capsys):
    assert evaluate.main(["--ckpt", str(run), "--beam", "3", "--alpha", "1.0", "--avg", "2"]) == 0
    printed = capsys.readouterr().out
    entry = results(run)["evaluations"]["test_2016_flickr.beam3-a1-avg2"]
    assert entry["averaged"] == [str(p) for p in step_checkpoints(run)[-2:]]
    assert f"BLEU {entry['bleu']:.2f}  nrefs:1|case:mixed|eff:no|tok:13a" in printed
    assert f"chrF {entry['chrf']:.2f}  nrefs:1|case:mixed|eff:yes|nc:6|nw:0" in printed
    hyp, ref = Path(entry["hypotheses"]), reference_file(tmp_path, "test_2016_flickr")
    assert len(hyp.read_text().splitlines()) == N_EVAL
    assert sacrebleu_cli(ref, hyp, "bleu") == pytest.approx(round(entry["bleu"], 4), abs=1e-9)
    assert sacrebleu_cli(ref, hyp, "chrf") == pytest.approx(round(entry["chrf"], 4), abs=1e-9)


def test_evaluations_add_to_results_json_without_losing_anything(run):
    before = results(run)
    assert evaluate.main(["--ckpt", str(run), "--split", "val", "--beam", "1", "--max-len-extra", "5"]) == 0
    assert evaluate.main(["--ckpt", str(step_checkpoints(run)[0]), "--split", "val", "--beam", "1"]) == 0
    after = results(run)
    for key, value in before.items():
        if key != "evaluations":
            assert after[key] == value, key
    assert set(before.get("evaluations", {})) < set(after["evaluations"])
    first = step_checkpoints(run)[0].stem  # another checkpoint than last.ckpt gets its own files
    assert {"val.beam1", f"val.beam1-{first}"} <= set(after["evaluations"])
    assert after["evaluations"]["val.beam1"]["max_len_extra"] == 5
    assert not list(run.glob(".results.*.tmp"))


def test_plain_text_files_as_the_split(run, tmp_path):
    src, ref = tmp_path / "five.de", tmp_path / "five.en"
    for path, lang in ((src, "de"), (ref, "en")):
        with gzip.open(DATA / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
            path.write_text("".join(next(f) for _ in range(5)), encoding="utf-8")
    assert evaluate.main(["--ckpt", str(run), "--src", str(src), "--ref", str(ref), "--beam", "2"]) == 0
    entry = results(run)["evaluations"]["five.beam2-a0.6"]
    assert entry["sentences"] == 5 and entry["source_file"] == str(src)
    assert len(Path(entry["hypotheses"]).read_text().splitlines()) == 5


def test_bench_decoding_rows(tiny_run):
    module, datamodule = load_module(tiny_run), load_datamodule(tiny_run)
    rows = bench_decoding(module, datamodule, n_sentences=6, beam_size=2)
    assert [r["decoder"] for r in rows] == ["greedy (cached)", "greedy (naive)", "beam 2 (cached)", "beam 2 (naive)"]
    assert all(r["sentences"] == 6 and r["same_as_naive"] for r in rows)
    assert next(r for r in rows if r["decoder"] == "greedy (naive)")["vs_naive_greedy"] == 1.0


def _vocabulary_mismatch(run: Path, tmp_path: Path) -> list[str]:
    """A copy of the run whose results.json names another vocabulary size than its checkpoint's."""
    other = tmp_path / "other"
    (other / "checkpoints").mkdir(parents=True)
    shutil.copy(run / "checkpoints" / "last.ckpt", other / "checkpoints" / "last.ckpt")
    r = results(run)
    r["config"]["data"]["vocab_size"] = 250
    write_results(other, r)
    return ["--ckpt", str(other)]


def _not_a_checkpoint(run: Path, tmp_path: Path, content: bytes) -> list[str]:
    (tmp_path / "checkpoints").mkdir(exist_ok=True)
    shutil.copy(run / "results.json", tmp_path / "results.json")
    path = tmp_path / "checkpoints" / "bad.ckpt"
    path.write_bytes(content)
    return ["--ckpt", str(path)]


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "checkpoint not found: "),
        ("text file", "is not a headsweep checkpoint"),
        ("other torch file", "is not a headsweep checkpoint"),
        ("vocabulary", "vocabulary mismatch"),
        ("unknown split", "missing data file for split 'nope'"),
        ("too few to average", "--avg 9 needs 9 checkpoints but"),
        ("src without ref", "--src and --ref go together"),
        ("empty ckpt", "no checkpoint given"),
    ],
)
def test_bad_input_gets_one_line_and_exit_code_2(run, tmp_path, capsys, case, message):
    import io

    torch_file = io.BytesIO()
    torch.save({"weights": torch.zeros(2)}, torch_file)
    argv = {
        "missing": lambda: ["--ckpt", str(tmp_path / "nowhere" / "last.ckpt")],
        "text file": lambda: _not_a_checkpoint(run, tmp_path, b"not a checkpoint\n"),
        "other torch file": lambda: _not_a_checkpoint(run, tmp_path, torch_file.getvalue()),
        "vocabulary": lambda: _vocabulary_mismatch(run, tmp_path),
        "unknown split": lambda: ["--ckpt", str(run), "--split", "nope"],
        "too few to average": lambda: ["--ckpt", str(run), "--avg", "9"],
        "src without ref": lambda: ["--ckpt", str(run), "--src", str(tmp_path / "x.de")],
        "empty ckpt": lambda: ["--ckpt", ""],
    }[case]()
    assert evaluate.main(argv) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # library warnings may come first; the error is one line
    assert last.startswith("error: ") and message in last, err
    assert "Traceback" not in err


def test_command_line_error_has_no_traceback(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "headsweep.training.evaluate", "--ckpt", str(tmp_path / "none.ckpt")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    # the last line (library warnings printed while importing may come before it)
    assert out.stderr.strip().splitlines()[-1] == (
        f"error: checkpoint not found: {tmp_path / 'none.ckpt'}; "
        "pass CKPT=<run dir>/checkpoints/<file>.ckpt or a run directory"
    )
