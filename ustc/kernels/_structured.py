"""n:m structured SpMV and SpMM: ``(i, j) -> (i : dense, j floordiv m : dense, j mod m : structured[n, m])``.

Row ``i`` stores ``n`` slots per group of ``m`` columns; slot ``q`` of the row
(``p = i * groups * n + q``) sits in column ``(q // n) * m + crd[p]``. The
kernel walks a row's slots in one flat loop whose column arithmetic is a
compile-time shift / multiply (one kernel per ``(n, m)``), with unsigned
positions (no negative-index tests) and ``fastmath`` so that LLVM may
reassociate the sum and vectorise the gathers. The generated kernel walks
group by group with a bounds test per slot: 2048 x 2048 at 2:4, float32, on
the project's 2-core EPYC, 574 µs against 303 µs here on 2 threads (1147
against 607 on one; dense GEMV 283 / 292). Groups reaching past the last
column (a width not a multiple of ``m``) take a checked tail loop.

The SpMM ``Y += alpha * A @ B`` (``B``: ``(columns, batch)``, ``Y``: ``(rows,
batch)``, both row-major) walks a row's slots ``UNROLL`` at a time: for each
group of slots it adds ``Σ v_s * B[k_s, :]`` to ``Y[i, :]`` in one loop over
the batch, contiguous in both arrays, so LLVM vectorises it over the batch
(``UNROLL`` loads of ``B`` per load and store of ``Y``, the ``v_s`` and
``k_s`` held in registers across it). Written one slot per pass, the row of
``Y`` makes a store-to-load chain per slot, and a loop over the slots with the
batch innermost and constant lets LLVM vectorise over slots with gathers: both
measured slower than dense ``F.linear``.

The SpMM walks blocks: each thread takes ``ROW_CHUNK`` rows at a time and
walks their slots one block of columns after another, a block spanning the
columns whose rows of ``B`` fill about ``L1_TILE`` bytes, so those rows of
``B`` are read from L1 by every row of the chunk (walked row by row, each
pass read its 8 rows of ``B`` from L2: the product was bound by L2 traffic).
2048 x 2048 at 2:4, float32, one thread on the project's Intel Xeon (CPU time,
load 11-13, median of 7): batch 16 5.75 -> 4.79 ms, batch 128 29.4 -> 20.5,
batch 512 192 -> 75 (dense ``F.linear`` 3.7, 13.1, 41.3); blocks of 16 or 64
KiB and chunks of 8 or 64 rows measured no better. The vectors are 256 bits
wide (LLVM's choice on this AVX-512 CPU), where MKL's are 512.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import prange

from ..cache._lean import njit_cached

U = np.uintp


@functools.lru_cache(maxsize=None)
def nm_spmv(n: int, m: int, parallel: bool = True):
    """The kernel ``(crd, vals, x, y, alpha, n_rows, n_groups, n_cols)`` adding ``alpha * A @ x`` into
    ``y`` for the n:m structured ``A`` whose in-group coordinates are ``crd`` (``n_groups`` groups of
    ``m`` columns per row, ``n`` slots each); rows in parallel unless not ``parallel`` (small products,
    where waking the threads costs more than the product)."""
    un, um = U(n), U(m)

    @njit_cached(nogil=True, parallel=parallel, fastmath=True)
    def kernel(crd, vals, x, y, alpha, n_rows, n_groups, n_cols):
        serial = not parallel  # noqa: F841  (in the closure: Numba's cache key hashes closure cells, not flags)
        per_row = U(n_groups) * un
        full = U(n_cols // m) * un  # slots of the groups that end inside the matrix
        for i_u in prange(n_rows):
            base = U(i_u) * per_row
            acc = y.dtype.type(0)
            for q in range(full):
                p = base + U(q)
                acc += vals[p] * x[U(q) // un * um + U(crd[p])]
            for q in range(full, per_row):  # the last, partial group: padding may point past the matrix
                p = base + U(q)
                column = U(q) // un * um + U(crd[p])
                if column < U(n_cols):
                    acc += vals[p] * x[column]
            y[U(i_u)] += alpha * acc

    return kernel



UNROLL = 8  # slots per pass over the batch (see the module docstring)
L1_TILE = 32 * 1024  # bytes of B's rows one block of columns spans (the L1 is 48 KiB here)
ROW_CHUNK = 32  # rows a thread walks block by block, fewer where that leaves under MIN_CHUNKS chunks
MIN_CHUNKS = 16  # (numba.get_num_threads() in the kernel would make it uncacheable)


@functools.lru_cache(maxsize=None)
def nm_spmm(n: int, m: int, parallel: bool = True):
    """The kernel ``(crd, vals, b, y, alpha, n_rows, n_groups, n_cols)`` adding ``alpha * A @ b`` into
    ``y`` (``b``: ``(n_cols, batch)``, ``y``: ``(n_rows, batch)``) for the n:m structured ``A`` whose
    in-group coordinates are ``crd`` (``n_groups`` groups of ``m`` columns per row, ``n`` slots each);
    chunks of rows in parallel unless not ``parallel`` (as :func:`nm_spmv`), each chunk's slots block by
    block (the module docstring). The slot values are scaled by ``alpha`` before the loop over the batch:
    taking them unscaled when ``alpha`` is 1 measured slower (2.0x at batch 4, same at 128)."""
    un, um, u8 = U(n), U(m), U(UNROLL)
    # column offset of slot s of a pass from the pass's first slot q: compile-time when n divides UNROLL
    aligned = n > 0 and UNROLL % n == 0  # n 0 (Structured(0, m): no slots) never enters the loops
    d0, d1, d2, d3, d4, d5, d6, d7 = (U(s // n * m if aligned else 0) for s in range(UNROLL))
    tile, most = U(L1_TILE), U(ROW_CHUNK)

    @njit_cached(nogil=True, parallel=parallel, fastmath=True)
    def kernel(crd, vals, b, y, alpha, n_rows, n_groups, n_cols):
        serial = not parallel  # noqa: F841  (in the closure: Numba's cache key hashes closure cells, not flags)
        per_row = U(n_groups) * un
        full = U(n_cols // m) * un  # slots of the groups that end inside the matrix
        unrolled = full // u8 * u8
        batch = U(b.shape[1])
        # slots per block (whole passes, at least one): the block's columns of b span about `tile` bytes
        columns = tile // max(U(1), batch * U(b.itemsize))
        block = max(u8, columns // um * un // u8 * u8)
        rows = U(n_rows)
        chunk = min(most, max(U(1), rows // U(MIN_CHUNKS)))  # threads kept busy on short matrices too
        for c in prange((rows + chunk - U(1)) // chunk):
            first = U(c) * chunk
            last = min(rows, first + chunk)
            for q0 in range(U(0), unrolled, block):
                q1 = min(unrolled, q0 + block)
                for i in range(first, last):
                    base = i * per_row
                    for q in range(q0, q1, u8):
                        p = base + q
                        if aligned:
                            g = q // un * um
                            k0, k1, k2, k3 = g + d0 + U(crd[p]), g + d1 + U(crd[p + U(1)]), \
                                g + d2 + U(crd[p + U(2)]), g + d3 + U(crd[p + U(3)])
                            k4, k5, k6, k7 = g + d4 + U(crd[p + U(4)]), g + d5 + U(crd[p + U(5)]), \
                                g + d6 + U(crd[p + U(6)]), g + d7 + U(crd[p + U(7)])
                        else:
                            k0 = q // un * um + U(crd[p])
                            k1 = (q + U(1)) // un * um + U(crd[p + U(1)])
                            k2 = (q + U(2)) // un * um + U(crd[p + U(2)])
                            k3 = (q + U(3)) // un * um + U(crd[p + U(3)])
                            k4 = (q + U(4)) // un * um + U(crd[p + U(4)])
                            k5 = (q + U(5)) // un * um + U(crd[p + U(5)])
                            k6 = (q + U(6)) // un * um + U(crd[p + U(6)])
                            k7 = (q + U(7)) // un * um + U(crd[p + U(7)])
                        v0, v1, v2, v3 = alpha * vals[p], alpha * vals[p + U(1)], alpha * vals[p + U(2)], \
                            alpha * vals[p + U(3)]
                        v4, v5, v6, v7 = alpha * vals[p + U(4)], alpha * vals[p + U(5)], alpha * vals[p + U(6)], \
                            alpha * vals[p + U(7)]
                        for j in range(batch):
                            y[i, j] += ((v0 * b[k0, j] + v1 * b[k1, j]) + (v2 * b[k2, j] + v3 * b[k3, j])) + \
                                ((v4 * b[k4, j] + v5 * b[k5, j]) + (v6 * b[k6, j] + v7 * b[k7, j]))
            for i in range(first, last):  # the rest, and the partial group: padding may point past the matrix
                base = i * per_row
                for q in range(unrolled, per_row):
                    p = base + q
                    column = q // un * um + U(crd[p])
                    if column < U(n_cols):
                        v = alpha * vals[p]
                        for j in range(batch):
                            y[i, j] += v * b[column, j]

    return kernel
