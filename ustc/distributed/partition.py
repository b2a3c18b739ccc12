"""Partitions: which block owns which rows (and which vector entries).

:class:`RowBlocks` splits ``n`` rows into ``P`` contiguous ranges, given either
``P`` (sizes as even as possible) or the ``P + 1`` boundaries (uneven and empty
blocks allowed). A square matrix's columns follow the same partition ("aligned"),
so ``x`` and ``A x`` are distributed alike and a Krylov solve needs no
redistribution.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError


class RowBlocks:
    """Contiguous blocks: block ``b`` owns rows ``bounds[b]:bounds[b + 1]``."""

    def __init__(self, n: int, parts=None, *, bounds=None):
        n = int(n)
        if bounds is None:
            parts = int(parts if parts is not None else 1)
            if parts < 1:
                raise ShapeError(f"RowBlocks: need at least one block, got {parts}")
            bounds = [n * b // parts for b in range(parts + 1)]
        bounds = np.asarray(bounds, dtype=np.int64)
        if bounds.ndim != 1 or len(bounds) < 2 or bounds[0] != 0 or bounds[-1] != n or np.any(np.diff(bounds) < 0):
            raise ShapeError(f"RowBlocks: bounds must rise from 0 to {n}, got {bounds.tolist()}")
        self.n = n
        self.bounds = bounds

    @classmethod
    def of(cls, n: int, partition) -> "RowBlocks":
        """``partition`` as RowBlocks of ``n``: a RowBlocks (checked), a block count, or bounds."""
        if isinstance(partition, RowBlocks):
            if partition.n != n:
                raise ShapeError(f"the partition covers {partition.n} rows, the operand has {n}")
            return partition
        if partition is None or np.isscalar(partition):
            return cls(n, partition)
        return cls(n, bounds=partition)

    @property
    def parts(self) -> int:
        return len(self.bounds) - 1

    def range(self, b: int) -> tuple[int, int]:
        return int(self.bounds[b]), int(self.bounds[b + 1])

    def sizes(self) -> np.ndarray:
        return np.diff(self.bounds)

    def owner(self, index) -> np.ndarray:
        """The block owning each global index."""
        return np.searchsorted(self.bounds, np.asarray(index), side="right") - 1

    def like(self, n: int) -> "RowBlocks":
        """The same number of blocks over ``n`` entries (the column partition of a rectangular
        matrix): this partition when ``n`` matches, else an even split."""
        return self if n == self.n else RowBlocks(n, self.parts)

    def __eq__(self, other):
        return isinstance(other, RowBlocks) and self.n == other.n and np.array_equal(self.bounds, other.bounds)

    def __hash__(self):
        return hash((self.n, self.bounds.tobytes()))

    def __repr__(self):
        return f"RowBlocks(n={self.n}, sizes={self.sizes().tolist()})"


class Grid2D:
    """A ``pr x pc`` process grid over an ``m x n`` matrix: block ``(i, j)`` (rank ``i * pc + j``)
    holds rows ``rows.range(i)`` and columns ``cols.range(j)``. ``rows`` / ``cols``: a block
    count or bounds as for :class:`RowBlocks` (uneven and empty blocks allowed).

    Vectors of a grid product: rank ``(i, j)`` owns part ``i`` (of ``pr``) of the column range
    ``j`` of ``x`` (:meth:`x_range`) and part ``j`` (of ``pc``) of the row range ``i`` of ``y``
    (:meth:`y_range`), so every block's column range of ``x`` is gathered along its process
    column and every partial ``y`` reduced along its process row."""

    def __init__(self, m: int, n: int, rows=1, cols=1):
        self.rows = RowBlocks.of(int(m), rows)
        self.cols = RowBlocks.of(int(n), cols)
        self.m, self.n = int(m), int(n)

    @property
    def shape(self) -> tuple[int, int]:
        """The process grid ``(pr, pc)``."""
        return self.rows.parts, self.cols.parts

    @property
    def parts(self) -> int:
        return self.rows.parts * self.cols.parts

    def coords(self, rank: int) -> tuple[int, int]:
        return divmod(int(rank), self.cols.parts)

    def rank(self, i: int, j: int) -> int:
        return int(i) * self.cols.parts + int(j)

    @staticmethod
    def _part(lo: int, hi: int, parts: int, k: int) -> tuple[int, int]:
        span = hi - lo
        return lo + span * k // parts, lo + span * (k + 1) // parts

    def x_range(self, rank: int) -> tuple[int, int]:
        """The entries of ``x`` rank ``rank`` owns: part ``i`` of column range ``j``."""
        i, j = self.coords(rank)
        return self._part(*self.cols.range(j), self.rows.parts, i)

    def y_range(self, rank: int) -> tuple[int, int]:
        """The entries of ``y`` rank ``rank`` owns: part ``j`` of row range ``i``."""
        i, j = self.coords(rank)
        return self._part(*self.rows.range(i), self.cols.parts, j)

    def x_order(self) -> list[int]:
        """Ranks in the order of the ``x`` entries they own (column-major over the grid)."""
        return [self.rank(i, j) for j in range(self.cols.parts) for i in range(self.rows.parts)]

    def y_order(self) -> list[int]:
        """Ranks in the order of the ``y`` entries they own (row-major: the rank order)."""
        return list(range(self.parts))

    def __eq__(self, other):
        return isinstance(other, Grid2D) and self.rows == other.rows and self.cols == other.cols

    def __hash__(self):
        return hash((self.rows, self.cols))

    def __repr__(self):
        return (f"Grid2D({self.m}x{self.n}, grid {self.rows.parts}x{self.cols.parts}, "
                f"row sizes {self.rows.sizes().tolist()}, column sizes {self.cols.sizes().tolist()})")
