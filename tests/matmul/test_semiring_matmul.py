"""``Matmul.plan(prologs=..., epilog=..., semiring=...)`` and ``ustc.matmul(..., semiring=...)``
against NumPy / SciPy oracles: Bellman-Ford steps (min-plus SpMV and SpMM) against
``scipy.sparse.csgraph.shortest_path``, or-and reachability against BFS, max-times, a user
semiring, prologs and epilogs, over the registry's formats, several dtypes and edge shapes."""

from __future__ import annotations

import math
import warnings

import numba
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse import csgraph

import ustc
from ustc import formats
from ustc.errors import UnsupportedOperation, UstcError

F = formats


def relu(v):
    return v if v > 0 else 0.0


def magnitude(v):
    return v if v >= 0 else -v


def smaller(a, b):
    return a if a < b else b


@numba.njit
def plus(a, b):
    return a + b


def graph(n, m=None, density=0.15, seed=0, dtype=np.float64) -> sp.csr_array:
    """Random weighted graph (weights 1..9), no explicit zeros."""
    rng = np.random.default_rng(seed)
    g = sp.random(n, m if m is not None else n, density=density, random_state=seed, format="csr")
    g.data[:] = rng.integers(1, 10, g.nnz)
    return sp.csr_array(g.astype(dtype))


def weights_inf(t: ustc.Tensor) -> np.ndarray:
    """The matrix a semiring sees: +inf where ``t`` has no entry (padding zeros are no entries)."""
    out = np.full(t.shape, np.inf)
    coords, values = t.entries()
    keep = values != 0
    out[tuple(c[keep] for c in coords)] = values[keep]
    return out


def sparse_formats() -> list:
    """The registry's 2-D formats that store a matrix sparsely (Dense makes a dense operand)."""
    out = []
    for nf in formats.NAMED:
        fmt = nf.format()
        if fmt.ndim == 2 and not all(lv.type.locate for lv in fmt.levels):
            out.append(pytest.param(fmt, id=nf.name))
    return out


def stored(g, fmt) -> ustc.Tensor:
    structured = any(lv.type.keyword == "structured" for lv in fmt.levels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ustc.Tensor.from_dense(g.toarray(), fmt, prune=structured)


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ustc.ConversionWarning)
        yield


# -- shortest paths -------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", sparse_formats())
def test_bellman_ford_spmv_matches_csgraph(fmt):
    """d := min(d, A^T ⊗ d) repeated n times (planned once) is single-source shortest paths."""
    n = 24
    g = graph(n, seed=1)
    A = stored(g, fmt)
    oracle_graph = sp.csr_array(np.where(np.isinf(weights_inf(A)), 0, weights_inf(A)))
    d = np.full(n, np.inf)
    d[0] = 0.0
    x = d.copy()
    mm = ustc.Matmul(A, x, d, transpose_a=True)
    mm.plan(semiring="min_plus")
    assert mm.plan_info.startswith("generated") and "semiring min_plus" in mm.plan_info
    for _ in range(n):
        x[:] = d
        mm.execute()
    np.testing.assert_array_equal(d, csgraph.shortest_path(oracle_graph, indices=0))


@pytest.mark.parametrize("fmt", [F.CSR, F.CSC, F.COO(2), F.DCSR, F.BSR(2, 2)], ids=str)
def test_bellman_ford_spmm_all_sources(fmt):
    """D := min(D, A^T ⊗ D) for every source at once (SpMM), against all-pairs shortest paths."""
    n = 16
    g = graph(n, seed=2, density=0.2)
    A = stored(g, fmt)
    D = np.full((n, n), np.inf)
    np.fill_diagonal(D, 0.0)
    for _ in range(n):
        ustc.matmul(A, D.copy(), D, transpose_a=True, semiring="min_plus")
    np.testing.assert_array_equal(D, csgraph.shortest_path(g, directed=True).T)


