"""The batch-1 call of a sparse nn.Linear: the planned kernel on the call's own x, the bias in its row write,
and a result buffer reused only where nobody holds the last result (ustc.torch.results.KeptResult).

Each layer is planned once per dtype; the checks that need the hand-written kernels (LinearCsrRoute above
the serial size, SerialCsrRoute below it, LinearNmRoute for 2:4) use one float32 layer each, the generated
route a small layer with int32 columns.
"""

from __future__ import annotations

import copy
import gc

import numpy as np
import pytest
import torch
from torch import nn

import ustc
import ustc.torch
from ustc.formats import CSR
from ustc.torch import TorchUST
from ustc.torch.linear import SparseLinear

TOL = {torch.float64: dict(rtol=1e-10, atol=1e-12), torch.float32: dict(rtol=1e-5, atol=1e-5),
       torch.bfloat16: dict(rtol=4e-2, atol=4e-2)}


def _layers(n_in, n_out, method, amount, dtype=torch.float32, bias=True, seed=0, func=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(n_in, n_out, bias=bias)).eval().to(dtype)
    ustc.torch.prune_model(model, amount, method=method)
    dense = copy.deepcopy(model)
    ustc.torch.reformat_model(model, func)
    assert type(model[0]) is SparseLinear
    return model[0], dense[0]


def _route(lin) -> str:
    return lin.weight._last[4].mm.plan_info


@pytest.fixture(scope="module")
def csr_big():
    """1024 x 1024 at 40% kept: above the serial size, so LinearCsrRoute's kernel runs on the call's x."""
    return _layers(1024, 1024, "magnitude", 0.6)


@pytest.fixture(scope="module")
def nm():
    return _layers(64, 48, "2:4", 0.5)


@pytest.fixture(scope="module")
def small():
    """Below the serial size, uint16 columns: SerialCsrRoute's row loop on the call's x."""
    return _layers(24, 10, "magnitude", 0.7)


def _wide_columns(weight):
    """CSR with int32 columns: the generated kernel (x copied into the plan's operand, the result copied out)."""
    return TorchUST(ustc.Tensor.from_dense(weight.detach().contiguous(), CSR))


@pytest.fixture(scope="module")
def generated():
    return _layers(24, 10, "magnitude", 0.7, func=_wide_columns)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_small_layer_matches_dense(dtype, bias):
    lin, dense = _layers(24, 10, "magnitude", 0.7, dtype, bias)
    for context in (torch.inference_mode, torch.no_grad):
        with context():
            for shape in ((24,), (1, 24), (3, 24), (2, 1, 24), (1, 24)):
                x = torch.randn(shape).to(dtype)
                got, want = lin(x), dense(x)
                assert got.shape == want.shape and got.dtype == want.dtype
                assert got.is_inference() == want.is_inference()
                torch.testing.assert_close(got, want, **TOL[dtype])


@pytest.mark.parametrize("layer", ["csr_big", "nm", "small"])
def test_kernel_routes_read_x_in_place_and_add_the_bias(layer, request, monkeypatch):
    lin, dense = request.getfixturevalue(layer)
    with torch.inference_mode():
        x = torch.randn(1, lin.in_features)
        torch.testing.assert_close(lin(x), dense(x))
        plan = lin.weight._last[4]
        assert plan.call is not None and plan.call.direct and plan.call.kind == "registered kernel", _route(lin)
        assert (plan.at is not None) == (layer == "small")  # SerialCsrRoute reads x at its address

        def copied(*args):
            raise AssertionError("a registered kernel's call went through the plan's buffers")
        monkeypatch.setattr(plan, "_one_copied", copied)
        wide = torch.randn(1, 2 * lin.in_features)
        negative = torch.randn(1, lin.in_features, dtype=torch.complex64).conj().imag  # a negative view
        assert negative.is_neg()
        for x in (torch.randn(lin.in_features), wide[:, ::2], wide[0, 1::2], negative):  # 1-D, strided, negative
            torch.testing.assert_close(lin(x), dense(x))
        lin.bias.add_(1.0)  # an in-place edit of the bias is seen
        dense.bias.add_(1.0)
        torch.testing.assert_close(lin(x), dense(x))
        bias = lin.bias
        lin.bias = dense.bias = None
        torch.testing.assert_close(lin(x), dense(x))
        lin.bias = bias
        dense.bias = nn.Parameter(bias.detach().clone())
        torch.testing.assert_close(lin(x), dense(x))
        lin.bias = nn.Parameter(torch.randn(2 * lin.out_features)[::2])  # a strided bias: added by torch
        dense.bias = nn.Parameter(lin.bias.detach().clone())
        torch.testing.assert_close(lin(x), dense(x))
        lin.bias = bias  # (the module's layers are shared: leave them equal)
        dense.bias = nn.Parameter(bias.detach().clone())


