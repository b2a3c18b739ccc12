"""Checkpoints: torch.save / torch.load(weights_only=True) of TorchUSTs and state_dicts, compact storage,
load_state_dict across dense and sparse models (both directions, assign=True), torch.export, TorchScript."""

from __future__ import annotations

import copy
import io
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch import nn

import ustc
import ustc.torch
from ustc import formats
from ustc.errors import StorageError
from ustc.torch import TorchUST, checkpoint

from torch_helpers import random_weight, torch_ust


def _roundtrip(obj, **load):
    buf = io.BytesIO()
    torch.save(obj, buf)
    size = len(buf.getvalue())
    buf.seek(0)
    return torch.load(buf, **load), size


def _model(seed=0, sizes=(16, 24, 8), dtype=torch.float64):
    torch.manual_seed(seed)
    layers = [nn.Linear(sizes[0], sizes[1]), nn.ReLU(), nn.Linear(sizes[1], sizes[2])]
    return nn.Sequential(*layers).to(dtype)


def _sparse_model(seed=0):
    """Layer 0: 2:4 (Structured(2, 4)); layer 2: 70% pruned (CSR). Returns (sparse model, pruned dense copy)."""
    model = _model(seed)
    ustc.torch.prune_model(model[0], method="2:4")
    ustc.torch.prune_model(model[2], 0.7)
    dense = copy.deepcopy(model)
    ustc.torch.reformat_model(model)
    assert [ustc.torch.subclass.format_label(model[i].weight.tensor_format) for i in (0, 2)] == \
        ["Structured(2, 4)", "CSR"]
    return model, dense


@pytest.mark.parametrize("fmt", [formats.CSR, formats.Structured(2, 4), formats.DIAI, formats.BSR(2, 2),
                                 formats.COO(), formats.DELTA(4), formats.CSC], ids=str)
def test_torch_ust_roundtrip_weights_only(fmt):
    T, W = torch_ust(fmt, random_weight((6, 8), seed=1))
    T.freeze_zeros_()
    loaded, _ = _roundtrip(T)  # torch.load's default: weights_only=True
    assert isinstance(loaded, TorchUST) and loaded.tensor_format == T.tensor_format
    assert loaded.dtype == T.dtype and loaded.shape == T.shape
    torch.testing.assert_close(loaded.to_dense(), W)
    assert torch.equal(loaded.pattern_mask(), T.pattern_mask())  # the frozen slots come back frozen
    for key, buf in T.ust._buffers.items():
        np.testing.assert_array_equal(np.asarray(loaded.ust._buffers[key]), np.asarray(buf))
        assert loaded.ust._buffers[key].dtype == buf.dtype  # narrow index widths are kept


def test_plain_pickle_of_a_reformatted_model_keeps_formats_and_outputs():
    """pickle.dumps(model) (copy, multiprocessing): uint16 columns once failed in torch's legacy storage loader."""
    model, dense = _sparse_model()
    wide = TorchUST.from_torch(torch.randn(3, 5, dtype=torch.float64), "CSR")  # int64 index buffers travel as such
    narrow = {k: b.dtype for i in (0, 2) for k, b in model[i].weight.ust._buffers.items()}
    assert np.dtype(np.uint16) in narrow.values()  # the case torch's legacy loader cannot read
    x = torch.randn(5, 16, dtype=torch.float64)
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        loaded, w = pickle.loads(pickle.dumps((model, wide), protocol=protocol))
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)  # the same products: equal bits
        torch.testing.assert_close(w.to_dense(), wide.to_dense(), rtol=0, atol=0)
        for i in (0, 2):
            got, want = loaded[i].weight, model[i].weight
            assert isinstance(got, nn.Parameter) and isinstance(got, TorchUST)
            assert got.tensor_format == want.tensor_format
            assert torch.equal(got.pattern_mask(), want.pattern_mask())
            for key, buf in want.ust._buffers.items():
                assert got.ust._buffers[key].dtype == buf.dtype
                np.testing.assert_array_equal(np.asarray(got.ust._buffers[key]), np.asarray(buf))
    assert {k: b.dtype for i in (0, 2) for k, b in model[i].weight.ust._buffers.items()} == narrow  # untouched
    torch.testing.assert_close(model(x), dense(x))


