"""SparseLinear.__call__: the batch-1 fast path skips nn.Module.__call__ only where it has nothing to do.

Hooks (the module's own and global ones, forward and pre-forward), ``module.compile()``, keyword
arguments and fx tracing must behave exactly as for ``nn.Linear``; the fast path must give the dense
result as a new tensor, also for a second call reusing the last plan, a new input shape and a bias
swapped between calls.
"""

from __future__ import annotations

import copy

import torch
from torch import fx, nn

import ustc.torch
from ustc.torch import inference
from ustc.torch.linear import SparseLinear


def _layer(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(12, 7)).eval()
    ustc.torch.prune_model(model, 0.75)
    dense = copy.deepcopy(model)
    ustc.torch.reformat_model(model)
    assert type(model[0]) is SparseLinear
    return model[0], dense[0]


def test_repeated_calls_new_shapes_and_a_new_bias_match_dense():
    lin, dense = _layer()
    with torch.inference_mode():
        for shape in ((1, 12), (1, 12), (12,), (3, 12), (2, 1, 12), (1, 12)):
            x = torch.randn(shape)
            first, second = lin(x), lin(x)
            torch.testing.assert_close(first, dense(x))
            assert first.data_ptr() != second.data_ptr()  # a new tensor each call
        lin.bias = nn.Parameter(torch.randn(7))
        dense.bias = nn.Parameter(lin.bias.detach().clone())
        x = torch.randn(1, 12)
        torch.testing.assert_close(lin(x), dense(x))
        lin.bias = None
        dense.bias = None
        torch.testing.assert_close(lin(x), dense(x))


def test_module_and_global_hooks_still_run():
    lin, dense = _layer()
    seen = []
    x = torch.randn(1, 12)
    with torch.inference_mode():
        want = dense(x)
        handles = [lin.register_forward_pre_hook(lambda m, args: seen.append("pre")),
                   lin.register_forward_hook(lambda m, args, out: out * 2)]
        torch.testing.assert_close(lin(x), 2 * want)
        for h in handles:
            h.remove()
        handle = nn.modules.module.register_module_forward_hook(lambda m, args, out: seen.append("global"))
        try:
            torch.testing.assert_close(lin(x), want)
        finally:
            handle.remove()
        torch.testing.assert_close(lin(x), want)
    assert seen == ["pre", "global"]


def test_keyword_input_and_the_general_route_give_the_same_result(monkeypatch):
    lin, dense = _layer()
    x = torch.randn(1, 12)
    with torch.inference_mode():
        torch.testing.assert_close(lin(input=x), dense(x))
        monkeypatch.setitem(inference.ENABLED, "on", False)
        torch.testing.assert_close(lin(x), dense(x))


def test_module_compile_and_fx_trace_go_through_module_call(monkeypatch):
    lin, dense = _layer()
    calls = []
    monkeypatch.setattr(lin, "_compiled_call_impl", lambda *a, **k: calls.append(a) or dense(*a))
    x = torch.randn(1, 12)
    with torch.inference_mode():
        torch.testing.assert_close(lin(x), dense(x))
    assert len(calls) == 1
    monkeypatch.undo()
    traced = fx.symbolic_trace(nn.Sequential(lin))
    # fx traces SparseLinear's forward (not a torch.nn leaf): one F.linear node, no call run eagerly
    assert [n.target for n in traced.graph.nodes if n.op == "call_function"] == [torch.nn.functional.linear]
    with torch.inference_mode():
        torch.testing.assert_close(traced(x), dense(x))