def test_min_plus_without_c_starts_at_infinity_and_empty_rows_stay_there():
    g = graph(6, 5, seed=3, density=0.3)
    dense = g.toarray()
    dense[2] = 0                                  # a row with no entry
    A = ustc.Tensor.from_dense(dense, "CSR")
    x = np.arange(5.0)
    y = ustc.matmul(A, x, semiring="min_plus")
    expected = np.min(np.where(dense != 0, dense, np.inf) + x, axis=1)
    np.testing.assert_array_equal(y, expected)
    assert y[2] == np.inf


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (1, 7), (7, 1), (0, 0), (9, 9)])
def test_min_plus_dtypes_and_shapes(dtype, shape):
    m, n = shape
    g = graph(m, n, seed=4, density=0.4, dtype=dtype) if m and n else sp.csr_array((m, n), dtype=dtype)
    A = ustc.Tensor.from_package(g)
    x = np.arange(n, dtype=dtype)
    y = ustc.matmul(A, x, semiring="min_plus")
    top = np.inf if np.dtype(dtype).kind == "f" else np.iinfo(dtype).max
    expected = np.full(m, top, dtype=dtype)
    coo = g.tocoo()
    for r, c, v in zip(coo.row, coo.col, coo.data):
        expected[r] = min(expected[r], v + x[c])
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, expected)


# -- reachability, max-times, user semirings --------------------------------------------------

# float64 values in every format; bool values (their own conversions from dense: two ~2 s
# compiles for each format built column by column or by diagonals) in the formats built by rows
REACH = [(fmt, np.float64) for fmt in (F.CSR, F.CSC, F.COO(2), F.DCSR, F.DIAI)] + \
    [(fmt, np.bool_) for fmt in (F.CSR, F.COO(2), F.DCSR)]


@pytest.mark.parametrize("fmt,dtype", REACH, ids=str)
def test_or_and_reachability_matches_bfs(fmt, dtype):
    n = 20
    g = graph(n, seed=5, density=0.08)
    A = stored(sp.csr_array(g.astype(dtype)), fmt)
    reach = np.zeros(n, bool)
    reach[0] = True
    frontier = reach.copy()
    mm = ustc.Matmul(A, frontier, reach, transpose_a=True)
    mm.plan(semiring="or_and")
    for _ in range(n):
        frontier[:] = reach
        mm.execute()
    expected = np.zeros(n, bool)
    expected[csgraph.breadth_first_order(g, 0, directed=True, return_predecessors=False)] = True
    np.testing.assert_array_equal(reach, expected)
    # without c the result is bool whatever the operands' dtype
    step = ustc.matmul(A, reach.astype(dtype), transpose_a=True, semiring="or_and")
    assert step.dtype == np.bool_


@pytest.mark.parametrize("fmt", sparse_formats())
def test_max_times_most_reliable_step(fmt):
    rng = np.random.default_rng(6)
    g = graph(12, seed=6, density=0.3)
    g.data[:] = rng.random(g.nnz) * 0.9 + 0.05     # probabilities
    A = stored(g, fmt)
    p = rng.random(12)
    y = ustc.matmul(A, p, semiring="max_times")
    w = weights_inf(A)
    expected = np.max(np.where(np.isinf(w), -np.inf, w * p), axis=1)
    np.testing.assert_allclose(y, expected)


def test_user_semiring_equals_min_plus():
    user = ustc.Semiring(add=smaller, mul=plus, zero=math.inf)   # a numba.njit mul works as well
    g = graph(10, seed=7, density=0.3)
    A = ustc.Tensor.from_package(g)
    X = np.random.default_rng(7).integers(0, 5, (10, 3)).astype(np.float64)
    mm = ustc.Matmul(A, X)
    mm.plan(semiring=user)
    np.testing.assert_array_equal(mm.execute(), ustc.matmul(A, X, semiring="min_plus"))
    assert "smaller#" in mm.plan_info


# -- prologs and epilogs ---------------------------------------------------------------------

