"""Row-major CSR into BSR(r, c) in two passes over the source, no scratch beyond stamps.

Count, then fill, each over parallel chunks of block rows (the caller turns the counts into
offsets between them). With ``c`` a power of two (:func:`block_counts`,
:func:`block_fill_stamped`) a chunk keeps one stamp a block column: the count stamps the block row
that last met it, the fill the slot of its block; no branch an entry, and a block row's columns
are sorted only where first met out of order. Otherwise, or where one stamp array a thread would
outweigh the entries (:func:`block_counts_merged`, :func:`block_fill`), the block row's ``r``
rows, each ordered and unique (the CSR level's promise), are merged by their cursors: the
smallest next column names the next block column, every cursor then moves past that block. A
block holding explicit zeros only is not stored, as everywhere in ustc: the count reads no values
unless ``drop``, and where the fill meets a zero the caller runs both passes again with ``drop``.

Extra memory: the outputs and the stamps (one index a block column a thread). The generated
writer walks the source three times with a marker array of every block column per chunk and pass.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..cache._lean import njit_cached

U = np.uintp  # subscripts are >= 0: no wraparound test


@njit_cached(inline="always")
def _open(pos, br, r, nrows, cur, end):
    """The cursors of block row ``br``: its rows' entry ranges (rows past ``nrows`` empty)."""
    for i in range(r):
        row = br * r + i
        if row < nrows:
            cur[U(i)] = np.intp(pos[U(row)])
            end[U(i)] = np.intp(pos[U(row + 1)])
        else:
            cur[U(i)] = 0
            end[U(i)] = 0


@njit_cached(inline="always")
def _smallest(crd, vals, cur, end, r, drop):
    """The smallest column among the cursors' next entries (with ``drop``, the next nonzero
    ones: cursors moved past zeros), or -1 when every cursor is done."""
    best = np.intp(-1)
    for i in range(r):
        p, e = cur[U(i)], end[U(i)]
        if drop:
            while p < e and vals[U(p)] == 0:
                p += 1
            cur[U(i)] = p
        if p < e:
            col = np.intp(crd[U(p)])
            if best < 0 or col < best:
                best = col
    return best


@njit_cached(inline="always")
def _block_of(col, c, shift):
    return col >> shift if shift >= 0 else col // c


@njit_cached(parallel=True, nogil=True)
def block_counts(pos, crd, vals, r, shift, nrows, counts, stamps, drop):
    """``counts[br + 1]``: the blocks of block row ``br`` (``len(counts) - 1`` block rows, ``ncb``
    block columns of ``1 << shift`` columns; a ``c`` not a power of two takes
    :func:`block_counts_merged`). Chunk ``k`` stamps a block column with the block row that last
    met it in ``stamps[k]`` (one stamp a block column): no branch an entry. ``drop``: explicit zeros make
    no block (else values are not read: the caller counts again with ``drop`` when the fill
    reports a zero)."""
    nbr = len(counts) - 1
    chunks = max(1, min(stamps.shape[0], nbr))
    for k in prange(chunks):
        lo, hi = nbr * k // chunks, nbr * (k + 1) // chunks
        stamp = stamps[k]
        stamp[:] = -1
        for br in range(lo, hi):
            n = 0
            for row in range(br * r, min(br * r + r, nrows)):
                for p in range(np.intp(pos[U(row)]), np.intp(pos[U(row + 1)])):
                    b = np.intp(crd[U(p)]) >> shift
                    keep = not drop or vals[U(p)] != 0
                    old = np.intp(stamp[U(b)])
                    fresh = keep and old != br
                    n += fresh
                    stamp[U(b)] = br if keep else old
            counts[U(br + 1)] = n
    return 0


