"""Row-major CSR kernels of a sparse layer's backward pass: the SDDMM of the weight gradient and the
SpMM of the input gradient, with the dense factors' shared dimension (the tokens) contiguous.

* :func:`csr_sddmm`: ``out[slot[p]] = left[i, :] · right[crd[p], :]`` for every stored entry ``p``
  of row ``i`` (``dW = gᵀ @ x`` at the weight's pattern: ``left = gᵀ``, ``right = xᵀ``, or the
  transposed pattern with ``left = xᵀ``, ``right = gᵀ``);
* :func:`csr_spmm`: ``out[i, :] = Σ_p vals[p] · b[crd[p], :]`` over row ``i``'s entries, row chunks
  in parallel (a gather of ``b``'s rows);
* :func:`csr_spmm_t`: ``out[crd[p], :] += vals[p] · b[i, :]`` (``out = Aᵀ @ b`` from ``A``'s rows: a
  scatter into ``out``'s rows), token chunks in parallel (each thread owns columns of ``out``).

Which dense factor a kernel streams once per stored entry (``right``; ``b`` in the gather, ``out``
in the scatter) is the caller's choice: the one with fewer rows stays in the core's L2 cache, the
other is read once per row. The parallel loop is outermost (one parallel region a call). Four
stored entries go through the token loop together: one load of the shared row serves four
products (SDDMM), four rows are summed before one update of the output row (gather) or one row
of ``b`` is loaded for four updates (scatter). Float sums are reassociated (``fastmath``: LLVM
vectorises the token loop). Tiling the tokens so that every factor fits L2 measured slower on the
project machine (more loop overhead and reductions than the L3 traffic it saved).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..cache._lean import njit_cached
from ._spgemm import U

_FAST = {"reassoc", "contract"}


def column_chunks(width: int, threads: int) -> np.ndarray:
    """Bounds splitting ``width`` columns into ``threads`` chunks (multiples of 16 where they can be)."""
    chunks = max(1, min(width, threads))
    step = -(-width // chunks)
    step = -(-step // 16) * 16 if step > 16 else step
    return np.minimum(np.arange(chunks + 1, dtype=np.int64) * step, width)


@njit_cached(nogil=True, parallel=True, fastmath=_FAST)
def csr_sddmm(pos, crd, slot, left, right, bounds, out):
    """``out[slot[p]] = Σ_t left[i, t] * right[crd[p], t]`` for each entry ``p`` of each row ``i``
    (row chunks ``bounds`` in parallel). ``left`` (rows, r) and ``right`` (cols, r) C-contiguous;
    the caller guarantees ``pos`` / ``crd`` are a valid CSR of ``left``'s rows by ``right``'s rows
    and ``slot`` holds ``pos[-1]`` distinct positions of ``out``."""
    r = left.shape[1]
    zero = out.dtype.type(0)
    for ch in prange(len(bounds) - 1):
        for i in range(bounds[ch], bounds[ch + 1]):
            a = left[U(i)]
            p, end = np.int64(pos[U(i)]), np.int64(pos[U(i + 1)])
            while p + 3 < end:
                b0, b1 = right[U(crd[U(p)])], right[U(crd[U(p + 1)])]
                b2, b3 = right[U(crd[U(p + 2)])], right[U(crd[U(p + 3)])]
                s0 = s1 = s2 = s3 = zero
                for t in range(r):
                    at = a[U(t)]
                    s0 += at * b0[U(t)]
                    s1 += at * b1[U(t)]
                    s2 += at * b2[U(t)]
                    s3 += at * b3[U(t)]
                out[U(slot[U(p)])] = s0
                out[U(slot[U(p + 1)])] = s1
                out[U(slot[U(p + 2)])] = s2
                out[U(slot[U(p + 3)])] = s3
                p += 4
            while p < end:
                b0 = right[U(crd[U(p)])]
                s0 = zero
                for t in range(r):
                    s0 += a[U(t)] * b0[U(t)]
                out[U(slot[U(p)])] = s0
                p += 1


@njit_cached(nogil=True, parallel=True, fastmath=_FAST)
def csr_spmm(pos, crd, vals, b, bounds, out):
    """``out[i, :] = Σ_p vals[p] * b[crd[p], :]`` over each row ``i``'s entries (row chunks
    ``bounds`` in parallel; empty rows get zeros). ``b`` (cols, r) and ``out`` (rows, r)
    C-contiguous; the caller guarantees ``pos`` / ``crd`` are a valid CSR of ``out``'s rows by
    ``b``'s rows and ``vals`` holds ``pos[-1]`` entries."""
    r = b.shape[1]
    for ch in prange(len(bounds) - 1):
        for i in range(bounds[ch], bounds[ch + 1]):
            o = out[U(i)]
            for t in range(r):
                o[U(t)] = 0
            p, end = np.int64(pos[U(i)]), np.int64(pos[U(i + 1)])
            while p + 3 < end:
                v0, v1, v2, v3 = vals[U(p)], vals[U(p + 1)], vals[U(p + 2)], vals[U(p + 3)]
                b0, b1 = b[U(crd[U(p)])], b[U(crd[U(p + 1)])]
                b2, b3 = b[U(crd[U(p + 2)])], b[U(crd[U(p + 3)])]
                for t in range(r):
                    o[U(t)] += v0 * b0[U(t)] + v1 * b1[U(t)] + v2 * b2[U(t)] + v3 * b3[U(t)]
                p += 4
            while p < end:
                v0, b0 = vals[U(p)], b[U(crd[U(p)])]
                for t in range(r):
                    o[U(t)] += v0 * b0[U(t)]
                p += 1


@njit_cached(nogil=True, parallel=True, fastmath=_FAST)
def csr_spmm_t(pos, crd, vals, b, bounds, out):
    """``out = Aᵀ @ b`` for the CSR ``A`` (``pos`` / ``crd`` / ``vals``): ``out`` zeroed, then
    ``out[crd[p], t] += vals[p] * b[i, t]`` for each entry ``p`` of each row ``i``, the columns
    ``t`` in chunks ``bounds`` in parallel. ``b`` (rows, r) and ``out`` (cols, r) C-contiguous;
    the caller guarantees ``pos`` / ``crd`` are a valid CSR of ``b``'s rows by ``out``'s rows."""
    rows = len(pos) - 1
    for ch in prange(len(bounds) - 1):
        t0, t1 = bounds[ch], bounds[ch + 1]
        for j in range(out.shape[0]):
            o = out[U(j)]
            for t in range(t0, t1):
                o[U(t)] = 0
        for i in range(rows):
            a = b[U(i)]
            p, end = np.int64(pos[U(i)]), np.int64(pos[U(i + 1)])
            while p + 3 < end:
                v0, v1, v2, v3 = vals[U(p)], vals[U(p + 1)], vals[U(p + 2)], vals[U(p + 3)]
                o0, o1 = out[U(crd[U(p)])], out[U(crd[U(p + 1)])]
                o2, o3 = out[U(crd[U(p + 2)])], out[U(crd[U(p + 3)])]
                for t in range(t0, t1):
                    at = a[U(t)]
                    o0[U(t)] += v0 * at
                    o1[U(t)] += v1 * at
                    o2[U(t)] += v2 * at
                    o3[U(t)] += v3 * at
                p += 4
            while p < end:
                v0, o0 = vals[U(p)], out[U(crd[U(p)])]
                for t in range(t0, t1):
                    o0[U(t)] += v0 * a[U(t)]
                p += 1
