"""How the CSR SpGEMM's one pass into row bounds (``kernels._spgemm``) sorts a row: rows up to
``TINY`` entries by insertion with their values, longer ones through two levels of bitmaps set
after the row is summed. Rows of every length around that boundary, rows spread over many
4096-column summary words or filling their span, each summed from several products (values added
at a column's position, sums cancelling to zero kept), against SciPy's canonical product."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from ustc.kernels import _spgemm

T = _spgemm.TINY


def _rows(rng, n_cols):
    """(columns, spread) of each output row: lengths around TINY, short and wide rows, a dense one."""
    lengths = [0, 1, 2, T - 1, T, T + 1, 2 * T, 3 * T + 5, 700]
    rows = [rng.choice(n_cols, k, replace=False) for k in lengths]
    rows.append(np.arange(100, 100 + 3 * T))                     # fills its span
    rows.append(np.array([5, 4096 * 3 + 1, 4096 * 9 + 63, n_cols - 1] + list(range(64, 64 + T))))   # wide
    return rows


def _operands(rng, n_cols):
    """``a @ b`` whose row ``i`` holds ``rows[i]``'s columns, each column the sum of two products
    (b's rows 2i and 2i + 1 both hold the row's columns, in different orders), a few cancelling."""
    rows = _rows(rng, n_cols)
    b_rows, b_cols, b_vals = [], [], []
    for i, cols in enumerate(rows):
        for half in (0, 1):
            order = rng.permutation(cols)
            b_rows += [2 * i + half] * len(cols)
            b_cols += list(order)
            b_vals += list(rng.standard_normal(len(cols)) + 3.0)
    b = sp.csr_array((b_vals, (b_rows, b_cols)), shape=(2 * len(rows), n_cols))
    a = sp.csr_array((np.ones(2 * len(rows)), (np.repeat(np.arange(len(rows)), 2), np.arange(2 * len(rows)))),
                     shape=(len(rows), 2 * len(rows)))
    # cancel the sums of row 4's first two columns: b's second row for it holds their negatives
    b = b.tolil()
    for c in rows[4][:2]:
        b[9, c] = -b[8, c]
    return a, sp.csr_array(b), rows


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("ordered", [True, False])
def test_rows_around_the_insertion_bound_match_scipy(dtype, ordered, rng, monkeypatch):
    monkeypatch.setattr(_spgemm, "ONE_PASS_RATIO", np.inf)     # the one pass whatever it compresses
    a, b, rows = _operands(rng, 50_000)
    a, b = a.astype(dtype), b.astype(dtype)
    if dtype == np.complex128:
        b = b + 1j * b
    # the expected product keeps every reached column, cancelled sums too (SciPy's drops them)
    dense = (a @ b).toarray()
    want_pos = np.concatenate(([0], np.cumsum([len(r) for r in rows])))
    want_crd = np.concatenate([np.sort(r) for r in rows])
    want_vals = np.concatenate([dense[i, np.sort(r)] for i, r in enumerate(rows)])
    before = [x.copy() for x in (a.indptr, a.indices, a.data, b.indptr, b.indices, b.data)]
    pos, crd, vals = _spgemm.product(a.indptr, a.indices, a.data, b.indptr, b.indices, b.data, b.shape[1],
                                     np.dtype(dtype), ordered, 2)
    for x, y in zip((a.indptr, a.indices, a.data, b.indptr, b.indices, b.data), before):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(pos, want_pos)
    assert vals.dtype == np.dtype(dtype)
    if ordered:
        np.testing.assert_array_equal(crd, want_crd)           # sorted, every column once
        np.testing.assert_allclose(vals, want_vals, rtol=1e-12, atol=1e-12)
        assert np.count_nonzero(vals == 0) >= 2                  # cancelled sums stay stored
    else:
        got = sp.csr_array((vals, crd, pos), shape=dense.shape)
        for i in range(len(rows)):
            np.testing.assert_array_equal(np.sort(crd[pos[i]:pos[i + 1]]), want_crd[want_pos[i]:want_pos[i + 1]])
        np.testing.assert_allclose(got.toarray(), dense, rtol=1e-12, atol=1e-12)