@pytest.mark.parametrize("fmt", sparse_formats())
def test_abs_prolog_on_stored_values_and_relu_epilog(fmt):
    """A prolog on a's stored values and an epilog on c + a @ b, fused in one kernel per format."""
    rng = np.random.default_rng(8)
    dense = rng.standard_normal((9, 8)) * (rng.random((9, 8)) < 0.4)
    A = stored(sp.csr_array(dense), fmt)
    a = A.to_dense()
    x, c = rng.standard_normal(8), rng.standard_normal(9)
    expected = np.maximum(np.abs(a) @ x + c, 0)         # the epilog sees c + a @ b
    got = ustc.matmul(A, x, c, prologs={"a": magnitude}, epilog=relu)
    assert got is c
    np.testing.assert_allclose(c, expected)


@pytest.mark.parametrize("fmt", [F.CSR, F.BSR(2, 2)], ids=str)
def test_prolog_alone_epilog_alone_and_a_prolog_on_b(fmt):
    rng = np.random.default_rng(8)
    dense = rng.standard_normal((9, 8)) * (rng.random((9, 8)) < 0.4)
    A = stored(sp.csr_array(dense), fmt)
    a = A.to_dense()
    x = rng.standard_normal(8)
    np.testing.assert_allclose(ustc.matmul(A, x, prologs={"a": magnitude}), np.abs(a) @ x)
    np.testing.assert_allclose(ustc.matmul(A, x, epilog=relu), np.maximum(a @ x, 0))
    c = rng.standard_normal(9)
    expected = np.maximum(a @ np.abs(x) + c, 0)
    assert ustc.matmul(A, x, c, prologs={"b": magnitude}, epilog=relu) is c
    np.testing.assert_allclose(c, expected)


def test_prologs_see_stored_values_only():
    """A prolog with f(0) != 0 changes stored values, never absent ones (nor padding)."""
    dense = np.array([[0.0, 2.0, 0.0, 0.0], [1.0, 0.0, 0.0, 3.0]])
    x = np.ones(4)
    for fmt in (F.CSR, F.BSR(2, 2), F.DIAI, F.COO(2)):
        A = ustc.Tensor.from_dense(dense, fmt)
        y = ustc.matmul(A, x, prologs={"a": lambda v: v + 10.0})
        np.testing.assert_allclose(y, [12.0, 24.0], err_msg=str(fmt))


def test_epilog_on_every_element_of_a_dense_result():
    """Rows without entries get epilog(0) too: the epilog applies to the dense result."""
    dense = np.zeros((4, 3))
    dense[1, 2] = 5.0
    for fmt in (F.CSR, F.DCSR):                     # fused in the store / a pass of its own
        y = ustc.matmul(ustc.Tensor.from_dense(dense, fmt), np.ones(3), epilog=lambda v: v + 1.0)
        np.testing.assert_allclose(y, [1.0, 6.0, 1.0, 1.0])


def test_spgemm_min_plus_two_hops_and_into_c():
    n = 12
    g = graph(n, seed=9, density=0.25)
    w = np.where(g.toarray() != 0, g.toarray(), np.inf)
    two = np.min(w[:, :, None] + w[None, :, :], axis=1)
    for out_format in (F.CSR, F.COO(2), F.DCSR, F.CSC):
        A = ustc.Tensor.from_package(g)
        mm = ustc.Matmul(A, A, options={"out_format": out_format})
        mm.plan(semiring="min_plus", epilog=lambda v: v * 2.0)
        C = mm.execute()
        got = np.full((n, n), np.inf)
        coords, values = C.entries()
        got[coords] = values
        np.testing.assert_array_equal(got, two * 2.0)
    c = np.full((n, n), 7.0)
    ustc.matmul(A, A, c, semiring="min_plus", epilog=lambda v: v - 1.0)
    np.testing.assert_array_equal(c, np.minimum(7.0, two) - 1.0)
    out = np.empty((n, n))
    ustc.matmul(A, A, out=out, semiring="min_plus", epilog=lambda v: -v)
    np.testing.assert_array_equal(out, -two)


