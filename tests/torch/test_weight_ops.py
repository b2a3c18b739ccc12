"""Ops on TorchUST weights with dense results (norms, sums, means, indexing, ``W + dense``), with gradients
flowing to the stored values: compared with the dense model whose gradient is masked to the pattern."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ustc
import ustc.torch
from ustc import formats
from ustc.torch import TorchUST

from torch_helpers import random_weight, torch_ust

FORMATS = [formats.CSR, formats.Structured(2, 4), formats.BSR(4, 4), formats.COO(), formats.DIAI]

LOSSES = {
    "norm": lambda W: W.norm(),
    "norm p=1": lambda W: W.norm(p=1),
    "linalg.norm": lambda W: torch.linalg.norm(W),
    "abs().mean()": lambda W: W.abs().mean(),
    "sum()": lambda W: W.sum(),
    "sum(0)": lambda W: (W.sum(0) ** 2).sum(),
    "mean(1, keepdim)": lambda W: W.mean(1, keepdim=True).exp().sum(),
    "(W * W).sum()": lambda W: (W * W).sum(),
    "W.pow(2).sum()": lambda W: W.pow(2).sum(),
    "abs().max()": lambda W: W.abs().max(),
    "amax(1)": lambda W: W.amax(1).sum(),
    "var": lambda W: W.var(),
    "W[i]": lambda W: (W[2] * torch.arange(8.0, dtype=W.dtype)).sum(),
    "W[-1]": lambda W: W[-1].square().sum(),
    "W[:, j]": lambda W: (W[:, 3] ** 3).sum(),
    "W[1:3]": lambda W: W[1:3].sin().sum(),
    "W[:, 2:6]": lambda W: W[:, 2:6].cos().sum(),
    "W[idx]": lambda W: W[torch.tensor([0, 2, 2])].sum(),
    "W[mask]": lambda W: W[W.to_dense() > 0.1].sum(),
    "diagonal": lambda W: W.diagonal().sum(),
    "view(-1)": lambda W: (W.view(-1) * torch.arange(64.0, dtype=W.dtype)).sum(),
    "reshape(4, 16)": lambda W: (W.reshape(4, 16).sum(0) ** 2).sum(),
    "flatten": lambda W: W.flatten()[::3].exp().sum(),
    "W + dense": lambda W: (W + torch.linspace(-1, 1, 64, dtype=W.dtype).reshape(8, 8)).square().sum(),
    "dense - W": lambda W: (torch.ones(8, 8, dtype=W.dtype) - W).pow(3).sum(),
    "W * dense": lambda W: (W * torch.linspace(0, 2, 8, dtype=W.dtype)).sum(),
    "where": lambda W: torch.where(torch.eye(8, dtype=torch.bool), W, 2.0 * torch.ones(8, 8, dtype=W.dtype)).sum(),
}


def _weight(fmt, seed=0):
    T, W = torch_ust(fmt, random_weight((8, 8), density=0.5, seed=seed))
    P = torch.nn.Parameter(T.freeze_zeros_())
    return P, W


@pytest.mark.parametrize("fmt", FORMATS, ids=str)
@pytest.mark.parametrize("name", list(LOSSES))
def test_dense_result_and_masked_gradient(fmt, name):
    P, W = _weight(fmt)
    loss = LOSSES[name]
    mask = W != 0
    dense = W.clone().requires_grad_()
    want = loss(dense)
    got = loss(P)
    assert not isinstance(got, TorchUST) and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    got.backward()
    want.backward()
    assert isinstance(P.grad, TorchUST) and P.grad.tensor_format == P.tensor_format
    for key, buf in P.ust._buffers.items():  # the gradient shares the weight's index buffers
        assert P.grad.ust._buffers[key] is buf
    torch.testing.assert_close(P.grad.to_dense(), dense.grad * mask, rtol=1e-10, atol=1e-12)


def test_results_without_grad_and_in_inference_mode():
    P, W = _weight(formats.CSR, seed=1)
    for context in (torch.no_grad, torch.inference_mode):
        with context():
            torch.testing.assert_close(P.sum(), W.sum())
            torch.testing.assert_close(P[3], W[3])
            torch.testing.assert_close(P[:, 5], W[:, 5])
            torch.testing.assert_close(P + W, 2 * W)
            torch.testing.assert_close(P.view(-1), W.view(-1))
            assert P.norm().item() == pytest.approx(W.norm().item())


def test_view_to_its_own_shape_is_the_tensor():
    P, W = _weight(formats.BSR(4, 4), seed=2)
    V = P.detach().view(8, -1)
    assert isinstance(V, TorchUST) and V.stored_values().data_ptr() == P.stored_values().data_ptr()
    flat = P.detach().reshape(-1)  # another shape: a dense copy, as W[i]
    assert not isinstance(flat, TorchUST) and torch.equal(flat, W.reshape(-1))
    with pytest.raises(ustc.UnsupportedOperation, match="aten.view"):  # view(dtype) reinterprets bits
        P.detach().view(torch.int64)
    with pytest.raises(RuntimeError, match="invalid for input of size 64"):
        P.detach().view(3, -1)


def test_lora_merge_is_dense_and_trains_the_adapters():
    torch.manual_seed(0)
    P, W = _weight(formats.Structured(2, 4), seed=2)
    A = torch.randn(2, 8, dtype=torch.float64, requires_grad=True)
    B = torch.randn(8, 2, dtype=torch.float64, requires_grad=True)
    x = torch.randn(5, 8, dtype=torch.float64)
    merged = P + B @ A
    assert type(merged) is torch.Tensor
    torch.testing.assert_close(merged, W + B @ A)
    F.linear(x, merged).square().sum().backward()
    Wd = W.clone().requires_grad_()
    A2, B2 = A.detach().clone().requires_grad_(), B.detach().clone().requires_grad_()
    F.linear(x, Wd + B2 @ A2).square().sum().backward()
    torch.testing.assert_close(A.grad, A2.grad)
    torch.testing.assert_close(B.grad, B2.grad)
    torch.testing.assert_close(P.grad.to_dense(), Wd.grad * (W != 0))


def test_regularized_training_matches_the_dense_masked_model():
    """An L1 + L2 regularizer on the weights inside the loss; SGD steps equal the dense masked model's."""
    torch.manual_seed(1)
    layer = torch.nn.Linear(8, 6).double()
    ustc.torch.prune_model(layer, method="2:4")
    dense = torch.nn.Linear(8, 6).double()
    dense.load_state_dict(layer.state_dict())
    mask = dense.weight.detach() != 0
    ustc.torch.reformat_model(layer)
    x, target = torch.randn(16, 8, dtype=torch.float64), torch.randn(16, 6, dtype=torch.float64)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (layer, dense)]
    for _ in range(4):
        for model, opt in zip((layer, dense), opts):
            opt.zero_grad()
            w = model.weight
            loss = F.mse_loss(model(x), target) + 1e-2 * w.abs().mean() + 1e-3 * (w * w).sum()
            loss.backward()
            if model is dense:
                w.grad *= mask
            opt.step()
    torch.testing.assert_close(layer.weight.to_dense(), dense.weight.detach(), rtol=1e-10, atol=1e-12)
    assert torch.equal(layer.weight.to_dense() != 0, mask)


def test_results_that_do_not_fit_the_pattern_are_dense():
    P, W = _weight(formats.CSR)
    Q, V = _weight(formats.CSR, seed=4)  # another pattern
    with torch.no_grad():
        for got, want in ((P + 1, W + 1), (torch.exp(P), torch.exp(W)), (torch.cos(P), torch.cos(W)),
                          (P + Q, W + V), (P * 0.5, W * 0.5), (torch.sqrt(P.abs()), torch.sqrt(W.abs()))):
            torch.testing.assert_close(got.to_dense() if isinstance(got, TorchUST) else got, want)
        assert type(P + 1) is torch.Tensor and isinstance(P * 0.5, TorchUST)
    with pytest.raises(ustc.UnsupportedOperation, match="aten.cumsum"):
        torch.cumsum(P, 0)  # not element-wise, not a reduction or indexing: refused
