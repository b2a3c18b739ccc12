"""CSR SpMV / SpMM of a pruned ``nn.Linear`` (``routes.LinearCsrRoute``, ``kernels._linear_csr``): the
route a planned ``ustc.Matmul`` takes for float CSR operands, its fallbacks, and the torch layer that
runs it. Oracle: NumPy on the dense operands."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import ustc
from ustc.formats import CSR
from ustc.ops import routes, runtime
from ustc.torch.reformat import with_widths
from matmul_helpers import random_dense


@pytest.fixture
def every_size(monkeypatch):
    """Small operands take the route too (normally above ``runtime.SERIAL_WORK`` only)."""
    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)


def _weight(rng, shape, density, dtype, crd_width=16, empty_rows=()):
    w = random_dense(rng, shape, density, dtype)
    w[list(empty_rows)] = 0
    return w, ustc.Tensor.from_dense(w, with_widths(CSR, crd_width=crd_width))


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)


def _linear(mm) -> bool:
    return isinstance(mm._route, routes.LinearCsrRoute)


# one (dtype, columns width, batch) a case: each compiles its own kernel specialisation
@pytest.mark.parametrize("dtype, width, batch", [(np.float32, 16, 17), (np.float64, 16, 1), (np.float64, 32, 5),
                                                 (np.float32, 8, None), (np.float64, 16, None)])
@pytest.mark.parametrize("shape", [(37, 45), (1, 60), (60, 1), (0, 9), (9, 0), (23, 23)])
def test_matches_numpy_with_empty_rows(shape, dtype, width, batch, rng, every_size):
    w, a = _weight(rng, shape, 0.3, dtype, crd_width=width, empty_rows=range(0, shape[0], 4))
    b = rng.standard_normal((shape[1],) if batch is None else (shape[1], batch)).astype(dtype)
    b_before = b.copy()
    mm = ustc.Matmul(a, b).plan()
    assert _linear(mm), mm.plan_info
    for _ in range(2):  # the route overwrites its buffer: no sum left over from the last execute
        np.testing.assert_allclose(np.asarray(mm.execute()), w @ b, **_tol(dtype))
    np.testing.assert_array_equal(b, b_before)


def test_alpha_beta_and_c(rng, every_size):
    w, a = _weight(rng, (30, 40), 0.2, np.float64)
    b, c = rng.standard_normal((40, 6)), rng.standard_normal((30, 6))
    mm = ustc.Matmul(a, b, c=c.copy(), alpha=0.5, beta=2.0).plan()
    assert _linear(mm), mm.plan_info
    np.testing.assert_allclose(np.asarray(mm.execute(out=np.empty((30, 6)))), 0.5 * w @ b + 2.0 * c, rtol=1e-10)


def test_all_zero_weight_and_zero_batch(rng, every_size):
    a = ustc.Tensor.from_dense(np.zeros((12, 20), np.float32), with_widths(CSR, crd_width=16))
    for b in (np.ones((20, 3), np.float32), np.ones((20, 0), np.float32), np.ones(20, np.float32)):
        mm = ustc.Matmul(a, b).plan()
        assert _linear(mm), mm.plan_info
        np.testing.assert_array_equal(np.asarray(mm.execute()), np.zeros((12,) + b.shape[1:]))


def test_other_layouts_and_dtypes_fall_back(rng, every_size):
    """A Fortran-ordered ``b`` given after planning runs the generated kernel; int values and a
    float64 ``b`` against float32 values never take the route; wide columns keep the SpMV of
    ``NarrowColumnsRoute``."""
    w, a = _weight(rng, (25, 30), 0.3, np.float64)
    b = rng.standard_normal((30, 4))
    mm = ustc.Matmul(a, b).plan()
    mm.execute()
    mm.reset_operands(b=np.asfortranarray(b * 3))
    np.testing.assert_allclose(np.asarray(mm.execute()), w @ (b * 3), rtol=1e-10)
    ints = ustc.Tensor.from_dense((w * 10).astype(np.int64), CSR)
    assert not _linear(ustc.Matmul(ints, np.ones((30, 2), np.int64)).plan())
    _, a32 = _weight(rng, (25, 30), 0.3, np.float32)
    assert not _linear(ustc.Matmul(a32, b).plan())
    _, wide = _weight(rng, (25, 30), 0.3, np.float64, crd_width=0)
    assert not _linear(ustc.Matmul(wide, b[:, 0].copy()).plan())


def test_small_products_keep_the_generated_serial_kernel(rng):
    _, a = _weight(rng, (20, 20), 0.3, np.float32)
    assert not _linear(ustc.Matmul(a, np.ones((20, 3), np.float32)).plan())


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(0, 40), cols=st.integers(0, 40), batch=st.integers(0, 20),
       density=st.sampled_from([0.0, 0.1, 0.6, 1.0]), seed=st.integers(0, 2**16))
def test_random_shapes(rows, cols, batch, density, seed):
    rng = np.random.default_rng(seed)
    w, a = _weight(rng, (rows, cols), density, np.float32)
    b = rng.standard_normal((cols, batch)).astype(np.float32)
    saved = runtime.SERIAL_WORK
    runtime.SERIAL_WORK = 0
    try:
        mm = ustc.Matmul(a, b).plan()
    finally:
        runtime.SERIAL_WORK = saved
    assert _linear(mm), mm.plan_info
    np.testing.assert_allclose(np.asarray(mm.execute()), w @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_pruned_linear_inference(dtype, every_size):
    """A reformatted ``nn.Linear`` (CSR, uint16 columns) in inference mode, batch 1, odd and 0."""
    torch.manual_seed(0)
    dense = torch.nn.Linear(48, 40).to(dtype)
    ustc.torch.prune_model(torch.nn.Sequential(dense), 0.8, method="magnitude")
    model = torch.nn.Sequential(torch.nn.Linear(48, 40).to(dtype))
    model.load_state_dict(torch.nn.Sequential(dense).state_dict())
    ustc.torch.reformat_model(model)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype in (torch.float32, torch.float64) else dict(rtol=2e-2, atol=2e-2)
    with torch.inference_mode():
        for batch in (1, 7, 0):
            x = torch.randn(batch, 48).to(dtype)
            want = torch.nn.functional.linear(x.double(), dense.weight.double(), dense.bias.double())
            got = model(x)
            assert got.dtype == dtype and got.shape == (batch, 40)
            torch.testing.assert_close(got.double(), want, **tol)
