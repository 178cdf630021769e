"""The decoding cache of one attention layer: its keys and values already projected, so that each decoding
step projects only its own token (torchtune keeps its KV cache apart from the attention in the same way)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class KVCache:
    """Keys and values already projected, (B, kv_heads, T, d_k) and (B, kv_heads, T, d_v) (fixed heads
    need values but no keys: kv_heads - n key heads).

    Decoder self-attention appends one step at a time; cross-attention fills it once per
    sentence from the encoder output and reuses it for every step.
    """

    k: Tensor | None = None
    v: Tensor | None = None

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Self-attention: this step's keys and values after the ones held; returns all of them."""
        if self.k is not None:
            k, v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        self.k, self.v = k, v
        return k, v

    def once(self, project: Callable[[], tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        """Cross-attention: the encoder output's keys and values, projected on the first step only."""
        if self.k is None:
            self.k, self.v = project()
        return self.k, self.v

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search keeps the surviving hypotheses, or drops finished sentences)."""
        if self.k is not None:
            self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)
