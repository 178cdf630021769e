"""The parts of one head analysis (headsweep.analysis.analyze): `measure` runs importance, the ablations,
the pruning curves, roles and redundancy over a split; the plots, attention maps and analysis.json's
record are written from what it found."""

from __future__ import annotations

import logging
import statistics
from pathlib import Path

from headsweep.analysis.ablation import (
    DECODING,
    POOLS,
    Evaluator,
    LossEvaluator,
    kind_sensitivity,
    plan_pruning,
    prunable_fraction,
)
from headsweep.analysis.fixed import fixed_heads
from headsweep.analysis.importance import (
    KIND_NAMES,
    NORMALISATION,
    all_heads,
    fractions,
    head_importance,
    normalise_per_layer,
    pruned_at,
)
from headsweep.analysis.maps import sentence_weights
from headsweep.analysis.plots import (
    plot_attention,
    plot_importance_vs_confidence,
    plot_layer_head_maps,
    plot_pruning,
    plot_redundancy,
)
from headsweep.analysis.redundancy import collect_js, redundancy
from headsweep.analysis.roles import METRICS, collect_roles, layer_roles, role_label, source_frequencies
from headsweep.analysis.settings import AnalysisSettings
from headsweep.data import make_batches
from headsweep.model import ATTENTION_KINDS

log = logging.getLogger(__name__)

FILES = {
    "markdown": "analysis.md",
    "json": "analysis.json",
    "importance": "importance.png",
    "redundancy": "redundancy.png",
    "ablation": "ablation.png",
    "pruning": "pruning.png",
    "importance_vs_confidence": "importance_vs_confidence.png",
}


def measure(module, datamodule, s: AnalysisSettings) -> dict:
    """Importance, the ablations, the pruning curves, roles and redundancy of one model over split s.split."""
    net, pad = module.net, datamodule.pad_id
    src_texts, refs = datamodule.texts(s.split)
    n_dec = len(src_texts) if s.max_sentences == 0 else min(s.max_sentences, len(src_texts))
    # Importance, roles and single-head losses: every sentence, in the training batch size (the backward
    # pass needs memory); decoding: the first n_dec sentences, in the evaluation batch size.
    src_ids, ref_ids = datamodule.encode(src_texts), datamodule.encode(refs)
    all_batches = make_batches(src_ids, ref_ids, datamodule.max_tokens)
    log.info("importance: forward + backward over %d sentences of %s", len(src_texts), s.split)
    raw = head_importance(net, all_batches, pad)
    norm = normalise_per_layer(raw)
    heads = all_heads(net)
    grid = fractions(s.step)
    plan = plan_pruning(heads, norm, grid, s.random_orders, s.seed)
    best = {
        (kind, layer): int(norm[kind][layer].argmax())
        for kind in ATTENTION_KINDS
        for layer in range(norm[kind].size(0))
    }
    planned = planned_models(best, norm, plan, grid)
    log.info(
        "single heads: %d models, teacher-forced loss over %d sentences; pruning and best head only: %d "
        "distinct models, each greedy-decoding %d sentences of %s",
        len(heads),
        len(src_texts),
        len(planned),
        n_dec,
        s.split,
    )
    losses = LossEvaluator(net, all_batches, pad)
    evaluate = Evaluator(
        module, make_batches(src_ids[:n_dec], ref_ids[:n_dec], datamodule.eval_max_tokens), refs[:n_dec]
    )
    full = evaluate([]) | {"split_loss": losses([])["loss"]}
    log.info(
        "full model: BLEU %.2f, loss %.3f on the decoded sentences, %.3f over the split (%.1f s per decode, "
        "%.1f s per loss pass: about %.0f s for the rest)",
        full["bleu"],
        full["loss"],
        full["split_loss"],
        evaluate.seconds,
        losses.seconds,
        evaluate.seconds * (len(planned) - 1) + losses.seconds * len(heads),
    )
    single, best_only = head_ablations(evaluate, losses, heads, best, norm, full)
    pruning = pruning_curves(evaluate, plan, grid, full, s.tolerance)
    log.info("roles: attention statistics over %d sentences", len(src_texts))
    acc = collect_roles(net, all_batches, pad, source_frequencies(datamodule))
    role_rows = role_table(acc, norm, raw, single, s.pos_threshold, s.rare_threshold)
    log.info("redundancy: Jensen-Shannon divergence between heads over %d sentences", n_dec)
    js = collect_js(net, make_batches(src_ids[:n_dec], ref_ids[:n_dec], datamodule.max_tokens), pad)
    return {
        "raw": raw,
        "norm": norm,
        "grid": grid,
        "full": full,
        "single": single,
        "best_only": best_only,
        "pruning": pruning,
        "role_rows": role_rows,
        "redundancy": redundancy(js, net.cfg.heads, single, s.redundancy_threshold),
        "evaluate": evaluate,
        "losses": losses,
        "n_dec": n_dec,
        "n_all": len(src_texts),
        "fixed": fixed_heads(net),
    }


