"""Heads that start identical (issue 53): the init (model.head_init), the symmetry argument as code (with nothing
drawn per head a few training steps leave the heads identical; attention dropout or head dropout make them differ),
the gains at init against the base's, bad settings in one line, the run identity, the sweep spec and the
head-similarity measure logged over training."""

import csv
import json
import math

import pytest
import torch
from omegaconf import OmegaConf

from conftest import needs_data
from headsweep import store
from headsweep.analysis.redundancy import head_similarity
from headsweep.config import SWEEPS_DIR, compose
from headsweep.model import Transformer, TransformerConfig
from headsweep.model.diagnostics import differences, init_check, synthetic_batch
from headsweep.model.head_init import head_blocks, head_vectors, mean_pairwise_cosine
from headsweep.model.losses import linear_cross_entropy
from headsweep.store import flatten_config
from headsweep.sweeps import planning as P
from headsweep.sweeps.init_check import confounds
from headsweep.training.checks import ConfigError, check_config

KINDS = ("enc_self", "dec_self", "cross")
SMALL = dict(vocab_size=200, d_model=64, n_layers=2, heads=4, d_ff=128)  # a few ms a step


def built(seed=0, **model):
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(**{**SMALL, **model}))


def modules(net):
    return [m for kind in KINDS for m in net.attention_layers(kind)]


def largest_head_difference(net, grad: bool = False) -> float:
    """The largest |difference| between any head's W^Q, W^K, W^V slice or W^O block (or their gradients) and
    head 0's, over every attention module."""
    worst = 0.0
    for m in modules(net):
        for blocks in head_blocks(m).values():
            for b in blocks[1:]:
                x, y = (b.grad, blocks[0].grad) if grad else (b, blocks[0])
                worst = max(worst, (x - y).abs().max().item())
    return worst


def per_head_grads(net) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(head i's gradient slice, head 0's) of every projection: views of .grad cut as head_blocks cuts the weights."""
    pairs = []
    for m in modules(net):
        params = dict(m.named_parameters())
        for which in "qkv":
            n = m.proj_heads[which]
            if f"{which}_proj.weight" in params:  # fused
                g = params[f"{which}_proj.weight"].grad.unflatten(0, (n, -1)).unbind(0)
            else:
                g = [params[f"{which}_heads.{i}.weight"].grad for i in range(n)]
            pairs += [(g[i], g[0]) for i in range(1, n)]
        g = params["out_proj.weight"].grad.unflatten(1, (m.heads, -1))
        pairs += [(g[:, i], g[:, 0]) for i in range(1, m.heads)]
    return pairs


def train_steps(net, steps: int = 5, dtype=torch.float32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`steps` Adam steps of the model's own loss (label smoothing 0.1, residual dropout as configured) on the
    synthetic batch, in train mode; the per-head gradient pairs of the first step."""
    net = net.to(dtype).train()
    opt = torch.optim.Adam(net.parameters(), lr=2e-3, betas=(0.9, 0.98), eps=1e-9)
    src, tgt = synthetic_batch(net.cfg)
    first = None
    for _ in range(steps):
        memory, pad = net.encode(src)
        hidden = net.decode_hidden(tgt[:, :-1], memory, pad)
        real = tgt[:, 1:].ne(net.cfg.pad_id)
        loss = linear_cross_entropy(hidden[real], net.output_weight, tgt[:, 1:][real], 0.1)
        opt.zero_grad()
        loss.backward()
        if first is None:
            first = [(a.clone(), b.clone()) for a, b in per_head_grads(net)]
        opt.step()
    return first


