"""BSR x BSR -> BSR without leaving blocks: block-row Gustavson.

``A`` in blocks of ``r x k``, ``B`` in blocks of ``k x c`` (``A``'s column block is ``B``'s
row block); ``C = A @ B`` in blocks of ``r x c``. Block row ``I`` of ``C`` is the sum, over
``A``'s blocks ``(I, K)``, of that block times each block ``(K, J)`` of ``B``:

* **count** (parallel over chunks of block rows): the distinct block columns each block
  row reaches, through a per-chunk marker over the block columns (a stamp: no reset);
* a prefix sum places every block row; the output is allocated at its exact size;
* **fill** (same chunks): the first touch of block column ``J`` lists it and opens a zeroed
  block slot in a compact per-chunk accumulator (``where[J]`` is that slot's output
  position, so a position below the row's start means "not in this row": no reset
  either); each pair of blocks adds an ``r x k`` by ``k x c`` dense product into its slot;
  the row's block columns are then sorted (insertion sort for short rows) and the slots
  copied out in that order.

Chunks split the block rows by the block products they make (``_spgemm.row_work`` over the
block structure, ``chunk_bounds``), so a few heavy block rows do not leave one thread with
all of it. The block sizes reach the kernel as tuples of ``None`` (a tuple's length is part
of its Numba type): each block shape compiles its own kernel whose block loops have constant
trip counts, which LLVM unrolls (2 x 2 blocks: a generic loop measured ~2x slower).

Edge blocks: where a dimension is not a multiple of its block, the padding rows or columns
of the last block are ignored on input (the inner sum stops at the true inner extent) and
written as zeros on output. Explicit zeros stay stored: a block the structure reaches is
stored even when its values sum to zero (as SciPy's ``bsr @ bsr`` does). Neither operand's
block columns need be ordered or unique (duplicates add up); the output's are both.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..cache._lean import njit_cached
from ._prefetch import prefetch
from ._spgemm import AHEAD, _bucket_sort, _sort_small

U = np.uintp  # unsigned subscripts: no wraparound branch (every subscript here is >= 0)
SHORT = 64    # rows up to this many blocks are insertion-sorted


@njit_cached(nogil=True, inline="always")
def _ahead(acrd, bpos, bcrd, bvals, pa, kc):
    """Prefetch the first line of the block column indices and values of the block row of ``b``
    that ``a``'s block ``pa + AHEAD`` will read (block rows of ``b`` are met in random order: each
    was a cache miss the loop waited on). The caller keeps ``pa + AHEAD`` inside ``a``'s chunk."""
    q = bpos[U(acrd[U(pa + AHEAD)])]
    if q < len(bcrd):
        prefetch(bcrd, U(q))
        prefetch(bvals, U(q * kc))


@njit_cached(nogil=True, parallel=True)
def block_count(apos, acrd, bpos, bcrd, bounds, nbc):
    """``sizes[I + 1]`` = distinct block columns block row ``I`` of ``a @ b`` reaches (``sizes[0] = 0``)."""
    n = bounds[-1]
    sizes = np.zeros(n + 1, dtype=np.int64)
    for ch in prange(len(bounds) - 1):
        mark = np.full(nbc, -1, dtype=np.int64)
        for i in range(bounds[ch], bounds[ch + 1]):
            count = 0
            for pa in range(apos[U(i)], apos[U(i + 1)]):
                kb = acrd[U(pa)]
                for pb in range(bpos[U(kb)], bpos[U(kb + 1)]):
                    j = U(bcrd[U(pb)])
                    if mark[j] != i:
                        mark[j] = i
                        count += 1
            sizes[U(i + 1)] = count
    return sizes


@njit_cached(nogil=True, inline="always")
def _madd(acc, s, avals, abase, bvals, bbase, nr, nk, nc, kw, cw):
    """``acc[s:]`` (an ``nr x cw`` block, row-major) += ``a @ b`` over the first ``nk >= 1`` inner
    indices: ``a`` the ``nr x kw`` block at ``avals[abase:]``, ``b`` the ``kw x cw`` block at
    ``bvals[bbase:]``, columns up to ``nc``. Each entry's sum is formed in a register and added
    once (an ``acc`` update per multiply measured a few % slower: each waits on the last store)."""
    for ii in range(nr):
        for jj in range(nc):
            t = avals[U(abase + ii * kw)] * bvals[U(bbase + jj)]
            for kk in range(1, nk):
                t += avals[U(abase + ii * kw + kk)] * bvals[U(bbase + kk * cw + jj)]
            acc[U(s + ii * cw + jj)] += t


