"""The analysis of one model in words and tables: analysis.md and the printed summary (the comparison
across a sweep's analysed runs is reports/pages/compare.py)."""

from __future__ import annotations

import math

from headsweep.analysis.fixed import LEGEND, fixed_words, head_label, name_label
from headsweep.analysis.importance import KIND_NAMES, NORMALISATION, POOLS
from headsweep.model import ATTENTION_KINDS
from headsweep.reporting.markdown import table


def _f(x, fmt="{:.2f}") -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def _table(header: list[str], rows: list[list]) -> list[str]:
    return [*table(header, rows), ""]


def markdown(a: dict) -> str:
    """analysis.md: every part of the analysis, in words, tables and the plots' file names."""
    parts = (
        _importance_md,
        _ablation_md,
        _pruning_md,
        _roles_md,
        _if_present("layer_roles", _layers_md),
        _if_present("redundancy", _redundancy_md),
        _maps_md,
    )
    return "\n".join(line for part in parts for line in part(a))


def _if_present(key: str, part):
    """A part written only when the analysis has `key` (older analyses lack the later parts)."""
    return lambda a: part(a, a[key]) if a.get(key) else []


def _importance_md(a: dict) -> list[str]:
    """The header and the importance tables."""
    s = a["settings"]
    full = a["full"]
    imp = a["importance"]["normalised"]
    n_layers = len(imp["enc_self"])
    n_heads = len(imp["enc_self"][0])
    lines = [
        f"# Do heads specialise? `{a['run_name']}`",
        "",
        f"Checkpoint `{a['checkpoint']}`, split `{a['split']}`. Model: {n_layers} + {n_layers} layers, "
        f"{n_heads} heads, head_dropout {a['model']['head_dropout']}.",
        "",
        *[line for w in fixed_words(a.get("fixed_heads"), n_heads) for line in (f"**Fixed heads**: {w}.", "")],
        *([LEGEND, ""] if a.get("fixed_heads") else []),
        f"Full model on the first {s['sentences_decoded']} sentences ({s.get('decoding', 'greedy')}): "
        f"**BLEU {full['bleu']:.2f}**, "
        f"chrF {full['chrf']:.2f}, loss {full['loss']:.3f}; loss {_f(full.get('split_loss'), '{:.3f}')} over the "
        f"whole split ({s['loss']}). Every pruned model below decodes these same sentences; importance, roles and "
        f"single-head losses use all {s['sentences_importance']} sentences of the split. "
        f"Cost: {a['cost']['decodes']} decodes, {a['cost']['seconds_per_decode']} s each; "
        f"{a['cost'].get('loss_passes', 0)} loss passes, {a['cost'].get('loss_seconds', 0)} s in all; "
        f"{a['cost']['total_seconds'] / 60:.1f} min in all.",
        "",
        "## Head importance (Michel et al. 2019)",
        "",
        f"I_h = E_x |∂L(x)/∂ξ_h| at ξ = 1, L(x) the sentence's summed token NLL. **Normalised: {NORMALISATION}**, "
        "so each row below has unit l2 norm; the pruning order over all heads uses these normalised scores.",
        "",
        f"![importance]({a['files']['importance']})",
        "",
    ]
    return lines + _kind_tables(
        n_heads, lambda kind: [[f"{v:.2f}" for v in row] for row in imp[kind]], a.get("fixed_heads")
    )


def _kind_tables(n_heads: int, cells_of, fixed: dict | None = None) -> list[str]:
    """One layer x head table per attention kind; cells_of(kind) gives each layer's row of cells; fixed heads
    (`fixed`, analysis.json's fixed_heads) labelled in the header."""
    lines = []
    for kind in ATTENTION_KINDS:
        header = ["layer"] + [head_label(fixed, kind, h, prefix="h") for h in range(n_heads)]
        lines += [
            f"**{KIND_NAMES[kind]}**",
            "",
            *_table(header, [[layer, *cells] for layer, cells in enumerate(cells_of(kind))]),
        ]
    return lines


