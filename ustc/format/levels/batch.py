"""``batch``: a dense level whose positions are not linearised.

Buffers: none. Every later buffer gains a leading batch axis and restarts at 0
in each batch, so batch ``b``'s ``pos``/``crd``/``values`` are slices ``[b]``.
Batch levels come first.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatSemanticError
from ..expr import Dimension
from .base import LevelType, dense_pack, dense_unpack


@dataclass(frozen=True)
class Batch(LevelType):
    keyword = "batch"
    locate = True
    append = True
    batched = True

    def check(self, levels, k):
        if any(not level.type.batched for level in levels[:k]):
            raise FormatSemanticError("batch levels must come before every other level")
        if not isinstance(levels[k].expr, Dimension):
            raise FormatSemanticError("a batch level's expression must be a single dimension")
        if any(levels[k].expr.name in level.expr.variables() for level in levels[k + 1:]):
            raise FormatSemanticError(f"batch dimension '{levels[k].expr}' may not be used by a later level")

    def unpack(self, nparents, extent, lo, buffers):
        return dense_unpack(nparents, extent, lo)

    def pack(self, seg):
        return dense_pack(seg)
