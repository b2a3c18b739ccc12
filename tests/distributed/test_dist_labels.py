"""User-label partitions (``ud.Labels``: a part id per row, rows not contiguous): SpMV / SpMM /
SpGEMM and CG / BiCGSTAB / GMRES equal single-process ustc and SciPy in the user's global order,
for P in {1, 2, 3, 7} with an empty part and uneven parts, registry formats, rectangular and
complex operands; plan_info's halo counts are exact (counted from SciPy, checked against the
communicators); a label partition that groups a stencil's rows well moves fewer bytes than a
bad one; bad labels raise ustc errors naming the row."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from dist_helpers import poisson2d, random_sparse

import ustc
import ustc.distributed as ud
from ustc import formats as F

FORMATS = [pytest.param(nf.format(), id=nf.name) for nf in F.NAMED
           if nf.format().ndim == 2 and nf.name != "Structured"]


def _labels(n, parts, seed, empty=None):
    """Random labels in 0..parts-1 (part ``empty`` gets no row), rows interleaved across parts."""
    rng = np.random.default_rng(seed)
    choices = [p for p in range(parts) if p != empty] or [0]
    return rng.choice(choices, size=n)


def _rel(x, y):
    return np.linalg.norm(x - y) / np.linalg.norm(y)


def _halo_entries(a, lab):
    """Ghost entries per (owner, receiver) pair of an aligned square matrix, from SciPy."""
    parts = lab.parts
    counts = np.zeros((parts, parts), np.int64)
    labels = np.asarray(lab.labels)
    for d in range(parts):
        cols = np.unique(a[np.flatnonzero(labels == d)].indices)
        owners = labels[cols]
        for s in range(parts):
            if s != d:
                counts[s, d] = np.count_nonzero(owners == s)
    return counts


@pytest.mark.parametrize("parts, empty", [(1, None), (2, None), (3, 1), (7, 4)])
def test_spmv_exact_halo(rt, parts, empty):
    a = random_sparse(40, 40, density=0.08, seed=parts)
    lab = ud.Labels(_labels(40, parts, parts, empty), parts)
    assert empty is None or lab.sizes()[empty] == 0
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), lab)
    x = np.random.default_rng(1).standard_normal(40)
    mm = ud.Matmul(d, x)
    info = mm.plan()
    counts = _halo_entries(a, lab)
    assert info["entries"] == counts.sum() and info["bytes"] == 8 * counts.sum()
    assert info["messages"] == np.count_nonzero(counts)
    before = mm.counters()
    y = mm.execute(gather=True)
    after = mm.counters()
    assert sum(p["bytes"] - q["bytes"] for p, q in zip(after, before)) == info["bytes"]
    assert sum(p["messages"] - q["messages"] for p, q in zip(after, before)) == info["messages"]
    np.testing.assert_allclose(y, a @ x, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(y, ustc.matmul(ustc.Tensor.from_package(a), x), rtol=1e-13, atol=1e-13)
    assert d.gather().to_dense().tolist() == a.toarray().tolist()
    xv = ud.DVector.from_array(x, lab)
    np.testing.assert_array_equal(xv.gather(), x)                 # global order back
    assert np.array_equal(lab.take(x, 0), x[np.asarray(lab.labels) == 0])


@pytest.mark.parametrize("fmt", FORMATS)
def test_formats(rt, fmt):
    a = random_sparse(24, 24, 0.2, seed=3)
    x = np.random.default_rng(4).standard_normal(24)
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a).convert(fmt), ud.Labels(np.arange(24) % 3))
    np.testing.assert_allclose(d @ x, a @ x, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("parts", [2, 7])
def test_rectangular_complex_spmm(rt, parts):
    a = random_sparse(17, 29, seed=6, dtype=np.complex128)
    x = np.random.default_rng(7).standard_normal((29, 3)) + 1j
    rows = ud.Labels(_labels(17, parts, 8), parts)
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), rows)              # columns split evenly
    np.testing.assert_allclose(d @ x, a @ x, rtol=1e-13, atol=1e-13)
    cols = ud.Labels(_labels(29, parts, 9, empty=0), parts)                     # labelled columns too
    dc = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), rows, col_partition=cols)
    mm = ud.Matmul(dc, ud.DVector.from_array(x, cols), alpha=2.0)
    np.testing.assert_allclose(mm.execute(gather=True), 2 * (a @ x), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(dc @ x[:, 0], a @ x[:, 0], rtol=1e-13, atol=1e-13)


def test_spgemm(rt):
    a = random_sparse(30, 30, 0.1, seed=10)
    b = random_sparse(30, 12, 0.2, seed=11)
    lab = ud.Labels(_labels(30, 3, 12), 3)
    da = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), lab)
    np.testing.assert_allclose((da @ da).gather().to_dense(), (a @ a).toarray(), rtol=1e-13, atol=1e-14)
    db = ud.DTensor.from_tensor(ustc.Tensor.from_package(b), lab)              # rows labelled alike
    np.testing.assert_allclose((da @ db).gather().to_dense(), (a @ b).toarray(), rtol=1e-13, atol=1e-14)
    plain = ud.DTensor.from_tensor(ustc.Tensor.from_package(b), 3)             # B's rows in plain blocks
    mm = ud.Matmul(da, plain)
    info = mm.plan()
    c = mm.execute()
    np.testing.assert_allclose(c.gather().to_dense(), (a @ b).toarray(), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(c @ np.arange(12.0), (a @ b) @ np.arange(12.0), rtol=1e-12)
    labels = np.asarray(lab.labels)                 # rows fetched: columns touched outside B's own rows
    fetched = sum(np.count_nonzero(plain.rows.owner(np.unique(a[np.flatnonzero(labels == d)].indices)) != d)
                  for d in range(3))
    assert info["rows"] == fetched


@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_cg(rt, parts):
    a = ustc.Tensor.from_package(poisson2d(12))
    b = np.random.default_rng(0).standard_normal(144)
    x1, i1 = ustc.solve(a, b, "cg", rtol=1e-6, return_info=True)
    d = ud.DTensor.from_tensor(a, ud.Labels(_labels(144, parts, 13, empty=parts - 1 if parts > 2 else None),
                                            parts))
    x, info = ud.solve(d, b, "cg", rtol=1e-6, return_info=True)
    assert info.converged and info.iterations == i1.iterations
    assert _rel(x, x1) < 1e-10
    assert info.scheduler_transitions == 0 and info.syncs == 3 * info.iterations + 4


@pytest.mark.parametrize("method", ["cg", "bicgstab", "gmres"])
def test_methods_jacobi_complex(rt, method):
    n = 10
    lap = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    conv = sp.diags([-1.3, 2.6, -0.7], [-1, 0, 1], shape=(n, n))
    if method == "cg":
        m = (sp.kron(lap, sp.eye(n)) + sp.kron(sp.eye(n), lap) + sp.eye(n * n)).tocsr()
        m = (m + 0.3j * (sp.eye(n * n, k=1) - sp.eye(n * n, k=-1))).tocsr()       # Hermitian
        b = np.ones(n * n) + 0.5j
    else:
        m = (sp.kron(conv, sp.eye(n)) + sp.kron(sp.eye(n), lap)) @ sp.diags(np.linspace(1, 2, n * n))
        m = m.tocsr()
        b = np.random.default_rng(1).standard_normal(n * n)
    t = ustc.Tensor.from_package(m)
    lab = ud.Labels(_labels(n * n, 3, 14), 3)
    for pre in (None, "jacobi"):
        x1, i1 = ustc.solve(t, b, method, rtol=1e-8, preconditioner=pre, restart=7, return_info=True)
        x, info = ud.solve(ud.DTensor.from_tensor(t, lab, block_format="COO"), b, method, rtol=1e-8,
                           preconditioner=pre, restart=7, return_info=True)
        assert info.converged and info.iterations == i1.iterations and _rel(x, x1) < 1e-10


def test_checkpoint_in_global_order(rt):
    a = ustc.Tensor.from_package(poisson2d(12))
    b = np.random.default_rng(2).standard_normal(144)
    d = ud.DTensor.from_tensor(a, ud.Labels(_labels(144, 2, 15), 2))
    seen = []
    x, info = ud.solve(d, b, "cg", rtol=1e-8, checkpoint_every=5, on_checkpoint=seen.append, return_info=True)
    last = seen[-1]
    assert last.exact and last.x.shape == (144,)
    # the kept state is in the user's order: r = b - A x for the kept x
    np.testing.assert_allclose(last.state["r"], b - poisson2d(12) @ last.x, rtol=1e-8, atol=1e-10)
    x2, info2 = ud.solve(d, b, "cg", rtol=1e-8, resume=last, return_info=True)
    assert info2.iterations == info.iterations and np.array_equal(x2, x)


def test_good_labels_move_fewer_bytes(rt):
    side, parts = 12, 4
    a = poisson2d(side)
    ii, jj = np.divmod(np.arange(side * side), side)
    quadrants = ud.Labels((ii >= side // 2) * 2 + (jj >= side // 2), parts)     # compact 6 x 6 squares
    round_robin = ud.Labels(np.arange(side * side) % parts, parts)              # neighbours split apart
    good = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), quadrants).plan_info()
    bad = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), round_robin).plan_info()
    assert good["bytes"] == 8 * _halo_entries(a, quadrants).sum() == 8 * 4 * 2 * 6    # two 6-entry edges each
    assert good["bytes"] < bad["bytes"] / 4
    x = np.random.default_rng(3).standard_normal(side * side)
    for lab in (quadrants, round_robin):
        np.testing.assert_allclose(ud.DTensor.from_tensor(ustc.Tensor.from_package(a), lab) @ x, a @ x,
                                   rtol=1e-13)


@pytest.mark.parametrize("m, n, labels", [(0, 0, []), (1, 6, [1]), (6, 1, [2, 0, 2, 0, 0, 2]), (5, 5, [1, 0, 1, 0, 1])],
                         ids=["empty", "1xn", "nx1", "all-zero"])
def test_small_shapes(rt, m, n, labels):
    a = sp.csr_array((m, n)) if m == n else random_sparse(m, n, 0.6, seed=18)
    lab = ud.Labels(labels, 3)
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), lab)
    x = np.arange(1.0, n + 1)
    np.testing.assert_allclose(d @ x, a @ x, rtol=1e-13, atol=0)
    if m == n:                                               # nothing stored: no halo
        assert d.plan_info()["bytes"] == 0
    assert d.gather().to_dense().tolist() == a.toarray().tolist()


def test_loader_and_file(rt, tmp_path):
    a = random_sparse(19, 19, seed=16)
    x = np.arange(19.0)
    lab = ud.Labels(_labels(19, 3, 17), 3)
    d = ud.DTensor.from_loader(lambda rows: a[rows], (19, 19), lab)          # loader(rows) with labels
    np.testing.assert_allclose(d @ x, a @ x, rtol=1e-13)
    path = tmp_path / "labels.mtx"
    ustc.to_file(ustc.Tensor.from_package(a), path)
    f = ud.DTensor.from_file(path, lab, block_format="DCSR")
    np.testing.assert_allclose(f @ x, a @ x, rtol=1e-13)
    assert f.gather().to_dense().tolist() == a.toarray().tolist()


def test_errors(rt):
    with pytest.raises(ustc.IndexingError, match="row 2 has label 5"):
        ud.Labels([0, 1, 5, 1], 3)
    with pytest.raises(ustc.IndexingError, match="row 1 has label -1"):
        ud.Labels([0, -1, 1])
    with pytest.raises(ustc.UstcError, match="integers"):
        ud.Labels([0.0, 1.5])
    with pytest.raises(ustc.ShapeError, match="1-D"):
        ud.Labels(np.zeros((2, 2), np.int64))
    lab = ud.Labels([0, 1, 0, 1, 1])
    labels = np.array([1, 0, 1])
    ud.Labels(labels)
    assert labels.tolist() == [1, 0, 1]                                       # input not mutated
    with pytest.raises(ustc.ShapeError, match="covers 5 rows"):
        ud.DTensor.from_tensor(ustc.Tensor.from_package(random_sparse(6, 6)), lab)
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(random_sparse(5, 5)), lab)
    with pytest.raises(ustc.ShapeError, match="split"):
        ud.Matmul(d, ud.DVector.from_array(np.ones(5), 2))                   # same parts, other order
    assert ud.Labels([0, 0, 1, 1]) == ud.RowBlocks(4, 2)                     # rising labels: plain blocks
    assert lab != ud.RowBlocks(5, bounds=[0, 2, 5])


# -- labels on a Grid2D -------------------------------------------------------------------------
def test_grid_labels_products(rt):
    """Labelled rows and columns on a grid: both exchanges' products, gather and the loader build
    equal SciPy in the user's order; a square matrix with other labels on its columns multiplies
    (x laid out by process columns) but refuses a solve."""
    a = random_sparse(30, 30, 0.15, seed=11)
    rows, cols = ud.Labels(_labels(30, 2, 12)), ud.Labels(_labels(30, 3, 13, empty=1))
    x = np.random.default_rng(14).standard_normal((30, 2))
    same = ud.GridTensor.from_tensor(ustc.Tensor.from_package(a), ud.Grid2D(30, 30, rows, rows))
    other = ud.GridTensor.from_tensor(ustc.Tensor.from_package(a), ud.Grid2D(30, 30, rows, cols))
    for g in (same, other):
        for exchange in ("dense", "sparse"):
            np.testing.assert_allclose(ud.GridMatmul(g, x, exchange=exchange).execute(), a @ x, rtol=1e-13,
                                       atol=1e-13)
        assert g.gather().to_dense().tolist() == a.toarray().tolist()
    with pytest.raises(ustc.ShapeError, match="same labels"):
        ud.solve(other, np.ones(30))
    tall = random_sparse(23, 17, 0.2, seed=15, dtype=np.complex128)
    grid = ud.Grid2D(23, 17, ud.Labels(_labels(23, 2, 16)), ud.Labels(_labels(17, 2, 17)))
    g = ud.GridTensor.from_loader(lambda r: tall[r], grid, dtype=np.complex128)
    v = np.arange(17.0) - 3j
    for exchange in ("dense", "sparse"):
        np.testing.assert_allclose(ud.GridMatmul(g, v, exchange=exchange).execute(), tall @ v, rtol=1e-13,
                                   atol=1e-13)
    for t in (same, other, g):
        t.free()


@pytest.mark.parametrize("method, pre", [("cg", "jacobi"), ("bicgstab", None)])
def test_grid_labels_solve(rt, method, pre):
    """CG and BiCGSTAB on a grid of interleaved labels: ustc.solve's iterations, x within 1e-10 in
    the user's order, the grid's synchronisations per iteration (3 for CG, 8 for BiCGSTAB)."""
    a = poisson2d(10) if method == "cg" else poisson2d(10) @ sp.diags(np.linspace(1, 2, 100))
    t = ustc.Tensor.from_package(a.tocsr())
    b = np.random.default_rng(18).standard_normal(100)
    x1, i1 = ustc.solve(t, b, method, rtol=1e-8, preconditioner=pre, return_info=True)
    lab = ud.Labels(_labels(100, 2, 19))
    g = ud.GridTensor.from_tensor(t, ud.Grid2D(100, 100, lab, [0, 40, 100]))
    with pytest.raises(ustc.ShapeError, match="same labels"):
        ud.solve(g, b)
    g.free()
    g = ud.GridTensor.from_tensor(t, ud.Grid2D(100, 100, lab, lab))
    x, info = ud.solve(g, b, method, rtol=1e-8, preconditioner=pre, return_info=True)
    assert info.converged and info.iterations == i1.iterations and _rel(x, x1) < 1e-10
    assert info.syncs in ((3 * info.iterations + 5,) if method == "cg" else
                          (8 * info.iterations + 4, 8 * info.iterations))
    g.free()
