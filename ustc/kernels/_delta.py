"""Bit-packed delta(b) SpMV (MACKO-style): gaps decoded in registers while the row is walked.

A row's coordinates are rebuilt as ``c = previous + 1 + gap``. A 32-bit word holds
``32 / b`` gaps; the kernel loads each word once and peels its gaps off with shifts
(a loop of constant trip count, unrolled), so a 4-bit gap costs 4 bits of memory
traffic. Two accumulators keep the additions off one dependency chain: gaps are
decoded in pairs, and a word holding an odd number of them (b = 6: 5 gaps, b = 10:
3) decodes its last one alone, into the first accumulator. Padding
entries (value 0) only advance the coordinate. One kernel per ``b`` (the word
layout is a compile-time constant).

Entry positions are unsigned (``np.uintp``), which drops Numba's negative-index
test from every access (one thread, 1M rows of 32 entries, 4-bit gaps: 43.5 ->
34 ms). The decode is compute-bound: CSR moves more bytes there and takes 14.6 ms.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import prange

from ..cache._lean import njit_cached

U = np.uintp


@functools.lru_cache(maxsize=None)
def packed_spmv(bits: int):
    """The kernel ``(pos, words, vals, x, y, alpha, n_rows)`` adding ``alpha * A @ x`` into ``y`` for
    ``(i, j) -> (i : dense, j : delta(bits, packed))``; entry ``p``'s gap is bits
    ``(p % per) * bits`` .. of ``words[p // per]``, ``per = 32 // bits``."""
    per = 32 // bits
    pairs, odd = per // 2 * 2, per % 2 == 1  # compile-time: the odd gap's branch folds away
    mask = np.uint32((1 << bits) - 1)
    shift = np.uint32(bits)
    upper, ubits, one = U(per), U(bits), U(1)    # unsigned entry arithmetic: no wraparound tests

    @njit_cached(nogil=True, parallel=True)
    def kernel(pos, words, vals, x, y, alpha, n_rows):
        for i_u in prange(n_rows):
            i = np.intp(i_u)
            c = np.int64(-1)
            acc0 = y.dtype.type(0)
            acc1 = y.dtype.type(0)
            p = U(pos[U(i)])
            stop = U(pos[U(i + 1)])
            while p < stop and p % upper != U(0):  # head: up to the next word boundary
                c += 1 + np.int64((words[p // upper] >> np.uint32((p % upper) * ubits)) & mask)
                acc0 += vals[p] * x[U(c)]
                p += one
            while p + upper <= stop:  # whole words: one load, per gaps peeled off in registers
                w = words[p // upper]
                for k in range(0, pairs, 2):
                    c += 1 + np.int64(w & mask)
                    w >>= shift
                    acc0 += vals[p + U(k)] * x[U(c)]
                    c += 1 + np.int64(w & mask)
                    w >>= shift
                    acc1 += vals[p + U(k + 1)] * x[U(c)]
                if odd:
                    c += 1 + np.int64(w & mask)
                    acc0 += vals[p + U(pairs)] * x[U(c)]
                p += upper
            while p < stop:  # tail
                c += 1 + np.int64((words[p // upper] >> np.uint32((p % upper) * ubits)) & mask)
                acc0 += vals[p] * x[U(c)]
                p += one
            y[U(i)] += alpha * (acc0 + acc1)

    return kernel
