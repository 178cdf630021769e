"""Does a narrow head hit its rank bound on long inputs? (Bhojanapalli et al. 2020, "Low-Rank Bottleneck in
Multi-head Attention Models")

A head's logits Q K^T over n keys have rank at most d_k, so once n > d_k the head cannot express every
attention pattern. For one trained model, over the examples of a split (teacher-forced, padding excluded),
for every head of every layer and attention kind:

    entropy         -sum_j a_ij log a_ij over the keys, averaged over queries (nats; log n for a uniform head)
    logit rank      the effective rank of the head's logits on one example: log A with each row centred
                    (log a_ij = s_ij - logsumexp_j s_ij, so centring removes the row's constant and leaves
                    the centred logits), whose rank is at most d_k; averaged over examples
                    (encoder self-attention and cross-attention: a causal mask has full rank whatever d_k is)
    map rank        the effective rank of the attention map A itself (the softmax can raise the rank above d_k)
    keys            the mean number of keys n per example: where n <= d_k no bound binds; with the mean of
                    log n, a uniform head's entropy (a cross-attention head there ignores its source)

Effective rank (Roy and Vetterli 2007): exp of the entropy of the normalised singular values, between 1 (one
direction) and the matrix's rank. A narrow head whose logit rank sits at its d_k while a wide head's stays well
below d_k is the bottleneck at work; both well below min(n, d_k) means the task does not ask for more.

    python -m headsweep.analysis.rank --ckpt <run dir> [--split val] [--out FILE]
    python -m headsweep.analysis.rank --sweep long_sequences      # make ranks SWEEP=long_sequences

Writes <run dir>/attention_rank.json (or --out): small, beside results.json. --sweep measures every finished job
of multirun/<sweep>/ that has its checkpoint and no measure yet, and copies each measure into the job's stored
run (results/<sweep>/<job>), where the report reads it: checkpoints stay on the machine that trained them, so
run it there after the jobs finish.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from torch import Tensor

from headsweep.data import DataError, make_batches
from headsweep.model import ATTENTION_KINDS, attention_switches
from headsweep.store.pack import ATTENTION_RANK as FILE
from headsweep.training.runs import RunError, load_run

TINY = 1e-30  # an attention weight that underflowed to 0 (a logit ~70 below its row's largest): log stays finite


def effective_rank(m: Tensor) -> Tensor:
    """exp(entropy of the singular values over their sum) of each matrix of m (..., r, c): 1 to rank(m)."""
    s = torch.linalg.svdvals(m.double())
    p = s / s.sum(-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    return torch.exp(-torch.xlogy(p, p).sum(-1))


def head_measures(weights: Tensor, query_valid: Tensor, key_valid: Tensor, causal: bool = False) -> dict[str, Tensor]:
    """Per example and head (B, h): entropy (mean over real queries), logit rank and map rank, each on the real
    queries x real keys block. weights (B, h, Tq, Tk); query_valid (B, Tq), key_valid (B, Tk): True at real
    tokens. causal (decoder self-attention): no logit rank, since the mask's triangle has full rank whatever
    d_k is, so the bound says nothing about the masked logits."""
    w = weights.double()
    B, h = w.shape[:2]
    names = ("entropy", "map_rank") if causal else ("entropy", "logit_rank", "map_rank")
    out = {k: torch.zeros(B, h, dtype=torch.float64) for k in names}
    for b in range(B):  # examples differ in length: one block each
        q, k = query_valid[b], key_valid[b]
        a = w[b][:, q][:, :, k]  # (h, n_q, n_k)
        out["entropy"][b] = -torch.xlogy(a, a).sum(-1).mean(-1)
        if not causal:
            log_a = a.clamp_min(TINY).log()
            out["logit_rank"][b] = effective_rank(log_a - log_a.mean(-1, keepdim=True))
        out["map_rank"][b] = effective_rank(a)
    return out


def measure_ranks(net, batches: list[dict], pad_id: int) -> dict:
    """Teacher-forced passes over the batches: per kind, per layer and head, the mean of head_measures over
    the examples, and the mean number of keys."""
    sums: dict[tuple[str, int], dict[str, Tensor]] = {}
    keys = {kind: [0.0, 0.0, 0] for kind in ATTENTION_KINDS}  # sum of n, of log n, examples
    with attention_switches(net, record=True), torch.no_grad():
        for batch in batches:
            src, tgt = batch["src"], batch["tgt_in"]
            memory, src_pad = net.encode(src)
            net.decode_hidden(tgt, memory, src_pad)
            src_ok, tgt_ok = src.ne(pad_id), tgt.ne(pad_id)
            sides = {"enc_self": (src_ok, src_ok), "dec_self": (tgt_ok, tgt_ok), "cross": (tgt_ok, src_ok)}
            for kind in ATTENTION_KINDS:
                q, k = sides[kind]
                keys[kind][0] += float(k.sum())
                keys[kind][1] += float(k.sum(-1).double().log().sum())
                keys[kind][2] += k.size(0)
                for layer, m in enumerate(net.attention_layers(kind)):
                    got = head_measures(m.last_weights, q, k, causal=kind == "dec_self")
                    acc = sums.setdefault((kind, layer), {name: 0 for name in got})
                    for name, v in got.items():
                        acc[name] = acc[name] + v.sum(0)
    n = sum(len(b["src"]) for b in batches)
    out = {}
    for kind in ATTENTION_KINDS:
        layers = [sums[(kind, layer)] for layer in range(len(net.attention_layers(kind)))]
        out[kind] = {
            "keys": keys[kind][0] / max(keys[kind][2], 1),
            # a uniform head's entropy, log n, averaged as the heads' entropy is (over examples)
            "uniform_entropy": keys[kind][1] / max(keys[kind][2], 1),
            "layers": [{name: (v / n).tolist() for name, v in acc.items()} for acc in layers],
        }
    return out


def rank_record(ckpt: str | Path, split: str = "val") -> tuple[dict, Path]:
    """The measures of one finished run over `split`, with what the reader needs to judge them (d_k, h,
    the data's join), and the run's directory."""
    run = load_run(ckpt)
    run.datamodule.ensure_split(split)
    dm, net = run.datamodule, run.module.net
    src_texts, refs = dm.texts(split)
    batches = make_batches(dm.encode(src_texts), dm.encode(refs), dm.max_tokens)
    net.eval()
    cfg = run.results["config"]
    record = {
        "split": split,
        "examples": len(src_texts),
        "heads": net.cfg.heads,
        "d_k": net.cfg.sizes[0],
        "join": cfg["data"].get("join", 1),
        "kinds": measure_ranks(net, batches, dm.pad_id),
    }
    return record, run.dir


def finished(job: Path) -> bool:
    """A job that finished (results.json complete) and kept its last checkpoint: a running one has neither."""
    try:
        done = json.loads((job / "results.json").read_text()).get("status") == "complete"
    except (OSError, ValueError):
        return False
    return done and (job / "checkpoints" / "last.ckpt").is_file()


def measure_sweep(sweep: str, multirun: Path, results: Path, split: str = "val") -> list[Path]:
    """Every finished job of multirun/<sweep> with a checkpoint: its measure (made where missing), copied into
    its stored run results/<sweep>/<job> where that exists. Returns the stored files written."""
    root = multirun / sweep
    if not root.is_dir():
        raise RunError(f"no jobs of sweep '{sweep}' here: {root} does not exist (checkpoints stay where they trained)")
    written = []
    for job in sorted(d for d in root.iterdir() if finished(d)):
        if not (job / FILE).is_file():
            record, _ = rank_record(job, split)
            (job / FILE).write_text(json.dumps(record, indent=1))
        stored = results / sweep / job.name
        if not stored.is_dir():  # not exported (a failed job), or exported under another name
            continue
        if not (stored / FILE).is_file() or (stored / FILE).read_bytes() != (job / FILE).read_bytes():
            shutil.copyfile(job / FILE, stored / FILE)
            written.append(stored / FILE)
    return written


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--ckpt", help="a run directory or its checkpoint")
    which.add_argument("--sweep", help="every finished job of multirun/<sweep>, into results/<sweep>/<job>")
    p.add_argument("--split", default="val")
    p.add_argument("--out", default=None, help=f"default: <run dir>/{FILE}")
    p.add_argument("--multirun", default="multirun", help="where the sweep's jobs ran (--sweep)")
    p.add_argument("--results", default="results", help="the store the jobs were exported to (--sweep)")
    a = p.parse_args(argv)
    try:
        if a.sweep:
            for path in measure_sweep(a.sweep, Path(a.multirun), Path(a.results), a.split):
                print(f"{path}: written")
            return
        record, run_dir = rank_record(a.ckpt, a.split)
    except (RunError, DataError) as e:
        sys.exit(f"error: {e}")
    out = Path(a.out) if a.out else run_dir / FILE
    out.write_text(json.dumps(record, indent=1))
    enc = record["kinds"]["enc_self"]
    logit = [x for layer in enc["layers"] for x in layer["logit_rank"]]
    print(
        f"{out}: h {record['heads']}, d_k {record['d_k']}, {enc['keys']:.1f} source keys per example; encoder "
        f"self-attention logit rank {min(logit):.1f} to {max(logit):.1f} (bound d_k = {record['d_k']})"
    )


if __name__ == "__main__":
    main()
