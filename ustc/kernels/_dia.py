"""Diagonal SpMV (DIAI / DIAJ), hand-written: rows in tiles, diagonals as 1-D slices.

Row tiles run in parallel; inside a tile every diagonal is one contiguous
stream of values and one contiguous stream of ``x`` (no index arrays are read
besides the offsets), which is what made DIA ~1.8x faster than 2-D indexing
on the CPU (design §6). A tile goes block by block of :data:`BLOCK` rows, and
each block sums up to :data:`GROUP` diagonals in one pass (all seven of the 3-D
stencil), so every value stream keeps running and the block of ``y`` is
written once per group of diagonals, not once per diagonal.

With ``overwrite`` (``y = alpha * A @ x``, no ``c``) the first group stores
into the block instead of adding (the rows it misses zeroed): the caller skips
zero-filling ``y``, a pass that wrote all of ``y`` (and read its lines for
ownership) before the kernel read it back.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..cache._lean import njit_cached

TILE = 16384  # rows per parallel task (measured on the stencil: 2,048 rows 4.7 ms, 16,384 rows 4.3 ms)
BLOCK = 4096  # rows of y that a group of diagonals adds into at a time: 32 KB of float64, in L1 / L2
GROUP = 8     # diagonals summed in one pass over a block (the 3-D 7-point stencil's 7 in one)


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
    """Rows ``[lo, hi)`` of ``y += alpha * A @ x`` (``=`` with ``overwrite``: the first group of
    diagonals stores), block by block."""
    for s in range(lo, hi, BLOCK):
        t = min(s + BLOCK, hi)
        if overwrite and offsets.size == 0:
            y[s:t] = 0
        for d in range(0, offsets.size, GROUP):
            _group(offsets, vals, x, y, alpha, n_cols, diag_len, by_column, s, t, d, min(GROUP, offsets.size - d),
                   overwrite and d == 0)


@njit_cached(nogil=True, inline="always")
def _rows(o, lo, hi, n_cols):
    """The rows ``[first, last)`` of ``[lo, hi)`` that offset ``o`` meets (none: first >= last)."""
    return max(lo, -o), min(hi, n_cols - o)


@njit_cached(nogil=True)
def _pair(offsets, vals, x, diag_len, by_column, e, a, b):
    """Diagonal ``e``'s values for rows ``[a, b)`` (all of which it meets) and the ``x`` they multiply."""
    o = np.int64(offsets[e])
    base = e * diag_len + (o if by_column else 0)
    return vals[base + a:base + b], x[a + o:b + o]


@njit_cached(nogil=True)
def _group(offsets, vals, x, y, alpha, n_cols, diag_len, by_column, lo, hi, d, g, store):
    """``y[lo:hi] += alpha * (diagonals d .. d + g - 1 of A) @ x`` (``=`` with ``store``): the rows
    that all ``g`` meet in one pass, the rows only some of them meet (blocks at the matrix's
    edges; zeroed first with ``store``) diagonal by diagonal."""
    a, b = lo, hi
    for e in range(d, d + g):
        ea, eb = _rows(np.int64(offsets[e]), lo, hi, n_cols)
        a, b = max(a, ea), min(b, eb)
    if a >= b:
        a = b = hi
    if store:
        y[lo:a] = 0
        y[b:hi] = 0
    for e in range(d, d + g):
        ea, eb = _rows(np.int64(offsets[e]), lo, hi, n_cols)
        for s, t in ((ea, min(eb, a)), (max(ea, b), eb)):
            if s < t:
                v, u = _pair(offsets, vals, x, diag_len, by_column, e, s, t)
                _add(y[s:t], (v,), (u,), alpha, False)
    if a >= b:
        return
    # one call per group size: the tuples' length is a compile-time constant, so the sum unrolls.
    # (Zero streams padding every group to 4 or 8 compiled in a third of the time but cost 14% on
    # the stencil's 7 diagonals and 31% on a tridiagonal matrix.)
    w = y[a:b]
    v0, u0 = _pair(offsets, vals, x, diag_len, by_column, d, a, b)
    if g == 1:
        return _add(w, (v0,), (u0,), alpha, store)
    v1, u1 = _pair(offsets, vals, x, diag_len, by_column, d + 1, a, b)
    if g == 2:
        return _add(w, (v0, v1), (u0, u1), alpha, store)
    v2, u2 = _pair(offsets, vals, x, diag_len, by_column, d + 2, a, b)
    if g == 3:
        return _add(w, (v0, v1, v2), (u0, u1, u2), alpha, store)
    v3, u3 = _pair(offsets, vals, x, diag_len, by_column, d + 3, a, b)
    if g == 4:
        return _add(w, (v0, v1, v2, v3), (u0, u1, u2, u3), alpha, store)
    v4, u4 = _pair(offsets, vals, x, diag_len, by_column, d + 4, a, b)
    if g == 5:
        return _add(w, (v0, v1, v2, v3, v4), (u0, u1, u2, u3, u4), alpha, store)
    v5, u5 = _pair(offsets, vals, x, diag_len, by_column, d + 5, a, b)
    if g == 6:
        return _add(w, (v0, v1, v2, v3, v4, v5), (u0, u1, u2, u3, u4, u5), alpha, store)
    v6, u6 = _pair(offsets, vals, x, diag_len, by_column, d + 6, a, b)
    if g == 7:
        return _add(w, (v0, v1, v2, v3, v4, v5, v6), (u0, u1, u2, u3, u4, u5, u6), alpha, store)
    v7, u7 = _pair(offsets, vals, x, diag_len, by_column, d + 7, a, b)
    return _add(w, (v0, v1, v2, v3, v4, v5, v6, v7), (u0, u1, u2, u3, u4, u5, u6, u7), alpha, store)


@njit_cached(nogil=True)
def _add(w, vs, xs, alpha, store):
    """``w += alpha * sum_d vs[d] * xs[d]`` (``=`` with ``store``: ``w``'s old values, maybe NaN,
    never read), the ``len(vs)`` streams summed in one pass: a stencil's 7 diagonals in one pass
    measured 4.0 ms on one thread against 5.5 for a pass of 4 then one of 3, and 4.7 for a
    zero-fill then one pass adding (side 114, DIAI, float64)."""
    if store:
        for k in range(w.size):
            w[k] = alpha * _dot(vs, xs, k)
    else:
        for k in range(w.size):
            w[k] += alpha * _dot(vs, xs, k)


@njit_cached(nogil=True, inline="always")
def _dot(vs, xs, k):
    """``sum_d vs[d][k] * xs[d][k]`` over the tuples (a constant trip count: unrolled)."""
    s = vs[0][k] * xs[0][k]
    for d in range(1, len(vs)):
        s += vs[d][k] * xs[d][k]
    return s


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
