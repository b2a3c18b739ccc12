"""Distributed matrices and vectors over a runtime's block actors, and their products.

A :class:`DTensor` is a 2-D matrix split by rows (:class:`RowBlocks`, or :class:`Labels`: a
part id per row, the blocks then holding the rows in label order); block ``b`` lives
on rank ``b``'s actor as two ustc Tensors (the columns it owns and its compressed ghost
columns) in the format the caller picks, per block if a function picks it. A
:class:`DVector` is a vector (or a dense matrix, for SpMM) split the same way. The halo
plan is made once per matrix: each rank sends exactly the entries of its slice that
other ranks' ghost columns touch, and :attr:`DTensor.plan_info` reports the count.
"""

from __future__ import annotations

import numpy as np

from ..errors import DistributedError, ShapeError, UstcError
from .partition import RowBlocks
from .petsc import row_parts, to_petsc
from .recipe import Loaded, Scattered
from .runtime import runtime as _default_runtime


def _rt(rt):
    return rt if rt is not None else _default_runtime()


def _checked(obj, group):
    """``group`` unless ``obj``'s blocks were lost with no recipe to rebuild them."""
    if obj.lost:
        raise DistributedError(f"{obj.name}: blocks {list(obj.lost)} were lost with their worker and have no "
                               f"recipe to rebuild them (made by a product or a solve): compute it again",
                               lost_blocks=obj.lost)
    return group


def halo_lists(garrays, cols: RowBlocks):
    """``(send, recv, counts)`` of a row-partitioned matrix whose rank ``d`` touches the ghost
    columns ``garrays[d]`` (sorted): rank ``s`` sends rank ``d`` the entries ``garray_d ∩
    cols(s)`` (``send[s][d]``, offsets in ``s``'s slice); rank ``d`` receives them contiguously
    (``recv[d][s] = (lo, hi)`` in its ghost buffer); ``counts[s, d]``: entries per product."""
    P = cols.parts
    send = [dict() for _ in range(P)]
    recv = [dict() for _ in range(P)]
    counts = np.zeros((P, P), dtype=np.int64)
    for d, garray in enumerate(garrays):
        owners = cols.owner(garray)
        for s in np.unique(owners):
            lo, hi = np.searchsorted(owners, [s, s + 1])
            send[s][d] = garray[lo:hi] - cols.bounds[s]
            recv[d][int(s)] = (int(lo), int(hi))
            counts[s, d] = hi - lo
    return send, recv, counts


class DVector:
    """A vector (``shape (n,)``) or dense matrix (``(n, k)``) split by rows over the blocks of
    ``partition``; the slices live on the block actors under ``name``. ``source``: the driver's
    array it was scattered from (its recipe after a worker loss), or None."""

    def __init__(self, rt, partition: RowBlocks, name: str, shape, dtype, source=None):
        self.runtime, self.partition, self.name = rt, partition, name
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.source = source
        self.lost = ()
        rt.group(partition.parts).members[name] = self

    @property
    def group(self):
        return _checked(self, self.runtime.group(self.partition.parts))

    def _rebuild(self, ranks) -> None:
        """After a repair: scatter the lost slices again from ``source``, else mark them lost."""
        if self.source is None:
            self.lost = tuple(ranks)
            return
        args = {r: (self.name, self.partition.take(self.source, r)) for r in ranks}
        self.runtime.groups[self.partition.parts].call("set_vec", args, ranks=ranks)

    @classmethod
    def from_array(cls, x, partition=None, *, runtime=None) -> "DVector":
        """Scatter ``x`` (1-D or 2-D NumPy, global order) from the driver: one slice per block
        (a :class:`Labels` block's rows taken in its order)."""
        rt = _rt(runtime)
        x = np.asarray(x)
        if x.ndim not in (1, 2):
            raise ShapeError(f"DVector: need a vector or a matrix, got shape {x.shape}")
        part = RowBlocks.of(x.shape[0], partition)
        name = rt.name("vec")
        group = rt.group(part.parts)
        group.call("set_vec", [(name, part.take(x, b)) for b in range(part.parts)])
        return cls(rt, part, name, x.shape, x.dtype, source=x)

    def gather(self) -> np.ndarray:
        """The whole vector on the driver, in global order."""
        parts = self.group.call("get_vec", [(self.name,)] * self.partition.parts)
        return self.partition.to_global(np.concatenate(parts)) if parts else np.zeros(self.shape, self.dtype)

    def to_numpy(self) -> np.ndarray:
        return self.gather()

    def free(self) -> None:
        group = self.group
        group.members.pop(self.name, None)
        group.call("drop", [(self.name,)] * self.partition.parts)


