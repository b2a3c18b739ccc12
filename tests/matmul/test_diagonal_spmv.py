"""A planned CSR SpMV whose entries lie on a few diagonals reads a bit mask per row instead of
column indices (``kernels._diagonal_spmv``, chosen by ``routes.NarrowColumnsRoute`` ahead of the
16-bit copies). Oracle: SciPy on the operands' current values and structure. The kernel compiles
once per number of diagonals and dtype: the cases below keep to a few of each."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import ustc
from ustc.kernels import _diagonal_spmv, _narrow_spmv
from ustc.kernels._diagonal_spmv import Diagonals
from ustc.ops import routes, runtime
from matmul_helpers import random_vector, tol


@pytest.fixture
def small(monkeypatch):
    """Small operands take the route (normally from ``MIN_ENTRIES`` entries above ``SERIAL_WORK``)."""
    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)
    monkeypatch.setattr(_diagonal_spmv, "MIN_ENTRIES", 0)


def _kept(mm):
    route = mm._route
    return route._narrow if isinstance(route, routes.NarrowColumnsRoute) else None


def _band(rng, shape, offsets, dtype=np.float64, drop=0.0, index=np.int32):
    """``shape`` with entries on ``offsets`` (``col - row``), a fraction ``drop`` of them removed
    (the first of each diagonal stays: the number of diagonals, which the kernel compiles for, is
    ``offsets``')."""
    n, m = shape
    rows, cols = [], []
    for o in offsets:
        r = np.arange(max(0, -o), min(n, m - o))
        rows.append(r)
        cols.append(r + o)
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    keep = rng.random(len(rows)) >= drop
    keep[np.unique(rows - cols, return_index=True)[1]] = True
    vals = rng.standard_normal(keep.sum())
    if np.dtype(dtype).kind == "c":
        vals = vals + 1j * rng.standard_normal(len(vals))
    elif np.dtype(dtype).kind in "iu":
        vals = np.round(vals * 10)
    a = sp.csr_array((vals.astype(dtype), (rows[keep], cols[keep])), shape=shape)
    a.sum_duplicates()
    a.indices, a.indptr = a.indices.astype(index), a.indptr.astype(index)
    return a


STENCIL = (-25, -5, -1, 0, 1, 5, 25)   # a 3-D 7-point stencil of side 5 (125 rows)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.int64])
def test_stencil_offsets_match_scipy(dtype, rng, small):
    """Faces miss some diagonals (partial masks), the interior has all seven; values and x are
    read as they are at every execute."""
    a = _band(rng, (125, 125), STENCIL, dtype)
    x = random_vector(rng, 125, dtype)
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
    for step in range(4):
        np.testing.assert_allclose(mm.execute(), a @ x, **tol(dtype))
        a.data *= 2
        x[:] = random_vector(rng, 125, dtype)
    kept = _kept(mm)
    assert isinstance(kept, Diagonals) and kept.offsets == STENCIL and kept.masks.dtype == np.uint8
    assert kept.masks.max() == 127 and kept.masks.min() < 127


@pytest.mark.parametrize("count, mask", [(12, np.uint16), (32, np.uint32)])
def test_wider_masks(count, mask, rng, small):
    """12 and 32 diagonals (far apart, negative first) of a wide and a tall matrix, entries
    dropped at random (rows of any subset, empty rows)."""
    offsets = tuple(sorted(rng.choice(np.arange(-60, 60), count, replace=False).tolist()))
    for shape in ((70, 95), (95, 70)):
        a = _band(rng, shape, offsets, drop=0.3)
        x = random_vector(rng, shape[1])
        mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
        for _ in range(3):
            np.testing.assert_allclose(mm.execute(), a @ x, **tol(np.float64))
        kept = _kept(mm)
        assert isinstance(kept, Diagonals) and kept.masks.dtype == mask and kept.offsets == offsets


def test_one_row_and_one_column(rng, small):
    """1 x n: seven columns are seven diagonals; n x 1: a mask a row outweighs its one entry."""
    row = _band(rng, (1, 95), (3, 9, 20, 33, 50, 71, 94))
    col = _band(rng, (95, 1), (-90, -40, -7, 0))
    for a, kind in ((row, Diagonals), (col, _narrow_spmv.NarrowColumns)):
        x = random_vector(rng, a.shape[1])
        mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
        for _ in range(3):
            np.testing.assert_allclose(mm.execute(), a @ x, **tol(np.float64))
        assert isinstance(_kept(mm), kind)


def test_alpha_beta_c_and_out(rng, small):
    a = _band(rng, (125, 125), STENCIL, drop=0.1)
    x, c = random_vector(rng, 125), random_vector(rng, 125)
    acc = c.copy()
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x, c=acc, alpha=2.5, beta=0.5).plan()
    for _ in range(3):                              # c is updated in place at every execute
        before = acc.copy()
        np.testing.assert_allclose(mm.execute(), 2.5 * (a @ x) + 0.5 * before, **tol(np.float64))
    assert isinstance(_kept(mm), Diagonals)
    out = np.full(125, np.nan)
    mm.execute(out=out)
    np.testing.assert_allclose(out, 2.5 * (a @ x) + 0.5 * acc, **tol(np.float64))


