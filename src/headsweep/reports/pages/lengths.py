"""Is the cost of narrow heads a low-rank bottleneck? Bhojanapalli et al. 2020: a head's attention logits
Q K^T over n tokens have rank at most d_k, so a head narrower than the sentence (d_k < n) cannot express
every attention pattern; they set the head size to the sequence length. If that is what rows A and B's
narrow heads pay for, a cell with d_k = k loses more against the base on test sentences longer than k
subwords than on the shorter ones, where no rank bound binds.

For each cell of the named sweeps against its sweep's base (seeds both have, pooled): test BLEU of cell
minus base on sentences whose source has 1-8, 9-16 and 17+ subwords, and the contrast

    (cell - base on sources longer than k) - (cell - base on sources of at most k),   k = 8 and 16,

with a 95% bootstrap interval and a two-sided bootstrap p (test sentences resampled within each side,
all seeds of a sentence together, base and cell alike: sacreBLEU's per-sentence statistics). Every
contrast of a sweep shares its base's numbers, so read a narrow cell's contrast beside those of the wide-head
cells (d_k >= 32), whose heads no sentence here outgrows.

    python -m headsweep.reports.pages.lengths --sweeps table3_a,table3_b [--root results] [--out reports]

Reads results/ and the corpus the runs name (the source side of the test split, cut into subwords by the
runs' own tokenizer, rebuilt from the training data where it is not cached).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from sacrebleu.metrics import BLEU

from headsweep.data import DataError, TranslationDataModule
from headsweep.data.files import atomic_write  # a page killed mid-write leaves the previous one whole
from headsweep.reporting.html import page
from headsweep.reporting.markdown import first_heading, with_back_link, with_footer
from headsweep.reports.site.index import write_index  # the view's question block, as make report
from headsweep.reports.sweep.cells import Cell, ReportError, Run, group_cells, hypotheses_path, load_runs
from headsweep.reports.sweep.significance import read_text_lines, references, run_data_dir
from headsweep.reports.sweep.table import fmt_p

BUCKETS = ((1, 8), (9, 16), (17, None))  # source subwords: within d_k = 8, within 16, beyond 16
SPLITS = (8, 16)  # the contrasts' k: the narrow cells' d_k
# what fixes the test sentences and their subwords: a cell differing from its base here is left out
SAME_TEST_SET = (
    "test_split",
    "src_lang",
    "tgt_lang",
    "limit_eval",
    "train_split",
    "limit_train",
    "tokenizer",
    "vocab_size",
    "join",
)
METRIC = BLEU()


def source_lengths(run: Run) -> list[int]:
    """Subwords of each test source sentence as the run's data module cuts them (no BOS/EOS)."""
    data = {k: v for k, v in run.results["config"]["data"].items() if k != "_target_"}
    data["dir"] = str(run_data_dir(data))
    try:
        dm = TranslationDataModule(**data)
        src, _ = dm.texts(data["test_split"])
        return [len(ids) for ids in dm.encode(src)]
    except DataError as e:
        raise ReportError(f"source lengths of {run.dir.name}: {e}") from None


def sentence_stats(hyps_by_seed: list[list[str]], refs: list[str]) -> np.ndarray:
    """BLEU's sufficient statistics per sentence, summed over seeds: (sentences, statistics)."""
    return sum(np.array(METRIC._extract_corpus_statistics(h, [refs]), dtype=np.int64) for h in hyps_by_seed)


def bleu(stats: np.ndarray, idx: np.ndarray) -> float:
    return METRIC._compute_score_from_stats(list(stats[idx].sum(0))).score


def delta(base: np.ndarray, cell: np.ndarray, idx: np.ndarray) -> float:
    return bleu(cell, idx) - bleu(base, idx)


def by_length(base: np.ndarray, cell: np.ndarray, lengths: list[int], n_samples: int = 1000, seed: int = 12345) -> dict:
    """Cell minus base per bucket, and each contrast (longer than k minus at most k) with its bootstrap."""
    n = np.asarray(lengths)
    rng = np.random.default_rng(seed)
    out = {"buckets": []}
    for lo, hi in BUCKETS:
        idx = np.flatnonzero((n >= lo) & (n <= (hi if hi is not None else n.max())))
        out["buckets"].append({"range": (lo, hi), "n": len(idx), "delta": delta(base, cell, idx) if len(idx) else None})
    out["contrasts"] = []
    for k in SPLITS:
        short, long = np.flatnonzero(n <= k), np.flatnonzero(n > k)
        if not len(short) or not len(long):
            out["contrasts"].append({"k": k, "value": None})
            continue
        value = delta(base, cell, long) - delta(base, cell, short)
        # the same seed and index sets for every cell: resample i is the same sentences for all of them, so
        # contrasts of different cells can be differenced resample by resample (against_wide)
        boot = np.array(
            [
                delta(base, cell, b_long) - delta(base, cell, b_short)
                for b_short, b_long in (
                    (rng.choice(short, len(short)), rng.choice(long, len(long))) for _ in range(n_samples)
                )
            ]
        )
        out["contrasts"].append(
            {"k": k, **interval(value, boot), "boot": boot, "n_short": len(short), "n_long": len(long)}
        )
    return out


