"""What PETSc's MatMPIAIJ holds per rank (MPIAIJPart), without PETSc: the pure functions against a
SciPy oracle (row blocks, labels, grid-like ownership; P in {1, 2, 3} with empty blocks; complex,
rectangular, duplicates and stored zeros), their validation, and the parts the distributed tensors
give (RowBlocks, Labels, Grid2D, labelled Grid2D) equal to the pure function's on the whole matrix."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import scipy.sparse as sp
from dist_helpers import random_sparse

import ustc
import ustc.distributed as ud
from ustc.distributed.petsclayout import MPIAIJPart, mpiaij_part, mpiaij_parts

HAVE_PETSC = importlib.util.find_spec("petsc4py") is not None


def _check_against_scipy(a, parts, row_bounds, col_bounds, rp, cp):
    """Every part rebuilds its rows of the user's matrix, in PETSc's and in the user's numbering."""
    a = sp.csr_array(a)
    bs = a[rp][:, cp].tocsr()
    b = bs.toarray()
    dense = a.toarray()
    assert len(parts) == len(row_bounds) - 1
    for r, part in enumerate(parts):
        (r0, r1), (c0, c1) = (row_bounds[r], row_bounds[r + 1]), (col_bounds[r], col_bounds[r + 1])
        assert part.rows == (r0, r1) and part.cols == (c0, c1) and part.shape == a.shape
        assert part.sizes == ((r1 - r0, a.shape[0]), (c1 - c0, a.shape[1]))
        rows = b[r0:r1]
        touched = np.unique(bs[r0:r1].indices)           # the stored pattern, zeros included
        np.testing.assert_array_equal(part.garray, touched[(touched < c0) | (touched >= c1)])
        (i, j, v), (oi, ok, ov) = part.diag, part.offdiag
        rebuilt = np.zeros_like(rows)
        for ptr, idx, val, cols in ((i, j, v, np.arange(c0, c1)), (oi, ok, ov, part.garray)):
            assert len(ptr) == r1 - r0 + 1
            assert all(np.all(np.diff(idx[ptr[k]:ptr[k + 1]]) > 0) for k in range(r1 - r0))   # sorted, unique
            rr = np.repeat(np.arange(r1 - r0), np.diff(ptr))
            rebuilt[rr, cols[idx]] = val
            np.testing.assert_array_equal(val, dense[part.user_rows[rr], np.r_[part.user_cols, part.user_garray][
                idx + (0 if cols is not part.garray else c1 - c0)]])          # the user's numbering
        np.testing.assert_array_equal(rebuilt, rows)
        (_, gj, _) = part.csr[1]
        np.testing.assert_array_equal(gj, part.garray[ok])
        d_nnz, o_nnz = part.nnz
        assert d_nnz.sum() == len(j) and o_nnz.sum() == len(ok)
        np.testing.assert_array_equal(part.user_rows, rp[r0:r1])
        np.testing.assert_array_equal(part.user_garray, cp[part.garray])


