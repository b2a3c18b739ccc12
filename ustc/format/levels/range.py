"""``range``: every coordinate of one dimension, completing a ``d - e`` / ``d + e`` level.

Buffers: none. In DIA ``(i, j) -> (j - i : compressed, i : range)`` level 1
walks ``i`` over its whole extent; the other dimension is recovered from the
earlier level (``j = (j - i) + i``). Entries that fall outside the tensor are
padding.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatSemanticError
from ..expr import Add, Dimension, Sub
from .base import LevelType, dense_pack, dense_unpack


@dataclass(frozen=True)
class Range(LevelType):
    keyword = "range"
    locate = True
    completes_affine = True

    def check(self, levels, k):
        expr = levels[k].expr
        if not isinstance(expr, Dimension):
            raise FormatSemanticError("a range level's expression must be a single dimension")
        if not any(isinstance(level.expr, (Add, Sub)) and expr.name in level.expr.variables()
                   for level in levels[:k]):
            raise FormatSemanticError(
                f"a range level needs an earlier '{expr.name} - e' or '{expr.name} + e' level")

    def unpack(self, nparents, extent, lo, buffers):
        return dense_unpack(nparents, extent, lo)

    def pack(self, seg):
        return dense_pack(seg)
