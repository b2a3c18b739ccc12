"""The same block code on MPI: one process per block, started with ``mpiexec`` (the ``mpi``
extra: mpi4py and an MPI library, e.g. the ``mpich`` wheel).

Every process runs the driver script; each builds its own row block and calls the collective
methods together (SPMD, no Dask). The block is a
:class:`~ustc.distributed.worker.BlockWorker` with an
:class:`~ustc.distributed.comm.MPICommunicator` instead of the actor transport, so products
and solves are the very code the Dask block actors run (halo SpMV, all-reduces in rank
order, :mod:`ustc.ops.krylov`'s CG, BiCGSTAB and GMRES)::

    # mpiexec -n 2 python script.py
    A = MPIMatrix.from_loader(lambda r0, r1: a[r0:r1], a.shape)
    x_mine, info = A.solve(b[slice(*A.range)], "cg", rtol=1e-8)

The block's coroutines run on a private event loop in a background thread (every MPI call
is made from it).
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from ..errors import ShapeError, UstcError
from .comm import MPICommunicator
from .dtensor import halo_lists
from .partition import RowBlocks
from .worker import BlockWorker, _as_coo

_KEY = "A"


class MPIMatrix:
    """This process's row block of a matrix split over the ranks of an MPI communicator.
    Build with :meth:`from_loader` (collective); :meth:`matvec`, :meth:`solve` (collective);
    :meth:`close` (or a ``with`` block) stops the event loop."""

    def __init__(self, comm: MPICommunicator, rows: RowBlocks, cols: RowBlocks, shape, dtype):
        self.comm, self.rows, self.cols = comm, rows, cols
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.worker = BlockWorker(comm.rank, comm.size)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="ustc-mpi-block", daemon=True)
        self._thread.start()
        self.worker.loop, self.worker.comm = self.loop, comm
        self.halo_counts = None

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def range(self) -> tuple[int, int]:
        """The positions of the rows (and, for a square matrix, the vector entries) this process
        owns: its rows themselves for row blocks; see :attr:`members` for labels."""
        return self.rows.range(self.rank)

    @property
    def members(self) -> np.ndarray:
        """The global rows this process owns, ascending: ``b[m.members]`` is its slice of ``b``,
        and :meth:`solve` / :meth:`matvec` return its rows in that order (for row blocks
        ``arange(*range)``)."""
        return self.rows.members(self.rank)

    @property
    def col_members(self) -> np.ndarray:
        """The global entries of ``x`` this process owns for :meth:`matvec`, ascending."""
        return self.cols.members(self.rank)

    @classmethod
    def from_loader(cls, loader, shape, partition=None, *, dtype=None, block_format="CSR", ghost_format=None,
                    comm=None) -> "MPIMatrix":
        """Each process makes its rows with ``loader(row_start, row_stop)`` (as
        :meth:`ustc.distributed.DTensor.from_loader`); ``partition``: RowBlocks, bounds, None
        (an even split over the communicator's size) or :class:`~ustc.distributed.Labels` (one
        part per process; the loader is then called as ``loader(rows)`` with this process's
        global rows, ascending, and a square matrix's columns carry the same labels).
        Collective: the ghost column lists are all-gathered to make the halo plan."""
        comm = comm if isinstance(comm, MPICommunicator) else MPICommunicator(comm)
        m, n = (int(s) for s in shape)
        rows = RowBlocks.of(m, partition if partition is not None else comm.size)
        if rows.parts != comm.size:
            raise ShapeError(f"MPIMatrix: the partition has {rows.parts} blocks for {comm.size} processes")
        cols = rows.like(n)
        r0, r1 = rows.range(comm.rank)
        coo = _as_coo(loader(r0, r1) if rows.perm is None else loader(rows.members(comm.rank)), r1 - r0, n)
        if cols.inverse is not None:            # labelled columns: the block holds positions
            coo = (coo[0], cols.inverse[coo[1]], coo[2])
        out = cls(comm, rows, cols, (m, n), dtype if dtype is not None else coo[2].dtype)
        info = out.worker._set_block(_KEY, (r0, r1), cols.range(comm.rank), coo, block_format, ghost_format)
        send, recv, out.halo_counts = halo_lists(comm.comm.allgather(info["garray"]), cols)
        out.run(out.worker.set_halo(_KEY, send[comm.rank], recv[comm.rank]))
        return out

    def run(self, coro):
        """Run a coroutine on the block's loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def matvec(self, x) -> np.ndarray:
        """This process's rows of ``A @ x`` (:attr:`members`) from its slice ``x`` of the vector
        (``x[col_members]``; collective)."""
        x = np.asarray(x)
        lo, hi = self.cols.range(self.rank)
        if x.shape[:1] != (hi - lo,):
            raise ShapeError(f"MPIMatrix.matvec: rank {self.rank} owns {hi - lo} entries of x, got shape {x.shape}")
        dtype = np.result_type(self.dtype, x.dtype)
        out = np.empty((self.range[1] - self.range[0],) + x.shape[1:], dtype=dtype)
        self.worker._apply(self.worker.blocks[_KEY], x.astype(dtype, copy=False), out)
        return out

    def solve(self, b, method: str = "cg", *, rtol: float = 1e-8, atol: float = 0.0, maxiter=None,
              restart: int = 30, preconditioner=None):
        """Solve ``A x = b`` (collective; ``b``: this process's slice, ``b[members]``): ``(x slice,
        info)``, where
        ``info`` has ``iterations``, ``residual`` (the true ``||b - A x||``), ``bnorm``,
        ``converged``, and what this rank's communicator counted in the loop (``messages``,
        ``bytes``, ``syncs``)."""
        if method not in ("cg", "bicgstab", "gmres") or preconditioner not in (None, "jacobi"):
            raise UstcError(f"MPIMatrix.solve: method cg, bicgstab or gmres and preconditioner None or "
                            f"'jacobi', got {method!r}, {preconditioner!r}")
        if self.shape[0] != self.shape[1]:
            raise ShapeError(f"MPIMatrix.solve: needs a square matrix, got {self.shape}")
        b = np.asarray(b)
        if b.shape != (self.range[1] - self.range[0],):
            raise ShapeError(f"MPIMatrix.solve: rank {self.rank} owns {self.range[1] - self.range[0]} rows, "
                             f"b has shape {b.shape}")
        dtype = np.result_type(self.dtype, b.dtype, np.float32)
        n = self.shape[0]
        self.worker.vecs["b"] = b
        stats = self.worker._solve(_KEY, "b", "x", None, method, dtype, rtol, atol,
                                   10 * n if maxiter is None else int(maxiter), restart,
                                   preconditioner == "jacobi", n)
        stats["converged"] = stats["residual"] <= max(rtol * stats["bnorm"], atol)
        return self.worker.vecs.pop("x"), stats

    def close(self) -> None:
        """Stop the block's event loop (the communicator stays usable by the caller)."""
        if self._thread.is_alive():
            self.comm.flush()
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join()
            self.loop.close()
        self.worker._pool.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