@njit_cached(parallel=True, nogil=True)
def block_counts_merged(pos, crd, vals, r, c, nrows, counts, chunks, drop):
    """:func:`block_counts` for any ``c``: the block row's rows merged by their cursors."""
    nbr = len(counts) - 1
    chunks = max(1, min(chunks, nbr))
    for k in prange(chunks):
        lo, hi = nbr * k // chunks, nbr * (k + 1) // chunks
        cur, end = np.empty(r, np.intp), np.empty(r, np.intp)
        for br in range(lo, hi):
            _open(pos, br, r, nrows, cur, end)
            n = 0
            col = _smallest(crd, vals, cur, end, r, drop)
            while col >= 0:
                limit = (col // c + 1) * c
                for i in range(r):
                    p, e = cur[U(i)], end[U(i)]
                    while p < e and np.intp(crd[U(p)]) < limit:
                        p += 1
                    cur[U(i)] = p
                n += 1
                col = _smallest(crd, vals, cur, end, r, drop)
            counts[U(br + 1)] = n
    return 0


@njit_cached(parallel=True, nogil=True)
def block_fill(pos, crd, vals, r, c, shift, nrows, offsets, crd_out, vals_out, chunks, drop):
    """Block row ``br``'s blocks at ``offsets[br]`` onwards: ``crd_out`` their block columns,
    ``vals_out`` their ``r * c`` values row-major (every element written), the blocks those of
    :func:`block_counts` with the same ``drop``. Returns the number of zeros written from the
    source (without ``drop``, nonzero means a block may hold zeros only: count again)."""
    nbr = len(offsets) - 1
    chunks = max(1, min(chunks, nbr))
    rc = r * c
    met = 0
    for k in prange(chunks):
        lo, hi = nbr * k // chunks, nbr * (k + 1) // chunks
        cur, end = np.empty(r, np.intp), np.empty(r, np.intp)
        for br in range(lo, hi):
            _open(pos, br, r, nrows, cur, end)
            q = np.intp(offsets[U(br)])
            col = _smallest(crd, vals, cur, end, r, drop)
            while col >= 0:
                bc = _block_of(col, c, shift)
                base = bc * c
                limit = base + c
                crd_out[U(q)] = bc
                at = q * rc
                for j in range(rc):
                    vals_out[U(at + j)] = 0
                for i in range(r):
                    p, e = cur[U(i)], end[U(i)]
                    row_at = at + i * c - base
                    while p < e:
                        col_p = np.intp(crd[U(p)])
                        if col_p >= limit:
                            break
                        v = vals[U(p)]
                        vals_out[U(row_at + col_p)] = v
                        if v == 0:
                            met += 1
                        p += 1
                    cur[U(i)] = p
                q += 1
                col = _smallest(crd, vals, cur, end, r, drop)
    return met


@njit_cached(parallel=True, nogil=True)
def block_fill_stamped(pos, crd, vals, r, shift, nrows, offsets, crd_out, vals_out, stamps, drop):
    """:func:`block_fill` for ``c = 1 << shift`` without a merge: chunk ``k`` stamps each block
    column with its block's slot in ``stamps[k]`` as the block row's entries meet it (no branch an
    entry), the block row's columns are sorted where first met out of order (a few, in cache),
    their values zeroed, then every entry is placed through its stamp. Returns the zeros met."""
    nbr = len(offsets) - 1
    chunks = max(1, min(stamps.shape[0], nbr))
    c = np.intp(1) << shift
    rc = r * c
    met = 0
    for k in prange(chunks):
        lo, hi = nbr * k // chunks, nbr * (k + 1) // chunks
        stamp = stamps[k]
        stamp[:] = -1
        for br in range(lo, hi):
            q0, q1 = np.intp(offsets[U(br)]), np.intp(offsets[U(br + 1)])
            if q1 == q0:
                continue  # its entries (explicit zeros only) make no block
            rows_end = min(br * r + r, nrows)
            q = q0
            for row in range(br * r, rows_end):
                for p in range(np.intp(pos[U(row)]), np.intp(pos[U(row + 1)])):
                    b = np.intp(crd[U(p)]) >> shift
                    old = np.intp(stamp[U(b)])
                    fresh = (not drop or vals[U(p)] != 0) and old < q0
                    at = min(q, q1 - 1)
                    crd_out[U(at)] = b if fresh else crd_out[U(at)]
                    stamp[U(b)] = q if fresh else old
                    q += fresh
            ordered = True
            for j in range(q0 + 1, q1):
                if crd_out[U(j)] < crd_out[U(j - 1)]:
                    ordered = False
            if not ordered:
                for j in range(q0 + 1, q1):
                    key = crd_out[U(j)]
                    hole = j - 1
                    while hole >= q0 and crd_out[U(hole)] > key:
                        crd_out[U(hole + 1)] = crd_out[U(hole)]
                        hole -= 1
                    crd_out[U(hole + 1)] = key
                for j in range(q0, q1):
                    stamp[U(np.intp(crd_out[U(j)]))] = j
            for j in range(q0 * rc, q1 * rc):
                vals_out[U(j)] = 0
            for row in range(br * r, rows_end):
                row_at = (row - br * r) * c
                for p in range(np.intp(pos[U(row)]), np.intp(pos[U(row + 1)])):
                    col = np.intp(crd[U(p)])
                    v = vals[U(p)]
                    met += v == 0
                    if not drop or v != 0:  # a dropped zero's stamp may be another block row's
                        vals_out[U(np.intp(stamp[U(col >> shift)]) * rc + row_at + (col & (c - 1)))] = v
    return met
