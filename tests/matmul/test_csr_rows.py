"""``ustc.ops._vector.csr_rows``, the one CSR row loop of the fused solvers (and, through
``_csr_product``, of the distributed blocks' local product): ``out[lo:hi] = (A x)[lo:hi]``
with ``left · out`` over those rows, or no inner product where ``left`` is None. Checked
against SciPy on random matrices with empty rows, odd and even row lengths, int32 and int64
indices, float64 and complex128, row ranges (empty, one row, all); rows outside the range
and the inputs are left unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from ustc.ops import _vector


def matrix(dtype, index, rng):
    """A 40 x 30 CSR matrix with about 15% entries, rows 0-2 and 20 empty, ``index`` indices."""
    dense = rng.uniform(-1, 1, (40, 30)) * (rng.uniform(size=(40, 30)) < 0.15)
    dense[[0, 1, 2, 20]] = 0
    a = sp.csr_matrix(dense.astype(dtype) * (1 + 1j if dtype == np.complex128 else 1))
    a.indptr, a.indices = a.indptr.astype(index), a.indices.astype(index)
    return a


@pytest.mark.parametrize("dtype,index", [(np.float64, np.int32), (np.complex128, np.int64)])
def test_row_ranges_match_scipy(dtype, index):
    rng = np.random.default_rng(0)
    a = matrix(dtype, index, rng)
    x = (rng.uniform(-1, 1, 30) + (1j * rng.uniform(-1, 1, 30) if dtype == np.complex128 else 0)).astype(dtype)
    left = rng.uniform(-1, 1, 40).astype(dtype)
    full = a @ x
    before = (a.indptr.copy(), a.indices.copy(), a.data.copy(), x.copy(), left.copy())
    zero = dtype(0)
    for lo, hi in ((0, 40), (5, 5), (7, 8), (3, 29)):
        out = np.full(40, 99, dtype=dtype)
        d = _vector.csr_rows(a.indptr, a.indices, a.data, x, out, lo, hi, left, zero)
        np.testing.assert_allclose(out[lo:hi], full[lo:hi], rtol=1e-13, atol=1e-13)
        assert (out[:lo] == 99).all() and (out[hi:] == 99).all()
        np.testing.assert_allclose(d, np.vdot(left[lo:hi], full[lo:hi]), rtol=1e-12, atol=1e-12)
        out2 = np.full(40, 99, dtype=dtype)
        assert _vector.csr_rows(a.indptr, a.indices, a.data, x, out2, lo, hi, None, zero) == 0
        np.testing.assert_array_equal(out2, out)
    out = np.empty(40, dtype=dtype)
    np.testing.assert_allclose(_vector._csr_product(a.indptr, a.indices, a.data, x, out, left, zero),
                               np.vdot(left, full), rtol=1e-12)
    np.testing.assert_allclose(out, full, rtol=1e-13, atol=1e-13)
    for b, c in zip(before, (a.indptr, a.indices, a.data, x, left)):
        np.testing.assert_array_equal(b, c)
