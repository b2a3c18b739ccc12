"""CSR SpMV of a dense-ish pruned ``nn.Linear`` (at least :data:`MIN_DENSITY` of the entries kept) through a
bit mask of its pattern: the batch-1 product of a 70%-pruned layer.

At plan time each row's columns become one 16-bit mask per 16 columns (``bits[i, w]``: bit ``t`` set
where ``(i, 16 w + t)`` is stored); the values stay the operand's own, read in place at every execute.
The kernel walks a row 16 columns at a time: ``vexpandps`` puts the row's next ``popcount(mask)`` values
in the lanes of the mask (``kernels._simd.masked_ops``), one FMA with ``x[16 w : 16 w + 16]`` (contiguous,
from L1) adds them. Per 16 columns that is one mask and one vector of ``x``, no gather: the gathers of
``kernels._narrow_spmv.gather_spmv`` bound the CSR kernel at this density, and the mask (``columns / 8``
bytes a row) is smaller than 16-bit column indices (2 bytes an entry) above 1/16 of the entries kept.
2048 x 2048 float32 at 30% kept, one thread, CPU time, 63 copies cycled so each call reads its weights
from memory, median of 9 rounds at load 16-18: 1.13-1.24 ms against 1.27-1.45 for ``gather_spmv`` and
1.65-1.78 for dense ``torch.mv`` (weights resident: 0.68 ms against dense 1.13).

Rows run in parallel. Before any, every row's length (``pos[i + 1] - pos[i]``) is checked against the
mask's count and its end against the values; where one does not match the kernel returns at once and
the caller remakes the masks (the pattern changed) and runs again: nothing is read outside a buffer
whatever happens to the operand. An in-place change of column indices that keeps every row's
length is not seen (the masks are identified by the index buffers' identity, as
``NarrowColumnsRoute``'s copies are by a sample).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..cache._lean import njit_cached
from ._prefetch import prefetch
from ._simd import HAS_AVX512, add, aligned_empty, fma, lanes_ops, masked_ops, popcount

U = np.uintp
LANES = 16
AHEAD = 1024  # values prefetched this far ahead (4 KiB): 0.67x dense's time at 2:4 from memory, 1.04x without
MIN_DENSITY = 0.25  # stored entries over rows x columns from which the masks replace the gathers
USE_MASKS = HAS_AVX512  # routes take the masks only where expand-loads are one instruction
load1, expand, total = masked_ops(LANES)
_, splat = lanes_ops(LANES)


@njit_cached(nogil=True, parallel=True, fastmath=True)
def bitmap_spmv(pos, counts, bits, vals, x, y, alpha, accumulate) -> bool:
    """``y (+)= alpha * A @ x`` for the CSR ``A`` whose pattern is ``bits`` (``counts[i]`` entries a row);
    ``x`` padded with zeros to ``16 * bits.shape[1]``. False, with ``y`` untouched, where a row's length in
    ``pos`` no longer matches ``counts`` or ends past the values (checked first, serially: ~1 µs for
    2048 rows)."""
    words, n_vals = U(bits.shape[1]), U(len(vals))
    for i in range(bits.shape[0]):
        p, end = U(pos[i]), U(pos[i + 1])
        if end < p or end > n_vals or end - p != U(counts[i]):
            return False
    for i in prange(bits.shape[0]):
        p = U(pos[i])
        a0 = splat(y.dtype.type(0))
        a1 = a0
        w = U(0)
        while w + U(1) < words:
            prefetch(vals, p + U(AHEAD))  # (a hint: never faults, whatever the address)
            m0, m1 = bits[i, w], bits[i, w + U(1)]
            a0 = fma(expand(vals, p, m0), load1(x, w * U(LANES)), a0)
            p += popcount(m0)
            a1 = fma(expand(vals, p, m1), load1(x, (w + U(1)) * U(LANES)), a1)
            p += popcount(m1)
            w += U(2)
        if w < words:
            a0 = fma(expand(vals, p, bits[i, w]), load1(x, w * U(LANES)), a0)
        s = alpha * total(add(a0, a1))
        y[i] = y[i] + s if accumulate else s
    return True


@njit_cached(nogil=True)
def _masks(pos, crd, n_cols, bits, counts) -> bool:
    """Fill ``bits`` / ``counts`` from CSR ``pos`` / ``crd``; False where a row's columns are not strictly
    increasing within ``[0, n_cols)`` (the values would not come in the mask's order)."""
    for i in range(len(pos) - 1):
        last = -1
        for p in range(pos[i], pos[i + 1]):
            k = np.int64(crd[p])
            if k <= last or k >= n_cols:
                return False
            bits[i, k // LANES] |= np.uint16(1) << np.uint16(k % LANES)
            last = k
        counts[i] = pos[i + 1] - pos[i]
    return True


def accepts(shape, pos: np.ndarray, vals: np.ndarray, b) -> bool:
    """Whether a CSR SpMV of this operand takes the masks: a host with AVX-512 (:data:`USE_MASKS`),
    float32 values and 1-D ``b``, at least :data:`MIN_DENSITY` of the entries stored, columns at least 16."""
    rows, columns = shape
    return USE_MASKS and b.ndim == 1 and vals.dtype == np.float32 and b.dtype == np.float32 and columns >= LANES \
        and rows > 0 and len(vals) >= MIN_DENSITY * rows * columns


class Bitmap:
    """The masks of one operand's pattern (remade when its index buffers change or a row's length
    does), and the zero-padded, aligned copy of ``x`` the kernel reads."""

    def __init__(self):
        self._key, self.bits, self.counts, self._pad = None, None, None, Padded()

    def ready(self, shape, pos: np.ndarray, crd: np.ndarray, force: bool = False) -> bool:
        """Make the masks for these buffers if they are new; False where the pattern has no mask order."""
        key = (pos, crd, pos.__array_interface__["data"][0], crd.__array_interface__["data"][0], len(pos), len(crd),
               shape)  # the arrays themselves: kept alive, their ids cannot name other arrays later
        old = self._key
        if not force and old is not None and old[0] is pos and old[1] is crd and old[2:] == key[2:]:
            return self.bits is not None
        words = -(-shape[1] // LANES)
        bits, counts = np.zeros((shape[0], words), np.uint16), np.zeros(shape[0], np.int64)
        ok = len(pos) == shape[0] + 1 and _masks(pos, crd, shape[1], bits, counts)
        self._key, self.bits, self.counts = key, (bits if ok else None), counts
        return ok

    def padded(self, x: np.ndarray) -> np.ndarray:
        return self._pad.of(x, self.bits.shape[1])


class Padded:
    """An aligned copy of ``x`` zero-padded to whole masks of 16 columns (kept between executes)."""

    def __init__(self):
        self._x = None

    def of(self, x: np.ndarray, words: int) -> np.ndarray:
        n = words * LANES
        if self._x is None or len(self._x) != n:
            self._x = aligned_empty((n,), np.float32)
            self._x[len(x):] = 0
        self._x[:len(x)] = x
        return self._x
