"""CSR x CSR -> CSR again over a kept output structure: the numeric pass of a planned product.

A planned Matmul executed again on operands whose structure (row pointers and column indices) is
unchanged has the same output structure; only the values may have changed (in place or through
new value buffers). The counting pass, the row markers and the row sorts of ``_spgemm`` are then
moot: each row's products are added into its chunk's accumulator and read off at the kept
columns. The structure is checked at every execute against copies taken when it was kept (an
exact comparison, chunks in parallel), so a structure changed in place is never missed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import prange

from ..cache._lean import njit_cached
from ._spgemm import U, chunk_bounds, row_work, spgemm_count


@njit_cached(nogil=True, parallel=True)
def spgemm_numeric(apos, acrd, avals, bpos, bcrd, bvals, pos, kept, bounds, spans, crd, vals):
    """Row ``i`` of ``a @ b`` whose columns are ``kept[pos[i]:pos[i + 1]]`` (exactly the distinct
    columns its products reach, in any order): the columns copied to ``crd``, the sums to
    ``vals``, each sum in the order of the two-pass fill (``_spgemm.spgemm_fill``, ``_spgemm.spgemm_bounded``)."""
    for ch in prange(len(bounds) - 1):
        lo, hi = bounds[ch], bounds[ch + 1]
        first = spans[ch, 0]
        acc = np.zeros(max(spans[ch, 1] - first + 1, 0), dtype=vals.dtype)
        for i in range(lo, hi):
            for pa in range(apos[U(i)], apos[U(i + 1)]):
                k = acrd[U(pa)]
                av = avals[U(pa)]
                for pb in range(bpos[U(k)], bpos[U(k + 1)]):
                    acc[U(bcrd[U(pb)] - first)] += av * bvals[U(pb)]
            for p in range(pos[U(i)], pos[U(i + 1)]):
                c = kept[U(p)]
                j = U(c - first)
                vals[U(p)] = acc[j]
                acc[j] = 0   # the next row starts from zero (every column it reached is kept)
                crd[U(p)] = c


@njit_cached(nogil=True, parallel=True)
def same(x, y, chunks):
    """Whether the equal-length 1-D arrays ``x`` and ``y`` hold the same values (chunks in parallel)."""
    n = len(x)
    differs = np.zeros(chunks, dtype=np.bool_)
    for ch in prange(chunks):
        for p in range(n * ch // chunks, n * (ch + 1) // chunks):
            if x[U(p)] != y[U(p)]:
                differs[ch] = True
                break
    return not differs.any()


def _equal(x: np.ndarray, kept: np.ndarray, chunks: int) -> bool:
    return x.shape == kept.shape and x.dtype == kept.dtype and bool(same(x, kept, chunks))


@dataclass(frozen=True, eq=False)
class KeptStructure:
    """The structure of ``a @ b`` (``pos``, ``kept`` columns) and copies of the operands' structure
    it was computed from (``b_pos``, ``b_crd`` None where ``b`` is ``a``); ``bounds`` and ``spans``
    are the chunks of rows :func:`spgemm_numeric` runs in parallel and their column spans."""

    a_pos: np.ndarray
    a_crd: np.ndarray
    b_pos: np.ndarray | None
    b_crd: np.ndarray | None
    pos: np.ndarray
    kept: np.ndarray
    bounds: np.ndarray
    spans: np.ndarray

    @property
    def nbytes(self) -> int:
        return sum(x.nbytes for x in (self.a_pos, self.a_crd, self.b_pos, self.b_crd, self.pos, self.kept)
                   if x is not None)

    @classmethod
    def of(cls, apos, acrd, bpos, bcrd, pos, crd, threads: int) -> "KeptStructure | None":
        """The structure of the CSR product ``(pos, crd)`` just computed from these operands
        (``bpos`` is ``apos`` and ``bcrd`` is ``acrd`` for ``a @ a``), copied (:meth:`keep`)."""
        n_rows = len(apos) - 1
        bounds = chunk_bounds(row_work(apos, acrd, bpos, n_rows), min(max(n_rows, 1), 2 * threads))
        sizes, spans = spgemm_count(apos, acrd, bpos, bcrd, bounds)
        return cls.keep(apos, acrd, bpos, bcrd, pos, crd, sizes, bounds, spans)

    @classmethod
    def keep(cls, apos, acrd, bpos, bcrd, pos, crd, sizes, bounds, spans) -> "KeptStructure | None":
        """Copies of the operands' structure and of the product's ``(pos, crd)``; None where
        ``pos`` is not ``cumsum(sizes)`` (the distinct columns every row's products reach, from a
        counting pass: a kernel that dropped an entry), for a numeric pass would then leave that
        column's sum behind in its accumulator."""
        if len(pos) != len(sizes) or not np.array_equal(np.cumsum(sizes), pos):
            return None
        alias = bpos is apos and bcrd is acrd
        return cls(apos.copy(), acrd.copy(), None if alias else bpos.copy(), None if alias else bcrd.copy(),
                   pos.copy(), crd.copy(), bounds, spans)

    def matches(self, apos, acrd, bpos, bcrd) -> bool:
        """Whether the operands' structure is the kept one (``b`` is ``a`` as it was when kept)."""
        chunks = len(self.bounds) - 1 or 1
        if not (_equal(apos, self.a_pos, chunks) and _equal(acrd, self.a_crd, chunks)):
            return False
        if self.b_pos is None:
            return bpos is apos and bcrd is acrd
        return _equal(bpos, self.b_pos, chunks) and _equal(bcrd, self.b_crd, chunks)

    def product(self, apos, acrd, avals, bpos, bcrd, bvals, dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(pos, crd, vals)`` of ``a @ b`` from the operands' current values (fresh buffers: the
        caller owns them); call only where :meth:`matches`."""
        crd, vals = np.empty_like(self.kept), np.empty(len(self.kept), dtype=dtype)
        spgemm_numeric(apos, acrd, avals, bpos, bcrd, bvals, self.pos, self.kept, self.bounds, self.spans, crd, vals)
        return self.pos.copy(), crd, vals


def structure(x) -> tuple[np.ndarray, np.ndarray]:
    """``(pos, crd)`` of a Tensor compressed at level 1 (CSR, BSR)."""
    return x.raw_buffers[(1, "pos")], x.raw_buffers[(1, "crd")]


def csr_keep(a, b, c, threads: int) -> KeptStructure | None:
    """:meth:`KeptStructure.of` the CSR Tensors ``a``, ``b`` and their product ``c``."""
    return KeptStructure.of(*structure(a), *structure(b), *structure(c), threads)


def csr_product(kept: KeptStructure, a, b, fmt, dtype):
    """``a @ b`` as a CSR Tensor in ``fmt`` over the kept structure (where it ``matches``)."""
    from ..tensor.tensor import Tensor

    pos, crd, vals = kept.product(*structure(a), a.raw_values, *structure(b), b.raw_values, dtype)
    return Tensor(fmt, (a.shape[0], b.shape[1]), {(1, "pos"): pos, (1, "crd"): crd}, vals)
