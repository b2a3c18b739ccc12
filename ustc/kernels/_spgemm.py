"""CSR x CSR -> CSR (Gustavson), hand-written: a counting pass, then a filling pass.

Rows are split into chunks of about equal work (multiply-adds, not rows, so a
few long rows do not leave one thread with all of it). Each chunk owns a
marker array and a dense accumulator spanning only the columns its rows can
reach, so no two threads share state and a banded matrix does not pay for
``n_cols`` entries per chunk. Column indices of each output row are sorted,
so the result is a canonical CSR (ordered, unique), as the format promises —
unless the caller asks for CSR with a nonordered column level, which skips the
per-row sort (SciPy's SpGEMM does not sort either).

Subscripts are cast to ``np.uintp``: Numba then drops its negative-index
wraparound branch from every access, which halved the time of both passes.

The spans rely on that promise for ``b``: its rows are ordered, so
``bcrd[bpos[k]]`` and ``bcrd[bpos[k + 1] - 1]`` are row ``k``'s extreme columns.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..cache._lean import njit_cached

U = np.uintp  # an unsigned subscript: no wraparound test (every subscript here is >= 0)


@njit_cached(nogil=True, parallel=True)
def row_work(apos, acrd, bpos, n_rows):
    """``work[i + 1] - work[i]`` = multiply-adds of output row ``i`` (``sum_k |b_k|`` over row ``i`` of ``a``)."""
    flops = np.zeros(n_rows + 1, dtype=np.int64)
    for i in prange(n_rows):
        s = 0
        for pa in range(apos[U(i)], apos[U(i + 1)]):
            k = acrd[U(pa)]
            s += bpos[U(k + 1)] - bpos[U(k)]
        flops[i + 1] = s
    return np.cumsum(flops)


def chunk_bounds(work: np.ndarray, chunks: int) -> np.ndarray:
    """Row bounds ``b[0] = 0 <= ... <= b[chunks] = n_rows`` splitting the cumulative ``work`` evenly."""
    n_rows = len(work) - 1
    targets = work[-1] * np.arange(1, chunks, dtype=np.float64) / chunks
    inner = np.searchsorted(work, targets, side="left").clip(0, n_rows)
    return np.concatenate(([0], inner, [n_rows])).astype(np.int64)


@njit_cached(nogil=True)
def _span(apos, acrd, bpos, bcrd, lo, hi):
    """``(first, last)`` column any row ``lo <= i < hi`` of ``a @ b`` can hold (``last < first`` if none)."""
    first, last = np.int64(2**62), np.int64(-1)
    for pa in range(apos[U(lo)], apos[U(hi)]):
        k = acrd[U(pa)]
        if bpos[U(k + 1)] > bpos[U(k)]:
            first = min(first, np.int64(bcrd[U(bpos[U(k)])]))
            last = max(last, np.int64(bcrd[U(bpos[U(k + 1)] - 1)]))
    return first, last


@njit_cached(nogil=True, parallel=True)
def spgemm_count(apos, acrd, bpos, bcrd, bounds):
    """``(sizes, spans)``: ``sizes[i + 1]`` = number of distinct columns of output row ``i``
    (``sizes[0] = 0``); ``spans[ch]`` = chunk ``ch``'s column span (``_span``), for the filling pass."""
    n_rows = bounds[-1]
    sizes = np.zeros(n_rows + 1, dtype=np.int64)
    spans = np.empty((len(bounds) - 1, 2), dtype=np.int64)
    for ch in prange(len(bounds) - 1):
        lo, hi = bounds[ch], bounds[ch + 1]
        first, last = _span(apos, acrd, bpos, bcrd, lo, hi)
        spans[ch, 0], spans[ch, 1] = first, last
        mark = np.full(max(last - first + 1, 0), -1, dtype=np.int32)
        for i in range(lo, hi):
            row = np.int32(i)
            count = 0
            for pa in range(apos[U(i)], apos[U(i + 1)]):
                k = acrd[U(pa)]
                for pb in range(bpos[U(k)], bpos[U(k + 1)]):
                    j = U(bcrd[U(pb)] - first)
                    if mark[j] != row:
                        mark[j] = row
                        count += 1
            sizes[U(i + 1)] = count
    return sizes, spans


@njit_cached(nogil=True)
def _sort_small(a, lo, hi):
    """Insertion sort of ``a[lo:hi]`` (output rows are short)."""
    for p in range(lo + 1, hi):
        v = a[U(p)]
        q = p - 1
        while q >= lo and a[U(q)] > v:
            a[U(q + 1)] = a[U(q)]
            q -= 1
        a[U(q + 1)] = v


@njit_cached(nogil=True, parallel=True)
def spgemm_fill(apos, acrd, avals, bpos, bcrd, bvals, pos, crd, vals, bounds, spans, ordered):
    """Columns and values of every output row at ``pos[i]``; columns sorted when ``ordered``, else
    in the order the row first reached them."""
    for ch in prange(len(bounds) - 1):
        lo, hi = bounds[ch], bounds[ch + 1]
        first, last = spans[ch, 0], spans[ch, 1]
        width = max(last - first + 1, 0)
        mark = np.full(width, -1, dtype=np.int32)
        acc = np.zeros(width, dtype=vals.dtype)
        for i in range(lo, hi):
            row = np.int32(i)
            start = pos[U(i)]
            top = start
            for pa in range(apos[U(i)], apos[U(i + 1)]):
                k = acrd[U(pa)]
                av = avals[U(pa)]
                for pb in range(bpos[U(k)], bpos[U(k + 1)]):
                    j = U(bcrd[U(pb)] - first)
                    if mark[j] != row:
                        mark[j] = row
                        crd[U(top)] = j
                        top += 1
                    acc[j] += av * bvals[U(pb)]
            if ordered:
                if top - start < 64:
                    _sort_small(crd, start, top)
                else:
                    crd[start:top].sort()
            for p in range(start, top):
                j = U(crd[U(p)])
                vals[U(p)] = acc[j]
                acc[j] = 0
                crd[U(p)] = j + first