def _ablation_md(a: dict) -> list[str]:
    """One head removed; one layer's best head kept (Michel's Tables 1 and 2)."""
    full = a["full"]
    imp = a["importance"]["normalised"]
    n_layers = len(imp["enc_self"])
    n_heads = len(imp["enc_self"][0])
    single = {(r["kind"], r["layer"], r["head"]): r for r in a["single_head"]}
    lines = [
        "## Removing one head (Michel et al., Table 1)",
        "",
        "Change of the teacher-forced loss (nats per target token, over every sentence of the split) when only "
        "that head is removed, ± its standard error over sentences (paired); "
        f"full model {_f(full.get('split_loss'), '{:.3f}')}. "
        "Loss, not BLEU: one head moves BLEU on a few hundred decoded sentences by less than its noise.",
        "",
        f"![ablation]({a['files']['ablation']})",
        "",
    ]
    lines += _kind_tables(
        n_heads,
        lambda kind: [
            [
                f"{single[(kind, layer, h)]['delta_loss']:+.3f} ± {single[(kind, layer, h)]['delta_loss_se']:.3f}"
                for h in range(n_heads)
            ]
            for layer in range(n_layers)
        ],
        a.get("fixed_heads"),
    )
    lines += [
        "## Keeping only the most important head of a layer (Michel et al., Table 2)",
        "",
        "All heads of one layer removed except the one with the highest importance (Michel tried every head "
        "and kept the best by BLEU; we take the importance ranking, one decode per layer). BLEU on the decoded "
        "sentences, loss over the whole split.",
        "",
    ]
    lines += _table(
        ["attention", "layer", "kept head", "BLEU", "ΔBLEU", "loss", "Δloss ± se"],
        [
            [
                KIND_NAMES[r["kind"]],
                r["layer"],
                head_label(a.get("fixed_heads"), r["kind"], r["kept_head"]),
                f"{r['bleu']:.2f}",
                f"{r['delta_bleu']:+.2f}",
                f"{r['loss']:.3f}",
                f"{r['delta_loss']:+.3f} ± {r['delta_loss_se']:.3f}",
            ]
            for r in a["best_head_only"]
        ],
    )
    return lines


def _pruning_md(a: dict) -> list[str]:
    """Pruning curves, prunable fractions and the most sensitive attention kind."""
    s = a["settings"]
    full = a["full"]
    grid = a["pruning"]["fractions"]
    pools = a["pruning"]["pools"]
    n_random = s["random_orders"]
    lines = [
        "## Pruning curves",
        "",
        f"Heads removed in order of increasing (normalised) importance, {s['step']:.0%} of the pool per step, "
        f"within each attention kind and over all heads together; dashed: {n_random} random orders "
        f"(mean ± sd). Prunable: the largest fraction removed before BLEU first falls more than "
        f"{s['tolerance']:g} below the full model's {full['bleu']:.2f}.",
        "",
        f"![pruning]({a['files']['pruning']})",
        "",
    ]
    pool_name = {"all": "all heads", **KIND_NAMES}
    lines += _table(
        ["pool", "heads", "prunable (importance)", "prunable (random mean)"],
        [
            [
                pool_name[p],
                pools[p]["n_heads"],
                f"{pools[p]['prunable']['importance']:.0%}",
                _f(pools[p]["prunable"]["random_mean"], "{:.0%}"),
            ]
            for p in POOLS
        ],
    )
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
    lines += [
        "**Which attention kind matters most** (most sensitive first: BLEU lost with half of the kind's "
        "heads removed in importance order; mean raw importance E|∂L/∂ξ| before normalisation):",
        "",
    ]
    lines += _table(
        [
            "attention",
            "mean raw importance",
            f"ΔBLEU, {a['kinds'][0]['removed']:.0%} removed",
            "ΔBLEU, all removed",
            "prunable",
        ],
        [
            [
                KIND_NAMES[r["kind"]],
                f"{r['mean_raw_importance']:.3f}",
                f"{-r['bleu_drop_half']:+.2f}",
                f"{-r['bleu_drop_all']:+.2f}",
                f"{r['prunable']:.0%}",
            ]
            for r in a["kinds"]
        ],
    )
    return lines


def _roles_md(a: dict) -> list[str]:
    """Role metrics and labels per head (Voita et al. 2019)."""
    s = a["settings"]
    lines = [
        "## Head roles (Voita et al. 2019)",
        "",
        "Per head, over every query token of the split (teacher-forced on the references): confidence = mean "
        "of the maximum attention weight; entropy of the attention distribution (nats); prev / next = share of "
        "tokens whose maximum falls on the previous / next token (self-attention, over the tokens that have one); "
        "rare = share whose maximum falls on the sentence's least frequent source token (by training-split "
        "frequency; encoder self-attention and cross-attention). "
        f"Role thresholds: positional if prev or next ≥ {s['pos_threshold']:.0%}, rare words if rare ≥ "
        f"{s['rare_threshold']:.0%} (`--pos-threshold`, `--rare-threshold`); '–' = none.",
        "",
        "Counts: " + ", ".join(f"{k}: {v}" for k, v in a["roles"]["counts"].items()),
        "",
        f"![importance vs confidence]({a['files']['importance_vs_confidence']})",
        "",
    ]
    lines += _table(
        [
            "attention",
            "layer",
            "head",
            "importance",
            "Δloss alone",
            "confidence",
            "entropy",
            "prev",
            "next",
            "rare",
            "role",
        ],
        [
            [
                KIND_NAMES[r["kind"]],
                r["layer"],
                head_label(a.get("fixed_heads"), r["kind"], r["head"]),
                f"{r['importance']:.2f}",
                f"{r['delta_loss']:+.3f}",
                _f(r["confidence"]),
                _f(r["entropy"]),
                _f(r["prev"], "{:.0%}"),
                _f(r["next"], "{:.0%}"),
                _f(r["rare"], "{:.0%}"),
                r["role"],
            ]
            for r in a["roles"]["heads"]
        ],
    )
    return lines


