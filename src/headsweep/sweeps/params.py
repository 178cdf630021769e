"""Parameter counts of any config, without data or training.

python -m headsweep.sweeps.params [hydra overrides]            counts by part for that config
python -m headsweep.sweeps.params --table3 model=paper_base data.vocab_size=37000
                                                        every Table 3 row beside the paper's count
python -m headsweep.sweeps.params --match-d-ff model.kv_heads=1
                                 the d_ff that gives this config the parameters of its kv_heads = h twin
"""

from __future__ import annotations

import sys

import torch
from omegaconf import OmegaConf

from headsweep.config import compose
from headsweep.model import Transformer, TransformerConfig, count_parameters
from headsweep.sweeps.paper import model_overrides, table3


def count_for(model: dict, vocab_size: int) -> dict[str, int]:
    with torch.device("meta"):  # shapes only: the big model costs no memory
        return count_parameters(Transformer(TransformerConfig(**model, vocab_size=vocab_size)))


def matched_d_ff(model: dict, vocab_size: int, total: int) -> int:
    """The d_ff that brings `model` nearest to `total` parameters (Shazeer 2019 widens the feed-forward layers
    of multi-query models so). The count is linear in d_ff, 2N (2 d_model + 1) per unit: two counts give it."""
    at = count_for(model, vocab_size)["total"]
    slope = count_for({**model, "d_ff": model["d_ff"] + 1}, vocab_size)["total"] - at
    return model["d_ff"] + round((total - at) / slope)


def table3_rows(model: dict, vocab_size: int) -> list[dict]:
    """Our count for each Table 3 row (its settings applied to `model`) beside the paper's."""
    rows = []
    for row in table3():
        if row["params_M"] is None and row["row"] != "A":
            continue  # rows D and E change no parameter count and list none
        ours = count_for({**model, **model_overrides(row)}, vocab_size)["total"]
        paper = row["params_M"]
        rows.append(
            {
                "row": row["row"],
                "N": row["N"],
                "d_model": row["d_model"],
                "d_ff": row["d_ff"],
                "h": row["h"],
                "d_k": row["d_k"],
                "d_v": row["d_v"],
                "ours_M": ours / 1e6,
                "paper_M": paper,
                "diff_pct": None if paper is None else 100 * (ours / 1e6 - paper) / paper,
            }
        )
    return rows


def format_counts(counts: dict[str, int]) -> str:
    order = [
        "total",
        "embeddings",
        "non_embedding",
        "attention",
        "attn_enc_self",
        "attn_dec_self",
        "attn_cross",
        "ffn",
        "norms",
    ]
    return "\n".join(f"{k:>14}  {counts[k]:>13,}" for k in order)


def format_table3(rows: list[dict], vocab_size: int) -> str:
    head = (
        f"{'row':<5}{'N':>3}{'d_model':>8}{'d_ff':>6}{'h':>4}{'d_k':>5}{'d_v':>5}"
        f"{'ours (M)':>10}{'paper (M)':>11}{'diff':>8}"
    )
    lines = [f"Vaswani et al. 2017, Table 3: parameter counts (shared vocabulary of {vocab_size})", head]
    for r in rows:
        paper = "" if r["paper_M"] is None else f"{r['paper_M']:.0f}"
        diff = "" if r["diff_pct"] is None else f"{r['diff_pct']:+.1f}%"
        lines.append(
            f"{r['row']:<5}{r['N']:>3}{r['d_model']:>8}{r['d_ff']:>6}{r['h']:>4}{r['d_k']:>5}{r['d_v']:>5}"
            f"{r['ours_M']:>10.1f}{paper:>11}{diff:>8}"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    show_table3, match = "--table3" in argv, "--match-d-ff" in argv
    cfg = compose([a for a in argv if a not in ("--table3", "--match-d-ff")])
    model = OmegaConf.to_container(cfg.model, resolve=True)
    vocab = cfg.data.vocab_size
    if match:
        target = count_for({**model, "kv_heads": None, "fixed_heads": None}, vocab)["total"]
        d_ff = matched_d_ff(model, vocab, target)
        print(
            f"d_ff={d_ff}: {count_for({**model, 'd_ff': d_ff}, vocab)['total']:,} parameters, "
            f"{target:,} with every head its own keys and values and none fixed"
        )
    elif show_table3:
        print(format_table3(table3_rows(model, vocab), vocab))
    else:
        print(f"model={cfg.model} vocab={vocab}\n{format_counts(count_for(model, vocab))}")


if __name__ == "__main__":
    main(sys.argv[1:])
