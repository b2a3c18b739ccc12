"""A level type defined outside ustc: ``ell(K)``, ELLPACK rows of at most K entries.

Buffers: ``pos`` holds each parent's entry count (not offsets) and ``crd`` K
slots per parent; parent ``p``'s children are positions ``[p * K, p * K +
pos[p])``, coordinates ordered and unique, unused slots hold 0 (their values
too). It needs its storage hooks, one read hook (``segment``), the write hooks
and nothing else: the tests prove that adding a level type is this module plus
one registry line, ``ustc.format.levels.register(ELL)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ustc.codegen import loopir as ir
from ustc.errors import FormatSemanticError, StorageError
from ustc.format.levels.base import LevelType, Packed, as_intp, int_args, store, subscript, unique_append


@dataclass(frozen=True)
class ELL(LevelType):
    keyword = "ell"
    buffers = ("pos", "crd")
    any_pattern = False   # a row of more than K entries does not fit
    append = True

    K: int = 4

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.K, bool) or not isinstance(self.K, int) or self.K < 1:
            raise FormatSemanticError(f"ell(K) needs K >= 1, got {self.K!r}")

    @classmethod
    def from_syntax(cls, groups):
        if len(groups) != 1 or groups[0][0] != "(":
            raise FormatSemanticError("'ell' takes its width in parentheses: ell(K)")
        (k,) = int_args(cls.keyword, groups[0][1], 1, "(K)")
        return cls(K=k)

    @classmethod
    def from_spec(cls, args):
        (k,) = int_args(cls.keyword, args, 1, "K")
        return cls(K=k)

    def params_text(self):
        return f"({self.K})"

    def params_repr(self):
        return (str(self.K),)

    # -- storage (the NumPy oracle) ----------------------------------------------------
    def pos_length(self, nparents):
        return nparents

    def positions(self, nparents, extent, buffers):
        if len(buffers["pos"]) != nparents or len(buffers["crd"]) < nparents * self.K:
            raise StorageError(f"ell({self.K}) needs {nparents} counts and {nparents * self.K} slots")
        return nparents * self.K

    def unpack(self, nparents, extent, lo, buffers):
        counts = np.asarray(buffers["pos"][:nparents], dtype=np.int64)
        slot = np.arange(nparents * self.K, dtype=np.int64)
        parent = slot // self.K
        parent[slot % self.K >= np.repeat(counts, self.K)] = -1
        return parent, np.asarray(buffers["crd"][:nparents * self.K], dtype=np.int64)

    def pack(self, seg):
        new = seg.new_positions()
        parent, crd = seg.parent[new], seg.crd[new]
        counts = np.bincount(parent, minlength=seg.nparents).astype(np.int64)
        if len(counts) and counts.max() > self.K:
            p = int(np.argmax(counts))
            raise StorageError(f"{seg.where}: row {p} holds {counts[p]} entries, more than ell({self.K}) keeps")
        first = np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else counts
        slot = parent * self.K + np.arange(len(parent)) - first[parent]
        buf = np.zeros(seg.nparents * self.K, dtype=np.int64)
        buf[slot] = crd
        return Packed({"pos": counts, "crd": buf}, slot[np.cumsum(new) - 1], seg.nparents * self.K)

    # -- read hook: a parent's children are the first pos[p] of its K slots ---------------
    def segment(self, acc, p, run_end):
        start = ir.mul(p, self.K)
        return start, ir.add(start, as_intp(ir.load(acc.pos, subscript(p))))

    # -- write hooks: slot ``scratch`` of the parent's K; ``count`` keeps the longest row ---
    def insert(self, w, p, c):
        start, slot = ir.mul(p, self.K), ir.Var(w.scratch)
        body = [ir.If(ir.Bin("!=", ir.Var(w.last_parent), p), (ir.Assign(w.scratch, ir.Const(0)),)),
                ir.If(ir.Bin("and", w.emit, ir.lt(slot, self.K)),
                      (store(w.crd, ir.add(start, slot), c), store(w.pos, p, ir.add(slot, 1)))),
                ir.Assign(w.scratch, ir.Const(1), "+"),
                ir.Assign(w.count, ir.Call("max", (ir.Var(w.count), slot)))]
        return unique_append(w, True, p, c, body), ir.sub(ir.add(start, slot), 1)

    def written_positions(self, nparents, extent, counted):
        if counted > self.K:
            raise StorageError(f"a row holds {counted} entries, more than ell({self.K}) keeps")
        return nparents * self.K

    def write_lengths(self, nparents, count):
        return {"pos": nparents, "crd": nparents * self.K}
