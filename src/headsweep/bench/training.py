"""Training speed: target tokens/s of our Lightning training step vs a plain PyTorch loop over
torch.nn.Transformer of the same size, on the same Multi30k batches, and model FLOP utilisation (MFU)
against this machine's matmul peak, measured here with a large torch.matmul."""

from __future__ import annotations

import time

import hydra
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import profile
from torch.utils.data import DataLoader

from headsweep.config import auto_precision, compose
from headsweep.data import TranslationDataModule
from headsweep.model import count_parameters
from headsweep.training.module import TranslationModule

SMALL = dict(d_model=256, n_layers=3, heads=8, d_ff=1024, dropout=0.1)


def matmul_peak(dtype: torch.dtype, n: int = 2048, reps: int = 5) -> float:
    """FLOP/s of a large square matmul: the practical peak MFU is measured against."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t)


class _BatchTimer(pl.Callback):
    """Wall time from the start of batch `warmup` to the end of the last batch: the whole loop."""

    def __init__(self, warmup: int):
        self.warmup, self.tokens, self.t0, self.t1 = warmup, 0, None, None

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch_idx == self.warmup:
            self.t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if batch_idx >= self.warmup:
            self.tokens += int(batch["tgt_out"].ne(0).sum())
            self.t1 = time.perf_counter()


def ours_tokens_per_s(
    dm: TranslationDataModule, batches: list[dict], warmup: int, precision: str, model: dict | None = None
) -> float:
    module = TranslationModule(
        model=dict(model or SMALL), vocab_size=dm.vocab_size_actual, tokenizer_json=dm.tokenizer_json
    )
    timer = _BatchTimer(warmup)
    trainer = pl.Trainer(
        accelerator="cpu",
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
    # batch_size=None: the loader hands over the prepared batches as they are (no re-collation)
    trainer.fit(module, train_dataloaders=DataLoader(batches, batch_size=None))
    return timer.tokens / (timer.t1 - timer.t0)


class PlainTransformer(nn.Module):
    """The baseline: torch.nn.Transformer with a tied embedding, the way a plain script writes it."""

    def __init__(self, vocab: int, d_model: int, n_layers: int, heads: int, d_ff: int, dropout: float):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model, padding_idx=0)
        self.register_buffer("pe", torch.randn(512, d_model) * 0.02)
        self.net = nn.Transformer(d_model, heads, n_layers, n_layers, d_ff, dropout, batch_first=True)
        self.scale = d_model**0.5

    def forward(self, src, tgt_in):
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), dtype=torch.bool)
        x = self.embed(src) * self.scale + self.pe[: src.size(1)]
        y = self.embed(tgt_in) * self.scale + self.pe[: tgt_in.size(1)]
        h = self.net(
            x,
            y,
            tgt_mask=causal,
            src_key_padding_mask=src.eq(0),
            tgt_key_padding_mask=tgt_in.eq(0),
            memory_key_padding_mask=src.eq(0),
        )
        return h @ self.embed.weight.t()


def plain_tokens_per_s(vocab: int, batches: list[dict], warmup: int, bf16: bool) -> float:
    model = PlainTransformer(vocab, **SMALL)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    tokens, t0 = 0, None
    for i, b in enumerate(batches):
        if i == warmup:
            t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(b["src"], b["tgt_in"])
            loss = F.cross_entropy(
                logits.reshape(-1, vocab).float(), b["tgt_out"].reshape(-1), ignore_index=0, label_smoothing=0.1
            )
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= warmup:
            tokens += int(b["tgt_out"].ne(0).sum())
    return tokens / (time.perf_counter() - t0)


def bench_training(steps: int, warmup: int, profile: bool, bf16: bool = True) -> None:
    dm = hydra.utils.instantiate(compose(["paths.output_dir=/tmp/headsweep-bench"]).data)  # make train's batches
    dm.setup("fit")
    it = iter(dm.train_dataloader())
    batches = [next(it) for _ in range(steps + warmup)]
    tokens = sum(int(b["tgt_out"].ne(0).sum()) for b in batches) / len(batches)
    print(
        f"\n## Training step: {len(batches)} Multi30k batches (~{tokens:.0f} target tokens each), "
        f"first {warmup} not timed; default small model (d_model 256, 3+3 layers, h 8, vocab {dm.vocab_size_actual})"
    )
    peak_bf16, peak_fp32 = matmul_peak(torch.bfloat16) if bf16 else None, matmul_peak(torch.float32)
    print(
        f"matmul peak (2048^3, measured now): fp32 {peak_fp32 / 1e12:.2f} TFLOP/s"
        + (f", bf16 {peak_bf16 / 1e12:.2f} TFLOP/s" if bf16 else "")
    )
    module = TranslationModule(model=dict(SMALL), vocab_size=dm.vocab_size_actual, tokenizer_json=dm.tokenizer_json)
    counts = count_parameters(module.net)
    # Training FLOPs per target token: 6 x (non-embedding parameters + the output projection).
    flops_per_token = 6 * (counts["non_embedding"] + dm.vocab_size_actual * SMALL["d_model"])
    print(f"make train uses {auto_precision()} on this machine (bf16-mixed only where the CPU has bf16 matmuls)")
    print(f"{'precision':<10}{'ours tok/s':>12}{'plain tok/s':>13}{'ratio':>8}{'MFU ours':>10}{'MFU plain':>11}")
    precisions = (("bf16-mixed", peak_bf16), ("32-true", peak_fp32)) if bf16 else (("32-true", peak_fp32),)
    for precision, peak in precisions:
        ours = ours_tokens_per_s(dm, batches, warmup, precision)
        plain = plain_tokens_per_s(dm.vocab_size_actual, batches, warmup, precision == "bf16-mixed")
        print(
            f"{precision:<10}{ours:>12.0f}{plain:>13.0f}{ours / plain:>8.2f}"
            f"{ours * flops_per_token / peak:>10.1%}{plain * flops_per_token / peak:>11.1%}",
            flush=True,
        )
    if profile:
        profile_step(module, batches[warmup : warmup + 3])


def profile_step(module: TranslationModule, batches: list[dict]) -> None:
    """Where a training step's time goes (torch.profiler, self CPU time), in make train's precision."""
    opt = torch.optim.Adam(module.parameters(), lr=1e-4)
    module.train()
    with profile() as prof:
        for b in batches:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=auto_precision() == "bf16-mixed"):
                loss, _ = module.loss(b)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
