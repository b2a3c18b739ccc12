"""CSR x CSR -> CSR (Gustavson), hand-written: a counting pass then a filling pass, or, for a
product that compresses little (about one entry per multiply-add, as a power-law graph's
A @ A), one pass into upper bounds, chunks then moved down into place (:func:`product` chooses).

Rows are split into chunks of about equal work (multiply-adds, not rows, so a
few long rows do not leave one thread with all of it). Each chunk owns a
marker array and a dense accumulator spanning only the columns its rows can
reach, so no two threads share state and a banded matrix does not pay for
``n_cols`` entries per chunk. Column indices of each output row are sorted,
so the result is a canonical CSR (ordered, unique), as the format promises —
unless the caller asks for CSR with a nonordered column level, which skips the
per-row sort (SciPy's SpGEMM does not sort either). Short rows are insertion-sorted; longer
ones are read off the row markers where dense in their span, else bucketed by high bits (the
one pass into bounds insertion-sorts rows up to TINY with their values and reads longer ones off
two levels of bitmaps).

Subscripts are cast to ``np.uintp``: Numba then drops its negative-index
wraparound branch from every access, which halved the time of both passes.

The spans rely on that promise for ``b``: its rows are ordered, so
``bcrd[bpos[k]]`` and ``bcrd[bpos[k + 1] - 1]`` are row ``k``'s extreme columns.
"""

from __future__ import annotations

import numpy as np
from numba import prange
from numba.cpython.unsafe.numbers import trailing_zeros

from ..cache._lean import njit_cached
from ._prefetch import prefetch

U = np.uintp  # an unsigned subscript: no wraparound test (every subscript here is >= 0)
SHORT = 48  # rows up to this long are insertion-sorted
BIN = 32    # a long row's buckets are insertion-sorted when none holds more than this
TINY = 32   # rows up to this long sort by insertion (values moving along) in the one pass, longer ones by bitmaps
AHEAD = 6   # the one pass prefetches the row of b this many entries of a ahead (3-12 measured alike)


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


@njit_cached(nogil=True)
def _sort_long(crd, lo, hi, mark, row, spare, bins):
    """Sort the distinct columns ``crd[lo:hi]`` (``mark[j] == row`` marks each): read off the
    marks where the row fills a quarter of its span, else :func:`_bucket_sort`."""
    n = hi - lo
    least, most = crd[U(lo)], crd[U(lo)]
    for p in range(lo + 1, hi):
        least, most = min(least, crd[U(p)]), max(most, crd[U(p)])
    if most - least >= 4 * n:
        _bucket_sort(crd, lo, hi, least, most, spare, bins)
        return
    p = lo
    for j in range(least, most + 1):
        if mark[U(j)] == row:
            crd[U(p)] = j
            p += 1


@njit_cached(nogil=True)
def _sort_pairs(crd, vals, lo, hi, first):
    """Insertion sort of the columns ``crd[lo:hi]`` with their values ``vals[lo:hi]`` (a short row,
    in L1), then ``first`` added to each column."""
    for p in range(lo + 1, hi):
        c, v = crd[U(p)], vals[U(p)]
        q = p - 1
        while q >= lo and crd[U(q)] > c:
            crd[U(q + 1)], vals[U(q + 1)] = crd[U(q)], vals[U(q)]
            q -= 1
        crd[U(q + 1)], vals[U(q + 1)] = c, v
    for p in range(lo, hi):
        crd[U(p)] += first


@njit_cached(nogil=True)
def _sort_bits(crd, vals, lo, hi, first, mark, bits, summary, held):
    """Sort the distinct columns ``crd[lo:hi]`` (offsets from ``first``; ``mark[j]`` is column
    ``j``'s position) with their values, then add ``first``: each column is set in the bitmap
    ``bits`` and its word ``j >> 6`` in ``summary`` (a bitmap of ``bits``' nonzero words; both in
    L1 and left clear), the values copied aside into ``held``, then the summary's words over the
    row's span and each nonzero word of ``bits`` read off in order, each value fetched through
    its column's mark: O(entries + span / 4096)."""
    one = np.uint64(1)
    least, most = crd[U(lo)], crd[U(lo)]
    for p in range(lo, hi):
        j = U(crd[U(p)])
        least, most = min(least, crd[U(p)]), max(most, crd[U(p)])
        bits[j >> U(6)] |= one << np.uint64(j & U(63))
        summary[j >> U(12)] |= one << np.uint64((j >> U(6)) & U(63))
        held[U(p - lo)] = vals[U(p)]
    p = lo
    for s in range(least >> 12, (most >> 12) + 1):
        high = summary[U(s)]
        summary[U(s)] = 0
        while high:
            w = (s << 6) + np.int64(trailing_zeros(high))
            high &= high - one
            word = bits[U(w)]
            bits[U(w)] = 0
            while word:
                j = (w << 6) + np.int64(trailing_zeros(word))
                crd[U(p)] = j + first
                vals[U(p)] = held[U(mark[U(j)] - lo)]
                p += 1
                word &= word - one


