"""ustc.torch.propagate: sparsity attributes propagated through a traced model, layers rebuilt smaller.

Every specialised model is checked against the original on fresh random inputs
(torch.testing.assert_close), the input model against its own state_dict from
before, and the rebuilt layers' shapes against the rows and columns that must go.
"""

from __future__ import annotations

import copy
import dataclasses
import doctest
import re
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import ustc  # noqa: E402
import ustc.torch  # noqa: E402
from ustc.torch.propagate_attrs import (BlockPattern, FeatureSparsity, NMPattern, WeightSparsity,  # noqa: E402
                                        detect_pattern)
from ustc.torch.propagate_relu import SparseReluLinear  # noqa: E402
from ustc.torch.propagate_ops import UNARY, classify  # noqa: E402
from ustc.torch.propagate_rewrite import FeatureGather, FeatureScatter  # noqa: E402


def propagate(model, x, **kwargs):
    kwargs.setdefault("measure", False)
    return ustc.torch.propagate(model, x, **kwargs)


def same_function(fast, model, *shapes, seed=1):
    """The two models agree on fresh random inputs of ``shapes``."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for shape in shapes:
            x = torch.randn(*shape, generator=gen)
            torch.testing.assert_close(fast(x), model(x))


def state(model) -> dict:
    return {k: (v.to_dense() if isinstance(v, ustc.torch.TorchUST) else v).clone()
            for k, v in model.state_dict().items()}


def assert_unchanged(model, before: dict):
    after = state(model)
    assert after.keys() == before.keys()
    for key in before:
        torch.testing.assert_close(after[key], before[key], rtol=0, atol=0)


def weight(fast, name):
    return fast.get_submodule(name).weight


def pruned_rows(linear: nn.Linear, rows, bias: bool = True):
    with torch.no_grad():
        linear.weight[rows] = 0
        if bias and linear.bias is not None:
            linear.bias[rows] = 0


# -- models ----------------------------------------------------------------------------------------

def mlp(sizes=(32, 64, 64, 16)):
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1]).eval()


class Residual(nn.Module):
    def __init__(self, d=32, hidden=96):
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


class GPTBlock(nn.Module):
    """Pre-norm attention (q, k, v, o) and a GELU MLP, written as plain torch."""

    def __init__(self, d=32, heads=4, hidden=128):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.up, self.down = nn.Linear(d, hidden), nn.Linear(hidden, d)
        self.act, self.drop = nn.GELU(), nn.Dropout(0.1)

    def forward(self, x):
        b, t, d = x.shape
        h = self.ln1(x)
        split = lambda y: y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        att = torch.softmax(split(self.q(h)) @ split(self.k(h)).transpose(-1, -2) / (d // self.heads) ** 0.5, -1)
        x = x + self.drop(self.o((att @ split(self.v(h))).transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.down(self.act(self.up(self.ln2(x)))))


class Gated(nn.Module):
    """A GLU-style MLP: up(x) * silu(gate(x)), then down."""

    def __init__(self, d=16, hidden=48):
        super().__init__()
        self.up, self.gate, self.down = nn.Linear(d, hidden), nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        return self.down(self.up(x) * nn.functional.silu(self.gate(x)))


# -- specialisation --------------------------------------------------------------------------------

def test_mlp_whole_rows_pruned_drops_rows_and_columns():
    torch.manual_seed(0)
    model = mlp()
    pruned_rows(model[0], slice(40, 64))
    pruned_rows(model[2], slice(0, 16))
    before = state(model)
    fast, report = propagate(model, torch.randn(8, 32))
    assert weight(fast, "0").shape == (40, 32)
    assert weight(fast, "2").shape == (48, 40)
    assert weight(fast, "4").shape == (16, 48)
    assert report.layer("0").output.dead == tuple(range(40, 64))
    assert report.layer("2").input.dead == tuple(range(40, 64))
    assert (report.layer("2").rows_dropped, report.layer("2").cols_dropped) == (16, 24)
    assert report.layer("0").weight.dead_rows == tuple(range(40, 64))
    assert not report.conversions  # the compact tensors flow from layer to layer
    same_function(fast, model, (5, 32), (1, 32), (2, 3, 32))
    assert_unchanged(model, before)


def test_mlp_90_percent_unstructured():
    torch.manual_seed(0)
    model = mlp((64, 128, 128, 32))
    ustc.torch.prune_model(model, 0.9)
    before = state(model)
    fast, report = propagate(model, torch.randn(16, 64))
    assert {layer.format for layer in report.layers} == {"CSR"}  # the default chooser, without timing
    assert all(isinstance(weight(fast, n), ustc.torch.TorchUST) for n in ("0", "2", "4"))
    assert report.bytes_after < report.bytes_before / 3
    same_function(fast, model, (7, 64), (1, 64))
    assert_unchanged(model, before)


def test_residual_block_with_layernorm():
    torch.manual_seed(0)
    model = Residual().eval()
    pruned_rows(model.fc1, slice(0, 64))
    pruned_rows(model.fc2, slice(24, 32))
    before = state(model)
    fast, report = propagate(model, torch.randn(4, 32))
    assert weight(fast, "fc1").shape == (32, 32)
    assert weight(fast, "fc2").shape == (24, 32)
    assert any(note.startswith("LayerNorm: norm: features mixed") for note in report.boundaries)
    assert any(isinstance(m, FeatureScatter) for m in fast.modules())  # the residual add needs all 32
    assert report.layer("fc2").output.dead == tuple(range(24, 32))
    same_function(fast, model, (6, 32), (2, 5, 32))
    assert_unchanged(model, before)


def test_gpt_block_attention_is_a_boundary():
    torch.manual_seed(0)
    model = GPTBlock().eval()
    pruned_rows(model.v, slice(0, 8))               # head 0 of v
    with torch.no_grad():
        model.o.weight[:, 8:16] = 0                 # o ignores head 1
    pruned_rows(model.up, slice(32, 128))           # 3/4 of the MLP neurons
    before = state(model)
    fast, report = propagate(model, torch.randn(2, 6, 32))
    assert weight(fast, "v").shape == (24, 32)
    assert weight(fast, "o").shape == (32, 24)
    assert weight(fast, "up").shape == (32, 32)
    assert weight(fast, "down").shape == (32, 32)
    assert any(note.startswith("reshape: reshape_2:") for note in report.boundaries)
    same_function(fast, model, (3, 5, 32), (1, 1, 32))
    assert_unchanged(model, before)


def test_24_pruned_layers():
    torch.manual_seed(0)
    model = mlp((32, 64, 32))
    ustc.torch.prune_model(model, method="2:4")
    fast, report = propagate(model, torch.randn(8, 32))
    assert report.layer("0").weight.pattern == NMPattern(2, 4)
    assert [layer.format for layer in report.layers] == ["Structured(2, 4)"] * 2
    assert [layer.shape_after for layer in report.layers] == [(64, 32), (32, 64)]
    same_function(fast, model, (5, 32), (1, 32))


def test_constant_features_fold_into_the_next_bias():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Sigmoid(), nn.Linear(32, 8)).eval()
    pruned_rows(model[0], slice(0, 20), bias=False)  # rows 0..19 output their bias: sigmoid(b) for every input
    fast, report = propagate(model, torch.randn(4, 16))
    assert weight(fast, "0").shape == (12, 16)
    assert weight(fast, "2").shape == (8, 12)
    assert report.layer("2").folded == 20
    constant = dict(report.layer("2").input.constant)
    torch.testing.assert_close(torch.tensor([constant[f] for f in range(20)], dtype=torch.float64),
                               torch.sigmoid(model[0].bias[:20]).double().detach())
    same_function(fast, model, (6, 16))


def test_unused_features_propagate_backward():
    torch.manual_seed(0)
    model = mlp((16, 32, 32, 8))
    with torch.no_grad():
        model[4].weight[:, 10:] = 0  # the last layer reads features 0..9 only
    fast, report = propagate(model, torch.randn(4, 16))
    assert weight(fast, "4").shape == (8, 10)
    assert weight(fast, "2").shape == (10, 32)  # rows nobody reads are gone, though nonzero
    assert report.layer("2").output.unused == tuple(range(10, 32))
    same_function(fast, model, (3, 16))


def test_gated_product_is_dead_where_the_gate_is():
    torch.manual_seed(0)
    model = Gated().eval()
    pruned_rows(model.gate, slice(0, 24))  # silu(0) = 0: the product is 0 there
    fast, _ = propagate(model, torch.randn(4, 16))
    assert weight(fast, "gate").shape == (24, 16)
    assert weight(fast, "up").shape == (24, 16)  # unused: multiplied by 0
    assert weight(fast, "down").shape == (16, 24)
    same_function(fast, model, (5, 16))


def test_torch_nn_utils_prune_masks():
    from torch.nn.utils import prune

    torch.manual_seed(0)
    model = mlp((16, 64, 8))
    prune.ln_structured(model[0], "weight", amount=0.75, n=2, dim=0)  # 48 whole rows; the bias stays
    before = state(model)
    fast, report = propagate(model, torch.randn(4, 16))
    assert report.layer("0").weight.source == "torch.nn.utils.prune"
    assert weight(fast, "0").shape == (16, 16)
    assert weight(fast, "2").shape == (8, 16)
    assert report.layer("2").folded == 48  # relu(bias) of the pruned rows, folded
    same_function(fast, model, (5, 16))
    assert_unchanged(model, before)
    assert hasattr(model[0], "weight_mask")  # the input keeps its pruning


def test_torchust_weights_in_and_out():
    torch.manual_seed(0)
    model = mlp((32, 64, 16))
    ustc.torch.prune_model(model, 0.5)  # 1 in 2**32 that another row is all zero
    pruned_rows(model[0], slice(0, 32))
    ustc.torch.reformat_model(model)
    before = state(model)
    fast, report = propagate(model, torch.randn(4, 32))
    assert report.layer("0").weight.source == "TorchUST CSR"
    assert weight(fast, "0").shape == (32, 32) and weight(fast, "2").shape == (16, 32)
    assert isinstance(weight(fast, "0"), ustc.torch.TorchUST)
    assert report.layer("0").format == "CSR"  # the incoming format, without timing
    same_function(fast, model, (3, 32))
    assert_unchanged(model, before)


def test_module_called_twice_gets_one_layer_per_call():
    torch.manual_seed(0)
    shared = nn.Linear(16, 16)
    pruned_rows(shared, slice(0, 4))

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = shared

        def forward(self, x):
            return self.lin(torch.relu(self.lin(x)))

    model = Twice().eval()
    fast, _ = propagate(model, torch.randn(3, 16))
    same_function(fast, model, (4, 16))


def test_bare_linear_and_several_inputs():
    torch.manual_seed(0)
    lin = nn.Linear(8, 8)
    fast, _ = propagate(lin, torch.randn(2, 8))
    same_function(fast, lin, (3, 8))

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x, y):
            return self.a(x) + self.b(y)

    model = Two().eval()
    pruned_rows(model.a, slice(0, 4))
    pruned_rows(model.b, slice(0, 4))
    fast, _ = propagate(model, (torch.randn(2, 8), torch.randn(2, 8)))
    assert weight(fast, "a").shape == (4, 8)
    x, y = torch.randn(3, 8), torch.randn(3, 8)
    torch.testing.assert_close(fast(x, y), model(x, y))


def test_annotations_on_the_result():
    torch.manual_seed(0)
    model = mlp((8, 16, 4))
    pruned_rows(model[0], slice(0, 8))
    fast, report = propagate(model, torch.randn(4, 8))
    assert isinstance(fast.tesa["_0"], FeatureSparsity) and fast.tesa["_0"].dead == tuple(range(8))
    node = next(n for n in fast.graph.nodes if n.name == "_0")
    assert node.meta["tesa"] == fast.tesa["_0"]
    assert dict(report.activations)["_0"] == fast.tesa["_0"]


def test_every_output_dead():
    torch.manual_seed(0)
    model = mlp((8, 16, 4))
    pruned_rows(model[0], slice(0, 16))
    fast, report = propagate(model, torch.randn(3, 8))
    assert weight(fast, "0").shape == (0, 0) and weight(fast, "2").shape == (0, 0)
    assert report.layer("2").output.constant == tuple((j, float(model[2].bias[j].detach())) for j in range(4))
    same_function(fast, model, (5, 8))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_other_dtypes(dtype):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Dropout(0.1), nn.Linear(32, 8)).eval().to(dtype)
    pruned_rows(model[0], slice(0, 16))
    fast, _ = propagate(model, torch.randn(3, 8, dtype=dtype))
    assert weight(fast, "3").shape == (8, 16) and weight(fast, "3").dtype == dtype
    x = torch.randn(5, 8, dtype=dtype)
    torch.testing.assert_close(fast(x), model(x))


class Scaled(nn.Module):
    """Element-wise ops of every kind between two layers: products, numbers, a parameter per feature."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 8)
        self.scale = nn.Parameter(torch.randn(16))

    def forward(self, x):
        h = self.a(x)
        h = (h * h - 0.5 * h).relu() * self.scale + 1
        return self.b(h / 2)


