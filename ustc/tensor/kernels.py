"""Compiled (Numba) kernels behind the conversion fast paths.

All are ``cache=True`` (:func:`ustc.cache._lean.njit_cached`) so a second process loads them
from disk. Each one
makes a fixed number of passes over its input and allocates only its
outputs (no hidden full-size index temporaries). Scattered subscripts are cast
to ``np.uintp`` (every one is >= 0): Numba then drops its negative-index
wraparound branch, which took the CSR -> CSC transpose from 27 to 21.5 ms on
the 1.48M-row stencil.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange, types
from numba.extending import overload

from ..cache._lean import njit_cached
from ..kernels._alloc import empty
from .fastpaths import MASKED, NONZERO, POSITIVE  # noqa: F401  (modes 0, 1, 2 below)

U = np.uintp  # an unsigned subscript: no wraparound test


def _positive(v):
    return v > 0


@overload(_positive)
def _positive_impl(v):
    """``v > 0``; complex values compare their real part so every selection kernel
    compiles for complex data (``sparse_relu`` rejects complex input before this)."""
    if isinstance(v, types.Complex):
        return lambda v: v.real > 0
    return lambda v: v > 0


@njit_cached(inline="always")
def _selected(mode, v, mask, r, j):
    if mode == 0:
        return v != 0
    if mode == 1:
        return _positive(v)
    return mask[r, j] and v != 0


@njit_cached(parallel=True)
def row_counts(x2, mode, mask):
    """Number of selected entries of every row of a 2-D array."""
    rows, cols = x2.shape
    counts = np.zeros(rows, dtype=np.int64)
    for r in prange(rows):
        c = 0
        for j in range(cols):
            if _selected(mode, x2[r, j], mask, r, j):
                c += 1
        counts[r] = c
    return counts


@njit_cached(parallel=True)
def row_fill(x2, mode, mask, pos, crd, values):
    """Column index and value of the selected entries, row by row at ``pos[r]``."""
    rows, cols = x2.shape
    for r in prange(rows):
        o = pos[r]
        for j in range(cols):
            v = x2[r, j]
            if _selected(mode, v, mask, r, j):
                crd[U(o)] = j
                values[U(o)] = v
                o += 1


@njit_cached(parallel=True)
def column_counts(x2, mode, mask, bounds, counts):
    """``counts[t, j]`` = selected entries of column ``j`` in rows ``[bounds[t], bounds[t + 1])``."""
    cols = x2.shape[1]
    for t in prange(bounds.size - 1):
        for r in range(bounds[t], bounds[t + 1]):
            for j in range(cols):
                if _selected(mode, x2[r, j], mask, r, j):
                    counts[t, j] += 1


@njit_cached(parallel=True)
def column_fill(x2, mode, mask, bounds, offsets, crd, values):
    """Row index and value of the selected entries, column by column: chunk ``t`` of rows writes
    column ``j``'s from ``offsets[t, j]`` on (``column_starts``), rows in order."""
    cols = x2.shape[1]
    for t in prange(bounds.size - 1):
        for r in range(bounds[t], bounds[t + 1]):
            for j in range(cols):
                v = x2[r, j]
                if _selected(mode, v, mask, r, j):
                    o = offsets[t, j]
                    crd[U(o)] = r
                    values[U(o)] = v
                    offsets[t, j] = o + 1


