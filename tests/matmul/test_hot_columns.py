"""A planned CSR SpMV over a power-law graph renumbers its most-read columns into ``z = [x[hot], x]``
(``kernels._hot_columns``), with :data:`HOT` shrunk so that small matrices qualify. Oracle: SciPy on
the operands' current values and structure."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc.kernels import _hot_columns, _narrow_spmv
from ustc.kernels._hot_columns import HotColumns
from ustc.ops import routes, runtime
from matmul_helpers import tol

N_COLS = 200


@pytest.fixture
def small_hot(monkeypatch):
    monkeypatch.setattr(_hot_columns, "HOT", 16)
    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)
    monkeypatch.setattr(_narrow_spmv, "ABSOLUTE_COLUMNS", 16)   # no 16-bit copy: the power-law path
    monkeypatch.setattr(_narrow_spmv, "DIAGONAL_REACH", 20)


def _skewed(rng, n_rows, dtype=np.float64, index=np.int32):
    """Columns drawn with probability ~ rank^-1.5 (hubs spread over the columns), rows of 0-30 entries."""
    weights = np.arange(1, N_COLS + 1) ** -1.5
    weights = weights[rng.permutation(N_COLS)]
    lengths = rng.integers(0, 31, n_rows)
    lengths[n_rows // 2] = 150                                # one long row
    cols = [np.unique(rng.choice(N_COLS, k, p=weights / weights.sum())) for k in lengths]
    pos = np.concatenate(([0], np.cumsum([len(c) for c in cols]))).astype(index)
    crd = np.concatenate(cols).astype(index)
    vals = rng.standard_normal(len(crd))
    if np.dtype(dtype).kind == "c":
        vals = vals + 1j * rng.standard_normal(len(crd))
    return sp.csr_array((vals.astype(dtype), crd, pos), shape=(n_rows, N_COLS))


@pytest.mark.parametrize("dtype,index", [(np.float64, np.int32), (np.float32, np.int64), (np.complex128, np.int32)])
def test_planned_spmv_renumbers_hot_columns(dtype, index, rng, small_hot):
    """float64 / float32 run the masked row kernel on z, complex128 gather_spmv; values and x changed
    in place are read at every execute; the operand's buffers are unchanged."""
    a = _skewed(rng, 150, dtype, index)
    x = rng.standard_normal(N_COLS).astype(dtype)
    keep = [b.copy() for b in (a.indptr, a.indices)]
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
    for step in range(4):
        if step == 3:
            a.data *= 2
            x[:] = rng.standard_normal(N_COLS)
        np.testing.assert_allclose(mm.execute(), a @ x, **tol(dtype))
    held = mm._route._narrow
    assert isinstance(mm._route, routes.NarrowColumnsRoute) and isinstance(held, HotColumns)
    assert held.nbytes > held.cols.nbytes and held.cols.dtype == index
    for k, b in zip(keep, (a.indptr, a.indices)):
        np.testing.assert_array_equal(k, b)


def test_alpha_c_and_refusals(rng, small_hot):
    """alpha and beta * c (c updated in place); a matrix without hubs, or reading x too few times,
    keeps its own indices."""
    a = _skewed(rng, 150)
    x, c = rng.standard_normal(N_COLS), rng.standard_normal(150)
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x, c, alpha=-1.5, beta=0.5).plan()
    for _ in range(3):
        before = c.copy()
        np.testing.assert_allclose(mm.execute(), -1.5 * (a @ x) + 0.5 * before, **tol(np.float64))
    assert isinstance(mm._route._narrow, HotColumns)
    flat = sp.random_array((120, N_COLS), density=0.1, rng=rng, format="csr")   # no hubs
    assert HotColumns.of(flat.indptr, flat.indices.astype(np.int32), N_COLS, 2) is None
    short = a[:10]                                                              # reads x under 4 times over
    assert HotColumns.of(short.indptr, short.indices, N_COLS, 2) is None