class DTensor:
    """A row-partitioned sparse matrix; see the module text. Build with :meth:`from_tensor`
    (scatter from the driver), :meth:`from_loader` (each block made on its worker) or
    :meth:`from_file` (a Matrix Market file each worker reads). ``recipe``: how the blocks were
    made (:mod:`ustc.distributed.recipe`), to rebuild those lost with a worker; None for results."""

    def __init__(self, rt, rows: RowBlocks, cols: RowBlocks, name: str, shape, dtype, infos, recipe=None):
        self.runtime, self.rows, self.cols, self.name = rt, rows, cols, name
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.blocks = list(infos)
        self.recipe = recipe
        self.lost = ()
        self._halo(infos)
        rt.group(rows.parts).members[name] = self

    @property
    def group(self):
        return _checked(self, self.runtime.group(self.rows.parts))

    @classmethod
    def _build(cls, rt, rows, cols, shape, dtype, recipe) -> "DTensor":
        """Every block made by ``recipe`` on its rank."""
        name = rt.name("mat")
        calls = [recipe.call(name, rows, cols, b) for b in range(rows.parts)]
        infos = rt.group(rows.parts).call(calls[0][0], [c[1] for c in calls])
        return cls(rt, rows, cols, name, shape, dtype, infos, recipe)

    def _rebuild(self, ranks) -> None:
        """After a repair: the lost blocks made again by the recipe, their halo lists sent again
        (the same partition gives the same lists); without a recipe, marked lost."""
        if self.recipe is None:
            self.lost = tuple(ranks)
            return
        group = self.runtime.groups[self.rows.parts]
        calls = {r: self.recipe.call(self.name, self.rows, self.cols, r) for r in ranks}
        infos = group.call(calls[ranks[0]][0], {r: c[1] for r, c in calls.items()}, ranks=ranks)
        for r, info in zip(ranks, infos):
            self.blocks[r] = info
        group.call("set_halo", {r: (self.name, self._send[r], self._recv[r]) for r in ranks}, ranks=ranks)

    @property
    def partition(self) -> RowBlocks:
        return self.rows

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_tensor(cls, a, partition=None, *, block_format=None, ghost_format=None, col_partition=None,
                    runtime=None) -> "DTensor":
        """Scatter the 2-D matrix ``a`` (a ustc Tensor, SciPy or dense array) by rows.
        ``block_format``: a format for every block (default: ``a``'s format), or a function
        ``(rank, (rows, cols)) -> format``; ``ghost_format`` likewise for the ghost columns
        (default: the block's). A :class:`Grid2D` partition gives a
        :class:`~ustc.distributed.grid.GridTensor` instead."""
        import scipy.sparse as sp

        from ..tensor.tensor import Tensor

        from .partition import Grid2D

        if isinstance(partition, Grid2D):
            from .grid import GridTensor
            return GridTensor.from_tensor(a, partition, block_format=block_format, runtime=runtime)
        rt = _rt(runtime)
        t = a if isinstance(a, Tensor) else (Tensor.from_dense(a, "CSR") if isinstance(a, np.ndarray)
                                             else Tensor.from_package(a))
        if t.ndim != 2:
            raise ShapeError(f"DTensor: need a matrix, got shape {t.shape}")
        m, n = t.shape
        rows = RowBlocks.of(m, partition)
        cols = RowBlocks.of(n, col_partition) if col_partition is not None else rows.like(n)
        if cols.parts != rows.parts:
            raise ShapeError("DTensor: the row and column partitions need the same number of blocks")
        fmt = block_format if block_format is not None else t.format
        (r, c), v = t.entries()
        csr = sp.csr_array((v, (r, c)), shape=(m, n))
        csr.sum_duplicates()
        if rows.perm is not None:            # the blocks hold positions: rows and columns permuted
            csr = csr[rows.perm]
        if cols.perm is not None:
            csr = csr[:, cols.perm]
        return cls._build(rt, rows, cols, (m, n), t.dtype, Scattered(csr, fmt, ghost_format))

    @classmethod
    def from_loader(cls, loader, shape, partition=None, *, dtype=np.float64, block_format="CSR",
                    ghost_format=None, col_partition=None, runtime=None) -> "DTensor":
        """Each block made on its own worker: ``loader(row_start, row_stop)`` returns those rows
        (a ustc Tensor, SciPy sparse or dense matrix of shape ``(rows, n)``, or ``(rows, cols,
        values)`` with block-local rows, global columns). With a :class:`Labels` row partition
        the loader is called as ``loader(rows)`` with the block's global rows (ascending int64)
        and returns those rows in that order. The driver never holds the matrix."""
        rt = _rt(runtime)
        m, n = (int(s) for s in shape)
        rows = RowBlocks.of(m, partition)
        cols = RowBlocks.of(n, col_partition) if col_partition is not None else rows.like(n)
        return cls._build(rt, rows, cols, (m, n), dtype, Loaded(loader, n, block_format, ghost_format))

    @classmethod
    def from_file(cls, path, partition=None, **options) -> "DTensor":
        """A Matrix Market file read on the workers, each keeping its rows (the driver reads
        only the size line). ``options`` as :meth:`from_loader`."""
        path = str(path)
        with open(path) as f:
            line = f.readline()
            while line.startswith("%") or not line.strip():
                line = f.readline()
        m, n = (int(t) for t in line.split()[:2])
        return cls.from_loader(_MtxRows(path), (m, n), partition, **options)

    # -- halo plan ------------------------------------------------------------------------
    def _halo(self, infos) -> None:
        """Every rank's send and receive lists (:func:`halo_lists`), sent to the blocks."""
        P = self.rows.parts
        send, recv, self.halo_counts = halo_lists([info["garray"] for info in infos], self.cols)
        self._send, self._recv = send, recv
        self.runtime.group(P).call("set_halo", [(self.name, send[b], recv[b]) for b in range(P)])

    def plan_info(self, k: int = 1, dtype=None) -> dict:
        """What one product with a ``k``-column operand sends: ``messages``, ``entries`` and
        ``bytes`` (per execute), per-block ghost counts and nonzeros."""
        dtype = np.dtype(dtype if dtype is not None else self.dtype)
        entries = int(self.halo_counts.sum())
        return {"blocks": self.rows.parts, "messages": int(np.count_nonzero(self.halo_counts)),
                "entries": entries, "bytes": entries * k * dtype.itemsize,
                "ghosts": [len(i["garray"]) for i in self.blocks],
                "nse_local": [i["nse_local"] for i in self.blocks],
                "nse_ghost": [i["nse_ghost"] for i in self.blocks],
                "formats": [i["format"] for i in self.blocks]}

    # -- use ------------------------------------------------------------------------------
    def gather(self, tensor_format="CSR"):
        """The whole matrix on the driver, as a ustc Tensor."""
        from ..tensor.tensor import Tensor

        parts = self.group.call("gather_block", [(self.name,)] * self.rows.parts)
        r = self.rows.index(np.concatenate([p[0] + self.rows.bounds[b] for b, p in enumerate(parts)]))
        c = self.cols.index(np.concatenate([p[1] for p in parts]))
        v = np.concatenate([p[2] for p in parts]).astype(self.dtype, copy=False)
        return Tensor.from_coo((r, c), v, self.shape, tensor_format)

    def petsc_part(self, rank: int):
        """Block ``rank`` as what PETSc's MatMPIAIJ holds on MPI rank ``rank``
        (:class:`~ustc.distributed.petsclayout.MPIAIJPart`, built on its worker; labels: the
        user's numbering too)."""
        return row_parts(self, [rank])[0]

    def petsc_parts(self) -> list:
        """Every block's :meth:`petsc_part` (the whole matrix on the driver)."""
        return row_parts(self)

    def to_petsc(self, comm=None):
        """A PETSc MPIAIJ matrix (petsc4py) from the blocks' :meth:`petsc_part`; collective over
        ``comm``, one process per block (:func:`ustc.distributed.petsc.to_petsc`)."""
        return to_petsc(self, self.rows.parts, comm)

    def __matmul__(self, x):
        if isinstance(x, DTensor):
            from .spgemm import SpGEMM
            return SpGEMM(self, x).execute()
        if isinstance(x, DVector):
            return Matmul(self, x).execute()
        x = np.asarray(x)
        return Matmul(self, DVector.from_array(x, self.cols, runtime=self.runtime)).execute(gather=True)

    def free(self) -> None:
        group = self.group
        group.members.pop(self.name, None)
        group.call("drop", [(self.name,)] * self.rows.parts)


