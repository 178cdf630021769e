"""`make prune CKPT=<run dir> [LAMBDAS="0.01 0.03 0.1"] [STEPS=300]`: prune heads while fine-tuning, with
hard-concrete gates and an L0 penalty (Voita et al. 2019), beside Michel et al.'s post-hoc pruning at the
same head counts.

    python -m headsweep.analysis.prune --ckpt RUN [--lambdas 0.01 0.03 0.1] [--steps 300] [--split SPLIT]

For each lambda, the finished run's model is fine-tuned for --steps steps with model.concrete_gates=true
and module.l0_lambda=lambda: an ordinary training run in <run>/prune/l0-<lambda>/ (its CSV logs the open
gates per layer, gates/<kind>.<layer>, at every step; its results.json holds the final gates). Then, on
the same sentences of --split (greedy; the analysis' length cap, MAX_LEN_FACTOR):

- concrete: the fine-tuned model, its closed gates removing their heads;
- michel:   the original model with, in each attention kind, as many heads removed as the concrete model
            closed there, least important first (Michel's importance on the val split, each layer
            normalised by its l2 norm), not fine-tuned;
- kept heads of both, and how many of the concrete model's kept heads are among the most important.

Writes <run>/prune/{prune.json, prune.md, prune.png} and prints the table.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from omegaconf import OmegaConf

from headsweep.analysis.ablation import DECODING, Evaluator
from headsweep.analysis.importance import head_importance, normalise_per_layer, pruning_order
from headsweep.analysis.settings import AnalysisError
from headsweep.data import DataError, make_batches
from headsweep.model import ATTENTION_KINDS
from headsweep.reporting.markdown import table
from headsweep.reporting.plots import pyplot, save_figure
from headsweep.training.checks import ConfigError
from headsweep.training.runs import RunError, load_run, read_results
from headsweep.training.train import train

log = logging.getLogger(__name__)
DEFAULTS = dict(lambdas=(0.0, 0.01, 0.03, 0.1), steps=300, peak_lr=5e-4, gate_lr=0.05, max_sentences=0)


def finetune_config(
    results: dict, checkpoint: Path, out_dir: Path, lam: float, steps: int, peak_lr: float, gate_lr: float
) -> dict:
    """The finished run's own resolved config, turned into an L0 fine-tuning run of its weights; every path
    inside the run directory (logs, checkpoints) moved to `out_dir`."""
    old = str(results["config"]["paths"]["output_dir"]).rstrip("/")
    cfg = json.loads(json.dumps(results["config"]).replace(json.dumps(old)[1:-1], json.dumps(str(out_dir))[1:-1]))
    cfg["model"]["concrete_gates"] = True
    cfg["module"].update(
        model=cfg["model"],
        l0_lambda=lam,
        gate_lr=gate_lr,
        peak_lr=peak_lr,
        warmup_steps=max(1, steps // 10),
        schedule="linear",
        test_beam_size=1,
        eval_every=1,
    )
    cfg["trainer"].update(
        max_steps=steps,
        val_check_interval=steps,
        check_val_every_n_epoch=None,
        log_every_n_steps=max(1, min(20, steps // 20)),
    )  # the gates' course, step by step
    cfg["callbacks"]["checkpoint"].update(every_n_train_steps=steps, every_n_epochs=None, save_top_k=1)
    cfg.update(
        init_from=str(checkpoint),
        run_name=f"{results.get('run_name')}-l0-{lam:g}",
        sweep=None,
        average_last=0,
        export_dir=None,
        tags=[*cfg.get("tags", []), "l0-prune"],
        threads=None,
    )  # this process's threads, not those the run had beside other sweep jobs
    # its own W&B group and job type: not one more seed of the cell the model was trained in
    cfg["cell"] = cfg["run_name"]
    if isinstance(cfg.get("logger", {}).get("wandb"), dict):
        cfg["logger"]["wandb"].update(group=cfg["cell"], job_type="l0-prune")
    return cfg


def kept_heads(open_: dict[str, list[list[bool]]]) -> dict[str, list[tuple[int, int]]]:
    return {
        kind: [(layer, h) for layer, heads in enumerate(layers) for h, o in enumerate(heads) if o]
        for kind, layers in open_.items()
    }


def michel_match(norm: dict, kept: dict[str, list[tuple[int, int]]]) -> list[tuple[str, int, int]]:
    """Heads Michel's order removes to keep, in each kind, as many heads as `kept` has there."""
    removed = []
    for kind in ATTENTION_KINDS:
        order = pruning_order(norm, [kind])  # least important first
        removed += order[: len(order) - len(kept[kind])]
    return removed


