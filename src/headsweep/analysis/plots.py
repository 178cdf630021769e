"""The analysis plots: per-head heat maps, pruning curves, importance against confidence, attention maps.
Files only (matplotlib's Agg backend), no display."""

from __future__ import annotations

from pathlib import Path

import torch

from headsweep.analysis.fixed import name_label, pattern_of
from headsweep.analysis.importance import KIND_NAMES, POOLS
from headsweep.model import ATTENTION_KINDS
from headsweep.reporting.plots import pyplot, save_figure


def plot_layer_head_maps(
    values: dict[str, list[list[float]]],
    title: str,
    path: Path,
    cmap: str,
    fmt: str = "{:.2f}",
    center: bool = False,
    fixed: dict | None = None,
) -> None:
    """One panel per attention kind: layers (rows) x heads (columns), values written in the cells; the
    columns of fixed heads (`fixed`: analysis.fixed.fixed_heads) hatched, their pattern under the index."""
    plt = pyplot()
    n_layers, n_heads = len(values["enc_self"]), len(values["enc_self"][0])
    fig, axes = plt.subplots(
        1, 3, figsize=(3 * max(3.0, 0.6 * n_heads + 1.2), max(2.2, 0.55 * n_layers + 1.4)), squeeze=False
    )
    for ax, kind in zip(axes[0], ATTENTION_KINDS):
        data = torch.tensor(values[kind], dtype=torch.float64)
        lim = float(data.abs().max()) or 1.0
        im = ax.imshow(data, cmap=cmap, vmin=-lim if center else None, vmax=lim if center else None, aspect="auto")
        ax.set_title(KIND_NAMES[kind], fontsize=9)
        patterns = [pattern_of(fixed, kind, h) for h in range(n_heads)]
        ax.set_xticks(range(n_heads), [f"{h}\n{p}" if p else str(h) for h, p in enumerate(patterns)], fontsize=7)
        ax.set_yticks(range(n_layers), [str(layer) for layer in range(n_layers)], fontsize=7)
        ax.set_xlabel("head (hatched: fixed pattern)" if any(patterns) else "head", fontsize=8)
        for h in (h for h, p in enumerate(patterns) if p):  # a fixed head's column, every layer: not learned
            ax.add_patch(plt.Rectangle((h - 0.5, -0.5), 1, n_layers, fill=False, hatch="//", edgecolor="grey", lw=0))
        ax.set_ylabel("layer", fontsize=8)
        if n_heads <= 16:
            for (layer, h), v in zip(
                ((layer, h) for layer in range(n_layers) for h in range(n_heads)), data.flatten().tolist()
            ):
                ax.text(
                    h,
                    layer,
                    fmt.format(v),
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="black",
                    bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none", alpha=0.5),
                )
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def plot_pruning(pruning: dict, grid: list[float], full_bleu: float, tolerance: float, path: Path) -> None:
    """BLEU and loss against the fraction of the pool removed; importance order solid, random dashed."""
    plt = pyplot()
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
            ax_b.fill_between(
                x, [m - s for m, s in zip(mean, sd)], [m + s for m, s in zip(mean, sd)], color=color, alpha=0.12, lw=0
            )
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
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def plot_importance_vs_confidence(heads: list[dict], path: Path, fixed: dict | None = None) -> None:
    """One point per head, coloured by kind, shaped by role; fixed heads ringed (their role is by construction)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    markers = {"positional (prev)": "<", "positional (next)": ">", "rare words": "*", "-": "o"}
    for kind, color in zip(ATTENTION_KINDS, ("tab:blue", "tab:orange", "tab:green")):
        for label, marker in markers.items():
            pts = [(h["confidence"], h["importance"]) for h in heads if h["kind"] == kind and h["role"] == label]
            if pts:
                ax.scatter(
                    *zip(*pts),
                    color=color,
                    marker=marker,
                    s=40 if marker == "*" else 22,
                    label=f"{KIND_NAMES[kind]}" + ("" if label == "-" else f", {label}"),
                )
    ringed = [(h["confidence"], h["importance"]) for h in heads if pattern_of(fixed, h["kind"], h["head"])]
    if ringed:
        ax.scatter(*zip(*ringed), facecolors="none", edgecolors="black", s=110, lw=1, label="fixed pattern head")
    ax.set_xlabel("confidence (mean max attention weight)")
    ax.set_ylabel("importance (normalised per layer)")
    ax.legend(fontsize=6.5)
    ax.set_title("importance vs confidence, one point per head", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def plot_attention(
    weights: list[torch.Tensor],
    q_tokens: list[str],
    k_tokens: list[str],
    title: str,
    path: Path,
    patterns: dict[str, str] | None = None,
) -> None:
    """Layers (rows) x heads (columns) of (queries x keys) heat maps, tokens on the outer axes; `patterns`:
    {head index: pattern} of the kind's fixed heads, named in their panels' titles."""
    plt = pyplot()
    n_layers, n_heads = len(weights), weights[0].size(0)
    cell = max(1.6, 0.13 * max(len(q_tokens), len(k_tokens)) + 0.7)
    fig, axes = plt.subplots(n_layers, n_heads, figsize=(n_heads * cell + 1, n_layers * cell + 1.2), squeeze=False)
    for layer in range(n_layers):
        for h in range(n_heads):
            ax = axes[layer][h]
            ax.imshow(weights[layer][h].float(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            pattern = (patterns or {}).get(str(h))
            ax.set_title(f"layer {layer} head {h}" + (f" ({pattern}, fixed)" if pattern else ""), fontsize=7)
            ax.set_xticks(range(len(k_tokens)), k_tokens if layer == n_layers - 1 else [], rotation=90, fontsize=5)
            ax.set_yticks(range(len(q_tokens)), q_tokens if h == 0 else [], fontsize=5)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def plot_redundancy(similar: dict, path: Path, fixed: dict | None = None) -> None:
    """One panel per attention kind: the heads' pairwise JS divergence, rows and columns in the order of
    the average-linkage clustering, so near-duplicate groups show as dark blocks on the diagonal. Fixed heads
    carry their pattern: two layers' copies of one pattern are twins by construction."""
    plt = pyplot()
    kinds = similar["kinds"]
    n = max(len(k["names"]) for k in kinds.values())
    size = max(3.2, 0.13 * n + 2)
    fig, axes = plt.subplots(1, len(kinds), figsize=(size * len(kinds), size), squeeze=False)
    for ax, (kind, k) in zip(axes[0], kinds.items()):
        order = k["order"]
        data = torch.tensor(k["js_bits"])[order][:, order]
        im = ax.imshow(data, cmap="magma", vmin=0, vmax=1)
        labels = [name_label(fixed, kind, k["names"][i], short=True) for i in order]
        ax.set_xticks(range(len(order)), labels, fontsize=5, rotation=90)
        ax.set_yticks(range(len(order)), labels, fontsize=5)
        ax.set_title(f"{KIND_NAMES[kind]}\n{len(k['groups'])} near-duplicate groups", fontsize=8)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle(
        f"Jensen-Shannon divergence between heads (bits; groups: <= {similar['threshold_bits']:g})"
        + ("; (pattern): a fixed head" if fixed else ""),
        fontsize=9,
    )
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
