"""``dense``: every coordinate of the level is stored.

Buffers: none. Children of parent position ``p``: ``p * size + c`` for every
``c`` in ``[0, size)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import LevelType, dense_pack, dense_unpack


@dataclass(frozen=True)
class Dense(LevelType):
    keyword = "dense"
    locate = True
    append = True

    def unpack(self, nparents, extent, lo, buffers):
        return dense_unpack(nparents, extent, lo)

    def pack(self, seg):
        return dense_pack(seg)
