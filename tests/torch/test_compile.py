"""torch.compile: the sparse products as torch.library custom ops with fake implementations; a model of
sparse Linear layers compiles into one graph (fullgraph=True, no graph break) and matches eager."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import ustc
import ustc.torch
from ustc import formats
from ustc.torch import TorchUST
from ustc.torch.compiled import sddmm_values, sparse_linear, sparse_mm

from torch_helpers import random_weight, torch_ust


def _args(T):
    return T.signature, list(T.shape), list(T.buffer_tensors)


@pytest.mark.parametrize("fmt", [formats.CSR, formats.Structured(2, 4), formats.BSR(2, 2), formats.DIAI], ids=str)
def test_custom_ops_pass_opcheck_and_gradcheck(fmt):
    T, W = torch_ust(fmt, random_weight((4, 8), seed=1))
    sig, shape, bufs = _args(T)
    g = torch.Generator().manual_seed(2)
    values = T.stored_values().detach().clone().requires_grad_()
    right = torch.randn(8, 3, generator=g, dtype=torch.float64, requires_grad=True)
    left = torch.randn(2, 4, generator=g, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(sparse_mm(sig, shape, bufs, values, right, True), W @ right)
    torch.testing.assert_close(sparse_mm(sig, shape, bufs, values, left, False), left @ W)
    torch.testing.assert_close(sparse_mm(sig, shape, bufs, values, right[:, 0], True), W @ right[:, 0])
    for args in ((sig, shape, bufs, values, right, True), (sig, shape, bufs, values, left, False)):
        torch.library.opcheck(sparse_mm, args)
    assert torch.autograd.gradcheck(lambda v, x: sparse_mm(sig, shape, bufs, v, x, True), (values, right))
    assert torch.autograd.gradcheck(lambda v, x: sparse_mm(sig, shape, bufs, v, x, False), (values, left))
    x, bias = torch.randn(5, 8, generator=g, dtype=torch.float64, requires_grad=True), \
        torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(sparse_linear(sig, shape, bufs, values, x, bias), torch.nn.functional.linear(x, W, bias))
    torch.library.opcheck(sparse_linear, (sig, shape, bufs, values, x, bias))
    torch.library.opcheck(sparse_linear, (sig, shape, bufs, values, x[:1], None))
    assert torch.autograd.gradcheck(lambda v, x, b: sparse_linear(sig, shape, bufs, v, x, b), (values, x, bias))
    x3 = torch.randn(2, 3, 8, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v, x: sparse_linear(sig, shape, bufs, v, x, None), (values, x3))
    a, b = torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(3, 8, generator=g, dtype=torch.float64)
    sampled = sddmm_values(sig, shape, bufs, values.detach(), None, a, b)
    torch.testing.assert_close(sampled, ustc.torch.sddmm(T, a, b).stored_values())
    stored = torch.zeros_like(sampled)
    coords, index = ustc.torch.pattern.pattern_coords(T.ust, "cpu")
    stored[index] = (a @ b)[coords]
    torch.testing.assert_close(sampled, stored)  # left @ right at the stored coordinates, 0 elsewhere
    torch.library.opcheck(sddmm_values, (sig, shape, bufs, values.detach(), None, a, b))


def _model(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 16)).eval()
    ustc.torch.prune_model(model[0], method="2:4")
    ustc.torch.prune_model(model[2], 0.8)
    dense = copy.deepcopy(model)
    ustc.torch.reformat_model(model)
    model[4].weight = nn.Parameter(TorchUST.from_torch(model[4].weight.detach(), "BSR(4, 4)"))
    assert all(isinstance(model[i].weight, TorchUST) for i in (0, 2, 4))
    return model, dense


def test_compiled_model_is_one_graph_and_matches_eager():
    model, dense = _model()
    x = torch.randn(5, 32)
    with torch.no_grad():
        eager = model(x)
        explained = torch._dynamo.explain(model)(x)
        assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons
        compiled = torch.compile(model, fullgraph=True)
        torch.testing.assert_close(compiled(x), eager, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(compiled(x), dense(x), rtol=1e-5, atol=1e-6)
        x1 = torch.randn(1, 32)  # batch 1: an SpMV inside the op
        torch.testing.assert_close(compiled(x1), model(x1), rtol=1e-5, atol=1e-6)
    with torch.inference_mode():
        x3 = torch.randn(3, 7, 32)  # leading batch dimensions
        torch.testing.assert_close(compiled(x3), dense(x3), rtol=1e-5, atol=1e-6)
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm

    with torch.no_grad():
        torch.compile(model, fullgraph=True, backend=aot_autograd(fw_compiler=capture))(x)
    (graph,) = graphs  # one graph: each layer is one ustc::linear node in it
    targets = [node.target for node in graph.graph.nodes if node.op == "call_function"]
    assert targets.count(torch.ops.ustc.linear.default) == 3


def test_compiled_training_of_dense_layers_around_frozen_sparse_weights():
    model, _ = _model(1)
    for i in (0, 2, 4):
        model[i].weight.requires_grad_(False)
    reference = copy.deepcopy(model)
    x = torch.randn(6, 32, requires_grad=True)
    compiled = torch.compile(model, fullgraph=True)
    loss = compiled(x).square().sum()
    loss.backward()
    x_grad = x.grad.clone()
    x.grad = None
    reference(x).square().sum().backward()
    torch.testing.assert_close(x_grad, x.grad, rtol=1e-5, atol=1e-6)
    for i in (0, 2, 4):
        torch.testing.assert_close(model[i].bias.grad, reference[i].bias.grad, rtol=1e-5, atol=1e-6)
        assert model[i].weight.grad is None


def test_training_sparse_weights_under_compile_is_refused_clearly():
    model, _ = _model(2)
    compiled = torch.compile(model, fullgraph=True)
    with pytest.raises(Exception) as info:
        compiled(torch.randn(2, 32))  # grad mode, weights require grad
    chain, error = [], info.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__
    assert any("cannot be compiled" in text and "torch.no_grad()" in text for text in chain), chain
