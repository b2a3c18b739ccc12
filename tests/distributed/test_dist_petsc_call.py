"""``to_petsc``'s call into petsc4py, checked against a stand-in that holds petsc4py's documented
contract (petsc4py cannot be installed here): ``Mat().createAIJWithArrays(size, csr, comm=)`` with
``size = ((m_local, M), (n_local, N))`` and, for a split ``csr = ((i, j, v), (oi, oj, ov))``,
PETSc's ``MatCreateMPIAIJWithSplitArrays``: the diagonal block's columns local to the rank's column
range, the off-diagonal block's global and outside it. The stand-in rebuilds the global matrix
from every rank's arrays as PETSc reads them; it must equal the user's matrix."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc.distributed.petsc import to_petsc
from ustc.distributed.petsclayout import mpiaij_parts


class _Comm:
    def __init__(self, size, rank):
        self.size, self.rank = size, rank

    def getSize(self):  # noqa: N802 - petsc4py's name
        return self.size

    def getRank(self):  # noqa: N802
        return self.rank


class _Mat:
    """What one rank's createAIJWithArrays receives, read as PETSc reads it."""

    def createAIJWithArrays(self, size, csr, bsize=None, comm=None):  # noqa: N802
        (m, big_m), (n, big_n) = size
        assert all(isinstance(k, (int, np.integer)) for k in (m, big_m, n, big_n))
        (i, j, v), (oi, oj, ov) = csr
        cstart = sum(self.col_sizes[:comm.getRank()])
        assert len(i) == len(oi) == m + 1 and i[0] == oi[0] == 0
        assert np.all((0 <= j) & (j < n)), "diagonal block: local columns"
        assert np.all((oj < cstart) | (oj >= cstart + n)) and np.all((0 <= oj) & (oj < big_n)), \
            "off-diagonal block: global columns outside the owned range"
        rows = np.repeat(np.arange(m), np.diff(i))
        orows = np.repeat(np.arange(m), np.diff(oi))
        self.block = sp.coo_array((np.concatenate([v, ov]), (np.concatenate([rows, orows]),
                                   np.concatenate([j + cstart, oj]))), shape=(m, big_n)).tocsr()
        self.shape, self.comm = (big_m, big_n), comm
        return self


class _Split:
    """A matrix split over ranks (what DTensor / GridTensor give to to_petsc: petsc_part(rank))."""

    def __init__(self, a, row_bounds, col_bounds):
        self.parts = mpiaij_parts(a, row_bounds, col_bounds)

    def petsc_part(self, rank):
        return self.parts[rank]


@pytest.fixture
def fake_petsc(monkeypatch):
    petsc = types.SimpleNamespace(COMM_WORLD=_Comm(1, 0), Mat=_Mat)
    module = types.ModuleType("petsc4py")
    module.PETSc = petsc
    monkeypatch.setitem(sys.modules, "petsc4py", module)
    monkeypatch.setitem(sys.modules, "petsc4py.PETSc", petsc)
    return petsc


@pytest.mark.parametrize("shape, row_bounds, col_bounds, dtype", [
    ((9, 9), [0, 4, 4, 9], [0, 3, 6, 9], np.float64),     # an empty rank
    ((7, 11), [0, 2, 7], [0, 5, 11], np.complex128),       # rectangular
    ((5, 5), [0, 5], [0, 5], np.float32),                  # one process
])
def test_every_rank_hands_petsc_its_rows_and_together_they_are_the_matrix(fake_petsc, shape, row_bounds,
                                                                          col_bounds, dtype):
    a = sp.random(*shape, density=0.4, random_state=3, format="csr").astype(dtype)
    a = a + sp.eye(*shape, format="csr", dtype=dtype)
    split = _Split(a, row_bounds, col_bounds)
    _Mat.col_sizes = list(np.diff(col_bounds))
    blocks = []
    for rank in range(len(row_bounds) - 1):
        mat = to_petsc(split, len(row_bounds) - 1, comm=_Comm(len(row_bounds) - 1, rank))
        assert mat.shape == shape and mat.comm.getRank() == rank
        blocks.append(mat.block)
    np.testing.assert_array_equal(sp.vstack(blocks).toarray(), a.toarray())


def test_a_communicator_of_another_size_is_refused(fake_petsc):
    a = sp.eye(4, format="csr")
    split = _Split(a, [0, 2, 4], [0, 2, 4])
    with pytest.raises(ustc.UstcError, match="3 processes, the matrix 2 blocks"):
        to_petsc(split, 2, comm=_Comm(3, 0))
    with pytest.raises(ustc.UstcError, match="1 processes, the matrix 2 blocks"):
        to_petsc(split, 2)  # COMM_WORLD of one process
