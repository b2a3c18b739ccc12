"""to_petsc: the blocks' local/ghost split as PETSc's MPIAIJ split arrays (the workers' MPIAIJPart
s, checked entry by entry and against the pure function), MissingDependencyError naming the extra
without petsc4py, and a one-block export through petsc4py where it is installed."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import scipy.sparse as sp
from dist_helpers import random_sparse

import ustc
import ustc.distributed as ud
from ustc.distributed.petsclayout import mpiaij_parts

HAVE_PETSC = importlib.util.find_spec("petsc4py") is not None


def _rebuild(part) -> np.ndarray:
    """The block's rows from petsc4py's split arrays: diagonal part at the owned columns, the
    off-diagonal part's global columns as given."""
    m, n = part.sizes[0][0], part.shape[1]
    out = np.zeros((m, n), dtype=part.diag[2].dtype)
    for (indptr, indices, data), offset in zip(part.csr, (part.cols[0], 0)):
        rows = np.repeat(np.arange(m), np.diff(indptr))
        np.add.at(out, (rows, indices + offset), data)
    return out


@pytest.mark.parametrize("partition", [1, 3, [0, 0, 9, 20]], ids=str)
def test_worker_parts(rt, partition):
    a = random_sparse(20, 20, 0.25, seed=1, dtype=np.complex128)
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a).convert("DCSR"), partition)
    parts = d.petsc_parts()
    assert len(parts) == d.rows.parts
    bounds = d.rows.bounds
    for b, (part, want) in enumerate(zip(parts, mpiaij_parts(sp.csr_array(a), bounds, bounds))):
        for got, w in zip((*part.diag, *part.offdiag, part.garray, part.user_rows, part.user_garray),
                          (*want.diag, *want.offdiag, want.garray, want.user_rows, want.user_garray)):
            np.testing.assert_array_equal(got, w)
        r0, r1 = d.rows.range(b)
        c0, c1 = d.cols.range(b)
        assert part.sizes == ((r1 - r0, 20), (c1 - c0, 20)) and part.shape == (20, 20)
        np.testing.assert_array_equal(_rebuild(part), a[r0:r1].toarray())
        (i, j, _), (oi, oj, _) = part.csr
        assert len(i) == len(oi) == r1 - r0 + 1
        assert np.all((j >= 0) & (j < c1 - c0))                           # local columns
        assert not np.any((oj >= c0) & (oj < c1))                         # global, outside the range
        np.testing.assert_array_equal(np.unique(oj), part.garray)
        for ptr, idx in ((i, j), (oi, oj)):
            assert all(np.all(np.diff(idx[ptr[k]:ptr[k + 1]]) > 0) for k in range(len(ptr) - 1))
    one = d.petsc_part(len(parts) - 1)
    np.testing.assert_array_equal(one.garray, parts[-1].garray)
    assert not hasattr(ud, "PetscSplit") and not hasattr(d, "petsc_split")      # one MPIAIJ type


@pytest.mark.skipif(HAVE_PETSC, reason="petsc4py is installed")
def test_missing_petsc4py(rt):
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(random_sparse(6, 6)), 1)
    with pytest.raises(ustc.MissingDependencyError, match=r"ustc\[petsc\]"):
        d.to_petsc()


@pytest.mark.skipif(not HAVE_PETSC, reason="needs petsc4py")
def test_to_petsc_one_block(rt):  # pragma: no cover - petsc4py is not installed on the project machine
    from petsc4py import PETSc

    a = random_sparse(12, 12, 0.3, seed=2)
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), 1)
    mat = d.to_petsc(PETSc.COMM_SELF)
    x, y = mat.createVecs()
    x.setArray(np.arange(12.0))
    mat.mult(x, y)
    np.testing.assert_allclose(y.getArray(), a @ np.arange(12.0), rtol=1e-13)
    with pytest.raises(ustc.UstcError, match="one process per block"):
        ud.DTensor.from_tensor(ustc.Tensor.from_package(a), 2).to_petsc(PETSc.COMM_SELF)
