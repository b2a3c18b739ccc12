"""Block-side pieces of the 2-D (:class:`~ustc.distributed.partition.Grid2D`) products.

Rank ``(i, j)`` of a ``pr x pc`` grid holds ``A[rows_i, cols_j]`` as one ustc Tensor, its
part of ``x`` (part ``i`` of ``cols_j``) and of ``y`` (part ``j`` of ``rows_i``). A product
``y = A x``: the process column ``j`` all-gathers ``x[cols_j]`` (its column communicator),
each block multiplies with its planned ``ustc.Matmul``, and the process row ``i``
reduce-scatters the partial ``y[rows_i]`` (its row communicator; partial sums added in
column order, so the result does not depend on message timing).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ops.vectors import HOST
from .comm import SubCommunicator


def split(lo: int, hi: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous, near-even ranges covering ``lo:hi``."""
    span = hi - lo
    return [(lo + span * k // parts, lo + span * (k + 1) // parts) for k in range(parts)]


@dataclass(eq=False)
class GridBlock:
    """One rank's block ``A[rows, cols]`` (``tensor``, None when it stores nothing), the grid
    shape and its coordinates; ``products``: planned Matmuls by (dtype, trailing shape)."""

    rows: tuple
    cols: tuple
    grid: tuple
    coords: tuple
    tensor: object
    dtype: np.dtype
    products: dict = field(default_factory=dict)
    rows_used: np.ndarray = None        # block-local rows / columns its stored entries touch
    cols_used: np.ndarray = None
    diag: np.ndarray = None             # A[r, r] for the block's rows (0 where not in the block)
    halo: "SparseHalo" = None           # the sparsity-aware exchange (:meth:`GridBlocks.set_grid_halo`)

    def nbytes(self) -> int:
        return self.tensor.nbytes if self.tensor is not None else 0


@dataclass(frozen=True, eq=False)
class SparseHalo:
    """One rank's part of a grid's sparsity-aware exchange over a vector layout in which it owns
    ``own``: ``xsend[dst]`` the owned offsets of ``x`` rank ``dst``'s block columns touch,
    ``xrecv[src] = (lo, hi)`` where ``src``'s values land among ``cols_used``; ``ysend[dst]``
    the block-local rows of the partial ``y`` whose rows ``dst`` owns, ``yrecv[src]`` the owned
    offsets ``src``'s partial rows add to. Pairs with nothing to move are absent; a rank's pair
    with itself is a copy, not a message."""

    own: tuple
    xsend: dict
    xrecv: dict
    ysend: dict
    yrecv: dict

    @property
    def n(self) -> int:
        return self.own[1] - self.own[0]


class GridBlocks:
    """The block actor's grid methods (mixed into :class:`~ustc.distributed.worker.BlockWorker`;
    they use its ``blocks``, ``vecs``, ``comm``, ``rank``, ``_run`` and ``_wait``)."""

    async def set_grid_block(self, key, grid, rows, cols, coo, fmt) -> dict:
        """Keep ``coo`` (block-local rows and columns) as rank ``self.rank``'s block of a grid."""
        return await self._run(self._set_grid_block, key, grid, rows, cols, coo, fmt)

    async def load_grid_block(self, key, grid, rows, cols, ncols, loader, fmt, index=None,
                              col_position=None) -> dict:
        """As :meth:`set_grid_block`, the block cut from ``loader(row_start, row_stop)``, or from
        ``loader(index)`` (the global rows of labelled rows); ``col_position``: global column ->
        position (labelled columns), else None."""
        from .worker import _as_coo

        def load():
            made = loader(rows[0], rows[1]) if index is None else loader(index)
            r, c, v = _as_coo(made, rows[1] - rows[0], ncols)
            if col_position is not None:
                c = col_position[c]
            keep = (c >= cols[0]) & (c < cols[1])
            return self._set_grid_block(key, grid, rows, cols, (r[keep], c[keep] - cols[0], v[keep]), fmt)
        return await self._run(load)

    def _set_grid_block(self, key, grid, rows, cols, coo, fmt) -> dict:
        from ..tensor.tensor import Tensor
        from .worker import _format_for

        r, c, v = (np.asarray(t) for t in coo)
        shape = (rows[1] - rows[0], cols[1] - cols[0])
        fmt = _format_for(fmt, self.rank, shape)
        r, c = r.astype(np.int64), c.astype(np.int64)
        tensor = Tensor.from_coo((r, c), v, shape, fmt) if len(v) else None
        diag = np.zeros(shape[0], dtype=v.dtype)
        on = r + rows[0] == c + cols[0]
        np.add.at(diag, r[on], v[on])
        block = GridBlock(tuple(rows), tuple(cols), tuple(grid), divmod(self.rank, grid[1]), tensor, v.dtype,
                          rows_used=np.unique(r), cols_used=np.unique(c), diag=diag)
        self.blocks[key] = block
        return {"nse": int(len(v)), "format": str(tensor.format) if tensor is not None else str(fmt),
                "rows_used": block.rows_used, "cols_used": block.cols_used}

    def _grid_comms(self, grid) -> tuple:
        """This rank's (row, column) communicators in a ``grid`` (made once per communicator)."""
        cached = getattr(self, "_grid_cache", None)
        if cached is None or cached[0] is not self.comm:
            cached = self._grid_cache = (self.comm, {})
        comms = cached[1].get(tuple(grid))
        if comms is None:
            pr, pc = grid
            i, j = divmod(self.rank, pc)
            comms = cached[1][tuple(grid)] = (
                SubCommunicator(self.comm, [i * pc + k for k in range(pc)], f"row{i}/{pr}x{pc}"),
                SubCommunicator(self.comm, [k * pc + j for k in range(pr)], f"col{j}/{pr}x{pc}"))
        return comms

    def _grid_product(self, block, dtype, tail, kind: str = "dense"):
        """The planned ``tensor @ xbuf`` of ``block`` for dtype and trailing shape (made once per
        ``kind``: the sparse exchange writes only the columns in use, which must stay apart
        from the dense exchange's buffer, where every column is written)."""
        from ..ops.plan import Matmul

        key = (np.dtype(dtype).str, tuple(tail), kind)
        prod = block.products.get(key)
        if prod is None:
            xbuf = np.zeros((block.cols[1] - block.cols[0],) + tuple(tail), dtype=dtype)
            ybuf = np.zeros((block.rows[1] - block.rows[0],) + tuple(tail), dtype=dtype)
            mm = None
            if block.tensor is not None:
                mm = Matmul(block.tensor, xbuf)
                mm.plan()
            prod = block.products[key] = (xbuf, ybuf, mm)
        return prod

    async def grid_matmul(self, key, xname, yname, dtype) -> None:
        """``vecs[yname] = (A @ x)`` parts of this rank, from the ``x`` parts in ``vecs[xname]``
        (SPMD: every rank of the grid calls it together)."""
        await self._run(self._grid_matmul, key, xname, yname, np.dtype(dtype))

    def _grid_matmul(self, key, xname, yname, dtype) -> None:
        block = self.blocks[key]
        row, col = self._grid_comms(block.grid)
        x = np.ascontiguousarray(self.vecs[xname], dtype=dtype)
        xbuf, ybuf, mm = self._grid_product(block, dtype, x.shape[1:])
        self.comm.syncs += 1
        np.concatenate(self._wait(col.allgather(x)), out=xbuf)
        if mm is not None:
            mm.execute(out=ybuf)
        else:
            ybuf.fill(0)
        parts = [ybuf[lo:hi] for lo, hi in split(0, len(ybuf), block.grid[1])]
        self.vecs[yname] = self._wait(row.reduce_scatter(parts))

    # -- the sparsity-aware exchange (solves) ----------------------------------------------
    async def set_grid_halo(self, key, halo: SparseHalo) -> None:
        self.blocks[key].halo = halo

    async def _pairs(self, sends, srcs, tag) -> dict:
        """Send ``(dst, data)`` pairs and receive from ``srcs`` under ``tag``: ``{src: data}``;
        this rank's pair with itself is handed over without a message."""
        comm = self.comm
        mine = [data for dst, data in sends if dst == self.rank]
        others = [src for src in srcs if src != self.rank]
        got = await comm.gather(*(comm.send(dst, tag, data) for dst, data in sends if dst != self.rank),
                                *(comm.recv(src, tag) for src in others))
        out = dict(zip(others, got[len(got) - len(others):]))
        if mine:
            out[self.rank] = mine[0]
        return out

    def _reduce_rows(self, block, partial, out) -> None:
        """``out`` (this rank's owned part) = the sum of every block's ``partial`` rows that fall
        in it, added in source-rank order (the same bits whatever the message timing)."""
        halo = block.halo
        tag = self.comm.next_tag("grid-y")
        sends = [(dst, np.ascontiguousarray(partial[rows])) for dst, rows in halo.ysend.items()]
        got = self._wait(self._pairs(sends, list(halo.yrecv), tag))
        out.fill(0)
        for src in sorted(got):
            out[halo.yrecv[src]] += got[src]

    def _x_exchange(self, block, x, tag):
        """The coroutine sending the ``x`` entries (this rank's owned part ``x``) each block's
        columns touch and receiving those of this block's: ``{src: values}``."""
        halo = block.halo
        sends = [(dst, np.ascontiguousarray(x[idx])) for dst, idx in halo.xsend.items()]
        return self._pairs(sends, list(halo.xrecv), tag)

    def _grid_apply(self, block, x, out, ahead=None) -> None:
        """``out`` = this rank's owned part of ``A x`` from its owned part ``x``: the ``x``
        entries each block's columns touch go to it (nothing else moves), each block multiplies,
        and the partial rows go to their owners (:meth:`_reduce_rows`). Two synchronisations;
        one with ``ahead`` either ``x``'s entries at ``cols_used`` (BiCGSTAB's mirrors:
        :class:`~ustc.distributed.blockvectors.GridBiCGVectors`) or ``(z entries, beta)``: ``x = z + beta x_prev`` (``beta`` None: ``x = z``)
        where ``x_prev`` was the previous product's operand and ``z``'s entries were exchanged already
        (:class:`~ustc.distributed.worker.GridVectors`), so the block forms its entries itself."""
        halo = block.halo
        xbuf, ybuf, mm = self._grid_product(block, out.dtype, x.shape[1:], "sparse")
        if isinstance(ahead, np.ndarray):           # x's entries at cols_used, already here
            self.comm.syncs += 1
            xbuf[block.cols_used] = ahead
        elif ahead is None:
            self.comm.syncs += 2
            got = self._wait(self._x_exchange(block, x, self.comm.next_tag("grid-x")))
            for src, (lo, hi) in halo.xrecv.items():
                xbuf[block.cols_used[lo:hi]] = got[src]
        else:
            self.comm.syncs += 1
            got, beta = ahead
            z = np.empty(len(block.cols_used), dtype=xbuf.dtype)
            for src, (lo, hi) in halo.xrecv.items():
                z[lo:hi] = got[src]
            if beta is None:                        # x = z
                xbuf[block.cols_used] = z
            else:
                mine = xbuf[block.cols_used]
                HOST.xpby(z, beta, mine)            # the owners' kernel: the same bits as their p
                xbuf[block.cols_used] = mine
        if mm is not None:
            mm.execute(out=ybuf)
        else:
            ybuf.fill(0)
        self._reduce_rows(block, ybuf, out)

    async def grid_sparse_matmul(self, key, xname, yname, dtype) -> None:
        """``vecs[yname]`` = this rank's owned part of ``A x`` by the sparse exchange, from its
        owned part ``vecs[xname]`` (SPMD: every rank of the grid calls it together)."""
        def run():
            block = self.blocks[key]
            x = np.ascontiguousarray(self.vecs[xname], dtype=dtype)
            y = np.empty((block.halo.n,) + x.shape[1:], dtype=dtype)
            self._grid_apply(block, x, y)
            self.vecs[yname] = y
        await self._run(run)

    def _grid_diag(self, block, dtype) -> np.ndarray:
        """This rank's owned part of ``diag(A)`` (the diagonal entries may sit in other blocks)."""
        out = np.zeros(block.halo.n, dtype=dtype)
        self._reduce_rows(block, block.diag.astype(dtype), out)
        return out

    async def grid_rows(self, key, lo: int, hi: int):
        """``(rows, cols, values)`` of this rank's grid block in its rows ``lo:hi`` (block-local
        indices, rows from ``lo``): what a PETSc export's owner of those rows needs."""
        r, c, v = await self.grid_entries(key)
        keep = (r >= lo) & (r < hi)
        return r[keep] - lo, c[keep], v[keep]

    async def grid_entries(self, key):
        """``(rows, cols, values)`` of this rank's grid block, block-local indices."""
        block = self.blocks[key]
        if block.tensor is None:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, block.dtype)
        (r, c), v = block.tensor.entries()
        return np.asarray(r, np.int64), np.asarray(c, np.int64), np.asarray(v)
