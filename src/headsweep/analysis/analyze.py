"""`python -m headsweep.analysis.analyze --ckpt PATH` (make analyze): do heads specialise? (Michel et al.
2019, Voita et al. 2019)

For one trained model, over one split (val by default):

- importance  I_h = E_x |dL(x)/dxi_h| of every head (headsweep.importance), each layer normalised by
              its l2 norm; heat map per attention kind.
- ablation    the teacher-forced loss over the whole split, with a standard error, with one head removed
              at a time (Michel's Table 1 asks this of BLEU, which on a few hundred decoded sentences
              is noise at one head's size); loss and BLEU with all but a layer's most important head
              removed (his Table 2).
- pruning     heads removed in order of increasing importance, `step` of the pool at a time, within each
              attention kind and over all heads together; random orders as the baseline; the largest
              fraction removed before BLEU first drops more than `tolerance` below the full model.
- roles       confidence, positional and rare-word shares, entropy and attention distance per head
              (headsweep.analysis.roles), a dominant role at the given thresholds, importance against
              confidence, and per layer the share of heads with each role, mean entropy and distance.
- redundancy  Jensen-Shannon divergence between every two heads of a kind on the decoded sentences
              (headsweep.analysis.redundancy), clustered; near-duplicate groups; nearest twin vs the loss increase.
- maps        attention heat maps (layers x heads per kind) of chosen sentences.

Importance, roles and the single-head losses use every sentence of the split (one pass each). Every
pruning step and best-head-only model greedy-decodes the first --max-sentences sentences of the split,
which is where the time goes: see `--max-sentences` and `--step` in --help.

Writes <run>/analysis/{analysis.md, analysis.json, *.png}, logs the same to a W&B run (job_type
"analysis", offline unless WANDB_MODE says otherwise) and prints a summary.
analysis/compare.py compares the analyses of a head-dropout sweep's runs (`make report`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from headsweep.analysis.ablation import (DECODING, POOLS, Evaluator, LossEvaluator, kind_sensitivity, plan_pruning,
                                        prunable_fraction)
from headsweep.analysis.importance import (KIND_NAMES, NORMALISATION, AnalysisError, all_heads, fractions,
                                           head_importance, normalise_per_layer, pruned_at)
from headsweep.analysis.maps import resolve_sentences, sentence_weights
from headsweep.analysis.markdown import markdown, summary
from headsweep.analysis.plots import (plot_attention, plot_importance_vs_confidence, plot_layer_head_maps, plot_pruning,
                                      plot_redundancy)
from headsweep.analysis.redundancy import collect_js, redundancy
from headsweep.analysis.roles import METRICS, collect_roles, layer_roles, role_label, source_frequencies
from headsweep.data import DataError, make_batches
from headsweep.model import ATTENTION_KINDS
from headsweep.training.runs import RunError, load_run

log = logging.getLogger("headsweep.analyze")

FILES = {"markdown": "analysis.md", "json": "analysis.json", "importance": "importance.png", "redundancy": "redundancy.png",
         "ablation": "ablation.png", "pruning": "pruning.png", "importance_vs_confidence": "importance_vs_confidence.png"}
DEFAULTS = dict(split="val", max_sentences=150, random_orders=3, step=0.2, sentences=("0",),
                pos_threshold=0.9, rare_threshold=0.5, tolerance=1.0, seed=0, redundancy_threshold=0.2)


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
    redundancy_threshold: float = DEFAULTS["redundancy_threshold"],
    out_dir: str | Path | None = None,
    wandb_mode: str | None = None,
) -> tuple[dict, Path]:
    """Run every part of the analysis; returns (analysis dict as in analysis.json, output directory)."""
    check_arguments(step, random_orders, max_sentences, pos_threshold, rare_threshold, redundancy_threshold)
    t_start = time.perf_counter()
    run = load_run(ckpt)
    ckpt, run_dir, results, module, datamodule = run.checkpoint, run.dir, run.results, run.module, run.datamodule
    datamodule.ensure_split(split)
    out = Path(out_dir) if out_dir else run_dir / "analysis"
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    net, pad = module.net, datamodule.pad_id
    src_texts, refs = datamodule.texts(split)
    n_dec = len(src_texts) if max_sentences == 0 else min(max_sentences, len(src_texts))
    map_specs = resolve_sentences(sentences, module, datamodule, split)  # bad specs fail before the work

    # Importance and roles: every sentence, in the training batch size (the backward pass needs memory).
    src_ids, ref_ids = datamodule.encode(src_texts), datamodule.encode(refs)
    all_batches = make_batches(src_ids, ref_ids, datamodule.max_tokens)
    log.info("importance: forward + backward over %d sentences of %s", len(src_texts), split)
    raw = head_importance(net, all_batches, pad)
    norm = normalise_per_layer(raw)
    heads = all_heads(net)

    grid = fractions(step)
    plan = plan_pruning(heads, norm, grid, random_orders, seed)
    best = {(kind, layer): int(norm[kind][layer].argmax()) for kind in ATTENTION_KINDS
            for layer in range(norm[kind].size(0))}
    planned = planned_models(best, norm, plan, grid)
    log.info("single heads: %d models, teacher-forced loss over %d sentences; pruning and best head only: %d "
             "distinct models, each greedy-decoding %d sentences of %s", len(heads), len(src_texts), len(planned),
             n_dec, split)
    losses = LossEvaluator(net, all_batches, pad)

    evaluate = Evaluator(module, make_batches(src_ids[:n_dec], ref_ids[:n_dec], datamodule.eval_max_tokens),
                         refs[:n_dec])
    full = evaluate([]) | {"split_loss": losses([])["loss"]}
    log.info("full model: BLEU %.2f, loss %.3f on the decoded sentences, %.3f over the split (%.1f s per decode, "
             "%.1f s per loss pass: about %.0f s for the rest)", full["bleu"], full["loss"], full["split_loss"],
             evaluate.seconds, losses.seconds, evaluate.seconds * (len(planned) - 1) + losses.seconds * len(heads))

    single, best_only = head_ablations(evaluate, losses, heads, best, norm, full)
    pruning = pruning_curves(evaluate, plan, grid, full, tolerance)
    log.info("roles: attention statistics over %d sentences", len(src_texts))
    acc = collect_roles(net, all_batches, pad, source_frequencies(datamodule))
    role_rows = role_table(acc, norm, raw, single, pos_threshold, rare_threshold)
    log.info("redundancy: Jensen-Shannon divergence between heads over %d sentences", n_dec)
    js = collect_js(net, make_batches(src_ids[:n_dec], ref_ids[:n_dec], datamodule.max_tokens), pad)
    similar = redundancy(js, net.cfg.heads, single, redundancy_threshold)
    files = dict(FILES)
    write_plots(out, files, norm, single, pruning, grid, full, tolerance, role_rows)
    plot_redundancy(similar, out / files["redundancy"])
    maps = attention_maps(module, datamodule, map_specs, out)
    settings = {"max_sentences": max_sentences, "sentences_decoded": n_dec, "sentences_importance": len(src_texts),
                "sentences_loss": len(src_texts),
                "random_orders": random_orders, "step": step, "pos_threshold": pos_threshold,
                "rare_threshold": rare_threshold, "tolerance": tolerance, "seed": seed,
                "redundancy_threshold": redundancy_threshold,
                "loss": "teacher-forced NLL per target token, no label smoothing: over the whole split for single heads "
                        "and best head only (split_loss), else over the decoded sentences", "decoding": DECODING}
    analysis = analysis_record(run, split, settings, full, raw, norm, single, best_only, grid, pruning, role_rows,
                               maps, files, evaluate, losses)
    analysis.update(layer_roles=layer_roles(role_rows), redundancy=similar)
    analysis["cost"]["total_seconds"] = round(time.perf_counter() - t_start, 1)
    (out / files["markdown"]).write_text(markdown(analysis))
    (out / files["json"]).write_text(json.dumps(analysis, indent=1))
    log_to_wandb(analysis, out, run_dir, results, wandb_mode)
    return analysis, out


def planned_models(best: dict, norm: dict, plan: dict, grid: list[float]) -> set[frozenset]:
    """Every distinct set of removed heads the analysis will decode (for the time estimate)."""
    planned = {frozenset()}
    planned |= {frozenset((kind, layer, h) for h in range(norm[kind].size(1)) if h != b)
                for (kind, layer), b in best.items()}
    for p in plan.values():
        for order in [p["importance"], *p["random"]]:
            planned |= {frozenset(pruned_at(order, f)) for f in grid}
    return planned


def analysis_record(run, split: str, settings: dict, full: dict, raw: dict, norm: dict, single: list,
                    best_only: list, grid: list[float], pruning: dict, role_rows: list[dict], maps: list[dict],
                    files: dict, evaluate: Evaluator, losses: LossEvaluator) -> dict:
    """analysis.json: everything the analysis found, with how it was measured."""
    results, model_cfg = run.results, run.results["config"]["model"]
    return {
        "checkpoint": str(run.checkpoint),
        "run_dir": str(run.dir),
        "run_name": results.get("run_name"),
        "sweep": results.get("sweep"),
        "split": split,
        "model": {k: model_cfg.get(k) for k in ("n_layers", "heads", "d_model", "d_k", "d_v", "head_dropout")},
        "seed": results["config"].get("seed"),
        "settings": settings,
        "full": full,
        "importance": {"normalisation": NORMALISATION, "definition": "E_x |dL(x)/dxi_h|, L(x) = summed token NLL",
                       "raw": {k: v.tolist() for k, v in raw.items()},
                       "normalised": {k: v.tolist() for k, v in norm.items()}},
        "single_head": single,
        "best_head_only": best_only,
        "pruning": {"fractions": grid, "pools": pruning},
        "roles": {"definitions": "see headsweep.analysis.roles", "heads": role_rows,
                  "counts": {label: sum(r["role"] == label for r in role_rows)
                             for label in sorted({r["role"] for r in role_rows})}},
        "attention_maps": maps,
        "kinds": kind_sensitivity(raw, pruning, grid, full["bleu"]),
        "files": files,
        "cost": {"decodes": evaluate.decodes, "decode_seconds": round(evaluate.seconds, 1),
                 "seconds_per_decode": round(evaluate.seconds / max(evaluate.decodes, 1), 2),
                 "loss_passes": losses.forwards, "loss_seconds": round(losses.seconds, 1)},
    }


def check_arguments(step: float, random_orders: int, max_sentences: int, pos_threshold: float,
                    rare_threshold: float, redundancy_threshold: float = DEFAULTS["redundancy_threshold"]) -> None:
    if not 0 < step <= 1:
        raise AnalysisError(f"--step must be in (0, 1], got {step}")
    if random_orders < 0 or max_sentences < 0:
        raise AnalysisError("--random-orders and --max-sentences must be >= 0")
    for name, t in (("--pos-threshold", pos_threshold), ("--rare-threshold", rare_threshold),
                    ("--redundancy-threshold", redundancy_threshold)):
        if not 0 <= t <= 1:
            raise AnalysisError(f"{name} must be in [0, 1], got {t}")


def head_ablations(evaluate: Evaluator, losses: LossEvaluator, heads, best: dict, norm: dict,
                   full: dict) -> tuple[list, list]:
    """Michel's Tables 1 and 2: each head removed alone (loss over the split: no decoding); each layer
    reduced to its most important head (that loss, and BLEU on the decoded sentences)."""
    single = [{"kind": kind, "layer": layer, "head": h, **losses([(kind, layer, h)])} for kind, layer, h in heads]
    best_only = []
    for (kind, layer), b in best.items():
        removed = [(kind, layer, h) for h in range(norm[kind].size(1)) if h != b]
        r = evaluate(removed)
        best_only.append({"kind": kind, "layer": layer, "kept_head": b, "bleu": r["bleu"],
                          "delta_bleu": r["bleu"] - full["bleu"], **losses(removed)})

    return single, best_only


def pruning_curves(evaluate: Evaluator, plan: dict, grid: list[float], full: dict, tolerance: float) -> dict:
    """Per pool: BLEU/loss/chrF along the importance order and the random orders, and the prunable fractions."""
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

    return pruning


def role_table(acc, norm: dict, raw: dict, single: list, pos_threshold: float, rare_threshold: float) -> list[dict]:
    """One row per head: importance, the loss change when it alone is removed, role metrics, a role label."""
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
                    "delta_loss": single_by_head[(kind, layer, h)]["delta_loss"], **m,
                    "role": role_label(m["prev"], m["next"], m["rare"], pos_threshold, rare_threshold),
                })
    return role_rows


def write_plots(out: Path, files: dict, norm: dict, single: list, pruning: dict, grid: list[float], full: dict,
                tolerance: float, role_rows: list[dict]) -> None:
    single_by_head = {(s["kind"], s["layer"], s["head"]): s for s in single}
    plot_layer_head_maps({k: v.tolist() for k, v in norm.items()},
                         "head importance E|dL/dxi|, each layer normalised by its l2 norm", out / files["importance"],
                         "viridis")
    plot_layer_head_maps({kind: [[single_by_head[(kind, l, h)]["delta_loss"] for h in range(norm[kind].size(1))]
                                 for l in range(norm[kind].size(0))] for kind in ATTENTION_KINDS},
                         "loss change (nats per token, whole split) when one head is removed", out / files["ablation"],
                         "RdBu_r", "{:+.3f}", center=True)
    plot_pruning(pruning, grid, full["bleu"], tolerance, out / files["pruning"])
    plot_importance_vs_confidence(role_rows, out / files["importance_vs_confidence"])



def attention_maps(module, datamodule, map_specs: list[dict], out: Path) -> list[dict]:
    """Heat maps of the chosen sentences' attention, per kind; their entries for analysis.json."""
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

    return maps


