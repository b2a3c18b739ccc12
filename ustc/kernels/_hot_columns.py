"""CSR SpMV whose most-read columns of ``x`` are gathered together first: a planned product's
renumbering of a power-law graph's columns.

A power-law graph's SpMV waits on gathers of ``x`` that miss L2 (2^20 columns: ``x`` is 8 MB, L2
1 MB a core on the AMD EPYC). Its column degrees are skewed (the bench_peers graph: the 131,072 most-read columns
take 66% of the reads) but the hubs are spread over ``x``, so every cache line of ``x`` holds a hub
or two and the hubs alone need all 8 MB of lines. :class:`HotColumns` keeps, for a planned product,
the :data:`HOT` most-read columns ``hot`` and a copy of the column indices renumbered into
``z = [x[hot], x]`` (a hub's reads go to ``z[rank]``, every other column ``c`` to ``z[HOT + c]``);
every execute fills ``z`` from the current ``x`` (a gather of :data:`HOT` entries and a copy of
``x``) and runs the row kernel on ``z``: the hubs then lie in 1 MB of lines that stay in L2.

Power-law graph, 2^20 rows, 15.6M entries, masked row kernel, 1 thread, CPU time, alternating
rounds: 49.3 ms with the renumbering (fill of ``z`` included) against 55.4 on ``x`` itself and
50.6 for MKL (load 8, min of 21); the fill alone 2.5 ms. Once the masked kernel prefetched its
``vals`` / ``crd`` streams too (``kernels._masked_spmv``), the two were even on the AMD EPYC
(Zen 4; half the graph's rows, one thread, CPU time, load ~1.8: 14.1 ms on ``x`` itself against 15.0 on
``z`` with the whole fill, 1.6 ms of which two threads share). So :meth:`HotColumns.spmv` races
them on its first calls (:class:`kernels._race.KernelRace`: the operand's own columns over ``x``,
kept on a tie, against the renumbered ones over ``z``) and keeps the faster on this machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import prange

from ..cache._lean import njit_cached
from ._masked_spmv import fits as masked_fits, gathers_ahead, masked_spmv
from ._narrow_spmv import StructureSample, chunked_for, gather_spmv, row_chunks
from ._race import KernelRace

HOT = 1 << 17        # columns gathered together: 1 MB of float64 x, half an L2
MIN_SHARE = 0.5      # renumber only where the HOT most-read columns take at least this share of reads
MIN_REUSE = 4        # ... and the matrix reads x at least this many times over (the fill's cost)


@njit_cached(nogil=True, parallel=True)
def fill_hot(z, x, hot):
    """``z[:len(hot)] = x[hot]``, ``z[len(hot):] = x``."""
    h = len(hot)
    for i in prange(h):
        z[i] = x[hot[i]]
    for i in prange(len(x)):
        z[h + i] = x[i]


@njit_cached(nogil=True, parallel=True)
def renumber(crd, rank, h, out):
    """``out[p] = rank[crd[p]]`` where that is below ``h`` (a hot column), else ``crd[p] + h``."""
    for p in prange(len(crd)):
        c = crd[p]
        r = rank[c]
        out[p] = r if r < h else c + h


@dataclass(frozen=True, eq=False)
class HotColumns:
    """A CSR operand's columns renumbered into ``z = [x[hot], x]`` (``cols``, a copy in ``crd``'s
    dtype), its own row pointers ``pos`` and columns ``crd`` (not copied), the rows' chunks
    ``bounds`` / ``starts`` and the sample of its structure compared at every execute; ``race``
    chooses between the operand's own columns over ``x`` and the renumbered ones over ``z``. ``z``
    buffers are kept per dtype (``_z``): a plan runs one execute at a time."""

    pos: np.ndarray
    cols: np.ndarray
    hot: np.ndarray
    bounds: np.ndarray
    starts: np.ndarray
    sample: StructureSample
    crd: np.ndarray
    race: KernelRace = field(default_factory=KernelRace)
    _z: dict = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Bytes this object keeps besides the operand (the renumbered copy, ``hot``, ``z``, chunks, samples)."""
        return self.cols.nbytes + self.hot.nbytes + sum(z.nbytes for z in self._z.values()) \
            + self.bounds.nbytes + self.starts.nbytes + self.sample.nbytes

    @classmethod
    def of(cls, pos: np.ndarray, crd: np.ndarray, n_cols: int, threads: int) -> "HotColumns | None":
        """The renumbering of the CSR structure ``(pos, crd)`` (``n_cols`` columns), or None unless
        the indices are int32 / int64, ``x`` is wider than twice :data:`HOT`, the matrix reads it
        :data:`MIN_REUSE` times over and its :data:`HOT` most-read columns take :data:`MIN_SHARE`
        of the reads. Assumes the buffers passed ``tensor.safety``."""
        n_rows = len(pos) - 1
        if n_rows < 1 or pos.dtype.type not in (np.int32, np.int64) or crd.dtype.type not in (np.int32, np.int64) \
                or n_cols <= 2 * HOT or n_cols + HOT > np.iinfo(crd.dtype).max:
            return None
        nnz = int(pos[-1])
        if nnz < MIN_REUSE * n_cols:
            return None
        reads = np.bincount(crd[:nnz], minlength=n_cols)
        hot = np.argpartition(-reads, HOT)[:HOT]
        if reads[hot].sum() < MIN_SHARE * nnz:
            return None
        hot = hot[np.argsort(-reads[hot], kind="stable")].astype(crd.dtype)   # hottest first: fewer lines
        rank = np.full(n_cols, HOT, dtype=crd.dtype)
        rank[hot] = np.arange(HOT, dtype=crd.dtype)
        cols = np.empty(nnz, dtype=crd.dtype)
        renumber(crd[:nnz], rank, HOT, cols)
        bounds = row_chunks(pos, threads)
        return cls(pos, cols, hot, bounds, pos[bounds].astype(np.int64), StructureSample.of(pos, crd, nnz), crd[:nnz])

    def matches(self, pos: np.ndarray, crd: np.ndarray, n_vals: int, threads: int) -> bool:
        """As ``NarrowColumns.matches``: the same buffers, as many threads, values for every entry and
        the sampled structure unchanged."""
        return chunked_for(self.bounds, pos, threads) and n_vals >= len(self.cols) and self.sample.same(pos, crd)

    def spmv(self, y: np.ndarray, vals: np.ndarray, x: np.ndarray, alpha, accumulate: bool) -> None:
        """``y (+)= alpha * A @ x`` (call only where :meth:`matches`) by the kernel :attr:`race` picks
        (:meth:`_run`). Like ``NarrowColumns.own_indices``, the operand's own columns are read at
        every execute where that kernel wins: they must still pass ``tensor.safety``."""
        self.race.timed(self._run, y, vals, x, alpha, accumulate)

    def _run(self, renumbered: int, y: np.ndarray, vals: np.ndarray, x: np.ndarray, alpha, accumulate: bool) -> None:
        """The operand's own columns over ``x`` (``renumbered`` 0) or the renumbered ones over ``z``
        filled from ``x`` (1), for :attr:`race`: the masked row kernel where it fits
        (``kernels._masked_spmv``), else ``gather_spmv``."""
        cols, src = self.crd, x
        if renumbered:
            src = self._z.get(x.dtype)
            if src is None:
                src = self._z[x.dtype] = np.empty(len(x) + len(self.hot), dtype=x.dtype)
            fill_hot(src, x, self.hot)
            cols = self.cols
        if masked_fits(y, self.pos, cols, vals, src):
            masked_spmv(y, self.pos, self.starts, cols, vals, src, self.bounds, alpha, accumulate, gathers_ahead(src))
        else:
            gather_spmv(y, self.pos, self.starts, cols, 0, vals, src, self.bounds, alpha, accumulate)
