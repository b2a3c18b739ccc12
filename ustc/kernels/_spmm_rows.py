"""SpMM ``Y (+)= alpha * A @ B`` for DCSR, row-sorted COO and BSR(2, 2) operands, at CSR's speed.

``kernels._linear_csr.csr_spmm`` walks a CSR row's entries eight at a time, each pass one loop over
the batch (contiguous in ``B`` and ``Y``). DCSR and row-sorted COO hold the same rows, only named
differently: :func:`segment_spmm` walks both with the CSR kernel's row walk (``_linear_csr.row_spmm``)
over "row segments":

* DCSR: the stored rows ``crd0[pos0[0]:pos0[1]]`` and their pointers ``pos1``, views of the operand;
* row-sorted COO: one segment per distinct row, the pointers found once per plan (:func:`coo_segments`,
  O(nnz)), kept with the plan while the row coordinates are the same buffer (the values are read at
  every execute, so values edited in place between executes are seen);

rows no segment names are zeroed by the chunk that spans them (unless accumulating). Segments must
name rows in strictly increasing order (checked once per buffer: an unvalidated DCSR whose rows are
out of order refuses, and its product takes the generated kernel).

BSR(2, 2) (:func:`bsr22_spmm`): a block row is two output rows; four blocks a pass read eight rows
of ``B`` and update both output rows in one loop over the batch (register blocking: a ``B`` element
loaded once serves two output rows). Only for shapes the blocks tile (others take the fallback).
Per stored entry it runs as fast as the CSR kernel: on the 7-point stencil (side 80, 64 float64
columns), whose 2 x 2 blocks are half explicit zeros, BSR(2, 2) stores 2x CSR's entries and takes
1.2-1.3x CSR's time, as CSR does over those same entries (SciPy's ``bsr.tocsr()``, zeros kept);
over dense 2 x 2 blocks (the side-64 stencil ``kron`` a 2 x 2 block, 7.2M entries either way) it
took 0.87-0.89x CSR's, two blocks a pass 0.99-1.07x (one thread, CPU time, medians of 7-9
alternating rounds at load 9-11, so differences under ~10% are noise).

Rows (block rows, segments) run in chunks of equal work, one chunk a thread. The kernels read the
buffers as they are: the caller guarantees the operand passed ``tensor.safety`` (coordinates within
the shape, pointers within the next buffer).
"""

from __future__ import annotations

import weakref

import numpy as np
from numba import prange

from ..cache._lean import njit_cached
from ._linear_csr import row_spmm
from ._narrow_spmv import row_chunks

U = np.uintp
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # values, B and Y share one of these


@njit_cached(nogil=True, inline="always")
def _zero_rows(y, lo, hi):
    zero = y.dtype.type(0)
    for i in range(lo, hi):
        for j in range(y.shape[1]):
            y[i, j] = zero


@njit_cached(nogil=True, parallel=True, fastmath=True)
def segment_spmm(rows, seg, crd, vals, b, y, alpha, bounds, accumulate):
    """``Y (+)= alpha * A @ B``: segment ``s`` is output row ``rows[s]`` (strictly increasing) with
    entries ``seg[s] <= p < seg[s + 1]`` of ``crd`` / ``vals``; chunks of segments ``bounds`` in
    parallel. Without ``accumulate`` every row of ``Y`` is stored (rows no segment names get zeros:
    chunk ``c`` zeroes those between its first segment's row, or 0, and the next chunk's)."""
    batch = U(b.shape[1])
    n_seg, n_rows = len(rows), y.shape[0]
    for ch in prange(len(bounds) - 1):
        s0, s1 = bounds[ch], bounds[ch + 1]
        below = 0 if s0 == 0 else np.int64(rows[s0])
        above = n_rows if s1 == n_seg else np.int64(rows[s1])
        for s in range(s0, s1):
            i = U(rows[s])
            if not accumulate:
                _zero_rows(y, below, np.int64(i) + 1)
                below = np.int64(i) + 1
            row_spmm(y, i, U(seg[s]), U(seg[s + 1]), crd, vals, b, alpha, batch)
        if not accumulate:
            _zero_rows(y, below, above)


@njit_cached(nogil=True, inline="always")
def _block(vals, q, alpha):
    """Block ``q // 4``'s four values times ``alpha``."""
    return alpha * vals[q], alpha * vals[q + U(1)], alpha * vals[q + U(2)], alpha * vals[q + U(3)]


