"""How far a model's attention moves in its first steps (issue 54), where the cells of an ablation should agree
unless they vary it on purpose: the init check (model.diagnostics) makes the start of every cell comparable,
this makes the steps comparable.

From its init (torch.manual_seed(seed)), the model takes STEPS Adam steps at its peak rate with the run's betas
and eps (no warmup: the check asks what the peak rate does; warmup scales every cell's rate alike), per-matrix
rates under lr_scaling mup (model.lr_scaling), on STEPS synthetic batches (model.diagnostics.synthetic_batch
with seeds 1..STEPS: the same ids for every cell), in eval mode (no dropout: the change is the optimizer's
alone, and the global RNG is not drawn from). Then, on a fixed batch (seed 0, the init check's), each attention
sublayer's output change: RMS(out_after - out_init) / RMS(out_init) over the real query positions, per
attention kind, pooled over the layers of that kind (and per layer).

mup's coordinate check (mup 1.0.0, coord_check.get_coord_data) trains models of growing width a few steps
and records each module's mean |activation| at each step, to see whether it blows up with width. This differs:
the widths here are the attention's (h, d_v) at a fixed d_model, and one cell is compared with the sweep's base
rather than read as a trend; it measures the change from init relative to the init output (the step's
effect, which is what a learning rate sets) rather than the activation's size, in RMS (l2) rather than mean
|x| (l1), on a fixed batch after the steps rather than on each step's own batch during training.

Plain PyTorch; the global RNG is left untouched.
"""

from __future__ import annotations

import functools
import json

import torch

from headsweep.model import Transformer, TransformerConfig
from headsweep.model.config import ATTENTION_KINDS
from headsweep.model.diagnostics import _sublayers, synthetic_batch
from headsweep.model.lr_scaling import BASE_KEYS, lr_factors, param_groups, role

VOCAB = 1024  # the vocabulary planning builds with: the gains and ratios do not depend on it (diagnostics.ID_RANGE)
STEPS = 10


@torch.no_grad()
def _outputs(net: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> dict[tuple[str, int], torch.Tensor]:
    """Each attention sublayer's output at the real query positions, (n, d_model), by (kind, layer)."""
    seen, hooks = {}, []
    for kind, i, _res, attn in _sublayers(net):
        hooks.append(attn.register_forward_hook(lambda _m, _a, out, key=(kind, i): seen.__setitem__(key, out[0])))
    try:
        net(src, tgt)
    finally:
        for h in hooks:
            h.remove()
    real = {"enc_self": src.ne(net.cfg.pad_id), "dec_self": tgt.ne(net.cfg.pad_id), "cross": tgt.ne(net.cfg.pad_id)}
    return {key: out[real[key[0]]].float().clone() for key, out in seen.items()}


def _loss(net: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy on the batch (the target's first token as the decoder's start), padding excluded."""
    logits = net(src, tgt[:, :-1])
    gold = tgt[:, 1:]
    keep = gold.ne(net.cfg.pad_id)
    return torch.nn.functional.cross_entropy(logits[keep].float(), gold[keep])


def update_check(
    cfg: TransformerConfig,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-9,
    lr_scaling: str = "none",
    lr_base: dict | None = None,
    seed: int = 1,
    steps: int = STEPS,
) -> dict:
    """{"change": {kind: RMS(change) / RMS(init)}, "change_by_layer": {kind: [...]}, "factors": {w_o, ff_w2},
    "lr", "steps", "lr_scaling", "batch_seed"} of a model built from `cfg` with `seed`."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = Transformer(cfg)
    net.eval()
    factors = lr_factors(net, lr_scaling, lr_base)
    opt = torch.optim.Adam(param_groups(list(net.named_parameters()), factors, lr), lr=lr, betas=tuple(betas), eps=eps)
    src, tgt = synthetic_batch(cfg)
    before = _outputs(net, src, tgt)
    for step in range(1, steps + 1):
        s, t = synthetic_batch(cfg, seed=step)
        opt.zero_grad(set_to_none=True)
        _loss(net, s, t).backward()
        opt.step()
    after = _outputs(net, src, tgt)
    by_layer = {kind: [] for kind in ATTENTION_KINDS}
    sums = {kind: [0.0, 0.0, 0] for kind in ATTENTION_KINDS}
    for (kind, _), out0 in before.items():
        diff2, init2 = (after[(kind, _)] - out0).pow(2).sum().item(), out0.pow(2).sum().item()
        # a branch that starts at zero (model.init_wo_gain=0) has no relative change: None, and its size is
        # in change_abs
        by_layer[kind].append((diff2 / init2) ** 0.5 if init2 > 0 else None)
        sums[kind][0] += diff2
        sums[kind][1] += init2
        sums[kind][2] += out0.numel()
    moved = {r: next((f for n, f in factors.items() if role(n) == r), 1.0) for r in BASE_KEYS}
    return {
        "change": {kind: (d / i) ** 0.5 if i > 0 else None for kind, (d, i, _n) in sums.items()},
        # RMS(out_after - out_init) itself: the sublayer reads a LayerNorm's output (RMS about 1) in post-norm, so
        # this is the step's size against the residual stream's, defined also where the branch starts at zero
        "change_abs": {kind: (d / n) ** 0.5 if n else None for kind, (d, _i, n) in sums.items()},
        "change_by_layer": by_layer,
        "factors": moved,
        "lr": float(lr),
        "steps": steps,
        "lr_scaling": lr_scaling,
        "batch_seed": 0,
    }


@functools.lru_cache(maxsize=256)
def _updated(model_json: str, settings_json: str, seed: int) -> str:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensors: threads only add overhead (and contention on a shared machine)
    try:
        cfg = TransformerConfig(**{**json.loads(model_json), "vocab_size": VOCAB})
        return json.dumps(update_check(cfg, seed=seed, **json.loads(settings_json)))
    finally:
        torch.set_num_threads(threads)


def measure_update(model: dict, settings: dict, seed: int = 1) -> dict:
    """training.update_check of a model config (conf/model keys, plain values) at `settings` (update_settings),
    vocabulary VOCAB (the synthetic batches use its first ids, as the init check's), cached."""
    return json.loads(_updated(json.dumps(model, sort_keys=True), json.dumps(settings, sort_keys=True), seed))
