"""The fused output-projection loss against torch's cross-entropy on materialised logits."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from headsweep.model.losses import linear_cross_entropy


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("chunk", [3, 7, 64])
def test_matches_torch_cross_entropy(smoothing, chunk):
    torch.manual_seed(0)
    h = torch.randn(20, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(11, 8, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 11, (20,))
    want = F.cross_entropy(h @ w.t(), target, label_smoothing=smoothing)
    gh, gw = torch.autograd.grad(want * 3.0, (h, w))
    got = linear_cross_entropy(h, w, target, smoothing, chunk=chunk)
    ch, cw = torch.autograd.grad(got * 3.0, (h, w))  # a non-unit upstream gradient is scaled through
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(ch, gh)
    torch.testing.assert_close(cw, gw)


def test_bf16_autocast_close_to_fp32():
    torch.manual_seed(1)
    h = torch.randn(50, 16, requires_grad=True)
    w = torch.randn(30, 16, requires_grad=True)
    target = torch.randint(0, 30, (50,))
    want = F.cross_entropy(h @ w.t(), target, label_smoothing=0.1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = linear_cross_entropy(h, w, target, 0.1)
    got.backward()
    assert abs(got.item() - want.item()) < 0.05
    assert h.grad.dtype == torch.float32 and w.grad.dtype == torch.float32


class _CountMatmuls(TorchDispatchMode):
    """Counts the matrix products aten runs inside the block."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.matmul):
            self.n += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_evaluation_skips_gradient_work(mode):
    """Validation and test run under no_grad / inference_mode with a weight that requires grad (the
    model's parameters): only the logits' matmul per chunk, not the two gradient ones."""
    torch.manual_seed(0)
    h = torch.randn(12, 3, requires_grad=True)
    w = torch.randn(5, 3, requires_grad=True)
    target = torch.randint(0, 5, (12,))
    with mode(), _CountMatmuls() as counted:
        loss = linear_cross_entropy(h, w, target, 0.1, chunk=4)
    assert counted.n == 3  # 12 rows in chunks of 4: one logits matmul each
    torch.testing.assert_close(loss, F.cross_entropy(h.detach() @ w.detach().t(), target, label_smoothing=0.1))
    with _CountMatmuls() as counted:  # training: logits + grad_h + grad_w per chunk
        linear_cross_entropy(h, w, target, 0.1, chunk=4)
    assert counted.n == 9
