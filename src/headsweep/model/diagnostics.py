"""What a model looks like at init, where the cells of an ablation should agree unless they vary it on purpose:

- each attention projection's gain, sqrt(fan_in) * the std of its weight (the std of its output for a
  unit-variance input), per attention kind, pooled over the layers;
- the attention output against the residual stream it is added to, RMS over RMS at the real (non-padding)
  query positions, on one synthetic batch (random token ids from a fixed seed, fixed lengths with padding),
  in eval mode (no dropout): `ratio_by_layer`, the model's own, per attention kind and layer; and `ratio`,
  what the model's init gives in expectation: each kind's first-layer sublayer on the embedded batch (the
  first layer's residual stream; cross-attention: target queries, source memory), averaged over DRAWS fresh
  draws of its weights (its own init, seeds 0..DRAWS-1), with token vectors that are the same in every cell
  of a width. One draw of one model scatters by 3-8% (few value dimensions at kv_heads 1 scatter most),
  which would hide a 5% difference between cells; the average is within about 1-2%.

Issue 42: under xavier init the gains moved with h, d_k, d_v and kv_heads (kv_heads 1: W^K, W^V at 1.33), and
the attention output / residual ratio with them (kv 8 0.74-0.88, kv 1 1.03-1.20), which decided the cells'
results more than the attention setting did. Plain PyTorch; the global RNG is left untouched.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import Tensor

from headsweep.model.attention import MultiHeadAttention
from headsweep.model.config import ATTENTION_KINDS, TransformerConfig
from headsweep.model.head_init import apply_init_heads, coherence
from headsweep.model.residual_init import scale_wo
from headsweep.model.transformer import Transformer

PROJECTIONS = ("q", "k", "v", "o")  # W^Q, W^K, W^V, W^O
BATCH_SEED = 0  # the synthetic batch's ids: the same batch for every model and run
SRC_LENGTHS = (24, 20, 17, 13, 24, 9, 21, 15)  # 8 sentences, padded to the longest
TGT_LENGTHS = (22, 24, 14, 16, 11, 24, 19, 8)
ID_RANGE = 1024  # ids drawn from the first ID_RANGE of the vocabulary (pad skipped): the same batch at any vocab
DRAWS = 4  # weight draws `ratio` averages over


def projection_weights(m: MultiHeadAttention) -> dict[str, Tensor]:
    """{q, k, v, o: weight (fan_out, fan_in)} in either layout (per-head weights stacked as the fused one is);
    no W^Q or W^K where every head is fixed."""
    out = {}
    for which in "qkv":
        if m.proj_heads[which] == 0:
            continue
        if m.impl == "fused":
            out[which] = getattr(m, f"{which}_proj").weight
        else:
            out[which] = torch.cat([p.weight for p in getattr(m, f"{which}_heads")])
    out["o"] = m.out_proj.weight
    return out


def module_gains(modules: list[MultiHeadAttention]) -> dict[str, float]:
    """{q, k, v, o: sqrt(fan_in) * std} over the weights of these attention modules together."""
    per_module = [projection_weights(m) for m in modules]
    gains = {}
    for which in PROJECTIONS:
        weights = [w[which].detach().float() for w in per_module if which in w]
        if weights:
            gains[which] = math.sqrt(weights[0].size(1)) * torch.cat([w.flatten() for w in weights]).std().item()
    return gains


def projection_gains(net: Transformer) -> dict[str, dict[str, float]]:
    """{kind: {q, k, v, o: sqrt(fan_in) * std}}, each over the weights of every layer of that kind."""
    return {kind: module_gains(net.attention_layers(kind)) for kind in ATTENTION_KINDS}


def ff2_gains(net: Transformer) -> dict[str, float]:
    """{enc, dec: sqrt(fan_in) * std of the FFN's W_2} over every layer of each stack: the other residual output
    (torch's default Linear init gives 1/sqrt(3) = 0.577 whatever d_ff; model.init_ff2_gain multiplies it)."""
    out = {}
    for stack, layers in (("enc", net.encoder), ("dec", net.decoder)):
        w = [layer.ff.w2.weight.detach().float() for layer in layers]
        out[stack] = math.sqrt(w[0].size(1)) * torch.cat([x.flatten() for x in w]).std().item()
    return out


def synthetic_batch(cfg: TransformerConfig, seed: int = BATCH_SEED) -> tuple[Tensor, Tensor]:
    """(src, tgt) token ids (8, 24), padded with cfg.pad_id after SRC_LENGTHS / TGT_LENGTHS, ids uniform over
    the first ID_RANGE non-pad ids; from its own generator (the global RNG is not drawn from)."""
    g = torch.Generator().manual_seed(seed)
    high = min(cfg.vocab_size, ID_RANGE) - 1  # ids 0 .. high-1, then shifted past the pad id

    def ids(lengths):
        x = torch.randint(0, high, (len(lengths), max(lengths)), generator=g)
        x = x + (x >= cfg.pad_id).long()
        pad = torch.arange(max(lengths))[None, :] >= torch.tensor(lengths)[:, None]
        return x.masked_fill(pad, cfg.pad_id)

    return ids(SRC_LENGTHS), ids(TGT_LENGTHS)


def _sublayers(net: Transformer):
    """(kind, layer, residual wrapper, attention module) of every attention sublayer."""
    for i, layer in enumerate(net.encoder):
        yield "enc_self", i, layer.res_attn, layer.self_attn
    for i, layer in enumerate(net.decoder):
        yield "dec_self", i, layer.res_self, layer.self_attn
        yield "cross", i, layer.res_cross, layer.cross_attn


@torch.no_grad()
def attention_residual_ratios(net: Transformer, src: Tensor, tgt: Tensor) -> dict[str, list[float]]:
    """{kind: per layer, RMS(attention output) / RMS(the residual stream it is added to)} over the real query
    positions, in eval mode (the model's mode is restored)."""
    seen: dict[tuple[str, int], dict[str, Tensor]] = {}
    hooks = []
    for kind, i, res, attn in _sublayers(net):
        slot = seen.setdefault((kind, i), {})
        hooks.append(res.register_forward_pre_hook(lambda _m, args, slot=slot: slot.__setitem__("x", args[0])))
        hooks.append(attn.register_forward_hook(lambda _m, _a, out, slot=slot: slot.__setitem__("out", out[0])))
    was_training = net.training
    net.eval()
    try:
        net(src.to(net.output_weight.device), tgt.to(net.output_weight.device))
    finally:
        net.train(was_training)
        for h in hooks:
            h.remove()
    src, tgt = src.to(net.output_weight.device), tgt.to(net.output_weight.device)
    real = {"enc_self": src.ne(net.cfg.pad_id), "dec_self": tgt.ne(net.cfg.pad_id), "cross": tgt.ne(net.cfg.pad_id)}
    ratios = {kind: [] for kind in ATTENTION_KINDS}
    for (kind, _), slot in seen.items():
        mask = real[kind].to(slot["x"].device)
        out, x = slot["out"][mask].float(), slot["x"][mask].float()
        ratios[kind].append((out.pow(2).mean().sqrt() / x.pow(2).mean().sqrt()).item())
    return ratios


def standard_inputs(net: Transformer, ids: Tensor) -> Tensor:
    """The first layer's input as the model's embedding makes it (a unit-variance vector per token, zero at
    padding, plus the model's positions), but the token vectors drawn from their own generator: the same in
    every cell of a width, so that cells differ only by their attention (the model's own embedding is drawn
    after its layers, from an RNG state the layers' sizes move)."""
    d = net.cfg.d_model
    table = torch.randn(ID_RANGE + 1, d, generator=torch.Generator().manual_seed(BATCH_SEED + 1)).to(ids.device)
    tokens = table[ids.clamp(max=ID_RANGE)] * ids.ne(net.cfg.pad_id)[..., None]
    T = ids.size(1)
    return tokens + (net.pos.weight[:T] if net.cfg.positions == "learned" else net.pe[:T])


@torch.no_grad()
def expected_ratios(net: Transformer, src: Tensor, tgt: Tensor, draws: int = DRAWS) -> dict[str, float]:
    """{kind: RMS(attention output) / RMS(residual) of the kind's first-layer sublayer on the batch as the
    embedding makes it (standard_inputs), in expectation over its weights}.

    Over W^V and W^O in closed form: with zero biases, E|out_t|^2 = g_V^2 g_O^2 mean_i |sum_j A_i(t, j) x_j|^2
    (g: each projection's gain, sqrt(fan_in) * std; A_i: head i's attention weights; x_j: the keys' inputs), so
    the ratio is g_V g_O sqrt(mean over heads and real queries of |A_i(t) X|^2 / mean |x_t|^2). Over W^Q and W^K
    (which set A) by averaging `draws` draws (a copy of the sublayer re-drawn with seeds 0..draws-1). A single
    draw of the whole sublayer scatters by 3-8% where few value dimensions (kv_heads 1) make |x W^V| noisy;
    this is within about 1%. The global RNG and the model are left untouched."""
    pad = net.cfg.pad_id
    device = net.output_weight.device
    src, tgt = src.to(device), tgt.to(device)
    xs, xt = standard_inputs(net, src), standard_inputs(net, tgt)
    src_pad, real = src.eq(pad), tgt.ne(pad)
    calls = {
        "enc_self": lambda m: (m(xs, key_padding_mask=src_pad, need_weights=True)[1], xs, xs, ~src_pad),
        "dec_self": lambda m: (m(xt, causal=True, need_weights=True)[1], xt, xt, real),
        "cross": lambda m: (m(xt, xs, key_padding_mask=src_pad, need_weights=True)[1], xt, xs, real),
    }
    ratios = {}
    for kind in ATTENTION_KINDS:
        m = copy.deepcopy(net.attention_layers(kind)[0]).eval()
        total = 0.0
        for r in range(draws):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(r)
                m._reset_parameters()
                scale_wo(m, net.cfg)  # W^O's starting scale (residual_init), as the model was made
                apply_init_heads([m], net.cfg.init_heads, net.cfg.init_heads_noise)
            weights, x, memory, mask = calls[kind](m)  # weights (B, h, Tq, Tk)
            mixed = (weights.float() @ memory.float()[:, None]).pow(2).sum(-1).mean(1)  # (B, Tq): mean_i |A_i(t) X|^2
            g = module_gains([m])
            g["o"] *= coherence(net.cfg.init_heads, m.heads)  # identical heads add coherently (head_init)
            total += g["v"] * g["o"] * (mixed[mask].mean() / x[mask].float().pow(2).sum(-1).mean()).sqrt().item()
        ratios[kind] = total / draws
    return ratios


def init_check(model: Transformer | TransformerConfig, seed: int = 1) -> dict:
    """Projection gains and attention/residual ratios of a model at init: of `model` as it is (a Transformer),
    or of one built from a TransformerConfig with torch.manual_seed(seed) (the global RNG restored after).

    {"gain": {kind: {q, k, v, o}}, "gain_ff2": {enc, dec}, "ratio": {kind}, "ratio_by_layer": {kind: [...]},
    "init", "init_kv_gain", "batch_seed", "draws"}"""
    if isinstance(model, TransformerConfig):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = Transformer(model)
    src, tgt = synthetic_batch(model.cfg)
    was_training = model.training
    model.eval()  # no dropout: it would draw from the global RNG, and change what is measured
    try:
        return {
            "gain": projection_gains(model),
            "gain_ff2": ff2_gains(model),
            "ratio": expected_ratios(model, src, tgt),
            "ratio_by_layer": attention_residual_ratios(model, src, tgt),
            "init": model.cfg.init,
            "init_kv_gain": model.cfg.init_kv_gain,
            "batch_seed": BATCH_SEED,
            "draws": DRAWS,
        }
    finally:
        model.train(was_training)


def quantities(check: dict) -> dict[str, float]:
    """A check as flat {quantity: value}: "gain W^K enc_self", ..., "attn/residual cross"."""
    out = {f"gain W^{which.upper()} {kind}": g for kind, gains in check["gain"].items() for which, g in gains.items()}
    out.update({f"attn/residual {kind}": r for kind, r in check["ratio"].items()})
    out.update({f"gain W_2 {stack}": g for stack, g in (check.get("gain_ff2") or {}).items()})  # runs before: none
    return out


def differences(check: dict, base: dict, tolerance: float) -> list[tuple[str, float, float]]:
    """(quantity, its value, the base's) where a check differs from the base's by more than `tolerance`
    (relative), over the quantities both have (a fixed head has no W^Q or W^K)."""
    ours, theirs = quantities(check), quantities(base)
    # a base at zero (W^O at gain 0) has no relative difference: any nonzero value differs
    return [
        (q, ours[q], theirs[q])
        for q in ours
        if q in theirs and (abs(ours[q] / theirs[q] - 1) > tolerance if theirs[q] else ours[q] != 0)
    ]