class _MtxRows:
    """A loader reading a ``.mtx`` file once per worker process and returning row ranges."""

    _cache: dict = {}

    def __init__(self, path):
        self.path = path

    def __call__(self, r0, r1=None):
        import scipy.sparse as sp

        from ..tensor.io import from_file

        csr = self._cache.get(self.path)
        if csr is None:
            t = from_file(self.path)
            (r, c), v = t.entries()
            csr = self._cache[self.path] = sp.csr_array((v, (r, c)), shape=t.shape)
        return csr[r0:r1] if r1 is not None else csr[r0]


class Matmul:
    """``y = alpha * A @ x (+ beta * c)`` for a DTensor ``A`` and a DVector ``x`` (a vector:
    SpMV; a dense matrix: SpMM). :meth:`plan` plans a ustc.Matmul per block (local and ghost
    parts); :meth:`execute` does one halo exchange and the block products, with no
    scheduler task, and returns the DVector ``y`` (the same one at every execute).
    ``Matmul(A, B)`` with a DTensor ``B`` is an :class:`~ustc.distributed.spgemm.SpGEMM`."""

    def __new__(cls, a=None, x=None, *args, **kwargs):
        if isinstance(x, DTensor):
            from .spgemm import SpGEMM
            return SpGEMM(a, x, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, a: DTensor, x, c=None, alpha=1, beta=None):
        if not isinstance(a, DTensor):
            raise UstcError("ustc.distributed.Matmul: a must be a DTensor")
        if not isinstance(x, DVector):
            x = DVector.from_array(np.asarray(x), a.cols, runtime=a.runtime)
        if x.shape[0] != a.shape[1]:
            raise ShapeError(f"matmul: a has {a.shape[1]} columns but b has {x.shape[0]} rows")
        if x.partition != a.cols:
            raise ShapeError(f"matmul: x is split as {x.partition}, a's columns as {a.cols}")
        self.a, self.x, self.c = a, x, c
        self.alpha = alpha
        self.beta = (1 if c is not None else 0) if beta is None else beta
        self.dtype = np.result_type(a.dtype, x.dtype, *( [c.dtype] if c is not None else []),
                                    np.asarray(alpha).dtype if alpha != 1 else a.dtype)
        self.y = DVector(a.runtime, a.rows, a.runtime.name("vec"), (a.shape[0],) + x.shape[1:], self.dtype)
        self.plan_info = None

    def plan(self) -> dict:
        infos = self.a.group.call("plan", [(self.a.name, self.dtype.str, self.x.shape[1:])] * self.a.rows.parts)
        k = self.x.shape[1] if len(self.x.shape) > 1 else 1
        self.plan_info = {**self.a.plan_info(k, self.dtype), "blocks_plans": infos}
        return self.plan_info

    def execute(self, *, gather: bool = False):
        if self.plan_info is None:
            self.plan()
        cname = self.c.name if self.c is not None else None
        self.a.group.call("matmul", [(self.a.name, self.x.name, self.y.name, self.dtype.str, self.alpha,
                                      self.beta, cname)] * self.a.rows.parts)
        self.y.lost = ()              # every slice written again (after a repair too)
        return self.y.gather() if gather else self.y

    def counters(self) -> list:
        """Per block: messages, bytes and synchronisations its communicator counted so far."""
        return self.a.group.call("counters")


def matmul(a, b, **options):
    """``a @ b`` for a DTensor ``a``: SpGEMM (a new DTensor) when ``b`` is a DTensor (``options``:
    ``alpha``, ``block_format``, ``ghost_format``), else the SpMV / SpMM ``Matmul`` gathered
    to NumPy (a DVector ``b``: the DVector result; ``options``: ``c``, ``alpha``, ``beta``)."""
    if isinstance(b, DTensor):
        from .spgemm import SpGEMM
        return SpGEMM(a, b, **options).execute()
    if isinstance(b, DVector):
        return Matmul(a, b, **options).execute()
    return Matmul(a, np.asarray(b), **options).execute(gather=True)
