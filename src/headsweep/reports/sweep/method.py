"""The method paragraphs of a sweep's page: how a verdict is reached over seeds (Table 3's rule), what the
paired bootstrap says and does not, which paper row a cell is set beside, how attention FLOPs are counted."""

from __future__ import annotations

from headsweep.reports.pages.verdicts import ALPHA
from headsweep.reports.sweep.cells import Cell
from headsweep.sizes import FLOPS_CONTEXT

SEEDS_RULE = (
    "Δ BLEU test, 95% CI, p Holm and the verdicts (What the numbers say): Table 3's rule "
    "(headsweep.reports.pages.verdicts), over seeds, the unit of replication. Δ: the cell's mean test BLEU minus "
    "its reference's; 95% CI: Welch's interval of that difference over the seeds' test BLEU, with Welch's p "
    "(scipy.stats.ttest_ind, equal_var=False); p Holm: the Welch p-values adjusted by Holm's step-down method "
    "across the page's cells, each compared with one base (family-wise error {alpha:g}). A cell reads better or "
    "worse only where p Holm < {alpha:g}; inconclusive otherwise, and with fewer than 2 seeds on a side (no "
    "interval). At 3 seeds Welch's test has little power: inconclusive means not shown, not no difference."
)
POOLING = (
    "Paired bootstrap (each cell's details; test-set noise within a seed, not a verdict): sacreBLEU's paired "
    "bootstrap ({n} resamples, `--samples`) of the cell against its reference on the test split, seeds pooled: "
    "each side's hypotheses of the seeds both cells have, concatenated in seed order, against the references "
    "repeated once per seed; so a resample draws (sentence, seed) pairs and compares the two cells on the same "
    "ones. p <= {floor:.3f}: no resample favoured the base, the smallest p {n} resamples can give "
    "(1 / ({n} + 1)), so a bound, not a value. It resamples sentences, never seeds: it says how much the choice "
    "of test sentences alone moves the gap, ignores the seed-to-seed spread, and so calls gaps significant that "
    "the seeds do not support. No verdict rests on it."
)
PAPER = (
    "Paper: Vaswani et al. 2017, Table 3 (newstest2013 dev PPL per wordpiece and BLEU, 100k steps on WMT14 "
    "en→de), the row with the same settings, sizes relative to the base cell: our base (its sizes in Protocol "
    "above; d_model 256 by default) stands for the paper's base (d_model 512, N 6, d_ff 2048, d_k = d_v = 64), "
    "so our d_k 16 at d_model 256 is the paper's d_k 32; our PPL is per subword on our val split."
)
FLOPS = (
    "Attention FLOPs per token: the forward FLOPs of every attention sublayer (encoder self, decoder self, "
    "cross) per token, at {context} tokens of context ({per} for each sentence pair an example holds), counted as "
    "Hoffmann et al. 2022 (appendix F) do: 2 per multiply-add of the projections, QK^T and the weighted values, 3 "
    "per attention weight for the softmax."
)


def method_notes(cells: list[Cell], n_samples: int, signature: str | None) -> list[str]:
    """The method's paragraphs: the verdict rule, the bootstrap (n_samples resamples, its sacreBLEU signature),
    the paper's row and the FLOPs, at the context lengths the page's cells are counted at."""
    contexts = " or ".join(map(str, sorted({c.row["flops_context"] for c in cells})))
    return [
        SEEDS_RULE.format(alpha=ALPHA),
        POOLING.format(n=n_samples, floor=1 / (n_samples + 1)),
        PAPER,
        FLOPS.format(context=contexts, per=FLOPS_CONTEXT),
    ] + [f"sacreBLEU paired bootstrap signature: `{signature}`."] * bool(signature)
