"""The analysis of one model as the lines make analyze prints (analysis.md is markdown.py's): the headline numbers of
each part, and where the files are."""

from __future__ import annotations

from pathlib import Path

from headsweep.analysis.fixed import fixed_words
from headsweep.analysis.importance import KIND_NAMES, POOLS
from headsweep.analysis.markdown import _f, _groups, locality_words
from headsweep.model import ATTENTION_KINDS


def summary(a: dict, out: Path) -> str:
    full, pools, s = a["full"], a["pruning"]["pools"], a["settings"]
    single = sorted(a["single_head"], key=lambda r: -r["delta_loss"])
    fmt = lambda r: f"{r['kind']} L{r['layer']}H{r['head']} {r['delta_loss']:+.3f}"  # noqa: E731
    roles = a["roles"]["heads"]
    lines = [
        "",
        f"analysis of {a['run_name']} on {a['split']} ({s['sentences_decoded']} sentences decoded, "
        f"{s['sentences_importance']} for importance and roles; {a['cost']['decodes']} decodes, "
        f"{a['cost']['total_seconds'] / 60:.1f} min)",
        f"  decoding: {s.get('decoding', 'greedy')}",
        f"  full model: BLEU {full['bleu']:.2f}, loss {full['loss']:.3f}",
        *[f"  fixed heads: {w}" for w in fixed_words(a.get("fixed_heads"), a["model"]["heads"])],
        "  importance (normalised per layer by its l2 norm), max / min head per kind:",
    ]
    for kind in ATTENTION_KINDS:
        rows = [r for r in roles if r["kind"] == kind]
        hi, lo = max(rows, key=lambda r: r["importance"]), min(rows, key=lambda r: r["importance"])
        lines.append(
            f"    {KIND_NAMES[kind]:<26} L{hi['layer']}H{hi['head']} {hi['importance']:.2f} / "
            f"L{lo['layer']}H{lo['head']} {lo['importance']:.2f}"
        )
    lines += [
        "  removing one head (loss change over the split, nats/token): worst "
        + ", ".join(fmt(r) for r in single[:3])
        + "; least "
        + ", ".join(fmt(r) for r in single[-2:]),
        f"  prunable within {s['tolerance']:g} BLEU (importance order / random mean):",
    ]
    for pool in POOLS:
        p = pools[pool]["prunable"]
        lines.append(
            f"    {'all heads' if pool == 'all' else KIND_NAMES[pool]:<26} {p['importance']:.0%} / "
            f"{_f(p['random_mean'], '{:.0%}')} of {pools[pool]['n_heads']}"
        )
    lines.append(
        "  most sensitive kind: "
        + ", ".join(
            f"{KIND_NAMES[r['kind']]} {-r['bleu_drop_half']:+.2f} BLEU at {r['removed']:.0%} removed"
            for r in a["kinds"]
        )
    )
    lines += [
        "  roles: "
        + ", ".join(f"{k} {v}" for k, v in a["roles"]["counts"].items())
        + f" (positional >= {s['pos_threshold']:.0%}, rare words >= {s['rare_threshold']:.0%})",
        *[f"  {w}" for w in locality_words(a.get("layer_roles", []))],
        *[
            f"  near-duplicate heads ({KIND_NAMES[kind]}): " + (_groups(a, kind, k["groups"]) or "none")
            for kind, k in a.get("redundancy", {}).get("kinds", {}).items()
        ],
        f"  outputs: {out}  (analysis.md, analysis.json, *.png)",
    ]
    return "\n".join(lines)
