"""Gradients through TorchUST: gradcheck in float64, pattern-restricted weight gradients, training."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ustc
from ustc import formats
from ustc.torch import TorchUST

from torch_helpers import random_weight, torch_ust

GRAD_FORMATS = [formats.CSR, formats.Structured(2, 4), formats.DIAI, formats.BSR(2, 2), formats.DELTA(4),
                formats.COO()]


@pytest.mark.parametrize("fmt", GRAD_FORMATS, ids=str)
def test_gradcheck_linear_mm_mv(fmt):
    T, W = torch_ust(fmt, random_weight((4, 8), seed=5))
    values = T.stored_values().detach().clone().requires_grad_()
    g = torch.Generator().manual_seed(6)
    x = torch.randn(3, 8, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(8, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: F.linear(x, T.with_values(w), b), (x, values, b))
    assert torch.autograd.gradcheck(lambda x, w: torch.mm(T.with_values(w), x.t()), (x, values))
    assert torch.autograd.gradcheck(lambda v, w: torch.mv(T.with_values(w), v), (v, values))
    assert torch.autograd.gradcheck(lambda x, w: x[:, :4] @ T.with_values(w), (x, values))


def test_weight_gradient_keeps_the_pattern():
    T, W = torch_ust(formats.CSR, random_weight((5, 8), seed=7))
    P = torch.nn.Parameter(T)
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    gy = torch.randn(4, 5, dtype=torch.float64)
    F.linear(x, P).backward(gy)
    assert isinstance(P.grad, TorchUST) and P.grad.ust.format == T.ust.format
    assert P.grad.ust._buffers[(1, "crd")] is T.ust._buffers[(1, "crd")]  # the pattern is shared, not copied
    torch.testing.assert_close(P.grad.to_dense(), (gy.t() @ x) * (W != 0))
    torch.testing.assert_close(x.grad, gy @ W)
    F.linear(x, P).backward(gy)  # accumulation keeps the pattern
    torch.testing.assert_close(P.grad.to_dense(), 2 * (gy.t() @ x) * (W != 0))


def test_to_dense_is_differentiable():
    T, W = torch_ust(formats.Structured(2, 4), random_weight((4, 8), seed=8))
    values = T.stored_values().detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda w: (T.with_values(w).to_dense() ** 2).sum(), (values,))


def test_pruned_fine_tuning_with_sgd():
    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 4).double()
    ustc.torch.prune_model(layer, method="2:4")
    ustc.torch.reformat_model(layer)
    W0 = layer.weight.detach().to_dense().clone()
    x, target = torch.randn(16, 8, dtype=torch.float64), torch.randn(16, 4, dtype=torch.float64)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = F.mse_loss(layer(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    W1 = layer.weight.detach().to_dense()
    assert isinstance(layer.weight, TorchUST) and not torch.equal(W0, W1)
    assert ((W1 != 0) <= (W0 != 0)).all()  # nothing grows outside the 2:4 pattern


def test_gradient_of_two_sparse_operands_is_refused():
    T, _ = torch_ust(formats.CSR, random_weight((4, 4)))
    P = torch.nn.Parameter(T)
    with pytest.raises(ustc.UnsupportedOperation, match="two TorchUST"):
        torch.mm(P, T)
