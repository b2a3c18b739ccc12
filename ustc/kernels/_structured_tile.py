"""n:m structured SpMM with a tile of ``Y`` held in vector registers: the batched product of a 2:4 ``nn.Linear``.

``Y = alpha * A @ B (+ Y)`` for ``Structured(n, m)`` ``A`` (slot ``q`` of row ``i`` in column
``(q // n) * m + crd[i * slots + q]``), ``B`` ``(columns, batch)`` and ``Y`` ``(rows, batch)`` row-major
float32. ``kernels._structured.nm_spmm`` adds eight slots' products into ``Y``'s row per pass over the
batch: a load and a store of ``Y`` per eight FMAs, a setup of ~40 instructions per pass, and one
dependency chain per vector (LLVM fused the eight products into one), 35 GFLOP/s on one thread of the
project's Xeon against 104 for MKL's dense GEMM. Here a tile of ``Y`` (``TILE`` rows by ``VECS``
16-lane vectors) stays in registers (``kernels._simd``) across a block of slots: each slot is one
broadcast of its value and, per vector, one load of ``B`` and one FMA; even and odd slots sum into two
accumulators, so eight FMA chains are in flight. Blocks of columns whose rows of ``B``'s tile span
``BLOCK_BYTES`` keep those rows in L1 across a chunk of ``CHUNK`` rows; ``Y``'s tile is loaded and
stored once per block. Tasks (a chunk of rows by a tile of the batch) are taken in turn from a shared
counter (``_simd.fetch_add``) by one worker per thread: a thread that the machine slows (another process
on its core) takes fewer tasks instead of holding the whole call, as an even split of the tasks did.

Three shapes of tile: ``widest`` (one row, 8 vectors: 128 columns of the batch), ``wide`` (one row, 4
vectors: 64 columns) and ``narrow`` (one row, one vector: 16 columns, eight slots a pass in eight
accumulators), chosen by the batch (:func:`kernel_for`). In the wide tiles a slot whose column lies past
``B``'s rows (an in-group coordinate of ``m`` or more) ends its block; the narrow tile clamps the
coordinate below ``m`` (an AND for a power of two) instead of testing it. Either way nothing is read
outside ``B``: :func:`accepts` requires whole groups (columns a multiple of ``m``, ``B``'s rows) and an
even number of slots a row, so valid coordinates never reach that test.
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from numba import prange

from ..cache._lean import njit_cached
from ._prefetch import prefetch
from ._simd import add, aligned_empty, fetch_add, fma, is_aligned, lanes_ops, store

U = np.uintp
LANES = 16  # float32 lanes of a 512-bit vector
BLOCK_BYTES = 16 * 1024  # bytes of B's tile rows a block of columns spans (L1 48 KiB; 32 KiB measured slower)
CHUNK = 32  # rows a task walks block by block
load, splat = lanes_ops(LANES)


def _block(tile_columns: int) -> int:
    """Slots a block walks (even, at least 2): rows of ``B``'s tile spanning ``BLOCK_BYTES``."""
    return max(2, BLOCK_BYTES // (tile_columns * 4) // 2 * 2)


WIDEST_BLOCK, WIDE_BLOCK = _block(8 * LANES), _block(4 * LANES)


@functools.lru_cache(maxsize=None)
def wide_kernel(n: int, m: int):
    """``(crd, vals, b, y, alpha, n_rows, slots, accumulate, workers)`` with a one-row tile of 64 batch
    columns (batch a multiple of 64); ``workers`` take the tasks (one per thread)."""
    un, um = U(n), U(m)

    @njit_cached(nogil=True, parallel=True, fastmath=True)
    def kernel(crd, vals, b, y, alpha, n_rows, slots, accumulate, workers):
        rows, per_row, width = U(n_rows), U(slots), U(b.shape[0])
        tiles = U(b.shape[1]) // U(4 * LANES)
        tasks = (rows + U(CHUNK) - U(1)) // U(CHUNK) * tiles
        block = U(WIDE_BLOCK)
        zero = splat(y.dtype.type(0))
        taken = np.zeros(1, np.int64)  # tasks handed out (see the module docstring)
        for _ in prange(workers):
            task = U(fetch_add(taken, 0, 1))
            while task < tasks:
                j0 = task % tiles * U(4 * LANES)
                first = task // tiles * U(CHUNK)
                last = min(rows, first + U(CHUNK))
                j1, j2, j3 = j0 + U(LANES), j0 + U(2 * LANES), j0 + U(3 * LANES)
                for q0 in range(U(0), per_row, block):
                    q1 = min(per_row, q0 + block)
                    keep = accumulate or q0 > U(0)
                    for i in range(first, last):
                        e0 = load(y, i, j0) if keep else zero
                        e1 = load(y, i, j1) if keep else zero
                        e2 = load(y, i, j2) if keep else zero
                        e3 = load(y, i, j3) if keep else zero
                        o0 = o1 = o2 = o3 = zero
                        base = i * per_row
                        for q in range(q0, q1, U(2)):
                            p = base + q
                            k = q // un * um + U(crd[p])
                            h = (q + U(1)) // un * um + U(crd[p + U(1)])
                            if max(k, h) >= width:
                                break
                            v, w = splat(alpha * vals[p]), splat(alpha * vals[p + U(1)])
                            e0 = fma(v, load(b, k, j0), e0)
                            o0 = fma(w, load(b, h, j0), o0)
                            e1 = fma(v, load(b, k, j1), e1)
                            o1 = fma(w, load(b, h, j1), o1)
                            e2 = fma(v, load(b, k, j2), e2)
                            o2 = fma(w, load(b, h, j2), o2)
                            e3 = fma(v, load(b, k, j3), e3)
                            o3 = fma(w, load(b, h, j3), o3)
                        prefetch(vals, base + q1)  # this row's next block (rows lie 4 KiB apart: no hardware stream)
                        prefetch(vals, base + q1 + U(16))
                        prefetch(crd, base + q1)
                        store(y, i, j0, add(e0, o0))
                        store(y, i, j1, add(e1, o1))
                        store(y, i, j2, add(e2, o2))
                        store(y, i, j3, add(e3, o3))
                task = U(fetch_add(taken, 0, 1))

    return kernel


@functools.lru_cache(maxsize=None)
def widest_kernel(n: int, m: int):
    """As :func:`wide_kernel` with a one-row tile of 128 batch columns (batch a multiple of 128): 16 FMA
    chains a pass, the slot's index arithmetic and broadcasts shared by twice the FMAs. 2048 x 2048 at 2:4,
    batch 128, one thread, CPU time, median of 11 alternating rounds at load 11-14: 7.50 ms against 9.67
    for the 64-column tile and 9.87 for dense ``F.linear`` (blocks of 8 and 24 KiB: 8.20, 7.70)."""
    un, um = U(n), U(m)

    @njit_cached(nogil=True, parallel=True, fastmath=True)
    def kernel(crd, vals, b, y, alpha, n_rows, slots, accumulate, workers):
        rows, per_row, width = U(n_rows), U(slots), U(b.shape[0])
        tiles = U(b.shape[1]) // U(8 * LANES)
        tasks = (rows + U(CHUNK) - U(1)) // U(CHUNK) * tiles
        block = U(WIDEST_BLOCK)
        zero = splat(y.dtype.type(0))
        taken = np.zeros(1, np.int64)  # tasks handed out (see the module docstring)
        for _ in prange(workers):
            task = U(fetch_add(taken, 0, 1))
            while task < tasks:
                j0 = task % tiles * U(8 * LANES)
                first = task // tiles * U(CHUNK)
                last = min(rows, first + U(CHUNK))
                j1, j2, j3, j4 = j0 + U(LANES), j0 + U(2 * LANES), j0 + U(3 * LANES), j0 + U(4 * LANES)
                j5, j6, j7 = j0 + U(5 * LANES), j0 + U(6 * LANES), j0 + U(7 * LANES)
                for q0 in range(U(0), per_row, block):
                    q1 = min(per_row, q0 + block)
                    keep = accumulate or q0 > U(0)
                    for i in range(first, last):
                        e0 = load(y, i, j0) if keep else zero
                        e1 = load(y, i, j1) if keep else zero
                        e2 = load(y, i, j2) if keep else zero
                        e3 = load(y, i, j3) if keep else zero
                        e4 = load(y, i, j4) if keep else zero
                        e5 = load(y, i, j5) if keep else zero
                        e6 = load(y, i, j6) if keep else zero
                        e7 = load(y, i, j7) if keep else zero
                        o0 = o1 = o2 = o3 = o4 = o5 = o6 = o7 = zero
                        base = i * per_row
                        for q in range(q0, q1, U(2)):
                            p = base + q
                            k = q // un * um + U(crd[p])
                            h = (q + U(1)) // un * um + U(crd[p + U(1)])
                            if max(k, h) >= width:
                                break
                            v, w = splat(alpha * vals[p]), splat(alpha * vals[p + U(1)])
                            e0 = fma(v, load(b, k, j0), e0)
                            o0 = fma(w, load(b, h, j0), o0)
                            e1 = fma(v, load(b, k, j1), e1)
                            o1 = fma(w, load(b, h, j1), o1)
                            e2 = fma(v, load(b, k, j2), e2)
                            o2 = fma(w, load(b, h, j2), o2)
                            e3 = fma(v, load(b, k, j3), e3)
                            o3 = fma(w, load(b, h, j3), o3)
                            e4 = fma(v, load(b, k, j4), e4)
                            o4 = fma(w, load(b, h, j4), o4)
                            e5 = fma(v, load(b, k, j5), e5)
                            o5 = fma(w, load(b, h, j5), o5)
                            e6 = fma(v, load(b, k, j6), e6)
                            o6 = fma(w, load(b, h, j6), o6)
                            e7 = fma(v, load(b, k, j7), e7)
                            o7 = fma(w, load(b, h, j7), o7)
                        prefetch(vals, base + q1)  # this row's next block (rows lie 4 KiB apart: no hardware stream)
                        prefetch(vals, base + q1 + U(16))
                        prefetch(crd, base + q1)
                        store(y, i, j0, add(e0, o0))
                        store(y, i, j1, add(e1, o1))
                        store(y, i, j2, add(e2, o2))
                        store(y, i, j3, add(e3, o3))
                        store(y, i, j4, add(e4, o4))
                        store(y, i, j5, add(e5, o5))
                        store(y, i, j6, add(e6, o6))
                        store(y, i, j7, add(e7, o7))
                task = U(fetch_add(taken, 0, 1))

    return kernel


UNROLL = 8  # slots a pass of the narrow tile: eight FMA chains in flight


@functools.lru_cache(maxsize=None)
def narrow_kernel(n: int, m: int):
    """As :func:`wide_kernel` with a one-row tile of 16 batch columns (batch a multiple of 16), walking whole
    rows (``B``'s 16 columns: 128 KiB for 2048 rows, from L2; a row's values and coordinates stream from
    memory) eight slots a pass into eight accumulators; ``alpha`` scales the row's sum once, at its store.
    Per slot: a load of the coordinate, its clamp, the column's address, a broadcast load of the value and
    an FMA reading ``B`` (the four-row tile it replaces took twice the instructions: a bound test per pair
    of slots, ``alpha`` per slot, spilled row pointers; 2048 x 2048 at 2:4, batch 16, one thread, CPU time:
    2.5-2.9 ms against 3.3-3.8 at load 9-10, in-cache weights alike)."""
    un, um = U(n), U(m)
    aligned = n > 0 and UNROLL % n == 0  # the pass's column offsets are then compile-time constants
    d0, d1, d2, d3, d4, d5, d6, d7 = (U(s // n * m if aligned else 0) for s in range(UNROLL))
    power = m & (m - 1) == 0  # clamp by an AND
    top = U(m - 1)

    @njit_cached(nogil=True, parallel=True, fastmath=True)
    def kernel(crd, vals, b, y, alpha, n_rows, slots, accumulate, workers):
        rows, per_row = U(n_rows), U(slots)
        tiles = U(b.shape[1]) // U(LANES)
        tasks = (rows + U(CHUNK) - U(1)) // U(CHUNK) * tiles
        unrolled = per_row // U(UNROLL) * U(UNROLL)
        zero = splat(y.dtype.type(0))
        scale = splat(alpha)
        taken = np.zeros(1, np.int64)  # tasks handed out (see the module docstring)
        for _ in prange(workers):
            task = U(fetch_add(taken, 0, 1))
            while task < tasks:
                j = task % tiles * U(LANES)
                first = task // tiles * U(CHUNK)
                for i in range(first, min(rows, first + U(CHUNK))):
                    base = i * per_row
                    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = zero
                    for q in range(U(0), unrolled, U(UNROLL)):
                        p = base + q
                        c0, c1, c2, c3 = U(crd[p]), U(crd[p + U(1)]), U(crd[p + U(2)]), U(crd[p + U(3)])
                        c4, c5, c6, c7 = U(crd[p + U(4)]), U(crd[p + U(5)]), U(crd[p + U(6)]), U(crd[p + U(7)])
                        if power:
                            c0, c1, c2, c3, c4, c5, c6, c7 = c0 & top, c1 & top, c2 & top, c3 & top, \
                                c4 & top, c5 & top, c6 & top, c7 & top
                        else:
                            c0, c1, c2, c3 = min(c0, top), min(c1, top), min(c2, top), min(c3, top)
                            c4, c5, c6, c7 = min(c4, top), min(c5, top), min(c6, top), min(c7, top)
                        if aligned:
                            g = q // un * um
                            c0, c1, c2, c3 = g + d0 + c0, g + d1 + c1, g + d2 + c2, g + d3 + c3
                            c4, c5, c6, c7 = g + d4 + c4, g + d5 + c5, g + d6 + c6, g + d7 + c7
                        else:
                            c0, c1 = q // un * um + c0, (q + U(1)) // un * um + c1
                            c2, c3 = (q + U(2)) // un * um + c2, (q + U(3)) // un * um + c3
                            c4, c5 = (q + U(4)) // un * um + c4, (q + U(5)) // un * um + c5
                            c6, c7 = (q + U(6)) // un * um + c6, (q + U(7)) // un * um + c7
                        a0 = fma(splat(vals[p]), load(b, c0, j), a0)
                        a1 = fma(splat(vals[p + U(1)]), load(b, c1, j), a1)
                        a2 = fma(splat(vals[p + U(2)]), load(b, c2, j), a2)
                        a3 = fma(splat(vals[p + U(3)]), load(b, c3, j), a3)
                        a4 = fma(splat(vals[p + U(4)]), load(b, c4, j), a4)
                        a5 = fma(splat(vals[p + U(5)]), load(b, c5, j), a5)
                        a6 = fma(splat(vals[p + U(6)]), load(b, c6, j), a6)
                        a7 = fma(splat(vals[p + U(7)]), load(b, c7, j), a7)
                    for q in range(unrolled, per_row):  # the row's last slots
                        p = base + q
                        c = U(crd[p]) & top if power else min(U(crd[p]), top)
                        a0 = fma(splat(vals[p]), load(b, q // un * um + c, j), a0)
                    total = add(add(add(a0, a1), add(a2, a3)), add(add(a4, a5), add(a6, a7)))
                    store(y, i, j, fma(scale, total, load(y, i, j) if accumulate else zero))
                task = U(fetch_add(taken, 0, 1))

    return kernel


def kernel_for(n: int, m: int, batch: int):
    """The kernel for a batch of ``batch`` columns, or None (not a multiple of 16)."""
    if batch % (8 * LANES) == 0:
        return widest_kernel(n, m)
    if batch % (4 * LANES) == 0:
        return wide_kernel(n, m)
    return narrow_kernel(n, m) if batch % LANES == 0 else None


def accepts(n: int, m: int, a, b) -> bool:
    """Whether :class:`NmTile` takes ``Structured(n, m)`` ``a`` times ``b``: float32 values, a C-contiguous
    2-D NumPy ``b`` of float32 whose batch is a positive multiple of 16, whole groups (columns a multiple
    of ``m``, ``b``'s rows), an even number of slots a row, a value per slot."""
    vals = a.raw_values
    rows, columns = a.shape
    return n > 0 and isinstance(b, np.ndarray) and b.ndim == 2 and b.flags.c_contiguous \
        and vals.dtype == np.float32 and b.dtype == np.float32 and vals.ndim == 1 \
        and b.shape[1] > 0 and b.shape[1] % LANES == 0 and columns % m == 0 \
        and (columns // m * n) % 2 == 0 and len(vals) == rows * (columns // m) * n and b.shape[0] == columns


class NmTile:
    """The kernel of a planned ``Structured(n, m)`` SpMM (``kernels._linear_nm.NmSelect``'s interface). A
    ``B`` not aligned to 64 bytes is copied into an aligned scratch first (kept between executes; the
    Matmul's lock serialises them): 2048 x 2048 at 2:4, batch 128, one thread, 8.95 ms aligned against
    17.0 with ``B`` 16 bytes off; the copy of ``B`` (1 MiB) costs about 0.2 ms."""

    def __init__(self, n: int, m: int):
        self.n, self.m, self._b = n, m, None

    def arguments(self, a, b, out, alpha, accumulate: bool, parallel: bool) -> tuple:
        slots = a.shape[1] // self.m * self.n
        if not is_aligned(b):  # rows of B at 64-byte boundaries: a vector load then touches one cache line
            if self._b is None or self._b.shape != b.shape:
                self._b = aligned_empty(b.shape, b.dtype)
            np.copyto(self._b, b)
            b = self._b
        return kernel_for(self.n, self.m, b.shape[1]), \
            (a.raw_buffers[(2, "crd")], a.raw_values, b, out, out.dtype.type(alpha), a.shape[0], slots, accumulate,
             numba.get_num_threads())  # one worker per thread (an argument: the kernel stays cacheable)

    def run(self, a, b, out, alpha, accumulate: bool, parallel: bool) -> None:
        kernel, args = self.arguments(a, b, out, alpha, accumulate, parallel)
        kernel(*args)

    def compile(self, a, b, out, alpha, accumulate: bool, parallel: bool) -> None:
        kernel, args = self.arguments(a, b, out, alpha, accumulate, parallel)
        kernel.compile(tuple(numba.typeof(x) for x in args))
