"""Diagonal SpMV (DIAI / DIAJ), hand-written: rows in tiles, each diagonal as a 1-D slice.

Row tiles run in parallel; inside a tile every diagonal is one contiguous
stream of values and one contiguous stream of ``x`` (no index arrays are read
besides the offsets), which is what made DIA ~1.8x faster than 2-D indexing
on the CPU (design §6).

With ``overwrite`` (``y = alpha * A @ x``, no ``c``) the first diagonal that meets a
tile stores into it, the tile's rows it misses are zeroed, and the later diagonals
add: the caller skips zero-filling ``y``, a pass that wrote all of ``y`` (and read its
lines for ownership) before the kernel read it back.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..cache._lean import njit_cached

TILE = 16384  # rows per parallel task (measured on the stencil: 2,048 rows 4.7 ms, 16,384 rows 4.3 ms)


@njit_cached(nogil=True, parallel=True)
def dia_spmv(offsets, vals, x, y, alpha, n_rows, n_cols, diag_len, by_column, overwrite):
    """``y += alpha * A @ x`` (``y = alpha * A @ x`` with ``overwrite``) where diagonal ``d``
    (offset ``o = j - i``) stores ``A[i, i + o]`` at ``vals[d * diag_len + (i + o if by_column
    else i)]``. Each task owns the rows ``[lo, hi)`` of ``y`` and adds every diagonal's slice
    straight into them."""
    for t in prange((n_rows + TILE - 1) // TILE):
        _tile(offsets, vals, x, y, alpha, n_cols, diag_len, by_column, t * TILE, min(t * TILE + TILE, n_rows),
              overwrite)


@njit_cached(nogil=True)
def dia_spmv_serial(offsets, vals, x, y, alpha, n_rows, n_cols, diag_len, by_column, overwrite):
    """:func:`dia_spmv` on one thread, for small operands (a parallel launch costs ~0.1 ms)."""
    for t in range((n_rows + TILE - 1) // TILE):
        _tile(offsets, vals, x, y, alpha, n_cols, diag_len, by_column, t * TILE, min(t * TILE + TILE, n_rows),
              overwrite)


@njit_cached(nogil=True)
def _tile(offsets, vals, x, y, alpha, n_cols, diag_len, by_column, lo, hi, overwrite):
    """Rows ``[lo, hi)`` of ``y += alpha * A @ x`` (``=`` with ``overwrite``)."""
    fresh = overwrite  # the tile still holds what the caller left there: the next diagonal stores
    for d in range(offsets.size):
        o = np.int64(offsets[d])
        a = max(lo, -o)
        b = min(hi, n_cols - o)
        if a >= b:
            continue
        base = d * diag_len + (o if by_column else 0)
        v = vals[base + a:base + b]
        xs = x[a + o:b + o]
        w = y[a:b]
        if fresh:
            y[lo:a] = 0
            y[b:hi] = 0
            for k in range(b - a):
                w[k] = alpha * v[k] * xs[k]
            fresh = False
        else:
            for k in range(b - a):
                w[k] += alpha * v[k] * xs[k]
    if fresh:  # no diagonal meets these rows
        y[lo:hi] = 0
