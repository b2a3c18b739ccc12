"""The registered DIA SpMM (``builtin.dia_spmm``, ``ustc.kernels._dia.dia_spmm``): ``Y += alpha * A @ X``
row by row, each row's diagonals adding rows of ``X`` into it two at a time; without ``c`` it stores
every element of ``Y`` (checked with outputs full of NaN), with ``c`` it adds to ``beta * c``.
Against SciPy over the registry's DIA formats, the serial and the parallel kernel (tasks of
``SPMM_TILE`` rows), shapes with empty and 1-wide sides, diagonals that miss rows and tasks,
no diagonals, X of 0, 1, odd and C / Fortran orders, four dtypes."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc import formats as F
from ustc.kernels import _dia
from ustc.ops import runtime

DIA_FORMATS = [pytest.param(nf.format(), id=nf.name) for nf in F.NAMED if nf.name in ("DIAI", "DIAJ")]


@pytest.fixture(params=["serial", "parallel"])
def kernel(request, monkeypatch):
    monkeypatch.setattr(runtime, "SERIAL_WORK", 10 ** 12 if request.param == "serial" else 0)
    return request.param


def dia_matrix(shape, offsets, dtype=np.float64, seed=0) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    data = rng.uniform(0.5, 1.5, (len(offsets), shape[1])).astype(dtype)
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.uniform(-1, 1, data.shape)
    out = sp.dia_array((data, list(offsets)), shape=shape).tocsr()
    out.sort_indices()
    return out


def check(S, fmt, X, alpha=1.0) -> None:
    A = ustc.Tensor.from_package(S).convert(tensor_format=fmt)
    expected = alpha * (S @ X)
    single = np.result_type(S.dtype, X.dtype) in (np.float32, np.complex64)
    tol = dict(rtol=1e-5, atol=1e-5) if single else dict(rtol=1e-12, atol=1e-12)
    mm = ustc.Matmul(A, X, alpha=alpha).plan()
    assert mm.plan_info.startswith("registered kernel: dia_spmm") and mm._route.overwrites
    out = np.full(expected.shape, np.nan, dtype=expected.dtype)
    np.testing.assert_allclose(mm.execute(out=out), expected, **tol)
    np.testing.assert_allclose(mm.execute(out=out), expected, **tol)       # the same buffer again
    np.testing.assert_allclose(ustc.matmul(A, X, alpha=alpha), expected, **tol)


@pytest.mark.parametrize("fmt", DIA_FORMATS)
def test_stencil_like_diagonals(fmt, kernel):
    """Five diagonals over two tasks and a partial one; an odd diagonal count leaves one unpaired."""
    n = 2 * _dia.SPMM_TILE + 77
    X = np.random.default_rng(1).uniform(-1, 1, (n, 5))
    check(dia_matrix((n, n), (-300, -1, 0, 1, 300)), fmt, X, alpha=0.5)
    check(dia_matrix((n, n), (-1, 0, 1, 2), seed=1), fmt, X)


@pytest.mark.parametrize("fmt", DIA_FORMATS)
def test_rows_no_diagonal_meets(fmt, kernel):
    """Rows past the end of the only diagonal (a whole task of them) are stored as zeros."""
    m = 2 * _dia.SPMM_TILE + 5
    S = dia_matrix((m, m + _dia.SPMM_TILE), (_dia.SPMM_TILE + 10,), seed=2)
    check(S, fmt, np.random.default_rng(2).uniform(-1, 1, (S.shape[1], 3)), alpha=2.0)


@pytest.mark.parametrize("shape", [(0, 4), (1, 6), (6, 1), (5, 9), (9, 5)], ids=["0xn", "1xn", "nx1", "wide", "tall"])
@pytest.mark.parametrize("columns", [0, 1, 4])
@pytest.mark.parametrize("fmt", DIA_FORMATS)
def test_small_shapes_columns_and_no_diagonals(fmt, shape, columns):
    m, n = shape
    offsets = [k for k in (-2, 0, 3) if -m < k < n] if m else []
    X = np.random.default_rng(m + n).uniform(-1, 1, (n, columns))
    check(dia_matrix(shape, offsets, seed=m + n), fmt, X)
    check(sp.csr_array(shape), fmt, X)                     # no diagonals: every row is zero


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
@pytest.mark.parametrize("fmt", DIA_FORMATS)
def test_dtypes_and_fortran_x(fmt, dtype):
    n = 70
    S = dia_matrix((n, n + 3), (-4, 0, 1, 5, 9), dtype=dtype, seed=3)
    X = np.asfortranarray(np.random.default_rng(3).uniform(-1, 1, (n + 3, 6)).astype(dtype))
    check(S, fmt, X, alpha=1.5)


@pytest.mark.parametrize("fmt", DIA_FORMATS)
def test_with_c_the_kernel_adds(fmt, kernel):
    n = 300
    S = dia_matrix((n, n), (-5, 0, 7), seed=4)
    A = ustc.Tensor.from_package(S).convert(tensor_format=fmt)
    X = np.random.default_rng(4).uniform(-1, 1, (n, 3))
    c = np.random.default_rng(5).uniform(2, 3, (n, 3))
    mm = ustc.Matmul(A, X, c.copy(), alpha=1.5, beta=0.25).plan()
    assert mm.plan_info.startswith("registered kernel: dia_spmm") and not mm._route.overwrites
    np.testing.assert_allclose(mm.execute(out=np.empty((n, 3))), 1.5 * (S @ X) + 0.25 * c, rtol=1e-12)


def test_operands_unchanged():
    S = dia_matrix((40, 40), (-3, 0, 2), seed=6)
    A = ustc.Tensor.from_package(S).convert("DIAI")
    X = np.random.default_rng(6).uniform(-1, 1, (40, 4))
    saved = [b.copy() for b in A.buffers.values()], A.values.copy(), X.copy()
    ustc.matmul(A, X, alpha=2.0)
    for b, s in zip(A.buffers.values(), saved[0]):
        np.testing.assert_array_equal(b, s)
    np.testing.assert_array_equal(A.values, saved[1])
    np.testing.assert_array_equal(X, saved[2])
