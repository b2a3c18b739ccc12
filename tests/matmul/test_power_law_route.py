"""The planned CSR SpMV's power-law path end to end (``Matmul(A, x).plan(); execute()``), against SciPy's
``A @ x`` on the operands' current values and structure: heavy rows, empty rows and columns, 1 x n and
n x 1, index widths and dtypes the route takes, alpha / beta * c / out, values and x edited in place, the
structure changed in place or given again, and a thread count change. :data:`HOT` and the 16-bit limits
are shrunk so that small matrices take the hot-column renumbering (``kernels._hot_columns``) or the
operand's own indices (``kernels._narrow_spmv.NarrowColumns.own_indices``), as the power-law graph does."""

from __future__ import annotations

import numba
import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc.kernels import _hot_columns, _narrow_spmv
from ustc.kernels._hot_columns import HotColumns
from ustc.kernels._narrow_spmv import NarrowColumns
from ustc.ops import routes, runtime
from matmul_helpers import random_vector, tol

N_COLS = 300
N_ROWS = 300
EXECUTES = 3      # the route keeps its structure at the second execute and reads it from the third on


@pytest.fixture(autouse=True)
def small_hot(monkeypatch):
    monkeypatch.setattr(_hot_columns, "HOT", 32)
    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)
    monkeypatch.setattr(_narrow_spmv, "ABSOLUTE_COLUMNS", 16)   # no 16-bit copy: the power-law path
    monkeypatch.setattr(_narrow_spmv, "DIAGONAL_REACH", 20)


