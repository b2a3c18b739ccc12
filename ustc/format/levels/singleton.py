"""``singleton``: one coordinate per parent position, as in COO's trailing levels.

Buffers: ``crd``. Children of parent position ``p``: exactly ``p``, with
coordinate ``crd[p]``. A singleton follows a compressed, loose_compressed or
singleton level, and only singletons follow it. ``soa`` says the coordinates
are kept one array per level (ustc always does; the property is accepted and
printed for MLIR compatibility).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import FormatSemanticError
from .base import LevelProperty, LevelType

_PARENTS = ("compressed", "loose_compressed", "singleton")


@dataclass(frozen=True)
class Singleton(LevelType):
    keyword = "singleton"
    buffers = ("crd",)
    allowed_properties = frozenset(LevelProperty)

    def check(self, levels, k):
        if k == 0 or levels[k - 1].type.keyword not in _PARENTS:
            raise FormatSemanticError(
                "a singleton level must follow a compressed, loose_compressed or singleton level")
        later = [level for level in levels[k + 1:] if level.type.keyword != self.keyword]
        if later:
            raise FormatSemanticError(
                f"only singleton levels may follow a singleton level, not '{later[0].type.keyword}'")
