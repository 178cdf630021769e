"""Fixed attention heads (Raganato et al. 2020): heads whose attention weights are a fixed positional pattern
instead of softmax(Q K^T / sqrt(d_k)). Such a head has no W^Q or W^K; its W^V (and W^O) stay learned:

    head_i = A_i V W_i^V          A_i: (Tq, Tk), row t a distribution over the keys, fixed by position only

For query position t (self-attention: queries and keys are the same sentence; in incremental decoding t
counts the tokens the cache already holds) the patterns put their weight on

    cur      the token itself, t               first    the sentence's first token, 0
    prev     t - 1                             last     its last real (non-padding) token
    next     t + 1                             leftN    uniformly on t - N .. t - 1 (left = left3)
                                               rightN   uniformly on t + 1 .. t + N (right = right3)

Padding keys get no weight (the rest is renormalised), and a row left with none (prev of the first
token, next of the last) falls back to cur. Raganato et al. keep one learned head per encoder layer and fix
the others to current, previous and next token and a larger left and right context; here `n` fixed heads
take the first n names of a pattern list.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor, nn

DEFAULT_PATTERNS = ("cur", "prev", "next", "left3", "right3", "first", "last")
_PATTERN = re.compile(r"(cur|prev|next|first|last)|(left|right)([1-9][0-9]*)?")
LOOKS_AHEAD = ("next", "right", "last")  # need keys after the query: not in causal attention


def parse_pattern(name: str) -> tuple[str, int]:
    """(kind, window): "left5" -> ("left", 5), "left" -> ("left", 3), "prev" -> ("prev", 1)."""
    m = _PATTERN.fullmatch(str(name))
    if m is None:
        raise ValueError(
            f"unknown fixed attention pattern {name!r}: use cur, prev, next, first, last, leftN or "
            f"rightN (N tokens, e.g. left3)"
        )
    return (m.group(1), 1) if m.group(1) else (m.group(2), int(m.group(3) or 3))


class FixedPatterns(nn.Module):
    """The attention weights of n fixed heads, one pattern each; no parameters."""

    def __init__(self, patterns):
        super().__init__()
        self.patterns = tuple(str(p) for p in patterns)
        self._parsed = [parse_pattern(p) for p in self.patterns]
        self.looks_ahead = [p for p, (kind, _) in zip(self.patterns, self._parsed) if kind in LOOKS_AHEAD]

    def __len__(self) -> int:
        return len(self.patterns)

    def forward(self, Tq: int, Tk: int, key_padding_mask: Tensor | None, causal: bool, dtype, device) -> Tensor:
        """Weights (B or 1, n, Tq, Tk); key_padding_mask (B, Tk), True at padding. The Tq queries are the
        last Tq of the Tk positions (a decoding cache holds the earlier ones)."""
        if causal and self.looks_ahead:
            raise ValueError(f"fixed patterns {self.looks_ahead} look at later tokens, which causal attention hides")
        t = torch.arange(Tk - Tq, Tk, device=device)[None, :, None]  # query positions (1, Tq, 1)
        j = torch.arange(Tk, device=device)[None, None, :]  # key positions (1, 1, Tk)
        real = None if key_padding_mask is None else ~key_padding_mask[:, None, :]  # (B, 1, Tk)
        last = torch.tensor(Tk - 1, device=device) if real is None else (j * real).amax(-1, keepdim=True)
        support = [_support(kind, n, t, j, last) for kind, n in self._parsed]  # each (1 or B, Tq or 1, Tk)
        a = torch.stack(torch.broadcast_tensors(*support), dim=1).expand(-1, -1, Tq, Tk).to(dtype)
        if real is not None:
            a = a * real[:, None].to(dtype)  # (B, n, Tq, Tk): no weight on padding keys
        mass = a.sum(-1, keepdim=True)
        cur = (j == t)[:, None].to(dtype)  # (1, 1, Tq, Tk)
        return torch.where(mass > 0, a / mass.clamp_min(1e-30), cur)  # a row left with nothing: the token itself

    def extra_repr(self) -> str:
        return ", ".join(self.patterns)


def _support(kind: str, n: int, t: Tensor, j: Tensor, last: Tensor) -> Tensor:
    """Where a pattern puts weight (bool): queries at positions t (1, Tq, 1), keys at j (1, 1, Tk)."""
    if kind == "cur":
        return j == t
    if kind == "prev":
        return j == t - 1
    if kind == "next":
        return j == t + 1
    if kind == "left":
        return (j >= t - n) & (j < t)
    if kind == "right":
        return (j > t) & (j <= t + n)
    if kind == "first":
        return j == 0
    return j == last  # "last": last is (B, 1, 1), or the final position without padding