def planned_models(best: dict, norm: dict, plan: dict, grid: list[float]) -> set[frozenset]:
    """Every distinct set of removed heads the analysis will decode (for the time estimate)."""
    planned = {frozenset()}
    planned |= {
        frozenset((kind, layer, h) for h in range(norm[kind].size(1)) if h != b) for (kind, layer), b in best.items()
    }
    for p in plan.values():
        for order in [p["importance"], *p["random"]]:
            planned |= {frozenset(pruned_at(order, f)) for f in grid}
    return planned


def head_ablations(
    evaluate: Evaluator, losses: LossEvaluator, heads, best: dict, norm: dict, full: dict
) -> tuple[list, list]:
    """Michel's Tables 1 and 2: each head removed alone (loss over the split: no decoding); each layer
    reduced to its most important head (that loss, and BLEU on the decoded sentences)."""
    single = [{"kind": kind, "layer": layer, "head": h, **losses([(kind, layer, h)])} for kind, layer, h in heads]
    best_only = []
    for (kind, layer), b in best.items():
        removed = [(kind, layer, h) for h in range(norm[kind].size(1)) if h != b]
        r = evaluate(removed)
        best_only.append(
            {
                "kind": kind,
                "layer": layer,
                "kept_head": b,
                "bleu": r["bleu"],
                "delta_bleu": r["bleu"] - full["bleu"],
                **losses(removed),
            }
        )

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
                if runs
                else None,
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
                role_rows.append(
                    {
                        "kind": kind,
                        "layer": layer,
                        "head": h,
                        "importance": float(norm[kind][layer, h]),
                        "importance_raw": float(raw[kind][layer, h]),
                        "delta_loss": single_by_head[(kind, layer, h)]["delta_loss"],
                        **m,
                        "role": role_label(m["prev"], m["next"], m["rare"], pos_threshold, rare_threshold),
                    }
                )
    return role_rows


def write_plots(out: Path, found: dict, tolerance: float) -> None:
    """The heat maps, the pruning curves, importance against confidence and redundancy, as FILES names them."""
    norm, single_by_head = found["norm"], {(s["kind"], s["layer"], s["head"]): s for s in found["single"]}
    fixed = found.get("fixed")  # fixed-pattern heads: marked in every per-head plot
    plot_layer_head_maps(
        {k: v.tolist() for k, v in norm.items()},
        "head importance E|dL/dxi|, each layer normalised by its l2 norm",
        out / FILES["importance"],
        "viridis",
        fixed=fixed,
    )
    plot_layer_head_maps(
        {
            kind: [
                [single_by_head[(kind, layer, h)]["delta_loss"] for h in range(norm[kind].size(1))]
                for layer in range(norm[kind].size(0))
            ]
            for kind in ATTENTION_KINDS
        },
        "loss change (nats per token, whole split) when one head is removed",
        out / FILES["ablation"],
        "RdBu_r",
        "{:+.3f}",
        center=True,
        fixed=fixed,
    )
    plot_pruning(found["pruning"], found["grid"], found["full"]["bleu"], tolerance, out / FILES["pruning"])
    plot_importance_vs_confidence(found["role_rows"], out / FILES["importance_vs_confidence"], fixed)
    plot_redundancy(found["redundancy"], out / FILES["redundancy"], fixed)


