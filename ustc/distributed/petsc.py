"""Export of a row-partitioned :class:`DTensor` to PETSc (MPIAIJ), through petsc4py.

A block's local/ghost split is PETSc's own MPIAIJ layout: the "diagonal" part holds the
columns the process owns (local indices), the "off-diagonal" part the others. A
:class:`PetscSplit` is what one process passes to ``petsc4py.PETSc.Mat.createAIJWithArrays``
for its rows: ``sizes`` ``((m_local, M), (n_local, N))`` and ``csr``, the pair of CSR
triples ``((i, j, v), (oi, oj, ov))`` — the diagonal part with local column indices, the
off-diagonal part with global ones (the block's ghost columns expanded through ``garray``),
column indices sorted within each row.

:meth:`DTensor.to_petsc` / :meth:`GridTensor.to_petsc` build the matrix in an MPI run of as many
processes as the matrix has blocks, process ``r`` passing its
:class:`~ustc.distributed.petsclayout.MPIAIJPart` (:func:`row_part`, :func:`grid_part`: PETSc's
numbering, the positions of labelled blocks, with the user's numbering alongside), or in one
process for a one-block matrix. Without petsc4py it raises :class:`ustc.MissingDependencyError`
naming the ``petsc`` extra.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import MissingDependencyError, UstcError
from .gridhalo import square
from .petsclayout import MPIAIJPart, mpiaij_part


@dataclass(frozen=True, eq=False)
class PetscSplit:
    """One block's rows in PETSc's MPIAIJ split: ``rows`` / ``cols`` the global ranges it owns,
    ``shape`` the global ``(M, N)``, ``diag`` ``(i, j, v)`` (local columns), ``offdiag``
    ``(oi, oj, ov)`` (global columns), ``garray`` the sorted ghost columns."""

    rows: tuple
    cols: tuple
    shape: tuple
    diag: tuple
    offdiag: tuple
    garray: np.ndarray

    @property
    def sizes(self) -> tuple:
        """``((m_local, M), (n_local, N))`` as petsc4py's ``size`` argument."""
        return ((self.rows[1] - self.rows[0], self.shape[0]), (self.cols[1] - self.cols[0], self.shape[1]))

    @property
    def csr(self) -> tuple:
        """``((i, j, v), (oi, oj, ov))`` as petsc4py's ``csr`` argument (split arrays)."""
        return self.diag, self.offdiag


def _csr(tensor, nrows: int, ncols: int, dtype, columns=None) -> tuple:
    """``(indptr, indices, data)`` of ``tensor`` (None: no entries), columns mapped through
    ``columns`` when given, sorted within rows, stored zeros kept (PETSc keeps them too)."""
    import scipy.sparse as sp

    if tensor is None:
        return np.zeros(nrows + 1, np.int64), np.zeros(0, np.int64), np.zeros(0, dtype)
    (r, c), v = tensor.entries()
    c = np.asarray(c, np.int64)
    if columns is not None:
        c = columns[c]
    m = sp.csr_array((np.asarray(v, dtype), (np.asarray(r, np.int64), c)), shape=(nrows, ncols))
    m.sum_duplicates()
    return m.indptr.astype(np.int64), m.indices.astype(np.int64), m.data


def split_of(block, shape) -> PetscSplit:
    """The :class:`PetscSplit` of a block actor's row block (see the module text)."""
    diag = _csr(block.local, block.nrows, block.ncols, block.dtype)
    off = _csr(block.ghost, block.nrows, int(shape[1]), block.dtype, columns=block.garray)
    return PetscSplit(tuple(block.rows), tuple(block.cols), tuple(shape), diag, off, block.garray)


def _rows_csr(r, c, v, nrows: int, ncols: int, dtype):
    import scipy.sparse as sp

    return sp.csr_array((np.asarray(v, dtype), (np.asarray(r, np.int64), np.asarray(c, np.int64))),
                        shape=(nrows, ncols))


def _perm(part, n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64) if part.perm is None else np.asarray(part.perm, np.int64)