@njit_cached(parallel=True)
def copy_entries(crd, values, crd_out, values_out, chunks):
    """``crd_out[:] = crd`` and ``values_out[:] = values`` in ``chunks`` parallel ranges (the new
    pages fault in on every thread); returns the number of zero values met."""
    n = values.size
    zeros = 0
    for t in prange(chunks):
        z = 0
        for q in range(n * t // chunks, n * (t + 1) // chunks):
            v = values[U(q)]
            z += v == 0
            values_out[U(q)] = v
            crd_out[U(q)] = crd[U(q)]
        zeros += z
    return zeros


@njit_cached(parallel=True)
def sorted_pos(rows, pos, chunks):
    """``pos`` (``n + 1`` entries, zeroed) of the sorted row coordinates ``rows`` (a canonical COO's
    first level): every position stores its end as its row's end, branch-free (the last one of
    a run wins), in ``chunks`` parallel ranges whose last run, when it goes on into the next
    range, is left to that range; rows without entries then take the end before them."""
    m = rows.size
    for t in prange(chunks):
        lo, hi = m * t // chunks, m * (t + 1) // chunks
        end = hi
        if hi < m:
            while end > lo and rows[U(end - 1)] == rows[U(hi)]:
                end -= 1
        for q in range(lo, end):
            pos[U(rows[U(q)] + 1)] = q + 1
    run = 0
    for r in range(pos.size):
        run = max(run, pos[U(r)])
        pos[U(r)] = run


@njit_cached(parallel=True)
def rows_to_coo(pos, crd, values, bounds, rows_out, crd_out, values_out):
    """A compressed level's entries as COO in one pass: ``rows_out[q]`` = the row of position
    ``q``, ``crd_out`` and ``values_out`` copies of ``crd`` and ``values``; chunk ``t`` takes rows
    ``[bounds[t], bounds[t + 1])`` (about equal entries, so each thread faults in its own pages
    of the three outputs). Returns the number of zero values met."""
    zeros = 0
    for t in prange(bounds.size - 1):
        z = 0
        for a in range(bounds[t], bounds[t + 1]):
            for q in range(pos[U(a)], pos[U(a + 1)]):
                v = values[U(q)]
                z += v == 0
                rows_out[U(q)] = a
                crd_out[U(q)] = crd[U(q)]
                values_out[U(q)] = v
        zeros += z
    return zeros


@njit_cached(parallel=True)
def coo_to_rows(rows, crd, values, pos, crd_out, values_out, chunks):
    """A canonical COO's entries (``rows`` sorted) as a compressed level in one pass: ``pos``
    (``n + 1`` entries, zeroed) marked as :func:`sorted_pos` does while ``crd`` and ``values`` are
    copied, in ``chunks`` parallel ranges; rows without entries then take the end before them
    once the caller runs :func:`run_max`. Returns the number of zero values met."""
    m = rows.size
    zeros = 0
    for t in prange(chunks):
        lo, hi = m * t // chunks, m * (t + 1) // chunks
        end = hi
        if hi < m:
            while end > lo and rows[U(end - 1)] == rows[U(hi)]:
                end -= 1
        z = 0
        for q in range(lo, hi):
            v = values[U(q)]
            z += v == 0
            crd_out[U(q)] = crd[U(q)]
            values_out[U(q)] = v
            if q < end:
                pos[U(rows[U(q)] + 1)] = q + 1
        zeros += z
    return zeros


@njit_cached(parallel=True)
def run_max(pos, chunks):
    """``pos`` replaced by its running maximum, in ``chunks`` parallel ranges (each range's own
    maximum first, then every range raised to the largest end before it)."""
    n = pos.size
    tops = np.zeros(chunks + 1, dtype=np.int64)
    for t in prange(chunks):
        run = 0
        for r in range(n * t // chunks, n * (t + 1) // chunks):
            run = max(run, pos[U(r)])
            pos[U(r)] = run
        tops[t + 1] = run
    for t in range(chunks):
        tops[t + 1] = max(tops[t + 1], tops[t])
    for t in prange(chunks):
        floor = tops[t]
        for r in range(n * t // chunks, n * (t + 1) // chunks):
            if pos[U(r)] >= floor:
                break
            pos[U(r)] = floor


@njit_cached()
def histogram(keys, n):
    """``counts[k]`` = occurrences of k in ``keys`` (all in ``[0, n)``)."""
    counts = np.zeros(n, dtype=np.int64)
    for k in keys:
        counts[U(k)] += 1
    return counts


PARALLEL_SCAN = 1 << 20  # entries from which the checks below split across threads


def strictly_increasing(major, minor) -> bool:
    """Whether the pairs ``(major[k], minor[k])`` increase strictly (lexicographic order), in one
    pass without temporaries (split across threads for long arrays)."""
    if major.size >= PARALLEL_SCAN:
        return _descents_parallel(major, minor) == 0
    return _increasing_serial(major, minor)


def count_zeros(values) -> int:
    """How many of ``values`` are zero."""
    return int(_zeros_parallel(values) if values.size >= PARALLEL_SCAN else _zeros_serial(values))


@njit_cached(inline="always")
def _descent(major, minor, k):
    a, b = major[U(k - 1)], major[U(k)]
    return b < a or (b == a and minor[U(k)] <= minor[U(k - 1)])


@njit_cached()
def _increasing_serial(major, minor):
    for k in range(1, major.size):
        if _descent(major, minor, k):
            return False
    return True


@njit_cached(parallel=True)
def _descents_parallel(major, minor):
    n = 0
    for k in prange(1, major.size):
        n += _descent(major, minor, k)
    return n


@njit_cached()
def _zeros_serial(values):
    z = 0
    for v in values:
        z += v == 0
    return z


@njit_cached(parallel=True)
def _zeros_parallel(values):
    z = 0
    for k in prange(values.size):
        z += values[U(k)] == 0
    return z


# -- the counting transpose in parallel (CSR <-> CSC, COO -> CSC, CSC -> COO) -----------------
# Chunk t of the source (rows [bounds[t], bounds[t + 1]) of a compressed level, or positions of a
# COO source) counts its nonzeros per output row in counts[t]; column_starts turns the table into
# where each chunk writes each output row (the chunks before it first: the transpose is stable)
# and the output's pos; the fill scatters. Explicit zeros are dropped in both passes when ``drop``; else
# the count never reads the values and the fill reports the zeros it met (the caller runs again). Extra memory:
# the table (chunks x output rows) beside the output.


@njit_cached(parallel=True)
def transpose_counts(pos, crd, values, bounds, counts, drop):
    """``counts[t, b]`` += entries at minor coordinate ``b`` in majors ``[bounds[t], bounds[t + 1])``,
    only the nonzero ones when ``drop`` (else ``values`` is never read: a third of the bytes
    of a float64 / int32 source). One flat loop over the chunk's positions: a count needs no
    major coordinate, and a loop per short row cost more than its body (random 200k^2: 16 -> 4
    ms CPU; stencil 114^3: 16 -> 14)."""
    for t in prange(bounds.size - 1):
        row = counts[t]
        for q in range(pos[U(bounds[t])], pos[U(bounds[t + 1])]):
            if not drop or values[U(q)] != 0:
                row[U(crd[U(q)])] += 1


@njit_cached(parallel=True)
def transpose_counts_coo(crd, values, bounds, counts, drop):
    """``counts[t, b]`` += entries (nonzero ones when ``drop``) at minor coordinate ``b`` in
    positions ``[bounds[t], bounds[t + 1])``."""
    for t in prange(bounds.size - 1):
        row = counts[t]
        for q in range(bounds[t], bounds[t + 1]):
            if not drop or values[U(q)] != 0:
                row[U(crd[U(q)])] += 1


@njit_cached(parallel=True)
def column_starts(counts, pos_out, blocks):
    """From the chunks' counts per output row (``counts[t, b]``): ``pos_out`` (``pos_out[b]`` =
    entries of rows before ``b``) and, in place, where chunk ``t`` writes its first entry of row
    ``b``. Rows are cut into ``blocks`` summed in parallel, then prefixed block by block."""
    chunks, n = counts.shape
    nblocks = blocks.size - 1
    sums = np.zeros(nblocks, dtype=np.int64)
    for k in prange(nblocks):
        s = 0
        for b in range(blocks[k], blocks[k + 1]):
            for t in range(chunks):
                s += counts[t, U(b)]
        sums[k] = s
    total = 0
    for k in range(nblocks):
        s = sums[k]
        sums[k] = total
        total += s
    for k in prange(nblocks):
        run = sums[k]
        for b in range(blocks[k], blocks[k + 1]):
            pos_out[U(b)] = run
            for t in range(chunks):
                c = counts[t, U(b)]
                counts[t, U(b)] = run
                run += c
    pos_out[n] = total
    return total


@njit_cached(parallel=True)
def transpose_fill(pos, crd, values, bounds, offsets, crd_out, values_out, drop):
    """Each entry of majors ``[bounds[t], bounds[t + 1])`` (each nonzero one when ``drop``) to
    ``offsets[t, minor]`` (then moved on), with its major coordinate. Returns the zeros met
    (written where not ``drop``: the caller then runs again dropping them)."""
    zeros = 0
    for t in prange(bounds.size - 1):
        z = 0
        for a in range(bounds[t], bounds[t + 1]):
            for q in range(pos[U(a)], pos[U(a + 1)]):
                v = values[U(q)]
                z += v == 0
                if not drop or v != 0:
                    b = U(crd[U(q)])
                    o = offsets[t, b]
                    crd_out[U(o)] = a
                    values_out[U(o)] = v
                    offsets[t, b] = o + 1
        zeros += z
    return zeros


@njit_cached(parallel=True)
def transpose_fill_coo(major, crd, values, bounds, offsets, crd_out, values_out, drop):
    """Each entry (nonzero one when ``drop``) of positions ``[bounds[t], bounds[t + 1])`` to
    ``offsets[t, minor]``, with ``major[q]``. Returns the zeros met (:func:`transpose_fill`)."""
    zeros = 0
    for t in prange(bounds.size - 1):
        z = 0
        for q in range(bounds[t], bounds[t + 1]):
            v = values[U(q)]
            z += v == 0
            if not drop or v != 0:
                b = U(crd[U(q)])
                o = offsets[t, b]
                crd_out[U(o)] = major[U(q)]
                values_out[U(o)] = v
                offsets[t, b] = o + 1
        zeros += z
    return zeros


# -- the blocked transpose: partition by blocks of output rows, then sort each block in cache ------
# Where output rows are many and a chunk's entries land on them at random (a random matrix), the
# direct scatter above touches a new cache line of every output for each entry. The blocked one
# first moves each entry to its block of 2^shift output rows with its output row (``packed``: the
# row within the block in the low ``shift`` bits of the major coordinate; else the row itself in
# ``local``), then sorts every block by row in cache, stably (:func:`sort_blocks`). Too many
# streams cost and too few do too (2M entries, one thread): on an Intel Xeon 98 blocks (196 streams)
# took 17 ms against 4 for 49 (98 streams); on an AMD EPYC (Zen 4) 25 blocks (50 streams) took 13.2
# ms against 7.2 for 49 and 6.6 for 196. So the blocks are a few dozen (fastpaths.PARTITION_STREAMS)
# and :func:`sort_blocks` splits each one in two stages that stay in L2 and L1.


@njit_cached(parallel=True)
def block_starts(counts, shift, pos_out, starts):
    """From the chunks' counts per output row (``counts[t, b]``): ``pos_out`` (entries of the
    rows before ``b``) and ``starts[t, k]``, where chunk ``t`` writes its first entry of block
    ``k`` (rows ``[k << shift, (k + 1) << shift)``; the chunks before it first). Returns the total."""
    chunks, n = counts.shape
    nblocks = starts.shape[1]
    sums = np.zeros(nblocks + 1, dtype=np.int64)
    for k in prange(nblocks):
        s = 0
        for b in range(k << shift, min(n, (k + 1) << shift)):
            for t in range(chunks):
                s += counts[t, U(b)]
        sums[k + 1] = s
    for k in range(nblocks):
        sums[k + 1] += sums[k]
    for k in prange(nblocks):
        lo, hi = k << shift, min(n, (k + 1) << shift)
        run = sums[k]
        for b in range(lo, hi):
            pos_out[U(b)] = run
            for t in range(chunks):
                run += counts[t, U(b)]
        run = sums[k]
        for t in range(chunks):
            starts[t, U(k)] = run
            for b in range(lo, hi):
                run += counts[t, U(b)]
    pos_out[n] = sums[nblocks]
    return sums[nblocks]


@njit_cached(inline="always")
def _place(packed, shift, o, a, b, v, major_out, values_out, local):
    """An entry at ``o`` of its block: ``a`` with ``b``'s row within the block in its low bits
    (``packed``), else ``a`` and ``b`` in ``local``."""
    values_out[o] = v
    if packed:
        major_out[o] = (a << shift) | (b & ((1 << shift) - 1))
    else:
        major_out[o] = a
        local[o] = b


@njit_cached(parallel=True)
def partition_blocks(pos, crd, values, bounds, shift, starts, packed, major_out, values_out, local, drop):
    """Each entry (nonzero one when ``drop``) of majors ``[bounds[t], bounds[t + 1])`` of a
    compressed level to ``starts[t, crd >> shift]`` (then moved on), with its major coordinate
    and its minor one (:func:`_place`). Returns the zeros met (:func:`transpose_fill`)."""
    zeros = 0
    for t in prange(bounds.size - 1):
        z = 0
        for a in range(bounds[t], bounds[t + 1]):
            for q in range(pos[U(a)], pos[U(a + 1)]):
                v = values[U(q)]
                z += v == 0
                if not drop or v != 0:
                    b = np.intp(crd[U(q)])
                    k = U(b >> shift)
                    o = U(starts[t, k])
                    starts[t, k] = o + 1
                    _place(packed, shift, o, a, b, v, major_out, values_out, local)
        zeros += z
    return zeros


@njit_cached(parallel=True)
def partition_blocks_coo(major, crd, values, bounds, shift, starts, packed, major_out, values_out, local, drop):
    """:func:`partition_blocks` for COO positions ``[bounds[t], bounds[t + 1])`` and ``major[q]``."""
    zeros = 0
    for t in prange(bounds.size - 1):
        z = 0
        for q in range(bounds[t], bounds[t + 1]):
            v = values[U(q)]
            z += v == 0
            if not drop or v != 0:
                b = np.intp(crd[U(q)])
                k = U(b >> shift)
                o = U(starts[t, k])
                starts[t, k] = o + 1
                _place(packed, shift, o, np.intp(major[U(q)]), b, v, major_out, values_out, local)
        zeros += z
    return zeros


@njit_cached(inline="always")
def _row_of(packed, mask, m, local, e, r0):
    """The row within its block of the entry at ``e``: the low bits of its major coordinate
    ``m`` (``packed``), else ``local[e]`` minus the block's first row ``r0``."""
    if packed:
        return np.intp(m & mask)
    return np.intp(local[e]) - r0


@njit_cached(parallel=True)
def sort_blocks(pos_out, shift, sub, ranges, packed, major_out, values_out, local):
    """Every block of ``2^shift`` output rows (positions ``pos_out[k << shift]`` on) put in row
    order, stably: chunk ``t`` takes blocks ``[ranges[t], ranges[t + 1])``. A block is first
    partitioned into sub-blocks of ``2^sub`` rows in a buffer of the chunk (at most
    ``2^(shift - sub)`` write streams; the block stays in L2), then each sub-block is moved back
    from that buffer to its rows (its lines stay in L1). An entry's row within its block is the
    low ``shift`` bits of its major coordinate, which then drop (``packed``), else ``local``'s
    value minus the block's first row. ``local``, when not empty, receives every entry's row
    (a COO target's row coordinates) in both modes, written row by row after each sub-block."""
    n = pos_out.size - 1
    mask, sub_mask = (1 << shift) - 1, (1 << sub) - 1
    rows = local.size > 0
    for t in prange(ranges.size - 1):
        widest = 0
        for k in range(ranges[t], ranges[t + 1]):
            r0 = k << shift
            widest = max(widest, np.intp(pos_out[U(min(n, r0 + (1 << shift)))]) - np.intp(pos_out[U(r0)]))
        majors, vals = np.empty(widest, major_out.dtype), np.empty(widest, values_out.dtype)
        lrows = np.empty(0 if packed else widest, local.dtype)
        starts = np.empty(1 << (shift - sub), np.intp)
        fill = np.empty(1 << sub, np.intp)
        for k in range(ranges[t], ranges[t + 1]):
            r0 = k << shift
            r1 = min(n, r0 + (1 << shift))
            lo, hi = np.intp(pos_out[U(r0)]), np.intp(pos_out[U(r1)])
            if hi == lo:
                continue
            nsub = ((r1 - r0 - 1) >> sub) + 1
            for j in range(nsub):
                starts[j] = np.intp(pos_out[U(r0 + (j << sub))]) - lo
            for e in range(lo, hi):
                m = major_out[U(e)]
                r = _row_of(packed, mask, m, local, U(e), r0)
                j = U(r >> sub)
                o = U(starts[j])
                starts[j] = o + 1
                majors[o] = m
                vals[o] = values_out[U(e)]
                if not packed:
                    lrows[o] = local[U(e)]
            for j in range(nsub):
                s0 = r0 + (j << sub)
                s1 = min(r1, s0 + (1 << sub))
                for r in range(s1 - s0):
                    fill[r] = pos_out[U(s0 + r)]
                for e in range(np.intp(pos_out[U(s0)]) - lo, np.intp(pos_out[U(s1)]) - lo):
                    m = majors[U(e)]
                    r = _row_of(packed, mask, m, lrows, U(e), r0)
                    f = U(r & sub_mask)
                    o = U(fill[f])
                    fill[f] = o + 1
                    values_out[o] = vals[U(e)]
                    major_out[o] = m >> shift if packed else m
                if rows:  # in a run per row, the sub-block's positions in L1 (a pass of its own cost more)
                    for r in range(s0, s1):
                        for e in range(pos_out[U(r)], pos_out[U(r + 1)]):
                            local[U(e)] = r


@njit_cached(parallel=True)
def expand_rows(pos, rows, chunks):
    """``rows[q]`` = the row whose segment of ``pos`` holds position ``q`` (COO's row coordinates
    from CSR offsets), ``chunks`` ranges of rows in parallel."""
    n = pos.size - 1
    for t in prange(chunks):
        for a in range(n * t // chunks, n * (t + 1) // chunks):
            for q in range(pos[U(a)], pos[U(a + 1)]):
                rows[U(q)] = a


@njit_cached(inline="always")
def _sort_segment(keys, other, lo, hi):
    """``keys[lo:hi]`` sorted stably with ``other[lo:hi]`` alongside: insertion sort up to 32
    entries (rows of a sparse matrix are mostly short), a merge sort above."""
    if hi - lo <= 32:
        for a in range(lo + 1, hi):
            key, o = keys[a], other[a]
            b = a - 1
            while b >= lo and keys[b] > key:
                keys[b + 1], other[b + 1] = keys[b], other[b]
                b -= 1
            keys[b + 1], other[b + 1] = key, o
    else:
        idx = np.argsort(keys[lo:hi], kind="mergesort")
        keys[lo:hi] = keys[lo:hi][idx]
        other[lo:hi] = other[lo:hi][idx]


@njit_cached(parallel=True)
def _sort_buckets(pos, order, keys):
    """Each bucket of ``(keys, order)`` sorted by key, stably; buckets are independent and
    contiguous, so they run in parallel."""
    for r in prange(pos.size - 1):
        _sort_segment(keys, order, pos[r], pos[r + 1])


def lexicographic_order(major, minor, n_major: int) -> np.ndarray:
    """The stable permutation sorting entries by ``(major, minor)``: a counting sort on
    ``major`` (O(n + n_major)) then each major bucket sorted by ``minor`` in parallel."""
    pos, keys, order, _ = coo_bucket(major, minor, np.arange(major.size), n_major, np.iinfo(np.int64).max)
    _sort_buckets(pos, order, keys)
    return order


@njit_cached()
def coo_bucket(major, minor, values, n_major, n_minor):
    """Entries bucketed by ``major`` (stable counting sort): ``(pos, crd, vals, ok)``; ``ok`` is
    False, and the buffers unusable, when a coordinate lies outside ``[0, n_major) x [0, n_minor)``."""
    pos = np.zeros(n_major + 1, dtype=np.int64)
    crd = empty(major.size, np.int64)   # O(nnz) scratch: huge pages (kernels._alloc)
    vals = empty(values.size, values.dtype)
    for k in range(major.size):
        r, c = major[k], minor[k]
        if r < 0 or r >= n_major or c < 0 or c >= n_minor:
            return pos, crd, vals, False
        pos[U(r) + U(1)] += 1
    for r in range(n_major):
        pos[r + 1] += pos[r]
    fill = pos[:-1].copy()
    for k in range(major.size):
        r = U(major[k])
        o = U(fill[r])
        crd[o] = minor[k]
        vals[o] = values[k]
        fill[r] += 1
    return pos, crd, vals, True


@njit_cached(parallel=True)
def sort_sum_rows(pos, crd, vals, counts):
    """Each row ``crd[pos[r]:pos[r+1]]`` sorted (stably, values alongside), equal coordinates
    summed and zero sums dropped, in place at the row's start; ``counts[r]`` = entries kept."""
    for r in prange(pos.size - 1):
        lo, hi = pos[r], pos[r + 1]
        _sort_segment(crd, vals, lo, hi)
        out = lo
        a = lo
        while a < hi:
            c, v = crd[a], vals[a]
            a += 1
            while a < hi and crd[a] == c:
                v += vals[a]
                a += 1
            if v != 0:
                crd[out], vals[out] = c, v
                out += 1
        counts[r] = out - lo


@njit_cached(parallel=True)
def compact_rows(pos, crd, vals, new_pos, crd_out, vals_out):
    """The first ``new_pos[r+1] - new_pos[r]`` entries of each row, packed together."""
    for r in prange(pos.size - 1):
        lo, o = pos[r], new_pos[r]
        for a in range(new_pos[r + 1] - o):
            crd_out[o + a] = crd[lo + a]
            vals_out[o + a] = vals[lo + a]


# -- element-wise merges of two compressed-family matrices (fastpaths.merge) ----------------
# Each row of ``A + B`` (union) or ``A * B`` (intersection) is one merge of the rows' sorted
# coordinates; ``A - B`` is ``A + (-B)`` (fastpaths negates a copy of B's values), so the add
# loops carry no operator switch. Into a row region that holds the row's bound the loops run
# branch-free (BOUNDED: every step stores at ``o`` and advances ``o`` only when it keeps the
# entry; a step consumes at least one input entry, so the store stays inside the bound): on
# random patterns a branchy merge mispredicts about every other step. EXACT stores only the kept
# entries (regions of the counted size); COUNT stores nothing. A result that compares equal to
# zero (a cancellation) is never kept. Measured on one thread (best of 15, loaded 2-core
# machine): 1,000^2 at 1% add 32 us (SciPy's whole call 48 us), 200k^2 with 10 a row 12 ms
# (SciPy 22 ms).
ADD, SUB, MUL = 0, 1, 2
COUNT, BOUNDED, EXACT = 0, 1, 2


@njit_cached(inline="always")
def _keep(mode, o, keep, crd, val, c, v):
    """Store entry ``(c, v)`` at ``o`` as ``mode`` says; returns the next free position."""
    if mode == BOUNDED:
        crd[o] = c
        val[o] = v
        return o + U(keep)
    if keep:
        if mode == EXACT:
            crd[o] = c
            val[o] = v
        return o + U(1)
    return o


@njit_cached(inline="always")
def _union_row(zero, ap, ape, a_crd, a_val, bp, bpe, b_crd, b_val, o, crd, val, mode):
    """Row entries of ``A + B`` from ``o``; returns the new end. Keeps at most
    ``(ape - ap) + (bpe - bp)`` entries whatever the coordinates' order."""
    while ap < ape and bp < bpe:
        ca, cb, va, vb = a_crd[ap], b_crd[bp], a_val[ap], b_val[bp]
        ta, tb = ca <= cb, cb <= ca
        v = (va if ta else zero) + (vb if tb else zero)   # selects of loaded values, not loads
        o = _keep(mode, o, v != 0, crd, val, ca if ta else cb, v)
        ap += U(ta)
        bp += U(tb)
    while ap < ape:
        v = a_val[ap]
        o = _keep(mode, o, v != 0, crd, val, a_crd[ap], v)
        ap += U(1)
    while bp < bpe:
        v = b_val[bp]
        o = _keep(mode, o, v != 0, crd, val, b_crd[bp], v)
        bp += U(1)
    return o


@njit_cached(inline="always")
def _intersection_row(ap, ape, a_crd, a_val, bp, bpe, b_crd, b_val, o, crd, val, mode):
    """Row entries of ``A * B`` from ``o``; returns the new end. Keeps at most
    ``min(ape - ap, bpe - bp)`` entries (a kept entry consumes one of each side)."""
    while ap < ape and bp < bpe:
        ca, cb = a_crd[ap], b_crd[bp]
        v = a_val[ap] * b_val[bp]
        o = _keep(mode, o, (ca == cb) & (v != 0), crd, val, ca, v)
        ap += U(ca <= cb)
        bp += U(cb <= ca)
    return o


@njit_cached(inline="always")
def _merge_row(op, zero, a_pos, a_crd, a_val, b_pos, b_crd, b_val, i, o, crd, val, mode):
    ap, ape = U(a_pos[i]), U(a_pos[i + 1])
    bp, bpe = U(b_pos[i]), U(b_pos[i + 1])
    if op == MUL:
        return _intersection_row(ap, ape, a_crd, a_val, bp, bpe, b_crd, b_val, o, crd, val, mode)
    return _union_row(zero, ap, ape, a_crd, a_val, bp, bpe, b_crd, b_val, o, crd, val, mode)


@njit_cached(inline="always")
def _union_pair(zero, ap, ape, bp, bpe, aq, aqe, bq, bqe, a_crd, a_val, b_crd, b_val, o, p, crd, val):
    """Two rows of ``A + B`` interleaved, BOUNDED, the first from ``o`` and the second from ``p``;
    returns both ends. Two independent merges in one loop overlap their load -> compare ->
    advance chains (1,000^2 at 1%: 48 -> 32 us); on long rows the loop's register pressure
    costs more than it gains (20k^2 with 100 a row: 12.7 -> 16.8 ms), so :func:`merge_serial`
    pairs union rows only when ``paired``."""
    while ap < ape and bp < bpe and aq < aqe and bq < bqe:
        ca, cb, va, vb = a_crd[ap], b_crd[bp], a_val[ap], b_val[bp]
        da, db, wa, wb = a_crd[aq], b_crd[bq], a_val[aq], b_val[bq]
        ta, tb, sa, sb = ca <= cb, cb <= ca, da <= db, db <= da
        v = (va if ta else zero) + (vb if tb else zero)
        w = (wa if sa else zero) + (wb if sb else zero)
        o = _keep(BOUNDED, o, v != 0, crd, val, ca if ta else cb, v)
        p = _keep(BOUNDED, p, w != 0, crd, val, da if sa else db, w)
        ap += U(ta)
        bp += U(tb)
        aq += U(sa)
        bq += U(sb)
    o = _union_row(zero, ap, ape, a_crd, a_val, bp, bpe, b_crd, b_val, o, crd, val, BOUNDED)
    p = _union_row(zero, aq, aqe, a_crd, a_val, bq, bqe, b_crd, b_val, p, crd, val, BOUNDED)
    return o, p


@njit_cached(inline="always")
def _intersection_pair(ap, ape, bp, bpe, aq, aqe, bq, bqe, a_crd, a_val, b_crd, b_val, o, p, crd, val):
    """Two rows of ``A * B`` interleaved, as :func:`_union_pair` (20k^2 with 100 a row:
    12.7 -> 8.1 ms)."""
    while ap < ape and bp < bpe and aq < aqe and bq < bqe:
        ca, cb, da, db = a_crd[ap], b_crd[bp], a_crd[aq], b_crd[bq]
        v, w = a_val[ap] * b_val[bp], a_val[aq] * b_val[bq]
        o = _keep(BOUNDED, o, (ca == cb) & (v != 0), crd, val, ca, v)
        p = _keep(BOUNDED, p, (da == db) & (w != 0), crd, val, da, w)
        ap += U(ca <= cb)
        bp += U(cb <= ca)
        aq += U(da <= db)
        bq += U(db <= da)
    o = _intersection_row(ap, ape, a_crd, a_val, bp, bpe, b_crd, b_val, o, crd, val, BOUNDED)
    p = _intersection_row(aq, aqe, a_crd, a_val, bq, bqe, b_crd, b_val, p, crd, val, BOUNDED)
    return o, p


# called, not inlined: Numba compiles it once per signature for merge_serial and merge_chunks (inlining
# re-typed the whole merge inside merge_chunks' prange body: 11 s of compile); its inner helpers stay inlined
@njit_cached()
def _merge_rows(op, paired, zero, a_pos, a_crd, a_val, b_pos, b_crd, b_val, r0, r1, o, pos, crd, val):
    """Rows ``r0:r1`` appended from ``o`` (BOUNDED, into a region holding their bounds);
    ``pos[r + 1]`` = row r's end. With ``paired`` (always for a product), two rows at a time:
    the second starts after the first one's bound and moves down behind it once both are done
    (a forward copy of at most one row)."""
    i = r0
    if paired or op == MUL:
        while i + 1 < r1:
            ap, ape, bp, bpe = U(a_pos[i]), U(a_pos[i + 1]), U(b_pos[i]), U(b_pos[i + 1])
            aq, aqe, bq, bqe = ape, U(a_pos[i + 2]), bpe, U(b_pos[i + 2])
            if op == MUL:
                start = o + min(ape - ap, bpe - bp)
                end, p = _intersection_pair(ap, ape, bp, bpe, aq, aqe, bq, bqe, a_crd, a_val, b_crd, b_val, o,
                                            start, crd, val)
            else:
                start = o + (ape - ap) + (bpe - bp)
                end, p = _union_pair(zero, ap, ape, bp, bpe, aq, aqe, bq, bqe, a_crd, a_val, b_crd, b_val, o, start,
                                     crd, val)
            pos[i + 1] = end
            for k in range(p - start):
                crd[end + U(k)] = crd[start + U(k)]
                val[end + U(k)] = val[start + U(k)]
            o = end + (p - start)
            pos[i + 2] = o
            i += 2
    while i < r1:
        o = _merge_row(op, zero, a_pos, a_crd, a_val, b_pos, b_crd, b_val, i, o, crd, val, BOUNDED)
        pos[i + 1] = o
        i += 1
    return o


@njit_cached()
def merge_serial(op, paired, zero, a_pos, a_crd, a_val, b_pos, b_crd, b_val, pos, crd, val):
    """``A op B`` (op ADD or MUL) in one pass, appended from 0: ``pos`` (length rows + 1)
    receives the row offsets; returns the number of entries. ``crd`` / ``val`` must hold the
    bound: ``nnz(A) + nnz(B)`` (add) or ``min(nnz(A), nnz(B))`` (multiply)."""
    pos[0] = 0
    return _merge_rows(op, paired, zero, a_pos, a_crd, a_val, b_pos, b_crd, b_val, 0, pos.size - 1, U(0), pos, crd,
                       val)


@njit_cached(parallel=True)
def merge_chunks(op, paired, zero, a_pos, a_crd, a_val, b_pos, b_crd, b_val, rows, starts, pos, crd, val, ends):
    """One pass in parallel: chunk ``c`` (rows ``rows[c]:rows[c+1]``) appends its rows from
    ``starts[c]`` (its rows' bounds summed: no chunk can reach the next one's start); ``pos[r+1]``
    is row r's end in those buffers, ``ends[c]`` the chunk's. :func:`close_gaps` or
    :func:`gather_chunks` then make the entries contiguous."""
    for c in prange(rows.size - 1):
        ends[c] = _merge_rows(op, paired, zero, a_pos, a_crd, a_val, b_pos, b_crd, b_val, rows[c], rows[c + 1],
                              U(starts[c]), pos, crd, val)


@njit_cached()
def close_gaps(rows, starts, ends, pos, crd, val):
    """The chunks of :func:`merge_chunks` moved down in place, in order (each copy runs forward
    and its destination never passes its source), and ``pos`` shifted with them; returns the
    number of entries. Chunk 0 starts at 0 and stays."""
    pos[0] = 0
    d = U(ends[0])
    for c in range(1, rows.size - 1):
        s, n = U(starts[c]), U(ends[c] - starts[c])
        if s != d:
            for k in range(n):
                crd[d + U(k)] = crd[s + U(k)]
                val[d + U(k)] = val[s + U(k)]
            shift = np.int64(s) - np.int64(d)   # signed: int64 - uint64 would be float64
            for i in range(rows[c] + 1, rows[c + 1] + 1):
                pos[i] -= shift
        d += n
    return d


@njit_cached(parallel=True)
def gather_chunks(rows, starts, ends, offsets, pos, crd, val, crd_out, val_out):
    """The chunks of :func:`merge_chunks` copied, in parallel, to ``offsets[c]`` of compact
    arrays (``offsets``: the exclusive prefix sum of the chunks' sizes), ``pos`` shifted to match."""
    pos[0] = 0
    for c in prange(rows.size - 1):
        s, d = U(starts[c]), U(offsets[c])
        for k in range(U(ends[c]) - s):
            crd_out[d + U(k)] = crd[s + U(k)]
            val_out[d + U(k)] = val[s + U(k)]
        shift = np.int64(s) - np.int64(d)
        for i in range(rows[c] + 1, rows[c + 1] + 1):
            pos[i] -= shift


@njit_cached(parallel=True)
def merge_counts(op, zero, a_pos, a_crd, a_val, b_pos, b_crd, b_val, counts):
    """The counting pass of the two-pass merge: ``counts[r + 1]`` = entries row r keeps
    (values computed, nothing stored, so cancellations count exactly as the fill pass drops them)."""
    for i in prange(counts.size - 1):
        counts[i + 1] = _merge_row(op, zero, a_pos, a_crd, a_val, b_pos, b_crd, b_val, i, U(0), a_crd, a_val,
                                   COUNT)


@njit_cached(parallel=True)
def merge_fill(op, zero, a_pos, a_crd, a_val, b_pos, b_crd, b_val, pos, crd, val):
    """The filling pass: row r's entries at ``pos[r]`` of exact-size buffers."""
    for i in prange(pos.size - 1):
        _merge_row(op, zero, a_pos, a_crd, a_val, b_pos, b_crd, b_val, i, U(pos[i]), crd, val, EXACT)


@njit_cached()
def align_union(a_pos, a_crd, a_val, za, b_pos, b_crd, b_val, zb, pos, crd, left, right):
    """The union pattern of A and B row by row (every coordinate either stores, none dropped),
    with each operand's value aligned on it (``za`` / ``zb`` where it stores nothing): a binary
    ufunc then maps ``left`` and ``right`` in one vectorised call. Branch-free like the merges;
    the buffers must hold ``nnz(A) + nnz(B)``. Returns the number of entries."""
    o = U(0)
    pos[0] = 0
    for i in range(pos.size - 1):
        ap, ape, bp, bpe = U(a_pos[i]), U(a_pos[i + 1]), U(b_pos[i]), U(b_pos[i + 1])
        while ap < ape and bp < bpe:
            ca, cb, va, vb = a_crd[ap], b_crd[bp], a_val[ap], b_val[bp]
            ta, tb = ca <= cb, cb <= ca
            crd[o] = ca if ta else cb
            left[o] = va if ta else za
            right[o] = vb if tb else zb
            o += U(1)
            ap += U(ta)
            bp += U(tb)
        while ap < ape:
            crd[o], left[o], right[o] = a_crd[ap], a_val[ap], zb
            o += U(1)
            ap += U(1)
        while bp < bpe:
            crd[o], left[o], right[o] = b_crd[bp], za, b_val[bp]
            o += U(1)
            bp += U(1)
        pos[i + 1] = o
    return o


@njit_cached()
def drop_zeros(pos, crd, val):
    """Entries whose value is zero removed in place, row by row (forward copies); returns the
    number kept."""
    o = U(0)
    start = U(pos[0])
    for i in range(pos.size - 1):
        end = U(pos[i + 1])
        for q in range(start, end):
            v = val[q]
            crd[o] = crd[q]
            val[o] = v
            o += U(v != 0)
        start = end
        pos[i + 1] = o
    return o


@njit_cached()
def split_rows(a_pos, b_pos, chunks):
    """Row boundaries of ``chunks`` chunks with about equal ``nnz_A(row) + nnz_B(row)`` each
    (binary searches over the monotone ``a_pos + b_pos``); ``rows[0] = 0``, ``rows[-1] = n``."""
    n = a_pos.size - 1
    total = a_pos[n] + b_pos[n]
    rows = np.empty(chunks + 1, dtype=np.int64)
    rows[0] = 0
    for c in range(1, chunks):
        goal = total * c // chunks
        lo, hi = rows[c - 1], n
        while lo < hi:
            mid = (lo + hi) // 2
            if a_pos[mid] + b_pos[mid] < goal:
                lo = mid + 1
            else:
                hi = mid
        rows[c] = lo
    rows[chunks] = n
    return rows


# -- other row-major formats into CSR (ustc.tensor.fastpaths_rows) -----------------------------
# Each walks the source's rows in parallel: DCSR's stored rows spread their offsets over the
# empty rows between them; BSR and DIA count every output row's nonzeros (explicit zeros of a
# block or a diagonal are not stored in CSR), a prefix sizes the output, a fill writes each row
# at its offset. Within a row the entries come out in column order (BSR: block columns are
# ordered, DIA: offsets ascending), so nothing is sorted.


@njit_cached(parallel=True)
def dcsr_pos(rows, pos1, n, pos_out):
    """``pos_out`` (``n + 1`` entries) of the CSR of a DCSR whose stored rows are ``rows``
    (increasing) with offsets ``pos1`` (``rows.size + 1``): every row up to a stored row takes
    that row's start, the rows after the last one its end."""
    m = rows.size
    for p in prange(m + 1):
        lo = np.intp(rows[U(p - 1)]) + 1 if p > 0 else 0
        hi = np.intp(rows[U(p)]) + 1 if p < m else n + 1
        v = pos1[U(p)]
        for r in range(lo, hi):
            pos_out[U(r)] = v


@njit_cached(parallel=True)
def bsr_row_counts(pos, crd, values, r, c, nrows, ncols, counts):
    """``counts[i + 1]`` = nonzeros of row ``i`` of a BSR(r, c) matrix (blocks of block row ``b``
    at positions ``[pos[b], pos[b + 1])``, block column ``crd[p]``, values row-major per block;
    rows past ``nrows`` and the columns of an edge block past ``ncols`` are padding). A count
    needs no column order: blocks are read in storage order, whatever it is."""
    pairs = r == 2 and c == 2 and ncols % 2 == 0  # BSR(2, 2) without edge columns: unrolled
    for b in prange(pos.size - 1):
        start, end = np.intp(pos[U(b)]), np.intp(pos[U(b + 1)])
        for ii in range(min(r, nrows - b * r)):
            n = 0
            if pairs:
                for p in range(start, end):
                    base = p * 4 + ii * 2
                    n += (values[U(base)] != 0) + (values[U(base + 1)] != 0)
            else:
                for p in range(start, end):
                    j0 = np.intp(crd[U(p)]) * c
                    base = (p * r + ii) * c
                    for jj in range(min(c, ncols - j0)):
                        n += values[U(base + jj)] != 0
            counts[U(b * r + ii + 1)] = n


@njit_cached(inline="always")
def _blocks_by_column(crd, start, end, order):
    """``order[:end - start]`` = positions ``[start, end)`` sorted by ``crd`` (insertion sort: a
    block row holds few blocks); returns how many repeat the block column before them."""
    for q in range(start, end):
        key = crd[U(q)]
        k = q - start
        while k > 0 and crd[U(order[U(k - 1)])] > key:
            order[U(k)] = order[U(k - 1)]
            k -= 1
        order[U(k)] = q
    repeats = 0
    for k in range(1, end - start):
        repeats += crd[U(order[U(k)])] == crd[U(order[U(k - 1)])]
    return repeats


@njit_cached(parallel=True)
def bsr_row_fill(pos, crd, values, r, c, nrows, ncols, bounds, widest, pos_out, crd_out, values_out):
    """Each nonzero of row ``i`` of the BSR(r, c) matrix (:func:`bsr_row_counts`) at ``pos_out[i]``
    onwards, in column order; chunk ``t`` takes block rows ``[bounds[t], bounds[t + 1])``. With
    ``widest`` > 0 (the most blocks a block row holds) the block columns need not be ordered:
    each block row is put in column order in a chunk-local list of that size first (no
    full-size permutation buffer). Returns how many block columns repeat within their block
    row (then the output is not a CSR: the caller drops it).

    Rows whose end lies before their chunk's end are written without a branch per value (every
    value stored, the position advanced past nonzeros only): a zero's store lands at most at the
    row's end, which a later row of the same chunk overwrites. A row ending where its chunk
    ends keeps the branch, so nothing is written past it."""
    repeats = 0
    pairs = r == 2 and c == 2 and ncols % 2 == 0
    for t in prange(bounds.size - 1):
        order = np.empty(widest, dtype=np.intp)
        found = 0
        stop = np.intp(pos_out[U(min(bounds[t + 1] * r, nrows))])
        for b in range(bounds[t], bounds[t + 1]):
            start, end = np.intp(pos[U(b)]), np.intp(pos[U(b + 1)])
            if widest > 0:
                found += _blocks_by_column(crd, start, end, order)
            for ii in range(min(r, nrows - b * r)):
                o = np.intp(pos_out[U(b * r + ii)])
                if pos_out[U(b * r + ii + 1)] < stop and pairs:
                    for q in range(start, end):
                        p = order[U(q - start)] if widest > 0 else q
                        j0, base = np.intp(crd[U(p)]) * 2, p * 4 + ii * 2
                        v = values[U(base)]
                        crd_out[U(o)], values_out[U(o)] = j0, v
                        o += v != 0
                        v = values[U(base + 1)]
                        crd_out[U(o)], values_out[U(o)] = j0 + 1, v
                        o += v != 0
                elif pos_out[U(b * r + ii + 1)] < stop:
                    for q in range(start, end):
                        p = order[U(q - start)] if widest > 0 else q
                        j0, base = np.intp(crd[U(p)]) * c, (p * r + ii) * c
                        for jj in range(min(c, ncols - j0)):
                            v = values[U(base + jj)]
                            crd_out[U(o)], values_out[U(o)] = j0 + jj, v
                            o += v != 0
                else:
                    for q in range(start, end):
                        p = order[U(q - start)] if widest > 0 else q
                        j0, base = np.intp(crd[U(p)]) * c, (p * r + ii) * c
                        for jj in range(min(c, ncols - j0)):
                            v = values[U(base + jj)]
                            if v != 0:
                                crd_out[U(o)] = j0 + jj
                                values_out[U(o)] = v
                                o += 1
        repeats += found
    return repeats


DIA_COUNT_ROWS = 2048  # rows per block of dia_row_counts (the block's counts stay in L1)


@njit_cached(parallel=True)
def dia_row_counts(offsets, values, length, by_row, nrows, ncols, counts):
    """``counts[i + 1]`` = nonzeros of row ``i`` of a DIA matrix: diagonal ``d`` (column - row =
    ``offsets[d]``) holds its entries at ``values[d * length + k]``, ``k`` the row (``by_row``,
    DIAI) or the column (DIAJ). Blocks of rows in parallel, each diagonal's run over a block one
    contiguous loop without branches (vectorised): a third of the row-by-row loop's time."""
    nd = offsets.size
    nblocks = (nrows + DIA_COUNT_ROWS - 1) // DIA_COUNT_ROWS
    for blk in prange(nblocks):
        lo_b = blk * DIA_COUNT_ROWS
        hi_b = min(nrows, lo_b + DIA_COUNT_ROWS)
        for i in range(lo_b, hi_b):
            counts[U(i + 1)] = 0
        for d in range(nd):
            off = np.intp(offsets[d])
            lo, hi = max(lo_b, -off), min(hi_b, ncols - off)
            base = np.intp(d * length) + (0 if by_row else off)
            for i in range(lo, hi):
                counts[U(i + 1)] += values[U(base + i)] != 0


@njit_cached(parallel=True)
def dia_row_fill(offsets, values, length, by_row, nrows, ncols, pos_out, crd_out, values_out):
    """Each nonzero of row ``i`` of the DIA matrix at ``pos_out[i]`` onwards (offsets ascending:
    columns in order)."""
    nd = offsets.size
    for i in prange(nrows):
        o = np.intp(pos_out[U(i)])
        for d in range(nd):
            j = i + np.intp(offsets[d])
            if j >= 0 and j < ncols:
                v = values[U(d * length + (i if by_row else j))]
                if v != 0:
                    crd_out[U(o)] = j
                    values_out[U(o)] = v
                    o += 1


@njit_cached(parallel=True)
def diagonal_flags(x2, mode, mask, bounds, flags):
    """Bit ``j - i + rows - 1`` of ``flags[t]`` set for every selected entry ``(i, j)`` of rows
    ``[bounds[t], bounds[t + 1])`` of ``x2``: the diagonals holding one, a bit set per chunk
    (rows + columns bits, no per-diagonal table). One read of ``x2``."""
    rows, cols = x2.shape
    for t in prange(bounds.size - 1):
        for i in range(bounds[t], bounds[t + 1]):
            for j in range(cols):
                if _selected(mode, x2[i, j], mask, i, j):
                    d = j - i + rows - 1
                    flags[t, U(d >> 6)] |= np.uint64(1) << np.uint64(d & 63)


@njit_cached(parallel=True)
def csr_diagonal_flags(pos, crd, values, bounds, flags, drop):
    """:func:`diagonal_flags` for the entries (the nonzero ones when ``drop``, else ``values`` is
    never read) of a CSR's rows ``[bounds[t], bounds[t + 1])``."""
    rows = pos.size - 1
    for t in prange(bounds.size - 1):
        for i in range(bounds[t], bounds[t + 1]):
            for q in range(pos[U(i)], pos[U(i + 1)]):
                if not drop or values[U(q)] != 0:
                    d = np.intp(crd[U(q)]) - i + rows - 1
                    flags[t, U(d >> 6)] |= np.uint64(1) << np.uint64(d & 63)


@njit_cached(parallel=True)
def csr_dia_fill(pos, crd, values, bounds, offsets, by_row, length, out, drop):
    """Each entry ``(i, j)`` of a CSR (unique columns; nonzero ones when ``drop``) at
    ``out[d * length + k]``, ``d`` its diagonal's place in the ascending ``offsets`` and ``k``
    the row (``by_row``, DIAI) or the column (DIAJ); chunk ``t`` takes rows ``[bounds[t],
    bounds[t + 1])``. A row's columns ascend, so its next entry usually lies on the next stored
    diagonal (a banded matrix): that is tried first, else a binary search above the last one.
    Returns the zeros met."""
    nd = offsets.size
    zeros = 0
    for t in prange(bounds.size - 1):
        z = 0
        for i in range(bounds[t], bounds[t + 1]):
            lo = -1
            for q in range(pos[U(i)], pos[U(i + 1)]):
                v = values[U(q)]
                z += v == 0
                if not drop or v != 0:
                    j = np.intp(crd[U(q)])
                    off = j - i
                    if lo + 1 < nd and offsets[U(lo + 1)] == off:
                        lo += 1
                    else:
                        a, hi = max(lo, 0), nd
                        while hi - a > 1:
                            mid = (a + hi) >> 1
                            if offsets[U(mid)] <= off:
                                a = mid
                            else:
                                hi = mid
                        lo = a
                    out[U(lo * length + (i if by_row else j))] = v
        zeros += z
    return zeros


DENSE_DIA_ROWS = 256  # rows per chunk of dense_dia_fill (their lines of every diagonal stay in cache)


@njit_cached(parallel=True)
def dense_dia_fill(x2, mode, mask, offsets, by_row, length, values):
    """``values[d * length + k]`` = ``x2[i, i + offsets[d]]`` where selected, ``k`` the row
    (``by_row``: DIAI) or the column (DIAJ); ``values`` zeroed. Chunks of
    :data:`DENSE_DIA_ROWS` rows in parallel, only the stored diagonals read."""
    rows, cols = x2.shape
    nd = offsets.size
    for blk in prange((rows + DENSE_DIA_ROWS - 1) // DENSE_DIA_ROWS):
        lo, hi = blk * DENSE_DIA_ROWS, min(rows, (blk + 1) * DENSE_DIA_ROWS)
        for d in range(nd):
            off = np.intp(offsets[d])
            for i in range(max(lo, -off), min(hi, cols - off)):
                v = x2[i, i + off]
                if _selected(mode, v, mask, i, i + off):
                    values[U(d * length + (i if by_row else i + off))] = v


@njit_cached(parallel=True)
def dia_product(a_off, a_val, a_rows, b_off, b_val, b_rows, pair, c_val, c_rows, m, k, n, bounds):
    """``C = A @ B`` of two DIA matrices (``m x k`` and ``k x n``) into the DIA values ``c_val``
    (zeroed): diagonal ``pair[da * len(b_off) + db]`` of C (-1: outside C) gathers the products
    of A's diagonal ``da`` and B's ``db`` (offsets add). A diagonal's values are indexed by the
    row (``*_rows``: DIAI) or the column (DIAJ). Chunks of C's rows ``[bounds[t], bounds[t + 1])``
    run in parallel, every pair of diagonals over one chunk in turn (the chunk's rows stay in cache)."""
    na, nb = a_off.size, b_off.size
    a_len, b_len, c_len = (m if a_rows else k), (k if b_rows else n), (m if c_rows else n)
    for t in prange(bounds.size - 1):
        for da in range(na):
            oa = np.intp(a_off[da])
            for db in range(nb):
                dc = pair[da * nb + db]
                if dc < 0:
                    continue
                ob = np.intp(b_off[db])
                lo = max(bounds[t], -oa, -oa - ob)
                hi = min(bounds[t + 1], k - oa, n - oa - ob)
                ab, bb, cb = da * a_len, db * b_len, dc * c_len
                for i in range(lo, hi):
                    x = a_val[U(ab + (i if a_rows else i + oa))]
                    y = b_val[U(bb + (i + oa if b_rows else i + oa + ob))]
                    c_val[U(cb + (i if c_rows else i + oa + ob))] += x * y


@njit_cached(parallel=True)
def diagonals_nonzero(values, length, keep):
    """``keep[d]``: diagonal ``d`` (``values[d * length:(d + 1) * length]``) holds a nonzero (each
    scan stops at the first)."""
    for d in prange(keep.size):
        found = False
        for q in range(d * length, (d + 1) * length):
            if values[U(q)] != 0:
                found = True
                break
        keep[d] = found


@njit_cached(parallel=True)
def segments_increasing(pos, crd):
    """How many coordinates of ``crd`` do not exceed the one before them in their segment of
    ``pos`` (0: every segment strictly increasing)."""
    bad = 0
    for b in prange(pos.size - 1):
        for p in range(np.intp(pos[U(b)]) + 1, np.intp(pos[U(b + 1)])):
            bad += crd[U(p)] <= crd[U(p - 1)]
    return bad


@njit_cached(parallel=True)
def prefix_in_place(a, blocks):
    """``a`` replaced by its inclusive prefix sum, ``blocks`` (chunk borders) summed in parallel,
    then offset block by block in parallel; returns the total."""
    nblocks = blocks.size - 1
    sums = np.zeros(nblocks + 1, dtype=np.int64)
    for k in prange(nblocks):
        s = 0
        for q in range(blocks[k], blocks[k + 1]):
            s += a[U(q)]
        sums[k + 1] = s
    for k in range(nblocks):
        sums[k + 1] += sums[k]
    for k in prange(nblocks):
        run = sums[k]
        for q in range(blocks[k], blocks[k + 1]):
            run += a[U(q)]
            a[U(q)] = run
    return sums[nblocks]


def threads() -> int:
    """Threads Numba's parallel kernels run on here (``numba.get_num_threads``)."""
    return numba.get_num_threads()
