"""The CSR SpGEMM's one pass into row bounds (``kernels._spgemm.product``, ``routes._registered_spgemm``).

Products that make about one entry per multiply-add (random sparse, power-law rows) take the
registered kernel writing each row once at its bound; products that compress (a stencil) take
its counting pass then its filling pass. Both kernel paths are checked against SciPy's canonical product (sorted
columns, exact pattern), sorted and unsorted, on rows short, long and dense in their span."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc.kernels import _spgemm

from pairwise import pairwise


def _canonical(a, b):
    ref = sp.csr_array(a @ b)
    ref.sum_duplicates()
    ref.sort_indices()
    return ref


def _power_law(n, rng, alpha=1.1):
    lengths = np.minimum((rng.pareto(alpha, n) * 2).astype(int) + 1, n)
    rows = np.repeat(np.arange(n), lengths)
    cols = np.concatenate([rng.choice(n, k, replace=False) for k in lengths])
    return sp.csr_array((rng.standard_normal(rows.size), (rows, cols)), shape=(n, n))


def _run(a, b, dtype, index, ordered, one_pass, monkeypatch):
    """``_spgemm.product`` forced into one path (the ratio the sample is held to), on operands whose
    index buffers have the dtypes ``index`` names (a's, b's)."""
    monkeypatch.setattr(_spgemm, "ONE_PASS_RATIO", np.inf if one_pass else 0.0)
    a, b = (sp.csr_array(x).astype(dtype) for x in (a, b))
    a_index, b_index = INDEX[index]
    a.indptr, a.indices = a.indptr.astype(a_index), a.indices.astype(a_index)
    b.indptr, b.indices = b.indptr.astype(b_index), b.indices.astype(b_index)
    before = [x.copy() for x in (a.indptr, a.indices, a.data, b.indptr, b.indices, b.data)]
    pos, crd, vals = _spgemm.product(a.indptr, a.indices, a.data, b.indptr, b.indices, b.data, b.shape[1],
                                     np.result_type(a.dtype, b.dtype), ordered, 2)
    for x, y in zip((a.indptr, a.indices, a.data, b.indptr, b.indices, b.data), before):
        np.testing.assert_array_equal(x, y)      # operands never written
    return pos, crd, vals


CASES = {
    "power-law": lambda rng: (_power_law(300, rng),) * 2,
    "long sparse rows": lambda rng: (sp.random_array((20, 50), density=0.9, rng=rng, format="csr"),
                                     sp.random_array((50, 20000), density=0.004, rng=rng, format="csr")),
    "dense rows": lambda rng: (sp.random_array((30, 40), density=0.5, rng=rng, format="csr"),
                               sp.random_array((40, 300), density=0.3, rng=rng, format="csr")),
    "clustered rows": lambda rng: (sp.csr_array(np.ones((3, 2))),
                                   sp.csr_array((np.ones(202), (np.r_[np.zeros(101), np.ones(101)].astype(int),
                                                                np.r_[np.arange(100, 200), 50000,
                                                                      np.arange(150, 250), 50001])),
                                                shape=(2, 50002))),
    "non-square": lambda rng: (sp.random_array((7, 13), density=0.4, rng=rng, format="csr"),
                               sp.random_array((13, 5), density=0.4, rng=rng, format="csr")),
    "1xn": lambda rng: (sp.random_array((1, 9), density=0.6, rng=rng, format="csr"),
                        sp.random_array((9, 30), density=0.5, rng=rng, format="csr")),
    "empty": lambda rng: (sp.csr_array((0, 4)), sp.csr_array((4, 3))),
    "all zero": lambda rng: (sp.csr_array((6, 5)), sp.random_array((5, 4), density=0.5, rng=rng, format="csr")),
}


# The kernels compile once per value dtype, path and index dtypes (each case only varies the data):
# a pairwise cover of those three axes (9 kernels, not 18), every case through each of them, but
# for products with no row or no multiply-add: one_pass() sends those to the counting pass
# whatever the ratio, so they run under the counting triples only (each dtype and index pair
# still meets them there) rather than compile the filling pass under the one-pass triples too.
INDEX = {"int32": (np.int32, np.int32), "int64": (np.int64, np.int64), "int32 @ int64": (np.int32, np.int64)}
KERNELS = pairwise([np.float64, np.float32, np.complex128], [True, False], list(INDEX))
COUNTED_ANYWAY = ("empty", "all zero")
RUNS = [pytest.param(case, dtype, one_pass, index,
                     id=f"{np.dtype(dtype).name}-{'one pass' if one_pass else 'count then fill'}-{index}-{case}")
        for dtype, one_pass, index in KERNELS for case in CASES if not (one_pass and case in COUNTED_ANYWAY)]


@pytest.mark.parametrize("case, dtype, one_pass, index", RUNS)
def test_both_paths_match_scipy(case, dtype, one_pass, index, rng, monkeypatch):
    a, b = CASES[case](rng)
    ref = _canonical(a.astype(dtype), b.astype(dtype))
    pos, crd, vals = _run(a, b, dtype, index, True, one_pass, monkeypatch)
    np.testing.assert_array_equal(pos, ref.indptr)
    np.testing.assert_array_equal(crd, ref.indices)     # exact: sorted, cancelled zeros kept
    assert vals.dtype == ref.dtype
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(vals, ref.data, rtol=tol, atol=tol)
    pos, crd, vals = _run(a, b, dtype, index, False, one_pass, monkeypatch)   # unsorted rows: the same entries
    got = sp.csr_array((vals, crd, pos), shape=ref.shape)
    np.testing.assert_array_equal(pos, ref.indptr)
    np.testing.assert_allclose(got.toarray(), ref.toarray(), rtol=tol, atol=tol)


def test_route_takes_one_pass_where_the_product_compresses_little(rng):
    # ~3 a row: ~1 product an entry; above the size where the generated kernel's serial twin runs
    a = sp.random_array((60_000, 60_000), density=5e-5, rng=rng, format="csr")
    A = ustc.Tensor.from_package(a)
    mm = ustc.Matmul(A, A).plan()
    assert mm.plan_info.startswith("registered kernel: csr_spgemm") and "one pass" in mm.plan_info, mm.plan_info
    C = mm.execute()
    C.validate()
    ref = _canonical(a, a)
    np.testing.assert_array_equal(C.pos(1), ref.indptr)
    np.testing.assert_array_equal(C.crd(1), ref.indices)
    np.testing.assert_allclose(C.values, ref.data, rtol=1e-12, atol=1e-12)
    A.values[...] *= 2                                  # the next execute reads the current values
    np.testing.assert_allclose(mm.execute().values, 4 * ref.data, rtol=1e-12, atol=1e-12)


def test_route_counts_first_where_the_product_compresses():
    n = 50
    lap = sp.diags([-1, 2, -1], [-1, 0, 1], shape=(n, n))
    stencil = sp.csr_array(sp.kronsum(sp.kronsum(lap, lap), lap))   # 7 nonzeros a row, A @ A: ~2 products an entry
    A = ustc.Tensor.from_package(stencil)
    mm = ustc.Matmul(A, A).plan()
    assert mm.plan_info.startswith("registered kernel: csr_spgemm") and "counting pass" in mm.plan_info, mm.plan_info
    C = mm.execute()
    np.testing.assert_allclose(C.values, _canonical(stencil, stencil).data, atol=1e-12)


def test_small_integer_and_unsorted_products_keep_their_routes(rng):
    small = sp.random_array((300, 300), density=0.01, rng=rng, format="csr")
    S = ustc.Tensor.from_package(small)
    assert "one pass" not in ustc.Matmul(S, S).plan().plan_info   # small: the generated kernel's serial twin
    a = sp.random_array((60_000, 60_000), density=5e-5, rng=rng, format="csr")
    ai = sp.csr_array((np.round(a.data * 4).astype(np.int64), a.indices, a.indptr), shape=a.shape)
    A = ustc.Tensor.from_package(ai)
    mm = ustc.Matmul(A, A).plan()
    assert "one pass" not in mm.plan_info, mm.plan_info   # the registered kernel takes floating values only
    np.testing.assert_array_equal(mm.execute().values, _canonical(ai, ai).data)
    unordered = "(i, j) -> (i : dense, j : compressed(nonordered))"
    F = ustc.Tensor.from_package(a)
    mm = ustc.Matmul(F, F, options={"out_format": unordered}).plan()
    assert mm.plan_info.startswith("registered kernel: csr_spgemm") and "one pass" not in mm.plan_info
    C = mm.execute()
    assert C.format == ustc.TensorFormat.parse(unordered)
    got = sp.csr_array((C.values, C.crd(1), C.pos(1)), shape=C.shape)
    np.testing.assert_allclose(abs(got - _canonical(a, a)).max(), 0, atol=1e-12)


@pytest.mark.parametrize("fmt", ["DCSR", "COO"])
def test_rows_through_csr_take_one_pass_too(fmt, rng):
    """DCSR and COO operands convert to CSR at every execute; their CSR product takes the one pass
    where it compresses little, and the result comes back in the operands' format."""
    a = sp.random_array((60_000, 60_000), density=5e-5, rng=rng, format="csr")
    A = ustc.Tensor.from_package(a).convert(fmt)
    mm = ustc.Matmul(A, A).plan()
    assert "to CSR at every execute" in mm.plan_info and "one pass" in mm.plan_info, mm.plan_info
    C = mm.execute()
    assert C.format == A.format
    C.validate()
    got = C.convert("CSR")
    ref = _canonical(a, a)
    np.testing.assert_array_equal(got.pos(1), ref.indptr)
    np.testing.assert_array_equal(got.crd(1), ref.indices)
    np.testing.assert_allclose(got.values, ref.data, rtol=1e-12, atol=1e-12)