def test_element_wise_chain_with_a_parameter():
    torch.manual_seed(0)
    model = Scaled().eval()
    pruned_rows(model.a, slice(0, 8))
    fast, report = propagate(model, torch.randn(3, 8))
    assert weight(fast, "a").shape == (8, 8) and weight(fast, "b").shape == (8, 8)
    assert report.layer("b").folded == 8  # (0 * scale + 1) / 2 on the dead features
    assert report.conversions == ("gather after scale: 16 -> 8 features",)  # the parameter, not the activation
    same_function(fast, model, (5, 8))


class ReadAfterWrite(nn.Module):
    """``h`` read before and after an in-place write: the later read sees the write."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 16), nn.Linear(16, 8), nn.Linear(16, 8)

    def forward(self, x):
        h = self.a(x)
        y = self.c(h)
        h.add_(1.0)
        return self.b(h) + y


class InPlaceReLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        h = self.a(x)
        h.relu_()
        return self.b(h)


class WriteThroughView(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        h = self.a(x)
        h[:, 8:].mul_(2)
        return self.b(h)


class AddIntoInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        x += self.b(nn.functional.relu(self.a(x), inplace=True))
        return x * 2


class WriteThroughOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        h = self.a(x)
        torch.tanh(x.repeat(1, 2), out=h)
        return self.b(h)


@pytest.mark.parametrize("cls, a_rows", [(ReadAfterWrite, 8), (InPlaceReLU, 8), (WriteThroughView, 16),
                                         (AddIntoInput, 8), (WriteThroughOut, 16)])
def test_in_place_ops(cls, a_rows):
    torch.manual_seed(0)
    model = cls().eval()
    pruned_rows(model.a, slice(0, 8))
    x = torch.randn(3, 8)
    kept = x.clone()
    fast, report = propagate(model, x)
    assert torch.equal(x, kept)  # the example input is not written
    assert weight(fast, "a").shape[0] == a_rows  # a view written in place keeps its base whole
    assert report.max_abs_diff < 1e-5
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(2):
            y = torch.randn(4, 8, generator=gen)
            torch.testing.assert_close(fast(y.clone()), model(y.clone()))


def test_in_place_relu_module_sequence():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 8)).eval()
    pruned_rows(model[0], slice(0, 8))
    fast, _ = propagate(model, torch.randn(3, 8))
    assert weight(fast, "0").shape == (8, 8) and weight(fast, "2").shape == (8, 8)
    same_function(fast, model, (5, 8))


# -- sparse ReLU, timing, report -------------------------------------------------------------------

def test_sparse_relu_feeds_the_product():
    torch.manual_seed(0)
    model = mlp((16, 64, 8))
    with torch.no_grad():
        model[0].bias.fill_(-3.0)  # most activations are 0 after the ReLU
    fast, report = propagate(model, torch.randn(32, 16), sparse_relu="always", min_sparsity=0.5)
    assert isinstance(fast.get_submodule("2"), SparseReluLinear)
    assert report.layer("2").format == "sparse_relu + dense"
    assert report.layer("2").input.density < 0.5  # measured after the ReLU
    same_function(fast, model, (7, 16), (2, 3, 16), (7, 16), (1, 16))  # planned per batch size, reused
    twin = copy.deepcopy(fast)
    same_function(twin, model, (7, 16))
    x = torch.randn(5, 16, requires_grad=True)  # autograd recording: plain ReLU + linear
    torch.testing.assert_close(fast(x), model(x))
    untouched, _ = propagate(model, torch.randn(32, 16), sparse_relu="never")
    assert not any(isinstance(m, SparseReluLinear) for m in untouched.modules())


def test_format_candidates_follow_the_structure():
    from ustc.torch.propagate_choose import candidates, choose_format

    torch.manual_seed(0)
    blocks = nn.Linear(64, 64)
    with torch.no_grad():
        blocks.weight *= (torch.rand(8, 8) > 0.7).repeat_interleave(8, 0).repeat_interleave(8, 1)
    found = candidates(blocks, None)
    assert list(found) == ["dense", "CSR", "BSR(8, 8)"]
    x = torch.randn(4, 64)
    for layer in found.values():
        torch.testing.assert_close(layer(x), blocks(x))
    label, layer, samples = choose_format(blocks, None, x, measure=True)
    assert set(samples) == set(found) and all(len(v) == 7 for v in samples.values())
    assert min(samples[label]) == min(min(v) for v in samples.values())
    one_in_four = nn.Linear(16, 8)
    with torch.no_grad():
        one_in_four.weight[:, [i for i in range(16) if i % 4]] = 0
    assert "Structured(1, 4)" in candidates(one_in_four, None)
    assert choose_format(one_in_four, ustc.formats.CSR, None, measure=False)[0] == "CSR"  # the incoming one


def test_measured_report():
    torch.manual_seed(0)
    model = mlp((16, 32, 8))
    pruned_rows(model[0], slice(0, 16))
    fast, report = ustc.torch.propagate(model, torch.randn(8, 16))
    assert report.us_before > 0 and report.us_after > 0 and report.speedup > 0
    assert len(report.samples_before) == 7
    assert all(layer.us_before > 0 and layer.us_after > 0 for layer in report.layers)
    text = str(report)
    assert text.splitlines()[0].split()[:3] == ["layer", "shape", "after"]
    assert "model: weights" in text and "µs" in text
    assert report.max_abs_diff < 1e-5
    same_function(fast, model, (3, 16))


def test_bad_sparse_relu_mode():
    with pytest.raises(ValueError, match="sparse_relu"):
        ustc.torch.propagate(mlp(), torch.randn(2, 32), sparse_relu="sometimes")


# -- tracing failures ------------------------------------------------------------------------------

class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        if x.sum() > 0:
            return self.lin(x)
        return x


def test_untraceable_model_is_a_ustc_error():
    with pytest.raises(ustc.torch.UntraceableModel) as info:
        ustc.torch.propagate(DataDependent(), torch.randn(2, 8))
    assert isinstance(info.value, ustc.UnsupportedOperation) and isinstance(info.value, ustc.errors.UstcError)
    assert "DataDependent" in str(info.value) and "control flow" in str(info.value)


def test_untraceable_submodule_is_kept_whole():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), DataDependent_(16), nn.Linear(16, 4)).eval()
    pruned_rows(model[0], slice(0, 8))
    fast, report = propagate(model, torch.randn(3, 8))
    assert report.opaque and report.opaque[0].startswith("2:")
    assert weight(fast, "0").shape == (8, 8)  # dead rows go; the opaque module gets all 16 back
    assert any(isinstance(m, FeatureScatter) for m in fast.modules())
    same_function(fast, model, (4, 8))


class DataDependent_(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        return self.lin(x) if x.sum() > 0 else -x


# -- attributes ------------------------------------------------------------------------------------

def test_attributes_are_frozen_hashable_and_validated():
    a = FeatureSparsity(6, constant=((0, 0.0), (2, 1.5)), unused=(5,), density=0.25)
    assert a.dead == (0,) and a.needed == (1, 3, 4)
    assert {a: 1}[FeatureSparsity(6, constant=((0, 0.0), (2, 1.5)), unused=(5,), density=0.25)] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.size = 3
    for bad in (dict(unused=(3, 1)), dict(unused=(6,)), dict(constant=((1,),)), dict(density=1.5),
                dict(unused=(1.0,))):
        with pytest.raises((ValueError, TypeError)):
            FeatureSparsity(6, **bad)
    with pytest.raises(ValueError):
        NMPattern(4, 4)
    with pytest.raises(ValueError):
        BlockPattern(0, 4)


def test_weight_sparsity_round_trip_and_patterns():
    torch.manual_seed(0)
    mask = torch.rand(8, 16) > 0.5
    w = WeightSparsity.of(mask)
    assert torch.equal(w.mask(), mask) and abs(w.density - float(mask.float().mean())) < 1e-12
    assert hash(w) == hash(WeightSparsity.of(mask.clone()))
    nm = torch.tensor([[1, 1, 0, 0] * 4] * 8, dtype=torch.bool)
    assert detect_pattern(nm) == NMPattern(2, 4)
    blocks = torch.zeros(16, 16, dtype=torch.bool)
    blocks[:8, 8:] = True
    blocks[8:, :8] = True
    assert detect_pattern(blocks) == BlockPattern(8, 8)
    rows = torch.ones(16, 16, dtype=torch.bool)
    rows[3] = False
    assert detect_pattern(rows) is None and WeightSparsity.of(rows).dead_rows == (3,)
    with pytest.raises(ustc.ShapeError):
        WeightSparsity.of(torch.ones(3, dtype=torch.bool))


def test_dropout_in_training_keeps_only_zeros():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train()
    gm = torch.fx.symbolic_trace(model)
    nodes = {n.name: n for n in gm.graph.nodes}
    shapes, dtypes = {"_0": (2, 4), "_1": (2, 4)}, {"_0": torch.float32, "_1": torch.float32}
    op = classify(nodes["_1"], dict(gm.named_modules()), shapes, dtypes)
    assert op.kind == UNARY and not op.exact
    model.eval()
    assert classify(nodes["_1"], dict(gm.named_modules()), shapes, dtypes).exact


def test_gather_and_scatter_modules():
    x = torch.arange(12.0).reshape(2, 6)
    assert torch.equal(FeatureGather(torch.tensor([1, 4]))(x), x[:, [1, 4]])
    out = FeatureScatter(torch.tensor([0, 2]), torch.tensor([9.0, 9.0, 9.0]))(x[:, :2])
    assert torch.equal(out, torch.tensor([[0.0, 9.0, 1.0], [6.0, 9.0, 7.0]]))


# -- documentation ---------------------------------------------------------------------------------

def test_docstring_examples_run():
    for name in ("ustc.torch.propagate", "ustc.torch.propagate_attrs"):
        result = doctest.testmod(sys.modules[name], optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert result.attempted > 0 and result.failed == 0, name


def test_docs_torch_md_propagation_example():
    text = (Path(__file__).resolve().parents[2] / "docs" / "torch.md").read_text()
    section = re.search(r"^## Sparsity propagation\n(.*?)(?=^## )", text, re.S | re.M).group(1)
    test = doctest.DocTestParser().get_doctest(section, {}, "torch.md", None, 0)
    assert test.examples
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0


def test_input_model_untouched_by_measuring():
    torch.manual_seed(0)
    model = GPTBlock().train()  # dropout active, layers in training mode
    pruned_rows(model.up, slice(0, 64))
    before, reference = state(model), copy.deepcopy(model)
    propagate(model, torch.randn(2, 4, 32), measure=True)
    assert_unchanged(model, before)
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters()))
