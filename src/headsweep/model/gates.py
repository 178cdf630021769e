"""Hard-concrete head gates (Louizos et al. 2018), as Voita et al. 2019 use them to prune heads while training.

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
