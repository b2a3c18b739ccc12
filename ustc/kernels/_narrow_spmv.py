"""CSR SpMV over column indices kept in 16 bits: the index width of a planned product.

A CSR SpMV moves values, column indices, row pointers, ``x`` and ``y``; on a stencil with int32
indices the indices are a quarter of the bytes. Where every column fits 16 bits relative to a
base that the kernel knows without reading memory, a planned product keeps a copy of the column
indices in that width and its kernel reads the copy instead:

* ``scale = 0`` (absolute): ``col = off`` in uint16, for matrices of at most 65,536 columns;
* ``scale = 1`` (diagonal): ``col = row + off`` in int16, for banded matrices (every entry
  within 32,767 of the diagonal: the 7-point stencil of side 114 has offsets up to 12,996).

Where no row holds more than 255 entries the rows' lengths are kept in uint8 too, instead of
row pointers (the stencil: 1.5 MB instead of 5.9 MB). :class:`NarrowColumns` holds the copy
with the lengths or a copy of the row pointers (so the kernel never reads outside the copy,
whatever happens to the operand's buffers later), the rows' chunks and a sample of the
operand's structure that :meth:`NarrowColumns.matches` compares at every execute.

Where no 16-bit base fits (a power-law graph's columns), :meth:`NarrowColumns.own_indices` runs the
same row loop on the operand's own int32 / int64 pointers and columns (``scale = 0``, nothing
copied), built to reassociate a row's sum so that LLVM vectorises it with gathers of ``x``
(``vgatherdpd``): on the Intel Xeon project machine the power-law graph's SpMV took 5-8% less CPU
time than the generated scalar loop.
"""

from __future__ import annotations

import types as types_module
from dataclasses import dataclass

import numpy as np
from numba import prange, types
from numba.extending import overload

from ..cache._lean import njit_cached
from ._masked_spmv import fits as masked_fits, gathers_ahead, masked_spmv
from ._prefetch import LINE, prefetch_outer
from ._spgemm import U, chunk_bounds

ABSOLUTE_COLUMNS = 1 << 16   # up to this many columns a uint16 column index is the column itself
DIAGONAL_REACH = (1 << 15) - 1   # |col - row| up to this fits int16
SAMPLES = 256                # rows whose pointers and columns are compared at every execute
MAX_LENGTH = 255             # rows up to this long: uint8 lengths instead of row pointers
AHEAD = 2048                 # entries ahead whose lines of values and columns the row kernels prefetch


@njit_cached(nogil=True, parallel=True)
def narrow_columns(pos, crd, scale, lo, hi, out, bounds):
    """``out[p] = crd[p] - scale * row(p)`` for every stored entry (row chunks ``bounds`` in
    parallel); returns whether every such offset lies in ``[lo, hi]`` (``out`` is then exact)."""
    chunks = len(bounds) - 1
    bad = np.zeros(max(chunks, 1), dtype=np.bool_)
    for ch in prange(chunks):
        for i in range(bounds[ch], bounds[ch + 1]):
            base = np.int64(scale) * i
            for p in range(np.int64(pos[U(i)]), np.int64(pos[U(i + 1)])):
                d = np.int64(crd[U(p)]) - base
                if d < lo or d > hi:
                    bad[ch] = True
                    d = 0
                out[U(p)] = d
    return not bad.any()


@njit_cached(nogil=True, inline="always")
def _row(vals, x, off, base, begin, end, zero):
    """A row's products in two sums (even and odd entries): one chain waits on the add latency
    (stencil 114^3, two threads: 12.0 vs 13.4 ms minimum, load 4.4)."""
    acc, acc_1 = zero, zero
    p = begin
    while p + 1 < end:
        acc += vals[U(p)] * x[U(base + np.int64(off[U(p)]))]
        acc_1 += vals[U(p + 1)] * x[U(base + np.int64(off[U(p + 1)]))]
        p += 2
    if p < end:
        acc += vals[U(p)] * x[U(base + np.int64(off[U(p)]))]
    return acc, acc_1


