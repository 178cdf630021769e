"""A sweep over lengths (data.join, sweeps/long_sequences.yaml) read one length at a time: BLEU over joined pairs
is another test set at each length, so the best h, and the order of the cells over training, are each length's
own. A sweep that joins nothing has one length, and these words say nothing."""

from __future__ import annotations

LENGTH = "data.join"  # sentence pairs per example; runs from before the setting joined nothing (1)


def length_of(cell) -> int:
    """Sentence pairs per example. Only 1 is the paper's data: a cell at another length, a sweep's base too,
    has no Table 3 row."""
    return cell.runs[0].flat.get(LENGTH, 1)


def same_length(cells: list, base) -> list:
    """The cells at the base's length (all of them where there is no base or one length)."""
    return [c for c in cells if base is None or length_of(c) == length_of(base)]


def best_per_length(cells: list) -> list[str]:
    """At each length whose cells vary h, the h with the highest mean test BLEU, with its verdict against its
    length's base where it is not the base: the page's answer to "which h is best?", per length."""
    if len({length_of(c) for c in cells}) < 2:
        return []
    lines = []
    for k in sorted({length_of(c) for c in cells}):
        at = [c for c in cells if length_of(c) == k and c.row.get("test_bleu") is not None]
        if len({c.runs[0].flat.get("model.heads") for c in at}) < 2:
            continue
        best = max(at, key=lambda c: c.row["test_bleu"])
        r, h = best.row, best.runs[0].flat.get("model.heads")
        seeds = f"{len(best.runs)} seed{'s' if len(best.runs) != 1 else ''}"
        if r.get("delta") is None:
            how = "the base at this length: no cell's mean is above it"
        else:
            how = f"{r['delta']:+.2f} against the base at this length, {r.get('verdict') or 'not compared'}"
        lines.append(
            f"Best h at join {k} by mean test BLEU: h {h} ({r['test_bleu']:.2f}, {seeds}; {how}); "
            f"{len(at)} cells of h at this length."
        )
    return lines
