"""``torch.autocast("cpu")`` with no dtype (bfloat16 is the CPU default) around sparse Linear layers."""

from __future__ import annotations

import copy

import torch
from torch import nn

import ustc.torch
from ustc.torch import TorchUST

TOL = dict(rtol=4e-2, atol=4e-2)   # bfloat16 products of float32 weights and inputs


def _models():
    torch.manual_seed(3)
    dense = nn.Sequential(nn.Linear(24, 40), nn.ReLU(), nn.Linear(40, 6))
    ustc.torch.prune_model(dense, 0.8)
    sparse = copy.deepcopy(dense)
    ustc.torch.reformat_model(sparse)
    return sparse, dense


def test_cpu_autocast_default_dtype_is_bfloat16_for_sparse_layers_too():
    sparse, dense = _models()
    assert all(isinstance(sparse[i].weight, TorchUST) for i in (0, 2))
    x = torch.randn(5, 24)
    xs, xd = x.clone().requires_grad_(), x.clone().requires_grad_()
    with torch.autocast("cpu"):
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
        ys, yd = sparse(xs), dense(xd)
        assert ys.dtype == yd.dtype == torch.bfloat16
        torch.testing.assert_close(ys, yd, **TOL)
    ys.float().sum().backward()
    yd.float().sum().backward()
    torch.testing.assert_close(xs.grad, xd.grad, **TOL)
    grad = sparse[0].weight.grad
    assert isinstance(grad, TorchUST) and grad.dtype == torch.float32      # the weight's own dtype
    mask = dense[0].weight.detach() != 0
    torch.testing.assert_close(grad.to_dense(), dense[0].weight.grad * mask, **TOL)
    assert sparse[0].weight.dtype == torch.float32                          # cast per call, never stored
    with torch.inference_mode():
        assert sparse(x).dtype == torch.float32                             # outside autocast: float32 again