def overlap_with_top(norm: dict, kept: dict[str, list[tuple[int, int]]]) -> dict[str, float | None]:
    """Per kind: the share of the concrete model's k kept heads that are among Michel's k most important."""
    out = {}
    for kind in ATTENTION_KINDS:
        k = len(kept[kind])
        top = {(layer, h) for _, layer, h in pruning_order(norm, [kind])[::-1][:k]}
        out[kind] = len(top & set(kept[kind])) / k if k else None
    return out


def prune(
    ckpt: str | Path,
    lambdas=DEFAULTS["lambdas"],
    steps: int = DEFAULTS["steps"],
    split: str | None = None,
    peak_lr: float = DEFAULTS["peak_lr"],
    gate_lr: float = DEFAULTS["gate_lr"],
    max_sentences: int = DEFAULTS["max_sentences"],
) -> tuple[dict, Path]:
    if not lambdas or any(lam < 0 for lam in lambdas):
        raise AnalysisError(f"--lambdas must be one or more values >= 0, got {list(lambdas)}")
    if steps < 10:
        raise AnalysisError(f"--steps must be >= 10, got {steps}")
    base = load_run(ckpt)
    if base.module.net.cfg.concrete_gates:
        raise AnalysisError(
            f"{base.dir} already has concrete gates (an L0 fine-tuning run): prune the run it "
            f"started from ({base.results['config'].get('init_from')})"
        )
    dm, net, pad = base.datamodule, base.module.net, base.datamodule.pad_id
    split = split or base.results["config"]["data"]["test_split"]
    dm.ensure_split(split)
    out = base.dir / "prune"
    out.mkdir(exist_ok=True)

    val_src, val_ref = dm.texts(dm.val_split)
    batches = make_batches(dm.encode(val_src), dm.encode(val_ref), dm.max_tokens)
    norm = normalise_per_layer(head_importance(net, batches, pad))
    src, refs = dm.texts(split)
    n = len(src) if max_sentences == 0 else min(max_sentences, len(src))
    eval_batches = make_batches(dm.encode(src[:n]), dm.encode(refs[:n]), dm.eval_max_tokens)
    michel = Evaluator(base.module, eval_batches, refs[:n])
    full = michel([])
    total = sum(norm[kind].numel() for kind in ATTENTION_KINDS)
    rows = []
    for lam in lambdas:
        run_dir = finetune(base, out / f"l0-{lam:g}", lam, steps, peak_lr, gate_lr)
        tuned = load_run(run_dir)
        gates = read_results(run_dir)["gates"]
        kept = kept_heads(gates["open"])
        concrete = Evaluator(tuned.module, eval_batches, refs[:n])([])
        removed = michel_match(norm, kept)
        gone = set(removed)
        rows.append(
            {
                "lambda": lam,
                "run_dir": str(run_dir),
                "heads_kept": sum(map(len, kept.values())),
                "kept_per_kind": {k: len(v) for k, v in kept.items()},
                "concrete": concrete,
                "michel": michel(removed),
                "kept": {k: [list(x) for x in v] for k, v in kept.items()},
                "michel_kept": {
                    k: [
                        [layer, h]
                        for layer in range(norm[k].size(0))
                        for h in range(norm[k].size(1))
                        if (k, layer, h) not in gone
                    ]
                    for k in ATTENTION_KINDS
                },
                "kept_among_most_important": overlap_with_top(norm, kept),
            }
        )
        log.info(
            "lambda %g: %d of %d heads kept; BLEU concrete %.2f, Michel at the same counts %.2f",
            lam,
            rows[-1]["heads_kept"],
            total,
            concrete["bleu"],
            rows[-1]["michel"]["bleu"],
        )
    record = {
        "checkpoint": str(base.checkpoint),
        "split": split,
        "sentences": n,
        "heads": total,
        "steps": steps,
        "peak_lr": peak_lr,
        "gate_lr": gate_lr,
        "full": full,
        "rows": rows,
        "decoding": DECODING,
        "importance": "Michel et al. 2019 on the val split, each layer normalised by its l2 norm",
    }
    (out / "prune.json").write_text(json.dumps(record, indent=1))
    (out / "prune.md").write_text(markdown(record))
    plot(record, out / "prune.png")
    return record, out


def finetune(base, out_dir: Path, lam: float, steps: int, peak_lr: float, gate_lr: float) -> Path:
    """One L0 fine-tuning run (skipped when it already finished: rerunning `make prune` resumes)."""
    cfg = finetune_config(base.results, base.checkpoint, out_dir, lam, steps, peak_lr, gate_lr)
    try:
        train(OmegaConf.create(cfg))
    except ConfigError as e:
        raise RunError(str(e)) from None
    return out_dir