def test_identical_heads_train_as_one_head_of_width_d_v_whose_w_o_has_h_times_the_rate():
    """What a layer of h identical heads is: one head of the same d_k, d_v, whose W^O is the sum of the h blocks and
    moves h times as far per Adam step (each block gets one head's gradient, Adam's step is per element). Built
    from the same weights, an h = 1 model with W^O's rate x h follows the identical model step for step, and with
    every rate equal it does not. So against heads_fixed_dk's h 1 cell the identical cells differ in W^O's rate."""
    h, src_tgt = SMALL["heads"], synthetic_batch(TransformerConfig(**SMALL))
    same = built(init_heads="identical", dropout=0.0, d_k=16, d_v=16)
    one = built(heads=1, dropout=0.0, d_k=16, d_v=16)
    with torch.no_grad():
        ours = dict(one.named_parameters())
        for name, p in same.named_parameters():
            if name.endswith(
                ("q_proj.weight", "k_proj.weight", "v_proj.weight", "q_proj.bias", "k_proj.bias", "v_proj.bias")
            ):
                ours[name].copy_(p[:16])  # head 0's slice: every head's
            elif name.endswith("out_proj.weight"):
                ours[name].copy_(
                    p.unflatten(1, (h, 16)).sum(1)
                )  # the h blocks add up: Concat(o, .., o) W^O = o sum_i W^O_i
            else:
                ours[name].copy_(p)

    def logits_after(net, w_o_factor: float, steps: int = 6) -> torch.Tensor:
        net = net.train()
        w_o = [p for n, p in net.named_parameters() if n.endswith("out_proj.weight")]
        rest = [p for n, p in net.named_parameters() if not n.endswith("out_proj.weight")]
        groups = [{"params": rest}, {"params": w_o, "lr": 2e-3 * w_o_factor}]
        opt = torch.optim.Adam(groups, lr=2e-3, betas=(0.9, 0.98), eps=1e-9)
        for step in range(steps):
            src, tgt = synthetic_batch(net.cfg, seed=step + 1)
            loss = torch.nn.functional.cross_entropy(net(src, tgt[:, :-1]).transpose(1, 2), tgt[:, 1:], ignore_index=0)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            return net.eval()(*src_tgt)

    import copy

    start = (same.eval()(*src_tgt), one.eval()(*src_tgt))
    torch.testing.assert_close(start[0], start[1], rtol=1e-5, atol=1e-5)  # the same function at init
    after = logits_after(same, 1.0)
    torch.testing.assert_close(logits_after(copy.deepcopy(one), float(h)), after, rtol=1e-4, atol=1e-4)
    assert (logits_after(one, 1.0) - after).abs().max() > 1e-2  # one rate for all: another model


# ---- the init ----


@pytest.mark.parametrize("layout", [dict(), dict(kv_heads=2), dict(impl="per_head"), dict(d_k=8, d_v=24)])
def test_identical_heads_are_head_0_of_the_base_draw_with_w_o_over_sqrt_h(layout):
    base, same = built(**layout), built(**layout, init_heads="identical")
    assert largest_head_difference(same) == 0.0 and largest_head_difference(base) > 0.05
    for a, b in zip(modules(base), modules(same)):
        wa, wb = head_blocks(a), head_blocks(b)
        for which in "qkv":
            assert all(torch.equal(x, wa[which][0]) for x in wb[which])  # head 0 of the same draw
        assert all(torch.equal(x, wa["o"][0] * 4**-0.5) for x in wb["o"])
    # nothing else moves: the embeddings, feed-forward and norms are the base's draws
    rest = [k for k in base.state_dict() if "attn." not in k]
    assert rest and all(torch.equal(base.state_dict()[k], same.state_dict()[k]) for k in rest)


def test_independent_is_the_init_of_every_shipped_run_and_noise_is_a_perturbation_of_identical():
    torch.manual_seed(0)
    plain = Transformer(TransformerConfig(**SMALL))
    rng = torch.get_rng_state()
    explicit = built(init_heads="independent", init_heads_noise=0.0)
    assert all(torch.equal(p, q) for p, q in zip(plain.state_dict().values(), explicit.state_dict().values()))
    assert torch.equal(rng, torch.get_rng_state())  # and it draws nothing more
    same, noisy = built(init_heads="identical"), built(init_heads="identical", init_heads_noise=0.01)
    for a, b in zip(modules(same), modules(noisy)):
        for p, q in zip(a.parameters(), b.parameters()):
            if p.dim() == 2:  # each weight moved by about 1% of its own std, every head its own draw
                rel = ((q - p).std() / p.std()).item()
                assert 0.008 < rel < 0.012, rel
    assert 0 < largest_head_difference(noisy) < 0.01


# ---- the symmetry argument ----


