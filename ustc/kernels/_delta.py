"""Bit-packed delta(b) SpMV (MACKO-style): gaps decoded in registers while the row is walked.

A row's coordinates are rebuilt as ``c = previous + 1 + gap``. A 32-bit word holds
``32 / b`` gaps; the kernel loads each word once and peels its gaps off with shifts
(a loop of constant trip count, unrolled), so a 4-bit gap costs 4 bits of memory
traffic. Two accumulators keep the additions off one dependency chain. Padding
entries (value 0) only advance the coordinate. One kernel per ``b`` (the word
layout is a compile-time constant).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit, prange


@functools.lru_cache(maxsize=None)
def packed_spmv(bits: int):
    """The kernel ``(pos, words, vals, x, y, alpha, n_rows)`` adding ``alpha * A @ x`` into ``y`` for
    ``(i, j) -> (i : dense, j : delta(bits, packed))``; entry ``p``'s gap is bits
    ``(p * bits) % 32`` .. of ``words[p * bits // 32]``."""
    per = 32 // bits
    mask = np.uint32((1 << bits) - 1)
    shift = np.uint32(bits)

    @njit(cache=True, nogil=True, parallel=True)
    def kernel(pos, words, vals, x, y, alpha, n_rows):
        for i_u in prange(n_rows):
            i = np.intp(i_u)
            c = np.int64(-1)
            acc0 = y.dtype.type(0)
            acc1 = y.dtype.type(0)
            p = np.int64(pos[i])
            stop = np.int64(pos[i + 1])
            while p < stop and p % per != 0:  # head: up to the next word boundary
                c += 1 + np.int64((words[p // per] >> np.uint32((p % per) * bits)) & mask)
                acc0 += vals[p] * x[np.uintp(c)]
                p += 1
            while p + per <= stop:  # whole words: one load, per gaps peeled off in registers
                w = words[p // per]
                for k in range(0, per, 2):
                    c += 1 + np.int64(w & mask)
                    w >>= shift
                    acc0 += vals[p + k] * x[np.uintp(c)]
                    c += 1 + np.int64(w & mask)
                    w >>= shift
                    acc1 += vals[p + k + 1] * x[np.uintp(c)]
                p += per
            while p < stop:  # tail
                c += 1 + np.int64((words[p // per] >> np.uint32((p % per) * bits)) & mask)
                acc0 += vals[p] * x[np.uintp(c)]
                p += 1
            y[i] += alpha * (acc0 + acc1)

    return kernel
