"""Block-side pieces of the distributed SpGEMM ``C = A @ B`` (used by the block actors).

Block ``d`` of ``A`` touches a sorted set of global columns (``needs``: the local columns
its rows use and its ghost columns, ``garray``). It needs exactly those rows of ``B``.
Because ``needs`` is sorted and ``B``'s row blocks are contiguous ranges, the rows block
``s`` owns are one contiguous run ``needs[lo:hi]``; block ``s`` sends them as one message
``(counts, cols, values)``: the stored-entry count of each row (int64), their global
column indices (int64) and values (``B``'s dtype). The receiver knows which rows it asked
for, so no row index travels. ``A``'s block, with its columns renumbered to positions in
``needs``, is multiplied by the gathered rows with the single-process ``ustc.matmul``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def block_entries(block):
    """``(rows, cols, values)`` of a block's stored entries: block-local rows, global columns."""
    parts = []
    if block.local is not None:
        (r, c), v = block.local.entries()
        parts.append((np.asarray(r, np.int64), np.asarray(c, np.int64) + block.cols[0], np.asarray(v)))
    if block.ghost is not None:
        (r, c), v = block.ghost.entries()
        parts.append((np.asarray(r, np.int64), block.garray[np.asarray(c, np.int64)], np.asarray(v)))
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, block.dtype)
    return tuple(np.concatenate(p) for p in zip(*parts))


def touched_columns(block) -> np.ndarray:
    """The sorted global columns that the block's stored nonzeros use (stored zeros, such as a
    diagonal format's padding, touch nothing)."""
    _, c, v = block_entries(block)
    return np.unique(c[v != 0])


def row_csr(block, ncols: int):
    """The block's rows as a SciPy CSR matrix over all ``ncols`` global columns, stored zeros
    dropped (made once per block: blocks are not changed in place)."""
    import scipy.sparse as sp

    csr = getattr(block, "_row_csr", None)
    if csr is None or csr.shape[1] != ncols:
        r, c, v = block_entries(block)
        keep = v != 0
        csr = sp.csr_array((v[keep], (r[keep], c[keep])), shape=(block.nrows, ncols))
        csr.sum_duplicates()
        block._row_csr = csr
    return csr


def pack_rows(csr, rows: np.ndarray):
    """The message for ``rows`` (block-local indices, any order): ``(counts, cols, values)``."""
    rows = np.asarray(rows, np.int64)
    starts = csr.indptr[rows].astype(np.int64)
    counts = csr.indptr[rows + 1].astype(np.int64) - starts
    offsets = np.cumsum(counts) - counts
    take = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(starts - offsets, counts)
    return counts, csr.indices[take].astype(np.int64), csr.data[take]


def message_nnz(csr, rows: np.ndarray) -> int:
    """Stored entries in the message for ``rows``."""
    return int((csr.indptr[rows + 1] - csr.indptr[rows]).sum())


def rows_tensor(pieces, nrows: int, ncols: int, dtype):
    """The ``nrows x ncols`` CSR ustc Tensor stacking the pieces ``(counts, cols, values)`` in
    order (together they hold ``nrows`` rows)."""
    from ..tensor.tensor import Tensor

    counts = np.concatenate([p[0] for p in pieces]) if pieces else np.zeros(0, np.int64)
    cols = np.concatenate([p[1] for p in pieces]) if pieces else np.zeros(0, np.int64)
    vals = np.concatenate([p[2] for p in pieces]).astype(dtype) if pieces else np.zeros(0, dtype)
    rows = np.repeat(np.arange(nrows, dtype=np.int64), counts)
    return Tensor.from_coo((rows, cols), vals, (nrows, ncols), "CSR")


def product_entries(c):
    """``(rows, cols, values)`` of a product (a ustc Tensor, or a dense array when ``A``'s
    block format is all dense), stored zeros dropped."""
    if isinstance(c, np.ndarray):
        r, k = np.nonzero(c)
        return r.astype(np.int64), k.astype(np.int64), c[r, k]
    (r, k), v = c.entries()
    keep = v != 0
    return np.asarray(r, np.int64)[keep], np.asarray(k, np.int64)[keep], np.asarray(v)[keep]


def compressed_a(block, needs: np.ndarray, dtype, fmt, colmap=None):
    """The block's rows with column ``needs[k]`` renumbered ``k`` (``colmap[k]`` when given: the
    fetched rows of ``B`` are in another order), in ``fmt`` and ``dtype``."""
    from ..tensor.tensor import Tensor

    r, c, v = block_entries(block)
    keep = v != 0
    k = np.searchsorted(needs, c[keep])
    if colmap is not None:
        k = np.asarray(colmap, np.int64)[k]
    return Tensor.from_coo((r[keep], k), v[keep].astype(dtype), (block.nrows, len(needs)), fmt)


