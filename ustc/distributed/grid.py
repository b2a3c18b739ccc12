"""2-D partitioned matrices (:class:`GridTensor` over a :class:`Grid2D`) and their products.

For power-law graphs a row partition leaves every block touching nearly every column, so
each 1-D SpMV moves about ``P n`` entries. A ``pr x pc`` grid bounds a block's columns to
``n / pc``: ``y = A x`` all-gathers ``x[cols_j]`` along each process column and
reduce-scatters the partial ``y[rows_i]`` along each process row
(:mod:`ustc.distributed.gridblock`). :meth:`GridTensor.plan_info` counts both exactly;
the tests check the bytes one product sends against it.

    >>> G = ud.GridTensor.from_tensor(A, ud.Grid2D(m, n, 2, 3))    # doctest: +SKIP
    >>> y = G @ x                                                    # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError, UstcError
from .gridhalo import SparsePlan, layout, x_layout
from .partition import Grid2D, RowBlocks
from .petsc import grid_part, to_petsc
from .runtime import runtime as _default_runtime


@dataclass(frozen=True, eq=False)
class GridScattered:
    """Grid blocks cut from a matrix the driver holds (SciPy CSR)."""

    csr: object
    fmt: object

    def call(self, name: str, grid: Grid2D, rank: int) -> tuple:
        i, j = grid.coords(rank)
        (r0, r1), (c0, c1) = grid.rows.range(i), grid.cols.range(j)
        blk = self.csr[r0:r1, c0:c1].tocoo()
        return "set_grid_block", (name, grid.shape, (r0, r1), (c0, c1), (blk.row, blk.col, blk.data), self.fmt)


@dataclass(frozen=True, eq=False)
class GridLoaded:
    """Grid blocks cut on their workers from ``loader(row_start, row_stop)`` (all ``ncols``
    columns), or ``loader(rows)`` with the block row's global rows where the rows are labelled."""

    loader: object
    ncols: int
    fmt: object

    def call(self, name: str, grid: Grid2D, rank: int) -> tuple:
        i, j = grid.coords(rank)
        index = grid.rows.members(i) if grid.rows.perm is not None else None
        return "load_grid_block", (name, grid.shape, grid.rows.range(i), grid.cols.range(j), self.ncols,
                                   self.loader, self.fmt, index, grid.cols.inverse)


@dataclass(frozen=True)
class GridPlan:
    """What one grid product with ``k`` right-hand sides of ``itemsize`` bytes sends: every rank
    sends its ``x`` part to the ``pr - 1`` others of its process column and its partial ``y``
    parts to the ``pc - 1`` others of its process row (empty parts included)."""

    grid: tuple
    x_entries: int
    y_entries: int
    messages: int
    itemsize: int
    k: int = 1

    @property
    def bytes(self) -> int:
        return (self.x_entries + self.y_entries) * self.k * self.itemsize

    @classmethod
    def of(cls, grid: Grid2D, itemsize: int, k: int = 1) -> "GridPlan":
        pr, pc = grid.shape
        x = sum((hi - lo) * (pr - 1) for lo, hi in map(grid.x_range, range(grid.parts)))
        y = 0
        for rank in range(grid.parts):
            i, _ = grid.coords(rank)
            lo, hi = grid.y_range(rank)
            y += (grid.rows.range(i)[1] - grid.rows.range(i)[0]) - (hi - lo)
        return cls(grid.shape, int(x), int(y), grid.parts * (pr - 1 + pc - 1), int(itemsize), int(k))


