"""The sparsity-aware exchange of a 2-D partitioned matrix (driver side): who sends whom what.

A Krylov solve on a :class:`~ustc.distributed.grid.GridTensor` keeps every vector in one
layout, :func:`layout` (rank ``(i, j)`` owns part ``j`` of ``rows_i``; contiguous in rank
order). A product ``y = A x`` then moves only what the stored entries need: block ``(i, j)``
receives the entries of ``x`` at the columns its entries touch (``cols_used``) from their
owners, and sends the partial sums of the rows its entries touch (``rows_used``) to theirs.
Both lists are sorted and the owners' ranges contiguous, so each pair is one slice. A
rectangular matrix's ``x`` (or a square one's with other labels on its columns than on its
rows) is laid out by process columns instead (:func:`x_layout`). Everything here is in
positions (a :class:`~ustc.distributed.partition.Labels` grid's permuted numbering).
:class:`SparsePlan` holds every rank's :class:`~ustc.distributed.gridblock.SparseHalo` and
the exact counts one product moves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .gridblock import SparseHalo
from .partition import Grid2D, RowBlocks


def layout(grid: Grid2D) -> RowBlocks:
    """The vector layout of a grid solve: rank ``r`` owns ``grid.y_range(r)``."""
    bounds = [grid.y_range(r)[0] for r in range(grid.parts)] + [grid.m]
    return grid.rows.with_bounds(bounds)        # labelled rows: positions, global rows through perm


def x_layout(grid: Grid2D) -> tuple[RowBlocks, list]:
    """``(blocks, ranks)``: who owns ``x`` in the sparse exchange, block ``k`` of ``blocks``
    (``grid.n`` entries) held by rank ``ranks[k]``. A square matrix's ``x`` shares :func:`layout`
    with ``A x`` (a solve needs that); a rectangular one's follows the columns: rank ``(i, j)``
    owns :meth:`Grid2D.x_range` (part ``i`` of ``cols_j``), so ``x`` moves within process columns."""
    if square(grid):
        return layout(grid), list(range(grid.parts))
    ranks = grid.x_order()
    bounds = [grid.x_range(r)[0] for r in ranks] + [grid.n]
    return grid.cols.with_bounds(bounds), ranks


def square(grid: Grid2D) -> bool:
    """Whether ``x`` and ``A x`` can share :func:`layout`: a square matrix whose rows and
    columns are numbered alike (no labels, or the same labels on both)."""
    return grid.m == grid.n and grid.rows.same_order(grid.cols)


def _slices(owners: np.ndarray, parts: int):
    """``(s, lo, hi)`` for each owner ``s`` of a sorted ``owners`` array."""
    cuts = np.searchsorted(owners, np.arange(parts + 1))
    return [(s, int(cuts[s]), int(cuts[s + 1])) for s in range(parts) if cuts[s + 1] > cuts[s]]


@dataclass(frozen=True, eq=False)
class SparsePlan:
    """Every rank's :class:`SparseHalo` and what one product moves between distinct ranks:
    ``x_entries``, ``y_entries``, ``messages`` (pairs with something to move; a rank's pair with
    itself is a copy)."""

    halos: tuple
    x_entries: int
    y_entries: int
    messages: int

    def bytes(self, itemsize: int, k: int = 1) -> int:
        return (self.x_entries + self.y_entries) * int(k) * int(itemsize)

    @classmethod
    def of(cls, grid: Grid2D, infos, vec: RowBlocks, xvec=None) -> "SparsePlan":
        """The plan for blocks whose ``infos[r]`` give ``rows_used`` / ``cols_used`` (block-local),
        ``A x`` laid out as ``vec`` (``grid.parts`` parts over ``grid.m``) and ``x`` as ``xvec``
        (``(blocks, ranks)`` as :func:`x_layout` gives; default ``vec`` itself, square)."""
        P = grid.parts
        xblocks, xranks = xvec if xvec is not None else (vec, list(range(P)))
        xsend, xrecv = [dict() for _ in range(P)], [dict() for _ in range(P)]
        ysend, yrecv = [dict() for _ in range(P)], [dict() for _ in range(P)]
        x_entries = y_entries = messages = 0
        for d, info in enumerate(infos):
            i, j = grid.coords(d)
            cols = np.asarray(info["cols_used"], np.int64) + grid.cols.range(j)[0]
            for k, lo, hi in _slices(xblocks.owner(cols), P):
                s = xranks[k]
                xsend[s][d] = cols[lo:hi] - xblocks.bounds[k]
                xrecv[d][s] = (lo, hi)
                if s != d:
                    x_entries, messages = x_entries + hi - lo, messages + 1
            local = np.asarray(info["rows_used"], np.int64)
            rows = local + grid.rows.range(i)[0]
            for t, lo, hi in _slices(vec.owner(rows), P):
                ysend[d][t] = local[lo:hi]
                yrecv[t][d] = rows[lo:hi] - vec.bounds[t]
                if t != d:
                    y_entries, messages = y_entries + hi - lo, messages + 1
        halos = tuple(SparseHalo(vec.range(r), xsend[r], xrecv[r], ysend[r], yrecv[r]) for r in range(P))
        return cls(halos, int(x_entries), int(y_entries), int(messages))
