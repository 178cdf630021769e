"""Sweep throughput: N jobs at once with cores / N torch threads each (what `make sweep JOBS=N` runs) against
one job with every core, as the ratio of their summed target tokens/s. Each job is a separate process
(threads set before torch starts) training the default model on the same Multi30k batches."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import hydra
import torch

from headsweep.bench.training import ours_tokens_per_s
from headsweep.config import compose
from headsweep.sweeps.sweep import default_jobs

STEPS, WARMUP = 16, 3


def one_job(threads: int) -> float:
    """Run in a child: the default model's training tokens/s with this many threads."""
    torch.set_num_threads(threads)
    dm = hydra.utils.instantiate(compose(["paths.output_dir=/tmp/headsweep-bench"]).data)
    dm.setup("fit")
    it = iter(dm.train_dataloader())
    batches = [next(it) for _ in range(STEPS + WARMUP)]
    return ours_tokens_per_s(dm, batches, WARMUP, "32-true")


def run_jobs(n: int, threads: int) -> list[float]:
    """n processes started together, each with `threads` threads (OMP_NUM_THREADS before torch loads)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", "headsweep.bench.sweep", "--child", str(threads)]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) for _ in range(n)]
    return [json.loads(p.communicate()[0].strip().splitlines()[-1])["tokens_per_s"] for p in procs]


def bench_sweep(jobs: int | None = None) -> float:
    """Print and return the throughput ratio of `jobs` jobs (default: make sweep's) against one job."""
    cores = os.cpu_count() or 1
    jobs = jobs or default_jobs(cores)
    print(
        f"\n## Sweep throughput: {jobs} jobs x {cores // jobs} threads vs 1 job x {cores} threads "
        f"({STEPS} timed fp32 training steps each, default model, same batches)",
        flush=True,
    )
    if jobs < 2:
        print("one job at a time on this machine (make sweep's default here): nothing to compare")
        return 1.0
    single = run_jobs(1, cores)[0]
    parallel = run_jobs(jobs, cores // jobs)
    ratio = sum(parallel) / single
    print(
        f"1 job:  {single:.0f} target tok/s\n{jobs} jobs: {' + '.join(f'{x:.0f}' for x in parallel)} = "
        f"{sum(parallel):.0f} target tok/s\nratio {ratio:.2f} (> 1: JOBS={jobs} finishes a sweep sooner)",
        flush=True,
    )
    return ratio


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps({"tokens_per_s": one_job(int(sys.argv[2]))}))
    else:
        bench_sweep()
