"""`python -m headsweep.analyze --ckpt PATH`: do heads specialise? (Michel et al. 2019, Voita et al. 2019)

For one trained model, over one split (val by default):

- importance  I_h = E_x |dL(x)/dxi_h| of every head (headsweep.importance), each layer normalised by
              its l2 norm; heat map per attention kind.
- ablation    BLEU and loss with one head removed at a time, and with all but a layer's most important
              head removed (Michel's Tables 1 and 2).
- pruning     heads removed in order of increasing importance, `step` of the pool at a time, within each
              attention kind and over all heads together; random orders as the baseline; the largest
              fraction removed before BLEU first drops more than `tolerance` below the full model.
- roles       confidence, positional and rare-word shares and entropy per head (headsweep.roles), a
              dominant role at the given thresholds, and importance against confidence.
- maps        attention heat maps (layers x heads per kind) of chosen sentences.

Importance and roles use every sentence of the split (one forward and backward pass). Every ablation
and pruning step greedy-decodes the first --max-sentences sentences of the split again, which is where
the time goes: see `--max-sentences` in --help.

Writes <run>/analysis/{analysis.md, analysis.json, *.png}, logs the same to a W&B run (job_type
"analysis", offline unless WANDB_MODE says otherwise) and prints a summary.
`report_section` turns the analyses of a head-dropout sweep into a report section.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from headsweep.evaluate import ensure_split  # the run's split, or another local file pair
from headsweep.importance import (
    Head, all_heads, fractions, gated, head_importance, normalise_per_layer, pruned_at, pruning_order,
    sentence_losses,
)
from headsweep.model import ATTENTION_KINDS
from headsweep.roles import METRICS, RoleAccumulator, attention_stats, role_label

log = logging.getLogger("headsweep.analyze")

KIND_NAMES = {"enc_self": "encoder self-attention", "dec_self": "decoder self-attention",
              "cross": "encoder-decoder attention"}
POOLS = ("all", *ATTENTION_KINDS)  # pruning within each kind, and over all heads together
NORMALISATION = "each layer's importance scores divided by their l2 norm (Michel et al. 2019)"
DEFAULTS = dict(split="val", max_sentences=300, random_orders=3, step=0.1, sentences=("0",),
                pos_threshold=0.9, rare_threshold=0.5, tolerance=1.0, seed=0)


class AnalysisError(ValueError):
    """A bad argument for the analysis; the message says what to pass instead."""


# ----------------------------------------------------------------------------- data


def make_batches(datamodule, src_texts: list[str], ref_texts: list[str], max_tokens: int) -> list[dict]:
    """Padded batches of (source, reference) pairs in length order, `index` = row in the given lists."""
    from headsweep.data import TokenBatchSampler, collate

    src_ids, ref_ids = datamodule.encode(src_texts), datamodule.encode(ref_texts)
    items = [{"src": s, "tgt": t, "index": i} for i, (s, t) in enumerate(zip(src_ids, ref_ids))]
    lengths = [max(len(s), len(t) + 1) for s, t in zip(src_ids, ref_ids)]
    return [collate([items[i] for i in batch]) for batch in TokenBatchSampler(lengths, max_tokens)]


def source_frequencies(datamodule) -> torch.Tensor:
    """How often each subword id occurs in the source side of the training split (rare-word role)."""
    ids = datamodule.encode(datamodule.texts(datamodule.train_split)[0])
    flat = torch.tensor([i for sent in ids for i in sent], dtype=torch.long)
    return torch.bincount(flat, minlength=datamodule.vocab_size_actual)


# ----------------------------------------------------------------------------- ablations


class Evaluator:
    """BLEU, chrF and loss of the model with a set of heads removed, on fixed sentences.

    Memoised by the set of removed heads: pruning curves share points (0% and 100% of a pool, the
    random orders' endpoints), so each distinct model is decoded once. `decodes` counts the real ones.
    """

    def __init__(self, module, batches: list[dict], refs: list[str]):
        self.module, self.batches, self.refs = module, batches, refs
        self.results: dict[frozenset, dict] = {}
        self.hypotheses: dict[frozenset, list[str]] = {}
        self.decodes, self.seconds = 0, 0.0

    def __call__(self, pruned) -> dict:
        key = frozenset(pruned)
        if key not in self.results:
            start = time.perf_counter()
            net, pad = self.module.net, self.module.hparams.pad_id
            hyps: list[str | None] = [None] * len(self.refs)
            nll, tokens = 0.0, 0
            with gated(net, key), torch.no_grad():
                for batch in self.batches:
                    for i, hyp in zip(batch["index"].tolist(), self.module.decode_batch(batch["src"])):
                        hyps[i] = hyp
                    nll += float(sentence_losses(net, batch, pad).sum())
                    tokens += int(batch["tgt_out"].ne(pad).sum())
            from headsweep.module import corpus_scores

            scores = corpus_scores(hyps, self.refs)
            self.results[key] = {"bleu": scores["bleu"], "chrf": scores["chrf"], "loss": nll / tokens}
            self.hypotheses[key] = hyps
            self.decodes += 1
            self.seconds += time.perf_counter() - start
        return self.results[key]


def prunable_fraction(grid: list[float], bleus: list[float], full_bleu: float, tolerance: float) -> float:
    """The largest fraction removed before BLEU first falls more than `tolerance` below the full model."""
    best = 0.0
    for fraction, bleu in zip(grid, bleus):
        if bleu < full_bleu - tolerance:
            break
        best = fraction
    return best


def pool_kinds(pool: str) -> tuple[str, ...]:
    return ATTENTION_KINDS if pool == "all" else (pool,)


def plan_pruning(heads: list[Head], norm: dict, grid: list[float], random_orders: int, seed: int) -> dict:
    """Removal orders per pool: by increasing importance, and `random_orders` random permutations."""
    rng = random.Random(seed)
    plan = {}
    for pool in POOLS:
        base = [h for h in heads if h[0] in pool_kinds(pool)]
        randoms = []
        for _ in range(random_orders):
            order = list(base)
            rng.shuffle(order)
            randoms.append(order)
        plan[pool] = {"importance": pruning_order(norm, pool_kinds(pool)), "random": randoms}
    return plan


# ----------------------------------------------------------------------------- roles and maps


def collect_roles(net, batches: list[dict], pad_id: int, freq: torch.Tensor) -> RoleAccumulator:
    """Teacher-forced passes over the batches with every module recording its attention weights."""
    modules = [m for kind in ATTENTION_KINDS for m in net.attention_layers(kind)]
    acc = RoleAccumulator()
    for m in modules:
        m.record_weights = True
    try:
        for batch in batches:
            src, tgt = batch["src"], batch["tgt_in"]
            with torch.no_grad():
                memory, src_pad = net.encode(src)
                net.decode_hidden(tgt, memory, src_pad)
            src_ok, tgt_ok = src.ne(pad_id), tgt.ne(pad_id)
            for layer, m in enumerate(net.attention_layers("enc_self")):
                acc.add("enc_self", layer, attention_stats(m.last_weights, src_ok, src_ok, self_attention=True,
                                                           key_ids=src, key_freq=freq))
            for layer, m in enumerate(net.attention_layers("dec_self")):
                acc.add("dec_self", layer, attention_stats(m.last_weights, tgt_ok, tgt_ok, self_attention=True,
                                                           causal=True))
            for layer, m in enumerate(net.attention_layers("cross")):
                acc.add("cross", layer, attention_stats(m.last_weights, tgt_ok, src_ok, self_attention=False,
                                                        key_ids=src, key_freq=freq))
    finally:
        for m in modules:
            m.record_weights, m.last_weights = False, None
    return acc


def sentence_weights(module, src_ids: list[int], tgt_ids: list[int]) -> dict[str, list[torch.Tensor]]:
    """Attention weights of one teacher-forced sentence pair: {kind: per layer (h, Tq, Tk)}."""
    net, hp = module.net, module.hparams
    src = torch.tensor([src_ids])
    tgt_in = torch.tensor([[hp.bos_id, *tgt_ids]])
    modules = {kind: net.attention_layers(kind) for kind in ATTENTION_KINDS}
    for ms in modules.values():
        for m in ms:
            m.record_weights = True
    try:
        with torch.no_grad():
            memory, src_pad = net.encode(src)
            net.decode_hidden(tgt_in, memory, src_pad)
        return {kind: [m.last_weights[0].clone() for m in ms] for kind, ms in modules.items()}
    finally:
        for ms in modules.values():
            for m in ms:
                m.record_weights, m.last_weights = False, None


def resolve_sentences(specs, module, datamodule, split: str) -> list[dict]:
    """Each spec is a row index of the split (its reference is the target side) or a source text
    (the model's greedy translation is the target side)."""
    from headsweep import decoding

    src_texts, refs = datamodule.texts(split)
    out = []
    for n, spec in enumerate(specs):
        spec = str(spec).strip()
        if spec.isdigit():
            i = int(spec)
            if i >= len(src_texts):
                raise AnalysisError(f"--sentences {i}: split '{split}' has {len(src_texts)} sentences (0..{len(src_texts) - 1})")
            src_ids, tgt_ids = datamodule.encode([src_texts[i], refs[i]])
            out.append({"tag": f"{split}{i}", "source": src_texts[i], "target": refs[i], "target_side": "reference",
                        "src_ids": src_ids, "tgt_ids": tgt_ids})
        elif spec:
            (src_ids,) = datamodule.encode([spec])
            if not src_ids:
                raise AnalysisError(f"--sentences {spec!r}: the text has no tokens")
            hp = module.hparams
            src = torch.tensor([src_ids])
            max_len = decoding.max_output_length(src, hp.pad_id, hp.max_len_extra, module.net.cfg.max_len - 1)
            row = decoding.greedy(module.net, src, hp.bos_id, hp.eos_id, max_len)[0].tolist()
            tgt_ids = row[: row.index(hp.eos_id)] if hp.eos_id in row else row
            out.append({"tag": f"text{n}", "source": spec, "target": module.detokenize(torch.tensor([row]))[0],
                        "target_side": "model translation", "src_ids": src_ids, "tgt_ids": tgt_ids})
    return out


# ----------------------------------------------------------------------------- plots


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def plot_layer_head_maps(values: dict[str, list[list[float]]], title: str, path: Path, cmap: str,
                         fmt: str = "{:.2f}", center: bool = False) -> None:
    """One panel per attention kind: layers (rows) x heads (columns), values written in the cells."""
    plt = _plt()
    n_layers, n_heads = len(values["enc_self"]), len(values["enc_self"][0])
    fig, axes = plt.subplots(1, 3, figsize=(3 * max(3.0, 0.6 * n_heads + 1.2), max(2.2, 0.55 * n_layers + 1.4)),
                             squeeze=False)
    for ax, kind in zip(axes[0], ATTENTION_KINDS):
        data = torch.tensor(values[kind], dtype=torch.float64)
        lim = float(data.abs().max()) or 1.0
        im = ax.imshow(data, cmap=cmap, vmin=-lim if center else None, vmax=lim if center else None, aspect="auto")
        ax.set_title(KIND_NAMES[kind], fontsize=9)
        ax.set_xticks(range(n_heads), [str(h) for h in range(n_heads)], fontsize=7)
        ax.set_yticks(range(n_layers), [str(l) for l in range(n_layers)], fontsize=7)
        ax.set_xlabel("head", fontsize=8)
        ax.set_ylabel("layer", fontsize=8)
        if n_heads <= 16:
            for (l, h), v in zip(((l, h) for l in range(n_layers) for h in range(n_heads)), data.flatten().tolist()):
                ax.text(h, l, fmt.format(v), ha="center", va="center", fontsize=6, color="black",
                        bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none", alpha=0.5))
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_pruning(pruning: dict, grid: list[float], full_bleu: float, tolerance: float, path: Path) -> None:
    """BLEU and loss against the fraction of the pool removed; importance order solid, random dashed."""
    plt = _plt()
    fig, (ax_b, ax_l) = plt.subplots(1, 2, figsize=(11, 4.2))
    x = [100 * f for f in grid]
    for pool, color in zip(POOLS, ("black", "tab:blue", "tab:orange", "tab:green")):
        p = pruning[pool]
        name = "all heads" if pool == "all" else KIND_NAMES[pool]
        ax_b.plot(x, p["importance"]["bleu"], "o-", color=color, ms=3, label=f"{name} (importance)")
        ax_l.plot(x, p["importance"]["loss"], "o-", color=color, ms=3, label=f"{name} (importance)")
        if p["random"]["runs"]:
            mean, sd = p["random"]["bleu_mean"], p["random"]["bleu_sd"]
            ax_b.plot(x, mean, "--", color=color, lw=1, label=f"{name} (random, n={len(p['random']['runs'])})")
            ax_b.fill_between(x, [m - s for m, s in zip(mean, sd)], [m + s for m, s in zip(mean, sd)],
                              color=color, alpha=0.12, lw=0)
            ax_l.plot(x, p["random"]["loss_mean"], "--", color=color, lw=1)
    ax_b.axhline(full_bleu - tolerance, color="grey", lw=0.8, ls=":", label=f"full BLEU - {tolerance:g}")
    ax_b.set_xlabel("heads removed (% of the pool)")
    ax_b.set_ylabel("BLEU")
    ax_l.set_xlabel("heads removed (% of the pool)")
    ax_l.set_ylabel("loss (NLL per target token)")
    ax_b.legend(fontsize=6.5)
    ax_b.set_title("pruning by importance vs random order (mean ± sd)", fontsize=9)
    ax_l.set_title("teacher-forced loss on the same sentences", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_importance_vs_confidence(heads: list[dict], path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    markers = {"positional (prev)": "<", "positional (next)": ">", "rare words": "*", "-": "o"}
    for kind, color in zip(ATTENTION_KINDS, ("tab:blue", "tab:orange", "tab:green")):
        for label, marker in markers.items():
            pts = [(h["confidence"], h["importance"]) for h in heads if h["kind"] == kind and h["role"] == label]
            if pts:
                ax.scatter(*zip(*pts), color=color, marker=marker, s=40 if marker == "*" else 22,
                           label=f"{KIND_NAMES[kind]}" + ("" if label == "-" else f", {label}"))
    ax.set_xlabel("confidence (mean max attention weight)")
    ax.set_ylabel("importance (normalised per layer)")
    ax.legend(fontsize=6.5)
    ax.set_title("importance vs confidence, one point per head", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_attention(weights: list[torch.Tensor], q_tokens: list[str], k_tokens: list[str], title: str,
                   path: Path) -> None:
    """Layers (rows) x heads (columns) of (queries x keys) heat maps, tokens on the outer axes."""
    plt = _plt()
    n_layers, n_heads = len(weights), weights[0].size(0)
    cell = max(1.6, 0.13 * max(len(q_tokens), len(k_tokens)) + 0.7)
    fig, axes = plt.subplots(n_layers, n_heads, figsize=(n_heads * cell + 1, n_layers * cell + 1.2),
                             squeeze=False)
    for l in range(n_layers):
        for h in range(n_heads):
            ax = axes[l][h]
            ax.imshow(weights[l][h].float(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            ax.set_title(f"layer {l} head {h}", fontsize=7)
            ax.set_xticks(range(len(k_tokens)), k_tokens if l == n_layers - 1 else [], rotation=90, fontsize=5)
            ax.set_yticks(range(len(q_tokens)), q_tokens if h == 0 else [], fontsize=5)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- the analysis


def analyze(
    ckpt: str | Path,
    *,
    split: str = DEFAULTS["split"],
    max_sentences: int = DEFAULTS["max_sentences"],
    random_orders: int = DEFAULTS["random_orders"],
    step: float = DEFAULTS["step"],
    sentences=DEFAULTS["sentences"],
    pos_threshold: float = DEFAULTS["pos_threshold"],
    rare_threshold: float = DEFAULTS["rare_threshold"],
    tolerance: float = DEFAULTS["tolerance"],
    seed: int = DEFAULTS["seed"],
    out_dir: str | Path | None = None,
    wandb_mode: str | None = None,
) -> tuple[dict, Path]:
    """Run every part of the analysis; returns (analysis dict as in analysis.json, output directory)."""
    from headsweep.runs import (RunError, check_vocabulary, load_datamodule, load_module, read_results,
                                resolve_checkpoint, run_dir_of)

    if not str(ckpt).strip():
        raise RunError("no checkpoint given: pass --ckpt <run dir> or <run dir>/checkpoints/<file>.ckpt "
                       "(make analyze CKPT=...)")
    if not 0 < step <= 1:
        raise AnalysisError(f"--step must be in (0, 1], got {step}")
    if random_orders < 0 or max_sentences < 0:
        raise AnalysisError("--random-orders and --max-sentences must be >= 0")
    for name, t in (("--pos-threshold", pos_threshold), ("--rare-threshold", rare_threshold)):
        if not 0 <= t <= 1:
            raise AnalysisError(f"{name} must be in [0, 1], got {t}")
    t_start = time.perf_counter()
    ckpt = resolve_checkpoint(ckpt)
    run_dir = run_dir_of(ckpt)
    results = read_results(run_dir)
    datamodule = load_datamodule(run_dir)  # one clear error if the run did not finish
    datamodule.setup()
    module = load_module(ckpt)
    check_vocabulary(module, datamodule)
    ensure_split(datamodule, split)
    out = Path(out_dir) if out_dir else run_dir / "analysis"
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    net, pad = module.net, datamodule.pad_id
    src_texts, refs = datamodule.texts(split)
    n_dec = len(src_texts) if max_sentences == 0 else min(max_sentences, len(src_texts))
    map_specs = resolve_sentences(sentences, module, datamodule, split)  # bad specs fail before the work

    # Importance and roles: every sentence, in the training batch size (the backward pass needs memory).
    all_batches = make_batches(datamodule, src_texts, refs, datamodule.max_tokens)
    log.info("importance: forward + backward over %d sentences of %s", len(src_texts), split)
    raw = head_importance(net, all_batches, pad)
    norm = normalise_per_layer(raw)
    heads = all_heads(net)

    grid = fractions(step)
    plan = plan_pruning(heads, norm, grid, random_orders, seed)
    best = {(kind, layer): int(norm[kind][layer].argmax()) for kind in ATTENTION_KINDS
            for layer in range(norm[kind].size(0))}
    planned = {frozenset()} | {frozenset([h]) for h in heads}
    planned |= {frozenset((kind, layer, h) for h in range(norm[kind].size(1)) if h != b)
                for (kind, layer), b in best.items()}
    for p in plan.values():
        for order in [p["importance"], *p["random"]]:
            planned |= {frozenset(pruned_at(order, f)) for f in grid}
    log.info("ablations: %d distinct models, each greedy-decoding %d sentences of %s", len(planned), n_dec, split)

    evaluate = Evaluator(module, make_batches(datamodule, src_texts[:n_dec], refs[:n_dec],
                                              datamodule.eval_max_tokens), refs[:n_dec])
    full = evaluate([])
    log.info("full model: BLEU %.2f loss %.3f (%.1f s per decode: about %.0f s for the rest)",
             full["bleu"], full["loss"], evaluate.seconds, evaluate.seconds * (len(planned) - 1))

    single = []
    for kind, layer, h in heads:
        r = evaluate([(kind, layer, h)])
        single.append({"kind": kind, "layer": layer, "head": h, "bleu": r["bleu"], "loss": r["loss"],
                       "delta_bleu": r["bleu"] - full["bleu"], "delta_loss": r["loss"] - full["loss"]})
    best_only = []
    for (kind, layer), b in best.items():
        r = evaluate([(kind, layer, h) for h in range(norm[kind].size(1)) if h != b])
        best_only.append({"kind": kind, "layer": layer, "kept_head": b, "bleu": r["bleu"], "loss": r["loss"],
                          "delta_bleu": r["bleu"] - full["bleu"], "delta_loss": r["loss"] - full["loss"]})

    pruning = {}
    for pool in POOLS:
        order = plan[pool]["importance"]
        curve = [evaluate(pruned_at(order, f)) for f in grid]
        runs = [[evaluate(pruned_at(o, f)) for f in grid] for o in plan[pool]["random"]]
        bleu_runs = [[r["bleu"] for r in run] for run in runs]
        loss_runs = [[r["loss"] for r in run] for run in runs]
        random_part = {"runs": bleu_runs, "loss_runs": loss_runs}
        if runs:
            cols, lcols = list(zip(*bleu_runs)), list(zip(*loss_runs))
            random_part.update(
                bleu_mean=[statistics.fmean(c) for c in cols],
                bleu_sd=[statistics.stdev(c) if len(c) > 1 else 0.0 for c in cols],
                loss_mean=[statistics.fmean(c) for c in lcols],
            )
        bleus = [r["bleu"] for r in curve]
        pruning[pool] = {
            "n_heads": len(order),
            "order": [list(h) for h in order],
            "n_removed": [len(pruned_at(order, f)) for f in grid],
            "importance": {"bleu": bleus, "loss": [r["loss"] for r in curve], "chrf": [r["chrf"] for r in curve]},
            "random": random_part,
            "prunable": {
                "importance": prunable_fraction(grid, bleus, full["bleu"], tolerance),
                "random_mean": prunable_fraction(grid, random_part["bleu_mean"], full["bleu"], tolerance)
                if runs else None,
            },
        }

    log.info("roles: attention statistics over %d sentences", len(src_texts))
    acc = collect_roles(net, all_batches, pad, source_frequencies(datamodule))
    single_by_head = {(s["kind"], s["layer"], s["head"]): s for s in single}
    role_rows = []
    for kind in ATTENTION_KINDS:
        for layer in range(norm[kind].size(0)):
            means = acc.means(kind, layer)
            for h in range(norm[kind].size(1)):
                m = {metric: means[metric][h] for metric in METRICS}
                role_rows.append({
                    "kind": kind, "layer": layer, "head": h,
                    "importance": float(norm[kind][layer, h]), "importance_raw": float(raw[kind][layer, h]),
                    "delta_bleu": single_by_head[(kind, layer, h)]["delta_bleu"], **m,
                    "role": role_label(m["prev"], m["next"], m["rare"], pos_threshold, rare_threshold),
                })

    files = {"markdown": "analysis.md", "json": "analysis.json", "importance": "importance.png",
             "ablation": "ablation.png", "pruning": "pruning.png",
             "importance_vs_confidence": "importance_vs_confidence.png"}
    plot_layer_head_maps({k: v.tolist() for k, v in norm.items()},
                         "head importance E|dL/dxi|, each layer normalised by its l2 norm", out / files["importance"],
                         "viridis")
    plot_layer_head_maps({kind: [[single_by_head[(kind, l, h)]["delta_bleu"] for h in range(norm[kind].size(1))]
                                 for l in range(norm[kind].size(0))] for kind in ATTENTION_KINDS},
                         "BLEU change when one head is removed", out / files["ablation"], "RdBu", "{:+.2f}",
                         center=True)
    plot_pruning(pruning, grid, full["bleu"], tolerance, out / files["pruning"])
    plot_importance_vs_confidence(role_rows, out / files["importance_vs_confidence"])

    maps = []
    tok = datamodule.tokenizer
    for spec in map_specs:
        weights = sentence_weights(module, spec["src_ids"], spec["tgt_ids"])
        src_tok = [tok.id_to_token(i) for i in spec["src_ids"]]
        tgt_tok = [tok.id_to_token(i) for i in [module.hparams.bos_id, *spec["tgt_ids"]]]
        entry = {k: spec[k] for k in ("tag", "source", "target", "target_side")} | {"files": {}}
        for kind in ATTENTION_KINDS:
            q, k = (src_tok, src_tok) if kind == "enc_self" else (tgt_tok, tgt_tok) if kind == "dec_self" \
                else (tgt_tok, src_tok)
            name = f"attention_{spec['tag']}_{kind}.png"
            plot_attention(weights[kind], q, k, f"{KIND_NAMES[kind]}: {spec['source']}\n"
                           f"(target side: {spec['target_side']}; rows = queries, columns = keys)", out / name)
            entry["files"][kind] = name
        maps.append(entry)

    model_cfg = results["config"]["model"]
    analysis = {
        "checkpoint": str(ckpt),
        "run_dir": str(run_dir),
        "run_name": results.get("run_name"),
        "sweep": results.get("sweep"),
        "split": split,
        "model": {k: model_cfg.get(k) for k in ("n_layers", "heads", "d_model", "d_k", "d_v", "head_dropout")},
        "seed": results["config"].get("seed"),
        "settings": {"max_sentences": max_sentences, "sentences_decoded": n_dec,
                     "sentences_importance": len(src_texts), "random_orders": random_orders, "step": step,
                     "pos_threshold": pos_threshold, "rare_threshold": rare_threshold, "tolerance": tolerance,
                     "seed": seed, "loss": "teacher-forced NLL per target token, no label smoothing"},
        "full": full,
        "importance": {"normalisation": NORMALISATION, "definition": "E_x |dL(x)/dxi_h|, L(x) = summed token NLL",
                       "raw": {k: v.tolist() for k, v in raw.items()},
                       "normalised": {k: v.tolist() for k, v in norm.items()}},
        "single_head": single,
        "best_head_only": best_only,
        "pruning": {"fractions": grid, "pools": pruning},
        "roles": {"definitions": "see headsweep.roles", "heads": role_rows,
                  "counts": {label: sum(r["role"] == label for r in role_rows)
                             for label in sorted({r["role"] for r in role_rows})}},
        "attention_maps": maps,
        "kinds": kind_sensitivity(raw, pruning, grid, full["bleu"]),
        "files": files,
        "cost": {"decodes": evaluate.decodes, "decode_seconds": round(evaluate.seconds, 1),
                 "seconds_per_decode": round(evaluate.seconds / max(evaluate.decodes, 1), 2)},
    }
    analysis["cost"]["total_seconds"] = round(time.perf_counter() - t_start, 1)
    (out / files["markdown"]).write_text(markdown(analysis))
    (out / files["json"]).write_text(json.dumps(analysis, indent=1))
    log_to_wandb(analysis, out, run_dir, results, wandb_mode)
    return analysis, out


def kind_sensitivity(raw: dict, pruning: dict, grid: list[float], full_bleu: float) -> list[dict]:
    """Which attention kind matters most: per kind, the mean raw importance of its heads (the per-layer
    normalisation would make every kind look alike) and the BLEU lost when half of its heads are removed
    in importance order; most sensitive first (Michel et al. found encoder-decoder attention the most)."""
    half = min(range(len(grid)), key=lambda i: abs(grid[i] - 0.5))
    rows = [{"kind": kind, "mean_raw_importance": float(raw[kind].mean()), "removed": grid[half],
             "bleu_drop_half": full_bleu - pruning[kind]["importance"]["bleu"][half],
             "bleu_drop_all": full_bleu - pruning[kind]["importance"]["bleu"][-1],
             "prunable": pruning[kind]["prunable"]["importance"]} for kind in ATTENTION_KINDS]
    return sorted(rows, key=lambda r: (-r["bleu_drop_half"], -r["mean_raw_importance"]))


# ----------------------------------------------------------------------------- outputs


def _f(x, fmt="{:.2f}") -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def _table(header: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(str(c) for c in row) + " |" for row in rows], ""]


def markdown(a: dict) -> str:
    s, full, grid = a["settings"], a["full"], a["pruning"]["fractions"]
    pools = a["pruning"]["pools"]
    imp = a["importance"]["normalised"]
    n_layers, n_heads = len(imp["enc_self"]), len(imp["enc_self"][0])
    single = {(r["kind"], r["layer"], r["head"]): r for r in a["single_head"]}
    lines = [
        f"# Do heads specialise? `{a['run_name']}`", "",
        f"Checkpoint `{a['checkpoint']}`, split `{a['split']}`. Model: {n_layers} + {n_layers} layers, "
        f"{n_heads} heads, head_dropout {a['model']['head_dropout']}.", "",
        f"Full model on the first {s['sentences_decoded']} sentences (greedy): **BLEU {full['bleu']:.2f}**, "
        f"chrF {full['chrf']:.2f}, loss {full['loss']:.3f} ({s['loss']}). Every ablation below decodes these "
        f"same sentences; importance and roles use all {s['sentences_importance']} sentences of the split. "
        f"Cost: {a['cost']['decodes']} decodes, {a['cost']['seconds_per_decode']} s each, "
        f"{a['cost']['total_seconds'] / 60:.1f} min in all.", "",
        "## Head importance (Michel et al. 2019)", "",
        f"I_h = E_x |∂L(x)/∂ξ_h| at ξ = 1, L(x) the sentence's summed token NLL. **Normalised: {NORMALISATION}**, "
        "so each row below has unit l2 norm; the pruning order over all heads uses these normalised scores.", "",
        f"![importance]({a['files']['importance']})", "",
    ]
    for kind in ATTENTION_KINDS:
        lines += [f"**{KIND_NAMES[kind]}**", ""]
        lines += _table(["layer"] + [f"h{h}" for h in range(n_heads)],
                        [[l] + [f"{v:.2f}" for v in row] for l, row in enumerate(imp[kind])])
    lines += [
        "## Removing one head (Michel et al., Table 1)", "",
        f"BLEU change (loss change in brackets) when only that head is removed; full model BLEU {full['bleu']:.2f}.", "",
        f"![ablation]({a['files']['ablation']})", "",
    ]
    for kind in ATTENTION_KINDS:
        lines += [f"**{KIND_NAMES[kind]}**", ""]
        lines += _table(["layer"] + [f"h{h}" for h in range(n_heads)],
                        [[l] + [f"{single[(kind, l, h)]['delta_bleu']:+.2f} ({single[(kind, l, h)]['delta_loss']:+.3f})"
                                for h in range(n_heads)] for l in range(n_layers)])
    lines += [
        "## Keeping only the most important head of a layer (Michel et al., Table 2)", "",
        "All heads of one layer removed except the one with the highest importance (Michel tried every head "
        "and kept the best by BLEU; we take the importance ranking, one decode per layer).", "",
    ]
    lines += _table(["attention", "layer", "kept head", "BLEU", "ΔBLEU", "loss", "Δloss"],
                    [[KIND_NAMES[r["kind"]], r["layer"], r["kept_head"], f"{r['bleu']:.2f}", f"{r['delta_bleu']:+.2f}",
                      f"{r['loss']:.3f}", f"{r['delta_loss']:+.3f}"] for r in a["best_head_only"]])
    n_random = s["random_orders"]
    lines += [
        "## Pruning curves", "",
        f"Heads removed in order of increasing (normalised) importance, {s['step']:.0%} of the pool per step, "
        f"within each attention kind and over all heads together; dashed: {n_random} random orders "
        f"(mean ± sd). Prunable: the largest fraction removed before BLEU first falls more than "
        f"{s['tolerance']:g} below the full model's {full['bleu']:.2f}.", "",
        f"![pruning]({a['files']['pruning']})", "",
    ]
    pool_name = {"all": "all heads", **KIND_NAMES}
    lines += _table(["pool", "heads", "prunable (importance)", "prunable (random mean)"],
                    [[pool_name[p], pools[p]["n_heads"], f"{pools[p]['prunable']['importance']:.0%}",
                      _f(pools[p]["prunable"]["random_mean"], "{:.0%}")] for p in POOLS])
    header = ["removed"] + [f"{pool_name[p]}: importance / random" for p in POOLS]
    rows = []
    for i, f in enumerate(grid):
        row = [f"{f:.0%}"]
        for p in POOLS:
            rnd = pools[p]["random"]
            r = f" / {rnd['bleu_mean'][i]:.2f} ± {rnd['bleu_sd'][i]:.2f}" if rnd["runs"] else ""
            row.append(f"{pools[p]['importance']['bleu'][i]:.2f}{r}")
        rows.append(row)
    lines += ["BLEU at each step:", ""] + _table(header, rows)
    lines += ["**Which attention kind matters most** (most sensitive first: BLEU lost with half of the kind's "
              "heads removed in importance order; mean raw importance E|∂L/∂ξ| before normalisation):", ""]
    lines += _table(["attention", "mean raw importance", f"ΔBLEU, {a['kinds'][0]['removed']:.0%} removed",
                     "ΔBLEU, all removed", "prunable"],
                    [[KIND_NAMES[r["kind"]], f"{r['mean_raw_importance']:.3f}", f"{-r['bleu_drop_half']:+.2f}",
                      f"{-r['bleu_drop_all']:+.2f}", f"{r['prunable']:.0%}"] for r in a["kinds"]])
    lines += [
        "## Head roles (Voita et al. 2019)", "",
        "Per head, over every query token of the split (teacher-forced on the references): confidence = mean "
        "of the maximum attention weight; entropy of the attention distribution (nats); prev / next = share of "
        "tokens whose maximum falls on the previous / next token (self-attention, over the tokens that have one); "
        "rare = share whose maximum falls on the sentence's least frequent source token (by training-split "
        "frequency; encoder self-attention and cross-attention). "
        f"Role thresholds: positional if prev or next ≥ {s['pos_threshold']:.0%}, rare words if rare ≥ "
        f"{s['rare_threshold']:.0%} (`--pos-threshold`, `--rare-threshold`); '–' = none.", "",
        "Counts: " + ", ".join(f"{k}: {v}" for k, v in a["roles"]["counts"].items()), "",
        f"![importance vs confidence]({a['files']['importance_vs_confidence']})", "",
    ]
    lines += _table(["attention", "layer", "head", "importance", "ΔBLEU alone", "confidence", "entropy",
                     "prev", "next", "rare", "role"],
                    [[KIND_NAMES[r["kind"]], r["layer"], r["head"], f"{r['importance']:.2f}", f"{r['delta_bleu']:+.2f}",
                      _f(r["confidence"]), _f(r["entropy"]), _f(r["prev"], "{:.0%}"), _f(r["next"], "{:.0%}"),
                      _f(r["rare"], "{:.0%}"), r["role"]] for r in a["roles"]["heads"]])
    lines += ["## Attention maps", ""]
    for m in a["attention_maps"]:
        lines += [f"**{m['tag']}**: {m['source']}  →  {m['target']} (target side: {m['target_side']})", ""]
        lines += [f"![{kind}]({name})" for kind, name in m["files"].items()] + [""]
    return "\n".join(lines)


def log_to_wandb(a: dict, out: Path, run_dir: Path, results: dict, mode: str | None) -> None:
    """A new W&B run in the training run's project, job_type "analysis": images, tables, summary."""
    import wandb

    mode = mode or os.environ.get("WANDB_MODE") or "offline"
    wandb_cfg = results["config"].get("logger", {}).get("wandb", {}) or {}
    run = wandb.init(project=wandb_cfg.get("project") or "headsweep", name=f"{a['run_name']}-analysis",
                     group=a.get("sweep"), job_type="analysis", dir=str(run_dir), mode=mode,
                     config={"analysis": a["settings"], "split": a["split"], "model": a["model"],
                             "checkpoint": a["checkpoint"]})
    try:
        payload = {f"analysis/{Path(name).stem}": wandb.Image(str(out / name))
                   for key, name in a["files"].items() if name.endswith(".png")}
        for m in a["attention_maps"]:
            payload.update({f"analysis/attention/{m['tag']}/{kind}": wandb.Image(str(out / name))
                            for kind, name in m["files"].items()})
        imp = a["importance"]
        payload["analysis/importance_table"] = wandb.Table(
            columns=["kind", "layer", "head", "importance_raw", "importance_normalised"],
            data=[[k, l, h, imp["raw"][k][l][h], imp["normalised"][k][l][h]]
                  for k in ATTENTION_KINDS for l in range(len(imp["raw"][k])) for h in range(len(imp["raw"][k][l]))])
        cols = ["kind", "layer", "head", "bleu", "loss", "delta_bleu", "delta_loss"]
        payload["analysis/single_head"] = wandb.Table(columns=cols, data=[[r[c] for c in cols] for r in a["single_head"]])
        cols = ["kind", "layer", "kept_head", "bleu", "loss", "delta_bleu", "delta_loss"]
        payload["analysis/best_head_only"] = wandb.Table(columns=cols, data=[[r[c] for c in cols] for r in a["best_head_only"]])
        rows = []
        for pool, p in a["pruning"]["pools"].items():
            for i, f in enumerate(a["pruning"]["fractions"]):
                rnd = p["random"]
                rows.append([pool, f, p["n_removed"][i], p["importance"]["bleu"][i], p["importance"]["loss"][i],
                             rnd["bleu_mean"][i] if rnd["runs"] else None, rnd["bleu_sd"][i] if rnd["runs"] else None])
        payload["analysis/pruning"] = wandb.Table(
            columns=["pool", "fraction", "n_removed", "bleu", "loss", "random_bleu_mean", "random_bleu_sd"], data=rows)
        cols = ["kind", "layer", "head", "importance", "delta_bleu", *METRICS, "role"]
        payload["analysis/roles"] = wandb.Table(columns=cols, data=[[r[c] for c in cols] for r in a["roles"]["heads"]])
        run.log(payload)
        run.summary.update({"analysis/bleu_full": a["full"]["bleu"], "analysis/loss_full": a["full"]["loss"],
                            **{f"analysis/prunable/{pool}": p["prunable"]["importance"]
                               for pool, p in a["pruning"]["pools"].items()}})
    finally:
        run.finish()


def summary(a: dict, out: Path) -> str:
    full, pools, s = a["full"], a["pruning"]["pools"], a["settings"]
    single = sorted(a["single_head"], key=lambda r: r["delta_bleu"])
    fmt = lambda r: f"{r['kind']} L{r['layer']}H{r['head']} {r['delta_bleu']:+.2f}"  # noqa: E731
    roles = a["roles"]["heads"]
    lines = [
        "",
        f"analysis of {a['run_name']} on {a['split']} ({s['sentences_decoded']} sentences decoded, "
        f"{s['sentences_importance']} for importance and roles; {a['cost']['decodes']} decodes, "
        f"{a['cost']['total_seconds'] / 60:.1f} min)",
        f"  full model: BLEU {full['bleu']:.2f}, loss {full['loss']:.3f}",
        "  importance (normalised per layer by its l2 norm), max / min head per kind:",
    ]
    for kind in ATTENTION_KINDS:
        rows = [r for r in roles if r["kind"] == kind]
        hi, lo = max(rows, key=lambda r: r["importance"]), min(rows, key=lambda r: r["importance"])
        lines.append(f"    {KIND_NAMES[kind]:<26} L{hi['layer']}H{hi['head']} {hi['importance']:.2f} / "
                     f"L{lo['layer']}H{lo['head']} {lo['importance']:.2f}")
    lines += [
        "  removing one head: worst " + ", ".join(fmt(r) for r in single[:3])
        + "; best " + ", ".join(fmt(r) for r in single[-2:]),
        f"  prunable within {s['tolerance']:g} BLEU (importance order / random mean):",
    ]
    for pool in POOLS:
        p = pools[pool]["prunable"]
        lines.append(f"    {'all heads' if pool == 'all' else KIND_NAMES[pool]:<26} {p['importance']:.0%} / "
                     f"{_f(p['random_mean'], '{:.0%}')} of {pools[pool]['n_heads']}")
    lines.append("  most sensitive kind: " + ", ".join(
        f"{KIND_NAMES[r['kind']]} {-r['bleu_drop_half']:+.2f} BLEU at {r['removed']:.0%} removed" for r in a["kinds"]))
    lines += [
        "  roles: " + ", ".join(f"{k} {v}" for k, v in a["roles"]["counts"].items())
        + f" (positional >= {s['pos_threshold']:.0%}, rare words >= {s['rare_threshold']:.0%})",
        f"  outputs: {out}  (analysis.md, analysis.json, *.png)",
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- sweep report


def report_section(run_dirs: list[Path], out_dir: Path) -> str:
    """A markdown section on the head-dropout sweep from the runs that have analysis/analysis.json.

    Overlays the pruning curves (importance order, all heads) with one line per head_dropout setting,
    mean over seeds, into out_dir/heads_specialise_pruning.png; the markdown links the PNG by its file
    name, so it is meant to be written into out_dir.
    """
    analyses = []
    for d in run_dirs:
        path = Path(d) / "analysis" / "analysis.json"
        if path.is_file():
            analyses.append(json.loads(path.read_text()))
    title = "## Do heads specialise? Head dropout and pruning"
    if not analyses:
        return (f"{title}\n\nNo run has `analysis/analysis.json` yet: run "
                "`make analyze CKPT=<run dir>` for each run of the sweep.\n")
    grid = analyses[0]["pruning"]["fractions"]
    groups: dict[float, list[dict]] = {}
    skipped = 0
    for a in analyses:
        if a["pruning"]["fractions"] != grid:
            skipped += 1  # another --step: the curves cannot be averaged point by point
            continue
        groups.setdefault(float(a["model"].get("head_dropout") or 0.0), []).append(a)

    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    rows = []
    for hd in sorted(groups):
        runs = groups[hd]
        curves = [a["pruning"]["pools"]["all"]["importance"]["bleu"] for a in runs]
        mean = [statistics.fmean(c) for c in zip(*curves)]
        line, = ax.plot([100 * f for f in grid], mean, "o-", ms=3, label=f"head_dropout {hd:g} (n={len(runs)})")
        if len(runs) > 1:
            sd = [statistics.stdev(c) for c in zip(*curves)]
            ax.fill_between([100 * f for f in grid], [m - s for m, s in zip(mean, sd)],
                            [m + s for m, s in zip(mean, sd)], color=line.get_color(), alpha=0.15, lw=0)
        full = [a["full"]["bleu"] for a in runs]
        prunable = [a["pruning"]["pools"]["all"]["prunable"]["importance"] for a in runs]
        pm = lambda xs, f: f.format(statistics.fmean(xs)) + (f" ± {f.format(statistics.stdev(xs))}" if len(xs) > 1 else "")  # noqa: E731
        rows.append([f"{hd:g}", len(runs), pm(full, "{:.2f}"), pm([100 * p for p in prunable], "{:.0f}") + "%",
                     f"{mean[len(grid) // 2]:.2f}"])
    ax.set_xlabel("heads removed, all attention kinds (%)")
    ax.set_ylabel("BLEU")
    ax.set_title("pruning by importance, mean over seeds (± sd)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / "heads_specialise_pruning.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)

    s = analyses[0]["settings"]
    lines = [
        title, "",
        f"Heads removed in order of increasing importance (Michel et al. 2019), over all attention kinds, "
        f"{s['step']:.0%} per step; BLEU from greedy decoding of the first {s['sentences_decoded']} sentences "
        f"of `{analyses[0]['split']}`. Prunable: the largest fraction removed before BLEU first falls more than "
        f"{s['tolerance']:g} below the full model's. Mean ± sd over seeds.", "",
        f"![pruning curves]({png.name})", "",
    ]
    lines += _table(["head_dropout", "runs", "BLEU full", "prunable", f"BLEU at {grid[len(grid) // 2]:.0%} removed"],
                    rows)
    if skipped:
        lines += [f"({skipped} analysed run(s) left out: analysed with another --step.)", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- CLI


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m headsweep.analyze", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--ckpt", required=True, help="a checkpoint file or a run directory (its checkpoints/last.ckpt)")
    p.add_argument("--split", default=DEFAULTS["split"], help="the run's split, or another local file pair")
    p.add_argument("--max-sentences", type=int, default=DEFAULTS["max_sentences"],
                   help="decode the first N sentences for each ablation and pruning step (0 = all). Each of the "
                        "~230 distinct models of the default 72-head model decodes them once, and heavily pruned "
                        "ones decode to the length limit: 300 took ~25-30 min on 2 CPU cores; importance and roles "
                        "always use the whole split")
    p.add_argument("--random-orders", type=int, default=DEFAULTS["random_orders"],
                   help="random pruning orders per pool, the baseline (0 = none)")
    p.add_argument("--step", type=float, default=DEFAULTS["step"], help="fraction of the pool removed per pruning step")
    p.add_argument("--sentences", nargs="+", default=list(DEFAULTS["sentences"]),
                   help="attention maps of these: a row index of the split (target side: its reference) "
                        "or a source text in quotes (target side: the model's translation)")
    p.add_argument("--pos-threshold", type=float, default=DEFAULTS["pos_threshold"],
                   help="positional role if the max falls on the previous / next token for at least this share")
    p.add_argument("--rare-threshold", type=float, default=DEFAULTS["rare_threshold"],
                   help="rare-word role if the max falls on the least frequent token for at least this share")
    p.add_argument("--tolerance", type=float, default=DEFAULTS["tolerance"],
                   help="BLEU points below the full model still counted as prunable")
    p.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="seed of the random pruning orders")
    p.add_argument("--out", default=None, help="output directory (default: <run dir>/analysis)")
    p.add_argument("--wandb-mode", choices=("online", "offline", "disabled"), default=None,
                   help="W&B mode (default: $WANDB_MODE, else offline)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    from headsweep.data import DataError
    from headsweep.runs import RunError

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    try:
        analysis, out = analyze(
            args.ckpt, split=args.split, max_sentences=args.max_sentences, random_orders=args.random_orders,
            step=args.step, sentences=args.sentences, pos_threshold=args.pos_threshold,
            rare_threshold=args.rare_threshold, tolerance=args.tolerance, seed=args.seed, out_dir=args.out,
            wandb_mode=args.wandb_mode,
        )
    except (RunError, DataError, AnalysisError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(summary(analysis, out), flush=True)


if __name__ == "__main__":
    main()