def markdown(record: dict) -> str:
    full = record["full"]["bleu"]
    lines = [
        "# Pruning heads while training (hard-concrete gates, L0) vs Michel's post-hoc pruning",
        "",
        f"{record['split']}, {record['sentences']} sentences, {record['decoding']}; full model BLEU {full:.2f}, "
        f"{record['heads']} heads. Fine-tuning: {record['steps']} steps, peak LR {record['peak_lr']:g}, "
        f"gate LR {record['gate_lr']:g}. Michel: {record['importance']}, no fine-tuning.",
        "",
    ]
    control = [r for r in record["rows"] if r["lambda"] == 0]
    if control:  # the concrete models had extra training steps that Michel's did not
        bleu = control[0]["concrete"]["bleu"]
        lines += [
            f"lambda 0 is the control: the same fine-tuning with gates and no penalty, {bleu:.2f} BLEU "
            f"({bleu - full:+.2f} against the model it started from), which is what the fine-tuning alone "
            "gives; compare the concrete models with it, and Michel's (not fine-tuned) with the full "
            "model.",
            "",
        ]
    rows = []
    for r in record["rows"]:
        k, top = r["kept_per_kind"], r["kept_among_most_important"]
        share = " / ".join("-" if top[x] is None else f"{top[x]:.0%}" for x in ATTENTION_KINDS)
        rows.append(
            [
                f"{r['lambda']:g}",
                r["heads_kept"],
                k["enc_self"],
                k["dec_self"],
                k["cross"],
                f"{r['concrete']['bleu']:.2f}",
                f"{r['michel']['bleu']:.2f}",
                share,
            ]
        )
    lines += table(
        [
            "lambda",
            "heads kept",
            "enc self",
            "dec self",
            "cross",
            "BLEU concrete",
            "BLEU Michel, same counts",
            "kept among the most important (enc/dec/cross)",
        ],
        rows,
    )
    lines += ["", "Kept heads (layer.head) of the concrete-gate models:", ""]
    for r in record["rows"]:
        kept = "; ".join(
            f"{kind}: " + (" ".join(f"{layer}.{h}" for layer, h in r["kept"][kind]) or "none")
            for kind in ATTENTION_KINDS
        )
        lines.append(f"- lambda {r['lambda']:g}: {kept}")
    return "\n".join(lines) + "\n"


def prune_figure(record: dict):
    """BLEU against the heads kept, each gate point named by its λ: above it, to its right, or to its left where
    the next point is close (its label would run into that one's) or where it is the last (the axes end there)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    rows = sorted(record["rows"], key=lambda r: r["heads_kept"])
    x = [r["heads_kept"] for r in rows]
    ax.plot(x, [r["concrete"]["bleu"] for r in rows], "o-", label="hard-concrete gates + L0 (fine-tuned)")
    ax.plot(x, [r["michel"]["bleu"] for r in rows], "s--", label="Michel importance, same counts (post hoc)")
    span = (max(x) - min(x)) or 1
    for i, r in enumerate(rows):
        left = i == len(rows) - 1 or x[i + 1] - x[i] < 0.12 * span
        ax.annotate(
            f"λ={r['lambda']:g}",
            (r["heads_kept"], r["concrete"]["bleu"]),
            fontsize=7,
            textcoords="offset points",
            xytext=(-4, 6) if left else (4, 6),
            ha="right" if left else "left",
        )
    ax.axhline(record["full"]["bleu"], color="grey", lw=0.8, ls=":", label=f"all {record['heads']} heads")
    ax.margins(y=0.1)  # room above the top points for their labels
    ax.set_xlabel("heads kept")
    ax.set_ylabel(f"BLEU ({record['split']}, greedy)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot(record: dict, path: Path) -> None:
    fig = prune_figure(record)
    save_figure(fig, path, dpi=120)
    pyplot().close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", required=True, help="a finished run directory or checkpoint (trained without gates)")
    p.add_argument(
        "--lambdas",
        type=float,
        nargs="+",
        default=list(DEFAULTS["lambdas"]),
        help="L0 penalty weights; 0 is the control (fine-tuning with gates, no penalty)",
    )
    p.add_argument("--steps", type=int, default=DEFAULTS["steps"], help="fine-tuning steps per lambda")
    p.add_argument("--split", default=None, help="evaluation split (default: the run's test split)")
    p.add_argument("--peak-lr", type=float, default=DEFAULTS["peak_lr"], help="fine-tuning peak learning rate")
    p.add_argument("--gate-lr", type=float, default=DEFAULTS["gate_lr"], help="learning rate of the gates' log alpha")
    p.add_argument(
        "--max-sentences", type=int, default=DEFAULTS["max_sentences"], help="evaluate the first N (0 = all)"
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    try:
        record, out = prune(
            args.ckpt, args.lambdas, args.steps, args.split, args.peak_lr, args.gate_lr, args.max_sentences
        )
    except (RunError, DataError, AnalysisError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(markdown(record) + f"\nwritten: {out}/prune.md, prune.json, prune.png", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
