"""`python -m headsweep.analysis.analyze --ckpt PATH` (make analyze): do heads specialise? (Michel et al.
2019, Voita et al. 2019)

For one trained model, over one split (val by default):

- importance  I_h = E_x |dL(x)/dxi_h| of every head (headsweep.analysis.importance), each layer normalised by
              its l2 norm; heat map per attention kind.
- ablation    the teacher-forced loss over the whole split, with a standard error, with one head removed
              at a time (Michel's Table 1 asks this of BLEU, which on a few hundred decoded sentences
              is noise at one head's size); loss and BLEU with all but a layer's most important head
              removed (his Table 2).
- pruning     heads removed in order of increasing importance, `step` of the pool at a time, within each
              attention kind and over all heads together; random orders as the baseline; the largest
              fraction removed before BLEU first drops more than `tolerance` below the full model.
- roles       confidence, positional and rare-word shares, entropy and attention distance per head
              (headsweep.analysis.roles), a dominant role at the given thresholds, importance against
              confidence, and per layer the share of heads with each role, mean entropy and distance.
- redundancy  Jensen-Shannon divergence between every two heads of a kind on the decoded sentences
              (headsweep.analysis.redundancy), clustered; near-duplicate groups; nearest twin vs the loss increase.
- maps        attention heat maps (layers x heads per kind) of chosen sentences.

Fixed heads (model.fixed_heads: positional patterns, not learned) are analysed like every other head and
labelled as such in analysis.json (fixed_heads), the tables, the plots and the summary (analysis/fixed.py).

Importance, roles and the single-head losses use every sentence of the split (one pass each). Every
pruning step and best-head-only model greedy-decodes the first --max-sentences sentences of the split,
which is where the time goes: see `--max-sentences` and `--step` in --help.

Writes <run>/analysis/{analysis.md, analysis.json, *.png}, logs the same to a W&B run (job_type
"analysis", offline unless WANDB_MODE says otherwise) and prints a summary.
reports/pages/compare.py compares the analyses of a head-dropout sweep's runs (`make report`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

import torch

from headsweep.analysis.fixed import pattern_of
from headsweep.analysis.maps import resolve_sentences
from headsweep.analysis.markdown import markdown
from headsweep.analysis.measures import FILES, analysis_record, attention_maps, measure, write_plots
from headsweep.analysis.roles import METRICS
from headsweep.analysis.settings import AnalysisError, AnalysisSettings
from headsweep.analysis.summary import summary
from headsweep.data import DataError
from headsweep.model import ATTENTION_KINDS
from headsweep.training.runs import RunError, load_run

log = logging.getLogger(__name__)


def analyze(
    ckpt: str | Path,
    settings: AnalysisSettings | None = None,
    *,
    out_dir: str | Path | None = None,
    wandb_mode: str | None = None,
) -> tuple[dict, Path]:
    """Run every part of the analysis (settings: conf/analysis/default.yaml's unless given); returns (the
    analysis as in analysis.json, the output directory)."""
    s = settings or AnalysisSettings.defaults()
    t_start = time.perf_counter()
    run = load_run(ckpt)
    run.datamodule.ensure_split(s.split)
    out = Path(out_dir) if out_dir else run.dir / "analysis"
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(s.seed)
    map_specs = resolve_sentences(s.sentences, run.module, run.datamodule, s.split)  # bad specs fail before the work
    found = measure(run.module, run.datamodule, s)
    write_plots(out, found, s.tolerance)
    maps = attention_maps(run.module, run.datamodule, map_specs, out)
    analysis = analysis_record(run, s, found, maps)
    analysis["cost"]["total_seconds"] = round(time.perf_counter() - t_start, 1)
    (out / FILES["markdown"]).write_text(markdown(analysis))
    (out / FILES["json"]).write_text(json.dumps(analysis, indent=1))
    log_to_wandb(analysis, out, run.dir, run.results, wandb_mode)
    return analysis, out


def wandb_tables(a: dict) -> dict[str, tuple[list[str], list[list]]]:
    """The analysis's tables for W&B, name -> (columns, rows); a head's `fixed` column holds its pattern
    (model.fixed_heads) or "" for a learned head, so a dashboard can tell fixed heads apart."""
    fixed = lambda kind, head: pattern_of(a.get("fixed_heads"), kind, head) or ""  # noqa: E731
    imp = a["importance"]
    tables = {
        "importance_table": (
            ["kind", "layer", "head", "fixed", "importance_raw", "importance_normalised"],
            [
                [k, layer, h, fixed(k, h), imp["raw"][k][layer][h], imp["normalised"][k][layer][h]]
                for k in ATTENTION_KINDS
                for layer in range(len(imp["raw"][k]))
                for h in range(len(imp["raw"][k][layer]))
            ],
        )
    }
    cols = ["kind", "layer", "head", "loss", "delta_loss", "delta_loss_se"]
    tables["single_head"] = (
        [*cols[:3], "fixed", *cols[3:]],
        [[*(r[c] for c in cols[:3]), fixed(r["kind"], r["head"]), *(r[c] for c in cols[3:])] for r in a["single_head"]],
    )
    cols = ["kind", "layer", "kept_head", "bleu", "delta_bleu", "loss", "delta_loss", "delta_loss_se"]
    tables["best_head_only"] = (
        [*cols[:3], "fixed", *cols[3:]],
        [
            [*(r[c] for c in cols[:3]), fixed(r["kind"], r["kept_head"]), *(r[c] for c in cols[3:])]
            for r in a["best_head_only"]
        ],
    )
    rows = []
    for pool, p in a["pruning"]["pools"].items():
        for i, f in enumerate(a["pruning"]["fractions"]):
            rnd = p["random"]
            rows.append(
                [
                    pool,
                    f,
                    p["n_removed"][i],
                    p["importance"]["bleu"][i],
                    p["importance"]["loss"][i],
                    rnd["bleu_mean"][i] if rnd["runs"] else None,
                    rnd["bleu_sd"][i] if rnd["runs"] else None,
                ]
            )
    tables["pruning"] = (["pool", "fraction", "n_removed", "bleu", "loss", "random_bleu_mean", "random_bleu_sd"], rows)
    cols = ["kind", "layer", "head", "importance", "delta_loss", *METRICS, "role"]
    tables["roles"] = (
        [*cols[:3], "fixed", *cols[3:]],
        [
            [*(r[c] for c in cols[:3]), fixed(r["kind"], r["head"]), *(r[c] for c in cols[3:])]
            for r in a["roles"]["heads"]
        ],
    )
    return tables


def log_to_wandb(a: dict, out: Path, run_dir: Path, results: dict, mode: str | None) -> None:
    """A new W&B run in the training run's project, job_type "analysis": images, tables, summary."""
    import wandb

    mode = mode or os.environ.get("WANDB_MODE") or "offline"
    wandb_cfg = results["config"].get("logger", {}).get("wandb", {}) or {}
    run = wandb.init(
        project=wandb_cfg.get("project") or "headsweep",
        name=f"{a['run_name']}-analysis",
        group=wandb_cfg.get("group") or a.get("sweep"),
        job_type="analysis",
        dir=str(run_dir),
        mode=mode,
        config={"analysis": a["settings"], "split": a["split"], "model": a["model"], "checkpoint": a["checkpoint"]},
    )
    try:
        payload = {
            f"analysis/{Path(name).stem}": wandb.Image(str(out / name))
            for key, name in a["files"].items()
            if name.endswith(".png")
        }
        for m in a["attention_maps"]:
            payload.update(
                {
                    f"analysis/attention/{m['tag']}/{kind}": wandb.Image(str(out / name))
                    for kind, name in m["files"].items()
                }
            )
        payload.update(
            {f"analysis/{name}": wandb.Table(columns=cols, data=rows) for name, (cols, rows) in wandb_tables(a).items()}
        )
        run.log(payload)
        run.summary.update(
            {
                "analysis/bleu_full": a["full"]["bleu"],
                "analysis/loss_full": a["full"]["loss"],
                **{
                    f"analysis/prunable/{pool}": p["prunable"]["importance"]
                    for pool, p in a["pruning"]["pools"].items()
                },
            }
        )
    finally:
        run.finish()