@pytest.mark.parametrize(
    "dtype, tolerance",
    [
        # fp32 on CPU: bitwise. The heads' columns of each fused GEMM are computed alike, and everything else is per
        # element or per head with the same numbers.
        (torch.float32, 0.0),
        # fp64: the double GEMM's kernels block output columns differently (an edge block sums in another order),
        # so heads differ in the last bits (about 5e-14 after 10 steps on an AVX2 CPU); 1e-12 is far from what a
        # per-head source makes (about 1e-2 below).
        (torch.float64, 1e-12),
    ],
)
@pytest.mark.parametrize("kernel", ["math", "sdpa"])
def test_with_nothing_per_head_identical_heads_stay_identical(dtype, tolerance, kernel):
    """Every head's slices see the same inputs and, their W^O blocks being equal, the same gradient from above:
    the same gradient, so Adam (per element) moves them alike. Residual dropout (0.1 here) and label smoothing act
    after W^O, on the heads' sum, and break nothing. Fails if the init is not identical or the gradients differ."""
    net = built(init_heads="identical", kernel=kernel, dropout=0.1)
    assert largest_head_difference(net) == 0.0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        grads = train_steps(net, steps=5, dtype=dtype)
    finally:
        torch.set_num_threads(threads)
    assert max((g - g0).abs().max().item() for g, g0 in grads) <= tolerance  # step 1: one gradient for every head
    assert max(g0.abs().max().item() for _, g0 in grads) > 0  # ... and not because there was none
    assert largest_head_difference(net) <= tolerance


@pytest.mark.parametrize("layout", [dict(kv_heads=2), dict(impl="per_head")])
def test_shared_kv_heads_and_the_per_head_layout_keep_the_symmetry_too(layout):
    """kv_heads 2: each kv head serves 2 query heads that are alike, so the kv heads' summed gradients are too."""
    net = built(init_heads="identical", **layout)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train_steps(net, steps=3)
    finally:
        torch.set_num_threads(threads)  # the process's threads are other tests' too (test_train compares them)
    assert largest_head_difference(net) <= 1e-6  # fp32; the per-head layout's matmuls are separate calls


@pytest.mark.parametrize("per_head", [dict(attn_dropout=0.1), dict(head_dropout=0.1)])
def test_a_per_head_source_of_noise_breaks_the_symmetry(per_head):
    """Attention dropout draws a mask per head over its weights, head dropout drops whole heads per sentence: the
    heads see different activations, get different gradients and move apart from the first step."""
    net = built(init_heads="identical", **per_head)
    grads = train_steps(net, steps=5)
    assert max((g - g0).abs().max().item() for g, g0 in grads) > 1e-6
    assert largest_head_difference(net) > 1e-4


# ---- the gains at init ----


@pytest.mark.parametrize(
    "model", [dict(), dict(kv_heads=2), dict(init_heads_noise=0.01), dict(heads=32, d_k=32, d_v=32)]
)
def test_the_init_check_shows_no_other_difference_than_w_o_s_scale(model):
    """The attention output / residual ratio (the init check's, in expectation over draws) is the base's within
    5% (the bar of every shipped sweep); W^O's own gain is 1 / sqrt(h), on purpose (init_check.ON_PURPOSE)."""
    sizes = {k: v for k, v in model.items() if k != "init_heads_noise"}
    base = init_check(TransformerConfig(vocab_size=1024, **sizes), seed=1)
    same = init_check(TransformerConfig(vocab_size=1024, init_heads="identical", **model), seed=1)
    h = model.get("heads", 8)
    found = differences(same, base, 0.05)
    assert {q for q, _, _ in found} == {f"gain W^O {k}" for k in KINDS}, found
    assert all(v == pytest.approx(w / math.sqrt(h), rel=0.03) for _, v, w in found)
    flat = {"model.init_heads": "identical", "model.d_model": 256}
    assert confounds(flat, {**flat, "model.init_heads": "independent"}, same, base, 0.05) == []


# ---- bad input ----


def hydra_value(v) -> str:
    """A value as a command-line override spells it: {enc_self:2}."""
    return "{" + ",".join(f"{k}:{x}" for k, x in v.items()) + "}" if isinstance(v, dict) else str(v)


