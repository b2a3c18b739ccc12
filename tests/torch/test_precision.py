"""float16 and bfloat16 TorchUSTs on the CPU (values stored narrow, products accumulated in float32) and
torch.autocast(bfloat16) around sparse Linear layers: forward and backward against the dense model."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ustc
import ustc.torch
from ustc.torch import TorchUST

# a few roundings of the dtype, relative to outputs of order 1
TOL = {torch.float16: dict(rtol=1e-2, atol=1e-2), torch.bfloat16: dict(rtol=4e-2, atol=4e-2)}
NARROW = [torch.float16, torch.bfloat16]


def _models(dtype, seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 24), nn.Tanh(), nn.Linear(24, 8))
    ustc.torch.prune_model(model[0], method="2:4")
    ustc.torch.prune_model(model[2], 0.8)
    ustc.torch.prune_model(model[4], method="2:4")
    model = model.to(dtype)
    dense = copy.deepcopy(model)
    summary = ustc.torch.reformat_model(model)
    assert [s.format for s in summary.layers] == ["Structured(2, 4)", "CSR", "Structured(2, 4)"]
    return model, dense


@pytest.mark.parametrize("dtype", NARROW, ids=str)
def test_values_are_stored_narrow(dtype):
    model, dense = _models(dtype)
    for i in (0, 2, 4):
        W = model[i].weight
        assert W.dtype == dtype and W.stored_values().dtype == dtype
        assert W.ust._values.dtype == (np.float16 if dtype == torch.float16 else np.uint16)  # bf16: its bits
        assert W.ust._values.itemsize == 2
        torch.testing.assert_close(W.to_dense(), dense[i].weight.detach(), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", NARROW, ids=str)
def test_forward_and_backward_against_the_dense_model(dtype):
    model, dense = _models(dtype)
    x = torch.randn(16, 32, dtype=dtype)
    xs, xd = x.clone().requires_grad_(), x.clone().requires_grad_()
    ys, yd = model(xs), dense(xd)
    assert ys.dtype == dtype
    torch.testing.assert_close(ys, yd, **TOL[dtype])
    exact = dense.double()(x.double())  # both are near the float64 result of the same weights
    assert (ys.double() - exact).abs().max() <= 2 * (yd.double() - exact).abs().max() + 1e-2
    target = torch.randn(16, 8, dtype=dtype)
    F.mse_loss(ys, target).backward()
    F.mse_loss(yd, target).backward()
    torch.testing.assert_close(xs.grad, xd.grad, **TOL[dtype])
    for i in (0, 2, 4):
        g = model[i].weight.grad
        assert isinstance(g, TorchUST) and g.dtype == dtype and g.tensor_format == model[i].weight.tensor_format
        mask = dense[i].weight.detach() != 0
        torch.testing.assert_close(g.to_dense(), dense[i].weight.grad * mask, **TOL[dtype])
        torch.testing.assert_close(model[i].bias.grad, dense[i].bias.grad, **TOL[dtype])


@pytest.mark.parametrize("dtype", NARROW, ids=str)
def test_training_steps_keep_the_pattern(dtype):
    model, dense = _models(dtype, seed=1)
    masks = {i: dense[i].weight.detach() != 0 for i in (0, 2, 4)}
    x, target = torch.randn(16, 32, dtype=dtype), torch.randn(16, 8, dtype=dtype)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (model, dense)]
    for _ in range(3):
        for m, opt in zip((model, dense), opts):
            opt.zero_grad()
            F.mse_loss(m(x), target).backward()
            if m is dense:
                for i in (0, 2, 4):
                    m[i].weight.grad *= masks[i]
            opt.step()
    for i in (0, 2, 4):
        W = model[i].weight
        assert W.dtype == dtype and torch.equal(W.to_dense() != 0, masks[i])
        torch.testing.assert_close(W.to_dense(), dense[i].weight.detach(), **TOL[dtype])


@pytest.mark.parametrize("dtype", NARROW, ids=str)
def test_narrow_views_ops_and_conversions(dtype):
    w = torch.randn(6, 8).to(dtype)
    w[w.abs() < 0.7] = 0
    csr = w.to_sparse_csr()
    T = TorchUST.from_torch(csr)  # zero-copy, bfloat16 included
    assert T.dtype == dtype and T.stored_values().data_ptr() == csr.values().data_ptr()
    torch.testing.assert_close(T.to_dense(), w, rtol=0, atol=0)
    for fmt in ("CSC", "COO", "BSR(2, 2)", "DIAI"):
        torch.testing.assert_close(TorchUST.from_torch(w, fmt).to_dense(), w, rtol=0, atol=0)
    torch.testing.assert_close(T.t().to_dense(), w.t(), rtol=0, atol=0)
    torch.testing.assert_close(T.to(torch.float32).to_dense(), w.float())
    assert T.clone().dtype == dtype and T.to(torch.float32).to(dtype).dtype == dtype
    torch.testing.assert_close((T * 2).to_dense(), w * 2)
    torch.testing.assert_close(T.sum(), w.sum(), **TOL[dtype])
    torch.testing.assert_close(T.norm(), w.norm(), **TOL[dtype])
    torch.testing.assert_close(T[2], w[2])
    x = torch.randn(8, 3).to(dtype)
    torch.testing.assert_close(T @ x, w @ x, **TOL[dtype])
    torch.testing.assert_close(x.t() @ T.t(), x.t() @ w.t(), **TOL[dtype])
    torch.testing.assert_close(torch.mv(T, x[:, 0]), torch.mv(w, x[:, 0]), **TOL[dtype])
    gram = T @ T.t()  # sparse @ sparse (Muon's Newton-Schulz step on a TorchUST): the operands' dtype
    assert isinstance(gram, TorchUST) and gram.dtype == dtype
    torch.testing.assert_close(gram.to_dense(), w @ w.t(), **TOL[dtype])


def test_autocast_bfloat16_around_sparse_linear_layers():
    model, dense = _models(torch.float32, seed=2)
    x = torch.randn(16, 32)
    xs, xd = x.clone().requires_grad_(), x.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ys, yd = model(xs), dense(xd)
        assert ys.dtype == yd.dtype == torch.bfloat16
        torch.testing.assert_close(ys, yd, **TOL[torch.bfloat16])
        loss_s, loss_d = ys.float().square().mean(), yd.float().square().mean()
    loss_s.backward()
    loss_d.backward()
    torch.testing.assert_close(xs.grad, xd.grad, **TOL[torch.bfloat16])
    for i in (0, 2, 4):
        g = model[i].weight.grad
        assert isinstance(g, TorchUST) and g.dtype == torch.float32  # the weights' dtype, as for dense
        mask = dense[i].weight.detach() != 0
        torch.testing.assert_close(g.to_dense(), dense[i].weight.grad * mask, **TOL[torch.bfloat16])
    assert model[0].weight.dtype == torch.float32  # autocast casts per call; the weight stays float32
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.inference_mode():
        torch.testing.assert_close(model(x), dense(x), **TOL[torch.bfloat16])
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        assert model(x).dtype == torch.float32
