"""Diagonal SpMV (DIAI / DIAJ), hand-written: rows in tiles, diagonals as 1-D slices.

Row tiles run in parallel; inside a tile every diagonal is one contiguous
stream of values and one contiguous stream of ``x`` (no index arrays are read
besides the offsets), which is what made DIA ~1.8x faster than 2-D indexing
on the CPU (design §6). A tile goes block by block of :data:`BLOCK` rows, and
each block adds up to :data:`GROUP` diagonals in one pass, so the block of
``y`` stays in L1 and is read and written once per group of diagonals, not
once per diagonal.

With ``overwrite`` (``y = alpha * A @ x``, no ``c``) each block is zeroed right
before its diagonals add into it (in cache): the caller skips zero-filling
``y``, a pass that wrote all of ``y`` (and read its lines for ownership)
before the kernel read it back.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..cache._lean import njit_cached

TILE = 16384  # rows per parallel task (measured on the stencil: 2,048 rows 4.7 ms, 16,384 rows 4.3 ms)
BLOCK = 1024  # rows of y that a group of diagonals adds into at a time: 8 KB of float64, in L1
GROUP = 4     # diagonals summed in one pass over a block (_add1 .. _add4)


@njit_cached(nogil=True, parallel=True)
def dia_spmv(offsets, vals, x, y, alpha, n_rows, n_cols, diag_len, by_column, overwrite):
    """``y += alpha * A @ x`` (``y = alpha * A @ x`` with ``overwrite``) where diagonal ``d``
    (offset ``o = j - i``) stores ``A[i, i + o]`` at ``vals[d * diag_len + (i + o if by_column
    else i)]``. Each task owns the rows ``[lo, hi)`` of ``y`` and adds the diagonals' slices
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
    """Rows ``[lo, hi)`` of ``y += alpha * A @ x`` (``=`` with ``overwrite``), block by block."""
    for s in range(lo, hi, BLOCK):
        t = min(s + BLOCK, hi)
        if overwrite:
            y[s:t] = 0
        for d in range(0, offsets.size, GROUP):
            _group(offsets, vals, x, y, alpha, n_cols, diag_len, by_column, s, t, d, min(GROUP, offsets.size - d))


@njit_cached(nogil=True, inline="always")
def _rows(o, lo, hi, n_cols):
    """The rows ``[first, last)`` of ``[lo, hi)`` that offset ``o`` meets (none: first >= last)."""
    return max(lo, -o), min(hi, n_cols - o)


@njit_cached(nogil=True, inline="always")
def _slices(offsets, vals, x, diag_len, by_column, d, a, b):
    """Diagonal ``d``'s values for rows ``[a, b)`` (all of which it meets) and the ``x`` they multiply."""
    o = np.int64(offsets[d])
    base = d * diag_len + (o if by_column else 0)
    return vals[base + a:base + b], x[a + o:b + o]


@njit_cached(nogil=True)
def _group(offsets, vals, x, y, alpha, n_cols, diag_len, by_column, lo, hi, d, g):
    """``y[lo:hi] += alpha * (diagonals d .. d + g - 1 of A) @ x``: the rows that all ``g`` meet
    in one pass, the rows only some of them meet (blocks at the matrix's edges) diagonal by
    diagonal."""
    a, b = lo, hi
    for e in range(d, d + g):
        ea, eb = _rows(np.int64(offsets[e]), lo, hi, n_cols)
        a, b = max(a, ea), min(b, eb)
    if a >= b:
        a = b = hi
    for e in range(d, d + g):
        ea, eb = _rows(np.int64(offsets[e]), lo, hi, n_cols)
        for s, t in ((ea, min(eb, a)), (max(ea, b), eb)):
            if s < t:
                v, xs = _slices(offsets, vals, x, diag_len, by_column, e, s, t)
                _add1(y[s:t], v, xs, alpha)
    if a >= b:
        return
    w = y[a:b]
    v0, x0 = _slices(offsets, vals, x, diag_len, by_column, d, a, b)
    if g == 1:
        _add1(w, v0, x0, alpha)
        return
    v1, x1 = _slices(offsets, vals, x, diag_len, by_column, d + 1, a, b)
    if g == 2:
        _add2(w, v0, x0, v1, x1, alpha)
        return
    v2, x2 = _slices(offsets, vals, x, diag_len, by_column, d + 2, a, b)
    if g == 3:
        _add3(w, v0, x0, v1, x1, v2, x2, alpha)
        return
    v3, x3 = _slices(offsets, vals, x, diag_len, by_column, d + 3, a, b)
    _add4(w, v0, x0, v1, x1, v2, x2, v3, x3, alpha)