@pytest.mark.parametrize("layer", ["csr_big", "nm", "small", "generated"])
def test_results_kept_alive_are_never_overwritten(layer, request):
    lin, dense = request.getfixturevalue(layer)
    xs = [torch.randn(1, lin.in_features) for _ in range(5)]
    with torch.inference_mode():
        wants = [dense(x) for x in xs]
        first, second = lin(xs[0]), lin(xs[1])  # two results held
        view = lin(xs[2])[0, 3:]  # only a view of the third kept
        array = lin(xs[3]).numpy()  # only a NumPy view of the fourth kept
        shared = np.from_dlpack(lin(xs[4]))  # only an array on the fifth's memory through DLPack
        for _ in range(3):
            lin(xs[0])
        torch.testing.assert_close(first, wants[0])
        torch.testing.assert_close(second, wants[1])
        torch.testing.assert_close(view, wants[2][0, 3:])
        torch.testing.assert_close(torch.from_numpy(array), wants[3])
        torch.testing.assert_close(torch.from_numpy(shared), wants[4])
        detached = lin(xs[1]).detach()
        lin(xs[2])
        torch.testing.assert_close(detached, wants[1])


@pytest.mark.parametrize("layer", ["csr_big", "small", "generated"])
def test_dropped_result_buffer_is_reused_and_each_result_is_right(layer, request):
    lin, dense = request.getfixturevalue(layer)
    xs = [torch.randn(1, lin.in_features) for _ in range(3)]
    with torch.inference_mode():
        pointers = set()
        for x in xs:
            y = lin(x)
            torch.testing.assert_close(y, dense(x))
            pointers.add(y.data_ptr())
            del y
        gc.collect()
        assert len(pointers) == 1  # nobody held a result: one buffer served every call
        held = lin(xs[0])
        other = lin(xs[1])
        assert held.data_ptr() != other.data_ptr()
        torch.testing.assert_close(held, dense(xs[0]))


def test_inference_results_and_no_grad_results_keep_their_kind(csr_big):
    lin, dense = csr_big
    x = torch.randn(1, lin.in_features)
    with torch.inference_mode():
        assert lin(x).is_inference()
    with torch.no_grad():
        y = lin(x)
    assert not y.is_inference()
    y.requires_grad_()  # a normal tensor: usable in a graph afterwards
    (y * 2).sum().backward()
    torch.testing.assert_close(y.grad, torch.full_like(y, 2.0))


def test_training_after_inference_calls_gives_dense_gradients(nm):
    lin, dense = nm
    lin, dense = copy.deepcopy(lin), copy.deepcopy(dense)
    x = torch.randn(1, lin.in_features)
    with torch.inference_mode():
        lin(x)
    lin.train()
    dense.train()
    xg, xd = x.clone().requires_grad_(), x.clone().requires_grad_()
    lin(xg).square().sum().backward()
    dense(xd).square().sum().backward()
    torch.testing.assert_close(xg.grad, xd.grad)
    torch.testing.assert_close(lin.bias.grad, dense.bias.grad)
    mask = dense.weight.detach() != 0
    torch.testing.assert_close(lin.weight.grad.to_dense(), dense.weight.grad * mask)


def test_small_and_generated_layers_take_their_routes(small, generated):
    x = torch.randn(1, 24)
    with torch.inference_mode():
        for (lin, dense), info, direct in ((small, "registered kernel: serial_csr_spmv", True),
                                           (generated, "generated", False)):
            torch.testing.assert_close(lin(x), dense(x))
            assert _route(lin).startswith(info), _route(lin)
            assert (lin.weight._last[4].call is not None) == direct


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("n_in, n_out, amount", [(1, 9, 0.7), (9, 1, 0.7), (40, 33, 0.7), (40, 33, 0.99)])
def test_serial_csr_layer_matches_dense_over_shapes(dtype, bias, n_in, n_out, amount):
    lin, dense = _layers(n_in, n_out, "magnitude", amount, dtype, bias)  # 0.99: mostly empty rows
    with torch.inference_mode():
        lin(torch.randn(n_in, dtype=dtype))
        assert _route(lin).startswith("registered kernel: serial_csr_spmv"), _route(lin)
        for _ in range(8):  # through the kernels' race (six calls) and after it
            for shape in ((n_in,), (1, n_in)):
                x = torch.randn(shape, dtype=dtype)
                got, want = lin(x), dense(x)
                assert got.shape == want.shape and got.dtype == want.dtype
                torch.testing.assert_close(got, want, **TOL[dtype])