@njit_cached(nogil=True, inline="always")
def _prefetch_entries(vals, off, begin, end, last):
    """Prefetches into L2 the lines of ``vals`` and ``off`` at a row's first and last entries + :data:`AHEAD`
    where that lies below ``last`` (the chunk's end): every line ahead for rows of up to a line of
    values, no loop (a loop over the row's lines took back most of the gain). The hardware
    prefetchers alone left the streams short of memory's bandwidth: stencil 114^3, 16-bit copy, AMD
    EPYC (Zen 4), alternating, load ~2: half the rows on one thread 4.92 -> 2.76 ms CPU time, all of
    them on two threads 9.97 -> 5.91 ms wall."""
    if end + AHEAD <= last:
        prefetch_outer(vals, U(begin + AHEAD))
        prefetch_outer(off, U(begin + AHEAD))
        prefetch_outer(vals, U(end - 1 + AHEAD))
        prefetch_outer(off, U(end - 1 + AHEAD))


def _row_end(rows, i, begin):
    """Row ``i``'s end: ``begin + rows[i]`` where ``rows`` holds uint8 lengths, else ``rows[i + 1]``
    (row pointers). Chosen by ``rows``' dtype when the kernel compiles (:func:`_row_end_of`)."""


@overload(_row_end, inline="always")
def _row_end_of(rows, i, begin):
    if rows.dtype == types.uint8:
        return lambda rows, i, begin: begin + np.int64(rows[U(i)])
    return lambda rows, i, begin: np.int64(rows[U(i + 1)])


def _spmv(y, rows, starts, off, scale, vals, x, bounds, alpha, accumulate):
    """``y[i] (+)= alpha * sum_p vals[p] * x[scale * i + off[p]]`` over row ``i``'s entries, row
    chunks ``bounds`` in parallel, chunk ``ch`` starting at entry ``starts[ch]``; ``rows`` holds
    the rows' lengths in uint8 or their pointers ``[pos[i], pos[i + 1])`` in any other integer
    dtype, one kernel compiled per kind. ``accumulate`` False stores every ``y[i]`` (empty rows
    get zero). The caller guarantees ``rows``, ``starts`` and ``off`` are consistent, their
    columns lie in ``x`` and ``vals`` holds every entry. Compiled twice: :data:`narrow_spmv`
    sums a row in two interleaved sums, :data:`gather_spmv` in any order (reassociation), which
    LLVM vectorises with gathers of ``x``. Every row prefetches the lines of ``vals`` and ``off``
    :data:`AHEAD` entries on (:func:`_prefetch_entries`)."""
    zero = y.dtype.type(0)
    for ch in prange(len(bounds) - 1):
        end = np.int64(starts[U(ch)])
        last = np.int64(starts[U(ch + 1)])
        for i in range(bounds[ch], bounds[ch + 1]):
            begin = end
            end = _row_end(rows, i, begin)
            _prefetch_entries(vals, off, begin, end, last)
            acc, acc_1 = _row(vals, x, off, np.int64(scale) * i, begin, end, zero)
            acc += acc_1
            if accumulate:
                y[U(i)] += alpha * acc
            else:
                y[U(i)] = alpha * acc


def _compiled(name: str, **flags):
    """:func:`_spmv` compiled as ``name`` (its own qualname: Numba's on-disk cache keeps the builds apart)."""
    fn = types_module.FunctionType(_spmv.__code__, _spmv.__globals__, name)
    fn.__qualname__, fn.__doc__ = name, _spmv.__doc__
    return njit_cached(nogil=True, parallel=True, **flags)(fn)


