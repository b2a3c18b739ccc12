"""The registry of level types: one module per type, one line per type here (``LEVEL_TYPES``).

``LevelFormat`` is derived from this registry, so adding a level type means
writing its module and adding it to ``LEVEL_TYPES``. A level type defined
outside ustc takes one call, :func:`register` (``unregister`` undoes it): the
parser, ``LevelFormat``, the compiler's read and write hooks and the storage
drivers then handle it like the built-in ones.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from pathlib import Path

from ...errors import FormatError
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
_changes = [0]  # registry changes so far: memoised parses are keyed by it


def generation() -> int:
    """How many times the registry changed (a parse cached before a change is stale)."""
    return _changes[0]


def register(cls: type[LevelType]) -> type[LevelType]:
    """Add level type ``cls`` (a :class:`LevelType` subclass with a new ``keyword``) to the
    registry; returns it, so it can decorate the class."""
    if not (isinstance(cls, type) and issubclass(cls, LevelType)) or not cls.keyword.isidentifier():
        raise FormatError(f"{cls!r} is not a LevelType subclass with an identifier keyword")
    if cls.keyword in BY_KEYWORD:
        raise FormatError(f"level type '{cls.keyword}' is already registered ({BY_KEYWORD[cls.keyword].__name__})")
    name = cls.keyword.upper()
    member = object.__new__(LevelFormat)
    member._name_, member._value_, member._sort_order_ = name, cls.keyword, len(LevelFormat._member_names_)
    type.__setattr__(LevelFormat, name, member)
    LevelFormat._member_map_[name] = member
    LevelFormat._value2member_map_[cls.keyword] = member
    LevelFormat._member_names_.append(name)
    BY_KEYWORD[cls.keyword] = cls
    _changes[0] += 1
    return cls


def extension_sources(level_types) -> dict[str, str]:
    """``{keyword: sha256 of its module's source}`` for registered (not built-in) level types
    among ``level_types``: their hooks write kernel code, so kernel cache keys include them."""
    return {type(t).keyword: _source_hash(type(t)) for t in level_types if type(t) not in LEVEL_TYPES}


@functools.lru_cache(maxsize=None)
def _source_hash(cls: type[LevelType]) -> str:
    """sha256 of the module defining ``cls``, read once per process (kernel keys are built at
    every execute)."""
    module = sys.modules.get(cls.__module__)
    path = getattr(module, "__file__", None)
    data = Path(path).read_bytes() if path and Path(path).exists() else cls.__qualname__.encode()
    return hashlib.sha256(data).hexdigest()[:16]


def unregister(cls: type[LevelType]) -> None:
    """Remove a level type :func:`register` added (built-in ones stay)."""
    if cls in LEVEL_TYPES or BY_KEYWORD.get(cls.keyword) is not cls:
        raise FormatError(f"level type '{cls.keyword}' was not added by register()")
    name = cls.keyword.upper()
    del BY_KEYWORD[cls.keyword], LevelFormat._member_map_[name], LevelFormat._value2member_map_[cls.keyword]
    LevelFormat._member_names_.remove(name)
    type.__delattr__(LevelFormat, name)
    _changes[0] += 1