@pytest.mark.parametrize(
    "model, message",
    [
        (dict(heads=1), r"model.init_heads=identical with heads=1: one head per layer has nothing to be identical"),
        (dict(fixed_heads={"enc_self": 2}), r"model.init_heads=identical with fixed_heads=\{'enc_self': 2\}"),
        (dict(init_heads="independent", init_heads_noise=0.01), r"model.init_heads_noise=0.01 perturbs identical"),
        (dict(init_heads="same"), r"model.init_heads='same': use one of independent, identical"),
    ],
)
def test_bad_settings_stop_before_training_with_one_line(model, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(**{"init_heads": "identical", **model})
    overrides = [f"model.{k}={hydra_value(v)}" for k, v in model.items()]
    if "init_heads" not in model:
        overrides.append("model.init_heads=identical")
    with pytest.raises(ConfigError) as e:
        check_config(compose([*overrides, "paths.output_dir=/tmp/x"]))
    assert "\n" not in str(e.value) and "init_heads" in str(e.value)


def test_a_negative_perturbation_is_refused_by_the_settings_schema():
    with pytest.raises(ConfigError, match=r"model.init_heads_noise must be a number in \[0, 10\], got -0.1"):
        check_config(compose(["model.init_heads=identical", "model.init_heads_noise=-0.1", "paths.output_dir=/x"]))


# ---- the run identity ----


def config(*overrides) -> dict:
    cfg = compose(["budget=ablation", "trainer.precision=32-true", "seed=1", *overrides])
    return OmegaConf.to_container(cfg, resolve=False)


def test_independent_leaves_every_stored_run_s_identity_and_identical_is_another_experiment():
    """The default is left out of the hash (store.NEUTRAL_SETTINGS): a config with it, one without the keys (a
    record from before them), and every run the store holds keep their keys; any other value is recorded."""
    new = config()
    old = json.loads(json.dumps(new))
    del old["model"]["init_heads"], old["model"]["init_heads_noise"]
    assert store.experiment_key(new) == store.experiment_key(old)
    assert store.experiment_key(config("model.init_heads_noise=0")) == store.experiment_key(old)  # 0 is 0.0
    identical = store.experiment_key(config("model.init_heads=identical"))
    noisy = store.experiment_key(config("model.init_heads=identical", "model.init_heads_noise=0.01"))
    assert len({store.experiment_key(old), identical, noisy}) == 3
    assert flatten_config(OmegaConf.create(old))["model.init_heads"] == "independent"  # read as what it was
    runs = store.stored_runs(SWEEPS_DIR.parent / "results")
    assert len(runs) > 100 and all(store.experiment_key(record.config) == path.name for path, record in runs)


def test_the_sweep_s_base_cell_is_the_stored_base_run_and_its_cells_are_the_issue_s(tmp_path):
    sweep = P.plan("heads_identical", seeds=3, budget="ablation", root=tmp_path)
    cells = [compose([*sweep.common, *j.overrides]) for j in sweep.jobs if j.seed == 1]
    got = [
        (c.model.init_heads, c.model.attn_dropout, c.model.head_dropout, c.model.init_heads_noise, c.module.peak_lr)
        for c in cells
    ]
    assert got == [
        ("independent", 0.0, 0.0, 0.0, 0.002),
        ("identical", 0.0, 0.0, 0.0, 0.002),
        ("identical", 0.1, 0.0, 0.0, 0.002),
        ("identical", 0.0, 0.1, 0.0, 0.002),
        ("identical", 0.0, 0.0, 0.01, 0.002),
    ]
    assert len(sweep.jobs) == 15 and [j.base for j in sweep.jobs if j.seed == 1] == [True] + [False] * 4
    shipped = json.loads(
        (SWEEPS_DIR.parent / "results" / "heads_fixed_dk_fan_in" / "h8-dk32-dv32-s1" / "results.json").read_text()
    )
    base = compose(
        [*sweep.common, *sweep.jobs[0].overrides, f"trainer.precision={shipped['config']['trainer']['precision']}"]
    )
    assert store.flat_key(flatten_config(base), 1) == store.experiment_key(shipped["config"])


# ---- how alike the heads are ----


def test_head_similarity_is_one_and_zero_for_identical_heads_and_not_for_independent_ones():
    batch = dict(zip(("src", "tgt_in"), synthetic_batch(TransformerConfig(**SMALL))))
    same = head_similarity(built(init_heads="identical"), batch, 0)
    apart = head_similarity(built(), batch, 0)
    for kind in KINDS:
        assert same[kind]["cos_qkv"] == pytest.approx(1.0, abs=1e-6) and same[kind]["cos_o"] == pytest.approx(1.0)
        assert same[kind]["js"] == pytest.approx(0.0, abs=1e-6)
        assert abs(apart[kind]["cos_qkv"]) < 0.1 and abs(apart[kind]["cos_o"]) < 0.1 and apart[kind]["js"] > 1e-3
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # pairs: 0, 1/sqrt2, 1/sqrt2
    assert mean_pairwise_cosine(x) == pytest.approx(2 / 3 * 2**-0.5)
    assert head_vectors(built(kv_heads=2).encoder[0].self_attn)["qkv"].shape == (4, 3 * 16 * 64)


@needs_data
def test_a_run_logs_how_alike_its_heads_are_at_init_and_at_every_validation(tiny_run):
    rows = list(csv.DictReader((tiny_run / "csv" / "metrics.csv").open()))
    keys = [f"heads/{m}_{k}" for m in ("cos_qkv", "cos_o", "js") for k in KINDS]
    at = {int(r["step"]) for r in rows if all(r.get(k) for k in keys)}
    validations = {int(r["step"]) for r in rows if r.get("val/loss")}
    assert -1 in at and validations and validations <= at  # at init (after 0 steps) and beside each val/loss


# ---- the report ----


PARAMS = {"params": {"total": 7_577_600}}  # what the report reads of a run besides its scores


def similarity_csv(points: dict[int, float]) -> str:
    """A metrics CSV as a run with the callback leaves it: the init point at -1, validations at n - 1 with val/loss."""
    keys = [f"heads/{m}_{k}" for m in ("cos_qkv", "cos_o", "js") for k in KINDS]
    lines = ["step,val/bleu,val/loss," + ",".join(keys)]
    for step, cos in points.items():
        val = "" if step == 0 else f"{20.0},{3.0}"
        lines.append(f"{step - 1},{val or ','}," + ",".join(str(cos if "cos" in k else 1 - cos) for k in keys))
    return "\n".join(lines) + "\n"


def test_the_sweep_page_shows_the_head_similarity_curves_per_cell(tmp_path):
    from conftest import fake_run
    from headsweep.reports.sweep import page as R
    from headsweep.reports.sweep.cells import group_cells, load_runs
    from headsweep.reports.sweep.similarity import cell_similarity

    root = tmp_path / "results"
    for seed in (1, 2):  # the base, trained before the log: only val/loss
        fake_run(
            root, "heads_identical", f"base-s{seed}", seed, 30.0, curve="step,val/bleu,val/loss\n229,20,3\n", **PARAMS
        )
    identical = ["model.init_heads=identical", "model.attn_dropout=0.1"]
    fake_run(
        root, "heads_identical", "ident-s1", 1, 25.0, identical, curve=similarity_csv({0: 1.0, 230: 0.8}), **PARAMS
    )
    fake_run(
        root, "heads_identical", "ident-s2", 2, 25.0, identical, curve=similarity_csv({0: 1.0, 230: 0.6}), **PARAMS
    )
    cells = group_cells(load_runs(root / "heads_identical", "heads_identical")[0])
    ident, base = (next(c for c in cells if c.label == label) for label in ("ident", "base"))
    steps, mean, sd = cell_similarity(ident, "heads/cos_o_cross")
    assert steps == [0, 230] and mean == pytest.approx([1.0, 0.7]) and sd == pytest.approx([0.0, 0.02**0.5])
    assert cell_similarity(ident, "heads/js_enc_self")[1] == pytest.approx([0.0, 0.3])
    paths = R.write_report("heads_identical", root, tmp_path / "reports", n_samples=50)
    png = tmp_path / "reports" / "heads_identical-head-similarity.png"
    assert png in paths and png.stat().st_size > 10_000
    md = (tmp_path / "reports" / "heads_identical.md").read_text()
    assert "Head similarity against training step" in md and "No curve for base: trained before" in md
    # the init check's table, the runs composed under the default start (W^O's small ratio is on purpose)
    assert "| ident | fan_in, identical heads, W^O x0.408, W_2 x0.408 | " in md
    # without a run that logged it, no figure
    from headsweep.reports.sweep.similarity import similarity_curves

    assert similarity_curves("heads_identical", [base], tmp_path) is None