# -- plans, the plan cache, errors --------------------------------------------------------------

def test_one_shot_calls_key_the_plan_cache_by_the_fusion():
    from ustc.ops import plan_cache

    A = ustc.Tensor.from_package(graph(8, seed=10))
    x = np.ones(8)
    first = ustc.matmul(A, x, semiring="min_plus")
    misses = plan_cache.stats()["misses"]
    np.testing.assert_array_equal(ustc.matmul(A, x, semiring="min_plus"), first)
    assert plan_cache.stats()["misses"] == misses
    plain = ustc.matmul(A, x)
    assert plan_cache.stats()["misses"] == misses + 1
    np.testing.assert_allclose(plain, A.to_dense() @ x)
    ustc.matmul(A, x, semiring="max_plus")
    assert plan_cache.stats()["misses"] == misses + 2


def test_fusion_errors_name_what_is_unsupported():
    A = ustc.Tensor.from_package(graph(6, seed=11))
    x = np.ones(6)
    with pytest.raises(UnsupportedOperation, match="route 'library'.*semiring min_plus"):
        ustc.Matmul(A, x, options={"route": "library"}).plan(semiring="min_plus")
    with pytest.raises(UnsupportedOperation, match="alpha = 2.0 with the semiring min_plus"):
        ustc.Matmul(A, x, alpha=2.0).plan(semiring="min_plus")
    with pytest.raises(UnsupportedOperation, match="beta = 3.0"):
        ustc.Matmul(A, x, np.zeros(6), beta=3.0).plan(semiring="min_plus")
    with pytest.raises(UnsupportedOperation, match="prologs=\\{'c'"):
        ustc.Matmul(A, x, np.zeros(6)).plan(prologs={"c": relu})
    with pytest.raises(UstcError, match="unknown operand 'd'"):
        ustc.Matmul(A, x).plan(prologs={"d": relu})
    with pytest.raises(UstcError, match="epilog must take 1 argument"):
        ustc.Matmul(A, x).plan(epilog=smaller)
    with pytest.raises(UnsupportedOperation, match="must be bool or integer"):
        ustc.Matmul(A, x, np.zeros(6)).plan(semiring="or_and")
    with pytest.raises(UnsupportedOperation, match="sparse c"):
        ustc.matmul(A, A, A, semiring="min_plus")


def test_plan_keeps_the_fusion_named_earlier():
    A = ustc.Tensor.from_package(graph(6, seed=12))
    x = np.arange(6.0)
    mm = ustc.Matmul(A, x).plan(semiring="min_plus")
    first = mm.execute().copy()
    mm.plan()          # re-planning without arguments keeps min-plus
    np.testing.assert_array_equal(mm.execute(), first)
    mm.plan(semiring="plus_times")
    np.testing.assert_allclose(mm.execute(), A.to_dense() @ x)


def minus(a, b):
    return a - b


def test_vector_times_sparse_keeps_operand_order():
    """x @ B is planned as B^T @ x: prologs stay with their operand and a user ⊗ keeps (a, b) order."""
    g = graph(7, 5, seed=13, density=0.4)
    B = ustc.Tensor.from_package(g)
    x = np.arange(7.0) - 3
    w = weights_inf(B)
    np.testing.assert_array_equal(ustc.matmul(x, B, semiring="min_plus"), np.min(x[:, None] + w, axis=0))
    np.testing.assert_allclose(ustc.matmul(x, B, prologs={"a": magnitude}), np.abs(x) @ g.toarray())
    np.testing.assert_allclose(ustc.matmul(x, B, prologs={"b": lambda v: -v}), -(x @ g.toarray()))
    ordered = ustc.Semiring(add="min", mul=minus)
    expected = np.min(np.where(np.isinf(w), np.inf, x[:, None] - w), axis=0)
    np.testing.assert_array_equal(ustc.matmul(x, B, semiring=ordered), expected)
