"""The registered DIA SpMV's overwrite mode: a product without ``c`` stores every element of
``y`` (the first diagonal that meets a row tile stores, the rows it misses are zeroed), so the
caller skips zero-filling ``y``; with ``c`` it still adds to ``beta * c``. Checked against SciPy
with an output full of NaN (any element the kernel missed stays NaN), over the DIA formats of the
registry, both kernels (serial twin, parallel tiles), tiles no diagonal meets, no diagonals at all,
and 0-row / 1-row shapes."""

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


def dia_matrix(shape, offsets, seed=0) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    m, n = shape
    data = rng.uniform(0.5, 1.5, (len(offsets), n))
    out = sp.dia_array((data, list(offsets)), shape=shape).tocsr()
    out.sort_indices()
    return out


def check(S: sp.csr_array, fmt, alpha=1.0) -> None:
    A = ustc.Tensor.from_package(S).convert(tensor_format=fmt)
    x = np.random.default_rng(1).uniform(-1, 1, S.shape[1])
    expected = alpha * (S @ x)
    mm = ustc.Matmul(A, x, alpha=alpha).plan()
    assert mm.plan_info.startswith("registered kernel: dia_spmv")
    assert mm._route.overwrites
    out = np.full(S.shape[0], np.nan)
    np.testing.assert_allclose(mm.execute(out=out), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mm.execute(), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mm.execute(), expected, rtol=1e-12, atol=1e-12)   # the same buffer again
    np.testing.assert_allclose(ustc.matmul(A, x, alpha=alpha), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fmt", DIA_FORMATS)
def test_stencil_like_diagonals(fmt, kernel):
    n = _dia.TILE + 77                                    # two row tiles
    check(dia_matrix((n, n), (-300, -1, 0, 1, 300)), fmt, alpha=0.5)


@pytest.mark.parametrize("fmt", DIA_FORMATS)
def test_tiles_no_diagonal_meets(fmt, kernel):
    """Rows past the tile the far diagonal ends in meet no diagonal: they are stored as zeros."""
    m = 2 * _dia.TILE + 5
    S = dia_matrix((m, m + 3 * _dia.TILE), (_dia.TILE + 10,), seed=2)
    check(S, fmt, alpha=2.0)


@pytest.mark.parametrize("shape", [(0, 4), (1, 6), (6, 1), (5, 9), (9, 5)], ids=["0xn", "1xn", "nx1", "wide", "tall"])
@pytest.mark.parametrize("fmt", DIA_FORMATS)
def test_small_shapes_and_no_diagonals(fmt, shape, kernel):
    m, n = shape
    offsets = [k for k in (-2, 0, 3) if -m < k < n] if m else []
    check(dia_matrix(shape, offsets, seed=m + n), fmt)
    check(sp.csr_array(shape), fmt)                       # no diagonals: every row is zero


@pytest.mark.parametrize("fmt", DIA_FORMATS)
def test_with_c_the_kernel_adds(fmt, kernel):
    n = 300
    S = dia_matrix((n, n), (-5, 0, 7), seed=4)
    A = ustc.Tensor.from_package(S).convert(tensor_format=fmt)
    x = np.linspace(-1, 1, n)
    c = np.linspace(2, 3, n)
    mm = ustc.Matmul(A, x, c.copy(), alpha=1.5, beta=0.25).plan()
    assert mm.plan_info.startswith("registered kernel: dia_spmv") and not mm._route.overwrites
    np.testing.assert_allclose(mm.execute(out=np.empty(n)), 1.5 * (S @ x) + 0.25 * c, rtol=1e-12)