# ----------------------------------------------------------------------------- CLI


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, AnalysisSettings]:
    """The command line, its defaults from conf/analysis/default.yaml; (the arguments, the settings)."""
    d = AnalysisSettings.defaults()
    p = argparse.ArgumentParser(
        prog="python -m headsweep.analysis.analyze",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--ckpt", required=True, help="a checkpoint file or a run directory (its checkpoints/last.ckpt)")
    p.add_argument("--split", default=d.split, help="the run's split, or another local file pair")
    p.add_argument(
        "--max-sentences",
        type=int,
        default=d.max_sentences,
        help="decode the first N sentences for each pruning step and best-head-only model (0 = all). "
        "At the defaults the 72-head model has 78 such models, each decoding them once (capped at "
        "twice the source length); importance, roles and the single-head losses always use the "
        "whole split",
    )
    p.add_argument(
        "--random-orders",
        type=int,
        default=d.random_orders,
        help="random pruning orders per pool, the baseline (0 = none)",
    )
    p.add_argument("--step", type=float, default=d.step, help="fraction of the pool removed per pruning step")
    p.add_argument(
        "--sentences",
        nargs="+",
        default=list(d.sentences),
        help="attention maps of these: a row index of the split (target side: its reference) "
        "or a source text in quotes (target side: the model's translation)",
    )
    p.add_argument(
        "--pos-threshold",
        type=float,
        default=d.pos_threshold,
        help="positional role if the max falls on the previous / next token for at least this share",
    )
    p.add_argument(
        "--rare-threshold",
        type=float,
        default=d.rare_threshold,
        help="rare-word role if the max falls on the least frequent token for at least this share",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=d.tolerance,
        help="BLEU points below the full model still counted as prunable",
    )
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the random pruning orders")
    p.add_argument(
        "--redundancy-threshold",
        type=float,
        default=d.redundancy_threshold,
        help="heads whose attention averages at most this Jensen-Shannon divergence (bits) apart are "
        "named near-duplicates",
    )
    p.add_argument("--out", default=None, help="output directory (default: <run dir>/analysis)")
    p.add_argument(
        "--wandb-mode",
        choices=("online", "offline", "disabled"),
        default=None,
        help="W&B mode (default: $WANDB_MODE, else offline)",
    )
    args = p.parse_args(argv)
    return args, AnalysisSettings(**{k: getattr(args, k) for k in d.as_dict()})


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    try:
        args, settings = parse_args(argv)
        analysis, out = analyze(args.ckpt, settings, out_dir=args.out, wandb_mode=args.wandb_mode)
    except (RunError, DataError, AnalysisError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(summary(analysis, out), flush=True)


if __name__ == "__main__":
    main()
