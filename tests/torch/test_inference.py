"""The inference path of sparse nn.Linear (one planned Matmul per weight and input shape) against dense torch."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ustc
import ustc.torch
from ustc import formats
from ustc.torch import TorchUST, inference

from torch_helpers import random_weight, torch_ust

TOL = {torch.float64: dict(rtol=1e-10, atol=1e-12), torch.float32: dict(rtol=1e-5, atol=1e-5),
       torch.float16: dict(rtol=1e-2, atol=1e-2), torch.bfloat16: dict(rtol=4e-2, atol=4e-2)}


def _layer(fmt, dtype, seed=0):
    T, W = torch_ust(fmt, random_weight((12, 16), density=0.4, seed=seed))
    T, W = T.to(dtype), W.to(dtype)
    bias = torch.randn(12, dtype=dtype)
    return T, W, bias


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("fmt", [formats.CSR, formats.Structured(2, 4), formats.BSR(4, 4), formats.DIAI], ids=str)
def test_inference_linear_matches_dense(fmt, dtype):
    T, W, bias = _layer(fmt, dtype)
    shapes = [(16,), (1, 16), (5, 16), (2, 3, 16), (1, 1, 16)]
    for context in (torch.inference_mode, torch.no_grad):
        with context():
            for shape in shapes:
                x = torch.randn(*shape).to(dtype)
                for b in (bias, None):
                    got, want = F.linear(x, T, b), F.linear(x, W, b)
                    assert got.shape == want.shape and got.dtype == want.dtype
                    torch.testing.assert_close(got, want, **TOL[dtype])
    assert set(inference._PLANS[T.ust]) == {(1, dtype), (5, dtype), (6, dtype)}  # planned per batch size


def test_results_are_new_tensors_and_weight_updates_are_seen():
    T, W, bias = _layer(formats.CSR, torch.float64, seed=1)
    x1, x2 = torch.randn(1, 16, dtype=torch.float64), torch.randn(1, 16, dtype=torch.float64)
    with torch.inference_mode():
        y1 = F.linear(x1, T)
        y2 = F.linear(x2, T)
        torch.testing.assert_close(y1, F.linear(x1, W))  # not overwritten by the second call
        torch.testing.assert_close(y2, F.linear(x2, W))
    with torch.no_grad():
        T.mul_(2.0)  # in place, on the stored values
    with torch.inference_mode():
        torch.testing.assert_close(F.linear(x1, T, bias), F.linear(x1, 2 * W, bias))


def test_new_storage_gets_new_plans():
    layer = nn.Linear(16, 12).double()
    ustc.torch.prune_model(layer, 0.7)
    ustc.torch.reformat_model(layer)
    x = torch.randn(4, 16, dtype=torch.float64)
    with torch.inference_mode():
        layer(x)
    donor = nn.Linear(16, 12).double()
    ustc.torch.prune_model(donor, 0.5)
    layer.load_state_dict(donor.state_dict())  # CSR again, another pattern
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), donor(x))


def test_autograd_and_autocast_take_the_general_path():
    T, W, bias = _layer(formats.CSR, torch.float32, seed=2)
    P = nn.Parameter(T)
    x = torch.randn(3, 16, requires_grad=True)
    F.linear(x, P, bias).sum().backward()
    assert isinstance(P.grad, TorchUST) and x.grad is not None
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert F.linear(x.detach(), P, bias).dtype == torch.bfloat16


def test_threads_share_a_plan():
    T, W, bias = _layer(formats.CSR, torch.float64, seed=3)
    xs = [torch.randn(1, 16, dtype=torch.float64) for _ in range(8)]
    results = [None] * len(xs)

    def work(k):
        with torch.inference_mode():
            for _ in range(20):
                results[k] = F.linear(xs[k], T, bias)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, y in zip(xs, results):
        torch.testing.assert_close(y, F.linear(x, W, bias))
