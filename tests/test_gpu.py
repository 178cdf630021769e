"""On a CUDA card (skipped without one): the GPU path computes what the CPU path computes. A training step in
bf16-mixed on the card against the fp32 step on the CPU; torch's SDPA kernels against the plain
matmul-softmax-matmul path with padding, causal masks and shared K/V heads; the cached decoders against the
naive ones; a run killed on the card resumes onto its curve; a sweep packs two jobs on one card and records
both. `make gpu-check` runs these first on a fresh GPU machine."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml

from conftest import TINY, needs_data, tiny_overrides
from headsweep.data.tokenizer import train_tokenizer
from headsweep.model import AttentionConfig, MultiHeadAttention, Transformer, TransformerConfig, decoding
from headsweep.training.module import TranslationModule

if not torch.cuda.is_available():  # one line in the summary for the whole file
    pytest.skip("no CUDA GPU here: the gpu tests run on a card (make gpu-check)", allow_module_level=True)
pytestmark = pytest.mark.gpu
PAD, BOS, EOS = 0, 1, 2


@pytest.fixture(autouse=True)
def exact_fp32():
    """fp32 on the card as on the CPU: TF32 matmuls would round to 10 mantissa bits."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def batch(vocab: int, device, lengths=(9, 5, 7, 3), seed: int = 0) -> dict:
    """Padded source and target sentences of different lengths."""
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    src, tgt = torch.zeros(len(lengths), T, dtype=torch.long), torch.zeros(len(lengths), T + 1, dtype=torch.long)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.randint(3, vocab, (n,), generator=g)
        tgt[i, 0], tgt[i, 1:n] = BOS, torch.randint(3, vocab, (n - 1,), generator=g)
        tgt[i, n] = EOS
    return {"src": src.to(device), "tgt_in": tgt[:, :-1].to(device), "tgt_out": tgt[:, 1:].to(device)}


def test_training_step_on_the_card_equals_the_cpu_step():
    torch.manual_seed(0)
    model = dict(d_model=64, n_layers=2, heads=4, d_ff=128, dropout=0.0, max_len=64)
    tok = train_tokenizer("bpe", 50, ["ein hund läuft", "a dog runs"]).to_str()
    cpu = TranslationModule(model=model, vocab_size=50, tokenizer_json=tok)
    gpu = TranslationModule(model=model, vocab_size=50, tokenizer_json=tok).cuda()
    gpu.load_state_dict(cpu.state_dict())
    loss_cpu, n_cpu = cpu.loss(batch(50, "cpu"))
    loss_cpu.backward()
    with torch.autocast("cuda", dtype=torch.bfloat16):  # what precision=bf16-mixed does
        loss_gpu, n_gpu = gpu.loss(batch(50, "cuda"))
    loss_gpu.backward()
    assert n_cpu == n_gpu
    assert float(loss_gpu) == pytest.approx(float(loss_cpu), rel=1e-2)
    largest = max(p.grad.norm() for p in cpu.parameters() if p.grad is not None)
    for (name, p), q in zip(cpu.named_parameters(), gpu.parameters()):
        # W^K's bias has no gradient but rounding noise (softmax ignores a score shift shared by all keys)
        if p.grad is None or p.grad.norm() < 1e-4 * largest:
            continue
        cos = torch.nn.functional.cosine_similarity(p.grad.flatten(), q.grad.float().cpu().flatten(), dim=0)
        assert cos > 0.99, (name, float(cos))


@pytest.mark.parametrize("kv_heads", [None, 2, 1])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bf16", [False, True])
def test_sdpa_equals_the_math_path_on_the_card(kv_heads, causal, bf16):
    torch.manual_seed(1)
    sdpa = MultiHeadAttention(AttentionConfig(64, 8, d_k=16, d_v=8, kernel="sdpa", kv_heads=kv_heads)).cuda()
    math = MultiHeadAttention(AttentionConfig(64, 8, d_k=16, d_v=8, kernel="math", kv_heads=kv_heads)).cuda()
    math.load_state_dict(sdpa.state_dict())
    x = torch.randn(3, 11, 64, device="cuda", requires_grad=True)
    pad = torch.zeros(3, 11, dtype=torch.bool, device="cuda")
    pad[1, 7:], pad[2, 4:] = True, True  # padding keys in two of the sentences
    outs, grads = [], []
    for layer in (sdpa, math):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            out, _ = layer(x, key_padding_mask=pad, causal=causal)
        (g,) = torch.autograd.grad(out.float().square().sum(), x)
        outs.append(out.float())
        grads.append(g)
    real = ~pad  # outputs at padded query positions are not used
    for a, b in ((outs[0][real], outs[1][real]), (grads[0][real], grads[1][real])):
        if bf16:  # two roundings of 8 mantissa bits apart: compare as a whole, relative to the size
            assert float((a - b).norm() / b.norm()) < 2e-2
        else:
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


