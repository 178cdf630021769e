"""Decoding speed: cached greedy and beam search against naive decoders that re-run the whole prefix
every step, on the same model and the same test sentences, timed in the same run.

    python -m headsweep.bench.decoding [--ckpt RUN_DIR_OR_CKPT] [--sentences 100] [--beam 4] [--repeats 1]
    python -m headsweep.bench.decoding --sweep kv_heads [...]     each cell of a sweep: headsweep.bench.decode_speed

Without --ckpt it trains nothing: a randomly initialised model of the default size (conf/model/small)
on the default data's test split. Random weights rarely emit EOS, so every sentence decodes to the
length limit (source length + max_len_extra): the worst case for the naive decoders.
"""

from __future__ import annotations

import argparse
import sys
import time

import hydra
import torch
from omegaconf import OmegaConf

from headsweep.bench.models import random_module
from headsweep.config import compose
from headsweep.data import DataError, make_batches
from headsweep.model import decoding
from headsweep.training.runs import RunError, load_run


def _batches(datamodule, n_sentences: int) -> tuple[str, list[torch.Tensor]]:
    """The first n_sentences of the test split (file order, not the shortest), as padded source batches
    under the data module's evaluation token budget, sorted by length as evaluation batches are."""
    split = datamodule.test_split
    src_texts, refs = datamodule.texts(split)
    ids, ref_ids = datamodule.encode(src_texts[:n_sentences]), datamodule.encode(refs[:n_sentences])
    return split, [b["src"] for b in make_batches(ids, ref_ids, datamodule.eval_max_tokens)]


def bench_decoding(module, datamodule, n_sentences: int = 1000, beam_size: int = 4, repeats: int = 1) -> list[dict]:
    """Sentences/s of each decoder on the same sentences (best of `repeats` timings); `vs_naive_greedy` is
    the speed ratio to naive greedy measured here, and `same_as_naive` says whether a cached decoder's
    output equals its naive twin's token for token (it must: the cache changes the cost, not the result)."""
    hp, net = module.hparams, module.net.eval()
    split, batches = _batches(datamodule, n_sentences)
    n = sum(b.size(0) for b in batches)
    decoders = {
        "greedy (cached)": lambda src, L: decoding.greedy(net, src, hp.bos_id, hp.eos_id, L),
        "greedy (naive)": lambda src, L: decoding.greedy_naive(net, src, hp.bos_id, hp.eos_id, L),
        f"beam {beam_size} (cached)": lambda src, L: decoding.beam_search(
            net, src, hp.bos_id, hp.eos_id, L, beam_size, hp.length_penalty
        ),
        f"beam {beam_size} (naive)": lambda src, L: decoding.beam_search_naive(
            net, src, hp.bos_id, hp.eos_id, L, beam_size, hp.length_penalty
        ),
    }
    limit = net.cfg.max_len - 1
    with torch.no_grad():
        decoders["greedy (cached)"](batches[0][:2], 5)  # warm-up: first-call allocations, untimed
        rows, outputs = [], {}
        for name, decode in decoders.items():
            seconds = float("inf")
            for _ in range(repeats):
                t0, outs = time.perf_counter(), []
                for src in batches:
                    outs.append(decode(src, decoding.max_output_length(src, hp.pad_id, hp.max_len_extra, limit)))
                seconds = min(seconds, time.perf_counter() - t0)
            outputs[name] = outs
            tokens = sum(int(o.ne(hp.pad_id).sum()) for o in outs)
            rows.append(
                {
                    "decoder": name,
                    "split": split,
                    "sentences": n,
                    "seconds": seconds,
                    "sentences_per_s": n / seconds,
                    "output_tokens": tokens,
                }
            )
    naive = next(r for r in rows if r["decoder"] == "greedy (naive)")
    for r in rows:
        r["vs_naive_greedy"] = r["sentences_per_s"] / naive["sentences_per_s"]
        twin = r["decoder"].replace("(cached)", "(naive)")
        r["same_as_naive"] = all(torch.equal(a, b) for a, b in zip(outputs[r["decoder"]], outputs[twin]))
    return rows


def format_rows(rows: list[dict]) -> str:
    lines = [f"{'decoder':<18}{'sent/s':>9}{'vs naive greedy':>17}{'out tokens':>12}{'seconds':>9}  same as naive"]
    for r in rows:
        lines.append(
            f"{r['decoder']:<18}{r['sentences_per_s']:>9.1f}{r['vs_naive_greedy']:>17.2f}"
            f"{r['output_tokens']:>12}{r['seconds']:>9.1f}  {'yes' if r['same_as_naive'] else 'NO'}"
        )
    return "\n".join(lines)


def _random_default_model():
    """The default config's model with random weights, and the default config's data module."""
    cfg = compose(["paths.output_dir=/tmp/headsweep-bench"])
    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.setup("test")
    return random_module(OmegaConf.to_container(cfg.model, resolve=True), datamodule, cfg.module), datamodule


def main(argv: list[str] | None = None) -> int:
    if "--sweep" in (sys.argv[1:] if argv is None else argv):  # every cell of a sweep against its base
        from headsweep.bench.decode_speed import main as sweep_main

        return sweep_main(argv)
    p = argparse.ArgumentParser(prog="python -m headsweep.bench.decoding", description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt", default=None, help="a checkpoint or run directory; default: random default-size model")
    # 100 by default: the naive decoders take ~1 min for them at the default size on 2 CPU cores.
    p.add_argument("--sentences", type=int, default=100, help="test sentences decoded by every decoder")
    p.add_argument("--beam", type=int, default=4, help="beam size")
    p.add_argument("--repeats", type=int, default=1, help="time each decoder this many times, keep the best")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    try:
        if args.ckpt:
            run = load_run(args.ckpt)
            module, datamodule = run.module, run.datamodule
            what = f"checkpoint {args.ckpt}"
        else:
            module, datamodule = _random_default_model()
            what = (
                "randomly initialised default-size model (conf/model/small): random weights decode every "
                "sentence to the length limit, the worst case for the naive decoders"
            )
    except (RunError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    c = module.net.cfg
    print(
        f"\n## Decoding: {what}\n"
        f"d_model {c.d_model}, {c.n_layers}+{c.n_layers} layers, h {c.heads}, vocab {c.vocab_size}; fp32, "
        f"{torch.get_num_threads()} threads; length limit = source length + {module.hparams.max_len_extra}; "
        f"ratio = sentences/s / naive greedy's, same sentences, this run",
        flush=True,
    )
    rows = bench_decoding(module, datamodule, args.sentences, args.beam, args.repeats)
    print(f"{rows[0]['sentences']} {rows[0]['split']} sentences\n{format_rows(rows)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