def locality_words(layers: list[dict]) -> list[str]:
    """ "Early layers local, later ones longer-range": attention distance from the first to the last layer."""
    words = []
    for kind in ("enc_self", "dec_self"):
        rows = [r for r in layers if r["kind"] == kind and r["distance"] is not None]
        if len(rows) < 2:
            continue
        first, last = rows[0]["distance"], rows[-1]["distance"]
        trend = "grows" if last > first * 1.1 else "shrinks" if last < first / 1.1 else "stays about the same"
        words.append(
            f"{KIND_NAMES[kind]}: mean attention distance {trend} from layer 0 to layer {rows[-1]['layer']} "
            f"({first:.2f} → {last:.2f} tokens; entropy {rows[0]['entropy']:.2f} → {rows[-1]['entropy']:.2f} nats)"
        )
    return words


def _layers_md(a: dict, layers: list[dict]) -> list[str]:
    """Per layer: the share of heads with each role, mean entropy and distance."""
    lines = [
        "## Roles by layer",
        "",
        "Share of each layer's heads with a role (thresholds above), and its heads' mean entropy (nats), attention "
        "distance (Σ_j a_j |j − i| in tokens; self-attention only) and confidence. Is the usual picture, early "
        "layers local and later layers longer-range, true here?",
        "",
    ]
    lines += [f"- {w}" for w in locality_words(layers)] + [""]
    lines += _table(
        [
            "attention",
            "layer",
            "heads",
            "positional",
            "rare words",
            "no clear role",
            "entropy",
            "distance",
            "confidence",
        ],
        [
            [
                KIND_NAMES[r["kind"]],
                r["layer"],
                r["heads"],
                f"{r['positional']:.0%}",
                f"{r['rare']:.0%}",
                f"{r['none']:.0%}",
                _f(r["entropy"]),
                _f(r["distance"]),
                _f(r["confidence"]),
            ]
            for r in layers
        ],
    )
    return lines


def _redundancy_md(a: dict, red: dict) -> list[str]:
    """Near-duplicate heads (Jensen-Shannon divergence) and whether redundancy predicts cheap pruning."""
    lines = [
        "## Redundant heads (Clark et al. 2019)",
        "",
        "Jensen-Shannon divergence between two heads' attention distributions (bits, 0 = identical, 1 = disjoint), "
        f"averaged over the query tokens of the decoded sentences; heads clustered by average linkage, groups "
        f"at most {red['threshold_bits']:g} bits apart named (`--redundancy-threshold`). ρ: Spearman correlation "
        "between a head's JS to its nearest twin and the loss increase when it alone is removed (ρ > 0: heads with a "
        "near twin cost less to remove).",
        "",
        f"![redundancy]({a['files']['redundancy']})",
        "",
    ]
    rows = []
    for kind, k in red["kinds"].items():
        c = k["twin_vs_loss_increase"]
        rows.append(
            [
                KIND_NAMES[kind],
                f"{k['mean_js_bits']:.2f}",
                len(k["groups"]),
                _groups(a, kind, k["groups"]) or "–",
                f"{c['spearman_rho']:+.2f}",
                _f(c["p"], "{:.3f}"),
            ]
        )
    return lines + _table(
        ["attention", "mean JS", "groups", "near-duplicate heads", "ρ twin vs loss increase", "p"], rows
    )


def _groups(a: dict, kind: str, groups: list[list[str]]) -> str:
    """Near-duplicate groups in words, fixed heads with their pattern (copies of one pattern are twins by
    construction, not by training)."""
    return "; ".join(", ".join(name_label(a.get("fixed_heads"), kind, name) for name in g) for g in groups)


def _maps_md(a: dict) -> list[str]:
    """The chosen sentences' attention maps."""
    lines = ["## Attention maps", ""]
    for m in a["attention_maps"]:
        lines += [f"**{m['tag']}**: {m['source']}  →  {m['target']} (target side: {m['target_side']})", ""]
        lines += [f"![{kind}]({name})" for kind, name in m["files"].items()] + [""]
    return lines
