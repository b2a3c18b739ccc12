"""Delta(b) SpMV (MACKO-style): gaps decoded in registers while the row is walked.

A row's coordinates are rebuilt as ``c = previous + 1 + gap``. With the
bit-packed storage a 32-bit word holds ``32 / b`` gaps; the kernel loads each
word once and peels gaps off it with shifts, so a 4-bit gap costs 4 bits of
memory traffic. Padding entries (value 0) only advance the coordinate.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True, parallel=True)
def delta_spmv(pos, gaps, vals, x, y, alpha, n_rows):
    """``y += alpha * A @ x`` for ``(i, j) -> (i : dense, j : delta(b))`` (one gap per entry)."""
    for i in prange(n_rows):
        c = np.int64(-1)
        acc = y.dtype.type(0)
        for p in range(pos[i], pos[i + 1]):
            c += 1 + np.int64(gaps[p])
            acc += vals[p] * x[np.uintp(c)]
        y[i] += alpha * acc


@njit(cache=True, nogil=True, parallel=True)
def delta_packed_spmv(pos, words, vals, x, y, alpha, n_rows, bits):
    """As :func:`delta_spmv` for ``delta(b, packed)``: entry ``p``'s gap is bits
    ``(p * b) % 32`` .. of ``words[p * b // 32]``."""
    per = 32 // bits
    mask = np.uint32((1 << bits) - 1)
    for i in prange(n_rows):
        c = np.int64(-1)
        acc = y.dtype.type(0)
        p = np.int64(pos[i])
        stop = np.int64(pos[i + 1])
        while p < stop and p % per != 0:  # head: up to the next word boundary
            c += 1 + np.int64((words[p // per] >> np.uint32((p % per) * bits)) & mask)
            acc += vals[p] * x[np.uintp(c)]
            p += 1
        while p + per <= stop:  # whole words: one load, per gaps peeled off in registers
            w = words[p // per]
            for k in range(per):
                c += 1 + np.int64(w & mask)
                w >>= np.uint32(bits)
                acc += vals[p + k] * x[np.uintp(c)]
            p += per
        while p < stop:  # tail
            c += 1 + np.int64((words[p // per] >> np.uint32((p % per) * bits)) & mask)
            acc += vals[p] * x[np.uintp(c)]
            p += 1
        y[i] += alpha * acc
