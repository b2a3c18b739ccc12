"""A compiled model keeps computing with its sparse weights as they are now, not as they were traced.

The compiled graph takes each TorchUST weight as an input (its values and buffer tensors, flattened at
every call) and ``ustc::linear`` runs the live weight found over those tensors. So an eager training
step between compiled calls (values changed in place), a ``load_state_dict`` that gives a weight new
storage (same object, new buffers: ``checkpoint.replace_storage``) and a ``reformat_model`` that puts a
new weight of another format in the layer must each show in the next compiled call: through the new
tensors where the graph still fits them, through a recompile where the format or a buffer's size
changed. The oracle is ``F.linear`` on each weight's dense form, read after the change.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend

import ustc.torch
from ustc.torch import TorchUST

TOL = dict(rtol=1e-5, atol=1e-5)


def _model(seed=0, amount=0.8):
    """Linear(32, 48) - ReLU - Linear(48, 16), magnitude-pruned and reformatted (TorchUST weights)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 48), nn.ReLU(), nn.Linear(48, 16))
    ustc.torch.prune_model(model, amount)
    ustc.torch.reformat_model(model)
    assert all(isinstance(model[i].weight, TorchUST) for i in (0, 2))
    return model


def _oracle(model, x):
    """The model's output from the dense form of its weights as they are now."""
    h = F.linear(x, model[0].weight.to_dense().detach(), model[0].bias.detach()).relu()
    return F.linear(h, model[2].weight.to_dense().detach(), model[2].bias.detach())


def _compiled(model):
    counter = CompileCounterWithBackend("inductor")
    torch._dynamo.reset()
    return torch.compile(model, backend=counter, fullgraph=True), counter


@pytest.mark.parametrize("batch", [1, 4])
def test_compiled_call_after_eager_training_steps_sees_new_values(batch):
    model = _model()
    x = torch.randn(batch, 32)
    compiled, counter = _compiled(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with torch.inference_mode():
        before = compiled(x).clone()
        torch.testing.assert_close(before, _oracle(model, x), **TOL)
    for step in range(2):
        opt.zero_grad()
        model(torch.randn(8, 32)).square().sum().backward()  # eagerly, with autograd
        opt.step()
        with torch.inference_mode():
            after = compiled(x)
            torch.testing.assert_close(after, _oracle(model, x), **TOL)
            torch.testing.assert_close(after, model(x), **TOL)
    assert not torch.allclose(after, before)  # the steps changed what the compiled call computes
    assert counter.frame_count == 1  # the same graph: only values changed


def test_compiled_call_after_load_state_dict_with_new_storage():
    """Same-size new buffers (another pattern, as many entries) run in the same graph; a different
    number of stored entries changes the buffers' sizes, which recompiles."""
    model = _model(seed=0)
    x = torch.randn(1, 32)
    compiled, counter = _compiled(model)
    weight = model[0].weight
    for state, graphs in ((_model(seed=1).state_dict(), 1),  # 80% zeros elsewhere: as many entries
                          (_model(seed=2, amount=0.6).state_dict(), 2)):  # more entries: new buffer sizes
        with torch.inference_mode():
            compiled(x)
        old = model[0].weight.buffer_tensors
        model.load_state_dict(state)  # (outside inference mode: inference tensors would recompile too)
        assert model[0].weight is weight and not any(a is b for a, b in zip(old, weight.buffer_tensors))
        with torch.inference_mode():
            torch.testing.assert_close(compiled(x), _oracle(model, x), **TOL)
        assert counter.frame_count == graphs


def test_compiled_call_after_reformat_to_another_format_recompiles():
    model = _model()
    x = torch.randn(1, 32)
    compiled, counter = _compiled(model)
    with torch.inference_mode():
        expected = compiled(x).clone()
    summary = ustc.torch.reformat_model(model, lambda w: TorchUST.from_torch(w.to_dense(), "COO"))
    assert [row.format for row in summary.layers] == ["COO", "COO"]
    with torch.inference_mode():
        out = compiled(x)
    torch.testing.assert_close(out, _oracle(model, x), **TOL)
    torch.testing.assert_close(out, expected, **TOL)  # the same matrices, stored otherwise
    assert counter.frame_count == 2  # the format text is part of the graph's guards