# W^O and W_2 as drawn (gain 1): the seeds below were chosen for the models this start gives (varied lengths)
UNIT_START = dict(init_wo_gain=1.0, init_ff2_gain=1.0)


def random_model(seed: int, vocab: int, **kw) -> Transformer:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=vocab, d_model=32, n_layers=2, heads=4, d_ff=64, max_len=64, **UNIT_START)
    model = Transformer(TransformerConfig(**{**cfg, **kw})).eval().cuda()
    with torch.no_grad():  # peaked, varied distributions, so EOS sometimes wins
        model.embed.weight.mul_(4)
    return model


@pytest.mark.parametrize("kw", [{}, {"kv_heads": 2}, {"norm_first": True, "positions": "learned"}])
def test_cached_decoders_equal_naive_ones_on_the_card(kw):
    model = random_model(0, 12, tie_embeddings=False, **kw)
    src = batch(12, "cuda", lengths=(7, 4, 6, 9))["src"]
    with torch.no_grad():
        assert torch.equal(decoding.greedy(model, src, BOS, EOS, 20), decoding.greedy_naive(model, src, BOS, EOS, 20))
        cached = decoding.beam_search(model, src, BOS, EOS, 15, 3, 0.6)
        naive = decoding.beam_search_naive(model, src, BOS, EOS, 15, 3, 0.6)
    assert torch.equal(cached, naive)


def _curve(run) -> dict[int, float]:
    rows = csv.DictReader(open(run / "csv" / "metrics.csv"))
    return {int(r["step"]): float(r["train/loss"]) for r in rows if r.get("train/loss")}


def _gpu_overrides(out, *extra):
    return tiny_overrides(
        None,
        f"data.cache_dir={out.parent / 'cache'}",
        "data.limit_eval=20",
        "data.max_tokens=512",
        "trainer=gpu",
        "trainer.max_steps=40",
        "module.test_beam_size=1",
        "trainer.log_every_n_steps=1",
        "callbacks.checkpoint.every_n_train_steps=5",
        "callbacks.checkpoint.every_n_epochs=null",
        "logger.wandb.mode=disabled",
        "average_last=0",
        *extra,
    )


@needs_data
def test_run_killed_on_the_card_resumes_onto_its_curve(tmp_path):
    from headsweep.config import compose
    from headsweep.training.train import train

    whole, killed = tmp_path / "whole", tmp_path / "killed"
    train(compose([*_gpu_overrides(whole), f"paths.output_dir={whole}"]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "headsweep.train", *_gpu_overrides(killed), f"hydra.run.dir={killed}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    last = killed / "checkpoints" / "last.ckpt"
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline:  # kill after the checkpoint of step 5, before the end
        try:
            if last.is_file() and max(_curve(killed), default=0) >= 6:
                break
        except (ValueError, OSError):
            pass
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "results.json").exists(), "the run finished before it could be killed"
    step = torch.load(last, weights_only=False, map_location="cpu")["global_step"]
    metrics = train(compose([*_gpu_overrides(killed), f"paths.output_dir={killed}"]))
    results = json.loads((killed / "results.json").read_text())
    assert results["resumed_from_step"] == step and metrics["train/steps"] == 40
    assert results["config"]["trainer"]["accelerator"] == "gpu" and results["machine"]["gpu"]
    a, b = _curve(whole), _curve(killed)
    assert sorted(a) == sorted(b) == list(range(40))
    # the same curve across the interruption; the card's bf16 kernels are not bit-reproducible run to run
    for s in a:
        assert b[s] == pytest.approx(a[s], rel=2e-2), s


@needs_data
def test_a_packed_sweep_of_two_jobs_on_one_card_records_both(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "pair.yaml").write_text(
        yaml.safe_dump({"method": "grid", "parameters": {"model.heads": {"values": [2, 4]}}})
    )
    results = tmp_path / "results"
    env = {**os.environ, "WANDB_MODE": "disabled"}
    cmd = [
        sys.executable,
        "-m",
        "headsweep.sweeps.sweep",
        "--sweep",
        "pair",
        "--specs",
        str(specs),
        "--seeds",
        "1",
        "--jobs",
        "2",
        "--root",
        str(tmp_path / "multirun"),
        "--results",
        str(results),
        *TINY,
        f"data.cache_dir={tmp_path / 'cache'}",
        "trainer.max_steps=20",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "trainer=gpu" in done.stdout and "hydra.launcher.n_jobs=2" in done.stdout
    records = sorted(results.glob("pair/*/results.json"))
    assert len(records) == 2
    for r in records:
        saved = json.loads(r.read_text())
        assert saved["status"] == "complete" and saved["config"]["trainer"]["accelerator"] == "gpu"
        assert saved["config"]["trainer"]["precision"] == "bf16-mixed"
        assert saved["machine"]["gpu_memory_peak_gib"] > 0