@njit_cached(nogil=True)
def _add1(w, v0, x0, alpha):
    for k in range(w.size):
        w[k] += alpha * (v0[k] * x0[k])


@njit_cached(nogil=True)
def _add2(w, v0, x0, v1, x1, alpha):
    for k in range(w.size):
        w[k] += alpha * (v0[k] * x0[k] + v1[k] * x1[k])


@njit_cached(nogil=True)
def _add3(w, v0, x0, v1, x1, v2, x2, alpha):
    for k in range(w.size):
        w[k] += alpha * (v0[k] * x0[k] + v1[k] * x1[k] + v2[k] * x2[k])


@njit_cached(nogil=True)
def _add4(w, v0, x0, v1, x1, v2, x2, v3, x3, alpha):
    for k in range(w.size):
        w[k] += alpha * ((v0[k] * x0[k] + v1[k] * x1[k]) + (v2[k] * x2[k] + v3[k] * x3[k]))


# -- SpMM: Y (n_rows x m) += alpha * A @ X (n_cols x m) -------------------------------------------
# Row by row, every diagonal meeting the row adds its value times one row of X into the row of Y,
# two diagonals per pass over it: Y's row stays in L1 while the diagonals add, and Y is written
# once. (The generated kernel walks diagonal by diagonal over 16,384-row tiles of Y, 8 MB at 64
# columns: every diagonal read and wrote the whole tile again from L3.)

SPMM_TILE = 2048  # rows of Y per parallel task


@njit_cached(nogil=True, parallel=True)
def dia_spmm(offsets, vals, x, y, alpha, n_rows, n_cols, diag_len, by_column, overwrite):
    """``y += alpha * A @ x`` (``y = alpha * A @ x`` with ``overwrite``) for 2-D ``x`` and ``y``,
    diagonals stored as in :func:`dia_spmv`; tasks of :data:`SPMM_TILE` rows in parallel."""
    for t in prange((n_rows + SPMM_TILE - 1) // SPMM_TILE):
        _spmm_rows(offsets, vals, x, y, alpha, n_cols, diag_len, by_column, t * SPMM_TILE,
                   min(t * SPMM_TILE + SPMM_TILE, n_rows), overwrite)


@njit_cached(nogil=True)
def dia_spmm_serial(offsets, vals, x, y, alpha, n_rows, n_cols, diag_len, by_column, overwrite):
    """:func:`dia_spmm` on one thread, for small operands."""
    _spmm_rows(offsets, vals, x, y, alpha, n_cols, diag_len, by_column, 0, n_rows, overwrite)


@njit_cached(nogil=True)
def _spmm_rows(offsets, vals, x, y, alpha, n_cols, diag_len, by_column, lo, hi, overwrite):
    """Rows ``[lo, hi)`` of the product: each row's meeting diagonals (``0 <= i + o < n_cols``)
    added two at a time, scaled by ``alpha`` as they are read."""
    m = y.shape[1]
    nd = offsets.size
    meets = np.empty(nd, np.intp)
    for i in range(lo, hi):
        row = y[i]
        if overwrite:
            row[:] = 0
        count = 0
        for d in range(nd):
            k = i + np.intp(offsets[d])
            if 0 <= k < n_cols:
                meets[count] = d
                count += 1
        for e in range(0, count - 1, 2):
            d0, d1 = meets[e], meets[e + 1]
            k0, k1 = i + np.intp(offsets[d0]), i + np.intp(offsets[d1])
            w0 = alpha * vals[d0 * diag_len + (k0 if by_column else i)]
            w1 = alpha * vals[d1 * diag_len + (k1 if by_column else i)]
            x0, x1 = x[k0], x[k1]
            for j in range(m):
                row[j] += w0 * x0[j] + w1 * x1[j]
        if count % 2:
            d0 = meets[count - 1]
            k0 = i + np.intp(offsets[d0])
            w0 = alpha * vals[d0 * diag_len + (k0 if by_column else i)]
            x0 = x[k0]
            for j in range(m):
                row[j] += w0 * x0[j]
