"""Krylov solves on Grid2D-partitioned matrices reproduce single-process ustc.solve (same
iterations, x within 1e-10 relative) with no scheduler work; the sparsity-aware grid exchange
moves exactly the x entries each block's columns touch and the partial rows it holds (counted
from SciPy, checked against the communicators), for every 2-D registry format and for
rectangular matrices (x then laid out by process columns)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from dist_helpers import poisson2d, random_sparse

import ustc
import ustc.distributed as ud
from ustc import formats as F
from ustc.distributed.gridhalo import layout

GRIDS = [(1, 1), (1, 2), (2, 1), (2, 2), (2, 3), (3, 1),
         ([0, 0, 144], [0, 50, 50, 144]),            # 2 x 3 with an empty row block and an empty column block
         ([0, 70, 144], [0, 144])]                    # 2 x 1, uneven
FORMATS = [pytest.param(nf.format(), id=nf.name) for nf in F.NAMED
           if nf.format().ndim == 2 and nf.name != "Structured"]


def _rel(x, y):
    return np.linalg.norm(x - y) / np.linalg.norm(y)


@pytest.mark.parametrize("rows, cols", GRIDS, ids=str)
def test_grid_cg_reproduces_single_process(rt, rows, cols):
    a = ustc.Tensor.from_package(poisson2d(12))
    b = np.random.default_rng(0).standard_normal(144)
    x1, i1 = ustc.solve(a, b, "cg", rtol=1e-6, return_info=True)
    g = ud.GridTensor.from_tensor(a, ud.Grid2D(144, 144, rows, cols))
    x, info = ud.solve(g, b, "cg", rtol=1e-6, return_info=True)
    assert info.converged and info.iterations == i1.iterations
    assert _rel(x, x1) < 1e-10
    assert info.scheduler_transitions == 0
    # per iteration: the partial rows of A p back, p.Ap, and r.r / r.z with the next z's x entries
    # (each block forms its p entries from them); 5 before the loop: ||b||, A x0 (2), r0, r.z with z's entries
    assert info.syncs == 3 * info.iterations + 5
    g.free()


@pytest.mark.parametrize("method", ["cg", "bicgstab", "gmres"])
@pytest.mark.parametrize("pre", [None, "jacobi"])
def test_grid_methods(rt, method, pre):
    n = 10
    conv = sp.diags([-1.3, 2.6, -0.7], [-1, 0, 1], shape=(n, n))
    lap = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    a = sp.kron(conv if method != "cg" else lap, sp.eye(n)) + sp.kron(sp.eye(n), lap)
    a = (a @ sp.diags(np.linspace(1, 2, n * n)) if method != "cg" else a + sp.diags(np.linspace(0, 1, n * n)))
    t = ustc.Tensor.from_package(a.tocsr())
    b = np.random.default_rng(1).standard_normal(n * n)
    x1, i1 = ustc.solve(t, b, method, rtol=1e-8, preconditioner=pre, restart=7, return_info=True)
    g = ud.GridTensor.from_tensor(t, ud.Grid2D(100, 100, [0, 30, 30, 100], 2), block_format="COO")
    x, info = ud.solve(g, b, method, rtol=1e-8, preconditioner=pre, restart=7, return_info=True)
    assert info.converged and info.iterations == i1.iterations
    assert _rel(x, x1) < 1e-10
    assert info.scheduler_transitions == 0


@pytest.mark.parametrize("rows, cols, pre, cplx", [(1, 2, None, False), (2, 2, "jacobi", True),
                                                   ([0, 0, 100], [0, 40, 40, 100], None, False)], ids=str)
def test_grid_bicgstab_one_sync_per_product(rt, rows, cols, pre, cplx):
    """Each product sends only its partial rows back (the operand's x entries are formed from the
    v and t entries sent with the all-reduces): 8 synchronisations per iteration (2 products, 6
    all-reduces), where the full exchange took 10, with the iterations and x of ustc.solve."""
    n = 10
    conv = sp.diags([-1.3, 2.6, -0.7], [-1, 0, 1], shape=(n, n))
    lap = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    a = ((sp.kron(conv, sp.eye(n)) + sp.kron(sp.eye(n), lap)) @ sp.diags(np.linspace(1, 2, n * n))).tocsr()
    b = np.random.default_rng(5).standard_normal(n * n)
    if cplx:
        a, b = (a + 0.3j * sp.eye(n * n, k=1)).tocsr(), b + 0.5j
    t = ustc.Tensor.from_package(a)
    x1, i1 = ustc.solve(t, b, "bicgstab", rtol=1e-8, preconditioner=pre, return_info=True)
    g = ud.GridTensor.from_tensor(t, ud.Grid2D(100, 100, rows, cols))
    x, info = ud.solve(g, b, "bicgstab", rtol=1e-8, preconditioner=pre, return_info=True)
    assert info.converged and info.iterations == i1.iterations
    assert _rel(x, x1) < 1e-10
    # before the loop: ||b|| (with dinv's entries), A x0 (2: x0 has no mirror), r0 (with r0's entries);
    # an iteration that converges on s ends after its first product and two all-reduces (4 fewer)
    assert info.syncs in (8 * info.iterations + 4, 8 * info.iterations)
    g.free()


def test_grid_complex_hermitian(rt):
    a = poisson2d(10) + sp.eye(100)
    h = (a + 1j * (sp.eye(100, k=1) - sp.eye(100, k=-1)) * 0.3).tocsr()
    b = np.ones(100) + 0.5j
    t = ustc.Tensor.from_package(h)
    x1, i1 = ustc.solve(t, b, "cg", rtol=1e-8, return_info=True)
    x, info = ud.solve(ud.GridTensor.from_tensor(t, ud.Grid2D(100, 100, 2, 3)), b, "cg", rtol=1e-8,
                       return_info=True)
    assert info.iterations == i1.iterations and _rel(x, x1) < 1e-10


def _x_owner(grid, cols):
    """The rank owning each x entry: the solve layout for a square matrix, else Grid2D.x_range."""
    if grid.m == grid.n:
        return layout(grid).owner(cols)
    ranges = {r: grid.x_range(r) for r in range(grid.parts)}
    return np.array([next(r for r, (lo, hi) in ranges.items() if lo <= c < hi) for c in cols], np.int64)


def _expected_exchange(a, grid):
    """x entries and partial rows that cross ranks in one product, counted from SciPy."""
    vec = layout(grid)
    x_entries = y_entries = 0
    for rank in range(grid.parts):
        i, j = grid.coords(rank)
        (r0, r1), (c0, c1) = grid.rows.range(i), grid.cols.range(j)
        blk = sp.coo_array(a[r0:r1, c0:c1])
        cols, rows = np.unique(blk.col) + c0, np.unique(blk.row) + r0
        x_entries += int(np.count_nonzero(_x_owner(grid, cols) != rank))
        y_entries += int(np.count_nonzero(vec.owner(rows) != rank))
    return x_entries, y_entries


@pytest.mark.parametrize("shape", [(2, 2), (2, 3), (1, 4), (4, 1)], ids=str)
def test_sparse_exchange_bytes(rt, shape):
    a = random_sparse(40, 40, 0.04, seed=7)
    grid = ud.Grid2D(40, 40, *shape)
    g = ud.GridTensor.from_tensor(ustc.Tensor.from_package(a), grid, block_format="CSR")
    x = np.random.default_rng(8).standard_normal((40, 2))
    mm = ud.GridMatmul(g, x, exchange="sparse")
    info = mm.plan()
    x_entries, y_entries = _expected_exchange(a, grid)
    assert (info["x_entries"], info["y_entries"]) == (x_entries, y_entries)
    assert info["bytes"] == (x_entries + y_entries) * 2 * 8
    dense = g.plan_info(2)
    assert info["bytes"] < dense["bytes"]                    # a sparse matrix moves less than the all-gathers
    before = mm.counters()
    y = mm.execute()
    after = mm.counters()
    assert sum(p["bytes"] - q["bytes"] for p, q in zip(after, before)) == info["bytes"]
    assert sum(p["messages"] - q["messages"] for p, q in zip(after, before)) == info["messages"]
    np.testing.assert_allclose(y, a @ x, rtol=1e-13, atol=1e-13)
    mm.free()
    g.free()


@pytest.mark.parametrize("m, n, rows, cols", [(40, 23, 2, 2), (23, 40, 2, 3), (40, 17, 1, 4), (17, 40, 4, 1),
                                              (30, 45, [0, 0, 30], [0, 20, 20, 45]),   # empty row and column blocks
                                              (1, 9, 1, 3), (9, 1, 3, 1)], ids=str)
def test_sparse_exchange_rectangular(rt, m, n, rows, cols):
    a = random_sparse(m, n, 0.08, seed=m + n, dtype=np.complex128)
    grid = ud.Grid2D(m, n, rows, cols)
    g = ud.GridTensor.from_tensor(ustc.Tensor.from_package(a), grid, block_format="CSR")
    x = np.random.default_rng(9).standard_normal((n, 2)) + 0.5j
    mm = ud.GridMatmul(g, x, exchange="sparse")
    info = mm.plan()
    x_entries, y_entries = _expected_exchange(a, grid)
    assert (info["x_entries"], info["y_entries"]) == (x_entries, y_entries)
    assert info["bytes"] == (x_entries + y_entries) * 2 * 16
    before = mm.counters()
    y = mm.execute()
    after = mm.counters()
    assert sum(p["bytes"] - q["bytes"] for p, q in zip(after, before)) == info["bytes"]
    assert sum(p["messages"] - q["messages"] for p, q in zip(after, before)) == info["messages"]
    np.testing.assert_allclose(y, a @ x, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(y, ustc.matmul(ustc.Tensor.from_package(a), x), rtol=1e-13, atol=1e-13)
    v = ud.GridMatmul(g, x[:, 0].real, exchange="sparse").execute()             # SpMV, real x
    np.testing.assert_allclose(v, a @ x[:, 0].real, rtol=1e-13, atol=1e-13)
    mm.free()
    g.free()


@pytest.mark.parametrize("fmt", FORMATS)
def test_sparse_exchange_formats(rt, fmt):
    a = random_sparse(20, 20, 0.2, seed=3, dtype=np.complex128)
    x = np.random.default_rng(4).standard_normal(20) + 0.25j
    g = ud.GridTensor.from_tensor(ustc.Tensor.from_package(a).convert(fmt), ud.Grid2D(20, 20, 2, [0, 3, 3, 20]))
    dense = ud.GridMatmul(g, x).execute()                    # the dense exchange first: separate buffers
    np.testing.assert_allclose(ud.GridMatmul(g, x, exchange="sparse").execute(), a @ x, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(dense, a @ x, rtol=1e-13, atol=1e-13)


def test_empty_and_zero_grids(rt):
    z = sp.csr_array((12, 12))
    g = ud.GridTensor.from_tensor(ustc.Tensor.from_package(z), ud.Grid2D(12, 12, 2, 2))
    assert g.sparse_info()["messages"] == 0
    np.testing.assert_array_equal(ud.GridMatmul(g, np.ones(12), exchange="sparse").execute(), np.zeros(12))
    x, info = ud.solve(g, np.zeros(12), "cg", return_info=True)
    assert info.iterations == 0 and not x.any()


def test_grid_solve_errors(rt):
    a = random_sparse(6, 7)
    g = ud.GridTensor.from_tensor(ustc.Tensor.from_package(a), ud.Grid2D(6, 7, 2, 2))
    with pytest.raises(ustc.ShapeError, match="square"):
        ud.solve(g, np.ones(6))
    with pytest.raises(ustc.UstcError, match="exchange"):
        ud.GridMatmul(g, np.ones(7), exchange="halo")
    sq = ud.GridTensor.from_tensor(ustc.Tensor.from_package(poisson2d(3)), ud.Grid2D(9, 9, 2, 2))
    wrong = ud.DVector.from_array(np.ones(9), [0, 1, 4, 6, 9])     # not the grid's layout [0, 2, 4, 6, 9]
    with pytest.raises(ustc.ShapeError, match="split"):
        ud.solve(sq, wrong)
    with pytest.raises(ustc.UstcError, match="DTensor or a GridTensor"):
        ud.solve(poisson2d(3), np.ones(9))
