"""``structured[n, m]``: exactly n stored entries in every block of m (n:m sparsity).

Buffers: ``crd`` holding the in-block coordinate of each stored entry.
Children of parent position ``p``: positions ``[p * n, (p + 1) * n)``, in
ascending coordinate order; a block with fewer nonzeros is padded with value-0
entries at its lowest unused coordinates. It is the last level, only dense
levels precede it, and its expression is ``d mod m`` with ``d floordiv m`` on
an earlier level. 2:4 sparsity is ``structured[2, 4]``; the UST spelling
``structured(2)`` takes m from the ``mod``.

Written by generated code (``codegen.writer``) in three passes of one walk that
meets each block's coordinates in ascending order (``collects``): the counting
pass refuses a block holding more than n nonzeros (``written_positions`` names
the first, before anything is allocated); the collecting pass stores each
block's k-th coordinate at slot k; the filling pass, at a block's first entry,
places the block's coordinates, then stores each value at its slot, the padding
slots keeping the zeros they were allocated with; ``finalize`` pads the blocks
no entry reached. Chunks of rows may write in parallel (``split_append``: a
block's slots are its own); the writer keeps the first chunk's refusal. The
placement: a padding coordinate is the smallest unused
one, so every coordinate below it is stored in the block, and it sits at the
slot equal to itself; the k-th of K entries, at coordinate c, has the c - k
unused coordinates below it, min(n - K, c - k) of them padding, and sits at slot
k + min(n - K, c - k).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...codegen import loopir as ir
from ...errors import FormatSemanticError, StorageError
from ..expr import Dimension, FloorDiv, Mod
from .base import LevelType, Packed, as_intp, check_range, check_segments, int_args, split_spec, store
from .dense import Dense


FINALIZE_BLOCKS = 1 << 16  # blocks ``finalize`` looks at per NumPy batch


@dataclass(frozen=True)
class Structured(LevelType):
    keyword = "structured"
    buffers = ("crd",)
    any_pattern = False
    pads = True          # value-0 entries fill a block; a refused result is refused again by pack (or pruned)
    append = True
    collects = True
    split_append = True  # a block's slots are its own; chunks of rows hold whole blocks

    n: int = 2
    m: int | None = 4  # None until resolved from the level's "d mod m"

    def __post_init__(self):
        super().__post_init__()
        if self.m is not None and not 0 <= self.n <= self.m:
            raise FormatSemanticError(f"structured[n, m] needs 0 <= n <= m, got [{self.n}, {self.m}]")
        if self.m is None and self.n < 0:
            raise FormatSemanticError(f"structured(n) needs n >= 0, got {self.n}")

    @classmethod
    def from_syntax(cls, groups):
        if len(groups) != 1:
            raise FormatSemanticError("'structured' takes [n, m] or (n) and no properties")
        bracket, items = groups[0]
        if bracket == "[":
            n, m = int_args(cls.keyword, items, 2, "[n, m]")
            return cls(n=n, m=m)
        (n,) = int_args(cls.keyword, items, 1, "(n)")
        return cls(n=n, m=None)

    @classmethod
    def from_spec(cls, args):
        params, props = split_spec(args)
        if props:
            raise FormatSemanticError("'structured' levels take no properties")
        if len(params) == 1:
            (n,) = int_args(cls.keyword, params, 1, "n")
            return cls(n=n, m=None)
        n, m = int_args(cls.keyword, params, 2, "n, m")
        return cls(n=n, m=m)

    def params_text(self):
        return f"[{self.n}, {self.m}]"

    def params_repr(self):
        return (str(self.n), str(self.m))

    def resolve(self, expr):
        if not isinstance(expr, Mod) or not isinstance(expr.operand, Dimension):
            raise FormatSemanticError("a structured level's expression must be 'd mod m'")
        if self.m is None:
            return replace(self, m=expr.constant)
        if self.m != expr.constant:
            raise FormatSemanticError(
                f"structured[{self.n}, {self.m}] needs 'mod {self.m}', the level has 'mod {expr.constant}'")
        return self

    def check(self, levels, k):
        if k != len(levels) - 1:
            raise FormatSemanticError("a structured level must be the last level")
        before = [level for level in levels[:k] if not isinstance(level.type, Dense)]
        if before:
            raise FormatSemanticError(
                f"only dense levels may precede a structured level, not '{before[0].type.keyword}'")
        dim = levels[k].expr.operand
        if FloorDiv(dim, self.m) not in [level.expr for level in levels[:k]]:
            raise FormatSemanticError(f"a structured level needs '{dim} floordiv {self.m}' on an earlier level")

    # -- read hooks and batched layout ----------------------------------------------
    def segment(self, acc, p, run_end):
        """n positions per block: ``[p * n, p * n + n)``."""
        return ir.mul(p, self.n), ir.add(ir.mul(p, self.n), self.n)

    def used_entries(self, buffers, nparents):
        return {"crd": buffers["crd"][:nparents * self.n]}

    def child_starts(self, extent, pos, starts):
        return starts * self.n

    # -- write hooks (module docstring): last_coord counts the entries met in the block ------
    def insert(self, w, p, c):
        """Count pass: the first block whose (n + 1)-th entry arrives sets ``count`` to its
        position + 1. Collect pass: the block's k-th coordinate goes to slot k. Fill pass: the
        block's first entry places the block (:meth:`_place`, ``count`` := K); the k-th entry's
        slot is k + min(n - K, c - k)."""
        k, n, K = ir.Var(w.last_coord), self.n, ir.Var(w.count)
        start = ir.mul(p, n)
        collect = ir.If(ir.lt(k, n), (store(w.crd, ir.add(start, k), c),))
        refuse = ir.If(ir.conj([ir.eq(k, n), ir.eq(K, 0)]), (ir.Assign(w.count, ir.add(p, 1)),))
        first = (ir.Assign(w.last_parent, p), ir.If(w.last_pass, tuple(self._place(w, start))),
                 ir.Assign(w.last_coord, ir.Const(0)))
        code = [ir.If(ir.Bin("!=", ir.Var(w.last_parent), p), first),
                ir.If(w.last_pass, (), (ir.If(w.emit, (collect,), (refuse,)),)),  # (placed above)
                ir.Assign(w.scratch, ir.add(k, ir.Call("min", (ir.sub(n, K), ir.sub(c, k))))),
                ir.Assign(w.last_coord, ir.Const(1), "+")]
        return code, ir.add(start, ir.Var(w.scratch))

    def _place(self, w, start: ir.Expr) -> list:
        """Loop IR that moves a block's collected coordinates (ascending from slot 0, zeros after)
        to their slots and writes the padding, in place from the top slot down (an entry only
        moves up, past slots already read): ``count`` := K, the length of the ascending run
        (a block whose only entry is coordinate 0 reads as K = 1 or 0 alike: both place as
        0..n-1); ``last_coord`` walks the entries down, ``scratch`` the slots."""
        n, K, j, t = self.n, ir.Var(w.count), ir.Var(w.last_coord), ir.Var(w.scratch)

        def at(q):
            return as_intp(ir.load(w.crd, ir.Index(ir.add(start, q))))

        s = ir.sub(n - 1, t)
        lands = ir.conj([ir.Bin(">=", j, ir.Const(0)),
                         ir.eq(ir.add(j, ir.Call("min", (ir.sub(n, K), ir.sub(at(j), j)))), s)])
        return [ir.Assign(w.count, ir.Const(1)),
                ir.While(ir.conj([ir.lt(K, n), ir.Bin(">", at(K), at(ir.sub(K, 1)))]),
                         (ir.Assign(w.count, ir.Const(1), "+"),)),
                ir.Assign(w.last_coord, ir.sub(K, 1)),
                ir.For(w.scratch, ir.Const(0), ir.Const(n),
                       (ir.If(lands, (store(w.crd, ir.add(start, s), at(j)), ir.Assign(w.last_coord, ir.sub(j, 1))),
                              (store(w.crd, ir.add(start, s), s),)),))]

    def written_positions(self, nparents, extent, counted):
        """``counted``: 0, or 1 + the first block the walk found holding more than n nonzeros."""
        if counted:
            raise StorageError(f"{self.text()}: block {counted - 1} (blocks of {self.m} counted in storage order) "
                               f"holds more than {self.n} nonzeros; convert with prune=True keeps the {self.n} largest")
        return nparents * self.n

    def write_lengths(self, nparents, count):
        return {"crd": count}

    def finalize(self, buffers, nparents, count):
        """Blocks no entry reached hold zeros: their coordinates become 0..n-1 (padding only). A
        block the kernel placed holds n ascending coordinates, and a collected one is all zeros
        only when it is empty or holds coordinate 0 alone, which places the same: finalizing
        between the passes or twice is harmless."""
        n = self.n
        if n < 2:  # n = 1: a block of zeros is the padding [0]
            return buffers
        crd = buffers["crd"][:nparents * n]
        blocks = crd.reshape(nparents, n)
        for b in range(0, nparents, FINALIZE_BLOCKS):  # a batch at a time: small temporaries
            batch = blocks[b:b + FINALIZE_BLOCKS]
            slot = np.flatnonzero((batch[:, 0] | batch[:, 1]) == 0)  # coordinates are >= 0
            slot *= n
            slot += b * n
            for s in range(1, n):  # slot 0 holds 0 already
                slot += 1
                crd[slot] = s
        return buffers

    # -- storage -----------------------------------------------------------------
    def positions(self, nparents, extent, buffers):
        if len(buffers["crd"]) < nparents * self.n:
            raise StorageError(f"crd holds {len(buffers['crd'])} coordinates, expected {self.n} per block "
                               f"x {nparents} blocks = {nparents * self.n}")
        return nparents * self.n

    def unpack(self, nparents, extent, lo, buffers):
        parent = np.repeat(np.arange(nparents, dtype=np.int64), self.n)
        return parent, np.asarray(buffers["crd"][:nparents * self.n], dtype=np.int64)

    def pack(self, seg):
        counts = np.bincount(seg.parent, minlength=seg.nparents)
        keep = None
        if (counts > self.n).any():
            if not seg.prune:
                p = int(np.argmax(counts > self.n))
                raise StorageError(f"{seg.where}: block {p} holds {counts[p]} nonzeros, more than "
                                   f"{self.n} of {self.m}; pass prune=True to keep the {self.n} largest")
            keep = self._largest(seg)
            parent, crd = seg.parent[keep], seg.crd[keep]
        else:
            parent, crd = seg.parent, seg.crd
        occupied = np.zeros((seg.nparents, self.m), dtype=bool)
        occupied[parent, crd] = True
        missing = self.n - occupied.sum(axis=1)
        chosen = occupied | ((np.cumsum(~occupied, axis=1) <= missing[:, None]) & ~occupied)
        rank = np.cumsum(chosen, axis=1) - 1
        stored = np.nonzero(chosen)[1]
        return Packed({"crd": stored}, parent * self.n + rank[parent, crd], seg.nparents * self.n, keep)

    def _largest(self, seg) -> np.ndarray:
        """Mask of the n entries of largest magnitude in every block."""
        magnitude = np.abs(seg.values).astype(np.float64)  # bool/int/complex alike
        order = np.lexsort((-magnitude, seg.parent))
        start = np.searchsorted(seg.parent[order], seg.parent[order], side="left")
        keep = np.zeros(len(order), dtype=bool)
        keep[order[np.arange(len(order)) - start < self.n]] = True
        return keep

    def check_buffers(self, nparents, extent, lo, buffers):
        crd = buffers["crd"]
        if len(crd) != nparents * self.n:
            raise StorageError(f"crd holds {len(crd)} coordinates, expected {self.n} per block "
                               f"x {nparents} blocks = {nparents * self.n}")
        check_range("crd", crd, 0, self.m)
        check_segments(np.asarray(crd), np.repeat(np.arange(nparents), self.n), True, True)
