"""``singleton``: one coordinate per parent position, as in COO's trailing levels.

Buffers: ``crd``. Children of parent position ``p``: exactly ``p``, with
coordinate ``crd[p]``. A singleton follows a compressed, loose_compressed or
singleton level; only singletons follow it, then possibly dense levels (the
trailing dense dimensions of a hybrid COO tensor, as PyTorch stores them). ``soa`` says the coordinates
are kept one array per level (ustc always does; the property is accepted and
printed for MLIR compatibility).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...codegen import loopir as ir
from ...errors import FormatSemanticError, StorageError
from .base import LevelProperty, LevelType, Packed, check_range, store
from .dense import Dense


@dataclass(frozen=True)
class Singleton(LevelType):
    keyword = "singleton"
    buffers = ("crd",)
    allowed_properties = frozenset(LevelProperty)
    one_child = True
    coo_parent = True
    append = True

    def check(self, levels, k):
        if k == 0 or not levels[k - 1].type.coo_parent:
            raise FormatSemanticError(
                "a singleton level must follow a compressed, loose_compressed or singleton level")
        later = [level.type for level in levels[k + 1:]]
        dense = [isinstance(t, Dense) for t in later]
        head = dense.index(True) if True in dense else len(later)
        bad = [t for t in later[:head] if not isinstance(t, Singleton)] + \
            [t for t, d in zip(later[head:], dense[head:]) if not d]
        if bad:
            raise FormatSemanticError(
                f"only singleton levels (then dense levels) may follow a singleton level, not '{bad[0].keyword}'")
        first = next(j for j in range(k, 0, -1) if not isinstance(levels[j - 1].type, Singleton))
        if k > first and self.soa != levels[first].type.soa:
            # MLIR's rule too: one memory layout for every singleton of a COO region
            word = {True: "is", False: "is not"}
            raise FormatSemanticError(
                f"the singleton levels of one COO region must all be 'soa' or none: level {first} "
                f"{word[levels[first].type.soa]} 'soa', level {k} {word[self.soa]}")

    @property
    def soa(self) -> bool:
        """Whether the level is marked ``soa`` (one coordinate array per level either way)."""
        return LevelProperty.SOA in self.properties

    def segment(self, acc, p, run_end):
        """Exactly the parent's position, or its whole run when the parent was deduplicated."""
        return p, run_end if run_end is not None else ir.add(p, 1)

    def child_starts(self, extent, pos, starts):
        return starts

    # -- write hooks: the parent's position, its coordinate stored there -------------------
    def insert(self, w, p, c):
        return [ir.If(w.emit, (store(w.crd, p, c),))], p

    def written_positions(self, nparents, extent, counted):
        return nparents

    def write_lengths(self, nparents, count):
        return {"crd": nparents}

    def positions(self, nparents, extent, buffers):
        if len(buffers["crd"]) < nparents:
            raise StorageError(f"crd holds {len(buffers['crd'])} coordinates, the level has {nparents} positions")
        return nparents

    def unpack(self, nparents, extent, lo, buffers):
        return np.arange(nparents, dtype=np.int64), np.asarray(buffers["crd"][:nparents], dtype=np.int64)

    def pack(self, seg):
        """One position per parent position (the COO head already grouped the tuples)."""
        if self.unique and len(seg.group) > 1 and seg.prefix is not None:
            q = seg.repeated([*seg.prefix, seg.crd], seg.new_positions())
            if q is not None:
                raise StorageError(f"{seg.where}: coordinate {seg.crd[q]} repeats for one coordinate tuple "
                                   f"above it, but the level is unique (use singleton(nonunique))")
        crd = np.zeros(seg.nparents, dtype=np.int64)
        crd[seg.parent] = seg.crd
        return Packed({"crd": crd}, seg.parent, seg.nparents)

    def check_buffers(self, nparents, extent, lo, buffers):
        crd = buffers["crd"]
        if len(crd) < nparents:
            raise StorageError(f"crd holds {len(crd)} coordinates, the level has {nparents} positions")
        check_range("crd", crd[:nparents], lo, extent)