def test_refusals_fall_back_to_16_bit_columns(rng, small):
    """More than 32 diagonals, too few entries a row for a mask to pay, an unsorted row: the
    16-bit copy instead (the product still right)."""
    many = _band(rng, (60, 60), tuple(range(-20, 20)))
    sparse_rows = _band(rng, (300, 300), tuple(range(-10, 10)), drop=0.97)   # ~0.7 entries a row
    unsorted = _band(rng, (125, 125), STENCIL)
    p, q = int(unsorted.indptr[60]), int(unsorted.indptr[61])
    unsorted.indices[p:q] = unsorted.indices[p:q][::-1].copy()
    unsorted.data[p:q] = unsorted.data[p:q][::-1].copy()
    for a in (many, sparse_rows, unsorted):
        x = random_vector(rng, a.shape[1])
        mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
        for _ in range(3):
            np.testing.assert_allclose(mm.execute(), a @ x, **tol(np.float64))
        assert isinstance(_kept(mm), _narrow_spmv.NarrowColumns)


def test_duplicates_and_empty_refuse(rng, small):
    a = _band(rng, (50, 50), (-1, 0, 1))
    pos, crd = a.indptr, a.indices.copy()
    crd[int(pos[10]) + 1] = crd[int(pos[10])]         # a repeated column in row 10
    assert Diagonals.of(pos, crd, 2) is None
    empty = sp.csr_array((50, 50))
    empty.indices, empty.indptr = empty.indices.astype(np.int32), empty.indptr.astype(np.int32)
    assert Diagonals.of(empty.indptr, empty.indices, 2) is None


def test_large_operands_only(rng, monkeypatch):
    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)
    a = _band(rng, (125, 125), STENCIL)
    assert Diagonals.of(a.indptr, a.indices, 2) is None          # below MIN_ENTRIES
    monkeypatch.setattr(_diagonal_spmv, "MIN_ENTRIES", a.nnz)
    assert Diagonals.of(a.indptr, a.indices, 2) is not None


def test_structure_changes_and_threads(rng, small):
    """Columns moved in place (the sample sees them) and a new operand through reset_operands:
    the masks are made again, or the 16-bit copy where the new structure has no few diagonals;
    a new thread count rebuilds the chunks. Inputs are never written."""
    import numba

    a = _band(rng, (125, 125), STENCIL)
    keep = (a.indices.copy(), a.indptr.copy(), a.data.copy())
    A = ustc.Tensor.from_package(a)
    x = random_vector(rng, 125)
    x0 = x.copy()
    mm = ustc.Matmul(A, x).plan()
    for _ in range(3):
        mm.execute()
    first = _kept(mm)
    assert isinstance(first, Diagonals)
    assert all(np.array_equal(u, v) for u, v in zip((a.indices, a.indptr, a.data), keep)) and np.array_equal(x, x0)
    a.indices[:] = (a.indices + 40) % 125                            # every column moves
    for _ in range(3):
        np.testing.assert_allclose(mm.execute(), a @ x, **tol(np.float64))
    assert _kept(mm) is not first
    b = _band(rng, (125, 125), (-3, 0, 2))
    mm.reset_operands(a=ustc.Tensor.from_package(b))
    for _ in range(3):
        np.testing.assert_allclose(mm.execute(), b @ x, **tol(np.float64))
    assert _kept(mm).offsets == (-3, 0, 2)
    numba.set_num_threads(1)
    try:
        for _ in range(3):
            np.testing.assert_allclose(mm.execute(), b @ x, **tol(np.float64))
        assert len(_kept(mm).bounds) == 2
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 40), m=st.integers(2, 40), seed=st.integers(0, 2**31), drop=st.sampled_from([0.0, 0.5, 0.9]),
       accumulate=st.booleans())
def test_kernel_against_dense(n, m, seed, drop, accumulate):
    """The kernel on its own (three diagonals drawn from the shape), ``y`` accumulated or stored."""
    rng = np.random.default_rng(seed)
    offsets = tuple(sorted(rng.choice(np.arange(-n + 1, m), 3, replace=False).tolist()))
    a = _band(rng, (n, m), offsets, drop=drop)
    x, y0 = random_vector(rng, m), random_vector(rng, n)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_diagonal_spmv, "MIN_ENTRIES", 0)
        kept = Diagonals.of(a.indptr, a.indices, 2)
    if kept is None:     # a mask would outweigh 16-bit columns (or no entries)
        assert a.nnz == 0 or n > 2 * a.nnz
        return
    y = y0.copy()
    kept.spmv(y, a.data, x, -0.5, accumulate)
    np.testing.assert_allclose(y, (y0 if accumulate else 0) - 0.5 * (a.toarray() @ x), rtol=1e-12, atol=1e-12)
