"""Unsupported ops, dense fallback, the plan cache, import isolation, reformat_model and prune_model."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import ustc
import ustc.torch
from ustc import formats
from ustc.torch import TorchUST

from torch_helpers import random_weight, torch_ust


@pytest.fixture
def T():
    return torch_ust(formats.CSR, random_weight((4, 8), seed=11))[0]


def test_unsupported_op_names_it_and_suggests_to_dense(T):
    with pytest.raises(ustc.UnsupportedOperation) as info:
        torch.cumsum(T, 0)
    message = str(info.value)
    assert "aten.cumsum" in message and "to_dense()" in message and "CSR" in message
    with pytest.raises(ustc.UnsupportedOperation, match="aten.flip"):
        torch.flip(T, (0,))
    with pytest.raises(ustc.UnsupportedOperation, match="2-D only"):
        TorchUST(ustc.Tensor.from_dense(np.ones((2, 2, 2)), formats.CSF(3))).t()


def test_dense_fallback_warns_once_per_op(T):
    dense = T.to_dense()
    with ustc.torch.dense_fallback():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first, second = torch.cumsum(T, 1), torch.cumsum(T, 1)
            torch.flip(T, (1,))
    ours = [w for w in caught if "dense fallback" in str(w.message)]
    assert len(ours) == 2 and "aten.cumsum" in str(ours[0].message) and "aten.flip" in str(ours[1].message)
    torch.testing.assert_close(first, torch.cumsum(dense, 1))
    torch.testing.assert_close(second, torch.cumsum(dense, 1))
    with pytest.raises(ustc.UnsupportedOperation):  # off again outside the block
        torch.cumsum(T, 1)


def test_pattern_keeping_updates(T):
    dense = T.to_dense()
    torch.testing.assert_close((T + T).to_dense(), 2 * dense)
    torch.testing.assert_close((T * 3).to_dense(), 3 * dense)
    torch.testing.assert_close((-T).to_dense(), -dense)
    c = T.clone()
    c.add_(T, alpha=-1)
    assert float(c.to_dense().abs().sum()) == 0 and torch.equal(T.to_dense(), dense)  # T untouched
    other, W = torch_ust(formats.CSR, random_weight((4, 8), seed=12))
    total = T + other  # another pattern: the (dense) sum
    assert type(total) is torch.Tensor
    torch.testing.assert_close(total, dense + W)


def test_every_product_goes_through_the_plan_cache(T):
    from ustc.ops import plan_cache
    from ustc.torch import inference

    x = torch.randn(3, 8, dtype=torch.float64)
    torch.mm(T, x.t())  # plan (or reuse an earlier test's plan)
    plan_cache.clear()
    torch.mm(T, x.t())
    first = plan_cache.stats()
    torch.mm(T, torch.randn(8, 3, dtype=torch.float64))
    torch.mv(T, x[0])
    torch.mv(T, x[1])
    second = plan_cache.stats()
    assert first["misses"] >= 1 and first["size"] >= 1
    assert second["misses"] == first["misses"] + 1  # only the first mv plans
    assert second["hits"] == first["hits"] + 2
    # nn.Linear inference: one planned Matmul per weight and input shape, planned once
    for _ in range(3):
        torch.testing.assert_close(F.linear(torch.randn(3, 8, dtype=torch.float64), T).shape, (3, 4))
    plans = inference._PLANS[T.ust]
    assert list(plans) == [(3, torch.float64)] and plans[(3, torch.float64)].mm.plans == 1


def test_import_ustc_does_not_import_torch():
    code = "import sys, ustc; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_torch_names_the_extra():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import ustc\n"
            "try:\n    import ustc.torch\nexcept ustc.MissingDependencyError as e:\n    print('missing:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "missing:" in out.stdout and "ustc[torch]" in out.stdout


def _mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 4))


def test_reformat_model_summary_numbers():
    model = _mlp()
    ustc.torch.prune_model(model[0], method="2:4")
    ustc.torch.prune_model(model[2], 0.75)
    x = torch.randn(5, 16)
    want = model(x)
    summary = ustc.torch.reformat_model(model)
    first, second, third = summary.layers
    assert [s.name for s in summary.layers] == ["0", "2", "4"]
    assert first.format == "Structured(2, 4)" and first.density == 0.5
    assert first.bytes_before == 16 * 8 * 4 and first.bytes_after == 64 * 4 + 64 * 1  # values + uint8 crd
    assert second.format == "CSR" and second.density == 0.25
    assert second.bytes_after == 16 * 4 + 9 * 4 + 16 * 2  # values, int32 pos, uint16 crd
    assert third.format == "dense" and third.bytes_after == third.bytes_before == 8 * 4 * 4
    assert summary.bytes_before == 512 + 256 + 128 and summary.bytes_after == 320 + 132 + 128
    assert isinstance(model[0].weight, TorchUST) and isinstance(model[0].weight, torch.nn.Parameter)
    assert "Structured(2, 4)" in str(summary)
    torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-6)


def test_reformat_model_with_a_custom_func():
    model = _mlp(1)
    chosen = ustc.torch.reformat_model(model, lambda w: TorchUST.from_torch(w.to_sparse_csr())
                                       if w.shape[1] == 8 else None)
    assert [s.format for s in chosen.layers] == ["dense", "CSR", "CSR"]
    with pytest.raises(ustc.ShapeError, match="expected"):
        ustc.torch.reformat_model(_mlp(), lambda w: TorchUST.from_torch(w.t().contiguous()))
    with pytest.raises(TypeError):
        ustc.torch.reformat_model(_mlp(), lambda w: "CSR")


def test_prune_model_metrics():
    model = _mlp(2)
    before = model[0].weight.detach().clone()
    metrics = ustc.torch.prune_model(model, 0.5)
    assert set(metrics) == {"0", "2", "4"}
    assert metrics["0"].pruned_count == 64 and metrics["0"].total_count == 128
    assert int((model[0].weight == 0).sum()) == 64
    kept = before[model[0].weight != 0].abs()
    assert float(kept.min()) >= float(before[model[0].weight == 0].abs().max())
    with pytest.raises(ValueError):
        ustc.torch.prune_model(model, method="random")


@pytest.mark.gpu
def test_cuda_linear():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    T, W = torch_ust(formats.CSR, random_weight((4, 8), seed=13))
    Tc = T.cuda()
    assert Tc.device.type == "cuda"
    x = torch.randn(3, 8, dtype=torch.float64, device="cuda")
    torch.testing.assert_close(F.linear(x, Tc), F.linear(x, W.cuda()))


def test_docstring_examples_run():
    import doctest

    import ustc.torch.dense_results
    import ustc.torch.reformat
    import ustc.torch.subclass

    for module in (ustc.prune, ustc.torch.subclass, ustc.torch.reformat, ustc.torch.dense_results):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def test_docs_torch_md_summary_table():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "torch.md").read_text()
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).eval()
    ustc.torch.prune_model(model, method="2:4")
    summary = ustc.torch.reformat_model(model)
    assert str(summary) in text
    with torch.inference_mode():
        assert model(torch.randn(32, 256)).shape == (32, 256)
