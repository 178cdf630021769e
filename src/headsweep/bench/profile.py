"""Where an ablation job's training step spends its time, in the job's own setting (budget=ablation, the
threads a sweep job gets here) and in both precisions: phases timed around a plain loop over the same
module and optimizer as training, and torch.profiler's self CPU time of the forward + backward grouped
into kinds of op. Lightning's own per-step cost is the difference to the Trainer's measured tokens/s.

    python -m headsweep.bench.profile [--steps 8] [--precision 32-true,bf16-mixed]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch
from omegaconf import OmegaConf
from torch.profiler import profile

from headsweep.bench.ablation import _job
from headsweep.bench.training import ours_tokens_per_s
from headsweep.config import cpu_has_bf16
from headsweep.machine import cpu_class
from headsweep.model.losses import linear_cross_entropy
from headsweep.training.module import TranslationModule

# aten op name -> kind; the first matching prefix wins, anything else is "other elementwise / copies".
KINDS = (
    ("matmuls", ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::_linear")),
    (
        "attention softmax / masking",
        (
            "aten::_softmax",
            "aten::softmax",
            "aten::_softmax_backward_data",
            "aten::masked_fill",
            "aten::tril",
            "aten::where",
        ),
    ),
    (
        "loss (logsumexp, exp, gather, scatter)",
        ("aten::exp", "aten::logsumexp", "aten::gather", "aten::scatter", "aten::mean"),
    ),
    ("layer norm", ("aten::native_layer_norm", "aten::native_layer_norm_backward")),
    ("dropout masks", ("aten::random_", "aten::ge", "aten::bernoulli")),
    (
        "casts / copies (autocast, views)",
        ("aten::copy_", "aten::to", "aten::_to_copy", "aten::clone", "aten::contiguous", "aten::cat"),
    ),
    ("optimizer (Adam)", ("aten::_foreach", "aten::addcmul", "aten::addcdiv", "aten::lerp", "aten::sqrt")),
)


def kind_of(name: str) -> str:
    return next((kind for kind, prefixes in KINDS if name.startswith(prefixes)), "other elementwise / residual")


def phases(module: TranslationModule, batches: list[dict], precision: str) -> dict[str, float]:
    """Seconds per step of each phase of a plain training loop: data copy, forward, loss, backward, Adam."""
    opt = torch.optim.Adam(module.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    bf16 = precision.startswith("bf16")
    times = defaultdict(float)
    module.train()
    for b in batches:
        t0 = time.perf_counter()
        b = {k: v.clone() if torch.is_tensor(v) else v for k, v in b.items()}  # what moving a batch costs
        t1 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            memory, src_pad = module.net.encode(b["src"])
            hidden = module.net.decode_hidden(b["tgt_in"], memory, src_pad)
            t2 = time.perf_counter()
            real = b["tgt_out"].ne(module.hparams.pad_id)
            loss = linear_cross_entropy(hidden[real], module.net.output_weight, b["tgt_out"][real], 0.1)
        t3 = time.perf_counter()
        loss.backward()
        t4 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t5 = time.perf_counter()
        for name, dt in (
            ("batch copy", t1 - t0),
            ("forward (encoder + decoder)", t2 - t1),
            ("loss: output projection + cross-entropy, gradient included", t3 - t2),
            ("backward (encoder + decoder)", t4 - t3),
            ("optimizer step (Adam)", t5 - t4),
        ):
            times[name] += dt / len(batches)
    return dict(times)


def op_kinds(module: TranslationModule, batches: list[dict], precision: str) -> dict[str, float]:
    """Share of self CPU time by kind of op over forward + loss + backward + Adam."""
    opt = torch.optim.Adam(module.parameters(), lr=1e-4)
    bf16 = precision.startswith("bf16")
    with profile() as prof:
        for b in batches:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss, _ = module.loss(b)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    totals = defaultdict(float)
    for e in prof.key_averages():
        if e.key.startswith("aten::"):
            totals[kind_of(e.key)] += e.self_cpu_time_total
    whole = sum(totals.values()) or 1.0
    return {k: v / whole for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--precision", default="32-true,bf16-mixed" if cpu_has_bf16() else "32-true")
    args = parser.parse_args()
    cfg, dm = _job(threads=1)
    model = OmegaConf.to_container(cfg.model, resolve=True)
    it = iter(dm.train_dataloader())
    batches = [next(it) for _ in range(args.steps + 3)]
    warm, timed = batches[:3], batches[3:]
    print(f"# ablation job's training step, 1 thread, {args.steps} steps; CPU class: {cpu_class()}")
    for precision in args.precision.split(","):
        module = TranslationModule(model=model, vocab_size=dm.vocab_size_actual, tokenizer_json=dm.tokenizer_json)
        phases(module, warm, precision)
        ph = phases(module, timed, precision)
        step = sum(ph.values())
        tokens = sum(int(b["tgt_out"].ne(0).sum()) for b in timed) / len(timed)
        trainer = ours_tokens_per_s(dm, batches, 3, precision, model)
        lightning = tokens / trainer - step
        print(f"\n## {precision}: plain loop {tokens / step:.0f} target tok/s, Lightning Trainer {trainer:.0f}")
        print("| phase | ms / step | share |\n|---|---:|---:|")
        for name, dt in [*ph.items(), ("Lightning loop, logging, timers (Trainer minus plain loop)", lightning)]:
            print(f"| {name} | {dt * 1e3:.0f} | {dt / (step + max(lightning, 0)):.1%} |")
        print("\n| kind of op (self CPU time, forward + loss + backward + Adam) | share |\n|---|---:|")
        for kind, share in op_kinds(module, timed[:4], precision).items():
            print(f"| {kind} | {share:.1%} |")


if __name__ == "__main__":
    main()
