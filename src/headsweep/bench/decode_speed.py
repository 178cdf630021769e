"""Beam-search speed and KV-cache size of every cell of a sweep, timed in one process against its base cell.

    python -m headsweep.bench.decode_speed --sweep kv_heads [--results results] [--sentences 0] [--beam 4]
                                           [--repeats 1] [--precision 32-true] [--budget ablation]

The cells are the sweep spec's (sweeps/<sweep>.yaml, composed as `make sweep` composes them). Each cell's
model is the first seed's trained checkpoint when every cell has one on this machine (the run directory
named in results/<sweep>/<job>/results.json, or multirun/<sweep>/<job>/); otherwise every cell gets random
weights of its config (said in the output): random weights rarely emit EOS, so each sentence decodes to
the length limit, source length + max_len_extra, which times the cost per step at equal lengths. The same
test sentences (all of the test split unless --sentences) are decoded by each cell in turn, in the
sweep's training precision unless --precision; --repeats N interleaves N rounds and keeps each cell's best.

Writes results/<sweep>/decode_speed.json (the report's table shows it:
headsweep.reports.sweep.table.decode_speed_columns) and prints a table.
The KV-cache bytes per token are the closed form (headsweep.model.kv_cache_bytes), checked against the
cache tensors of a real decoding step of each model.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import hydra
import torch
from omegaconf import OmegaConf

from headsweep.bench.models import random_module
from headsweep.config import DECODE_SPEED as OUTPUT  # what the report reads
from headsweep.config import compose
from headsweep.data import DataError, make_batches
from headsweep.machine import cpu_name
from headsweep.model import count_parameters, decoding, kv_cache_bytes
from headsweep.sweeps.specs import SweepError
from headsweep.sweeps.sweep import plan
from headsweep.training.runs import RunError, load_module, read_results
from headsweep.training.translate import autocast_dtype


def cell_models(name: str, results: Path, root: Path, budget: str = "ablation") -> tuple[list[dict], object, str, bool]:
    """[{cell, base, config, checkpoint}], the test data module, the sweep's precision, trained or not. `budget`:
    the one the sweep ran with (make sweep's default), so its jobs compose as they trained."""
    sweep = plan(name, seeds=None, results=results, root=root, budget=budget)
    jobs = {}
    for job in sweep.jobs:  # the first seed of each cell
        jobs.setdefault(job.cell, job)
    cells = []
    for job in jobs.values():
        cfg = compose([*sweep.common, *job.overrides])
        cells.append({"cell": job.cell, "base": job.base, "config": cfg, "checkpoint": _checkpoint(job)})
    datamodule = hydra.utils.instantiate(cells[0]["config"].data)
    datamodule.setup("test")
    trained = all(c["checkpoint"] is not None for c in cells)
    return cells, datamodule, str(cells[0]["config"].trainer.precision), trained


def _checkpoint(job) -> Path | None:
    dirs = [job.dir]
    saved = read_results(job.export) if job.export is not None and job.export.is_dir() else None
    if saved and saved.get("output_dir"):
        dirs.insert(0, Path(saved["output_dir"]))
    return next((d / "checkpoints" / "last.ckpt" for d in dirs if (d / "checkpoints" / "last.ckpt").is_file()), None)


def measured_cache_bytes(net, src: torch.Tensor, token: int, steps: int = 3) -> dict[str, float]:
    """Bytes the decoding cache holds per token after `steps` decoder steps over `src` (B, S)."""
    memory, src_pad = net.encode(src)
    cache = net.new_cache()
    for _ in range(steps):
        net.decode(torch.full((src.size(0), 1), token, dtype=torch.long), memory, src_pad, cache)
    size = lambda kv: kv.k.nbytes + kv.v.nbytes  # noqa: E731
    return {
        "self_per_target_token": sum(size(c.self_attn) for c in cache) / (src.size(0) * steps),
        "cross_per_source_token": sum(size(c.cross_attn) for c in cache) / src.numel(),
    }


def decode_speed(
    name: str,
    results: Path = Path("results"),
    root: Path = Path("multirun"),
    sentences: int = 0,
    beam: int = 4,
    repeats: int = 1,
    precision: str | None = None,
    budget: str = "ablation",
) -> dict:
    """Sentences/s of beam search for each cell of the sweep, on the same test sentences in this process."""
    cells, dm, sweep_precision, trained = cell_models(name, results, root, budget)
    precision = precision or sweep_precision
    dtype = autocast_dtype(precision)
    src, refs = dm.texts(dm.test_split)
    n = len(src) if sentences <= 0 else min(sentences, len(src))
    batches = [b["src"] for b in make_batches(dm.encode(src[:n]), dm.encode(refs[:n]), dm.eval_max_tokens)]
    for c in cells:
        module_cfg = c["config"].module
        c["module"] = (
            load_module(c["checkpoint"])
            if trained
            else random_module(OmegaConf.to_container(c["config"].model, resolve=True), dm, module_cfg)
        )
    autocast = torch.autocast("cpu", dtype=dtype) if dtype else contextlib.nullcontext()
    with torch.no_grad(), autocast:
        for _ in range(repeats):  # rounds over every cell: a slow spell of the machine hits all of them
            for c in cells:
                seconds, tokens = _time(c["module"], batches, beam)
                if seconds < c.get("seconds", float("inf")):
                    c["seconds"], c["output_tokens"] = seconds, tokens
        rows = [_row(c, n, dtype, batches[0][:4]) for c in cells]
    base = next(r for r in rows if r["base"])
    for r in rows:
        r["vs_base"] = r["sentences_per_s"] / base["sentences_per_s"]
        r["kv_cache_vs_base"] = (
            r["kv_cache_bytes"]["self_per_target_token"] / base["kv_cache_bytes"]["self_per_target_token"]
        )
    record = {
        "sweep": name,
        "cpu": cpu_name(),
        "split": dm.test_split,
        "sentences": n,
        "beam": beam,
        "precision": precision,
        "threads": torch.get_num_threads(),
        "repeats": repeats,
        "weights": "trained: each cell's first seed"
        if trained
        else "random: not every cell has a checkpoint here; every sentence decodes to the length limit",
        "cells": rows,
    }
    out = results / name
    out.mkdir(parents=True, exist_ok=True)
    (out / OUTPUT).write_text(json.dumps(record, indent=1))
    return record


def _time(module, batches, beam: int) -> tuple[float, int]:
    hp, net = module.hparams, module.net
    limit = net.cfg.max_len - 1
    t0, tokens = time.perf_counter(), 0
    for src in batches:
        length = decoding.max_output_length(src, hp.pad_id, hp.max_len_extra, limit)
        out = decoding.beam_search(net, src, hp.bos_id, hp.eos_id, length, beam, hp.length_penalty)
        tokens += int(out.ne(hp.pad_id).sum())
    return time.perf_counter() - t0, tokens


def _row(c: dict, n: int, dtype, sample: torch.Tensor) -> dict:
    net = c["module"].net
    closed = kv_cache_bytes(net.cfg, torch.finfo(dtype).bits // 8 if dtype else 4)
    measured = measured_cache_bytes(net, sample, c["module"].hparams.bos_id)
    if measured != closed:
        raise AssertionError(
            f"{c['cell']}: the KV cache holds {measured} bytes per token, the closed form says {closed}"
        )
    return {
        "cell": c["cell"],
        "base": c["base"],
        "kv_heads": net.cfg.sizes.kv_heads,
        "fixed_heads": net.cfg.fixed_heads,
        "d_ff": net.cfg.d_ff,
        "params": count_parameters(net)["total"],
        "kv_cache_bytes": closed,
        "checkpoint": str(c["checkpoint"]) if c["checkpoint"] else None,
        "seconds": c["seconds"],
        "sentences_per_s": n / c["seconds"],
        "output_tokens": c["output_tokens"],
    }


def format_record(record: dict) -> str:
    lines = [
        f"{record['sweep']}: CPU {record.get('cpu', '?')}; "
        f"beam {record['beam']} on {record['sentences']} {record['split']} sentences, "
        f"{record['precision']}, {record['threads']} threads; weights {record['weights']}",
        f"{'cell':<34}{'KV B/target tok':>16}{'x base':>8}{'B/source tok':>13}{'sent/s':>9}{'x base':>8}"
        f"{'out tokens':>12}{'params':>11}",
    ]
    for r in record["cells"]:
        kv = r["kv_cache_bytes"]
        lines.append(
            f"{r['cell']:<34}{kv['self_per_target_token']:>16,}{r['kv_cache_vs_base']:>8.2f}"
            f"{kv['cross_per_source_token']:>13,}{r['sentences_per_s']:>9.1f}{r['vs_base']:>8.2f}"
            f"{r['output_tokens']:>12}{r['params']:>11,}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m headsweep.bench.decode_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--sweep", required=True, help="a sweep name (sweeps/<name>.yaml), e.g. kv_heads")
    p.add_argument("--results", type=Path, default=Path("results"), help="where the sweep's results are")
    p.add_argument("--multirun", type=Path, default=Path("multirun"), help="where its run directories are")
    p.add_argument("--sentences", type=int, default=0, help="test sentences (0 = the whole split)")
    p.add_argument("--beam", type=int, default=4, help="beam size")
    p.add_argument("--repeats", type=int, default=1, help="rounds over every cell; each cell's best is kept")
    p.add_argument("--precision", default=None, help="e.g. 32-true; default: the sweep's training precision")
    p.add_argument("--budget", default="ablation", help="the budget the sweep ran with (make sweep's BUDGET)")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    try:
        record = decode_speed(
            args.sweep,
            args.results,
            args.multirun,
            args.sentences,
            args.beam,
            args.repeats,
            args.precision,
            args.budget,
        )
    except (SweepError, RunError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
    else:
        print(format_record(record) + f"\nwritten: {args.results / args.sweep / OUTPUT}", flush=True)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