@dataclass(frozen=True, eq=False)
class BlockProduct:
    """One block's share of a planned SpGEMM: ``a``, its rows of ``A`` compressed to ``needs``;
    ``send[d]``, the local rows of its block of ``B`` that block ``d`` needs (``d`` another
    block); ``runs[s] = (lo, hi)``, where block ``s``'s rows land in ``needs`` (``s`` may be
    this block: its own rows, no message); ``ncols``, ``B``'s column count."""

    bkey: str
    needs: np.ndarray
    a: object
    send: dict
    runs: dict
    ncols: int
    dtype: np.dtype


class SpGEMMBlocks:
    """The block actor's SpGEMM methods (mixed into :class:`~ustc.distributed.worker.BlockWorker`;
    they use its ``blocks``, ``comm``, ``_run``, ``_exchange`` and ``_set_block``)."""

    async def spgemm_needs(self, pkey, akey) -> np.ndarray:
        """Plan, step 1: the sorted global columns this rank's rows of ``A`` touch (kept for step 2)."""
        needs = await self._run(touched_columns, self.blocks[akey])
        self._needs[pkey] = needs
        return needs

    async def spgemm_plan(self, pkey, akey, bkey, send, runs, ncols, dtype, rows=None, colmap=None) -> dict:
        """Plan, step 2: compress ``A``'s rows to ``needs`` in the block's format and note what to
        send and where received rows land; returns the stored entries of each message
        ``{"nnz": {dst: entries}, "itemsize": bytes per value}`` (the driver counts the bytes).
        ``rows`` / ``colmap``: the rows of ``B`` fetched (ascending positions of ``B``'s rows) and
        where column ``needs[k]`` lands among them, when ``A``'s columns and ``B``'s rows are
        labelled differently (None: ``needs`` itself, in place)."""
        def plan():
            ablock, bblock = self.blocks[akey], self.blocks[bkey]
            needs = self._needs.pop(pkey)
            dt = np.dtype(dtype)
            a = (compressed_a(ablock, needs, dt, ablock.formats[0], colmap) if len(needs) and ablock.nrows
                 else None)
            csr = row_csr(bblock, ncols)
            sends = {int(d): np.asarray(r, np.int64) for d, r in send.items()}
            fetched = needs if rows is None else np.asarray(rows, np.int64)
            self.spgemms[pkey] = BlockProduct(bkey, fetched, a, sends,
                                              {int(s): (int(lo), int(hi)) for s, (lo, hi) in runs.items()},
                                              int(ncols), dt)
            return {"nnz": {d: message_nnz(csr, r) for d, r in sends.items()}, "itemsize": csr.data.itemsize}
        return await self._run(plan)

    async def spgemm(self, pkey, akey, ckey, cols, alpha, fmt, ghost_fmt) -> dict:
        """Execute (SPMD): send the planned rows of ``B``, gather the rows this block needs, multiply
        with ``ustc.matmul`` and keep the product's rows as block ``ckey`` (columns split by
        ``cols``); returns the block's info as :meth:`_set_block` does."""
        return await self._run(self._spgemm, pkey, akey, ckey, cols, alpha, fmt, ghost_fmt)

    def _spgemm(self, pkey, akey, ckey, cols, alpha, fmt, ghost_fmt):
        from ..ops.matmul import matmul

        prod = self.spgemms[pkey]
        ablock, bblock = self.blocks[akey], self.blocks[prod.bkey]
        csr = row_csr(bblock, prod.ncols)
        tag = self.comm.next_tag("spgemm")
        self.comm.syncs += 1
        sends = [(d, pack_rows(csr, rows)) for d, rows in prod.send.items()]
        pieces = self._wait(self._exchange(sends, [s for s in prod.runs if s != self.rank], tag))
        if self.rank in prod.runs:
            lo, hi = prod.runs[self.rank]
            pieces[self.rank] = pack_rows(csr, prod.needs[lo:hi] - bblock.rows[0])
        coo = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, prod.dtype))
        if prod.a is not None:
            b = rows_tensor([pieces[s] for s in sorted(prod.runs)], len(prod.needs), prod.ncols, prod.dtype)
            r, k, v = product_entries(matmul(prod.a, b))
            coo = (r, k, v * alpha if alpha != 1 else v)
        fmt = fmt if fmt is not None else ablock.formats[0]
        ghost_fmt = ghost_fmt if ghost_fmt is not None else ablock.formats[1]
        return self._set_block(ckey, ablock.rows, cols, coo, fmt, ghost_fmt)
