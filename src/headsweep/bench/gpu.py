"""GPU speed of a sweep job: target tokens/s of one job's training step on the card, of N such jobs packed
side by side (separate processes, as make sweep packs them), the share of the card's bf16 matmul peak
(measured now) that achieves, and the same job on this machine's CPU, all timed in one run.

    python -m headsweep.bench.gpu [--steps 60] [--warmup 10] [--packed 1,4,8] [--cpu-steps 5]

Every side trains the default small model (make train's settings, bf16-mixed on the GPU, SDPA kernels) with
Lightning on the same Multi30k batches. Training FLOPs per target token are 6 x (non-embedding parameters +
the output projection), as in the CPU training bench; attention's T^2 terms are left out, so the share of
peak is a slight underestimate.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from headsweep.bench.training import SMALL
from headsweep.config import compose, cpu_has_bf16
from headsweep.model import count_parameters
from headsweep.training.module import TranslationModule


def matmul_peak_gpu(n: int = 8192, reps: int = 10) -> float:
    """bf16 FLOP/s of a large square matmul on the card: the practical peak the share is measured against."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - t)


class _Timer(pl.Callback):
    """Wall time (time.time(), comparable across processes) from the start of batch `warmup` to the end of
    the last batch, with the card synchronised at both ends."""

    def __init__(self, warmup: int):
        self.warmup, self.tokens, self.t0, self.t1 = warmup, 0, None, None

    def _sync(self, module):
        if module.device.type == "cuda":
            torch.cuda.synchronize(module.device)

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch_idx == self.warmup:
            self._sync(module)
            self.t0 = time.time()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if batch_idx >= self.warmup:
            self.tokens += int(batch["tgt_out"].ne(0).sum())
            self._sync(module)
            self.t1 = time.time()


def time_job(
    batches: list[dict], vocab: int, tokenizer_json: str | None, warmup: int, accelerator: str, precision: str
) -> dict:
    """One job's training loop over `batches`: {tokens, t0, t1, tok_s, peak_gib}."""
    module = TranslationModule(model=dict(SMALL), vocab_size=vocab, tokenizer_json=tokenizer_json)
    timer = _Timer(warmup)
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=1,
        precision=precision,
        max_steps=len(batches),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, train_dataloaders=DataLoader(batches, batch_size=None))
    peak = torch.cuda.max_memory_reserved() / 2**30 if accelerator == "gpu" else None
    return {
        "tokens": timer.tokens,
        "t0": timer.t0,
        "t1": timer.t1,
        "tok_s": timer.tokens / (timer.t1 - timer.t0),
        "peak_gib": peak,
    }


def load_batches(steps: int) -> tuple[list[dict], int, str | None]:
    """make train's first `steps` training batches, its vocabulary size and tokenizer."""
    import hydra

    dm = hydra.utils.instantiate(compose(["paths.output_dir=/tmp/headsweep-bench"]).data)
    dm.setup("fit")
    it = iter(dm.train_dataloader())
    return [next(it) for _ in range(steps)], dm.vocab_size_actual, dm.tokenizer_json


