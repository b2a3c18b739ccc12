"""``dense``: every coordinate of the level is stored.

Buffers: none. Children of parent position ``p``: ``p * size + c`` for every
``c`` in ``[0, size)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import LevelType


@dataclass(frozen=True)
class Dense(LevelType):
    keyword = "dense"