def _graph(rng, lengths, n_cols=N_COLS, dtype=np.float64, index=np.int32) -> sp.csr_array:
    """Rows of the given lengths, columns drawn ~ rank^-2 (hubs spread over the columns by a
    permutation), the last tenth of the columns never drawn (empty columns); canonical."""
    drawn = max(1, n_cols - n_cols // 10)
    weights = np.arange(1, drawn + 1) ** -2.0
    weights = weights[rng.permutation(drawn)] / weights.sum()
    cols = [np.sort(rng.choice(drawn, min(k, drawn), replace=False, p=weights)) for k in lengths]
    pos = np.concatenate(([0], np.cumsum([len(c) for c in cols]))).astype(index)
    crd = np.concatenate(cols + [np.zeros(0, np.int64)]).astype(index)
    vals = rng.standard_normal(len(crd))
    if np.dtype(dtype).kind == "c":
        vals = vals + 1j * rng.standard_normal(len(crd))
    return sp.csr_array((vals.astype(dtype), crd, pos), shape=(len(lengths), n_cols))


def _lengths(rng, n_rows):
    """Power-law-like row lengths: mostly 0-8 entries, some empty, a heavy row of most columns."""
    lengths = np.minimum(rng.zipf(1.8, n_rows), 60)
    lengths[rng.choice(n_rows, n_rows // 10, replace=False)] = 0
    lengths[n_rows // 3] = int(0.8 * N_COLS)
    return lengths


def _kept(mm):
    assert isinstance(mm._route, routes.NarrowColumnsRoute)
    return mm._route._narrow


# int64 indices here (float32 / int64 and complex128 / int32 are in test_hot_columns): one new compile per kernel
@pytest.mark.parametrize("dtype,index", [(np.float64, np.int64)])
def test_hub_renumbering_matches_scipy(dtype, index, rng):
    """Each execute equals SciPy with values and x edited in place between executes; the operand's
    buffers and x are never written."""
    a = _graph(rng, _lengths(rng, N_ROWS), dtype=dtype, index=index)
    x = random_vector(rng, N_COLS, dtype)
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
    for step in range(EXECUTES + 2):
        if step >= EXECUTES:
            a.data[::3] *= -2
            x[step::5] = 0.5
        keep = [b.copy() for b in (a.indptr, a.indices, a.data, x)]
        np.testing.assert_allclose(mm.execute(), a @ x, **tol(dtype))
        for k, b in zip(keep, (a.indptr, a.indices, a.data, x)):
            np.testing.assert_array_equal(k, b)
    held = _kept(mm)
    assert isinstance(held, HotColumns) and held.cols.dtype == index


@pytest.mark.parametrize("shape", ["1xn", "nx1", "all-zero", "empty columns"])
def test_edge_shapes(shape, rng):
    """One heavy row, one column, no entry (x read under 4 times over: the operand's own indices), and the
    columns past the drawn ones empty: all equal to SciPy at every execute."""
    if shape == "1xn":
        a = _graph(rng, [N_COLS // 2])
    elif shape == "nx1":
        a = sp.csr_array(rng.standard_normal((200, 1)) * (rng.random((200, 1)) < 0.7))
        a.indices, a.indptr = a.indices.astype(np.int32), a.indptr.astype(np.int32)
    elif shape == "all-zero":
        a = sp.csr_array((np.zeros(0), np.zeros(0, np.int32), np.zeros(121, np.int32)), shape=(120, N_COLS))
    else:
        a = _graph(rng, _lengths(rng, N_ROWS))
        assert np.all(np.diff(a.indptr) >= 0) and a[:, N_COLS - N_COLS // 10:].nnz == 0
    x = random_vector(rng, a.shape[1])
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
    for _ in range(EXECUTES):
        np.testing.assert_allclose(mm.execute(), a @ x, **tol(np.float64))
    assert isinstance(_kept(mm), HotColumns if shape == "empty columns" else NarrowColumns)   # x read < 4 times over


def test_alpha_beta_c_and_out(rng):
    """alpha and beta * c with c updated in place, into an out= array the caller gives."""
    a = _graph(rng, _lengths(rng, N_ROWS))
    x, c = random_vector(rng, N_COLS), random_vector(rng, N_ROWS)
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x, c, alpha=0.75, beta=-2.0).plan()
    out = np.full(N_ROWS, np.nan)
    for step in range(EXECUTES + 1):
        c[:] = rng.standard_normal(N_ROWS)
        expect = 0.75 * (a @ x) - 2.0 * c
        result = mm.execute(out=out)
        np.testing.assert_allclose(np.asarray(result), expect, **tol(np.float64))
        np.testing.assert_allclose(out, expect, **tol(np.float64))
    assert isinstance(_kept(mm), HotColumns)


def test_structure_changed_in_place_or_given_again(rng):
    """A sampled column edited in place is seen (the kept renumbering is dropped, the result follows
    the new structure); a new operand given through reset_operands is planned again."""
    a = _graph(rng, _lengths(rng, N_ROWS))
    x = random_vector(rng, N_COLS)
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
    for _ in range(EXECUTES):
        mm.execute()
    held = _kept(mm)
    at = int(held.sample.at[len(held.sample.at) // 2])
    row = int(np.searchsorted(a.indptr, at, side="right")) - 1
    free = np.setdiff1d(np.arange(N_COLS), a.indices[a.indptr[row]:a.indptr[row + 1]])
    a.indices[at] = free[-1]                 # still a valid column (rows unsorted there: SciPy does not care)
    np.testing.assert_allclose(mm.execute(), a @ x, **tol(np.float64))
    assert _kept(mm) is None
    b = _graph(rng, _lengths(rng, N_ROWS))
    mm.reset_operands(a=ustc.Tensor.from_package(b))
    for _ in range(EXECUTES):
        np.testing.assert_allclose(mm.execute(), b @ x, **tol(np.float64))
    assert isinstance(_kept(mm), HotColumns) and _kept(mm) is not held


def test_thread_counts_one_and_two(rng):
    """The kept row chunks follow the thread count: planned on 2 threads, executed on 1, then 2 again."""
    a = _graph(rng, _lengths(rng, N_ROWS))
    x = random_vector(rng, N_COLS)
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
    try:
        for threads in (min(2, numba.config.NUMBA_NUM_THREADS), 1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(threads)
            for _ in range(EXECUTES):
                np.testing.assert_allclose(mm.execute(), a @ x, **tol(np.float64))
            assert len(_kept(mm).bounds) - 1 == min(threads, a.shape[0])
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
