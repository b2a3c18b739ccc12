"""Kernels of the Matrix Market reader (:mod:`ustc.tensor.io`): a coordinate file's entries
straight into rows of a CSR-family or COO tensor.

The entries, as the file lists them (0-based), are bucketed by their major coordinate in one
parallel counting sort (each chunk of the entries counts its rows, the chunks' runs of a row
are laid out in chunk order, each chunk scatters its own), a symmetric, skew-symmetric or
hermitian file's off-diagonal entries also at their mirror position (value as is, negated or
conjugated): the expansion costs no pass of its own. :func:`ustc.tensor.kernels.sort_sum_rows`
then sorts each row, sums duplicates and drops zeros. :func:`entry_order` is the one parallel
pass that finds a file already sorted by row or by column (no sort then, or none after the
stable bucketing); :func:`off_diagonal` / :func:`mirror_append` expand a mirrored file in file
order, as ``scipy.io.mmread`` does, for the reader's default.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..cache._lean import njit_cached

U = np.uintp  # an unsigned subscript: no wraparound test

#: symmetry codes of :func:`bucket_counts` / :func:`bucket_scatter`
GENERAL, SYMMETRIC, SKEW, HERMITIAN = 0, 1, 2, 3

#: entries per chunk of the counting sort (at least; the chunk count follows the threads)
CHUNK_ENTRIES = 1 << 16


@njit_cached(parallel=True)
def bucket_counts(major, minor, n_major, n_minor, mirror, chunks):
    """``(counts, ok)``: ``counts[c, r]`` = entries chunk ``c`` of the file's entries places in
    major row ``r`` (mirrored ones included); ``ok`` False when a coordinate lies outside
    ``[0, n_major) x [0, n_minor)`` (the counts are then unusable)."""
    n = major.size
    counts = np.zeros((chunks, n_major), dtype=np.int64)
    bad = np.zeros(chunks, dtype=np.bool_)
    for c in prange(chunks):
        lo, hi = n * c // chunks, n * (c + 1) // chunks
        for k in range(lo, hi):
            r, q = major[U(k)], minor[U(k)]
            if r < 0 or r >= n_major or q < 0 or q >= n_minor:
                bad[c] = True
                break
            counts[c, U(r)] += 1
            if mirror != GENERAL and r != q:
                counts[c, U(q)] += 1
    return counts, not bad.any()


@njit_cached()
def bucket_starts(counts, pos):
    """Turns ``counts`` into each chunk's first position in each row (rows in order, a row's
    chunks in order) and fills ``pos`` (rows + 1) with the row offsets."""
    chunks, rows = counts.shape
    at = 0
    pos[0] = 0
    for r in range(rows):
        for c in range(chunks):
            k = counts[c, r]
            counts[c, r] = at
            at += k
        pos[r + 1] = at


@njit_cached(parallel=True)
def bucket_scatter(major, minor, values, mirror, starts, crd, vals):
    """Each chunk writes its entries at its positions of their rows (``starts`` from
    :func:`bucket_starts`, advanced in place): the minor coordinate into ``crd``, the value into
    ``vals``; an off-diagonal entry of a mirrored file also at ``(minor, major)``."""
    n = major.size
    chunks = starts.shape[0]
    for c in prange(chunks):
        lo, hi = n * c // chunks, n * (c + 1) // chunks
        for k in range(lo, hi):
            r, q, v = U(major[U(k)]), U(minor[U(k)]), values[U(k)]
            o = U(starts[c, r])
            crd[o] = q
            vals[o] = v
            starts[c, r] = o + 1
            if mirror != GENERAL and r != q:
                o = U(starts[c, q])
                crd[o] = r
                if mirror == SKEW:
                    vals[o] = -v
                elif mirror == HERMITIAN:
                    vals[o] = np.conj(v)
                else:
                    vals[o] = v
                starts[c, q] = o + 1


@njit_cached()
def compact_in_place(pos, crd, vals, counts):
    """Keeps the first ``counts[r]`` entries of each row ``r`` (``pos`` its old offsets), packed
    from the front of ``crd`` / ``vals`` in place, and rewrites ``pos`` to match; returns the
    entries kept. One sequential pass that moves only rows after the first shortened one: a
    few duplicates in a large file cost no second pair of arrays (a forward copy never
    overwrites what it has still to read)."""
    rows = counts.size
    o = 0
    for r in range(rows):
        lo, c = pos[r], counts[r]
        pos[r] = o
        if o != lo:
            for a in range(c):
                crd[U(o + a)] = crd[U(lo + a)]
                vals[U(o + a)] = vals[U(lo + a)]
        o += c
    pos[rows] = o
    return o


@njit_cached(parallel=True)
def rows_canonical(pos, crd, chunks):
    """Whether every row's coordinates strictly increase (sorted, no duplicates); rows split
    into ``chunks`` parallel runs."""
    n = pos.size - 1
    bad = np.zeros(chunks, dtype=np.bool_)
    for c in prange(chunks):
        for i in range(n * c // chunks, n * (c + 1) // chunks):
            for p in range(pos[U(i)] + 1, pos[U(i + 1)]):
                if crd[U(p)] <= crd[U(p - 1)]:
                    bad[c] = True
                    break
            if bad[c]:
                break
    return not bad.any()


@njit_cached(parallel=True)
def mirror_symmetry(pos, crd, vals, chunks):
    """The Matrix Market symmetry of the square matrix with canonical rows ``pos`` / ``crd`` /
    ``vals``: ``SYMMETRIC`` when every entry ``(i, j, v)`` has its mirror ``(j, i, v)``,
    else ``SKEW`` for ``(j, i, -v)``, else ``HERMITIAN`` for ``(j, i, conj(v))`` (complex
    values only), else ``GENERAL``. Each entry looks its mirror up by binary search in row
    ``j``; a chunk of rows stops at the first entry that rules every kind out, and the others
    stop at their next row once one has (a general matrix usually costs a few rows)."""
    n = pos.size - 1
    sym = np.ones(chunks, dtype=np.bool_)
    skew = np.ones(chunks, dtype=np.bool_)
    herm = np.ones(chunks, dtype=np.bool_)
    dead = np.zeros(1, dtype=np.bool_)
    for c in prange(chunks):
        s, k, h = True, True, True
        for i in range(n * c // chunks, n * (c + 1) // chunks):
            if dead[0]:
                break
            for p in range(pos[U(i)], pos[U(i + 1)]):
                j = crd[U(p)]
                lo, hi = pos[U(j)], pos[U(j + 1)]
                while lo < hi:                        # first position in row j with crd >= i
                    mid = (lo + hi) // 2
                    if crd[U(mid)] < i:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo == pos[U(j + 1)] or crd[U(lo)] != i:
                    s = k = h = False
                else:
                    v, w = vals[U(p)], vals[U(lo)]
                    s = s and v == w
                    k = k and v == -w
                    h = h and v == np.conj(w)
                if not (s or k or h):
                    dead[0] = True
                    break
            if not (s or k or h):
                break
        sym[c], skew[c], herm[c] = s, k, h
    if dead[0]:
        return GENERAL
    if sym.all():
        return SYMMETRIC
    if skew.all():
        return SKEW
    if herm.all():
        return HERMITIAN
    return GENERAL


#: flags of :func:`entry_order`
IN_RANGE, ROW_MAJOR, COLUMN_MAJOR = 1, 2, 4


@njit_cached(parallel=True)
def entry_order(major, minor, values, n_major, n_minor, chunks):
    """``(flags, zeros)`` of a file's entries in one parallel pass: ``IN_RANGE`` when every
    coordinate lies in ``[0, n_major) x [0, n_minor)``, ``ROW_MAJOR`` when the pairs
    ``(major, minor)`` increase strictly (canonical order: sorted, no duplicates),
    ``COLUMN_MAJOR`` when ``(minor, major)`` do; ``zeros``: the values equal to zero.
    Branch-free comparisons: the pass costs about one read of the entries."""
    n = major.size
    flags = np.zeros(chunks, dtype=np.int64)
    zeros = np.zeros(chunks, dtype=np.int64)
    for c in prange(chunks):
        lo, hi = n * c // chunks, n * (c + 1) // chunks
        inside, row, col, z = True, True, True, 0
        pr, pq = major[U(lo - 1)] if lo > 0 else -1, minor[U(lo - 1)] if lo > 0 else -1
        for k in range(lo, hi):
            r, q = major[U(k)], minor[U(k)]
            inside &= (r >= 0) & (r < n_major) & (q >= 0) & (q < n_minor)
            row &= (r > pr) | ((r == pr) & (q > pq))
            col &= (q > pq) | ((q == pq) & (r > pr))
            z += values[U(k)] == 0
            pr, pq = r, q
        flags[c] = (IN_RANGE if inside else 0) | (ROW_MAJOR if row else 0) | (COLUMN_MAJOR if col else 0)
        zeros[c] = z
    out = IN_RANGE | ROW_MAJOR | COLUMN_MAJOR
    for c in range(chunks):
        out &= flags[c]
    return out, zeros.sum()


@njit_cached(parallel=True)
def off_diagonal(rows, cols, chunks):
    """``off``: ``off[c + 1] - off[c]`` entries of chunk ``c`` have ``rows[k] != cols[k]``
    (prefix sums over the chunks; ``off[chunks]`` in all)."""
    n = rows.size
    off = np.zeros(chunks + 1, dtype=np.int64)
    for c in prange(chunks):
        lo, hi = n * c // chunks, n * (c + 1) // chunks
        k_off = 0
        for k in range(lo, hi):
            k_off += rows[U(k)] != cols[U(k)]
        off[c + 1] = k_off
    for c in range(chunks):
        off[c + 1] += off[c]
    return off


@njit_cached(parallel=True)
def mirror_append(rows, cols, values, mirror, off, rows_out, cols_out, vals_out):
    """A symmetric, skew-symmetric or hermitian file's entries as ``scipy.io.mmread`` expands
    them: the stored entries as listed, then every off-diagonal one mirrored (value negated or
    conjugated as ``mirror`` says), in file order. ``off`` is :func:`off_diagonal`'s (its
    chunks run in parallel); ``*_out`` hold ``rows.size + off[-1]`` entries."""
    n = rows.size
    chunks = off.size - 1
    for c in prange(chunks):
        lo, hi = n * c // chunks, n * (c + 1) // chunks
        o = U(n + off[c])
        for k in range(lo, hi):
            r, q, v = rows[U(k)], cols[U(k)], values[U(k)]
            rows_out[U(k)], cols_out[U(k)], vals_out[U(k)] = r, q, v
            if r != q:
                rows_out[o], cols_out[o] = q, r
                if mirror == SKEW:
                    vals_out[o] = -v
                elif mirror == HERMITIAN:
                    vals_out[o] = np.conj(v)
                else:
                    vals_out[o] = v
                o += U(1)