def row_part(a, rank: int) -> MPIAIJPart:
    """Block ``rank`` of the row-partitioned DTensor ``a`` as its :class:`MPIAIJPart` (its rows
    and its column block's range; labels: positions, with the user's numbering)."""
    rank = int(rank)
    r, c, v = a.group.call("gather_block", {rank: (a.name,)}, ranks=[rank])[0]
    (r0, r1), cols = a.rows.range(rank), a.cols.range(rank)
    rp, cp = _perm(a.rows, a.shape[0]), _perm(a.cols, a.shape[1])
    rows = _rows_csr(r, c, v, r1 - r0, a.shape[1], a.dtype)
    return mpiaij_part(rows, (r0, r1), cols, a.shape, rp[r0:r1], cp[cols[0]:cols[1]], cp)


def grid_col_bounds(g) -> np.ndarray:
    """PETSc column ownership of a grid export: the solve layout for a square grid (``x`` and
    ``A x`` alike), an even split of the columns over the ranks otherwise (PETSC_DECIDE's)."""
    if square(g.grid):
        return np.asarray(g.layout.bounds, np.int64)
    p, n = g.grid.parts, g.shape[1]
    return np.asarray([n * k // p for k in range(p + 1)], np.int64)


def grid_part(g, rank: int) -> MPIAIJPart:
    """Rank ``rank`` of the GridTensor ``g`` as the :class:`MPIAIJPart` of the rows it owns in
    the solve layout (part ``j`` of block row ``i``), fetched from the blocks of its block row."""
    rank = int(rank)
    grid = g.grid
    i = grid.coords(rank)[0]
    lo, hi = g.layout.range(rank)
    base = grid.rows.range(i)[0]
    pc = grid.shape[1]
    ranks = [i * pc + j for j in range(pc)]
    got = g.group.call("grid_rows", {q: (g.name, lo - base, hi - base) for q in ranks}, ranks=ranks)
    r = np.concatenate([p[0] for p in got])
    c = np.concatenate([p[1] + grid.cols.range(j)[0] for j, p in enumerate(got)])
    v = np.concatenate([p[2] for p in got])
    cb = grid_col_bounds(g)
    rp, cp = _perm(grid.rows, g.shape[0]), _perm(grid.cols, g.shape[1])
    return mpiaij_part(_rows_csr(r, c, v, hi - lo, g.shape[1], g.dtype), (lo, hi), (cb[rank], cb[rank + 1]),
                       g.shape, rp[lo:hi], cp[cb[rank]:cb[rank + 1]], cp)


def petsc():
    """``petsc4py.PETSc``, or :class:`ustc.MissingDependencyError` naming the ``petsc`` extra."""
    try:
        from petsc4py import PETSc
    except Exception as exc:  # noqa: BLE001 - ImportError, or petsc4py without a working PETSc
        raise MissingDependencyError(
            "to_petsc needs petsc4py (and PETSc): pip install 'ustc[petsc]' or install petsc4py "
            f"with your MPI ({exc})") from exc
    return PETSc


def to_petsc(a, parts: int, comm=None):
    """The PETSc MPIAIJ matrix of ``a`` (a DTensor or GridTensor of ``parts`` blocks) on ``comm``
    (default ``PETSc.COMM_WORLD``), collective: with as many processes as ``a`` has blocks,
    process ``r`` passes ``a.petsc_part(r)`` (:class:`MPIAIJPart`, PETSc's numbering: positions
    for labels); with one process, ``a`` must have one block."""
    PETSc = petsc()
    comm = comm if comm is not None else PETSc.COMM_WORLD
    size, rank = comm.getSize(), comm.getRank()
    if size != parts:
        raise UstcError(f"to_petsc: the communicator has {size} processes, the matrix {parts} blocks "
                        f"(one process per block)")
    part = a.petsc_part(rank)
    return PETSc.Mat().createAIJWithArrays(part.sizes, part.csr, comm=comm)
