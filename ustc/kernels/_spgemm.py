"""CSR x CSR -> CSR (Gustavson), hand-written: a counting pass, then a filling pass.

Rows are split into chunks that run in parallel; each chunk owns a marker
array and a dense accumulator of one output row (``n_cols`` entries), so no
two threads share state. Column indices of each output row are sorted, so the
result is a canonical CSR (ordered, unique), as the format promises.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True, parallel=True)
def spgemm_count(apos, acrd, bpos, bcrd, n_rows, n_cols, chunks):
    """``sizes[i + 1]`` = number of distinct columns of output row ``i`` (``sizes[0] = 0``)."""
    sizes = np.zeros(n_rows + 1, dtype=np.int64)
    for ch in prange(chunks):
        lo = n_rows * ch // chunks
        hi = n_rows * (ch + 1) // chunks
        mark = np.full(n_cols, -1, dtype=np.int32)
        for i in range(lo, hi):
            count = 0
            for pa in range(apos[i], apos[i + 1]):
                k = acrd[pa]
                for pb in range(bpos[k], bpos[k + 1]):
                    j = bcrd[pb]
                    if mark[j] != i:
                        mark[j] = np.int32(i)
                        count += 1
            sizes[i + 1] = count
    return sizes


@njit(cache=True, nogil=True)
def _sort_small(a, lo, hi):
    """Insertion sort of ``a[lo:hi]`` (output rows are short)."""
    for p in range(lo + 1, hi):
        v = a[p]
        q = p - 1
        while q >= lo and a[q] > v:
            a[q + 1] = a[q]
            q -= 1
        a[q + 1] = v


@njit(cache=True, nogil=True, parallel=True)
def spgemm_fill(apos, acrd, avals, bpos, bcrd, bvals, pos, crd, vals, n_rows, n_cols, chunks):
    """Columns (sorted) and values of every output row at ``pos[i]``."""
    for ch in prange(chunks):
        lo = n_rows * ch // chunks
        hi = n_rows * (ch + 1) // chunks
        mark = np.full(n_cols, -1, dtype=np.int32)
        acc = np.zeros(n_cols, dtype=vals.dtype)
        for i in range(lo, hi):
            top = pos[i]
            for pa in range(apos[i], apos[i + 1]):
                k = acrd[pa]
                av = avals[pa]
                for pb in range(bpos[k], bpos[k + 1]):
                    j = bcrd[pb]
                    if mark[j] != i:
                        mark[j] = np.int32(i)
                        crd[top] = j
                        top += 1
                    acc[j] += av * bvals[pb]
            if top - pos[i] < 64:
                _sort_small(crd, pos[i], top)
            else:
                crd[pos[i]:top].sort()
            for p in range(pos[i], top):
                j = crd[p]
                vals[p] = acc[j]
                acc[j] = 0
