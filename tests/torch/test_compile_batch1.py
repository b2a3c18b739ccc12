"""torch.compile at batch 1: the compiled ``ustc::linear`` op runs the same planned call as the eager layer
(``inference.planned_linear(kept=True)`` into the plan's kept result buffer), so its results must equal the
eager layer's and the dense layer's, and a result the caller keeps must never be overwritten by a later
compiled call, also where Inductor writes a pointwise op (ReLU) into the op's output buffer in place.

Cheap: one 2:4 MLP (the hand-written n:m kernel takes the bound call) and one small CSR layer, compiled once
each per dtype and grad mode.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import ustc.torch
from ustc.torch import compiled as compiled_ops, inference
from ustc.torch.linear import SparseLinear

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=4e-2, atol=4e-2)}


def _mlp(dtype, seed=0):
    """Linear(64, 96) - ReLU - Linear(96, 32): 2:4 then 80% zeros; ``(sparse, dense)``."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 32)).eval().to(dtype)
    ustc.torch.prune_model(model[0], method="2:4")
    ustc.torch.prune_model(model[2], 0.8)
    dense = copy.deepcopy(model)
    ustc.torch.reformat_model(model)
    assert type(model[0]) is SparseLinear and type(model[2]) is SparseLinear
    return model, dense


def _compiled_plan(layer):
    """The batch-1 plan the compiled op used for ``layer``: the eager layer's own (no weight rebuilt for it)."""
    assert id(layer.weight._v) not in compiled_ops._WEIGHTS
    return layer.weight._last[4]


def _one_graph(model, x):
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_compiled_batch1_equals_eager_and_dense_and_keeps_results(dtype):
    model, dense = _mlp(dtype)
    torch._dynamo.reset()
    with torch.inference_mode():
        xs = [torch.randn(1, 64, dtype=dtype) for _ in range(3)] + [torch.randn(64, dtype=dtype)]
        _one_graph(model, xs[0])
        compiled = torch.compile(model, fullgraph=True)
        kept = [compiled(x) for x in xs[:3]]  # three results alive at once: each its own buffer
        for x, y in zip(xs, kept):
            torch.testing.assert_close(y, model(x), **TOL[dtype])
            torch.testing.assert_close(y, dense(x), **TOL[dtype])
        assert len({y.data_ptr() for y in kept}) == 3
        for _ in range(3):  # results dropped at once: buffers reused, every result still right
            torch.testing.assert_close(compiled(xs[1]), dense(xs[1]), **TOL[dtype])
        torch.testing.assert_close(compiled(xs[3]), dense(xs[3]), **TOL[dtype])  # a 1-D input
        rows = torch.randn(5, 64, dtype=dtype)[2:3]  # a row of a larger batch (a view, not at offset 0)
        torch.testing.assert_close(compiled(rows), dense(rows), **TOL[dtype])
        if dtype == torch.float32:  # the 2:4 layer's compiled op takes the hand-written kernel's bound call
            plan = _compiled_plan(model[0])
            assert plan.call is not None
            model(xs[0])
            assert model[0].weight._last[4] is plan  # the eager call runs the same plan
        batch = torch.randn(6, 64, dtype=dtype)
        torch.testing.assert_close(compiled(batch), dense(batch), **TOL[dtype])


def test_compiled_results_under_no_grad_and_views_of_kept_results():
    model, dense = _mlp(torch.float32, seed=1)
    with torch.no_grad():
        compiled = torch.compile(model, fullgraph=True)
        x1, x2 = torch.randn(1, 64), torch.randn(1, 64)
        y1 = compiled(x1)
        view = y1[0, :4]  # only a view of the first result survives
        del y1
        first = view.clone()
        y2 = compiled(x2)
        torch.testing.assert_close(view, first)  # the held view was not overwritten
        torch.testing.assert_close(view, dense(x1)[0, :4], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(y2, dense(x2), rtol=1e-5, atol=1e-5)
        array = compiled(x1).numpy()  # a NumPy array of a dropped result holds its buffer too
        compiled(x2)
        torch.testing.assert_close(torch.from_numpy(array), dense(x1), rtol=1e-5, atol=1e-5)
        assert _compiled_plan(model[0]).call is not None  # the kept-buffer path ran


def test_compiled_batch1_gradients_of_dense_inputs_around_frozen_sparse_weights():
    model, dense = _mlp(torch.float32, seed=2)
    for m, d in ((model[0], dense[0]), (model[2], dense[2])):
        m.weight.requires_grad_(False)
        d.weight.requires_grad_(False)
    compiled = torch.compile(model, fullgraph=True)
    x = torch.randn(1, 64, requires_grad=True)
    xd = x.detach().clone().requires_grad_()
    for _ in range(2):  # the second call reuses the compiled graph; its results are not kept buffers
        out = compiled(x)
        torch.testing.assert_close(out, dense(xd), rtol=1e-5, atol=1e-5)
    out.square().sum().backward()
    dense(xd).square().sum().backward()
    torch.testing.assert_close(x.grad, xd.grad, rtol=1e-5, atol=1e-5)
    for i in (0, 2):
        torch.testing.assert_close(model[i].bias.grad, dense[i].bias.grad, rtol=1e-5, atol=1e-5)


def test_compiled_op_sees_in_place_weight_updates():
    model, dense = _mlp(torch.float32, seed=3)
    x = torch.randn(1, 64)
    with torch.inference_mode():
        compiled = torch.compile(model, fullgraph=True)
        compiled(x)
    with torch.no_grad():
        model[2].weight.mul_(2.0)  # in place on the stored values: the planned product reads them
        dense[2].weight.mul_(2.0)
    with torch.inference_mode():
        torch.testing.assert_close(compiled(x), dense(x), rtol=1e-5, atol=1e-5)
    assert inference.ENABLED["on"]
