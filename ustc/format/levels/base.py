"""The level-type protocol every level module implements.

A *level type* says how one level of a tensor's storage is kept: which
buffers it owns and which children a parent position has (design §2). Each
level type is a frozen dataclass in its own module; the registry in
``levels/__init__.py`` lists them, and ``LevelFormat`` is derived from it.

The protocol, for a level type class ``T``:

``T.keyword``
    the DSL keyword (``"compressed"``); also the ``LevelFormat`` value.
``T.buffers``
    names of the buffers the level owns, a subset of ``("pos", "crd")``.
``T.from_syntax(groups)`` / ``T.from_spec(args)``
    build from the DSL's argument groups (``delta(4, packed)(...)``) or from
    the object API's tuple tail (``(LevelFormat.DELTA, 4)``).
``t.text()`` / ``t.ust_repr()``
    canonical DSL text / nvmath-style repr of the level type.
``t.ordered`` / ``t.unique``
    whether the coordinates of each segment are sorted / free of repeats.
``t.check(levels, k)``
    rules that involve other levels; raises :class:`FormatSemanticError`.
``t.resolve(expr)``
    the level type completed from its level expression (``structured(n)``
    takes ``m`` from ``d mod m``); most types return ``self``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Sequence

from ...errors import FormatSemanticError

if TYPE_CHECKING:  # pragma: no cover
    from ..ir import Level

# One argument group of the DSL: the bracket that opened it and its items.
Group = tuple[str, tuple["int | str", ...]]


class _UstEnum(enum.Enum):
    """An enum whose repr is ``<Class.MEMBER>``, as nvmath-python prints it."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}>"

    def __str__(self) -> str:
        return self.value


class LevelProperty(_UstEnum):
    """Level properties, in canonical order."""

    NONUNIQUE = "nonunique"
    NONORDERED = "nonordered"
    SOA = "soa"


PACKED = "packed"  # the delta(b, packed) flag


@dataclass(frozen=True)
class LevelType:
    """Base of all level types; see the module docstring for the protocol."""

    keyword: ClassVar[str] = ""
    buffers: ClassVar[tuple[str, ...]] = ()
    allowed_properties: ClassVar[frozenset[LevelProperty]] = frozenset()

    properties: tuple[LevelProperty, ...] = ()

    def __post_init__(self):
        props = tuple(self.properties)
        for prop in props:
            if not isinstance(prop, LevelProperty):
                raise FormatSemanticError(f"{prop!r} is not a level property")
            if prop not in self.allowed_properties:
                allowed = ", ".join(p.value for p in LevelProperty if p in self.allowed_properties)
                raise FormatSemanticError(
                    f"'{self.keyword}' levels take no property '{prop.value}'"
                    + (f" (allowed: {allowed})" if allowed else " (they take no properties)"))
        if len(set(props)) != len(props):
            raise FormatSemanticError(f"a property is repeated on '{self.keyword}'")
        object.__setattr__(self, "properties", tuple(p for p in LevelProperty if p in props))

    # -- construction ----------------------------------------------------
    @classmethod
    def from_syntax(cls, groups: Sequence[Group]) -> "LevelType":
        """Build from the DSL: by default at most one ``(property, ...)`` group."""
        return cls(properties=cls._properties_from(groups))

    @classmethod
    def from_spec(cls, args: Sequence[object]) -> "LevelType":
        """Build from the object API: by default only LevelProperty members."""
        if any(not isinstance(a, LevelProperty) for a in args):
            raise FormatSemanticError(f"'{cls.keyword}' takes only level properties, got {tuple(args)!r}")
        return cls(properties=tuple(args))

    @classmethod
    def _properties_from(cls, groups: Sequence[Group]) -> tuple[LevelProperty, ...]:
        if not groups:
            return ()
        if len(groups) > 1 or groups[0][0] != "(":
            raise FormatSemanticError(f"'{cls.keyword}' takes one parenthesised property list")
        return tuple(_property(item, cls.keyword) for item in groups[0][1])

    # -- description ------------------------------------------------------
    @property
    def format(self):
        from . import LevelFormat

        return LevelFormat(self.keyword)

    @property
    def ordered(self) -> bool:
        return LevelProperty.NONORDERED not in self.properties

    @property
    def unique(self) -> bool:
        return LevelProperty.NONUNIQUE not in self.properties

    def params_text(self) -> str:
        """Text between the keyword and the properties, e.g. ``(4, packed)``."""
        return ""

    def params_repr(self) -> tuple[str, ...]:
        """Parameters as they appear in the nvmath-style repr tuple."""
        return ()

    def text(self) -> str:
        props = ", ".join(p.value for p in self.properties)
        return self.keyword + self.params_text() + (f"({props})" if props else "")

    def ust_repr(self) -> str:
        items = [repr(self.format), *self.params_repr(), *(repr(p) for p in self.properties)]
        return items[0] if len(items) == 1 else "(" + ", ".join(items) + ")"

    def __str__(self) -> str:
        return self.text()

    # -- rules --------------------------------------------------------------
    def check(self, levels: Sequence["Level"], k: int) -> None:
        """Rules that involve other levels; the default has none."""

    def resolve(self, expr) -> "LevelType":
        return self


def _property(item: "int | str", keyword: str) -> LevelProperty:
    try:
        return LevelProperty(item)
    except ValueError:
        names = ", ".join(p.value for p in LevelProperty)
        raise FormatSemanticError(f"unknown property {item!r} on '{keyword}' (known: {names})") from None


def int_args(keyword: str, items: Sequence["int | str"], count: int, what: str) -> tuple[int, ...]:
    """Exactly ``count`` integer items, else a semantic error naming ``what``."""
    if len(items) != count or any(not isinstance(x, int) or isinstance(x, bool) for x in items):
        raise FormatSemanticError(f"'{keyword}' takes {what}, got {tuple(items)!r}")
    return tuple(items)


def split_spec(args: Sequence[object]) -> tuple[list[object], list[LevelProperty]]:
    """Split an object-API tuple tail into parameters and properties."""
    params = [a for a in args if not isinstance(a, LevelProperty)]
    props = [a for a in args if isinstance(a, LevelProperty)]
    return params, props
