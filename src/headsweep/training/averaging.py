"""Checkpoint averaging (the paper averages the last 5 checkpoints): the weights' element-wise mean,
saved as a checkpoint `load_module` reads, and training's last step when `average_last` > 1.

The paper's last 5 checkpoints span the last few percent of 100k steps. After a decay to zero within a
short budget, earlier checkpoints are models still improving: averaging the last 5 of every 100 steps of
`make train` (steps 900-1,300) cost 0.85 greedy BLEU against the last weights. So training averages only
checkpoints written in the schedule's tail (`average_from`, a share of the budget)."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import torch

from headsweep.training.runs import RunError, write_lines
from headsweep.training.translate import corpus_scores, translate_batches

log = logging.getLogger(__name__)
AVERAGED = "averaged.ckpt"
_STEP = re.compile(r"step(\d+)")


def average_state_dicts(paths: list[str | Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the model weights of several checkpoints (the paper averages the last 5)."""
    if not paths:
        raise RunError("no checkpoints to average")
    total: dict[str, torch.Tensor] | None = None
    for p in paths:
        state = torch.load(p, map_location="cpu", weights_only=False)["state_dict"]
        if total is None:
            total = {k: v.detach().clone().double() if v.is_floating_point() else v.clone() for k, v in state.items()}
        else:
            if state.keys() != total.keys():
                raise RunError(f"{p} has other parameters than {paths[0]}: checkpoints of different models")
            for k, v in state.items():
                if v.is_floating_point():
                    total[k] += v.double()
    return {k: (v / len(paths)).float() if v.is_floating_point() else v for k, v in total.items()}


def checkpoint_step(path: str | Path) -> int | None:
    """The training step in a checkpoint's file name (step000480.ckpt -> 480); None for last.ckpt etc."""
    m = _STEP.fullmatch(Path(path).stem)
    return int(m.group(1)) if m else None


def checkpoints_to_average(ckpt: Path, n: int) -> list[Path]:
    """The n checkpoints (step*.ckpt, by step number) ending at `ckpt`, or the run's last n if `ckpt`
    carries no step (last.ckpt)."""
    by_step = sorted((s, p) for p in ckpt.parent.glob("step*.ckpt") if (s := checkpoint_step(p)) is not None)
    up_to = checkpoint_step(ckpt)
    if up_to is not None:
        by_step = [(s, p) for s, p in by_step if s <= up_to]
    if len(by_step) < n:
        raise RunError(
            f"--avg {n} needs {n} checkpoints but {ckpt.parent} has {len(by_step)} "
            f"(step*.ckpt{f' up to step {up_to}' if up_to is not None else ''}); pass --avg {len(by_step)} or less"
        )
    return [p for _, p in by_step[-n:]]


def load_averaged(module, paths: list[Path]):
    """A fresh module with `module`'s settings and the element-wise mean of the checkpoints' weights."""
    averaged = type(module)(**module.hparams)
    averaged.load_state_dict(average_state_dicts(paths))
    return averaged.to(module.device).eval()


def save_averaged(module, paths: list[Path], out: Path) -> None:
    """A checkpoint that `runs.load_module` reads: weights and hyper-parameters, no optimizer state."""
    last = torch.load(paths[-1], map_location="cpu", weights_only=False)
    keep = ("epoch", "global_step", "pytorch-lightning_version", "hyper_parameters", "hparams_name")
    ckpt = {k: last[k] for k in keep if k in last}
    ckpt["state_dict"] = {k: v.cpu() for k, v in module.state_dict().items()}
    ckpt["averaged_from"] = [str(p) for p in paths]
    tmp = out.with_name(out.name + ".tmp")
    torch.save(ckpt, tmp)
    os.replace(tmp, out)


def budget_spent(path: Path) -> float:
    """The share of the training budget spent when a checkpoint was written (1.0 if it does not say)."""
    ckpt = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    return ckpt.get("headsweep", {}).get("budget_spent", 1.0)


def tail_checkpoints(ckpt_dir: Path, n: int, after: float) -> dict[Path, float]:
    """The last n step checkpoints written once `after` of the training budget was spent, with that share."""
    paths = sorted(ckpt_dir.glob("step*.ckpt"), key=lambda p: checkpoint_step(p) or -1)
    spent = {p: budget_spent(p) for p in paths}
    return dict([(p, s) for p, s in spent.items() if s >= after][-n:])


def average_at_end(module, datamodule, ckpt_dir: Path, n: int, precision: str, after: float = 0.0) -> tuple[dict, dict]:
    """Training's last step when `average_last` > 1: average the last n step checkpoints written after
    `after` of the budget (the final step's among them), save the weights as checkpoints/averaged.ckpt,
    and score them on the test split with greedy and beam search as trainer.test scored the last
    weights. Returns (results["averaged"], test_avg/* metrics)."""
    tail = tail_checkpoints(ckpt_dir, n, after)
    paths = list(tail)
    if len(paths) < 2:
        log.warning(
            "average_last=%d, average_from=%g: only %d checkpoint(s) in %s, nothing to average",
            n,
            after,
            len(paths),
            ckpt_dir,
        )
        return {"skipped": f"only {len(paths)} checkpoint(s) to average after {after:g} of the budget"}, {}
    averaged = load_averaged(module, paths)
    save_averaged(averaged, paths, ckpt_dir / AVERAGED)
    hp, split = module.hparams, datamodule.test_split
    refs = datamodule.texts(split)[1]
    out_dir = ckpt_dir.parent / "hypotheses"
    entry = {
        "checkpoints": [str(p) for p in paths],
        "checkpoint": str(ckpt_dir / AVERAGED),
        "average_from": after,
        "budget_spent": [round(s, 4) for s in tail.values()],
        "scores": {},
        "hypotheses": {},
    }
    for name, beam in (("greedy", 1), ("beam", hp.test_beam_size)):
        hyps = translate_batches(averaged, datamodule.dataloader(split), len(refs), beam_size=beam, precision=precision)
        key = f"{split}.{name}"
        entry["scores"][key] = corpus_scores(hyps, refs)
        entry["hypotheses"][key] = str(write_lines(out_dir / f"{key}-avg{len(paths)}.{datamodule.tgt_lang}", hyps))
    beam_scores = entry["scores"][f"{split}.beam"]
    metrics = {
        "test_avg/bleu": beam_scores["bleu"],
        "test_avg/chrf": beam_scores["chrf"],
        "test_avg/bleu_greedy": entry["scores"][f"{split}.greedy"]["bleu"],
    }
    return entry, metrics
