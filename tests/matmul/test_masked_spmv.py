"""The masked 8-lane CSR SpMV (``kernels._masked_spmv``): rows of every length around the 8-lane
step (0, 1, 7, 8, 9, 16, 17, a long row) and around its prefetch distances, row chunks, alpha and accumulate,
float32 / float64 with int32 / int64 indices, the lines of x prefetched or not, against SciPy; inputs unchanged;
the planned SpMV on its own indices runs it.
One kernel compiled per (value, index) dtype pair."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc.kernels import _masked_spmv, _narrow_spmv
from ustc.kernels._masked_spmv import fits, masked_spmv
from ustc.kernels._narrow_spmv import row_chunks
from ustc.ops import routes, runtime
from matmul_helpers import tol

pytestmark = pytest.mark.skipif(not _masked_spmv.HAS_AVX512, reason="the masked kernel runs on AVX-512 hosts only")

LENGTHS = [0, 1, 7, 8, 9, 16, 17, 3, 0, 130, 5, 24, 2]   # around the 8-lane step, empty rows, a long row


def _csr(rng, lengths, n_cols, dtype, index):
    pos = np.concatenate(([0], np.cumsum(lengths))).astype(index)
    crd = np.concatenate([np.sort(rng.choice(n_cols, k, replace=False)) for k in lengths] or [[]]).astype(index)
    vals = rng.standard_normal(len(crd)).astype(dtype)
    return sp.csr_array((vals, crd, pos), shape=(len(lengths), n_cols))


@pytest.mark.parametrize("gather_ahead", [True, False])
@pytest.mark.parametrize("dtype,index", [(np.float64, np.int32), (np.float32, np.int64)])
def test_matches_scipy(dtype, index, gather_ahead, rng):
    a = _csr(rng, LENGTHS, 200, dtype, index)
    x = rng.standard_normal(200).astype(dtype)
    keep = [b.copy() for b in (a.indptr, a.indices, a.data, x)]
    for chunks in (1, 3, len(LENGTHS)):
        bounds = row_chunks(a.indptr, chunks)
        starts = a.indptr[bounds].astype(np.int64)
        y = np.full(len(LENGTHS), np.nan, dtype)
        assert fits(y, a.indptr, a.indices, a.data, x)
        masked_spmv(y, a.indptr, starts, a.indices, a.data, x, bounds, 1.0, False, gather_ahead)
        np.testing.assert_allclose(y, a @ x, **tol(dtype))
        c = rng.standard_normal(len(LENGTHS)).astype(dtype)
        acc = c.copy()
        masked_spmv(acc, a.indptr, starts, a.indices, a.data, x, bounds, -2.0, True, gather_ahead)
        np.testing.assert_allclose(acc, c - 2.0 * (a @ x), **tol(dtype))
    for k, b in zip(keep, (a.indptr, a.indices, a.data, x)):
        np.testing.assert_array_equal(k, b)


@pytest.mark.parametrize("gather_ahead", [True, False])
def test_entries_end_at_the_buffers_end(gather_ahead, rng):
    """The last row's masked step ends exactly at the end of ``vals`` / ``crd`` (views cut there):
    nothing past it is read (a fault or a wrong sum otherwise would show)."""
    a = _csr(rng, [3, 5, 1], 40, np.float64, np.int32)
    x = rng.standard_normal(40)
    bounds = row_chunks(a.indptr, 1)
    y = np.empty(3)
    masked_spmv(y, a.indptr, a.indptr[bounds].astype(np.int64), a.indices[:9], a.data[:9], x, bounds, 1.0, False,
                gather_ahead)
    np.testing.assert_allclose(y, a @ x, **tol(np.float64))


@pytest.mark.parametrize("gather_ahead", [True, False])
@pytest.mark.parametrize("dtype,index", [(np.float64, np.int32), (np.float32, np.int64)])
def test_rows_past_the_prefetch_distance(dtype, index, gather_ahead, rng):
    """Rows of Zipf-like lengths (empty, short, several times ``AHEAD + STREAM_AHEAD``, the longest first
    and last), 1 x n, and chunks whose prefetches stop at their last entry (``crd`` / ``vals`` cut there):
    against SciPy, for 1, 2 and 5 chunks."""
    ahead = _masked_spmv.AHEAD + _masked_spmv.STREAM_AHEAD
    tail = np.minimum(rng.zipf(1.6, 40), 4 * ahead)
    shapes = ([4 * ahead + 3, *tail, 0, 2 * ahead + 1], [3 * ahead + 5], [0, ahead, ahead + 1, ahead - 1])
    for lengths in shapes:
        a = _csr(rng, lengths, 2000, dtype, index)
        x = rng.standard_normal(2000).astype(dtype)
        for chunks in (1, 2, 5):
            bounds = row_chunks(a.indptr, chunks)
            y = np.full(len(lengths), np.nan, dtype)
            masked_spmv(y, a.indptr, a.indptr[bounds].astype(np.int64), a.indices[:a.nnz], a.data[:a.nnz], x,
                        bounds, 1.0, False, gather_ahead)
            np.testing.assert_allclose(y, a @ x, **tol(dtype))


def test_gathers_ahead_only_beyond_x_resident():
    """The lines of x are prefetched only where x is larger than ``X_RESIDENT`` bytes (it misses L2)."""
    limit = _masked_spmv.X_RESIDENT
    assert not _masked_spmv.gathers_ahead(np.empty(limit // 8))
    assert _masked_spmv.gathers_ahead(np.empty(limit // 8 + 1))
    assert not _masked_spmv.gathers_ahead(np.empty(limit // 4, np.float32))


def test_fits_only_one_float_dtype_and_wide_indices(rng):
    pos, crd = np.array([0, 1], np.int32), np.array([0], np.int32)
    f64, f32 = np.ones(1), np.ones(1, np.float32)
    assert fits(f64, pos, crd, f64, f64)
    assert not fits(f64, pos, crd, f32, f64)                      # mixed value dtypes
    assert not fits(f64.astype(complex), pos, crd, f64.astype(complex), f64.astype(complex))
    assert not fits(f64, pos, crd.astype(np.uint16), f64, f64)
    assert not fits(f64, pos, crd, f64, np.ones(4)[::2])          # strided x


def test_planned_spmv_on_own_indices_runs_it(rng, monkeypatch):
    """A planned CSR SpMV whose columns fit no 16-bit base reads its own indices through the masked
    kernel from the second execute on; values and x changed in place are read at every execute."""
    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)
    monkeypatch.setattr(_narrow_spmv, "ABSOLUTE_COLUMNS", 16)
    monkeypatch.setattr(_narrow_spmv, "DIAGONAL_REACH", 20)
    calls = []
    real = _narrow_spmv.masked_spmv
    monkeypatch.setattr(_narrow_spmv, "masked_spmv", lambda *args: calls.append(1) or real(*args))
    a = _csr(rng, LENGTHS * 3, 300, np.float64, np.int32)
    x = rng.standard_normal(300)
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
    for step in range(4):
        if step == 3:
            a.data *= 2
            x[:] = rng.standard_normal(300)
        np.testing.assert_allclose(mm.execute(), a @ x, **tol(np.float64))
    assert isinstance(mm._route, routes.NarrowColumnsRoute) and mm._route._narrow.own and len(calls) == 2


def test_row_loop_of_the_solvers_any_layout(rng):
    """``ops._vector.csr_rows`` (the one-shot small SpMV's and fused solvers' row loop) sums its rows
    through ``row_sum``: masked steps for contiguous float64, two sums for strided x / values and for
    complex; every one against SciPy, with the inner product ``left``."""
    from ustc.ops._vector import csr_rows

    a = _csr(rng, LENGTHS, 200, np.float64, np.int32)
    wide = rng.standard_normal(400)
    for x, vals in ((wide[:200].copy(), a.data), (wide[::2], a.data), (wide[:200].copy(), np.repeat(a.data, 2)[::2])):
        out = np.empty(len(LENGTHS))
        d = csr_rows(a.indptr, a.indices, vals, x, out, 0, len(LENGTHS), out, 0.0)
        np.testing.assert_allclose(out, a @ x, **tol(np.float64))
        np.testing.assert_allclose(d, out @ out, **tol(np.float64))
    z = (wide[:200] + 1j * wide[200:]).astype(np.complex128)
    out = np.empty(len(LENGTHS), np.complex128)
    csr_rows(a.indptr, a.indices, a.data.astype(np.complex128), z, out, 2, 9, None, np.complex128(0))
    np.testing.assert_allclose(out[2:9], (a @ z)[2:9], **tol(np.complex128))
