"""``loose_compressed``: compressed with a (lo, hi) pair per parent.

Buffers: ``pos`` holding 2 entries per parent and ``crd``. Children of parent
position ``p``: ``[pos[2p], pos[2p + 1])``. Segments need not be adjacent, so
entries can be appended or removed per segment without moving the others.
"""

from __future__ import annotations

from dataclasses import dataclass

from .compressed import Compressed


@dataclass(frozen=True)
class LooseCompressed(Compressed):
    keyword = "loose_compressed"
