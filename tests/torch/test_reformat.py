"""reformat_model on models pruned by torch.nn.utils.prune, with tied weights, twice; prune_model local / global."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn.utils import prune

import ustc
import ustc.torch
from ustc import formats
from ustc.torch import TorchUST


def _mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.ReLU(), torch.nn.Linear(12, 8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 4)).double()


def _to_csr(w):
    return TorchUST.from_torch(w, formats.CSR)  # a dense weight or a TorchUST


@pytest.mark.parametrize("how", ["l1_unstructured", "random_structured", "global_unstructured"])
def test_reformat_model_folds_torch_pruning(how):
    model = _mlp(1)
    if how == "l1_unstructured":
        prune.l1_unstructured(model[0], "weight", amount=0.7)
        prune.l1_unstructured(model[2], "weight", amount=0.4)
        prune.l1_unstructured(model[2], "weight", amount=0.3)  # a PruningContainer of two masks
    elif how == "random_structured":
        torch.manual_seed(5)
        prune.random_structured(model[0], "weight", amount=0.5, dim=0)
        prune.random_structured(model[2], "weight", amount=0.25, dim=1)
    else:
        prune.global_unstructured([(model[0], "weight"), (model[2], "weight"), (model[4], "weight")],
                                  pruning_method=prune.L1Unstructured, amount=0.6)
    prune.l1_unstructured(model[0], "bias", amount=0.5)  # a pruned bias keeps working
    x = torch.randn(7, 16, dtype=torch.float64)
    want = model(x)
    masks = {i: model[i].weight_mask.bool() for i in (0, 2, 4) if hasattr(model[i], "weight_mask")}
    summary = ustc.torch.reformat_model(model, _to_csr)
    assert [layer.format for layer in summary.layers] == ["CSR", "CSR", "CSR"]
    for i, mask in masks.items():
        assert isinstance(model[i].weight, TorchUST) and isinstance(model[i].weight, torch.nn.Parameter)
        assert not hasattr(model[i], "weight_orig") and not hasattr(model[i], "weight_mask")
        assert torch.equal(model[i].weight.pattern_mask(), mask)
    names = [n for n, _ in model.named_parameters()]
    assert "0.bias_orig" in names and "0.weight" in names and "0.weight_orig" not in names
    torch.testing.assert_close(model(x), want, rtol=1e-12, atol=1e-12)  # the first forward after reformat
    model(x).sum().backward()
    assert isinstance(model[0].weight.grad, TorchUST)


def test_prune_model_folds_torch_pruning_first():
    model = _mlp(2)
    prune.l1_unstructured(model[0], "weight", amount=0.3)
    ustc.torch.prune_model(model, 0.5)
    assert not hasattr(model[0], "weight_orig")
    assert int((model[0].weight == 0).sum()) == 96  # 0.5 of 192, counted after the fold


class TiedLM(torch.nn.Module):
    """Embedding tied to the output layer, and two Linear layers sharing one weight."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 8)
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)
        self.b.weight = self.a.weight
        self.head = torch.nn.Linear(8, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tokens):
        return self.head(torch.relu(self.b(torch.relu(self.a(self.emb(tokens))))))


def test_reformat_model_keeps_weight_tying():
    torch.manual_seed(3)
    model = TiedLM().double()
    ustc.torch.prune_model(model, 0.75)
    tokens = torch.tensor([1, 4, 9, 2])
    want = model(tokens)
    summary = ustc.torch.reformat_model(model)
    assert model.head.weight is model.emb.weight and model.a.weight is model.b.weight
    assert isinstance(model.a.weight, TorchUST) and not isinstance(model.head.weight, TorchUST)
    rows = {layer.name: layer for layer in summary.layers}
    assert rows["b"].tied_to == "a" and rows["head"].tied_to == "emb.weight" and rows["head"].format == "dense"
    assert rows["b"].bytes_before == rows["a"].bytes_before == 8 * 8 * 8
    assert summary.bytes_before == 8 * 8 * 8 + 10 * 8 * 8  # the shared weight counted once
    assert "(tied to a)" in str(summary)
    assert len(list(model.parameters())) == 4  # emb, a.weight, a.bias, b.bias: still shared
    torch.testing.assert_close(model(tokens), want, rtol=1e-12, atol=1e-12)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(tokens).sum().backward()
    opt.step()
    assert model.a.weight is model.b.weight


