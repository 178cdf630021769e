"""The sweep page's attention-rank section: for each cell whose runs hold attention_rank.json (written by
`python -m headsweep.analysis.rank --ckpt <run>` on the run's checkpoint), the encoder self-attention heads'
logit rank against their bound d_k, the map rank and entropy, each the mean over layers and heads, then over
the seeds measured. It reads what the runs hold; a cell with none measured is left out of the table."""

from __future__ import annotations

import statistics

from headsweep.reports.sweep.cells import Cell
from headsweep.reports.sweep.table import display
from headsweep.store.pack import ATTENTION_RANK as FILE
from headsweep.store.pack import read_attention_rank

KIND = "enc_self"  # where the bound is plainest: n source keys, no causal mask


def head_mean(record: dict, name: str, kind: str = KIND) -> float:
    return statistics.fmean(x for layer in record["kinds"][kind]["layers"] for x in layer[name])


def cross_words(records: list[dict]) -> str:
    """Cross-attention's mean entropy beside a uniform head's (log n): equal means the decoder ignores its source."""
    got = spread([head_mean(r, "entropy", "cross") for r in records], 2)
    uniform = statistics.fmean(r["kinds"]["cross"].get("uniform_entropy", float("nan")) for r in records)
    return f"{got} ({uniform:.2f})"


def spread(values: list[float], digits: int = 1) -> str:
    mean = statistics.fmean(values)
    return f"{mean:.{digits}f}" + (f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else "")


def rank_rows(cells: list[Cell]) -> list[list[str]]:
    rows = []
    for c in cells:
        records = [r for r in (read_attention_rank(run.dir) for run in c.runs) if r]
        if not records:
            continue
        d_k, keys = records[0]["d_k"], statistics.fmean(r["kinds"][KIND]["keys"] for r in records)
        logit = [head_mean(r, "logit_rank") for r in records]
        rows.append(
            [
                display(c),
                str(records[0]["heads"]),
                str(d_k),
                f"{keys:.0f}",
                spread(logit),
                f"{100 * statistics.fmean(logit) / min(d_k, keys):.0f}%",
                spread([head_mean(r, "map_rank") for r in records]),
                spread([head_mean(r, "entropy") for r in records], 2),
                cross_words(records),
                str(len(records)),
            ]
        )
    return rows


def rank_section(cells: list[Cell]) -> str | None:
    rows = rank_rows(cells)
    if not rows:
        return None
    header = [
        "cell",
        "h",
        "d_k",
        "keys n",
        "logit rank",
        "of min(n, d_k)",
        "map rank",
        "entropy (nats)",
        "cross-attention entropy (uniform)",
        "seeds",
    ]
    table = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    table += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(
        [
            "## Attention rank: do narrow heads hit their bound?",
            "",
            "Bhojanapalli et al. 2020: a head's logits Q K^T over n keys have rank at most d_k, so a head with "
            "d_k < n cannot express every attention pattern. Per cell, encoder self-attention on the val split "
            "(teacher-forced, padding left out): the effective rank (Roy and Vetterli 2007) of each head's logits "
            "on one example (log of its attention map, each row centred), of the map itself (the softmax can raise "
            "it above d_k) and the entropy, each averaged over examples, then over layers and heads; mean ± sd "
            "over the seeds measured. keys n: the mean number of source tokens. A logit rank near 100% of min(n, "
            "d_k) is a head using all the rank it has. Cross-attention entropy beside a uniform head's (log n, in "
            "brackets): equal means the decoder does not yet read its source, and no rank is at work there.",
            "",
            *table,
            "",
            f"Measured with `python -m headsweep.analysis.rank --ckpt <run dir>` (writes `{FILE}` beside the "
            "run's results.json).",
        ]
    )