def packed(n: int, batch_file: Path, warmup: int) -> dict:
    """n worker processes, each one job on the card, started together: summed tokens over the span from the
    first start to the last end."""
    start_at = time.time() + 25.0  # every worker imports and builds first, then they start at once
    env = {**os.environ, "OMP_NUM_THREADS": str(max((os.cpu_count() or 1) // n, 1))}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "headsweep.bench.gpu",
                "--worker",
                str(batch_file),
                "--warmup",
                str(warmup),
                "--start-at",
                str(start_at),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(n)
    ]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a packed worker failed: exit statuses {[p.returncode for p in procs]}")
    span = max(o["t1"] for o in outs) - min(o["t0"] for o in outs)
    return {
        "tok_s": sum(o["tokens"] for o in outs) / span,
        "per_job": [o["tok_s"] for o in outs],
        "peak_gib": max(o["peak_gib"] for o in outs),
    }


def worker(batch_file: Path, warmup: int, start_at: float) -> None:
    saved = torch.load(batch_file, weights_only=False)
    torch.cuda.init()
    time.sleep(max(start_at - time.time(), 0.0))
    print(json.dumps(time_job(saved["batches"], saved["vocab"], saved["tokenizer"], warmup, "gpu", "bf16-mixed")))


def bench_gpu(steps: int = 60, warmup: int = 10, packs: tuple[int, ...] = (4, 8), cpu_steps: int = 5) -> dict:
    """Print the GPU lines of make bench; return the numbers (docs and the prepared GPU check keep them)."""
    if not torch.cuda.is_available():
        print("\n## GPU: skipped (torch sees no CUDA device)")
        return {}
    batches, vocab, tok = load_batches(steps + warmup)
    name = torch.cuda.get_device_name()
    module = TranslationModule(model=dict(SMALL), vocab_size=vocab, tokenizer_json=tok)
    flops_per_token = 6 * (count_parameters(module.net)["non_embedding"] + vocab * SMALL["d_model"])
    peak = matmul_peak_gpu()
    mean_tokens = sum(int(b["tgt_out"].ne(0).sum()) for b in batches) / len(batches)
    print(
        f"\n## GPU: {name}; {len(batches)} Multi30k batches (~{mean_tokens:.0f} target tokens), first {warmup} "
        f"not timed; default small model, bf16-mixed; bf16 matmul peak (8192^3, measured now) {peak / 1e12:.0f} TFLOP/s"
    )
    one = time_job(batches, vocab, tok, warmup, "gpu", "bf16-mixed")
    rows = [("1 job", one["tok_s"], one["tok_s"], one["peak_gib"])]
    result = {
        "device": name,
        "peak_tflops": peak / 1e12,
        "flops_per_token": flops_per_token,
        "one": one["tok_s"],
        "peak_gib": one["peak_gib"],
        "packed": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        batch_file = Path(tmp) / "batches.pt"
        torch.save({"batches": batches, "vocab": vocab, "tokenizer": tok}, batch_file)
        for n in packs:
            p = packed(n, batch_file, warmup)
            rows.append((f"{n} jobs packed", p["tok_s"], min(p["per_job"]), p["peak_gib"]))
            result["packed"][n] = p["tok_s"]
    cpu_precision = "bf16-mixed" if cpu_has_bf16() else "32-true"
    cpu = time_job(batches[: cpu_steps + 2], vocab, tok, 2, "cpu", cpu_precision)
    result["cpu"], result["cpu_precision"] = cpu["tok_s"], cpu_precision
    print(f"{'':<16}{'tgt tok/s':>11}{'x 1 job':>9}{'slowest job':>13}{'share of peak':>15}{'GiB/job':>9}{'x CPU':>8}")
    for label, tok_s, slowest, gib in rows:
        print(
            f"{label:<16}{tok_s:>11.0f}{tok_s / one['tok_s']:>9.2f}{slowest:>13.0f}"
            f"{tok_s * flops_per_token / peak:>15.2%}{gib + 0.6:>9.1f}{tok_s / cpu['tok_s']:>8.1f}"
        )
    print(
        f"{'CPU, same job':<16}{cpu['tok_s']:>11.0f}{'':>9}{'':>13}{'':>15}{'':>9}{1:>8.1f}"
        f"   ({cpu_precision}, {torch.get_num_threads()} threads, {cpu_steps} steps)"
    )
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--packed", default="4,8", help="comma-separated job counts to pack on the card")
    parser.add_argument("--cpu-steps", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.warmup, args.start_at)
        return
    result = bench_gpu(args.steps, args.warmup, tuple(int(n) for n in args.packed.split(",") if n), args.cpu_steps)
    if args.json and result:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