def test_reformat_model_twice_changes_nothing():
    model = _mlp(4)
    ustc.torch.prune_model(model[0], method="2:4")
    ustc.torch.prune_model(model[2], 0.8)
    x = torch.randn(3, 16, dtype=torch.float64)
    want = model(x)
    first = ustc.torch.reformat_model(model)
    weights = [model[i].weight for i in (0, 2, 4)]
    second = ustc.torch.reformat_model(model)
    assert [model[i].weight for i in (0, 2, 4)] == weights and all(
        model[i].weight is w for i, w in zip((0, 2, 4), weights))
    assert [s.format for s in second.layers] == [s.format for s in first.layers] == ["Structured(2, 4)", "CSR",
                                                                                       "dense"]
    assert [s.bytes_before for s in second.layers] == [s.bytes_after for s in first.layers]
    assert second.bytes_after == first.bytes_after
    torch.testing.assert_close(model(x), want, rtol=1e-12, atol=1e-12)
    ustc.torch.reformat_model(model, _to_csr)  # a custom func still gets the TorchUST weights
    assert model[0].weight.tensor_format == formats.CSR
    torch.testing.assert_close(model(x), want, rtol=1e-12, atol=1e-12)


def _weights(model):
    return [model[i].weight.detach().clone() for i in (0, 2, 4)]


def test_prune_model_local_prunes_each_layer_to_amount():
    model = _mlp(5)
    with torch.no_grad():
        model[2].weight.mul_(100)  # large weights: a global threshold would spare this layer
    before = _weights(model)
    metrics = ustc.torch.prune_model(model, 0.6, local=True)
    for (name, m), w0, layer in zip(metrics.items(), before, (0, 2, 4)):
        w = model[layer].weight.detach()
        assert m.pruned_count == round(0.6 * w.numel()) == int((w == 0).sum())
        kept, gone = w0[w != 0].abs(), w0[w == 0].abs()
        assert float(kept.min()) >= float(gone.max())  # the smallest of this layer went
    assert ustc.torch.prune_model(_mlp(5), 0.6).keys() == metrics.keys()  # local is the default


def test_prune_model_global_ranks_all_weights_together():
    model = _mlp(6)
    with torch.no_grad():
        model[2].weight.mul_(100)
    before = _weights(model)
    metrics = ustc.torch.prune_model(model, 0.6, local=False)
    after = _weights(model)
    every = torch.cat([w.reshape(-1) for w in before]).abs()
    count = round(0.6 * every.numel())
    threshold = every.sort().values[count - 1]
    total_pruned = 0
    for (name, m), w0, w in zip(metrics.items(), before, after):
        expected = (w0.abs() > threshold)
        assert torch.equal(w != 0, expected)  # one threshold for the whole model (no ties in random data)
        assert m.pruned_count == int((w == 0).sum())
        total_pruned += m.pruned_count
    assert total_pruned == count
    assert metrics["2"].sparsity < 0.05 and metrics["0"].sparsity > 0.6  # the large layer is spared


def test_prune_model_argument_errors():
    with pytest.raises(ValueError, match="local=False"):
        ustc.torch.prune_model(_mlp(), method="2:4", local=False)
    with pytest.raises(ValueError, match="amount"):
        ustc.torch.prune_model(_mlp(), 1.5, local=False)


def test_prune_model_prunes_a_tied_weight_once():
    model = TiedLM().double()
    metrics = ustc.torch.prune_model(model, 0.5)
    assert set(metrics) == {"a", "head"}
    assert int((model.a.weight == 0).sum()) == 32 and int((model.emb.weight == 0).sum()) == 40
    assert np.isclose(metrics["a"].sparsity, 0.5)
