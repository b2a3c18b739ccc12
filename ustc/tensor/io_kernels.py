"""Kernels of the Matrix Market reader (:mod:`ustc.tensor.io`): a coordinate file's entries
straight into rows of a CSR-family or COO tensor.

The entries, as the file lists them (0-based), are bucketed by their major coordinate in one
parallel counting sort (each chunk of the entries counts its rows, the chunks' runs of a row
are laid out in chunk order, each chunk scatters its own), a symmetric, skew-symmetric or
hermitian file's off-diagonal entries also at their mirror position (value as is, negated or
conjugated): the expansion costs no pass of its own. :func:`ustc.tensor.kernels.sort_sum_rows`
then sorts each row, sums duplicates and drops zeros.
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
