"""Partitions: which block owns which rows (and which vector entries).

:class:`RowBlocks` splits ``n`` rows into ``P`` contiguous ranges, given either
``P`` (sizes as even as possible) or the ``P + 1`` boundaries (uneven and empty
blocks allowed). A square matrix's columns follow the same partition ("aligned"),
so ``x`` and ``A x`` are distributed alike and a Krylov solve needs no
redistribution. :class:`Labels` takes a part id per row instead (METIS, a graph's
communities): a block's rows need not be contiguous. Every partition numbers the rows
by *position*: block ``b`` holds positions ``bounds[b]:bounds[b + 1]``, and position
``p`` is global row ``perm[p]`` (``perm`` None: the identity). The blocks, halo plans
and products work on positions; the driver's helpers (:meth:`RowBlocks.take`,
:meth:`RowBlocks.to_global`, :meth:`RowBlocks.index`, :meth:`RowBlocks.position`)
convert from and to the user's global order.
"""

from __future__ import annotations

import numpy as np

from ..errors import IndexingError, ShapeError, UstcError


class RowBlocks:
    """Contiguous blocks: block ``b`` owns rows ``bounds[b]:bounds[b + 1]``."""

    perm = None          # position -> global row (None: the identity); see Labels
    inverse = None       # global row -> position

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
                raise ShapeError(f"the partition {partition!r} covers {partition.n} rows, the operand has {n}")
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

    def take(self, x, b: int) -> np.ndarray:
        """Block ``b``'s rows of the driver's array ``x`` (global order, along axis 0)."""
        lo, hi = self.range(b)
        return x[lo:hi] if self.perm is None else x[self.perm[lo:hi]]

    def to_global(self, y: np.ndarray) -> np.ndarray:
        """``y`` (rows in position order, the blocks' slices concatenated) in global order."""
        if self.perm is None:
            return y
        out = np.empty_like(y)
        out[self.perm] = y
        return out

    def index(self, positions) -> np.ndarray:
        """The global rows at ``positions``."""
        return np.asarray(positions) if self.perm is None else self.perm[np.asarray(positions, np.int64)]

    def position(self, rows) -> np.ndarray:
        """The positions of the global ``rows``."""
        return np.asarray(rows) if self.inverse is None else self.inverse[np.asarray(rows, np.int64)]

    def members(self, b: int) -> np.ndarray:
        """The global rows of block ``b`` (ascending for :class:`Labels` too)."""
        lo, hi = self.range(b)
        return self.index(np.arange(lo, hi, dtype=np.int64))

    def with_bounds(self, bounds) -> "RowBlocks":
        """Other blocks over the same positions: ``bounds`` cut the positions, global rows stay
        those of this partition (a grid's vector layout over labelled rows)."""
        out = RowBlocks(self.n, bounds=bounds)
        out.perm, out.inverse = self.perm, self.inverse
        return out

    def same_order(self, other: "RowBlocks") -> bool:
        """Whether both number the same rows by the same positions (bounds may differ)."""
        if self.n != other.n or (self.perm is None) != (other.perm is None):
            return False
        return self.perm is None or np.array_equal(self.perm, other.perm)

    def like(self, n: int) -> "RowBlocks":
        """The same number of blocks over ``n`` entries (the column partition of a rectangular
        matrix): this partition when ``n`` matches, else an even split."""
        return self if n == self.n else RowBlocks(n, self.parts)

    def __eq__(self, other):
        if not (isinstance(other, RowBlocks) and self.n == other.n and np.array_equal(self.bounds, other.bounds)):
            return False
        if self.perm is None or other.perm is None:
            return self.perm is None and other.perm is None
        return np.array_equal(self.perm, other.perm)

    def __hash__(self):
        return hash((self.n, self.bounds.tobytes(), None if self.perm is None else self.perm.tobytes()))

    def __repr__(self):
        return f"RowBlocks(n={self.n}, sizes={self.sizes().tolist()})"


class Labels(RowBlocks):
    """User labels: block ``b`` owns the rows whose label is ``b`` (a part id per row, from METIS
    or a graph's communities; rows need not be contiguous, parts may be empty). ``parts``:
    the block count (default: the largest label + 1).

    Internally the rows are sorted by label (stably: a block keeps its rows in global order)
    and the blocks are contiguous ranges of positions (``perm[p]``: the global row at position
    ``p``), so the halo plan and the block products are those of :class:`RowBlocks` over the
    permuted matrix ``A[perm][:, perm]``; vectors are scattered and gathered in the user's
    order. Labels that already rise (contiguous parts) give ``perm`` None: plain row blocks.
    Bad labels raise: not 1-D (ShapeError), not integers (UstcError), outside
    ``0 .. parts - 1`` (IndexingError naming the first bad row)."""

    def __init__(self, labels, parts=None):
        lab = np.asarray(labels)
        if lab.ndim != 1:
            raise ShapeError(f"Labels: need one label per row (a 1-D array), got shape {lab.shape}")
        if lab.size == 0:
            lab = lab.astype(np.int64)        # no rows: np.asarray([]) is float
        if lab.dtype.kind not in "iu":
            raise UstcError(f"Labels: labels must be integers (part ids), got dtype {lab.dtype}")
        if parts is None:
            parts = int(lab.max()) + 1 if len(lab) else 1
        parts = int(parts)
        if parts < 1:
            raise ShapeError(f"Labels: need at least one part, got {parts}")
        bad = np.flatnonzero((lab < 0) | (lab >= parts))
        if len(bad):
            row = int(bad[0])
            raise IndexingError(f"Labels: row {row} has label {lab[row]}, outside 0..{parts - 1} "
                                f"({len(bad)} row(s) out of range)")
        lab = lab.astype(np.int64)
        counts = np.bincount(lab, minlength=parts)
        super().__init__(len(lab), bounds=np.concatenate([[0], np.cumsum(counts)]))
        lab.flags.writeable = False
        self.labels = lab
        if np.any(lab[1:] < lab[:-1]):
            self.perm = np.argsort(lab, kind="stable")
            self.inverse = np.empty_like(self.perm)
            self.inverse[self.perm] = np.arange(len(lab), dtype=self.perm.dtype)

    def __repr__(self):
        return f"Labels(n={self.n}, sizes={self.sizes().tolist()})"


class Grid2D:
    """A ``pr x pc`` process grid over an ``m x n`` matrix: block ``(i, j)`` (rank ``i * pc + j``)
    holds rows ``rows.range(i)`` and columns ``cols.range(j)``. ``rows`` / ``cols``: a block
    count or bounds as for :class:`RowBlocks` (uneven and empty blocks allowed), or
    :class:`Labels`: block row ``i`` then holds the rows labelled ``i`` (block column ``j`` the
    columns labelled ``j``), the ranges being of positions as for row blocks, so the grid is
    that of the permuted matrix ``A[rows.perm][:, cols.perm]`` while vectors stay in the user's
    order. A solve needs the same labels on rows and columns.

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