@njit_cached(nogil=True, inline="always")
def _slot(where, crd, acc, j, start, top, rc):
    """``(offset, top)``: where block column ``j`` accumulates in ``acc`` for the block row whose
    output starts at ``start``, and the row's next free output position. A first touch lists
    ``j`` at ``top`` (``where[j] = top``) and zeroes its slot."""
    w = where[j]
    if w < start:
        w = top
        where[j] = top
        crd[U(top)] = j
        top += 1
        for t in range((w - start) * rc, (w - start + 1) * rc):
            acc[U(t)] = 0
    return (w - start) * rc, top


@njit_cached(nogil=True)
def _sort_long(crd, start, top, where, spare, bins):
    """Sort the block columns ``crd[start:top]`` of one row (distinct; ``where[j] >= start`` marks
    each): read off the marks in order where the row fills a quarter of its span, else bucketed
    by high bits into ``spare`` (about one bucket per entry), each bucket insertion-sorted (the
    library sort where a bucket holds over `_spgemm.BIN`), and copied back. A power-law product's
    long rows sorted ~3x faster than by the library sort alone."""
    n = top - start
    lo, hi = crd[U(start)], crd[U(start)]
    for p in range(start + 1, top):
        lo, hi = min(lo, crd[U(p)]), max(hi, crd[U(p)])
    if hi - lo < 4 * n:
        p = start
        for j in range(lo, hi + 1):
            if where[U(j)] >= start:
                crd[U(p)] = j
                p += 1
        return
    _bucket_sort(crd, start, top, lo, hi, spare, bins)


@njit_cached(nogil=True, parallel=True)
def block_fill(apos, acrd, avals, bpos, bcrd, bvals, pos, crd, vals, bounds, nbc, widest, rt, kt, ct, edges):
    """Block columns (sorted) and values of every block row of ``a @ b`` at ``pos[I]`` (blocks of
    ``len(rt) x len(ct)``, inner block ``len(kt)``). ``widest``: the most blocks any row holds.
    ``edges``: ``(rows, inner, columns)`` that are real in the last block row, the last inner
    block and the last block column (the full block size where there is no padding)."""
    r, k, c = len(rt), len(kt), len(ct)
    rc = r * c
    n = bounds[-1]
    nbk = len(bpos) - 1
    er, ek, ec = edges
    for ch in prange(len(bounds) - 1):
        where = np.full(nbc, -1, dtype=np.int64)
        acc = np.empty(widest * rc, dtype=vals.dtype)
        spare, bins = np.empty(widest, dtype=crd.dtype), np.empty(widest + 1, dtype=np.int64)
        ahead_end = apos[U(bounds[ch + 1])] - AHEAD
        for i in range(bounds[ch], bounds[ch + 1]):
            start = np.int64(pos[U(i)])
            top = start
            for pa in range(apos[U(i)], apos[U(i + 1)]):
                kb = acrd[U(pa)]
                abase = pa * (r * k)
                edge = kb == nbk - 1 and ek != k  # the last inner block: padding columns of a ignored
                if pa < ahead_end:
                    _ahead(acrd, bpos, bcrd, bvals, pa, k * c)
                if r == 2 and k == 2 and c == 2 and not edge:
                    # a's block held in registers across b's row (the generic loop reloads it after
                    # every store to acc, which may alias it): 2 x 2 products measured ~10% faster
                    a00, a01 = avals[U(abase)], avals[U(abase + 1)]
                    a10, a11 = avals[U(abase + 2)], avals[U(abase + 3)]
                    for pb in range(bpos[U(kb)], bpos[U(kb + 1)]):
                        s, top = _slot(where, crd, acc, U(bcrd[U(pb)]), start, top, rc)
                        bb = pb * 4
                        b00, b01 = bvals[U(bb)], bvals[U(bb + 1)]
                        b10, b11 = bvals[U(bb + 2)], bvals[U(bb + 3)]
                        acc[U(s)] += a00 * b00 + a01 * b10
                        acc[U(s + 1)] += a00 * b01 + a01 * b11
                        acc[U(s + 2)] += a10 * b00 + a11 * b10
                        acc[U(s + 3)] += a10 * b01 + a11 * b11
                    continue
                for pb in range(bpos[U(kb)], bpos[U(kb + 1)]):
                    s, top = _slot(where, crd, acc, U(bcrd[U(pb)]), start, top, rc)
                    if edge:
                        _madd(acc, s, avals, abase, bvals, pb * (k * c), r, ek, c, k, c)
                    else:  # constant trip counts: unrolled
                        _madd(acc, s, avals, abase, bvals, pb * (k * c), r, k, c, k, c)
            if top - start <= SHORT:
                _sort_small(crd, start, top)
            else:
                _sort_long(crd, start, top, where, spare, bins)
            for p in range(start, top):
                j = U(crd[U(p)])
                src = (where[j] - start) * rc
                dst = p * rc
                for t in range(rc):
                    vals[U(dst + t)] = acc[U(src + t)]
                if ec != c and j == nbc - 1:
                    for ii in range(r):
                        for jj in range(ec, c):
                            vals[U(dst + ii * c + jj)] = 0
                if er != r and i == n - 1:
                    for t in range(er * c, rc):
                        vals[U(dst + t)] = 0


