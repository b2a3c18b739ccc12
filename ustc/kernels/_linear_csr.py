"""CSR SpMV and SpMM for a sparse ``nn.Linear`` (``W @ Xᵀ``): the kernels the planned CSR product takes.

A pruned weight ``W`` (CSR, narrow column indices: ``ustc.torch.reformat``'s default) meets one input
vector at batch 1 (SpMV) or ``Xᵀ`` stored ``(in_features, batch)`` row-major (SpMM: each input feature's
batch is one contiguous row, as ``ustc.torch.inference`` fills it).

* SpMV: the row loop of ``kernels._narrow_spmv.gather_spmv`` on the operand's own pointers and columns
  (any integer width): a row's sum reassociated, so LLVM vectorises it with gathers of ``x``. The
  generated kernel's scalar loop was half as fast: 2048 x 2048 float32, uint16 columns, one thread,
  CPU time, minimum of 9 alternating rounds at load 6: 90% zeros 309 -> 162 µs, 70% 851 -> 423 µs
  (dense ``torch.mv`` 764 / 779 µs).
* SpMM: ``Y[i, :] += Σ_p v_p * B[k_p, :]`` walks a row's entries :data:`UNROLL` at a time, each pass
  one loop over the batch, contiguous in ``B`` and ``Y`` (vectorised over the batch; ``Y``'s row is
  loaded and stored once per pass instead of once per entry). Same matrices at 90% zeros, one thread,
  CPU time at load 6: batch 16 1.04 ms (the generated kernel's order, one entry a pass: ~3x that),
  batch 128 4.50 ms, 24 GFLOP/s (dense ``F.linear`` 8.86 ms, 121 GFLOP/s). Four entries a pass:
  5.08 ms; 16 to 64 scalar accumulators over a batch tile: 17-24 ms (LLVM kept them scalar); rows
  walked block of columns by block (``B``'s rows from L1): 5.13 ms.

Rows run in chunks of equal work (``_narrow_spmv.row_chunks``: entries plus one a row), one chunk a
thread. The kernels read ``pos``, ``crd`` and ``vals`` as they are: the caller guarantees the
operand passed ``tensor.safety`` (columns within ``B``'s rows, ``pos`` increasing up to ``len(vals)``).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..cache._lean import njit_cached
from . import _linear_csr_bitmap as bitmap
from ._narrow_spmv import gather_spmv, row_chunks

U = np.uintp
UNROLL = 8  # entries a pass over the batch (module docstring)
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # values, B and Y share one of these


@njit_cached(nogil=True, inline="always")
def row_spmm(y, i, p, end, crd, vals, b, alpha, batch):
    """``Y[i, :] += alpha * Σ vals[q] * B[crd[q], :]`` over entries ``p <= q < end``, :data:`UNROLL` a pass
    (each pass one loop over the batch); the row walk of :func:`csr_spmm` and of
    ``kernels._spmm_rows.segment_spmm``."""
    while p + U(UNROLL) <= end:
        k0, k1, k2, k3 = U(crd[p]), U(crd[p + U(1)]), U(crd[p + U(2)]), U(crd[p + U(3)])
        k4, k5, k6, k7 = U(crd[p + U(4)]), U(crd[p + U(5)]), U(crd[p + U(6)]), U(crd[p + U(7)])
        v0, v1, v2, v3 = alpha * vals[p], alpha * vals[p + U(1)], alpha * vals[p + U(2)], alpha * vals[p + U(3)]
        v4, v5, v6, v7 = alpha * vals[p + U(4)], alpha * vals[p + U(5)], alpha * vals[p + U(6)], alpha * vals[p + U(7)]
        for j in range(batch):
            y[i, j] += ((v0 * b[k0, j] + v1 * b[k1, j]) + (v2 * b[k2, j] + v3 * b[k3, j])) + \
                ((v4 * b[k4, j] + v5 * b[k5, j]) + (v6 * b[k6, j] + v7 * b[k7, j]))
        p += U(UNROLL)
    while p < end:
        k0, v0 = U(crd[p]), alpha * vals[p]
        for j in range(batch):
            y[i, j] += v0 * b[k0, j]
        p += U(1)


@njit_cached(nogil=True, parallel=True, fastmath=True)
def csr_spmm(pos, crd, vals, b, y, alpha, bounds, accumulate):
    """``Y (+)= alpha * A @ B`` for CSR ``(pos, crd, vals)``; ``B``: ``(columns, batch)``, ``Y``: ``(rows,
    batch)``, both C-contiguous; row chunks ``bounds`` in parallel. Without ``accumulate`` every row of
    ``Y`` is stored (empty rows get zeros)."""
    batch = U(b.shape[1])
    zero = y.dtype.type(0)
    for ch in prange(len(bounds) - 1):
        for i_s in range(bounds[ch], bounds[ch + 1]):
            i = U(i_s)
            if not accumulate:
                for j in range(batch):
                    y[i, j] = zero
            row_spmm(y, i, U(pos[i]), U(pos[i + U(1)]), crd, vals, b, alpha, batch)


def accepts(pos: np.ndarray, crd: np.ndarray, vals: np.ndarray, b) -> bool:
    """Whether these kernels take a CSR operand with these buffers times ``b``: values and ``b`` of one
    dtype in :data:`DTYPES`, integer pointers wider than 8 bits (``gather_spmv`` reads uint8 ones as
    row lengths), integer columns, a C-contiguous NumPy ``b`` of one or two dimensions."""
    return isinstance(b, np.ndarray) and b.ndim in (1, 2) and b.flags.c_contiguous and vals.ndim == 1 \
        and vals.dtype in DTYPES and b.dtype == vals.dtype and pos.dtype.kind in "iu" and pos.dtype.itemsize > 1 \
        and crd.dtype.kind in "iu"


class LinearCsr:
    """The planned CSR SpMV / SpMM of one product: keeps the row chunks of the operand's pointers for
    the thread count they were made for (remade when either changes; a chunking is any split of the
    rows, so a stale one is slow, never wrong)."""

    def __init__(self):
        self._key, self._bounds = None, None
        self._masks = bitmap.Bitmap()  # SpMV at MIN_DENSITY or more kept: kernels._linear_csr_bitmap

    def bounds(self, pos: np.ndarray, threads: int) -> np.ndarray:
        key = (id(pos), pos.__array_interface__["data"][0], len(pos), threads)
        if key != self._key:
            self._bounds, self._key = row_chunks(pos, threads), key
        return self._bounds

    @staticmethod
    def arguments(a, b, out, alpha, accumulate: bool, bounds: np.ndarray) -> tuple:
        """``(kernel, args)`` for ``out (+)= alpha * a @ b`` (``a`` a CSR Tensor)."""
        pos, crd, vals = a.raw_buffers[(1, "pos")], a.raw_buffers[(1, "crd")], a.raw_values
        scale = out.dtype.type(alpha)
        if b.ndim == 1:
            starts = pos[bounds].astype(np.int64)
            return gather_spmv, (out, pos, starts, crd, 0, vals, b, bounds, scale, accumulate)
        return csr_spmm, (pos, crd, vals, b, out, scale, bounds, accumulate)

    def _bitmap(self, a, b, out, alpha, accumulate: bool, force: bool = False):
        """``(kernel, args)`` of the mask SpMV where it takes these operands, else None."""
        pos, vals = a.raw_buffers[(1, "pos")], a.raw_values
        if not bitmap.accepts(a.shape, pos, vals, b) \
                or not self._masks.ready(a.shape, pos, a.raw_buffers[(1, "crd")], force):
            return None
        m = self._masks
        return bitmap.bitmap_spmv, (pos, m.counts, m.bits, vals, m.padded(b), out, out.dtype.type(alpha), accumulate)

    def run(self, a, b, out, alpha, accumulate: bool, threads: int) -> None:
        masked = self._bitmap(a, b, out, alpha, accumulate)
        if masked is not None:
            if masked[0](*masked[1]):
                return
            masked = self._bitmap(a, b, out, alpha, accumulate, force=True)  # a row's length changed: new masks
            if masked is not None and masked[0](*masked[1]):
                return
        kernel, args = self.arguments(a, b, out, alpha, accumulate, self.bounds(a.raw_buffers[(1, "pos")], threads))
        kernel(*args)

    def compile(self, a, b, out, alpha, accumulate: bool, threads: int) -> None:
        """Compile (or load from Numba's cache) the kernel these operands take, without running it."""
        import numba

        masked = self._bitmap(a, b, out, alpha, accumulate)
        kernel, args = masked if masked is not None else \
            self.arguments(a, b, out, alpha, accumulate, self.bounds(a.raw_buffers[(1, "pos")], threads))
        kernel.compile(tuple(numba.typeof(x) for x in args))
