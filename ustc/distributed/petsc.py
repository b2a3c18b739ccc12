"""Export of a distributed matrix to PETSc (MPIAIJ), through petsc4py.

A block's local/ghost split is PETSc's own MPIAIJ layout: the "diagonal" part holds the
columns the process owns (local indices), the "off-diagonal" part the others, compressed to
``garray``. What one process holds is a :class:`~ustc.distributed.petsclayout.MPIAIJPart`:
:func:`row_parts` has the workers of a row-partitioned :class:`DTensor` build theirs from their
own rows, :func:`grid_part` builds a :class:`GridTensor` rank's from the rows it fetches from
its block row (both through :func:`~ustc.distributed.petsclayout.mpiaij_part`: PETSc's
numbering, the positions of labelled blocks, with the user's numbering alongside).

:meth:`DTensor.to_petsc` / :meth:`GridTensor.to_petsc` build the matrix in an MPI run of as many
processes as the matrix has blocks, process ``r`` passing its part's ``sizes`` and ``csr`` to
``petsc4py.PETSc.Mat.createAIJWithArrays``, or in one process for a one-block matrix. Without
petsc4py it raises :class:`ustc.MissingDependencyError` naming the ``petsc`` extra.
"""

from __future__ import annotations

import numpy as np

from ..errors import MissingDependencyError, UstcError
from .gridhalo import square
from .petsclayout import MPIAIJPart, mpiaij_part, rows_csr


def row_parts(a, ranks=None) -> list:
    """Blocks ``ranks`` (default: all) of the row-partitioned DTensor ``a`` as their
    :class:`MPIAIJPart` s, built on the workers from the blocks' rows (labels: positions, with the
    user's numbering added here)."""
    ranks = list(range(a.rows.parts)) if ranks is None else [int(r) for r in ranks]
    got = a.group.call("petsc_part", {r: (a.name, a.shape) for r in ranks}, ranks=ranks)
    return [p.renumbered(a.rows.perm, a.cols.perm) for p in got]


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
    part = mpiaij_part(rows_csr(r, c, v, hi - lo, g.shape[1], g.dtype), (lo, hi), (cb[rank], cb[rank + 1]), g.shape)
    return part.renumbered(grid.rows.perm, grid.cols.perm)


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