@njit_cached(nogil=True, parallel=True, fastmath=True)
def bsr22_spmm(pos, crd, vals, b, y, alpha, bounds, accumulate):
    """``Y (+)= alpha * A @ B`` for BSR(2, 2) ``(pos, crd, vals)`` (block ``p`` holds ``vals[4p:4p+4]``
    row-major) whose blocks tile ``Y``'s rows and ``B``'s rows; block rows ``bounds`` in parallel.
    A block row's blocks four at a pass (then two, then one): each pass one loop over the batch
    updating both output rows. Without ``accumulate`` every row of ``Y`` is stored."""
    batch = U(b.shape[1])
    zero = y.dtype.type(0)
    for ch in prange(len(bounds) - 1):
        for ib in range(bounds[ch], bounds[ch + 1]):
            i0 = U(2 * ib)
            i1 = i0 + U(1)
            if not accumulate:
                for j in range(batch):
                    y[i0, j] = zero
                    y[i1, j] = zero
            p, end = U(pos[ib]), U(pos[ib + 1])
            while p + U(4) <= end:
                k0, k2 = U(2) * U(crd[p]), U(2) * U(crd[p + U(1)])
                k4, k6 = U(2) * U(crd[p + U(2)]), U(2) * U(crd[p + U(3)])
                q = U(4) * p
                a0, a1, a2, a3 = _block(vals, q, alpha)
                c0, c1, c2, c3 = _block(vals, q + U(4), alpha)
                d0, d1, d2, d3 = _block(vals, q + U(8), alpha)
                e0, e1, e2, e3 = _block(vals, q + U(12), alpha)
                for j in range(batch):
                    x0, x1, x2, x3 = b[k0, j], b[k0 + U(1), j], b[k2, j], b[k2 + U(1), j]
                    x4, x5, x6, x7 = b[k4, j], b[k4 + U(1), j], b[k6, j], b[k6 + U(1), j]
                    y[i0, j] += ((a0 * x0 + a1 * x1) + (c0 * x2 + c1 * x3)) + ((d0 * x4 + d1 * x5) + (e0 * x6 + e1 * x7))
                    y[i1, j] += ((a2 * x0 + a3 * x1) + (c2 * x2 + c3 * x3)) + ((d2 * x4 + d3 * x5) + (e2 * x6 + e3 * x7))
                p += U(4)
            if p + U(2) <= end:
                k0, k2 = U(2) * U(crd[p]), U(2) * U(crd[p + U(1)])
                q = U(4) * p
                a0, a1, a2, a3 = _block(vals, q, alpha)
                c0, c1, c2, c3 = _block(vals, q + U(4), alpha)
                for j in range(batch):
                    x0, x1, x2, x3 = b[k0, j], b[k0 + U(1), j], b[k2, j], b[k2 + U(1), j]
                    y[i0, j] += (a0 * x0 + a1 * x1) + (c0 * x2 + c1 * x3)
                    y[i1, j] += (a2 * x0 + a3 * x1) + (c2 * x2 + c3 * x3)
                p += U(2)
            if p < end:
                k0 = U(2) * U(crd[p])
                a0, a1, a2, a3 = _block(vals, U(4) * p, alpha)
                for j in range(batch):
                    x0, x1 = b[k0, j], b[k0 + U(1), j]
                    y[i0, j] += a0 * x0 + a1 * x1
                    y[i1, j] += a2 * x0 + a3 * x1


@njit_cached(nogil=True)
def _increasing(rows, strict):
    for s in range(1, len(rows)):
        if rows[s] < rows[s - 1] or (strict and rows[s] == rows[s - 1]):
            return False
    return True


@njit_cached(nogil=True)
def _coo_segments(rows_of, pos):
    """``(rows, seg)`` of row coordinates ``rows_of`` (nondecreasing): each distinct row once, and
    the position its run starts (``seg[-1] = len(rows_of)``), of the dtypes of ``rows_of`` and
    ``pos`` (a DCSR of those index dtypes then runs the same compiled kernel)."""
    n = len(rows_of)
    count = 0
    for p in range(n):
        if p == 0 or rows_of[p] != rows_of[p - 1]:
            count += 1
    rows = np.empty(count, dtype=rows_of.dtype)
    seg = np.empty(count + 1, dtype=pos.dtype)
    s = 0
    for p in range(n):
        if p == 0 or rows_of[p] != rows_of[p - 1]:
            rows[s], seg[s] = rows_of[p], p
            s += 1
    seg[count] = n
    return rows, seg


