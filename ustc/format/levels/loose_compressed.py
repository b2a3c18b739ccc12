"""``loose_compressed``: compressed with a (lo, hi) pair per parent.

Buffers: ``pos`` holding 2 entries per parent and ``crd``. Children of parent
position ``p``: ``[pos[2p], pos[2p + 1])``. Segments need not be adjacent, so
entries can be appended or removed per segment without moving the others;
positions outside every segment are unused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...codegen import loopir as ir
from ...errors import StorageError
from .base import store
from .compressed import Compressed


@dataclass(frozen=True)
class LooseCompressed(Compressed):
    keyword = "loose_compressed"

    def bounds(self, pos, nparents):
        return pos[0:2 * nparents:2], pos[1:2 * nparents:2]

    def make_pos(self, counts):
        ends = np.cumsum(counts, dtype=np.int64)
        pos = np.empty(2 * len(counts), dtype=np.int64)
        pos[0::2], pos[1::2] = ends - counts, ends
        return pos

    def pos_length(self, nparents):
        return 2 * nparents

    def segment(self, acc, p, run_end):
        pos = acc.pos
        return ir.load(pos, ir.mul(2, p)), ir.load(pos, ir.add(ir.mul(2, p), 1))

    # -- write hooks: (start, end) per parent, segments back to back -------------------------
    def append_stores(self, w, p, c):
        n = ir.Var(w.count)
        if w.root:  # one parent: finalize sets its pair
            return [store(w.crd, n, c)]
        first = ir.If(ir.Bin("!=", ir.Var(w.last_parent), p), (store(w.pos, ir.mul(2, p), n),))
        return [store(w.crd, n, c), first, store(w.pos, ir.add(ir.mul(2, p), 1), ir.add(n, 1))]

    def finalize(self, buffers, nparents, count):
        pos = buffers["pos"]
        if nparents == 1:  # one segment: [0, count) (a root level's pair, which the kernel leaves)
            pos[0], pos[1] = 0, count
            return buffers
        buffers["pos"] = self.make_pos(pos[1::2] - pos[0::2]).astype(pos.dtype, copy=False)
        return buffers

    # -- batched layout --------------------------------------------------------------
    def segments_end(self, pos):
        return int(pos[1::2].max(initial=0))

    def child_starts(self, extent, pos, starts):
        """Segments ustc packs are back to back: parent p starts at pos[2p]."""
        pos = np.asarray(pos, dtype=np.int64)
        return np.append(pos[0::2], pos[-1] if len(pos) else 0)[starts]

    def shift_pos(self, pos, offset, last):
        return pos + offset

    def batch_pos(self, pos, starts, b, base):
        return pos[2 * starts[b]:2 * starts[b + 1]] - base

    def positions(self, nparents, extent, buffers):
        if len(buffers["pos"]) != 2 * nparents:
            raise StorageError(f"pos has {len(buffers['pos'])} entries, expected 2 x {nparents} parents")
        return len(buffers["crd"])

    def check_bounds(self, lo, hi, ncrd):
        bad = (lo < 0) | (hi < lo) | (hi > ncrd)
        if bad.any():
            p = int(np.argmax(bad))
            raise StorageError(f"pos[{2 * p}:{2 * p + 2}] = [{lo[p]}, {hi[p]}) is not a segment of the "
                               f"{ncrd} entries of crd")
        order = np.argsort(lo, kind="stable")
        nonempty = order[hi[order] > lo[order]]
        overlap = hi[nonempty][:-1] > lo[nonempty][1:]
        if overlap.any():
            p = int(nonempty[int(np.argmax(overlap)) + 1])
            raise StorageError(f"segment pos[{2 * p}:{2 * p + 2}] overlaps another segment")
