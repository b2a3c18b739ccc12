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
block's k-th coordinate at slot k; ``finalize`` places them (below); the filling
pass finds each entry's slot and stores its value, the padding slots keeping the
zeros they were allocated with. The placement: a padding coordinate is the
smallest unused one, so every coordinate below it is stored in the block, and
it sits at the slot equal to itself; the k-th of K entries, at coordinate c,
has the c - k unused coordinates below it, min(n - K, c - k) of them padding,
and sits at slot k + min(n - K, c - k).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...codegen import loopir as ir
from ...errors import FormatSemanticError, StorageError
from ..expr import Dimension, FloorDiv, Mod
from .base import LevelType, Packed, as_intp, check_range, check_segments, int_args, split_spec, store
from .dense import Dense


FINALIZE_ELEMENTS = 1 << 18  # coordinates placed per NumPy batch in ``finalize``


@dataclass(frozen=True)
class Structured(LevelType):
    keyword = "structured"
    buffers = ("crd",)
    any_pattern = False
    pads = True          # value-0 entries fill a block; a refused result is refused again by pack (or pruned)
    append = True
    collects = True

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
        position + 1. Collect pass: the k-th entry's coordinate goes to slot k. Fill pass:
        the entry's slot, found from slot k up (padding below it moves it up)."""
        k, n = ir.Var(w.last_coord), self.n
        start = ir.mul(p, n)
        slot = ir.Var(w.scratch)
        at = as_intp(ir.load(w.crd, ir.Index(ir.add(start, slot))))
        find = ir.While(ir.conj([ir.lt(slot, n - 1), ir.Bin("!=", at, c)]), (ir.Assign(w.scratch, ir.Const(1), "+"),))
        collect = ir.If(ir.lt(k, n), (store(w.crd, ir.add(start, k), c),))
        refuse = ir.If(ir.conj([ir.eq(k, n), ir.eq(ir.Var(w.count), 0)]), (ir.Assign(w.count, ir.add(p, 1)),))
        code = [ir.If(ir.Bin("!=", ir.Var(w.last_parent), p), (ir.Assign(w.last_parent, p), ir.Assign(w.last_coord, ir.Const(0)))),
                ir.Assign(w.scratch, k),
                ir.If(w.last_pass, (find,), (ir.If(w.emit, (collect,), (refuse,)),)),
                ir.Assign(w.last_coord, ir.Const(1), "+")]
        return code, ir.add(start, slot)

    def written_positions(self, nparents, extent, counted):
        """``counted``: 0, or 1 + the first block the walk found holding more than n nonzeros."""
        if counted:
            raise StorageError(f"{self.text()}: block {counted - 1} (blocks of {self.m} counted in storage order) "
                               f"holds more than {self.n} nonzeros; convert with prune=True keeps the {self.n} largest")
        return nparents * self.n

    def write_lengths(self, nparents, count):
        return {"crd": count}

    def finalize(self, buffers, nparents, count):
        """Each block's entries, collected at slots 0..K-1 (the rest 0), moved to their slots and
        the padding coordinates written (module docstring); a block already placed (n ascending
        coordinates) stays as it is, so finalizing twice is harmless. Blocks go a batch at a
        time, so the temporaries stay small."""
        crd, n = buffers["crd"], self.n
        if n == 0:
            return buffers
        blocks = crd[:nparents * n].reshape(nparents, n)
        step = max(1, FINALIZE_ELEMENTS // n)
        for b in range(0, nparents, step):
            blocks[b:b + step] = self._place(blocks[b:b + step])
        return buffers

    def _place(self, collected: np.ndarray) -> np.ndarray:
        """Placed blocks from collected ones (entries ascending from slot 0, zeros after them; a
        block whose only entry is coordinate 0 reads as an empty one, and is placed the same)."""
        n = self.n
        c = collected.astype(np.int64)
        count = 1 + np.cumprod(c[:, 1:] > c[:, :-1], axis=1).sum(axis=1)
        k = np.arange(n, dtype=np.int64)
        slot = k + np.minimum((n - count)[:, None], c - k)
        used = k < count[:, None]
        out = np.broadcast_to(k, c.shape).copy()
        rows = np.broadcast_to(np.arange(len(c))[:, None], c.shape)
        out[rows[used], slot[used]] = c[used]
        return out

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