CASES = {  # (rows, cols, row bounds, col bounds, labels on rows, labels on columns)
    "one rank": (9, 9, [0, 9], [0, 9], False, False),
    "rows 2": (9, 9, [0, 4, 9], [0, 4, 9], False, False),
    "rows 3 empty": (10, 10, [0, 0, 6, 10], [0, 0, 6, 10], False, False),
    "rect 3": (8, 11, [0, 3, 3, 8], [0, 5, 8, 11], False, False),
    "labels 3": (12, 12, [0, 5, 5, 12], [0, 5, 5, 12], True, True),
    "labels rect": (7, 10, [0, 2, 7], [0, 6, 10], True, True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_pure_parts_against_scipy(case):
    m, n, rb, cb, lab_r, lab_c = CASES[case]
    rng = np.random.default_rng(len(case))
    a = random_sparse(m, n, 0.3, seed=len(case), dtype=np.complex128)
    a = sp.csr_array(a)
    a.data[::5] = 0                                   # stored zeros are kept, as PETSc keeps them
    rp = rng.permutation(m) if lab_r else np.arange(m)
    cp = rng.permutation(n) if lab_c else np.arange(n)
    parts = mpiaij_parts(a, rb, cb, rp if lab_r else None, cp if lab_c else None)
    _check_against_scipy(a, parts, rb, cb, rp, cp)
    stored = sum(len(p.diag[1]) + len(p.offdiag[1]) for p in parts)
    assert stored == a.nnz                            # zeros included


def test_duplicates_summed_and_empty_rows():
    rows = sp.coo_array(([1.0, 2.0, 3.0, 4.0], ([0, 0, 2, 2], [5, 5, 1, 0])), shape=(3, 6))
    part = mpiaij_part(rows, (3, 6), (0, 2), (6, 6))
    np.testing.assert_array_equal(part.garray, [5])
    assert part.offdiag[2].tolist() == [3.0] and part.offdiag[0].tolist() == [0, 1, 1, 1]
    assert part.diag[1].tolist() == [0, 1] and part.diag[2].tolist() == [4.0, 3.0]


def test_validation():
    good = mpiaij_part(sp.csr_array(np.eye(2, 4)), (0, 2), (0, 2), (4, 4))
    fields = dict(good.__dict__)
    with pytest.raises(ustc.UstcError, match="garray"):
        MPIAIJPart(**{**fields, "garray": np.array([1])})                  # an owned column
    with pytest.raises(ustc.UstcError, match="row pointers"):
        MPIAIJPart(**{**fields, "diag": (np.array([0, 1]), good.diag[1], good.diag[2])})
    with pytest.raises(ustc.ShapeError):
        MPIAIJPart(**{**fields, "rows": (0, 5)})
    with pytest.raises(ustc.ShapeError):
        mpiaij_part(sp.csr_array((3, 4)), (0, 2), (0, 2), (4, 4))
    with pytest.raises(ustc.ShapeError):
        mpiaij_parts(sp.csr_array((4, 4)), [0, 2, 4], [0, 4], None, None)


def _same(got, want):
    assert got.rows == want.rows and got.cols == want.cols and got.shape == want.shape
    for x, y in zip((*got.diag, *got.offdiag, got.garray, got.user_rows, got.user_cols, got.user_garray),
                    (*want.diag, *want.offdiag, want.garray, want.user_rows, want.user_cols, want.user_garray)):
        np.testing.assert_array_equal(x, y)


def test_distributed_parts_equal_the_pure_function(rt):
    a = sp.csr_array(random_sparse(14, 14, 0.3, seed=4))
    t = ustc.Tensor.from_package(sp.csr_matrix(a))
    lab = np.array([2, 0, 2, 2, 0, 0, 2, 2, 0, 2, 2, 0, 0, 2])           # part 1 empty, interleaved
    cases = [(ud.RowBlocks(14, bounds=[0, 0, 9, 14]), None),
             (ud.Labels(lab, 3), ud.Labels(lab, 3).perm)]
    for part, perm in cases:
        d = ud.DTensor.from_tensor(t.convert("DCSR"), part)
        bounds = d.rows.bounds
        want = mpiaij_parts(a, bounds, bounds, perm, perm)
        for got, w in zip(d.petsc_parts(), want):
            _same(got, w)
        d.free()
    grids = [(ud.Grid2D(14, 14, 2, 2), None), (ud.Grid2D(14, 14, [0, 0, 14], [0, 9, 9, 14]), None),
             (ud.Grid2D(14, 14, ud.Labels(lab % 2 + 0, 2), ud.Labels(lab % 2 + 0, 2)), ud.Labels(lab % 2, 2).perm)]
    for grid, perm in grids:
        g = ud.GridTensor.from_tensor(t, grid)
        bounds = g.layout.bounds
        parts = g.petsc_parts()
        for got, w in zip(parts, mpiaij_parts(a, bounds, bounds, perm, perm)):
            _same(got, w)
        _check_against_scipy(a, parts, bounds, bounds, np.arange(14) if perm is None else perm,
                             np.arange(14) if perm is None else perm)
        g.free()


def test_rectangular_grid_columns_split_evenly(rt):
    a = sp.csr_array(random_sparse(6, 9, 0.4, seed=5, dtype=np.complex128))
    g = ud.GridTensor.from_tensor(ustc.Tensor.from_package(sp.csr_matrix(a)), ud.Grid2D(6, 9, 1, 3))
    rb, cb = g.layout.bounds, [0, 3, 6, 9]
    for got, w in zip(g.petsc_parts(), mpiaij_parts(a, rb, cb)):
        _same(got, w)
    g.free()


@pytest.mark.skipif(HAVE_PETSC, reason="petsc4py is installed")
def test_grid_and_labels_export_need_petsc4py(rt):
    a = random_sparse(6, 6)
    g = ud.GridTensor.from_tensor(ustc.Tensor.from_package(a), ud.Grid2D(6, 6, 1, 1))
    with pytest.raises(ustc.MissingDependencyError, match=r"ustc\[petsc\]"):
        g.to_petsc()
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), ud.Labels([0, 0, 0, 0, 0, 0], 1))
    with pytest.raises(ustc.MissingDependencyError, match=r"ustc\[petsc\]"):
        d.to_petsc()
