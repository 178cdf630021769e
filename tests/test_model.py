"""The Transformer built on our attention: closed-form parameter counts, masks, cache, dropout."""

import pytest
import torch

from headsweep.model import Transformer, TransformerConfig, count_parameters
from headsweep.model.attention import attention_param_count
from headsweep.model.transformer import Dropout


def small(**kw) -> TransformerConfig:
    return TransformerConfig(**{**dict(vocab_size=50, d_model=16, n_layers=2, heads=4, d_ff=24, max_len=32), **kw})


@pytest.mark.parametrize(
    "kw",
    [{}, {"d_k": 3, "d_v": 7}, {"heads": 1}, {"norm_first": True}, {"positions": "learned"}, {"tie_embeddings": False}],
)
def test_parameter_count_closed_form(kw):
    cfg = small(**kw)
    counts = count_parameters(Transformer(cfg))
    d, n, V, f = cfg.d_model, cfg.n_layers, cfg.vocab_size, cfg.d_ff
    d_k, d_v = cfg.d_k or d // cfg.heads, cfg.d_v or d // cfg.heads
    attn = attention_param_count(d, cfg.heads, d_k, d_v)
    emb = V * d * (1 if cfg.tie_embeddings else 3) + (cfg.max_len * d if cfg.positions == "learned" else 0)
    ffn = 2 * n * (2 * d * f + f + d)
    norms = 2 * d * (2 * n + 3 * n + (2 if cfg.norm_first else 0))
    assert counts["attn_enc_self"] == counts["attn_dec_self"] == counts["attn_cross"] == n * attn
    assert counts["embeddings"] == emb and counts["ffn"] == ffn and counts["norms"] == norms
    assert counts["total"] == emb + 3 * n * attn + ffn + norms == sum(p.numel() for p in Transformer(cfg).parameters())


def test_padding_and_causality():
    torch.manual_seed(0)
    model = Transformer(small()).eval()
    src = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 0]])
    padded = torch.cat([src, torch.zeros(2, 3, dtype=torch.long)], dim=1)  # more padding
    tgt = torch.tensor([[1, 12, 13, 14], [1, 15, 16, 17]])
    with torch.no_grad():
        out = model(src, tgt)
        torch.testing.assert_close(model(padded, tgt), out, atol=1e-5, rtol=1e-5)
        changed = tgt.clone()
        changed[:, 3] = 20  # a later target token cannot change earlier outputs
        torch.testing.assert_close(model(src, changed)[:, :3], out[:, :3])


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"norm_first": True, "positions": "learned", "impl": "per_head"},
        {"kv_heads": 1},
        {"kv_heads": 2, "impl": "per_head"},
        {"fixed_heads": {"enc_self": 3, "dec_self": 2}, "fixed_patterns": ["prev", "left2", "cur"]},
    ],
)
def test_cached_decoding_equals_full_decoding(kw):
    torch.manual_seed(1)
    model = Transformer(small(**kw)).eval()
    src, tgt = torch.randint(4, 50, (3, 6)), torch.randint(4, 50, (3, 5))
    with torch.no_grad():
        memory, src_pad = model.encode(src)
        full = model.decode(tgt, memory, src_pad)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, t : t + 1], memory, src_pad, cache) for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_dropout_rate_and_expectation():
    torch.manual_seed(2)
    drop = Dropout(0.1)
    x = torch.ones(200_000)
    assert torch.equal(drop.eval()(x), x)  # identity at evaluation
    y = drop.train()(x)
    zeroed = (y == 0).float().mean().item()
    assert abs(zeroed - 26 / 256) < 0.003  # p rounded to 26/256; 3 sd of the sample mean is ~0.002
    assert abs(y.mean().item() - 1.0) < 0.01  # kept values rescaled: the expectation is unchanged
    assert torch.equal(Dropout(0.0).train()(x), x)


def test_bad_config_values():
    with pytest.raises(ValueError, match="positions must be one of"):
        small(positions="rope")
    with pytest.raises(ValueError, match="dropout must be in"):
        small(dropout=1.0)


def test_a_tiny_model_learns_to_copy():
    """The Annotated Transformer's first check: trained on random sequences to copy its input, the model's
    loss falls from the uniform log(9) = 2.2 to near zero, and greedy decoding copies sequences it has not
    seen. A broken mask, attention, gradient or embedding leaves the loss high (about 4 s on one thread)."""
    from headsweep.model.decoding import greedy
    from headsweep.training.schedules import lr_factor

    torch.manual_seed(0)
    bos, eos, vocab, n, steps, warmup = 1, 2, 12, 8, 300, 50  # copy 8 of the tokens 3..11
    net = Transformer(
        TransformerConfig(
            vocab_size=vocab,
            d_model=32,
            n_layers=1,
            heads=4,
            d_ff=64,
            dropout=0.0,
            max_len=16,
            init_wo_gain=1.0,
            init_ff2_gain=1.0,  # the start this check's seed and thresholds were set under
        )
    )
    opt = torch.optim.Adam(net.parameters(), lr=5e-3, betas=(0.9, 0.98), eps=1e-9)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor("linear", s + 1, warmup, (s + 1) / steps, warmup / steps)
    )
    losses = []
    for _ in range(steps):
        src = torch.randint(3, vocab, (32, n))
        tgt_in = torch.cat([torch.full((32, 1), bos), src], 1)
        tgt_out = torch.cat([src, torch.full((32, 1), eos)], 1)
        loss = torch.nn.functional.cross_entropy(net(src, tgt_in).flatten(0, 1), tgt_out.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        losses.append(loss.item())
    assert sum(losses[:10]) / 10 > 2.0 and sum(losses[-50:]) / 50 < 0.1
    src = torch.randint(3, vocab, (16, n))
    with torch.no_grad():
        out = greedy(net.eval(), src, bos, eos, max_len=n + 1)
    assert torch.equal(out[:, :n], src) and bool((out[:, n] == eos).all())