#: the 16-bit copies' kernel: on the stencil the reassociating build took 1-5% more CPU time (rows of 7
#: entries are too short for the vector loop), so this one keeps the two interleaved sums
narrow_spmv = _compiled("narrow_spmv")
#: the kernel on an operand's own indices: gathers of x in vectors (power-law graph, 2^20 rows, one
#: thread, at load 14-20: 50.5 vs 55.1 ms CPU time minimum, median 57.1 vs 60.0, against the generated loop)
gather_spmv = _compiled("gather_spmv", fastmath={"reassoc", "contract"})


def _identity(*arrays) -> tuple:
    return tuple((id(a), a.__array_interface__["data"][0], a.shape, a.dtype.str) for a in arrays)


def row_chunks(pos: np.ndarray, threads: int) -> np.ndarray:
    """The rows of the CSR pointers ``pos`` in chunks of about equal work (entries plus one a row),
    one per thread and at most one per row: the split the planned SpMV kernels run in parallel."""
    return chunk_bounds(pos.astype(np.int64) + np.arange(len(pos)), _chunk_count(pos, threads))


def chunked_for(bounds: np.ndarray, pos: np.ndarray, threads: int) -> bool:
    """Whether ``bounds`` (from :func:`row_chunks`) has as many chunks as ``threads`` threads get
    over the rows of ``pos``."""
    return len(bounds) - 1 == _chunk_count(pos, threads)


def _chunk_count(pos: np.ndarray, threads: int) -> int:
    return max(1, min(len(pos) - 1, threads))


@dataclass(frozen=True, eq=False)
class StructureSample:
    """What a planned SpMV compares at every execute to trust a structure it derived from a CSR
    operand's ``pos`` / ``crd``: the buffers' identity ``source`` (object ids, addresses, shapes,
    dtypes), the pointers ``row_pos`` of up to :data:`SAMPLES` rows ``rows`` and the columns
    ``cols`` of up to :data:`SAMPLES` entries ``at``, spread evenly."""

    source: tuple
    rows: np.ndarray
    row_pos: np.ndarray
    at: np.ndarray
    cols: np.ndarray

    @classmethod
    def of(cls, pos: np.ndarray, crd: np.ndarray, nnz: int) -> "StructureSample":
        rows = np.unique(np.linspace(0, len(pos) - 1, SAMPLES).astype(np.int64))
        at = np.unique(np.linspace(0, nnz - 1, SAMPLES).astype(np.int64)) if nnz else np.zeros(0, np.int64)
        return cls(_identity(pos, crd), rows, pos[rows].copy(), at, crd[at].copy())

    @property
    def nbytes(self) -> int:
        return self.row_pos.nbytes + self.cols.nbytes

    def same(self, pos: np.ndarray, crd: np.ndarray) -> bool:
        """Same buffers, and the sampled row pointers and columns unchanged. An edit in place that
        the sample misses is not seen: give the operand again with ``Matmul.reset_operands``."""
        return _identity(pos, crd) == self.source and np.array_equal(pos[self.rows], self.row_pos) \
            and np.array_equal(crd[self.at], self.cols)