def test_checkpoints_without_unsigned_views_still_load_and_bad_views_are_refused():
    model, _ = _sparse_model()
    T = model[2].weight  # CSR, uint16 columns
    rebuild, args = checkpoint.reduce_torch_ust(T)
    buffers, views = args[4], args[-1]
    assert "uint16" in views
    unsigned = [checkpoint._unsigned(b, name) for b, name in zip(buffers, views)]
    old = rebuild(*args[:4], unsigned, *args[5:-1])  # written before views existed: buffers as they were
    assert old.tensor_format == T.tensor_format and torch.equal(old.to_dense(), T.to_dense())
    with pytest.raises(StorageError, match="marked"):
        rebuild(*args[:-1], ["uint32" if name else name for name in views])


def test_parameter_and_frozen_mask_that_is_not_the_nonzeros():
    T, W = torch_ust(formats.BSR(2, 2), random_weight((4, 8), seed=2))
    T.freeze_zeros_()
    _, index = ustc.torch.pattern.pattern_coords(T.ust, "cpu")
    T.stored_values().view(-1)[index[0]] = 0.0  # a value in the pattern becomes 0...
    P = nn.Parameter(T)
    loaded, _ = _roundtrip({"p": P})
    p = loaded["p"]
    assert isinstance(p, nn.Parameter) and isinstance(p, TorchUST) and p.requires_grad
    assert torch.equal(p.pattern_mask(), T.pattern_mask())  # ...but stays in the pattern (bit-packed mask)
    torch.testing.assert_close(p.to_dense(), T.to_dense())


def test_state_dict_roundtrip_is_compact_and_loads_into_a_sparse_model():
    model, dense = _sparse_model()
    storage = sum(model[i].weight.storage_bytes for i in (0, 2))
    biases = sum(model[i].bias.numel() * 8 for i in (0, 2))
    sd, size = _roundtrip(model.state_dict())
    assert size < storage + biases + 8192  # the ustc buffers plus a little metadata
    _, dense_size = _roundtrip(dense.state_dict())
    assert size < dense_size
    for i in (0, 2):
        w = sd[f"{i}.weight"]
        assert isinstance(w, TorchUST) and w.tensor_format == model[i].weight.tensor_format
    other, _ = _sparse_model(seed=5)  # another pruning: other patterns
    other.load_state_dict(sd)
    x = torch.randn(5, 16, dtype=torch.float64)
    torch.testing.assert_close(other(x), dense(x))
    for i in (0, 2):
        assert torch.equal(other[i].weight.pattern_mask(), dense[i].weight != 0)


def test_tied_weights_are_stored_once():
    model = nn.Sequential(nn.Linear(64, 64, bias=False), nn.Linear(64, 64, bias=False)).double()
    model[1].weight = model[0].weight
    ustc.torch.prune_model(model, method="2:4")
    ustc.torch.reformat_model(model)
    sd, size = _roundtrip(model.state_dict())
    assert size < model[0].weight.storage_bytes + 4096
    assert sd["0.weight"].stored_values().data_ptr() == sd["1.weight"].stored_values().data_ptr()


def test_bfloat16_and_float16_roundtrip():
    for dtype in (torch.bfloat16, torch.float16):
        w = torch.randn(8, 16).to(dtype)
        w[w.abs() < 0.8] = 0
        T = TorchUST.from_torch(w, "CSR")
        loaded, _ = _roundtrip(T)
        assert loaded.dtype == dtype and torch.equal(loaded.to_dense(), w)


