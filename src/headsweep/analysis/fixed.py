"""Fixed heads (model.fixed_heads; headsweep.model.patterns) in the head analysis: which heads are fixed
positional patterns, and how the record, tables, plots and summary name them.

They are analysed like every other head (importance, ablation, pruning, roles, redundancy), which is what
the analysis should do; but a fixed head's role is set by construction, not learned, and two layers' copies
of one pattern are identical by construction, so a reader must be able to tell them apart from learned
heads. A model without fixed heads gets an empty record here, and every label below is then unchanged.
"""

from __future__ import annotations

from headsweep.model import ATTENTION_KINDS

# The line under the tables' header saying what the label means (only written when a model has fixed heads).
LEGEND = ("Heads labelled `(pattern, fixed)` attend by that fixed positional pattern (`model.fixed_heads`, "
          "headsweep.model.patterns), not by learned queries and keys; they are measured like every other head, "
          "so their role is theirs by construction. The heat maps hatch them, the importance-vs-confidence plot "
          "rings them.")


def fixed_heads(net) -> dict[str, dict[str, str]]:
    """{kind: {head index: pattern}} for the attention kinds with fixed heads, e.g. {"enc_self": {"0": "cur",
    "1": "prev"}}; the same heads in every layer of a kind (TransformerConfig.fixed), so no layer index. The
    index is a string because analysis.json's keys are. Empty for a model without fixed heads."""
    return {kind: {str(h): p for h, p in enumerate(net.cfg.fixed(kind))}
            for kind in ATTENTION_KINDS if net.cfg.fixed(kind)}


def pattern_of(fixed: dict | None, kind: str, head: int) -> str | None:
    """The pattern of a fixed head, None for a learned one."""
    return (fixed or {}).get(kind, {}).get(str(head))


def head_label(fixed: dict | None, kind: str, head: int, prefix: str = "") -> str:
    """A head as the tables name it: "3", or "0 (prev, fixed)" for a fixed head (`prefix`: "h" gives "h3")."""
    pattern = pattern_of(fixed, kind, head)
    return f"{prefix}{head}" + (f" ({pattern}, fixed)" if pattern else "")


def name_label(fixed: dict | None, kind: str, name: str, short: bool = False) -> str:
    """A head named "L<layer>H<head>" (headsweep.analysis.redundancy.head_names), its pattern added when fixed:
    near-duplicate groups of fixed heads are duplicates by construction. `short`: "L0H1 (prev)", for a plot's
    tick labels, which have no room for more."""
    pattern = pattern_of(fixed, kind, int(name.rsplit("H", 1)[1]))
    return name if not pattern else f"{name} ({pattern})" if short else f"{name} ({pattern}, fixed)"


def fixed_words(fixed: dict | None, n_heads: int) -> list[str]:
    """One sentence per kind with fixed heads: "enc_self heads 0-3 of every layer are fixed patterns (cur,
    prev, next, left3); the learned heads are 4-7". The fixed heads are the first n (MultiHeadAttention)."""
    span = lambda a, b: str(a) if a == b else f"{a}-{b}"  # noqa: E731
    words = []
    for kind, heads in (fixed or {}).items():
        n = len(heads)
        patterns = ", ".join(heads[str(h)] for h in range(n))
        which = f"heads {span(0, n - 1)} of every layer are fixed patterns" if n > 1 else \
            "head 0 of every layer is a fixed pattern"
        learned = "no head is learned" if n >= n_heads else \
            f"the learned head is {n}" if n == n_heads - 1 else f"the learned heads are {span(n, n_heads - 1)}"
        words.append(f"{kind} {which} ({patterns}); {learned}")
    return words
