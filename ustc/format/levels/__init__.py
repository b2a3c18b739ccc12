"""Level types: one module per type (``dense.py``, ``compressed.py``, ...), the registry
(``registry.py``: ``LEVEL_TYPES``, ``LevelFormat``, ``register``) and the protocol (``base.py``)."""

from __future__ import annotations

from .base import PACKED, LevelProperty, LevelType
from .batch import Batch
from .compressed import Compressed
from .delta import Delta
from .dense import Dense
from .loose_compressed import LooseCompressed
from .range import Range
from .registry import (BY_KEYWORD, LEVEL_TYPES, LevelFormat, extension_sources, generation, register,
                       unregister)
from .singleton import Singleton
from .structured import Structured

__all__ = ["LEVEL_TYPES", "BY_KEYWORD", "LevelFormat", "LevelProperty", "LevelType", "PACKED",
           "register", "unregister", "generation", "extension_sources",
           "Batch", "Compressed", "Delta", "Dense", "LooseCompressed", "Range", "Singleton", "Structured"]