class GridTensor:
    """A matrix split over a :class:`Grid2D`: rank ``i * pc + j`` holds ``A[rows_i, cols_j]`` as
    one ustc Tensor in the format asked for (or per block: ``(rank, shape) -> format``)."""

    def __init__(self, rt, grid: Grid2D, name: str, dtype, infos, recipe=None):
        self.runtime, self.grid, self.name = rt, grid, name
        self.shape, self.dtype = (grid.m, grid.n), np.dtype(dtype)
        self.blocks = list(infos)
        self.recipe = recipe
        self.lost = ()
        self._sparse = None
        rt.group(grid.parts).members[name] = self

    @property
    def group(self):
        from .dtensor import _checked

        return _checked(self, self.runtime.group(self.grid.parts))

    @classmethod
    def _build(cls, rt, grid, dtype, recipe) -> "GridTensor":
        name = rt.name("grid")
        calls = [recipe.call(name, grid, r) for r in range(grid.parts)]
        infos = rt.group(grid.parts).call(calls[0][0], [c[1] for c in calls])
        return cls(rt, grid, name, dtype, infos, recipe)

    @classmethod
    def from_tensor(cls, a, grid: Grid2D, *, block_format=None, runtime=None) -> "GridTensor":
        """Scatter the matrix ``a`` (ustc Tensor, SciPy or dense) over ``grid``; ``block_format``
        default: ``a``'s format."""
        import scipy.sparse as sp

        from ..tensor.tensor import Tensor

        rt = runtime if runtime is not None else _default_runtime()
        t = a if isinstance(a, Tensor) else (Tensor.from_dense(a, "CSR") if isinstance(a, np.ndarray)
                                             else Tensor.from_package(a))
        if t.ndim != 2 or tuple(t.shape) != (grid.m, grid.n):
            raise ShapeError(f"GridTensor: the grid covers {grid.m}x{grid.n}, the matrix is {tuple(t.shape)}")
        (r, c), v = t.entries()
        csr = sp.csr_array((v, (r, c)), shape=t.shape)
        csr.sum_duplicates()
        if grid.rows.perm is not None:         # labels: the blocks hold positions
            csr = csr[grid.rows.perm]
        if grid.cols.perm is not None:
            csr = csr[:, grid.cols.perm]
        fmt = block_format if block_format is not None else t.format
        return cls._build(rt, grid, t.dtype, GridScattered(csr, fmt))

    @classmethod
    def from_loader(cls, loader, grid: Grid2D, *, dtype=np.float64, block_format="CSR",
                    runtime=None) -> "GridTensor":
        """Each block cut on its worker from ``loader(row_start, row_stop)`` (as
        :meth:`DTensor.from_loader`: the rows over all columns; ``loader(rows)`` with the global
        rows, ascending, of a block row of labelled rows)."""
        rt = runtime if runtime is not None else _default_runtime()
        return cls._build(rt, grid, dtype, GridLoaded(loader, grid.n, block_format))

    def _rebuild(self, ranks) -> None:
        """After a repair: the lost blocks made again by the recipe."""
        if self.recipe is None:
            self.lost = tuple(ranks)
            return
        calls = {r: self.recipe.call(self.name, self.grid, r) for r in ranks}
        infos = self.runtime.groups[self.grid.parts].call(calls[ranks[0]][0], {r: c[1] for r, c in calls.items()},
                                                          ranks=ranks)
        for r, info in zip(ranks, infos):
            self.blocks[r] = info
        if self._sparse is not None:          # the same blocks give the same lists
            self.runtime.groups[self.grid.parts].call(
                "set_grid_halo", {r: (self.name, self._sparse.halos[r]) for r in ranks}, ranks=ranks)

    @property
    def layout(self) -> RowBlocks:
        """The vector layout of solves on this matrix (:func:`ustc.distributed.gridhalo.layout`)."""
        return layout(self.grid)

    @property
    def x_layout(self) -> tuple:
        """``(blocks, ranks)``: the ``x`` layout of the sparse exchange
        (:func:`ustc.distributed.gridhalo.x_layout`; :attr:`layout` itself for a square matrix)."""
        return x_layout(self.grid)

    def sparse_plan(self) -> SparsePlan:
        """The sparsity-aware exchange of products and solves (made and sent to the blocks once):
        only the ``x`` entries each block's stored columns touch and the partial rows its stored
        rows touch move. ``A x`` is laid out as :attr:`layout`, ``x`` as :attr:`x_layout` (the same
        for a square matrix, as a solve needs; by process columns for a rectangular one)."""
        if self._sparse is None:
            plan = SparsePlan.of(self.grid, self.blocks, self.layout, self.x_layout)
            self.group.call("set_grid_halo", [(self.name, h) for h in plan.halos])
            self._sparse = plan
        return self._sparse

    def sparse_info(self, k: int = 1, dtype=None) -> dict:
        """What one product of the sparse exchange moves between distinct ranks (``k`` columns):
        ``messages``, ``x_entries``, ``y_entries``, ``bytes``."""
        plan = self.sparse_plan()
        itemsize = np.dtype(dtype if dtype is not None else self.dtype).itemsize
        return {"blocks": self.grid.parts, "grid": self.grid.shape, "messages": plan.messages,
                "x_entries": plan.x_entries, "y_entries": plan.y_entries, "bytes": plan.bytes(itemsize, k)}

    def plan_info(self, k: int = 1, dtype=None) -> dict:
        """What one product with ``k`` right-hand sides sends (:class:`GridPlan`), and per block
        its stored entries and format."""
        plan = GridPlan.of(self.grid, np.dtype(dtype if dtype is not None else self.dtype).itemsize, k)
        return {"blocks": self.grid.parts, "grid": plan.grid, "messages": plan.messages, "bytes": plan.bytes,
                "x_entries": plan.x_entries, "y_entries": plan.y_entries,
                "nse": [b["nse"] for b in self.blocks], "formats": [b["format"] for b in self.blocks]}

    def gather(self, tensor_format="CSR"):
        """The whole matrix on the driver, as a ustc Tensor."""
        from ..tensor.tensor import Tensor

        parts = self.group.call("grid_entries", [(self.name,)] * self.grid.parts)
        rows, cols, vals = [], [], []
        for rank, (r, c, v) in enumerate(parts):
            i, j = self.grid.coords(rank)
            rows.append(self.grid.rows.index(r + self.grid.rows.range(i)[0]))
            cols.append(self.grid.cols.index(c + self.grid.cols.range(j)[0]))
            vals.append(v)
        return Tensor.from_coo((np.concatenate(rows), np.concatenate(cols)),
                               np.concatenate(vals).astype(self.dtype, copy=False), self.shape, tensor_format)

    def petsc_part(self, rank: int):
        """What PETSc's MatMPIAIJ holds on MPI rank ``rank``: the rows it owns in :attr:`layout`,
        fetched from the blocks of its block row
        (:func:`ustc.distributed.petsc.grid_part`, :class:`~ustc.distributed.petsclayout.MPIAIJPart`)."""
        return grid_part(self, rank)

    def petsc_parts(self) -> list:
        """Every rank's :meth:`petsc_part` (the whole matrix on the driver)."""
        return [grid_part(self, r) for r in range(self.grid.parts)]

    def to_petsc(self, comm=None):
        """A PETSc MPIAIJ matrix (petsc4py), one process per grid rank, process ``r`` passing
        :meth:`petsc_part` ``(r)`` (:func:`ustc.distributed.petsc.to_petsc`)."""
        return to_petsc(self, self.grid.parts, comm)

    def __matmul__(self, x):
        return GridMatmul(self, x).execute()

    def free(self) -> None:
        group = self.group
        group.members.pop(self.name, None)
        group.call("drop", [(self.name,)] * self.grid.parts)


