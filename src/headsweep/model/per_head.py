"""The per-head layout of W^Q, W^K and W^V: one small projection per head, as the paper writes
head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V). It computes what the fused layout (one projection split into
heads) does, more slowly: the reference the tests compare the fused layer against (convert_impl)."""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn


class PerHeadLinear(nn.ModuleList):
    """n projections d_model -> d, one per head; state_dict keys <name>.<i>.weight as a plain ModuleList's."""

    def __init__(self, d_model: int, n: int, d: int, bias: bool = True):
        super().__init__(nn.Linear(d_model, d, bias=bias) for _ in range(n))

    def forward(self, x: Tensor) -> Tensor:
        return torch.stack([p(x) for p in self], dim=1)  # (B, T, d_model) -> (B, n, T, d)


def convert_impl(mha: nn.Module, impl: str) -> nn.Module:
    """A copy of a MultiHeadAttention in the other layout (fused <-> per_head) computing the same function.
    Built from the layer's own config with only impl changed, by name: every other setting is the original's."""
    new = type(mha)(dataclasses.replace(mha.config, impl=impl)).to(mha.out_proj.weight)
    bias = mha.config.bias
    suffix = {"fused": "proj", "per_head": "heads"}  # attribute suffix of the Q/K/V projections
    with torch.no_grad():
        new.out_proj.load_state_dict(mha.out_proj.state_dict())
        if mha.concrete is not None:
            new.concrete.load_state_dict(mha.concrete.state_dict())
        for which, n in mha.proj_heads.items():
            if n == 0:
                continue
            if impl == mha.impl:
                src, dst = getattr(mha, f"{which}_{suffix[impl]}"), getattr(new, f"{which}_{suffix[impl]}")
                dst.load_state_dict(src.state_dict())
            elif impl == "per_head":  # split the fused (n*d, d_model) weight into n blocks of rows
                fused, heads = getattr(mha, f"{which}_proj"), getattr(new, f"{which}_heads")
                for i, head in enumerate(heads):
                    head.weight.copy_(fused.weight.chunk(n, 0)[i])
                    if bias:
                        head.bias.copy_(fused.bias.chunk(n, 0)[i])
            else:  # stack the per-head weights back into one
                heads, fused = getattr(mha, f"{which}_heads"), getattr(new, f"{which}_proj")
                fused.weight.copy_(torch.cat([p.weight for p in heads], 0))
                if bias:
                    fused.bias.copy_(torch.cat([p.bias for p in heads], 0))
    return new