def bsr_spgemm(a, b, fmt=None):
    """``a @ b`` for a BSR(r, k) ``a`` and a BSR(k, c) ``b`` on the host, as a Tensor in ``fmt``
    (default BSR(r, c); else a BSR(r, c) without index widths whose levels may promise less:
    the block columns are sorted and unique either way; index buffers int32 where they fit).
    Neither operand is written; values of mixed dtypes are cast to their result dtype first."""
    import numba

    from ..formats import BSR
    from ..tensor.tensor import Tensor
    from ._spgemm import chunk_bounds, row_work

    (n_rows, inner), n_cols = a.shape, b.shape[1]
    nbr, nbk, r, k = a.level_shape
    nbc, c = b.level_shape[1], b.level_shape[3]
    dtype = np.result_type(a.dtype, b.dtype)
    apos, acrd, avals = a.raw_buffers[(1, "pos")], a.raw_buffers[(1, "crd")], a.raw_values.astype(dtype, copy=False)
    bpos, bcrd, bvals = b.raw_buffers[(1, "pos")], b.raw_buffers[(1, "crd")], b.raw_values.astype(dtype, copy=False)
    chunks = min(max(nbr, 1), 2 * numba.get_num_threads())
    bounds = chunk_bounds(row_work(apos, acrd, bpos, nbr), chunks)
    sizes = block_count(apos, acrd, bpos, bcrd, bounds, nbc)
    pos = np.cumsum(sizes)
    nblocks = int(pos[-1])
    index = np.int32 if max(nblocks, nbc) < 2**31 else np.int64
    crd = np.empty(nblocks, dtype=index)
    vals = np.empty(nblocks * r * c, dtype=dtype)
    widest = int(np.max(np.diff(pos))) if nbr else 0
    edges = (n_rows - (nbr - 1) * r if nbr else r, inner - (nbk - 1) * k if nbk else k,
             n_cols - (nbc - 1) * c if nbc else c)
    block_fill(apos, acrd, avals, bpos, bcrd, bvals, pos, crd, vals, bounds, nbc, widest,
               (None,) * r, (None,) * k, (None,) * c, edges)
    return Tensor(fmt or BSR(r, c), (n_rows, n_cols), {(1, "pos"): pos.astype(index), (1, "crd"): crd}, vals)


# -- again over a kept block structure (a planned product executed again) --------------------