def attention_maps(module, datamodule, map_specs: list[dict], out: Path) -> list[dict]:
    """Heat maps of the chosen sentences' attention, per kind; their entries for analysis.json."""
    maps = []
    tok = datamodule.tokenizer
    fixed = fixed_heads(module.net)
    for spec in map_specs:
        weights = sentence_weights(module, spec["src_ids"], spec["tgt_ids"])
        src_tok = [tok.id_to_token(i) for i in spec["src_ids"]]
        tgt_tok = [tok.id_to_token(i) for i in [module.hparams.bos_id, *spec["tgt_ids"]]]
        entry = {k: spec[k] for k in ("tag", "source", "target", "target_side")} | {"files": {}}
        for kind in ATTENTION_KINDS:
            q, k = (
                (src_tok, src_tok)
                if kind == "enc_self"
                else (tgt_tok, tgt_tok)
                if kind == "dec_self"
                else (tgt_tok, src_tok)
            )
            name = f"attention_{spec['tag']}_{kind}.png"
            plot_attention(
                weights[kind],
                q,
                k,
                f"{KIND_NAMES[kind]}: {spec['source']}\n"
                f"(target side: {spec['target_side']}; rows = queries, columns = keys)",
                out / name,
                fixed.get(kind),
            )
            entry["files"][kind] = name
        maps.append(entry)

    return maps


def analysis_record(run, s: AnalysisSettings, found: dict, maps: list[dict]) -> dict:
    """analysis.json: everything the analysis found (`found`, from `measure`), with how it was measured."""
    results, model_cfg = run.results, run.results["config"]["model"]
    raw, norm, grid, pruning, role_rows = (found[k] for k in ("raw", "norm", "grid", "pruning", "role_rows"))
    evaluate, losses = found["evaluate"], found["losses"]
    settings = {
        **{k: v for k, v in s.as_dict().items() if k not in ("split", "sentences")},
        "sentences_decoded": found["n_dec"],
        "sentences_importance": found["n_all"],
        "sentences_loss": found["n_all"],
        "loss": "teacher-forced NLL per target token, no label smoothing: over the whole split for single heads "
        "and best head only (split_loss), else over the decoded sentences",
        "decoding": DECODING,
    }
    return {
        "checkpoint": str(run.checkpoint),
        "run_dir": str(run.dir),
        "run_name": results.get("run_name"),
        "sweep": results.get("sweep"),
        "split": s.split,
        "model": {k: model_cfg.get(k) for k in ("n_layers", "heads", "d_model", "d_k", "d_v", "head_dropout")},
        # which heads are fixed patterns, {kind: {head: pattern}} in every layer; a model without any gets no
        # key, so its analysis.json is as before
        **({"fixed_heads": found["fixed"]} if found.get("fixed") else {}),
        "seed": results["config"].get("seed"),
        "settings": settings,
        "full": found["full"],
        "importance": {
            "normalisation": NORMALISATION,
            "definition": "E_x |dL(x)/dxi_h|, L(x) = summed token NLL",
            "raw": {k: v.tolist() for k, v in raw.items()},
            "normalised": {k: v.tolist() for k, v in norm.items()},
        },
        "single_head": found["single"],
        "best_head_only": found["best_only"],
        "pruning": {"fractions": grid, "pools": pruning},
        "roles": {
            "definitions": "see headsweep.analysis.roles",
            "heads": role_rows,
            "counts": {
                label: sum(r["role"] == label for r in role_rows) for label in sorted({r["role"] for r in role_rows})
            },
        },
        "layer_roles": layer_roles(role_rows),
        "redundancy": found["redundancy"],
        "attention_maps": maps,
        "kinds": kind_sensitivity(raw, pruning, grid, found["full"]["bleu"]),
        "files": dict(FILES),
        "cost": {
            "decodes": evaluate.decodes,
            "decode_seconds": round(evaluate.seconds, 1),
            "seconds_per_decode": round(evaluate.seconds / max(evaluate.decodes, 1), 2),
            "loss_passes": losses.forwards,
            "loss_seconds": round(losses.seconds, 1),
        },
    }
