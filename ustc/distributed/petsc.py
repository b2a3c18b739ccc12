"""Export of a row-partitioned :class:`DTensor` to PETSc (MPIAIJ), through petsc4py.

A block's local/ghost split is PETSc's own MPIAIJ layout: the "diagonal" part holds the
columns the process owns (local indices), the "off-diagonal" part the others. A
:class:`PetscSplit` is what one process passes to ``petsc4py.PETSc.Mat.createAIJWithArrays``
for its rows: ``sizes`` ``((m_local, M), (n_local, N))`` and ``csr``, the pair of CSR
triples ``((i, j, v), (oi, oj, ov))`` — the diagonal part with local column indices, the
off-diagonal part with global ones (the block's ghost columns expanded through ``garray``),
column indices sorted within each row.

:meth:`DTensor.to_petsc` builds the matrix in an MPI run of as many processes as the matrix
has blocks (process ``r`` fetches block ``r``'s split from its actor), or in one process for a
one-block matrix. Without petsc4py it raises :class:`ustc.MissingDependencyError` naming the
``petsc`` extra.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import MissingDependencyError, UstcError


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


def petsc():
    """``petsc4py.PETSc``, or :class:`ustc.MissingDependencyError` naming the ``petsc`` extra."""
    try:
        from petsc4py import PETSc
    except Exception as exc:  # noqa: BLE001 - ImportError, or petsc4py without a working PETSc
        raise MissingDependencyError(
            "to_petsc needs petsc4py (and PETSc): pip install 'ustc[petsc]' or install petsc4py "
            f"with your MPI ({exc})") from exc
    return PETSc


def to_petsc(a, comm=None):
    """The PETSc MPIAIJ matrix of the DTensor ``a`` on ``comm`` (default ``PETSc.COMM_WORLD``),
    collective: with as many processes as ``a`` has blocks, process ``r`` passes block ``r``'s
    split; with one process, ``a`` must have one block."""
    PETSc = petsc()
    comm = comm if comm is not None else PETSc.COMM_WORLD
    size, rank = comm.getSize(), comm.getRank()
    if size != a.rows.parts:
        raise UstcError(f"to_petsc: the communicator has {size} processes, the matrix {a.rows.parts} blocks "
                        f"(one process per block)")
    split = a.petsc_split(rank)
    return PETSc.Mat().createAIJWithArrays(split.sizes, split.csr, comm=comm)