SPARSE = "sparse"
# GridMatmul's exchanges and the block method each runs ("dense": whole column ranges of x)
EXCHANGE_METHODS = {"dense": "grid_matmul", SPARSE: "grid_sparse_matmul"}


class GridMatmul:
    """``y = A @ x`` for a :class:`GridTensor` and a NumPy ``x`` (vector, or ``(n, k)``: SpMM).
    :meth:`plan` scatters ``x`` in the grid's layout and plans each block's product;
    :meth:`execute` runs the exchange and the block products and returns ``y`` on the driver.
    ``exchange="dense"`` (default): column all-gathers of ``x``, row reduce-scatters of the
    partial ``y`` (:class:`GridPlan`); ``"sparse"``: only the ``x`` entries each block's columns
    touch and the partial rows it holds move, ``y`` in :attr:`GridTensor.layout` and ``x`` in
    :attr:`GridTensor.x_layout` (:meth:`GridTensor.sparse_plan`; what solves use)."""

    def __init__(self, a: GridTensor, x, exchange: str = "dense"):
        if not isinstance(a, GridTensor):
            raise UstcError("GridMatmul: a must be a GridTensor")
        if exchange not in EXCHANGE_METHODS:
            raise UstcError(f"GridMatmul: exchange must be 'dense' or 'sparse', got {exchange!r}")
        x = np.asarray(x)
        if x.ndim not in (1, 2) or x.shape[0] != a.shape[1]:
            raise ShapeError(f"matmul: a has {a.shape[1]} columns but x has shape {x.shape}")
        self.a, self.x, self.exchange = a, x, exchange
        self.dtype = np.result_type(a.dtype, x.dtype)
        self.xname, self.yname = a.runtime.name("vec"), a.runtime.name("vec")
        self.plan_info = None

    def plan(self) -> dict:
        g, k = self.a.grid, (self.x.shape[1] if self.x.ndim == 2 else 1)
        if self.exchange == SPARSE:
            self.plan_info = self.a.sparse_info(k, self.dtype)
            blocks, ranks = self.a.x_layout
            ranges = [None] * g.parts
            for b, r in enumerate(ranks):
                ranges[r] = blocks.range(b)
        else:
            self.plan_info = self.a.plan_info(k, self.dtype)
            ranges = [g.x_range(r) for r in range(g.parts)]
        x = self.x if g.cols.perm is None else self.x[g.cols.perm]     # labelled columns: positions
        self.a.group.call("set_vec", [(self.xname, x[slice(*ranges[r])].astype(self.dtype))
                                      for r in range(g.parts)])
        self._generation = self.a.group.generation
        return self.plan_info

    def execute(self) -> np.ndarray:
        if self.plan_info is None or self.a.group.generation != self._generation:
            self.plan()                 # first use, or the group was repaired since
        group = self.a.group
        method = EXCHANGE_METHODS[self.exchange]
        group.call(method, [(self.a.name, self.xname, self.yname, self.dtype.str)] * self.a.grid.parts)
        y = np.concatenate(group.call("get_vec", [(self.yname,)] * self.a.grid.parts))    # rows in rank order
        return self.a.grid.rows.to_global(y)

    def counters(self) -> list:
        """Per block: messages, bytes and synchronisations its communicator counted so far."""
        return self.a.group.call("counters")

    def free(self) -> None:
        self.a.group.call("drop", [(self.xname, self.yname)] * self.a.grid.parts)
