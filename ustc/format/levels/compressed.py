"""``compressed``: the stored coordinates of each segment, as in CSR's column level.

Buffers: ``pos`` (parents + 1 entries) and ``crd``. Children of parent
position ``p``: ``[pos[p], pos[p + 1])``, with coordinates ``crd[pos[p]:pos[p + 1]]``.
Properties: ``nonunique`` (a coordinate may repeat in a segment, as in COO's
first level) and ``nonordered`` (coordinates of a segment are not sorted).
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import LevelProperty, LevelType


@dataclass(frozen=True)
class Compressed(LevelType):
    keyword = "compressed"
    buffers = ("pos", "crd")
    allowed_properties = frozenset({LevelProperty.NONUNIQUE, LevelProperty.NONORDERED})
