"""The registered CSR Gustavson kernel (work-balanced chunks and per-chunk column spans) and the
generated workspace SpGEMM that is now the default route.

Checked against SciPy on matrices that stress the split (power-law rows, empty
rows and columns, a band far from column 0, more chunks than rows), with the
result required to be canonical CSR (sorted, unique columns)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import ustc
from ustc.kernels._spgemm import chunk_bounds, row_work


def _check(a, b):
    A, B = ustc.Tensor.from_package(a), ustc.Tensor.from_package(b)
    mm = ustc.Matmul(A, B, options={"route": "registered"}).plan()
    assert mm.plan_info.startswith("registered kernel: csr_spgemm")
    C = mm.execute()
    ref = (a @ b).tocsr()
    ref.sum_duplicates()
    ref.sort_indices()
    np.testing.assert_array_equal(C.pos(1), ref.indptr)
    np.testing.assert_array_equal(C.crd(1), ref.indices)   # exact: the pattern keeps cancelled zeros
    np.testing.assert_allclose(C.values, ref.data, rtol=1e-12, atol=1e-12)
    C.validate()
    gen = ustc.Matmul(A, B).plan()   # the default: generated, each row reduced in a workspace
    assert gen.plan_info.startswith("generated") and "workspace" in gen.plan_info, gen.plan_info
    G = gen.execute()
    G.validate()
    ref.data[np.abs(ref.data) < 1e-300] = 0
    ref.eliminate_zeros()                                  # ustc stores no cancelled zeros
    np.testing.assert_array_equal(G.pos(1), ref.indptr)
    np.testing.assert_array_equal(G.crd(1), ref.indices)
    np.testing.assert_allclose(G.values, ref.data, rtol=1e-12, atol=1e-12)


def _power_law(n, rng):
    lengths = np.minimum((rng.pareto(1.2, n) * 2).astype(int) + 1, n)
    rows = np.repeat(np.arange(n), lengths)
    cols = np.concatenate([rng.choice(n, k, replace=False) for k in lengths])
    return sp.csr_array((rng.standard_normal(rows.size), (rows, cols)), shape=(n, n))


def test_power_law_rows(rng):
    a = _power_law(400, rng)
    _check(a, a)
    _check(a, a.T.tocsr())


def test_band_far_from_column_zero(rng):
    n = 300
    band = sp.diags([rng.standard_normal(n - abs(d)) for d in (-2, 0, 3)], [-2, 0, 3], shape=(n, n), format="csr")
    shift = sp.csr_array(sp.eye(n, 5 * n, k=4 * n))       # columns 4n .. 5n only
    _check(band, shift)
    _check(sp.csr_array(band), sp.csr_array(band))


def test_empty_rows_and_more_chunks_than_rows(rng):
    a = sp.random_array((3, 40), density=0.3, random_state=1, format="csr")
    a = sp.csr_array(sp.vstack([a, sp.csr_array((2, 40))]))  # two empty rows at the end
    b = sp.random_array((40, 7), density=0.2, random_state=2, format="csr")
    _check(a, b)
    _check(sp.csr_array((0, 5)), sp.csr_array((5, 3)))
    _check(sp.csr_array((4, 5)), sp.random_array((5, 3), density=0.5, random_state=3, format="csr"))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 30), st.integers(0, 30), st.integers(0, 30), st.floats(0, 1), st.integers(0, 2**16))
def test_random_products(m, k, n, density, seed):
    a = sp.random_array((m, k), density=density, random_state=seed, format="csr")
    b = sp.random_array((k, n), density=density, random_state=seed + 1, format="csr")
    _check(a, b)


@pytest.mark.parametrize("chunks", [1, 2, 3, 8, 50])
def test_chunk_bounds_split_work_evenly(chunks, rng):
    a = _power_law(200, rng)
    work = row_work(a.indptr, a.indices, a.indptr, 200)
    lengths = np.diff(a.indptr)
    np.testing.assert_array_equal(np.diff(work), [lengths[a.indices[a.indptr[i]:a.indptr[i + 1]]].sum()
                                                  for i in range(200)])
    bounds = chunk_bounds(work, chunks)
    assert bounds[0] == 0 and bounds[-1] == 200 and len(bounds) == chunks + 1
    assert (np.diff(bounds) >= 0).all()
    per_chunk = work[bounds[1:]] - work[bounds[:-1]]
    # each chunk holds at most its share plus one row's work
    assert per_chunk.max() <= work[-1] / chunks + np.diff(work).max()


UNORDERED = "(i, j) -> (i : dense, j : compressed(nonordered))"


@pytest.mark.parametrize("shape", [(40, 30, 50), (1, 9, 1), (0, 4, 3), (60, 60, 60)], ids=str)
def test_unordered_output_skips_the_row_sort(shape, rng):
    """out_format CSR with a nonordered column level: the same entries as SciPy, rows in the
    order the product reached the columns (not sorted), a valid tensor other operations take."""
    m, k, n = shape
    a = sp.random_array((m, k), density=0.3, rng=rng, format="csr")
    b = sp.random_array((k, n), density=0.3, rng=rng, format="csr")
    C = ustc.matmul(ustc.Tensor.from_package(a), ustc.Tensor.from_package(b), options={"out_format": UNORDERED})
    assert C.format == ustc.TensorFormat.parse(UNORDERED)
    C.validate()
    np.testing.assert_allclose(C.to_dense(), (a @ b).toarray(), atol=1e-12)
    x = rng.standard_normal(n)
    np.testing.assert_allclose(ustc.matmul(C, x), (a @ b) @ x, atol=1e-12)
    if m == 60:
        rows = np.diff(C.pos(1))
        crd = np.asarray(C.crd(1))
        unsorted = any((np.diff(crd[s:s + r]) < 0).any() for s, r in zip(np.asarray(C.pos(1))[:-1], rows))
        assert unsorted             # a dense-ish product: some row comes out of order
