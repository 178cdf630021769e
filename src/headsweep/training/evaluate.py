"""Score a checkpoint: greedy or beam search, optionally on the average of the run's last checkpoints.

    python -m headsweep.training.evaluate --ckpt RUN_DIR_OR_CKPT [--split test_2016_flickr] [--beam 4] [--alpha 0.6]
                                 [--avg N] [--src FILE --ref FILE] [--max-len-extra 50]

Writes detokenised hypotheses (one per line, in file order) to <run>/hypotheses/, prints sacreBLEU
BLEU and chrF with their signatures, and adds the scores to the run's results.json under
`evaluations`. Training's own averaging (`average_last` > 1) is headsweep.training.averaging.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from headsweep.data import DataError
from headsweep.training.averaging import checkpoints_to_average, load_averaged
from headsweep.training.runs import RunError, load_run, update_results, write_lines
from headsweep.training.translate import corpus_scores, translate_batches


def decoder_name(beam: int, alpha: float) -> str:
    """beam1 for greedy (not "greedy": training writes <split>.greedy.<lang>, which must stay)."""
    return "beam1" if beam <= 1 else f"beam{beam}-a{alpha:g}"


def evaluate(
    ckpt: str,
    split: str | None = None,
    beam: int = 4,
    alpha: float = 0.6,
    avg: int = 0,
    src: str | None = None,
    ref: str | None = None,
    max_len_extra: int | None = None,
) -> dict:
    """Decode and score one split with one checkpoint (or an average); returns the results entry."""
    if (src is None) != (ref is None):
        raise RunError("--src and --ref go together: a source file and its reference translations")
    if src is not None and split is not None:
        raise RunError("pass either --split or --src/--ref, not both")
    if beam < 1:
        raise RunError(f"--beam must be >= 1, got {beam}")
    if avg < 0 or (max_len_extra is not None and max_len_extra < 0):
        raise RunError("--avg and --max-len-extra must be >= 0")
    t0 = time.perf_counter()
    run = load_run(ckpt)
    path, run_dir, module, datamodule = run.checkpoint, run.dir, run.module, run.datamodule
    if src is not None:
        split = datamodule.add_files(src, ref)
    else:
        split = split or datamodule.test_split
        datamodule.ensure_split(split)
    averaged = checkpoints_to_average(path, avg) if avg > 1 else []
    if averaged:
        module = load_averaged(module, averaged)
    extra = module.hparams.max_len_extra if max_len_extra is None else max_len_extra
    precision = run.results["config"]["trainer"].get("precision", "32-true")

    refs = datamodule.texts(split)[1]
    hyps = translate_batches(
        module,
        datamodule.dataloader(split),
        len(refs),
        beam_size=beam,
        alpha=alpha,
        max_len_extra=extra,
        precision=precision,
    )
    name = f"{split}.{decoder_name(beam, alpha)}"
    if averaged:
        name += f"-avg{len(averaged)}"
    elif path.name != "last.ckpt":
        name += f"-{path.stem}"  # another checkpoint's hypotheses must not overwrite last.ckpt's
    hyp_path = write_lines(run_dir / "hypotheses" / f"{name}.{datamodule.tgt_lang}", hyps)
    ref_path = write_lines(run_dir / "hypotheses" / f"{split}.ref.{datamodule.tgt_lang}", refs)
    entry = {
        **corpus_scores(hyps, refs),
        "split": split,
        "sentences": len(hyps),
        "beam": beam,
        "alpha": alpha if beam > 1 else None,
        "max_len_extra": extra,
        "precision": precision,
        "checkpoint": str(path),
        "averaged": [str(p) for p in averaged],
        "hypotheses": str(hyp_path),
        "references": str(ref_path),
        "source_file": src,
        "seconds": time.perf_counter() - t0,
    }
    update_results(run_dir, "evaluations", name, entry)
    return entry


def format_entry(entry: dict) -> str:
    decoder = "greedy" if entry["beam"] <= 1 else f"beam {entry['beam']}, alpha {entry['alpha']:g}"
    weights = (
        f"average of {len(entry['averaged'])} checkpoints ({', '.join(Path(p).name for p in entry['averaged'])})"
        if entry["averaged"]
        else Path(entry["checkpoint"]).name
    )
    return "\n".join(
        [
            f"{entry['split']}: {entry['sentences']} sentences, {decoder}, {weights}, {entry['precision']}",
            f"  BLEU {entry['bleu']:.2f}  {entry['bleu_signature']}",
            f"  chrF {entry['chrf']:.2f}  {entry['chrf_signature']}",
            f"  hypotheses: {entry['hypotheses']}",
            f"  references: {entry['references']}",
            f"  ({entry['seconds']:.1f} s; scores added to results.json under evaluations)",
        ]
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m headsweep.training.evaluate",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--ckpt", required=True, help="a checkpoint file or a run directory (its checkpoints/last.ckpt)")
    p.add_argument("--split", default=None, help="a split of the run's data (default: its test split)")
    p.add_argument("--beam", type=int, default=4, help="beam size; 1 = greedy")
    p.add_argument("--alpha", type=float, default=0.6, help="GNMT length penalty exponent")
    p.add_argument("--avg", type=int, default=0, help="average the last N checkpoints (0/1: no averaging)")
    p.add_argument("--src", default=None, help="a source text file to translate instead of a split")
    p.add_argument("--ref", default=None, help="its reference translations, line by line")
    p.add_argument(
        "--max-len-extra",
        type=int,
        default=None,
        help="decode up to source length + this many tokens (default: the run's module.max_len_extra)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        entry = evaluate(args.ckpt, args.split, args.beam, args.alpha, args.avg, args.src, args.ref, args.max_len_extra)
    except (RunError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_entry(entry))
    return 0


if __name__ == "__main__":
    sys.exit(main())