@njit_cached(nogil=True)
def _bucket_sort(crd, lo, hi, least, most, spare, bins):
    """Sort the distinct values ``crd[lo:hi]`` in ``[least, most]``: bucketed by high bits into
    ``spare`` (about one bucket per entry), each bucket insertion-sorted (the library sort where
    one holds over :data:`BIN`), copied back."""
    n = hi - lo
    shift = 0
    while (most - least) >> shift >= n:
        shift += 1
    nb = ((most - least) >> shift) + 1
    bins[:nb + 1] = 0
    for p in range(lo, hi):
        bins[U(((crd[U(p)] - least) >> shift) + 1)] += 1
    fullest = 0
    for t in range(nb):
        fullest = max(fullest, bins[U(t + 1)])
        bins[U(t + 1)] += bins[U(t)]
    for p in range(lo, hi):
        b = U((crd[U(p)] - least) >> shift)
        spare[U(bins[b])] = crd[U(p)]
        bins[b] += 1
    if fullest <= BIN:
        _sort_small(spare, 0, n)  # each entry moves within its bucket only
    else:
        spare[:n].sort()
    crd[lo:hi] = spare[:n]


@njit_cached(nogil=True, parallel=True)
def spgemm_fill(apos, acrd, avals, bpos, bcrd, bvals, pos, bounds, spans, crd, vals, ordered):
    """The filling pass after :func:`spgemm_count`: output row ``i``'s columns and values at
    ``crd[pos[i]:pos[i + 1]]``, ``vals[...]`` (columns sorted when ``ordered``, else in the order
    the row first reached them), chunk ``ch``'s rows over a dense accumulator spanning
    ``spans[ch]`` (:func:`_dense_chunk`)."""
    for ch in prange(len(bounds) - 1):
        _dense_chunk(apos, acrd, avals, bpos, bcrd, bvals, pos, bounds[ch], bounds[ch + 1],
                     spans[ch, 0], spans[ch, 1], crd, vals, ordered)


@njit_cached(nogil=True, parallel=True)
def spgemm_bounded(apos, acrd, avals, bpos, bcrd, bvals, work, bounds, crd, vals, sizes, ordered):
    """One pass into upper bounds: chunk ``ch``'s rows packed one after another from its first
    row's bound ``work[bounds[ch]]`` (the products of the rows before it; each row starts at or
    before its own bound, so it writes below ``work[i + 1]``), row ``i``'s entry count into
    ``sizes[i + 1]`` (:func:`_inplace_chunk`).

    The two passes keep different workspaces, each measured slower on the other's products. The
    filling pass (a stencil: several products an entry, rows short and banded) adds into a dense
    accumulator; one pass into bounds (a power-law graph: about one product an entry, rows wide)
    adds in place at each column's output position, so the scattered workspace is the index-wide
    marks alone, not marks plus a value a column (power-law 200k A @ A: CPU -10 to -15%)."""
    for ch in prange(len(bounds) - 1):
        _inplace_chunk(apos, acrd, avals, bpos, bcrd, bvals, work, bounds[ch], bounds[ch + 1],
                       crd, vals, sizes, ordered)


@njit_cached(nogil=True)
def _dense_chunk(apos, acrd, avals, bpos, bcrd, bvals, starts, lo, hi, first, last, crd, vals, ordered):
    """Rows ``lo <= i < hi`` from ``starts[lo]`` over a dense accumulator of columns ``first..last``
    (a bitmap of the columns instead of int32 row stamps measured ~10% slower here)."""
    width = max(last - first + 1, 0)
    mark = np.full(width, -1, dtype=np.int32)
    acc = np.empty(width, dtype=vals.dtype)   # a column's first product stores, later ones add
    spare, bins = np.empty(width, dtype=crd.dtype), np.empty(width + 1, dtype=np.int64)
    top = starts[U(lo)]
    for i in range(lo, hi):
        row = np.int32(i)
        start = top
        for pa in range(apos[U(i)], apos[U(i + 1)]):
            k = acrd[U(pa)]
            av = avals[U(pa)]
            for pb in range(bpos[U(k)], bpos[U(k + 1)]):
                j = U(bcrd[U(pb)] - first)
                if mark[j] != row:
                    mark[j] = row
                    crd[U(top)] = j
                    top += 1
                    acc[j] = av * bvals[U(pb)]
                else:
                    acc[j] += av * bvals[U(pb)]
        if ordered:
            if top - start <= SHORT:
                _sort_small(crd, start, top)
            else:
                _sort_long(crd, start, top, mark, row, spare, bins)
        for p in range(start, top):
            j = U(crd[U(p)])
            vals[U(p)] = acc[j]
            crd[U(p)] = j + first


