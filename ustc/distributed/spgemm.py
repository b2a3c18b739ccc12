"""Distributed SpGEMM ``C = alpha * A @ B`` for two :class:`~ustc.distributed.DTensor` s.

Block ``d`` of ``A`` needs the rows of ``B`` at the columns its rows touch (its local
columns in use and its ghost columns): exactly those rows are fetched from their owners
in ``B``'s row partition, one message per (owner, block) pair, rows owned by ``d``
itself taken in place. The block then multiplies its rows of ``A`` (in its own format,
columns renumbered to the fetched rows) with the single-process ``ustc.matmul``. ``C``
has ``A``'s row partition and ``B``'s column partition. :class:`FetchPlan` counts what an
execute moves; the tests check that the communicators' byte counts equal it.

    >>> C = ud.matmul(A, B)                       # doctest: +SKIP
    >>> mm = ud.Matmul(A, B); mm.plan()["bytes"]   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError, UstcError

INDEX_BYTES = 8        # row counts and column indices travel as int64


@dataclass(frozen=True, eq=False)
class FetchPlan:
    """What one SpGEMM execute moves. ``rows[s, d]``: rows of ``B`` that block ``s`` sends block
    ``d`` (zero on the diagonal: a block's own rows do not travel), ``nnz[s, d]`` their stored
    entries, ``value_bytes[s, d]`` the bytes of those values (``B``'s block dtype), ``own[d]``
    the rows block ``d`` takes from its own block of ``B``. A message ``(s, d)`` carries
    ``rows[s, d]`` counts and ``nnz[s, d]`` column indices (int64 each) and the values."""

    rows: np.ndarray
    nnz: np.ndarray
    value_bytes: np.ndarray
    own: np.ndarray

    @property
    def messages(self) -> int:
        return int(np.count_nonzero(self.rows))

    @property
    def bytes(self) -> int:
        return int(INDEX_BYTES * (self.rows.sum() + self.nnz.sum()) + self.value_bytes.sum())

    def info(self) -> dict:
        """``plan_info``: messages, bytes, rows and entries fetched in all and per block."""
        return {"blocks": len(self.own), "messages": self.messages, "bytes": self.bytes,
                "rows": int(self.rows.sum()), "entries": int(self.nnz.sum()),
                "rows_fetched": self.rows.sum(axis=0).tolist(), "rows_own": self.own.tolist()}


def _fetch_lists(needs: list, b_rows) -> tuple[list, list]:
    """From each block's sorted needed rows: ``send[s][d]`` (block-local rows of ``B``'s block
    ``s`` for block ``d``, ``s != d``) and ``runs[d][s] = (lo, hi)`` (where they land)."""
    P = len(needs)
    send, runs = [dict() for _ in range(P)], [dict() for _ in range(P)]
    for d, rows in enumerate(needs):
        owners = b_rows.owner(rows)
        for s in np.unique(owners):
            s = int(s)
            lo, hi = (int(i) for i in np.searchsorted(owners, [s, s + 1]))
            runs[d][s] = (lo, hi)
            if s != d:
                send[s][d] = rows[lo:hi] - b_rows.bounds[s]
    return send, runs


def _in_b_order(needs: np.ndarray, a_cols, b_rows) -> tuple:
    """``(rows, colmap)``: the rows of ``B`` (positions in ``b_rows``, ascending) at the columns
    ``needs`` (positions in ``a_cols``, ascending), and ``colmap[k]``, where column ``needs[k]``'s
    row lands among them; ``(needs, None)`` when both partitions number alike (no labels, or the
    same labels)."""
    if (a_cols.perm is None and b_rows.perm is None) or (
            a_cols.perm is not None and b_rows.perm is not None and np.array_equal(a_cols.perm, b_rows.perm)):
        return needs, None
    q = np.asarray(b_rows.position(a_cols.index(needs)), np.int64)
    order = np.argsort(q, kind="stable")
    colmap = np.empty_like(order)
    colmap[order] = np.arange(len(order), dtype=order.dtype)
    return q[order], colmap


class SpGEMM:
    """``C = alpha * A @ B`` on the blocks. :meth:`plan` finds the rows each block needs and
    compresses its rows of ``A`` once; :meth:`execute` fetches the rows and multiplies, and
    returns a new :class:`DTensor` (``A``'s row partition, ``B``'s column partition; each
    block in ``block_format`` / ``ghost_format``, default the formats of ``A``'s block)."""

    def __init__(self, a, b, c=None, alpha=1, beta=None, *, block_format=None, ghost_format=None):
        from .dtensor import DTensor

        if not (isinstance(a, DTensor) and isinstance(b, DTensor)):
            raise UstcError("ustc.distributed SpGEMM: a and b must be DTensors")
        if c is not None or beta is not None:
            raise UstcError("ustc.distributed SpGEMM: c and beta are not supported (sparse C = alpha * A @ B)")
        if a.shape[1] != b.shape[0]:
            raise ShapeError(f"matmul: a has {a.shape[1]} columns but b has {b.shape[0]} rows")
        if a.runtime is not b.runtime or a.rows.parts != b.rows.parts:
            raise ShapeError(f"matmul: a and b must live on one runtime with the same block count "
                             f"(a: {a.rows.parts}, b: {b.rows.parts})")
        self.a, self.b, self.alpha = a, b, alpha
        self.block_format, self.ghost_format = block_format, ghost_format
        self.dtype = np.result_type(a.dtype, b.dtype, *([np.asarray(alpha).dtype] if alpha != 1 else []))
        self.key = a.runtime.name("spgemm")
        self.fetch: FetchPlan | None = None
        self.plan_info = None

    def plan(self) -> dict:
        a, b = self.a, self.b
        P, group = a.rows.parts, a.group
        needs = group.call("spgemm_needs", [(self.key, a.name)] * P)
        fetched, colmaps = zip(*(_in_b_order(nd, a.cols, b.rows) for nd in needs)) if P else ((), ())
        send, runs = _fetch_lists(list(fetched), b.rows)
        nnz = group.call("spgemm_plan", [(self.key, a.name, b.name, send[s], runs[s], b.shape[1], self.dtype.str,
                                          None if colmaps[s] is None else fetched[s], colmaps[s])
                                         for s in range(P)])
        rows, counts, values = (np.zeros((P, P), np.int64) for _ in range(3))
        for s in range(P):
            for d, idx in send[s].items():
                rows[s, d], counts[s, d] = len(idx), nnz[s]["nnz"][d]
                values[s, d] = counts[s, d] * nnz[s]["itemsize"]
        own = np.array([runs[d][d][1] - runs[d][d][0] if d in runs[d] else 0 for d in range(P)], np.int64)
        self.fetch = FetchPlan(rows, counts, values, own)
        self.plan_info = self.fetch.info()
        self._generation = group.generation
        return self.plan_info

    def execute(self):
        """The product as a new DTensor (SPMD: one call per block, one message per pair)."""
        from .dtensor import DTensor

        if self.fetch is None or self.a.group.generation != self._generation:
            self.plan()                 # first use, or the group was repaired since the plan
        a, b = self.a, self.b
        name = a.runtime.name("mat")
        infos = a.group.call("spgemm", [(self.key, a.name, name, b.cols.range(r), self.alpha, self.block_format,
                                         self.ghost_format) for r in range(a.rows.parts)])
        return DTensor(a.runtime, a.rows, b.cols, name, (a.shape[0], b.shape[1]), self.dtype, infos)

    def counters(self) -> list:
        """Per block: messages, bytes and synchronisations its communicator counted so far."""
        return self.a.group.call("counters")

    def free(self) -> None:
        """Drop the blocks' planned state."""
        self.a.group.call("drop", [(self.key,)] * self.a.rows.parts)