def test_safe_globals_helpers():
    T, W = torch_ust(formats.CSR, random_weight((4, 4), seed=3))
    buf = io.BytesIO()
    torch.save(T, buf)
    try:
        torch.serialization.clear_safe_globals()
        buf.seek(0)
        with pytest.raises(Exception, match="rebuild_torch_ust"):
            torch.load(buf)
        buf.seek(0)
        with ustc.torch.safe_globals():
            torch.testing.assert_close(torch.load(buf).to_dense(), W)
    finally:
        ustc.torch.add_safe_globals()
    buf.seek(0)
    torch.testing.assert_close(torch.load(buf).to_dense(), W)


def test_weights_only_load_in_a_fresh_process(tmp_path):
    model, dense = _sparse_model()
    path = tmp_path / "sparse.pt"
    torch.save(model.state_dict(), path)
    x = torch.randn(3, 16, dtype=torch.float64)
    torch.save({"x": x, "y": dense(x).detach()}, tmp_path / "io.pt")
    code = textwrap.dedent(f"""
        import torch
        try:
            torch.load({str(path)!r})
        except Exception as e:
            print("without ustc.torch:", "rebuild_torch_ust" in str(e))
        import ustc.torch
        from torch import nn
        sd = torch.load({str(path)!r})  # weights_only=True is the default
        model = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 8)).double()
        ustc.torch.reformat_model(model, lambda w: ustc.torch.TorchUST.from_torch(w, "CSR"))
        model.load_state_dict(sd)
        io = torch.load({str(tmp_path / "io.pt")!r})
        print("formats:", [type(model[i].weight).__name__ for i in (0, 2)])
        print("close:", torch.allclose(model(io["x"]), io["y"]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "without ustc.torch: True" in out.stdout
    assert "formats: ['TorchUST', 'TorchUST']" in out.stdout and "close: True" in out.stdout


# -- load_state_dict across dense and sparse -------------------------------------------------------
def test_dense_state_dict_into_a_sparse_model_resparsifies_in_each_layers_format():
    model, _ = _sparse_model()
    weight0 = model[0].weight
    donor = _model(seed=9)
    ustc.torch.prune_model(donor[0], method="2:4")  # fits Structured(2, 4), another pattern
    ustc.torch.prune_model(donor[2], 0.4)  # denser than before, still stored as CSR
    model.load_state_dict(donor.state_dict())
    assert model[0].weight is weight0  # the parameter object is kept (optimizers, ties)
    for i, name in ((0, "Structured(2, 4)"), (2, "CSR")):
        w = model[i].weight
        assert isinstance(w, TorchUST) and ustc.torch.subclass.format_label(w.tensor_format) == name
        assert torch.equal(w.to_dense(), donor[i].weight.detach())
        assert torch.equal(w.pattern_mask(), donor[i].weight.detach() != 0)  # pattern = the new nonzeros
    x = torch.randn(4, 16, dtype=torch.float64)
    torch.testing.assert_close(model(x), donor(x))


def test_dense_state_dict_that_does_not_fit_the_format_is_refused():
    model, _ = _sparse_model()
    with pytest.raises(ustc.UnsupportedOperation, match=r"0\.weight.*Structured\(2, 4\)"):
        model.load_state_dict(_model(seed=3).state_dict())  # dense: not 2:4


def test_sparse_state_dict_into_a_dense_model_densifies():
    model, dense = _sparse_model()
    target = _model(seed=4)
    target.load_state_dict(model.state_dict())
    assert all(type(target[i].weight) is nn.Parameter for i in (0, 2))
    for i in (0, 2):
        torch.testing.assert_close(target[i].weight.detach(), dense[i].weight.detach())


def test_assign_keeps_a_sparse_model_sparse():
    model, dense = _sparse_model()
    donor = _model(seed=9)
    ustc.torch.prune_model(donor[0], method="2:4")
    model.load_state_dict(donor.state_dict(), assign=True)
    for i in (0, 2):
        w = model[i].weight
        assert isinstance(w, TorchUST) and isinstance(w, nn.Parameter) and w.requires_grad
        torch.testing.assert_close(w.to_dense(), donor[i].weight.detach())
    assert ustc.torch.subclass.format_label(model[0].weight.tensor_format) == "Structured(2, 4)"
    fresh, _ = _sparse_model(seed=7)
    sd = model.state_dict()
    fresh.load_state_dict(sd, assign=True)  # a sparse state_dict: its TorchUSTs are taken as they are
    assert all(isinstance(fresh[i].weight, TorchUST) for i in (0, 2))
    x = torch.randn(4, 16, dtype=torch.float64)
    torch.testing.assert_close(fresh(x), donor(x))


def test_training_continues_after_loading():
    model, _ = _sparse_model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, target = torch.randn(8, 16, dtype=torch.float64), torch.randn(8, 8, dtype=torch.float64)
    nn.functional.mse_loss(model(x), target).backward()
    opt.step()
    sd, _ = _roundtrip(model.state_dict())
    restored, _ = _sparse_model(seed=3)
    restored.load_state_dict(sd)
    masks = [restored[i].weight.pattern_mask().clone() for i in (0, 2)]
    opt2 = torch.optim.Adam(restored.parameters(), lr=0.01)
    for _ in range(3):
        opt2.zero_grad()
        nn.functional.mse_loss(restored(x), target).backward()
        opt2.step()
    for i, mask in zip((0, 2), masks):
        assert torch.equal(restored[i].weight.to_dense() != 0, mask)  # the loaded pattern is kept


def test_user_built_sparse_parameters_get_the_load_hook():
    layer = nn.Linear(8, 4).double()
    layer.weight = nn.Parameter(torch_ust(formats.CSR, random_weight((4, 8), seed=6))[0])
    donor = nn.Linear(8, 4).double()
    layer.load_state_dict(donor.state_dict())
    assert isinstance(layer.weight, TorchUST) and layer.weight.tensor_format == formats.CSR
    torch.testing.assert_close(layer.weight.to_dense(), donor.weight.detach())


# -- torch.export and TorchScript ------------------------------------------------------------------
def test_torch_export_runs_the_sparse_model():
    model, dense = _sparse_model()
    x = torch.randn(4, 16, dtype=torch.float64)
    program = torch.export.export(model.eval(), (x,))
    torch.testing.assert_close(program.module()(x), dense(x))
    torch.testing.assert_close(program.module()(2 * x), dense(2 * x))


JIT_SCRIPT = """
import copy, torch, ustc, ustc.torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 8)).double()
ustc.torch.prune_model(model, method="2:4")
dense = copy.deepcopy(model)
ustc.torch.reformat_model(model)
x = torch.randn(4, 16, dtype=torch.float64)
if "{mode}" == "trace":
    try:
        torch.jit.trace(model, x)
    except ustc.UnsupportedOperation as e:
        print("refused:", e)
else:
    scripted = torch.jit.script(model)
    print("forward:", torch.allclose(scripted(x), dense(x)))
    scripted(x).square().sum().backward()
    dense(x).square().sum().backward()
    for i in (0, 2):
        g = model[i].weight.grad
        want = dense[i].weight.grad * (dense[i].weight != 0)
        print("grad:", type(g).__name__, torch.allclose(g.to_dense(), want))
"""


@pytest.mark.parametrize("mode", ["trace", "script"])
def test_torchscript_works_or_refuses_clearly(mode):
    out = subprocess.run([sys.executable, "-c", JIT_SCRIPT.format(mode=mode)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr  # never a crash
    if mode == "trace":
        assert "refused: ustc.torch: torch.jit.trace cannot record" in out.stdout
    else:
        assert "forward: True" in out.stdout and out.stdout.count("grad: TorchUST True") == 2
