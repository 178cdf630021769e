"""Score a checkpoint: greedy or beam search, optionally on the average of the run's last checkpoints.

    python -m headsweep.evaluate --ckpt RUN_DIR_OR_CKPT [--split test_2016_flickr] [--beam 4] [--alpha 0.6]
                                 [--avg N] [--src FILE --ref FILE] [--max-len-extra 50]

Writes detokenised hypotheses (one per line, in file order) to <run>/hypotheses/, prints sacreBLEU
BLEU and chrF with their signatures, and adds the scores to the run's results.json under
`evaluations`. `average_at_end` is the same averaging, called by training when `average_last` > 1.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import pickle
import re
import sys
import tempfile
import time
from pathlib import Path

import torch

from headsweep import decoding
from headsweep.runs import (RESULTS, RunError, average_state_dicts, check_vocabulary, load_datamodule,
                            load_module, read_results, resolve_checkpoint, run_dir_of)

log = logging.getLogger("headsweep.evaluate")
AVERAGED = "averaged.ckpt"
_STEP = re.compile(r"step(\d+)")


# ----------------------------------------------------------------------------- checkpoints


def checkpoint_step(path: str | Path) -> int | None:
    """The training step in a checkpoint's file name (step000480.ckpt -> 480); None for last.ckpt etc."""
    m = _STEP.fullmatch(Path(path).stem)
    return int(m.group(1)) if m else None


def checkpoints_to_average(ckpt: Path, n: int) -> list[Path]:
    """The n checkpoints (step*.ckpt, by step number) ending at `ckpt`, or the run's last n if `ckpt`
    carries no step (last.ckpt)."""
    by_step = sorted((s, p) for p in ckpt.parent.glob("step*.ckpt") if (s := checkpoint_step(p)) is not None)
    up_to = checkpoint_step(ckpt)
    if up_to is not None:
        by_step = [(s, p) for s, p in by_step if s <= up_to]
    if len(by_step) < n:
        raise RunError(f"--avg {n} needs {n} checkpoints but {ckpt.parent} has {len(by_step)} "
                       f"(step*.ckpt{f' up to step {up_to}' if up_to is not None else ''}); pass --avg {len(by_step)} or less")
    return [p for _, p in by_step[-n:]]


def load_averaged(module, paths: list[Path]):
    """A fresh module with `module`'s settings and the element-wise mean of the checkpoints' weights."""
    averaged = type(module)(**module.hparams)
    averaged.load_state_dict(average_state_dicts(paths))
    return averaged.to(module.device).eval()


def save_averaged(module, paths: list[Path], out: Path) -> None:
    """A checkpoint that `runs.load_module` reads: weights and hyper-parameters, no optimizer state."""
    last = torch.load(paths[-1], map_location="cpu", weights_only=False)
    keep = ("epoch", "global_step", "pytorch-lightning_version", "hyper_parameters", "hparams_name")
    ckpt = {k: last[k] for k in keep if k in last}
    ckpt["state_dict"] = {k: v.cpu() for k, v in module.state_dict().items()}
    ckpt["averaged_from"] = [str(p) for p in paths]
    tmp = out.with_name(out.name + ".tmp")
    torch.save(ckpt, tmp)
    os.replace(tmp, out)


def _load(ckpt: Path):
    try:
        return load_module(ckpt)
    except (pickle.UnpicklingError, EOFError) as e:  # not a torch file at all
        raise RunError(f"{ckpt} is not a headsweep checkpoint ({type(e).__name__}: {e})") from None


# ----------------------------------------------------------------------------- decoding


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of a Lightning precision setting ("bf16-mixed" -> bfloat16, "32-true" -> None)."""
    precision = str(precision)
    if precision.startswith("bf16"):
        return torch.bfloat16
    if precision.startswith("16"):
        return torch.float16
    return None


def decode_split(module, datamodule, split: str, beam: int, alpha: float, max_len_extra: int,
                 precision: str = "32-true") -> list[str]:
    """Detokenised hypotheses of a split, in file order.

    Decoded under the run's training precision so the scores compare with its test/bleu (trainer.test
    decodes under the same autocast).
    """
    hp, net = module.hparams, module.net
    dtype, device = autocast_dtype(precision), module.device
    hyps: list[str | None] = [None] * len(datamodule.texts(split)[0])
    autocast = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
    with torch.no_grad(), autocast:
        for batch in datamodule.dataloader(split):
            src = batch["src"].to(device)
            max_len = decoding.max_output_length(src, hp.pad_id, max_len_extra, net.cfg.max_len - 1)
            if beam > 1:
                tokens = decoding.beam_search(net, src, hp.bos_id, hp.eos_id, max_len, beam, alpha)
            else:
                tokens = decoding.greedy(net, src, hp.bos_id, hp.eos_id, max_len)
            for i, text in zip(batch["index"].tolist(), module.detokenize(tokens)):
                hyps[i] = text
    return hyps


def ensure_split(datamodule, split: str) -> None:
    """The run's own splits are loaded by setup(); another split of a local data dir is read from its files."""
    from headsweep.data import DataError

    try:
        datamodule.texts(split)
        return
    except DataError:
        if datamodule.source != "local":
            raise
    src, tgt = datamodule._load_local(split)  # one clear error naming the missing file
    datamodule.add_split(split, src, tgt)


