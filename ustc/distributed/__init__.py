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

from ..errors import DistributedError
from .batch import map  # noqa: A004 - ud.map, the batched builtin's distributed twin
from .checkpoint import Checkpoint
from .comm import ActorCommunicator, Communicator, MPICommunicator
from .dtensor import DTensor, DVector, Matmul, matmul
from .grid import GridMatmul, GridPlan, GridTensor
from .mpiblocks import MPIMatrix
from .partition import Grid2D, Labels, RowBlocks
from .petsclayout import MPIAIJPart, mpiaij_part, mpiaij_parts
from .runtime import Runtime, connect, runtime, shutdown
from .solve import SolveResult, solve
from .spgemm import FetchPlan, SpGEMM

__all__ = ["ActorCommunicator", "Checkpoint", "Communicator", "DTensor", "DVector", "DistributedError",
           "FetchPlan", "Grid2D", "GridMatmul", "GridPlan", "GridTensor", "Labels", "MPIAIJPart", "MPICommunicator",
           "MPIMatrix", "Matmul", "RowBlocks", "Runtime", "SolveResult", "SpGEMM", "connect", "map",
           "matmul", "mpiaij_part", "mpiaij_parts", "runtime", "shutdown", "solve"]
