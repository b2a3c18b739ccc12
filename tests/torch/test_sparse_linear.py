"""SparseLinear: the nn.Linear class reformat_model leaves on layers with TorchUST weights (lean eager forward)."""

from __future__ import annotations

import copy
import io

import pytest
import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.overrides import TorchFunctionMode

import ustc.torch
from ustc.torch import TorchUST
from ustc.torch.linear import SparseLinear

TOL = {torch.float64: dict(rtol=1e-10, atol=1e-12), torch.float32: dict(rtol=1e-5, atol=1e-5),
       torch.float16: dict(rtol=1e-2, atol=1e-2), torch.bfloat16: dict(rtol=4e-2, atol=4e-2)}


class Gated(nn.Linear):
    """A user subclass of nn.Linear: reformat_model changes its weight, never its class."""


def _models(dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8), Gated(8, 8)).to(dtype).eval()
    ustc.torch.prune_model(model, 0.75)
    dense = copy.deepcopy(model)
    ustc.torch.reformat_model(model)
    return model, dense


def test_reformat_model_adopts_exact_linear_layers_with_torchust_weights():
    model, _ = _models()
    assert type(model[2]) is SparseLinear and isinstance(model[2], nn.Linear)
    assert type(model[3]) is Gated  # a subclass keeps its class (and its forward)
    assert set(model.state_dict()) == set(_models()[1].state_dict())
    dense = nn.Sequential(nn.Linear(4, 4))
    ustc.torch.reformat_model(dense)  # nothing pruned: the weight stays dense, the class too
    assert type(dense[0]) is nn.Linear


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_forward_matches_dense_in_every_mode(dtype):
    model, dense = _models(dtype)
    for shape in [(16,), (1, 16), (5, 16), (2, 3, 16)]:
        x = torch.randn(*shape).to(dtype)
        for context in (torch.inference_mode, torch.no_grad, torch.enable_grad):
            with context():
                got, want = model(x), dense(x)
            assert got.shape == want.shape and got.dtype == want.dtype
            torch.testing.assert_close(got, want, **TOL[dtype])


def test_results_are_new_tensors_and_the_input_is_left_alone():
    model, dense = _models(torch.float64)
    x1, x2 = torch.randn(1, 16, dtype=torch.float64), torch.randn(1, 16, dtype=torch.float64)
    before = x1.clone()
    with torch.inference_mode():
        y1 = model[2](model[0](x1))
        y2 = model[2](model[0](x2))
    torch.testing.assert_close(y1, dense[2](dense[0](x1)))
    torch.testing.assert_close(y2, dense[2](dense[0](x2)))
    assert torch.equal(x1, before)


def test_training_takes_the_autograd_path():
    model, dense = _models(torch.float64)
    x = torch.randn(4, 16, dtype=torch.float64, requires_grad=True)
    model(x).square().sum().backward()
    dense(x.detach()).square().sum().backward()
    lin, ref = model[2], dense[2]
    assert isinstance(lin.weight.grad, TorchUST)
    torch.testing.assert_close(lin.weight.grad.to_dense(), ref.weight.grad * (ref.weight != 0))
    torch.testing.assert_close(lin.bias.grad, ref.bias.grad)


def test_autocast_and_torch_function_modes_see_f_linear():
    model, _ = _models()
    x = torch.randn(3, 16)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert model[0](x).dtype == torch.bfloat16

    seen = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with torch.inference_mode(), Record():
        model[2](torch.randn(3, 32))
    assert F.linear in seen


def test_a_dense_weight_assigned_later_runs_f_linear():
    model, dense = _models()
    model[2].weight = nn.Parameter(dense[2].weight.detach().clone())
    x = torch.randn(3, 32)
    with torch.inference_mode():
        torch.testing.assert_close(model[2](x), dense[2](x))


def test_deepcopy_torch_save_and_fx_trace_keep_it_working():
    model, dense = _models()
    x = torch.randn(3, 16)
    with torch.inference_mode():
        want = dense(x)
        twin = copy.deepcopy(model)
        assert type(twin[2]) is SparseLinear
        torch.testing.assert_close(twin(x), want)
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        torch.testing.assert_close(torch.load(buffer, weights_only=False)(x), want)
        traced = fx.symbolic_trace(model)
        torch.testing.assert_close(traced(x), want)


def test_inference_calls_skip_f_linear(monkeypatch):
    import types

    from ustc.torch import linear

    model, dense = _models()
    calls = []
    monkeypatch.setattr(linear, "F", types.SimpleNamespace(linear=lambda *a: calls.append(a) or F.linear(*a)))
    x = torch.randn(1, 32)
    with torch.inference_mode():
        torch.testing.assert_close(model[2](x), dense[2](x))
    assert calls == []  # the planned product, not the subclass dispatch
    with torch.enable_grad():
        model[2](x.requires_grad_())
    assert len(calls) == 1  # autograd to record: F.linear
