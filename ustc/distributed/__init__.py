"""``ustc.distributed``: partitioned tensors on Dask.distributed, halo-exchange products and
SPMD Krylov solves (optional extra ``distributed``; ``mpi`` for the mpi4py transport).

    >>> import ustc, ustc.distributed as ud                        # doctest: +SKIP
    >>> A = ud.DTensor.from_tensor(ustc.Tensor.from_package(poisson), 2)
    >>> x, info = ud.solve(A, b, "cg", return_info=True)
    >>> info.scheduler_transitions                                  # no scheduler work
    0

See ``docs/distributed.md``.
"""

from __future__ import annotations

from ..errors import DistributedError, require
from .checkpoint import Checkpoint
from .comm import ActorCommunicator, Communicator, MPICommunicator
from .dtensor import DTensor, DVector, Matmul, matmul
from .grid import GridMatmul, GridPlan, GridTensor
from .mpiblocks import MPIMatrix
from .partition import Grid2D, Labels, RowBlocks
from .petsc import PetscSplit
from .runtime import Runtime, connect, runtime, shutdown
from .solve import SolveResult, solve
from .spgemm import FetchPlan, SpGEMM

__all__ = ["ActorCommunicator", "Checkpoint", "Communicator", "DTensor", "DVector", "DistributedError",
           "FetchPlan", "Grid2D", "GridMatmul", "GridPlan", "GridTensor", "Labels", "MPICommunicator", "MPIMatrix",
           "Matmul", "PetscSplit", "RowBlocks", "Runtime", "SolveResult", "SpGEMM", "connect", "map", "matmul",
           "runtime", "shutdown", "solve"]


def _apply_chunk(fn, items, shared):
    if shared is _NOTHING:
        return [fn(item) for item in items]
    return [fn(item, shared) for item in items]


class _Nothing:
    def __reduce__(self):
        return (_nothing, ())


def _nothing():
    return _NOTHING


_NOTHING = _Nothing()


def map(fn, items, *, shared=_NOTHING, chunks_per_worker: int = 4, runtime=None) -> list:  # noqa: A001
    """``[fn(item, shared) for item in items]`` (``fn(item)`` without ``shared``) on the workers,
    in order. ``shared`` (a matrix, a model, ...) is sent once per worker (scattered with
    ``broadcast=True``) and reused by every item there; items travel in ``chunks_per_worker``
    chunks per worker, so the scheduler sees a few tasks, not one per item."""
    from .runtime import runtime as default

    rt = runtime if runtime is not None else default()
    items = list(items)
    if not items:
        return []
    client = rt.client
    nworkers = max(1, len(rt.workers))
    nchunks = max(1, min(len(items), nworkers * int(chunks_per_worker)))
    bounds = [len(items) * c // nchunks for c in range(nchunks + 1)]
    shared_ref = client.scatter(shared, broadcast=True, hash=False) if shared is not _NOTHING else _NOTHING
    futures = [client.submit(_apply_chunk, fn, items[bounds[c]:bounds[c + 1]], shared_ref, pure=False)
               for c in range(nchunks)]
    try:
        out = []
        for chunk in client.gather(futures):
            out.extend(chunk)
        return out
    finally:
        client.cancel(futures)
        if shared_ref is not _NOTHING:
            client.cancel([shared_ref])
