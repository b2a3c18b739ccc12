"""CSR SpMV over a few diagonals: a bit mask per row instead of column indices.

Where every stored entry of a CSR matrix lies on one of at most :data:`MAX_DIAGONALS` diagonals
(offsets ``o = col - row``; a stencil, a banded matrix) and each row's columns are sorted and
unique, row ``i``'s columns are ``i + offsets[d]`` for the set bits ``d`` of one mask, in order. A
planned product then keeps the sorted offsets and one mask per row (uint8 up to 8 diagonals, else
uint16 / uint32) and reads the operand's values in place: the 7-point stencil of side 114 moves
values, ``x``, ``y`` and 1.5 MB of masks (107 MB) instead of 16-bit columns and row lengths too
(128 MB). The values stay the user's: nothing of them is copied, so a change in place counts at
the next execute, as for the 16-bit copies (``_narrow_spmv``).

The kernel compiles once per number of diagonals (the offsets travel as a tuple, so the loop over
a full row unrolls with the offsets in registers); rows missing some diagonals (a stencil's
faces) test the mask's bits. For float32 / float64 on AVX-512 hosts, runs of 8 full rows go in
one vector (:func:`diagonal_spmv_lanes`: the stencil's interior, 95% of its rows): 8 rows' values
of a diagonal are every ``k``-th of the run's entries and their ``x`` one contiguous load, so a
run costs ``k`` gathers from L1, ``k`` loads and ``k`` FMAs instead of ``8 k`` of each (stencil
114^3, one thread, CPU time: 10.9 ms against 13.5 for the row-at-a-time kernel, Intel Xeon). On
an AMD EPYC (Zen 4), whose gathers are microcoded, the same vector kernel took 8.5 ms against 4.2
for the row kernel (2 threads): where both fit, :class:`Diagonals` races them on its first calls
(:class:`kernels._race.KernelRace`) and keeps the faster.

Both kernels prefetch the lines of the values :data:`AHEAD` entries on, into L2
(``kernels._prefetch.prefetch_outer``): the hardware prefetchers alone left the stream short
of memory's bandwidth. Stencil 114^3, AMD EPYC (Zen 4), row kernel, alternating, load ~0.8: half
the rows on one thread 3.85 -> 1.99 ms CPU time (distances 512: 2.24; 1,024-4,096 alike), all of
them on two threads 4.17 -> 2.82 ms wall; prefetching the leading line of ``x`` too gained nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import prange

from ..cache._lean import njit_cached
from ._lanes import LANES, all_equal, fma, load, load_every, scale_add, store, zeros
from ._narrow_spmv import StructureSample, chunked_for, row_chunks
from ._prefetch import LINE, prefetch_outer
from ._race import KernelRace
from ._simd import HAS_AVX512
from ._spgemm import U

MAX_DIAGONALS = 32   # masks up to uint32
MIN_ENTRIES = 1 << 18   # below this the operand sits in cache: fewer bytes buy nothing for the analysis
AHEAD = 2048   # entries of values ahead whose lines the kernels prefetch (16 KB of float64)


@njit_cached(nogil=True, parallel=True)
def chunk_offsets(pos, crd, bounds, limit):
    """The distinct ``crd[p] - row(p)`` of each row chunk, sorted: ``table[ch, :counts[ch]]``;
    ``counts[ch] > limit`` where the chunk holds more than ``limit`` of them."""
    chunks = len(bounds) - 1
    table = np.zeros((max(chunks, 1), limit), np.int64)
    counts = np.zeros(max(chunks, 1), np.int64)
    for ch in prange(chunks):
        count = 0
        for i in range(bounds[ch], bounds[ch + 1]):
            j = 0   # a sorted row walks the sorted table forwards once
            for p in range(np.int64(pos[U(i)]), np.int64(pos[U(i + 1)])):
                d = np.int64(crd[U(p)]) - i
                if j > 0 and table[ch, j - 1] > d:
                    j = 0   # unsorted row: search again from the start
                while j < count and table[ch, j] < d:
                    j += 1
                if j < count and table[ch, j] == d:
                    j += 1
                    continue
                if count == limit:
                    count = limit + 1
                    break
                for q in range(count, j, -1):   # a new offset, inserted in order
                    table[ch, q] = table[ch, q - 1]
                table[ch, j] = d
                count += 1
                j += 1
            if count > limit:
                break
        counts[ch] = count
    return table, counts


@njit_cached(nogil=True, parallel=True)
def row_masks(pos, crd, offsets, bounds, masks):
    """``masks[i]``: bit ``d`` set where row ``i`` stores column ``i + offsets[d]`` (``offsets``
    sorted). Returns False where a row's columns are not strictly increasing or miss every offset
    (``masks`` is then meaningless)."""
    k = offsets.size
    chunks = len(bounds) - 1
    bad = np.zeros(max(chunks, 1), dtype=np.bool_)
    for ch in prange(chunks):
        for i in range(bounds[ch], bounds[ch + 1]):
            m, j = np.uint64(0), 0
            for p in range(np.int64(pos[U(i)]), np.int64(pos[U(i + 1)])):
                d = np.int64(crd[U(p)]) - i
                while j < k and offsets[U(j)] < d:
                    j += 1
                if j == k or offsets[U(j)] != d:
                    bad[ch] = True
                    break
                m |= np.uint64(1) << np.uint64(j)
                j += 1
            masks[U(i)] = m
    return not bad.any()


@njit_cached(nogil=True, inline="always", fastmath={"contract"})
def _row(y, masks, offsets, vals, x, i, p, alpha, accumulate):
    """Row ``i`` of :func:`diagonal_spmv` from its first entry ``p``; returns the next row's first entry.
    A full row sums in two interleaved sums (even and odd diagonals), as ``narrow_spmv`` does, each
    product fused into its add (a fixed order, rounded once per multiply-add)."""
    k = len(offsets)
    m = np.int64(masks[U(i)])
    acc, acc_1 = y.dtype.type(0), y.dtype.type(0)
    if m == (1 << k) - 1:
        for d in range(0, k - 1, 2):
            acc += vals[U(p + d)] * x[U(i + offsets[d])]
            acc_1 += vals[U(p + d + 1)] * x[U(i + offsets[d + 1])]
        if k % 2:
            acc += vals[U(p + k - 1)] * x[U(i + offsets[k - 1])]
        p += k
    else:
        for d in range(k):
            if (m >> d) & 1:
                acc += vals[U(p)] * x[U(i + offsets[d])]
                p += 1
    acc += acc_1
    if accumulate:
        y[U(i)] += alpha * acc
    else:
        y[U(i)] = alpha * acc
    return p


@njit_cached(nogil=True, inline="always")
def _prefetch_values(vals, p, count, last):
    """Prefetches into L2 the lines of ``vals[p + AHEAD : p + AHEAD + count]`` where that ends by ``last``
    (the chunk's end): called once per ``count`` entries at most, so every line ahead is asked for."""
    if p + AHEAD + count <= last:
        for e in range(0, count, LINE // vals.itemsize):
            prefetch_outer(vals, U(p + AHEAD + e))


@njit_cached(nogil=True, parallel=True, fastmath={"contract"})   # FMAs: 3-7% less CPU time on the stencil
def diagonal_spmv(y, masks, starts, offsets, vals, x, bounds, alpha, accumulate):
    """``y[i] (+)= alpha * sum_d vals[p] * x[i + offsets[d]]`` over the set bits ``d`` of
    ``masks[i]`` (``p`` counting the row's entries on from ``starts[ch]`` in row chunk ``ch``),
    chunks ``bounds`` in parallel. ``offsets`` is a tuple (its length a compile-time constant).
    The caller guarantees every column lies in ``x``, ``vals`` holds every entry and the masks'
    bits count the entries. ``accumulate`` False stores every ``y[i]`` (empty rows get zero). Each row
    prefetches the lines of ``vals`` :data:`AHEAD` entries on (:func:`_prefetch_values`)."""
    for ch in prange(len(bounds) - 1):
        p = np.int64(starts[U(ch)])
        last = np.int64(starts[U(ch + 1)])
        for i in range(bounds[ch], bounds[ch + 1]):
            _prefetch_values(vals, p, len(offsets), last)
            p = _row(y, masks, offsets, vals, x, i, p, alpha, accumulate)


@njit_cached(nogil=True, inline="always")
def _store(y, i, acc, alpha, accumulate):
    """``y[i : i + LANES] (+)= alpha * acc``."""
    store(y, i, scale_add(acc, alpha, load(y, i) if accumulate else zeros(y)))


@njit_cached(nogil=True, parallel=True, fastmath={"contract"})
def diagonal_spmv_lanes(y, masks, starts, offsets, vals, x, bounds, alpha, accumulate):
    """:func:`diagonal_spmv` (same arguments and contract; ``alpha`` of ``y``'s dtype) with every run
    of :data:`LANES` full rows in one vector: per diagonal ``d``, the rows' values (every ``k``-th of
    the run's ``LANES * k`` entries, a gather from L1) times ``x[i + offsets[d] :][:LANES]`` (one
    load), instead of ``LANES * k`` scalar products; two runs in a row go in one step. Other rows, and
    the rows of a chunk after its last whole run, go one at a time. ``vals``, ``x`` and ``y`` share one float dtype
    (:func:`lanes_fit`). A full row's products are added in diagonal order (one chain of FMAs
    per row, where the scalar row interleaves two). Each step prefetches the lines of its count of
    entries :data:`AHEAD` on (:func:`_prefetch_values`)."""
    k = len(offsets)
    full = (1 << k) - 1
    for ch in prange(len(bounds) - 1):
        p = np.int64(starts[U(ch)])
        last = np.int64(starts[U(ch + 1)])
        i = np.int64(bounds[ch])
        stop = np.int64(bounds[ch + 1])
        while i < stop:
            if i + 2 * LANES <= stop and all_equal(masks, i, full) and all_equal(masks, i + LANES, full):
                _prefetch_values(vals, p, 2 * LANES * k, last)
                acc, acc_1 = zeros(y), zeros(y)   # two runs, two chains: 2-6% less CPU time than one run a step
                for d in range(k):
                    acc = fma(load_every(vals, p + d, k), load(x, i + offsets[d]), acc)
                    acc_1 = fma(load_every(vals, p + LANES * k + d, k), load(x, i + LANES + offsets[d]), acc_1)
                _store(y, i, acc, alpha, accumulate)
                _store(y, i + LANES, acc_1, alpha, accumulate)
                p += 2 * LANES * k
                i += 2 * LANES
            elif i + LANES <= stop and all_equal(masks, i, full):
                _prefetch_values(vals, p, LANES * k, last)
                acc = zeros(y)
                for d in range(k):
                    acc = fma(load_every(vals, p + d, k), load(x, i + offsets[d]), acc)
                _store(y, i, acc, alpha, accumulate)
                p += LANES * k
                i += LANES
            else:
                _prefetch_values(vals, p, k, last)
                p = _row(y, masks, offsets, vals, x, i, p, alpha, accumulate)
                i += 1


def lanes_fit(y: np.ndarray, vals: np.ndarray, x: np.ndarray, alpha) -> bool:
    """Whether :func:`diagonal_spmv_lanes` takes these: an AVX-512 host (gathers), ``vals``, ``x`` and
    ``y`` C-contiguous of one dtype of float32 / float64, a real ``alpha``."""
    return HAS_AVX512 and vals.dtype == x.dtype == y.dtype and vals.dtype in (np.float32, np.float64) \
        and np.isrealobj(alpha) and all(a.flags.c_contiguous for a in (y, vals, x))


def _mask_dtype(k: int) -> type:
    return np.uint8 if k <= 8 else np.uint16 if k <= 16 else np.uint32


@dataclass(frozen=True, eq=False)
class Diagonals:
    """A CSR operand's structure as sorted diagonal ``offsets`` and a bit ``mask`` per row (see
    the module docstring). ``bounds`` are the rows' chunks of equal work, ``starts`` their first
    entries, ``nnz`` the entries the masks count; ``sample`` names the operand's ``pos`` / ``crd``
    it was made from and is compared at every execute; ``race`` chooses between the vector and the
    row kernel where both fit (the module docstring)."""

    offsets: tuple
    masks: np.ndarray
    bounds: np.ndarray
    starts: np.ndarray
    nnz: int
    sample: StructureSample
    race: KernelRace = field(default_factory=KernelRace)

    @property
    def nbytes(self) -> int:
        """Bytes this object keeps besides the operand (masks, chunks and samples)."""
        return self.masks.nbytes + self.bounds.nbytes + self.starts.nbytes + self.sample.nbytes

    @classmethod
    def of(cls, pos: np.ndarray, crd: np.ndarray, threads: int) -> "Diagonals | None":
        """The diagonals of the CSR structure ``(pos, crd)``, or None where it has fewer than
        :data:`MIN_ENTRIES` entries, more than :data:`MAX_DIAGONALS` diagonals, a row whose columns
        are not sorted and unique, or so few entries a row that a mask would outweigh 16-bit
        columns. Assumes the buffers passed ``tensor.safety`` (columns within the matrix)."""
        n_rows = len(pos) - 1
        nnz = int(pos[-1]) if n_rows >= 1 else 0
        if nnz < MIN_ENTRIES:
            return None
        bounds = row_chunks(pos, threads)
        table, counts = chunk_offsets(pos, crd, bounds, MAX_DIAGONALS)
        if counts.max() > MAX_DIAGONALS:
            return None
        offsets = np.unique(np.concatenate([table[ch, :c] for ch, c in enumerate(counts)]))
        dtype = _mask_dtype(len(offsets))
        if len(offsets) > MAX_DIAGONALS or np.dtype(dtype).itemsize * n_rows > 2 * nnz:
            return None
        masks = np.empty(n_rows, dtype)
        if not row_masks(pos, crd, offsets, bounds, masks):
            return None
        return cls(tuple(int(o) for o in offsets), masks, bounds, pos[bounds].astype(np.int64), nnz,
                   StructureSample.of(pos, crd, nnz))

    def matches(self, pos: np.ndarray, crd: np.ndarray, n_vals: int, threads: int) -> bool:
        """Whether these are the buffers the masks were made from, for as many threads, with values
        for every entry, and the sampled structure unchanged (:meth:`StructureSample.same`)."""
        return chunked_for(self.bounds, pos, threads) and n_vals >= self.nnz \
            and self.sample.same(pos, crd)

    def spmv(self, y: np.ndarray, vals: np.ndarray, x: np.ndarray, alpha, accumulate: bool) -> None:
        """``y (+)= alpha * A @ x`` with the operand's values ``vals`` (call only where :meth:`matches`)."""
        if lanes_fit(y, vals, x, alpha):
            self.race.timed(self._run, y, vals, x, alpha, accumulate)
        else:
            diagonal_spmv(y, self.masks, self.starts, self.offsets, vals, x, self.bounds, alpha, accumulate)

    def _run(self, lanes: int, y, vals, x, alpha, accumulate: bool) -> None:
        """The row kernel (``lanes`` 0) or the vector kernel (1), for :attr:`race`."""
        if lanes:
            diagonal_spmv_lanes(y, self.masks, self.starts, self.offsets, vals, x, self.bounds, y.dtype.type(alpha),
                                accumulate)
        else:
            diagonal_spmv(y, self.masks, self.starts, self.offsets, vals, x, self.bounds, alpha, accumulate)
