"""The registry of level types: one module per type, one line per type here.

``LevelFormat`` is derived from this registry, so adding a level type means
writing its module and adding it to ``LEVEL_TYPES``.
"""

from __future__ import annotations

from .base import PACKED, LevelProperty, LevelType, _UstEnum
from .batch import Batch
from .compressed import Compressed
from .delta import Delta
from .dense import Dense
from .loose_compressed import LooseCompressed
from .range import Range
from .singleton import Singleton
from .structured import Structured

LEVEL_TYPES: tuple[type[LevelType], ...] = (
    Dense,
    Batch,
    Range,
    Compressed,
    LooseCompressed,
    Singleton,
    Delta,
    Structured,
)

LevelFormat = _UstEnum("LevelFormat", [(t.keyword.upper(), t.keyword) for t in LEVEL_TYPES],
                       module=__name__)
LevelFormat.__doc__ = "Level formats of the DSL; each member's value is its DSL keyword."

BY_KEYWORD: dict[str, type[LevelType]] = {t.keyword: t for t in LEVEL_TYPES}

__all__ = ["LEVEL_TYPES", "BY_KEYWORD", "LevelFormat", "LevelProperty", "LevelType", "PACKED",
           "Batch", "Compressed", "Delta", "Dense", "LooseCompressed", "Range", "Singleton", "Structured"]