def coo_segments(pos0: np.ndarray, crd0: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_coo_segments` of a COO's row coordinates (entries ``pos0[0] <= p < pos0[1]``), or None
    where they are not sorted."""
    lo, hi = int(pos0[0]), int(pos0[1])
    rows_of = crd0[lo:hi]
    if not _increasing(rows_of, False):
        return None
    rows, seg = _coo_segments(rows_of, pos0)
    return rows, (seg + lo).astype(pos0.dtype) if lo else seg


def dcsr_segments(pos0: np.ndarray, crd0: np.ndarray, pos1: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The stored rows of a DCSR and their pointers (views), or None where the rows do not
    strictly increase."""
    lo, hi = int(pos0[0]), int(pos0[1])
    rows = crd0[lo:hi]
    if not _increasing(rows, True):
        return None
    return rows, pos1[lo:hi + 1]


def accepts(vals: np.ndarray, b) -> bool:
    """Values and a C-contiguous 2-D NumPy ``b`` of one dtype in :data:`DTYPES`."""
    return isinstance(b, np.ndarray) and b.ndim == 2 and b.flags.c_contiguous and vals.ndim == 1 \
        and vals.dtype in DTYPES and b.dtype == vals.dtype


def _identity(arrays) -> tuple:
    return tuple((id(x), x.__array_interface__["data"][0], x.shape, x.dtype.str) for x in arrays)


class RowSpmm:
    """The planned SpMM of one DCSR, COO or BSR(2, 2) operand (``kind``: ``"dcsr"``, ``"coo"``,
    ``"bsr22"``). Keeps what it derived from the operand's index buffers (COO: the row segments,
    found once; every kind: the chunks) for those buffers and the thread count it was made for:
    remade when the buffers are other objects (checked through weak references, so a new array at
    a freed one's address is never taken for it; no index buffer is kept alive) or the thread count
    changes. An index buffer written in place is not seen, as with ``tensor.safety``; values are
    read at every run. :meth:`forget` drops what it keeps."""

    KINDS = ("dcsr", "coo", "bsr22")

    def __init__(self, kind: str):
        if kind not in self.KINDS:
            raise ValueError(f"RowSpmm: kind {kind!r} is not one of {self.KINDS}")
        self.kind = kind
        self.forget()

    def forget(self) -> None:
        self._key, self._refs, self._plan = None, (), None

    def _index(self, a) -> list[np.ndarray]:
        if self.kind == "dcsr":
            names = ((0, "pos"), (0, "crd"), (1, "pos"), (1, "crd"))
        elif self.kind == "coo":
            names = ((0, "pos"), (0, "crd"), (1, "crd"))
        else:
            names = ((1, "pos"), (1, "crd"))
        return [a.raw_buffers[n] for n in names]

    def _kept(self, index, key) -> bool:
        return key == self._key and len(self._refs) == len(index) and all(r() is x for r, x in zip(self._refs, index))

    def plan(self, a, threads: int):
        """``(rows, seg, crd, bounds)`` for :func:`segment_spmm` (``(pos, crd, None, bounds)`` for
        :func:`bsr22_spmm`), or None where the operand's rows are out of order."""
        index = self._index(a)
        key = (_identity(index), threads)
        if not self._kept(index, key):
            self.forget()
            self._plan = self._make(index, threads)
            self._key, self._refs = key, tuple(weakref.ref(x) for x in index)
        return self._with_views(index)

    def _with_views(self, index):
        """The kept plan with the operand's own buffers put back in (the plan holds none of them)."""
        if self._plan is None:
            return None
        if self.kind == "bsr22":
            return index[0], index[1], None, self._plan
        if self.kind == "dcsr":
            lo, hi, bounds = self._plan
            return index[1][lo:hi], index[2][lo:hi + 1], index[3], bounds
        rows, seg, bounds = self._plan
        return rows, seg, index[2], bounds

    def _make(self, index, threads: int):
        if self.kind == "bsr22":
            return row_chunks(index[0], threads)
        segments = dcsr_segments(*index[:3]) if self.kind == "dcsr" else coo_segments(*index[:2])
        if segments is None:
            return None
        rows, seg = segments
        bounds = row_chunks(seg, threads)
        if self.kind == "dcsr":
            return int(index[0][0]), int(index[0][1]), bounds
        return rows, seg, bounds

    def takes(self, a, b, threads: int) -> bool:
        return accepts(a.raw_values, b) and self.plan(a, threads) is not None

    def arguments(self, a, b, out, alpha, accumulate: bool, threads: int) -> tuple:
        first, second, third, bounds = self.plan(a, threads)
        scale = out.dtype.type(alpha)
        if self.kind == "bsr22":
            return bsr22_spmm, (first, second, a.raw_values, b, out, scale, bounds, accumulate)
        return segment_spmm, (first, second, third, a.raw_values, b, out, scale, bounds, accumulate)

    def run(self, a, b, out, alpha, accumulate: bool, threads: int) -> None:
        kernel, args = self.arguments(a, b, out, alpha, accumulate, threads)
        kernel(*args)

    def compile(self, a, b, out, alpha, accumulate: bool, threads: int) -> None:
        """Compile (or load from Numba's cache) the kernel these operands take, without running it."""
        import numba

        kernel, args = self.arguments(a, b, out, alpha, accumulate, threads)
        kernel.compile(tuple(numba.typeof(x) for x in args))
