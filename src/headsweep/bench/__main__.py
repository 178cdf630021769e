"""`make bench`: speed measured as ratios against baselines timed in the same run.

1. Attention: forward + backward of our layer vs torch.nn.MultiheadAttention.
2. The ablation job: target tokens/s of a make sweep BUDGET=ablation job as the shipped results were made
   (fp32, eager) vs as make sweep runs it now on this CPU, and the validation loss pass before/after.
3. Training: target tokens/s of our Lightning training step vs a plain loop over torch.nn.Transformer on
   the same Multi30k batches, and MFU against the matmul peak measured now.
4. Decoding: cached greedy / beam vs a naive decoder that re-runs the prefix.
5. Sweep: N jobs x cores/N threads (make sweep's JOBS) vs 1 job x all cores.
6. GPU (where torch sees CUDA): target tokens/s of one job on the card, of N jobs packed on it (summed),
   the share of the card's measured bf16 matmul peak, and the same job on this machine's CPU.

bf16 is timed only where the CPU has bf16 matmul units (AVX512-BF16 or AMX); elsewhere it runs 5-130x
slower than fp32 and nothing here would use it.

    python -m headsweep.bench [--steps 10] [--profile] [--skip attention,ablation,training,decoding,sweep,gpu]
                              [--packed 8]   (GPU: jobs packed on the card)
                              [--ckpt RUN_DIR --sentences 1000]   (decoding with a trained model)
"""

from __future__ import annotations

import argparse

import torch

from headsweep.bench.ablation import bench_ablation
from headsweep.bench.attention import bench_attention
from headsweep.bench.decoding import main as decoding_main
from headsweep.bench.gpu import bench_gpu
from headsweep.bench.sweep import bench_sweep
from headsweep.bench.training import bench_training
from headsweep.config import cpu_has_bf16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per side")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--profile", action="store_true", help="print where a training step's time goes")
    parser.add_argument("--skip", default="", help="comma-separated: attention,ablation,training,decoding,sweep,gpu")
    parser.add_argument("--packed", default="8", help="GPU: comma-separated numbers of jobs packed on the card")
    parser.add_argument(
        "--ckpt", default=None, help="decoding: a trained run or checkpoint (default: a random default-size model)"
    )
    parser.add_argument(
        "--sentences",
        type=int,
        default=None,
        help="decoding: test sentences per decoder (default 1000 with --ckpt, else 100)",
    )
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    torch.manual_seed(0)
    bf16 = torch.cuda.is_available() or cpu_has_bf16()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if not bf16:
        print("bf16 not timed: this CPU has no bf16 matmul units (AVX512-BF16 or AMX); make train uses fp32 here")
    if "attention" not in skip:
        bench_attention(bf16=bf16)
    if "ablation" not in skip:
        bench_ablation(args.steps, args.warmup)
    if "training" not in skip:
        bench_training(args.steps, args.warmup, args.profile, bf16=bf16)
    if "decoding" not in skip:
        sentences = args.sentences or (1000 if args.ckpt else 100)
        decoding_main([*(["--ckpt", args.ckpt] if args.ckpt else []), "--sentences", str(sentences)])
    if "sweep" not in skip:
        bench_sweep()
    if "gpu" not in skip:
        bench_gpu(packs=tuple(int(n) for n in args.packed.split(",") if n))


if __name__ == "__main__":
    main()