def log_to_wandb(a: dict, out: Path, run_dir: Path, results: dict, mode: str | None) -> None:
    """A new W&B run in the training run's project, job_type "analysis": images, tables, summary."""
    import wandb

    mode = mode or os.environ.get("WANDB_MODE") or "offline"
    wandb_cfg = results["config"].get("logger", {}).get("wandb", {}) or {}
    run = wandb.init(project=wandb_cfg.get("project") or "headsweep", name=f"{a['run_name']}-analysis",
                     group=wandb_cfg.get("group") or a.get("sweep"), job_type="analysis", dir=str(run_dir), mode=mode,
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
        cols = ["kind", "layer", "head", "loss", "delta_loss", "delta_loss_se"]
        payload["analysis/single_head"] = wandb.Table(columns=cols, data=[[r[c] for c in cols] for r in a["single_head"]])
        cols = ["kind", "layer", "kept_head", "bleu", "delta_bleu", "loss", "delta_loss", "delta_loss_se"]
        payload["analysis/best_head_only"] = wandb.Table(columns=cols, data=[[r[c] for c in cols] for r in a["best_head_only"]])
        rows = []
        for pool, p in a["pruning"]["pools"].items():
            for i, f in enumerate(a["pruning"]["fractions"]):
                rnd = p["random"]
                rows.append([pool, f, p["n_removed"][i], p["importance"]["bleu"][i], p["importance"]["loss"][i],
                             rnd["bleu_mean"][i] if rnd["runs"] else None, rnd["bleu_sd"][i] if rnd["runs"] else None])
        payload["analysis/pruning"] = wandb.Table(
            columns=["pool", "fraction", "n_removed", "bleu", "loss", "random_bleu_mean", "random_bleu_sd"], data=rows)
        cols = ["kind", "layer", "head", "importance", "delta_loss", *METRICS, "role"]
        payload["analysis/roles"] = wandb.Table(columns=cols, data=[[r[c] for c in cols] for r in a["roles"]["heads"]])
        run.log(payload)
        run.summary.update({"analysis/bleu_full": a["full"]["bleu"], "analysis/loss_full": a["full"]["loss"],
                            **{f"analysis/prunable/{pool}": p["prunable"]["importance"]
                               for pool, p in a["pruning"]["pools"].items()}})
    finally:
        run.finish()


# ----------------------------------------------------------------------------- CLI


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m headsweep.analysis.analyze", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--ckpt", required=True, help="a checkpoint file or a run directory (its checkpoints/last.ckpt)")
    p.add_argument("--split", default=DEFAULTS["split"], help="the run's split, or another local file pair")
    p.add_argument("--max-sentences", type=int, default=DEFAULTS["max_sentences"],
                   help="decode the first N sentences for each pruning step and best-head-only model (0 = all). "
                        "At the defaults the 72-head model has 78 such models, each decoding them once (capped at "
                        "twice the source length); importance, roles and the single-head losses always use the "
                        "whole split")
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
    p.add_argument("--redundancy-threshold", type=float, default=DEFAULTS["redundancy_threshold"],
                   help="heads whose attention averages at most this Jensen-Shannon divergence (bits) apart are "
                        "named near-duplicates")
    p.add_argument("--out", default=None, help="output directory (default: <run dir>/analysis)")
    p.add_argument("--wandb-mode", choices=("online", "offline", "disabled"), default=None,
                   help="W&B mode (default: $WANDB_MODE, else offline)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    try:
        analysis, out = analyze(
            args.ckpt, split=args.split, max_sentences=args.max_sentences, random_orders=args.random_orders,
            step=args.step, sentences=args.sentences, pos_threshold=args.pos_threshold,
            rare_threshold=args.rare_threshold, tolerance=args.tolerance, seed=args.seed,
            redundancy_threshold=args.redundancy_threshold, out_dir=args.out,
            wandb_mode=args.wandb_mode,
        )
    except (RunError, DataError, AnalysisError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(summary(analysis, out), flush=True)


if __name__ == "__main__":
    main()