@njit_cached(nogil=True)
def _inplace_chunk(apos, acrd, avals, bpos, bcrd, bvals, starts, lo, hi, crd, vals, sizes, ordered):
    """Rows ``lo <= i < hi`` packed from ``starts[lo]``, each row's count into ``sizes[i + 1]``.
    Column ``j``'s sum accumulates at its output position ``mark[j]`` (positions grow through
    the chunk, so one at or past the row's start marks a column of this row: no reset). The
    first line of each row of ``b`` is prefetched :data:`AHEAD` entries of ``a`` ahead (rows of
    ``b`` are reached in random order, a few entries each). A sorted
    row up to :data:`TINY` entries is insertion-sorted with its values (:func:`_sort_pairs`), a
    longer one through two levels of bitmaps (a 64th and a 4096th of the span: in L1) set after
    the row is summed, not in its product loop (:func:`_sort_bits`)."""
    first, last = _span(apos, acrd, bpos, bcrd, lo, hi)
    width = max(last - first + 1, 0)
    mark = np.full(width, -1, dtype=crd.dtype)   # positions fit crd's width (it indexes them)
    bits = np.zeros((width + 63) >> 6 if ordered else 0, dtype=np.uint64)
    summary = np.zeros((width + 4095) >> 12 if ordered else 0, dtype=np.uint64)
    held = np.empty(width if ordered else 0, dtype=vals.dtype)
    top = starts[U(lo)]
    ahead_end, b_end = apos[U(hi)] - AHEAD, len(bcrd)
    for i in range(lo, hi):
        start = top
        for pa in range(apos[U(i)], apos[U(i + 1)]):
            k = acrd[U(pa)]
            av = avals[U(pa)]
            if pa < ahead_end:   # the row of b that AHEAD entries on will read
                q = bpos[U(acrd[U(pa + AHEAD)])]
                if q < b_end:
                    prefetch(bcrd, U(q))
                    prefetch(bvals, U(q))
            for pb in range(bpos[U(k)], bpos[U(k + 1)]):
                j = U(bcrd[U(pb)] - first)
                p = mark[j]
                if p < start:
                    mark[j] = top
                    crd[U(top)] = j
                    vals[U(top)] = av * bvals[U(pb)]
                    top += 1
                else:
                    vals[U(p)] += av * bvals[U(pb)]
        if ordered and top - start <= TINY:
            _sort_pairs(crd, vals, start, top, first)
        elif ordered:
            _sort_bits(crd, vals, start, top, first, mark, bits, summary, held)
        else:
            for p in range(start, top):
                crd[U(p)] += first
        sizes[U(i + 1)] = top - start


# -- one pass into upper bounds, for products that compress little --------------------------
#
# A power-law graph's A @ A makes about one output entry per multiply-add (200k rows: 11.3M
# products, 10.2M entries), so the counting pass above repeats nearly all of the filling pass's
# scattered workspace accesses to learn sizes it could bound: row i holds at most its products.
# Here each chunk writes its rows once, packed from its first row's bound (the cumulative work),
# and the chunks then move down to their positions in the same buffers (the output is a prefix of
# them: a separate packed copy measured slower). Chosen where a sample of rows shows at most
# ONE_PASS_RATIO products per entry, which also bounds the scratch (the bound) at that multiple
# of the output.

ONE_PASS_RATIO = 1.5
SEGMENT = 1 << 16   # shift_chunks moves a chunk in parallel segments of its gap from this gap
SAMPLE_ROWS = 4096


@njit_cached(nogil=True)
def compression(apos, acrd, bpos, bcrd, n_cols, step):
    """``(products, entries)`` of the rows ``0, step, 2 step, ...`` of ``a @ b`` (a serial sample)."""
    mark = np.full(n_cols, -1, dtype=np.int64)
    products, entries = 0, 0
    for i in range(0, len(apos) - 1, step):
        for pa in range(apos[U(i)], apos[U(i + 1)]):
            k = acrd[U(pa)]
            for pb in range(bpos[U(k)], bpos[U(k + 1)]):
                j = U(bcrd[U(pb)])
                products += 1
                if mark[j] != i:
                    mark[j] = i
                    entries += 1
    return products, entries


