"""Hard-concrete head gates (Louizos et al. 2018) and the L0 penalty, against closed forms and sampling."""

import math

import pytest
import torch

from headsweep.model import AttentionConfig, MultiHeadAttention, Transformer, TransformerConfig
from headsweep.model.gates import HardConcreteGate


def test_deterministic_gate_is_the_stretched_clipped_sigmoid():
    g = HardConcreteGate(4).eval()
    with torch.no_grad():
        g.log_alpha.copy_(torch.tensor([-5.0, 0.0, 1.0, 5.0]))
    expected = [max(0.0, min(1.0, 1 / (1 + math.exp(-a)) * 1.2 - 0.1)) for a in (-5.0, 0.0, 1.0, 5.0)]
    assert g(3).tolist() == pytest.approx(expected)
    assert g(3).tolist()[0] == 0.0 and g(3).tolist()[3] == 1.0  # exactly closed / open


def test_open_probability_matches_sampling():
    """P(z > 0) in closed form against the share of open samples; samples hit exactly 0 and 1."""
    torch.manual_seed(0)
    g = HardConcreteGate(3).train()
    with torch.no_grad():
        g.log_alpha.copy_(torch.tensor([-1.0, 0.0, 1.0]))
    z = g(200_000)  # (B, h)
    assert z.min() == 0.0 and z.max() == 1.0
    assert (z > 0).float().mean(0).tolist() == pytest.approx(g.open_probability().tolist(), abs=0.005)


def test_l0_penalty_closes_gates():
    """Minimising the expected open count alone drives every log alpha down until the gates close."""
    torch.manual_seed(0)
    net = Transformer(TransformerConfig(vocab_size=20, d_model=16, n_layers=1, heads=2, d_ff=16, concrete_gates=True))
    gates = [p for n, p in net.named_parameters() if n.endswith("concrete.log_alpha")]
    assert len(gates) == 3 and float(net.expected_open_heads()) == pytest.approx(
        6 / (1 + math.exp(-(3 - math.log(0.1 / 1.1) / 3)))
    )
    opt = torch.optim.Adam(gates, lr=0.1)
    for _ in range(100):
        opt.zero_grad()
        net.expected_open_heads().backward()
        opt.step()
    assert net.open_heads() == {k: [[False, False]] for k in ("enc_self", "dec_self", "cross")}


def test_closed_gates_remove_their_heads_in_eval():
    """A closed concrete gate is the same as Michel's xi = 0 for that head; an open one changes nothing."""
    torch.manual_seed(0)
    plain = MultiHeadAttention(AttentionConfig(16, 4, dropout=0.0)).eval()
    gated = MultiHeadAttention(AttentionConfig(16, 4, dropout=0.0, concrete_gates=True)).eval()
    gated.load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        gated.concrete.log_alpha.copy_(torch.tensor([5.0, -5.0, 5.0, 5.0]))
    x = torch.randn(2, 5, 16)
    xi = torch.tensor([1.0, 0.0, 1.0, 1.0])
    torch.testing.assert_close(gated(x)[0], plain(x, gate=xi)[0])


def test_models_without_gates_keep_their_parameters_and_init():
    torch.manual_seed(0)
    a = Transformer(TransformerConfig(vocab_size=20, d_model=16, n_layers=1, heads=2, d_ff=16))
    torch.manual_seed(0)
    b = Transformer(TransformerConfig(vocab_size=20, d_model=16, n_layers=1, heads=2, d_ff=16, concrete_gates=True))
    extra = set(b.state_dict()) - set(a.state_dict())
    assert extra == {k for k in b.state_dict() if k.endswith("concrete.log_alpha")} and len(extra) == 3
    assert all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())  # same init, same RNG use
    assert a.open_heads() is None and float(a.expected_open_heads()) == 0.0
