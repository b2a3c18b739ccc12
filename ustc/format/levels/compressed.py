"""``compressed``: the stored coordinates of each segment, as in CSR's column level.

Buffers: ``pos`` (parents + 1 entries) and ``crd``. Children of parent
position ``p``: ``[pos[p], pos[p + 1])``, with coordinates ``crd[pos[p]:pos[p + 1]]``.
Properties: ``nonunique`` (a coordinate may repeat in a segment, as in COO's
first level) and ``nonordered`` (coordinates of a segment are not sorted).

Example (CSR level 1 of the 4x8 matrix with entries (0,0) (0,1) (1,1) (1,3) (2,2) (3,3)):
``pos = [0, 2, 4, 5, 6]``, ``crd = [0, 1, 1, 3, 2, 3]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...codegen import loopir as ir
from ...errors import StorageError
from .base import (LevelProperty, LevelType, Packed, as_intp, check_range, check_segments, pos_end, prefix_sum,
                   segment_parents, sort_segment, store, subscript, unique_append)


@dataclass(frozen=True)
class Compressed(LevelType):
    keyword = "compressed"
    buffers = ("pos", "crd")
    allowed_properties = frozenset({LevelProperty.NONUNIQUE, LevelProperty.NONORDERED})
    coo_parent = True
    append = True
    workspace = True
    split_append = True

    # -- segment bounds: the one thing loose_compressed changes ---------------------
    def bounds(self, pos: np.ndarray, nparents: int) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)`` position bounds of each parent's segment."""
        return pos[:nparents], pos[1:nparents + 1]

    def make_pos(self, counts: np.ndarray) -> np.ndarray:
        """The pos buffer for segments of ``counts`` entries laid out back to back."""
        return prefix_sum(counts)

    def pos_length(self, nparents: int) -> int:
        return nparents + 1

    # -- batched layout --------------------------------------------------------------
    def used_entries(self, buffers, nparents):
        out = super().used_entries(buffers, nparents)
        out["crd"] = out["crd"][:self.segments_end(out["pos"])]
        return out

    def segments_end(self, pos) -> int:
        """One past the last position any segment uses."""
        return int(pos[-1]) if len(pos) else 0

    def child_starts(self, extent, pos, starts):
        return np.asarray(pos, dtype=np.int64)[starts]

    # -- write hooks: append in order; pos[p + 1] holds the count after p's last child ------
    def insert(self, w, p, c):
        n = ir.Var(w.count)
        body = [ir.If(w.emit, tuple(self.append_stores(w, p, c))), ir.Assign(w.count, ir.Const(1), "+")]
        return unique_append(w, self.unique, p, c, body), ir.sub(n, 1)

    def append_stores(self, w, p, c) -> list:
        n = ir.Var(w.count)
        if w.root:  # one parent: finalize sets pos[1] (chunks written in parallel all share it)
            return [store(w.crd, n, c)]
        return [store(w.crd, n, c), store(w.pos, ir.add(p, 1), ir.add(n, 1))]

    def write_lengths(self, nparents, count):
        return {"pos": self.pos_length(nparents), "crd": count}

    def workspace_insert(self, w, p, c):
        """Count / collect a coordinate the first time ``p`` meets it (``work`` holds the last parent
        per coordinate); in the last pass, sort each parent's segment as it starts and keep every
        coordinate's position in ``work``. Segments come from the read hook, so loose pairs work."""
        slot = ir.Index(ir.sub(c, w.lo))
        first = ir.Bin("!=", ir.Load(w.work, (slot,)), p)
        collect = (ir.Store(w.work, (slot,), p),
                   ir.If(w.emit, tuple(self.append_stores(w, p, c)) + (ir.Assign(w.last_parent, p),)),
                   ir.Assign(w.count, ir.Const(1), "+"))
        start, stop = self.segment(w.access, p, None)
        place = (ir.Assign(w.last_parent, p), sort_segment(w, start, stop),
                 ir.For(w.scratch, start, stop,
                        (ir.Store(w.work, (ir.Index(ir.sub(as_intp(ir.load(w.crd, subscript(ir.Var(w.scratch)))),
                                                          w.lo)),), ir.Var(w.scratch)),)))
        code = ir.If(w.last_pass, (ir.If(ir.Bin("!=", ir.Var(w.last_parent), p), place),),
                     (ir.If(first, collect),))
        return [code], ir.Load(w.work, (slot,))

    def finalize(self, buffers, nparents, count):
        """Parents without children: their ``pos[p + 1]`` takes the count before them; the last
        parent's end is the level's count (a root level's only ``pos`` entry the kernel leaves)."""
        pos = buffers["pos"]
        np.maximum.accumulate(pos, out=pos)
        if len(pos) > nparents:
            pos[nparents] = count
        return buffers

    # -- storage hooks ----------------------------------------------------------
    def positions(self, nparents, extent, buffers):
        return pos_end(buffers, nparents, self.pos_length(nparents))

    def unpack(self, nparents, extent, lo, buffers):
        lo_b, hi_b = self.bounds(buffers["pos"], nparents)
        crd = np.asarray(buffers["crd"], dtype=np.int64)
        return segment_parents(lo_b, hi_b, len(crd)), crd

    def pack(self, seg):
        new = seg.new_positions()
        if self.unique and len(seg.group) > 1:
            q = seg.repeated([seg.parent, seg.crd], new)
            if q is not None:
                raise StorageError(f"{seg.where}: coordinate {seg.crd[q]} repeats under one parent, but the "
                                   f"level is unique and its singleton children need one position per "
                                   f"coordinate tuple (use compressed(nonunique))")
        crd = seg.crd[new]
        counts = np.bincount(seg.parent[new], minlength=seg.nparents)
        return Packed({"pos": self.make_pos(counts), "crd": crd}, np.cumsum(new) - 1, len(crd))

    def check_buffers(self, nparents, extent, lo, buffers):
        crd = buffers["crd"]
        lo_b, hi_b = self._segments(nparents, buffers)
        parent = segment_parents(lo_b, hi_b, len(crd))
        used = parent >= 0
        check_range("crd", np.where(used, crd, lo), lo, extent)
        check_segments(np.asarray(crd)[used], parent[used], self.ordered, self.unique)

    def check_safe(self, nparents, extent, lo, buffers):
        """Positions and coordinates in bounds, without sorting or unpacking: one pass over
        ``pos`` and a min / max over the coordinates the segments cover."""
        crd = buffers["crd"]
        lo_b, hi_b = self._segments(nparents, buffers)
        if len(lo_b) and (len(lo_b) < 2 or (lo_b[1:] == hi_b[:-1]).all()):    # segments back to back
            check_range("crd", crd[lo_b[0]:hi_b[-1]], lo, extent, first=int(lo_b[0]))
        elif len(lo_b):
            parent = segment_parents(lo_b, hi_b, len(crd))
            check_range("crd", np.where(parent >= 0, crd, lo), lo, extent)

    def _segments(self, nparents, buffers) -> tuple[np.ndarray, np.ndarray]:
        """Each parent's ``[lo, hi)`` in crd (int64), after checking pos's length and bounds."""
        pos = buffers["pos"]
        if len(pos) != self.pos_length(nparents):
            raise StorageError(f"pos has {len(pos)} entries, expected {self.pos_length(nparents)} "
                               f"for {nparents} parent positions")
        lo_b, hi_b = (np.asarray(b, dtype=np.int64) for b in self.bounds(pos, nparents))
        self.check_bounds(lo_b, hi_b, len(buffers["crd"]))
        return lo_b, hi_b

    def check_bounds(self, lo: np.ndarray, hi: np.ndarray, ncrd: int) -> None:
        if len(lo) and lo[0] != 0:
            raise StorageError(f"pos[0] = {lo[0]}, expected 0")
        step = np.diff(np.concatenate([lo[:1], hi]))
        if (step < 0).any():
            q = int(np.argmax(step < 0)) + 1
            raise StorageError(f"pos[{q}] = {hi[q - 1]} is smaller than pos[{q - 1}] (positions must not decrease)")
        if len(hi) and hi[-1] > ncrd:
            raise StorageError(f"pos[{len(hi)}] = {hi[-1]} exceeds the {ncrd} entries of crd")