def interval(value: float, boot: np.ndarray) -> dict:
    """95% percentile interval and two-sided bootstrap p of a statistic; p_bound: no resample crossed zero,
    so p is at most what the number of resamples can show."""
    p = min(1.0, 2 * min((boot <= 0).mean(), (boot >= 0).mean()))
    return {
        "value": value,
        "lo": float(np.percentile(boot, 2.5)),
        "hi": float(np.percentile(boot, 97.5)),
        "p": 2 / len(boot) if p == 0 else float(p),
        "p_bound": p == 0,
    }


def against_wide(rows: list[dict]) -> None:
    """Each narrow cell's contrast at k = its d_k minus the mean contrast of the wide-head cells (d_k >= 32,
    no sentence here outgrows them) compared with the same base runs: the base's own length profile, which
    every contrast of that base shares, cancels. Sets row["against_wide"] (None where there is no such cell)."""
    for row in rows:
        row["against_wide"] = None
        at = next((c for c in row["contrasts"] if c["k"] == row["d_k"] and c.get("value") is not None), None)
        wide = [
            c
            for r in rows
            if r["base_key"] == row["base_key"] and r["d_k"] >= 32
            for c in r["contrasts"]
            if c["k"] == row["d_k"]
        ]
        if at is None or not wide:
            continue
        mean_wide = np.mean([c["boot"] for c in wide], axis=0)
        row["against_wide"] = {
            "n_wide": len(wide),
            **interval(at["value"] - np.mean([c["value"] for c in wide]), at["boot"] - mean_wide),
        }


def compare(base: Cell, cell: Cell, lengths: list[int], n_samples: int = 1000) -> dict:
    """by_length of `cell` against `base` on the seeds both have."""
    base_by_seed = {r.seed: r for r in base.runs}
    cell_by_seed = {r.seed: r for r in cell.runs}
    seeds = sorted(base_by_seed.keys() & cell_by_seed.keys())
    if not seeds:
        raise ReportError(f"{cell.label}: no seed in common with the base {base.label}")
    refs = references(base_by_seed[seeds[0]])
    hyps = {}
    for name, runs in (("base", base_by_seed), ("cell", cell_by_seed)):
        hyps[name] = [read_text_lines(hypotheses_path(runs[s])) for s in seeds]
        if any(len(h) != len(refs) for h in hyps[name]) or len(lengths) != len(refs):
            raise ReportError(
                f"{cell.label} against {base.label}: {[len(h) for h in hyps[name]]} hypotheses, "
                f"{len(refs)} references, {len(lengths)} source sentences"
            )
    result = by_length(sentence_stats(hyps["base"], refs), sentence_stats(hyps["cell"], refs), lengths, n_samples)
    return {"seeds": seeds, **result}


def d_k(cell: Cell) -> int:
    return cell.runs[0].flat["model.d_k"]


def rows_of(root: Path, sweep: str, n_samples: int) -> tuple[list[dict], list[str]]:
    runs, unfinished = load_runs(root / sweep, sweep)
    left_out = [f"{sweep}/{d.name}: {why}" for d, why in unfinished]
    cells = group_cells(runs)
    base = next((c for c in cells if c.base), None)
    if base is None:
        raise ReportError(f"{root / sweep} has no finished run of its base cell: nothing to compare with")
    lengths = source_lengths(base.runs[0])
    # the base's runs by what they scored: a base copied into another sweep (table3_b's is table3_a's) is the same
    base_key = (base.label, tuple((r.seed, r.results["metrics"]["test/bleu"]) for r in base.runs))
    rows = []
    for cell in cells:
        if cell is base:
            continue
        theirs, ours = (tuple(c.runs[0].flat.get(f"data.{k}") for k in SAME_TEST_SET) for c in (cell, base))
        if theirs != ours:
            left_out.append(f"{sweep}/{cell.label}: another test set or tokenizer than the base's ({theirs} vs {ours})")
            continue
        rows.append(
            {
                "sweep": sweep,
                "cell": cell.label,
                "base": base.label,
                "h": cell.runs[0].flat["model.heads"],
                "d_k": d_k(cell),
                "beyond": sum(n > d_k(cell) for n in lengths) / len(lengths),
                "base_key": base_key,
                **compare(base, cell, lengths, n_samples),
            }
        )
    return rows, left_out


def fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:+.2f}"


def markdown(sweeps: list[str], rows: list[dict], left_out: list[str]) -> str:
    head = [f"{lo}-{hi}" if hi else f"{lo}+" for lo, hi in BUCKETS]
    counts = dict(zip(head, (b["n"] for b in rows[0]["buckets"])))
    lines = [
        f"# Narrow heads and sentence length: {', '.join(sweeps)}",
        "",
        "Bhojanapalli et al. 2020: a head narrower than the sentence (d_k < n subwords) cannot express every "
        "attention pattern over it. If that bottleneck is what a narrow cell pays for, its loss against the "
        "base lies on sources longer than its d_k, and the contrast (loss beyond k minus loss within k) is "
        "negative at k = d_k. Test BLEU of cell minus base by source length in subwords (seeds pooled; "
        f"test sentences per bucket: {', '.join(f'{k}: {v}' for k, v in counts.items())}); contrasts with "
        "95% bootstrap intervals (sentences resampled, all seeds of one together). Every contrast of a sweep "
        "shares its base's numbers: read a narrow cell's contrast beside the wide-head cells' (d_k ≥ 32).",
        "",
        "| sweep | cell | d_k | sources longer than d_k | seeds "
        f"| Δ {head[0]} | Δ {head[1]} | Δ {head[2]} | contrast k = 8 [95% CI] | p "
        "| contrast k = 16 [95% CI] | p |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cs = []
        for c in r["contrasts"]:
            cs += (
                ["—", "—"]
                if c["value"] is None
                else [f"{c['value']:+.2f} [{c['lo']:+.2f}, {c['hi']:+.2f}]", fmt_p(c["p"], c["p_bound"])]
            )
        lines.append(
            f"| {r['sweep']} | {r['cell']} | {r['d_k']} | {r['beyond']:.0%} | {len(r['seeds'])} | "
            + " | ".join(fmt(b["delta"]) for b in r["buckets"])
            + " | "
            + " | ".join(cs)
            + " |"
        )
    narrow = [r for r in rows if r["against_wide"] is not None]
    if narrow:
        lines += [
            "",
            "Each narrow cell's contrast at k = its d_k minus the mean contrast of the wide-head cells "
            "(d_k ≥ 32) against the same base runs, resample by resample: the base's own length profile cancels. "
            "Negative: the cell loses more beyond its d_k than wide heads do, as a rank bound on the sentence "
            "would have it; zero: its loss does not depend on whether the sentence outgrows its heads.",
            "",
            "| sweep | cell | d_k | wide-head cells | contrast minus theirs [95% CI] | p |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for r in narrow:
            a = r["against_wide"]
            lines.append(
                f"| {r['sweep']} | {r['cell']} | {r['d_k']} | {a['n_wide']} | {a['value']:+.2f} "
                f"[{a['lo']:+.2f}, {a['hi']:+.2f}] | {fmt_p(a['p'], a['p_bound'])} |"
            )
    if left_out:
        lines += ["", "Left out:", *[f"- {line}" for line in left_out]]
    return "\n".join(lines) + "\n"


def write(root: Path, sweeps: list[str], out: Path, n_samples: int = 1000) -> Path:
    rows, left_out = [], []
    for sweep in sweeps:
        if not (root / sweep).is_dir():
            raise ReportError(f"no {root / sweep}: run `make sweep SWEEP={sweep}` first, or drop it from --sweeps")
        r, lo = rows_of(root, sweep, n_samples)
        rows += r
        left_out += lo
    against_wide(rows)
    if not rows:
        raise ReportError(f"no cell besides a base in {', '.join(sweeps)}: nothing to compare")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "lengths.md"
    md = with_footer(with_back_link(markdown(sweeps, rows, left_out)), __spec__.name)
    atomic_write(path, md)
    atomic_write(path.with_suffix(".html"), page(first_heading(md, "lengths"), md))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweeps", default="table3_a,table3_b", help="comma-separated sweeps")
    parser.add_argument("--root", type=Path, default=Path("results"))
    parser.add_argument("--out", type=Path, default=Path("reports"))
    parser.add_argument("--samples", type=int, default=1000, help="bootstrap resamples per contrast")
    args = parser.parse_args(argv)
    try:
        path = write(args.root, [s for s in args.sweeps.split(",") if s], args.out, args.samples)
        index = write_index(args.out, args.root)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(map(str, [path, *index])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