def add_file_split(datamodule, src: str, ref: str) -> str:
    """A pair of plain text files (one sentence per line, optionally .gz) as a split named after them."""
    from headsweep.data import DataError, _read_lines

    paths = [Path(src), Path(ref)]
    for p in paths:
        if not p.is_file():
            raise DataError(f"file not found: {p}")
    name = paths[0].name.removesuffix(".gz").rsplit(".", 1)[0] or "file"  # newstest.de -> newstest
    src_lines, ref_lines = (_read_lines(p) for p in paths)
    datamodule.add_split(name, src_lines, ref_lines)
    return name


def decoder_name(beam: int, alpha: float) -> str:
    """beam1 for greedy (not "greedy": training writes <split>.greedy.<lang>, which must stay)."""
    return "beam1" if beam <= 1 else f"beam{beam}-a{alpha:g}"


# ----------------------------------------------------------------------------- results.json


def update_results(run_dir: Path, key: str, name: str, entry: dict) -> None:
    """results[key][name] = entry: under a lock, re-read just before writing, replaced atomically, so
    neither a crash nor another evaluation of the same run loses what the file already holds."""
    path = run_dir / RESULTS
    with open(run_dir / ".results.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results = json.loads(path.read_text())
        results.setdefault(key, {})[name] = entry
        fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=".results.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(results, indent=2, default=str))
        os.replace(tmp, path)


# ----------------------------------------------------------------------------- the two entry points


def evaluate(ckpt: str, split: str | None = None, beam: int = 4, alpha: float = 0.6, avg: int = 0,
             src: str | None = None, ref: str | None = None, max_len_extra: int | None = None) -> dict:
    """Decode and score one split with one checkpoint (or an average); returns the results entry."""
    from headsweep.module import corpus_scores

    if not str(ckpt).strip():
        raise RunError("no checkpoint given: pass --ckpt <run dir> or <run dir>/checkpoints/<file>.ckpt (make evaluate CKPT=...)")
    if (src is None) != (ref is None):
        raise RunError("--src and --ref go together: a source file and its reference translations")
    if src is not None and split is not None:
        raise RunError("pass either --split or --src/--ref, not both")
    if beam < 1:
        raise RunError(f"--beam must be >= 1, got {beam}")
    if avg < 0 or (max_len_extra is not None and max_len_extra < 0):
        raise RunError("--avg and --max-len-extra must be >= 0")
    t0 = time.perf_counter()
    path = resolve_checkpoint(ckpt)
    run_dir = run_dir_of(path)
    results = read_results(run_dir)
    if results is None:
        raise RunError(f"no {RESULTS} in {run_dir}: the run did not finish; pass a finished run's checkpoint")
    module = _load(path)
    datamodule = load_datamodule(run_dir)
    check_vocabulary(module, datamodule)
    if src is not None:
        split = add_file_split(datamodule, src, ref)
    else:
        split = split or datamodule.test_split
        ensure_split(datamodule, split)
    averaged = checkpoints_to_average(path, avg) if avg > 1 else []
    if averaged:
        module = load_averaged(module, averaged)
    extra = module.hparams.max_len_extra if max_len_extra is None else max_len_extra
    precision = results["config"]["trainer"].get("precision", "32-true")

    hyps = decode_split(module, datamodule, split, beam, alpha, extra, precision)
    refs = datamodule.texts(split)[1]
    name = f"{split}.{decoder_name(beam, alpha)}"
    if averaged:
        name += f"-avg{len(averaged)}"
    elif path.name != "last.ckpt":
        name += f"-{path.stem}"  # another checkpoint's hypotheses must not overwrite last.ckpt's
    hyp_path = write_lines(run_dir / "hypotheses" / f"{name}.{datamodule.tgt_lang}", hyps)
    ref_path = write_lines(run_dir / "hypotheses" / f"{split}.ref.{datamodule.tgt_lang}", refs)
    entry = {
        **corpus_scores(hyps, refs),
        "split": split, "sentences": len(hyps), "beam": beam, "alpha": alpha if beam > 1 else None,
        "max_len_extra": extra, "precision": precision,
        "checkpoint": str(path), "averaged": [str(p) for p in averaged],
        "hypotheses": str(hyp_path), "references": str(ref_path),
        "source_file": src, "seconds": time.perf_counter() - t0,
    }
    update_results(run_dir, "evaluations", name, entry)
    return entry


def average_at_end(module, datamodule, ckpt_dir: Path, n: int, precision: str) -> tuple[dict, dict]:
    """Training's last step when `average_last` > 1: average the last n epoch checkpoints, save the
    weights as checkpoints/averaged.ckpt, and score them on the test split with greedy and beam search
    as trainer.test scored the last weights. Returns (results["averaged"], test_avg/* metrics)."""
    from headsweep.module import corpus_scores

    paths = sorted(ckpt_dir.glob("step*.ckpt"), key=lambda p: checkpoint_step(p) or -1)[-n:]
    if len(paths) < 2:
        log.warning("average_last=%d: only %d checkpoint(s) in %s, nothing to average", n, len(paths), ckpt_dir)
        return {"skipped": f"only {len(paths)} checkpoint(s) to average"}, {}
    averaged = load_averaged(module, paths)
    save_averaged(averaged, paths, ckpt_dir / AVERAGED)
    hp, split = module.hparams, datamodule.test_split
    refs = datamodule.texts(split)[1]
    out_dir = ckpt_dir.parent / "hypotheses"
    entry = {"checkpoints": [str(p) for p in paths], "checkpoint": str(ckpt_dir / AVERAGED),
             "scores": {}, "hypotheses": {}}
    for name, beam in (("greedy", 1), ("beam", hp.test_beam_size)):
        hyps = decode_split(averaged, datamodule, split, beam, hp.length_penalty, hp.max_len_extra, precision)
        key = f"{split}.{name}"
        entry["scores"][key] = corpus_scores(hyps, refs)
        entry["hypotheses"][key] = str(write_lines(out_dir / f"{key}-avg{len(paths)}.{datamodule.tgt_lang}", hyps))
    beam_scores = entry["scores"][f"{split}.beam"]
    metrics = {"test_avg/bleu": beam_scores["bleu"], "test_avg/chrf": beam_scores["chrf"],
               "test_avg/bleu_greedy": entry["scores"][f"{split}.greedy"]["bleu"]}
    return entry, metrics


def write_lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def format_entry(entry: dict) -> str:
    decoder = "greedy" if entry["beam"] <= 1 else f"beam {entry['beam']}, alpha {entry['alpha']:g}"
    weights = (f"average of {len(entry['averaged'])} checkpoints ({', '.join(Path(p).name for p in entry['averaged'])})"
               if entry["averaged"] else Path(entry["checkpoint"]).name)
    return "\n".join([
        f"{entry['split']}: {entry['sentences']} sentences, {decoder}, {weights}, {entry['precision']}",
        f"  BLEU {entry['bleu']:.2f}  {entry['bleu_signature']}",
        f"  chrF {entry['chrf']:.2f}  {entry['chrf_signature']}",
        f"  hypotheses: {entry['hypotheses']}",
        f"  references: {entry['references']}",
        f"  ({entry['seconds']:.1f} s; scores added to results.json under evaluations)",
    ])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m headsweep.evaluate", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--ckpt", required=True, help="a checkpoint file or a run directory (its checkpoints/last.ckpt)")
    p.add_argument("--split", default=None, help="a split of the run's data (default: its test split)")
    p.add_argument("--beam", type=int, default=4, help="beam size; 1 = greedy")
    p.add_argument("--alpha", type=float, default=0.6, help="GNMT length penalty exponent")
    p.add_argument("--avg", type=int, default=0, help="average the last N checkpoints (0/1: no averaging)")
    p.add_argument("--src", default=None, help="a source text file to translate instead of a split")
    p.add_argument("--ref", default=None, help="its reference translations, line by line")
    p.add_argument("--max-len-extra", type=int, default=None,
                   help="decode up to source length + this many tokens (default: the run's module.max_len_extra)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from headsweep.data import DataError

    args = parse_args(argv)
    try:
        entry = evaluate(args.ckpt, args.split, args.beam, args.alpha, args.avg, args.src, args.ref,
                         args.max_len_extra)
    except (RunError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_entry(entry))
    return 0


if __name__ == "__main__":
    sys.exit(main())
