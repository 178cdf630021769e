"""Head gating: what multiplies each head's output before W^O (HeadGating), and the hard-concrete gates
(Louizos et al. 2018) that Voita et al. 2019 use to prune heads while training (HardConcreteGate).

Each head i has a learnable log alpha_i. While training, its gate is a sample

    u ~ U(0, 1),   s = sigmoid((log u - log(1 - u) + log alpha_i) / beta)
    z = min(1, max(0, s (r - l) + l))          stretched to (l, r) = (-0.1, 1.1), then clipped

so z is exactly 0 or 1 with non-zero probability and differentiable in log alpha between. At evaluation
the gate is deterministic: z = min(1, max(0, sigmoid(log alpha) (r - l) + l)). The L0 penalty is the
expected number of open gates, sum_i P(z_i > 0) = sum_i sigmoid(log alpha_i - beta log(-l / r)).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class HeadGating:
    """xi_i head_i for the h heads of an attention layer, xi = gate * z * head dropout:

    gate: the head gates of Michel et al. 2019 (None: all ones), given per call or set as `self.gate` by the
    analysis: xi_i = 0 removes head i, and dL/dxi_i is head i's importance;
    z: the learned hard-concrete gate `self.concrete` (concrete_gates; None when off);
    head dropout: whole heads dropped per sentence while training, rescaled to keep the expected output.
    With `self.record_weights` the layer also keeps its attention weights in `self.last_weights` (analysis).

    Mixed into MultiHeadAttention rather than a submodule of it, so that these stay the layer's own
    attributes: state_dict keys (concrete.log_alpha) and the analysis code's m.gate, m.last_weights unchanged.
    """

    def init_gating(self, heads: int, head_dropout: float, concrete_gates: bool) -> None:
        # head_dropout is checked with the layer's other settings (AttentionConfig)
        self.head_dropout = head_dropout
        self.concrete = HardConcreteGate(heads) if concrete_gates else None  # z: learned, L0-penalised
        # Analysis hooks, not training state: a default gate xi used when forward() gets none, and
        # a switch that makes forward() keep its attention weights in `last_weights`.
        self.gate: Tensor | None = None
        self.record_weights = False
        self.last_weights: Tensor | None = None

    def gate_heads(self, heads: Tensor, weights: Tensor | None, gate: Tensor | None = None) -> Tensor:
        """heads (B, h, Tq, d_v) -> xi_i head_i, same shape; records `weights` (B, h, Tq, Tk) when asked to."""
        if self.record_weights:
            self.last_weights = weights.detach()
        xi = self.head_gate(gate, heads.size(0), heads.device)  # (h,) or (B, h)
        return heads if xi is None else heads * xi.view(-1, heads.size(1), 1, 1)

    def head_gate(self, gate: Tensor | None, B: int, device) -> Tensor | None:
        """xi for this call: the given gate (or self.gate), times z and head dropout where they are on."""
        gate = self.gate if gate is None else gate
        if self.concrete is not None:
            z = self.concrete(B)  # (B, h) sampled in training, (h,) deterministic in eval
            gate = z if gate is None else gate * z
        if self.training and self.head_dropout > 0:
            keep = 1.0 - self.head_dropout
            drop = torch.empty(B, self.heads, device=device).bernoulli_(keep) / keep
            gate = drop if gate is None else gate * drop
        return gate


class HardConcreteGate(nn.Module):
    """One gate per head: (B, h) samples in training mode, the deterministic (h,) gate in eval mode."""

    def __init__(
        self,
        heads: int,
        temperature: float = 1 / 3,
        stretch: tuple[float, float] = (-0.1, 1.1),
        init_log_alpha: float = 3.0,
    ):
        super().__init__()
        low, high = stretch
        if not (low < 0 and high > 1 and temperature > 0):
            raise ValueError(f"need stretch low < 0 < 1 < high and temperature > 0, got {stretch}, {temperature}")
        self.temperature, self.low, self.high = temperature, low, high
        # log alpha = 3: open (deterministic z = 1, P(z > 0) = 0.98); training closes what it can spare
        self.log_alpha = nn.Parameter(torch.full((heads,), float(init_log_alpha)))

    def forward(self, batch_size: int) -> Tensor:
        if not self.training:
            return self.deterministic()
        u = torch.rand(batch_size, self.log_alpha.numel(), device=self.log_alpha.device).clamp(1e-6, 1 - 1e-6)
        s = torch.sigmoid((u.log() - (-u).log1p() + self.log_alpha) / self.temperature)  # (B, h)
        return (s * (self.high - self.low) + self.low).clamp(0.0, 1.0)

    def deterministic(self) -> Tensor:
        """(h,): the gate at evaluation; 0 = the head is pruned."""
        return (torch.sigmoid(self.log_alpha) * (self.high - self.low) + self.low).clamp(0.0, 1.0)

    def open_probability(self) -> Tensor:
        """(h,): P(z_i > 0), whose sum is the L0 penalty."""
        return torch.sigmoid(self.log_alpha - self.temperature * math.log(-self.low / self.high))

    def extra_repr(self) -> str:
        return f"heads={self.log_alpha.numel()}, temperature={self.temperature:.3g}, stretch=({self.low}, {self.high})"