@njit_cached(nogil=True, parallel=True)
def block_numeric(apos, acrd, avals, bpos, bcrd, bvals, pos, kept, crd, vals, bounds, nbc, rt, kt, ct, edges):
    """:func:`block_fill` where the block columns of row ``I`` are known: ``kept[pos[I]:pos[I + 1]]``
    (exactly those its block products reach, sorted). Each block product adds straight into its
    output block (``where[J]``, set for the row's kept columns first), in :func:`block_fill`'s
    order (bit for bit the same sums); no counting, marks or sort."""
    r, k, c = len(rt), len(kt), len(ct)
    rc = r * c
    n = bounds[-1]
    nbk = len(bpos) - 1
    er, ek, ec = edges
    for ch in prange(len(bounds) - 1):
        where = np.empty(nbc, dtype=np.int64)   # read only at columns set for the current row
        ahead_end = apos[U(bounds[ch + 1])] - AHEAD
        for i in range(bounds[ch], bounds[ch + 1]):
            for p in range(pos[U(i)], pos[U(i + 1)]):
                j = kept[U(p)]
                where[U(j)] = p * rc
                crd[U(p)] = j
                for t in range(p * rc, (p + 1) * rc):
                    vals[U(t)] = 0
            for pa in range(apos[U(i)], apos[U(i + 1)]):
                kb = acrd[U(pa)]
                abase = pa * (r * k)
                edge = kb == nbk - 1 and ek != k
                if pa < ahead_end:
                    _ahead(acrd, bpos, bcrd, bvals, pa, k * c)
                if r == 2 and k == 2 and c == 2 and not edge:
                    a00, a01 = avals[U(abase)], avals[U(abase + 1)]
                    a10, a11 = avals[U(abase + 2)], avals[U(abase + 3)]
                    for pb in range(bpos[U(kb)], bpos[U(kb + 1)]):
                        s = where[U(bcrd[U(pb)])]
                        bb = pb * 4
                        b00, b01 = bvals[U(bb)], bvals[U(bb + 1)]
                        b10, b11 = bvals[U(bb + 2)], bvals[U(bb + 3)]
                        vals[U(s)] += a00 * b00 + a01 * b10
                        vals[U(s + 1)] += a00 * b01 + a01 * b11
                        vals[U(s + 2)] += a10 * b00 + a11 * b10
                        vals[U(s + 3)] += a10 * b01 + a11 * b11
                    continue
                for pb in range(bpos[U(kb)], bpos[U(kb + 1)]):
                    s = where[U(bcrd[U(pb)])]
                    if edge:
                        _madd(vals, s, avals, abase, bvals, pb * (k * c), r, ek, c, k, c)
                    else:  # constant trip counts: unrolled
                        _madd(vals, s, avals, abase, bvals, pb * (k * c), r, k, c, k, c)
            for p in range(pos[U(i)], pos[U(i + 1)]):   # padding of the edge blocks stays zero
                dst = p * rc
                if ec != c and kept[U(p)] == nbc - 1:
                    for ii in range(r):
                        for jj in range(ec, c):
                            vals[U(dst + ii * c + jj)] = 0
                if er != r and i == n - 1:
                    for t in range(er * c, rc):
                        vals[U(dst + t)] = 0


def _geometry(a, b):
    """``(nbr, nbc, (r, k, c), edges)`` of the BSR product ``a @ b`` (:func:`block_fill`'s ``edges``)."""
    (n_rows, inner), n_cols = a.shape, b.shape[1]
    nbr, nbk, r, k = a.level_shape
    nbc, c = b.level_shape[1], b.level_shape[3]
    edges = (n_rows - (nbr - 1) * r if nbr else r, inner - (nbk - 1) * k if nbk else k,
             n_cols - (nbc - 1) * c if nbc else c)
    return nbr, nbc, (r, k, c), edges


def bsr_keep(a, b, c, threads: int):
    """The block structure of the BSR product ``c`` of ``a`` and ``b`` as a
    ``_spgemm_kept.KeptStructure`` (None where ``c`` is not every block the products reach)."""
    from ._spgemm import chunk_bounds, row_work
    from ._spgemm_kept import KeptStructure, structure

    nbr, nbc, _, _ = _geometry(a, b)
    (apos, acrd), (bpos, bcrd) = structure(a), structure(b)
    bounds = chunk_bounds(row_work(apos, acrd, bpos, nbr), min(max(nbr, 1), 2 * threads))
    sizes = block_count(apos, acrd, bpos, bcrd, bounds, nbc)
    return KeptStructure.keep(apos, acrd, bpos, bcrd, *structure(c), sizes, bounds, np.empty((0, 2), np.int64))


def bsr_product(kept, a, b, fmt, dtype):
    """``a @ b`` as a BSR Tensor in ``fmt`` over the kept block structure (where it ``matches``)."""
    from ..tensor.tensor import Tensor

    _, nbc, (r, k, c), edges = _geometry(a, b)
    crd = np.empty_like(kept.kept)
    vals = np.empty(len(crd) * r * c, dtype=dtype)
    block_numeric(*kept_inputs(a, b, dtype), kept.pos, kept.kept, crd, vals, kept.bounds, nbc,
                  (None,) * r, (None,) * k, (None,) * c, edges)
    return Tensor(fmt, (a.shape[0], b.shape[1]), {(1, "pos"): kept.pos.copy(), (1, "crd"): crd}, vals)


def kept_inputs(a, b, dtype) -> tuple:
    """``(apos, acrd, avals, bpos, bcrd, bvals)``, values cast to ``dtype`` as :func:`bsr_spgemm` does."""
    return (a.raw_buffers[(1, "pos")], a.raw_buffers[(1, "crd")], a.raw_values.astype(dtype, copy=False),
            b.raw_buffers[(1, "pos")], b.raw_buffers[(1, "crd")], b.raw_values.astype(dtype, copy=False))