@njit_cached(nogil=True, parallel=True)
def _move(crd, vals, src, dst, n):
    """``crd[dst:dst + n] = crd[src:src + n]`` (and ``vals``) for ranges that do not overlap, in
    parallel blocks."""
    blocks = (n + 65535) >> 16
    for t in prange(blocks):
        lo = t << 16
        for q in range(lo, min(lo + 65536, n)):
            crd[U(dst + q)] = crd[U(src + q)]
            vals[U(dst + q)] = vals[U(src + q)]


@njit_cached(nogil=True)
def shift_chunks(work, pos, bounds, crd, vals):
    """Chunk ``ch``'s ``pos[bounds[ch + 1]] - pos[bounds[ch]]`` entries from ``work[bounds[ch]]`` down
    to ``pos[bounds[ch]]``, chunks in order (a chunk may land on the one before's old place, and on
    its own: ``pos <= work``). A chunk whose gap (``work - pos``) is at least :data:`SEGMENT` moves
    in segments as long as the gap, each landing on the one before's old place only, so each is one
    parallel copy (:func:`_move`); a smaller gap, one serial forward copy."""
    for ch in range(1, len(bounds) - 1):
        src, dst, end = work[U(bounds[ch])], pos[U(bounds[ch])], pos[U(bounds[ch + 1])]
        gap, n = src - dst, end - dst
        if gap < SEGMENT:   # short segments: one serial forward copy
            for q in range(n if gap > 0 else 0):
                crd[U(dst + q)] = crd[U(src + q)]
                vals[U(dst + q)] = vals[U(src + q)]
            continue
        for done in range(0, n, gap):
            _move(crd, vals, src + done, dst + done, min(gap, n - done))


def one_pass(apos, acrd, bpos, bcrd, n_cols, products: int) -> bool:
    """Whether :func:`product` should write in one pass (:func:`spgemm_bounded`): a sample of rows makes at most
    :data:`ONE_PASS_RATIO` products per distinct entry."""
    n_rows = len(apos) - 1
    if n_rows == 0 or products == 0:
        return False
    sampled, entries = compression(apos, acrd, bpos, bcrd, n_cols, max(n_rows // SAMPLE_ROWS, 1))
    return sampled <= ONE_PASS_RATIO * max(entries, 1)


def product(apos, acrd, avals, bpos, bcrd, bvals, n_cols: int, dtype, ordered: bool, threads: int):
    """``(pos, crd, vals)`` of CSR ``a @ b`` (columns sorted when ``ordered``; index buffers int32
    where they fit): one pass into upper bounds where the product compresses little
    (:func:`one_pass`), else a counting pass then a filling pass."""
    n_rows = len(apos) - 1
    # chunks own a workspace over their rows' column span each; prange splits them evenly over
    # the threads (static), so two a thread balance no better than one: the one pass takes one
    # a thread, as every chunk past the first moves in shift_chunks, the filling pass two
    work = row_work(apos, acrd, bpos, n_rows)
    if one_pass(apos, acrd, bpos, bcrd, n_cols, int(work[-1])):
        bounds = chunk_bounds(work, min(max(n_rows, 1), threads))
        index = np.int32 if max(int(work[-1]), n_cols) < 2**31 else np.int64
        crd, vals = np.empty(int(work[-1]), dtype=index), np.empty(int(work[-1]), dtype=dtype)
        sizes = np.zeros(n_rows + 1, dtype=np.int64)
        spgemm_bounded(apos, acrd, avals, bpos, bcrd, bvals, work, bounds, crd, vals, sizes, ordered)
        pos = np.cumsum(sizes)
        shift_chunks(work, pos, bounds, crd, vals)
        nnz = int(pos[-1])
        index = np.int32 if max(nnz, n_cols) < 2**31 else np.int64
        # the output keeps the buffers unless a third of them would go unused (the sample misjudged)
        crd, vals = (crd[:nnz].copy(), vals[:nnz].copy()) if 2 * len(vals) > 3 * nnz else (crd[:nnz], vals[:nnz])
        return pos.astype(index), crd.astype(index, copy=False), vals
    bounds = chunk_bounds(work, min(max(n_rows, 1), 2 * threads))
    sizes, spans = spgemm_count(apos, acrd, bpos, bcrd, bounds)
    pos = np.cumsum(sizes)
    index = np.int32 if max(int(pos[-1]), n_cols) < 2**31 else np.int64
    crd = np.empty(int(pos[-1]), dtype=index)
    vals = np.empty(int(pos[-1]), dtype=dtype)
    spgemm_fill(apos, acrd, avals, bpos, bcrd, bvals, pos, bounds, spans, crd, vals, ordered)
    return pos.astype(index), crd, vals