@dataclass(frozen=True, eq=False)
class NarrowColumns:
    """A CSR operand's column indices in 16 bits (``off``, ``col = scale * row + off``) with its
    rows' lengths in uint8 where every row holds at most 255 entries (``lens``; ``pos`` None),
    else a copy of its row pointers (``pos``; ``lens`` None). ``bounds`` are the rows' chunks of
    equal work and ``starts`` their first entries; ``sample`` names the operand's ``pos`` / ``crd``
    it was made from and is compared at every execute. ``own``: ``pos`` and ``off`` are the
    operand's own pointers and columns (:meth:`own_indices`), not a copy."""

    pos: np.ndarray | None
    lens: np.ndarray | None
    off: np.ndarray
    scale: int
    bounds: np.ndarray
    starts: np.ndarray
    sample: StructureSample
    own: bool = False

    @property
    def nbytes(self) -> int:
        """Bytes this object keeps besides the operand (the copy, chunks and samples)."""
        rows = self.pos if self.pos is not None else self.lens
        kept = 0 if self.own else rows.nbytes + self.off.nbytes
        return kept + self.bounds.nbytes + self.starts.nbytes + self.sample.nbytes

    @classmethod
    def of(cls, pos: np.ndarray, crd: np.ndarray, n_cols: int, threads: int) -> "NarrowColumns | None":
        """The 16-bit copy of the CSR structure ``(pos, crd)`` (``n_cols`` columns), or None where
        no base makes every column fit 16 bits or ``crd`` is 16 bits wide already. Assumes the
        buffers passed ``tensor.safety`` (columns within ``[0, n_cols)``, ``pos`` increasing)."""
        n_rows = len(pos) - 1
        if crd.dtype.itemsize <= 2 or n_rows < 1:
            return None
        nnz = int(pos[-1])
        bounds = row_chunks(pos, threads)
        if n_cols <= ABSOLUTE_COLUMNS:
            scale, dtype, lo, hi = 0, np.uint16, 0, ABSOLUTE_COLUMNS - 1
        else:
            scale, dtype, lo, hi = 1, np.int16, -DIAGONAL_REACH - 1, DIAGONAL_REACH
        off = np.empty(nnz, dtype=dtype)
        if not narrow_columns(pos, crd, scale, lo, hi, off, bounds):
            return None
        lengths = np.diff(pos)
        short = int(lengths.max()) <= MAX_LENGTH   # always so for uint8 pointers: the copy is never uint8
        return cls(None if short else pos.copy(), lengths.astype(np.uint8) if short else None, off, scale,
                   bounds, pos[bounds].astype(np.int64), StructureSample.of(pos, crd, nnz))

    @classmethod
    def own_indices(cls, pos: np.ndarray, crd: np.ndarray, threads: int) -> "NarrowColumns | None":
        """The operand's own structure for :func:`narrow_spmv` (``scale = 0``: the columns are
        ``crd`` itself; nothing copied), or None unless ``pos`` and ``crd`` are int32 / int64 and
        there is a row. Unlike a copy, the kernel then reads the operand's buffers at every
        execute, as the generated kernel does: they must still pass ``tensor.safety``."""
        n_rows = len(pos) - 1
        if n_rows < 1 or pos.dtype.type not in (np.int32, np.int64) or crd.dtype.type not in (np.int32, np.int64):
            return None
        nnz = int(pos[-1])
        bounds = row_chunks(pos, threads)
        return cls(pos, None, crd[:nnz], 0, bounds, pos[bounds].astype(np.int64),
                   StructureSample.of(pos, crd, nnz), own=True)

    def matches(self, pos: np.ndarray, crd: np.ndarray, n_vals: int, threads: int) -> bool:
        """Whether these are the buffers the copy was made from (same objects, addresses, shapes,
        dtypes), for as many threads, with values for every entry, and the sampled row pointers
        and columns unchanged (:meth:`StructureSample.same`)."""
        return chunked_for(self.bounds, pos, threads) and n_vals >= len(self.off) \
            and self.sample.same(pos, crd)

    def spmv(self, y: np.ndarray, vals: np.ndarray, x: np.ndarray, alpha, accumulate: bool) -> None:
        """``y (+)= alpha * A @ x`` over the copy (call only where :meth:`matches`). On its own indices
        the masked 8-lane row kernel runs where it fits (``kernels._masked_spmv``), else :data:`gather_spmv`."""
        if self.own and masked_fits(y, self.pos, self.off, vals, x):
            masked_spmv(y, self.pos, self.starts, self.off, vals, x, self.bounds, alpha, accumulate, gathers_ahead(x))
            return
        rows = self.lens if self.lens is not None else self.pos   # pointers are never uint8: of(), own_indices()
        kernel = gather_spmv if self.own else narrow_spmv
        kernel(y, rows, self.starts, self.off, self.scale, vals, x, self.bounds, alpha, accumulate)
