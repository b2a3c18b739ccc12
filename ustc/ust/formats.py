"""The format objects of nvmath-python's UST, spelled as nvmath-python spells them.

``Dimension(dimension_name="i")``, level expressions built with ``+ - // %``,
``LevelFormat`` / ``LevelProperty`` as integer enums and
``TensorFormat(dimensions, {expression: level}, name=...)`` whose ``levels``
is the dictionary it was given. Each ``TensorFormat`` holds the equivalent
:class:`ustc.TensorFormat` (``.ustc``), which does the validation and every
computation; a format ustc rejects raises :class:`FormatTypeError`, a
``TypeError`` as in nvmath-python and a :class:`ustc.FormatError` as in ustc.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import IntEnum

from .. import format as _f
from ..errors import FormatError
from ..format.levels import PACKED

__all__ = ["is_ordered", "is_unique", "Dimension", "LevelExpr", "LevelFormat", "LevelProperty", "TensorFormat",
           "FormatTypeError"]


class FormatTypeError(FormatError, TypeError):
    """A format ustc cannot accept (nvmath-python raises ``TypeError`` for these)."""


class _Enum(IntEnum):
    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}>"


class LevelFormat(_Enum):
    """Level formats with nvmath-python's numbering; ``LOOSE_COMPRESSED`` is ustc's own."""

    DENSE = 0
    BATCH = 1
    COMPRESSED = 2
    SINGLETON = 3
    RANGE = 4
    DELTA = 5
    STRUCTURED = 6
    LOOSE_COMPRESSED = 7


class LevelProperty(_Enum):
    """Level properties with nvmath-python's numbering. ``UNIQUE`` and ``ORDERED`` are the
    defaults and only spell them out; ``NONORDERED`` (ustc's word) is ``UNORDERED``."""

    UNIQUE = 0
    NONUNIQUE = 1
    ORDERED = 2
    UNORDERED = 3
    NONORDERED = 3
    SOA = 4


_OPPOSITE = {LevelProperty.UNIQUE: LevelProperty.NONUNIQUE, LevelProperty.NONUNIQUE: LevelProperty.UNIQUE,
             LevelProperty.ORDERED: LevelProperty.UNORDERED, LevelProperty.UNORDERED: LevelProperty.ORDERED}
_TO_USTC_PROPERTY = {LevelProperty.NONUNIQUE: _f.LevelProperty.NONUNIQUE,
                     LevelProperty.UNORDERED: _f.LevelProperty.NONORDERED, LevelProperty.SOA: _f.LevelProperty.SOA}
_FROM_USTC_PROPERTY = {v: k for k, v in _TO_USTC_PROPERTY.items()}


def _properties(prop) -> tuple:
    return tuple(prop) if isinstance(prop, Sequence) and not isinstance(prop, str) else (prop,)


def is_ordered(prop) -> bool:
    """False only when ``prop`` (a property, a sequence of them, or None) says UNORDERED."""
    return LevelProperty.UNORDERED not in _properties(prop)


def is_unique(prop) -> bool:
    """False only when ``prop`` (a property, a sequence of them, or None) says NONUNIQUE."""
    return LevelProperty.NONUNIQUE not in _properties(prop)


# -- level expressions ------------------------------------------------------------------------
class _Operand:
    __slots__ = ()

    def __add__(self, other):
        return LevelExpr(expression1=self, operator="+", expression2=other)

    def __sub__(self, other):
        return LevelExpr(expression1=self, operator="-", expression2=other)

    def __floordiv__(self, other):
        return LevelExpr(expression1=self, operator="//", expression2=other)

    def __mod__(self, other):
        return LevelExpr(expression1=self, operator="%", expression2=other)


class Dimension(_Operand):
    """A named tensor dimension: ``Dimension(dimension_name="i")``. Equal names are equal."""

    __slots__ = ("dimension_name",)

    def __init__(self, *, dimension_name):
        if not isinstance(dimension_name, str):
            raise TypeError(f"a dimension name must be a str, not {type(dimension_name).__name__}")
        self.dimension_name = dimension_name

    def __repr__(self) -> str:
        return self.dimension_name

    def __eq__(self, other) -> bool:
        return isinstance(other, Dimension) and other.dimension_name == self.dimension_name

    def __hash__(self) -> int:
        return hash(("Dimension", self.dimension_name))

    def to_ustc(self) -> _f.Dimension:
        return _f.Dimension(self.dimension_name)


_OPERATORS = {"+": "__add__", "-": "__sub__", "//": "__floordiv__", "%": "__mod__", "*": "__rmul__"}


class LevelExpr(_Operand):
    """``expression1 operator expression2``, e.g. ``i // 2`` or ``j - i``; ``operator`` is one of
    ``"+"``, ``"-"``, ``"//"``, ``"%"`` (or an object whose repr is one of them)."""

    __slots__ = ("expression1", "operator", "expression2")

    def __init__(self, *, expression1, operator, expression2):
        op = operator if isinstance(operator, str) else repr(operator)
        if op not in _OPERATORS:
            raise TypeError(f"unknown level expression operator {operator!r}; expected one of + - // %")
        if not isinstance(expression1, (Dimension, LevelExpr, int)):
            raise TypeError(f"a level expression operand must be a Dimension or LevelExpr, not {expression1!r}")
        if not isinstance(expression2, (Dimension, LevelExpr, int)):
            raise TypeError(f"a level expression operand must be a Dimension, LevelExpr or int, not {expression2!r}")
        self.expression1, self.operator, self.expression2 = expression1, op, expression2

    def __repr__(self) -> str:
        return f"({self.expression1!r} {self.operator} {self.expression2!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, LevelExpr) and (other.expression1, other.operator, other.expression2) == (
            self.expression1, self.operator, self.expression2)

    def __hash__(self) -> int:
        return hash(("LevelExpr", self.expression1, self.operator, self.expression2))

    def to_ustc(self) -> _f.Expr:
        left, right = (_to_ustc_expr(e) for e in (self.expression1, self.expression2))
        if self.operator == "*":
            return _f.Mul(int(self.expression1), right)
        return getattr(left, _OPERATORS[self.operator])(right)


def _to_ustc_expr(e):
    return e if isinstance(e, int) else e.to_ustc()


def _from_ustc_expr(e, dims: dict):
    """The compat expression of a ustc expression; ``dims`` maps names to compat Dimensions."""
    if isinstance(e, _f.Dimension):
        return dims[e.name]
    if isinstance(e, _f.Const):
        return e.value
    for cls, op in ((_f.Add, "+"), (_f.Sub, "-")):
        if isinstance(e, cls):
            return LevelExpr(expression1=_from_ustc_expr(e.left, dims), operator=op,
                             expression2=_from_ustc_expr(e.right, dims))
    for cls, op in ((_f.FloorDiv, "//"), (_f.Mod, "%")):
        if isinstance(e, cls):
            return LevelExpr(expression1=_from_ustc_expr(e.operand, dims), operator=op, expression2=e.constant)
    if isinstance(e, _f.Mul):
        return LevelExpr(expression1=e.factor, operator="*", expression2=_from_ustc_expr(e.operand, dims))
    raise FormatTypeError(f"level expression {e} has no nvmath-python spelling")


# -- levels -------------------------------------------------------------------------------------
def _to_ustc_level(key, value, k: int):
    """The ustc level spec of one nvmath-style ``key: value`` entry."""
    head, rest = (value[0], value[1:]) if isinstance(value, tuple) and value else (value, ())
    try:
        fmt = _f.LevelFormat[LevelFormat(head).name] if not isinstance(head, _f.LevelFormat) else head
    except (ValueError, KeyError):
        raise FormatTypeError(f"level {k} ({key!r}): {head!r} is not a LevelFormat") from None
    props, params = [], []
    for item in rest:
        if isinstance(item, (LevelProperty, _f.LevelProperty)) or (isinstance(item, Sequence)
                                                                    and not isinstance(item, str)):
            props.extend(_properties(item))
        elif item == PACKED or (isinstance(item, int) and not isinstance(item, bool)):
            params.append(item)
        else:
            raise FormatTypeError(f"level {k} ({key!r}): {item!r} is neither a level property nor a parameter")
    clash = sorted({p.name for p in props if isinstance(p, LevelProperty) and _OPPOSITE.get(p) in props})
    if clash:
        raise FormatTypeError(f"level {k} ({key!r}): contradictory properties {', '.join(clash)}")
    ustc_props = []
    for p in props:
        p = p if isinstance(p, _f.LevelProperty) else _TO_USTC_PROPERTY.get(LevelProperty(p))
        if p is not None and p not in ustc_props:
            ustc_props.append(p)
    if fmt == _f.LevelFormat.STRUCTURED and len(params) == 1:  # nvmath: (STRUCTURED, n) on a "j % m" level
        if not (isinstance(key, LevelExpr) and key.operator == "%" and isinstance(key.expression2, int)):
            raise FormatTypeError(f"level {k} ({key!r}): a structured level must address 'dimension % m'")
        params.append(key.expression2)
    return (fmt, *params, *ustc_props) if params or ustc_props else fmt


def _from_ustc_level(lv_type):
    """The nvmath-style value of a ustc level type."""
    fmt = LevelFormat[lv_type.format.name] if lv_type.format.name in LevelFormat.__members__ else lv_type.format
    params = []
    if fmt == LevelFormat.DELTA:
        params = [lv_type.bits] + ([PACKED] if lv_type.packed else [])
    elif fmt == LevelFormat.STRUCTURED:
        params = [lv_type.n]
    props = [_FROM_USTC_PROPERTY[p] for p in lv_type.properties]
    if not params and not props:
        return fmt
    if params:
        return (fmt, *params, *props)
    return (fmt, props[0]) if len(props) == 1 else (fmt, tuple(props))


# -- uniqueness of singleton chains ---------------------------------------------------------------
# nvmath-python calls a level unique when a coordinate has no duplicate among its siblings, so a
# singleton level (one child per parent position) is unique unless spelled otherwise, and its
# COO of rank 3 is ``compressed(nonunique), singleton, singleton``. ustc (as MLIR) calls a level
# unique when the coordinate *prefix* through it never repeats, which a COO's middle singletons
# do not promise. The translation: a singleton followed by another singleton under a nonunique
# parent is nonunique in ustc unless UNIQUE is spelled out, and prints without a property.
def _head(value):
    return value[0] if isinstance(value, tuple) and value else value


def _is_singleton(value) -> bool:
    return _head(value) in (LevelFormat.SINGLETON, _f.LevelFormat.SINGLETON)


def _props_of(value) -> list:
    props = []
    for item in value[1:] if isinstance(value, tuple) else ():
        if isinstance(item, (LevelProperty, _f.LevelProperty)) or (isinstance(item, Sequence)
                                                                    and not isinstance(item, str)):
            props.extend(_properties(item))
    return props


def _spelled_uniqueness(value) -> bool:
    """Whether an nvmath-style level value names UNIQUE or NONUNIQUE itself."""
    return any(p in (LevelProperty.UNIQUE, LevelProperty.NONUNIQUE, _f.LevelProperty.NONUNIQUE)
               for p in _props_of(value))


def _is_middle(k: int, singles: list, nonunique: list) -> bool:
    """Level ``k`` is a singleton followed by a singleton, under a nonunique parent."""
    return 0 < k < len(singles) - 1 and nonunique[k - 1] and singles[k] and singles[k + 1]


def _prefix_uniqueness(values: list, spec: list) -> list:
    """``spec`` (ustc level specs of nvmath-style ``values``) with the middle singletons of a
    chain under a nonunique parent made nonunique, unless the value spells its uniqueness."""
    spec = list(spec)
    singles = [_is_singleton(v) for v in values]
    nonunique = []
    for k, (expr, lv) in enumerate(spec):
        if _is_middle(k, singles, nonunique) and not _spelled_uniqueness(values[k]):
            lv = (*lv, _f.LevelProperty.NONUNIQUE) if isinstance(lv, tuple) else (lv, _f.LevelProperty.NONUNIQUE)
            spec[k] = (expr, lv)
        nonunique.append(isinstance(lv, tuple) and _f.LevelProperty.NONUNIQUE in lv)
    return spec


def _nvmath_uniqueness(fmt: _f.TensorFormat, values: list) -> list:
    """The nvmath-style ``values`` of ``fmt``'s levels, middle singletons spelled as nvmath-python
    spells them: no property where ustc says nonunique, an explicit UNIQUE where it says unique."""
    nonunique = [_f.LevelProperty.NONUNIQUE in lv.type.properties for lv in fmt.levels]
    singles = [lv.type.format == _f.LevelFormat.SINGLETON for lv in fmt.levels]
    out = []
    for k, (value, nonu) in enumerate(zip(values, nonunique)):
        if _is_middle(k, singles, nonunique):
            others = [p for p in _props_of(value) if p != LevelProperty.NONUNIQUE]
            others = others if nonu else [LevelProperty.UNIQUE, *others]
            value = _head(value) if not others else (_head(value), others[0]) if len(others) == 1 else (
                _head(value), tuple(others))
        out.append(value)
    return out


# -- TensorFormat -------------------------------------------------------------------------------
class TensorFormat:
    """``TensorFormat(dimensions, {expression: level}, name=None)`` as in nvmath-python.

    ``levels`` values are a ``LevelFormat`` or a tuple of one and its properties or parameters
    (``(LevelFormat.COMPRESSED, LevelProperty.NONUNIQUE)``, ``(LevelFormat.DELTA, 2)``).
    Formats compare equal when they store tensors the same way, whatever their names
    (also to the equivalent :class:`ustc.TensorFormat`).
    """

    __slots__ = ("_dimensions", "_levels", "_name", "_ustc")

    def __init__(self, dimensions, levels, *, name=None):
        if isinstance(dimensions, (str, bytes)) or not isinstance(dimensions, Sequence) or not all(
                isinstance(d, Dimension) for d in dimensions):
            raise FormatTypeError(f"dimensions must be a sequence of Dimension objects, got {dimensions!r}")
        if not isinstance(levels, Mapping):
            raise FormatTypeError(f"levels must be a dict from level expressions to level formats, got {levels!r}")
        if name is not None and not isinstance(name, str):
            raise FormatTypeError(f"a format name must be a str, got {name!r}")
        if len(set(dimensions)) != len(dimensions):
            raise FormatTypeError(f"dimensions {list(dimensions)!r} repeat a name")
        for key in levels:
            if not isinstance(key, (Dimension, LevelExpr)):
                raise FormatTypeError(f"level expression {key!r} must be a Dimension or LevelExpr")
        spec = [(_to_ustc_expr(key), _to_ustc_level(key, value, k)) for k, (key, value) in enumerate(levels.items())]
        spec = _prefix_uniqueness(list(levels.values()), spec)
        try:
            fmt = _f.TensorFormat([d.to_ustc() for d in dimensions], spec, name=name)
        except TypeError as exc:
            raise FormatTypeError(str(exc)) from None
        except FormatError as exc:
            raise FormatTypeError(str(exc)) from exc
        self._dimensions, self._levels, self._name, self._ustc = dimensions, levels, name, fmt

    @classmethod
    def from_ustc(cls, fmt: _f.TensorFormat, name: str | None = None) -> "TensorFormat":
        """The nvmath-style view of a :class:`ustc.TensorFormat` (dimensions keep their names)."""
        dims = {d.name: Dimension(dimension_name=d.name) for d in fmt.dims}
        self = object.__new__(cls)
        self._dimensions = list(dims.values())
        values = _nvmath_uniqueness(fmt, [_from_ustc_level(lv.type) for lv in fmt.levels])
        self._levels = {_from_ustc_expr(lv.expr, dims): value for lv, value in zip(fmt.levels, values)}
        self._name = name or fmt.name
        self._ustc = fmt
        return self

    # -- what nvmath-python's TensorFormat tells ---------------------------------------------
    @property
    def name(self) -> str:
        """The name given, else the name of the ustc format it equals, else the level text."""
        return self._name or self._ustc.name or repr(self)

    @property
    def dimensions(self):
        return self._dimensions

    @property
    def levels(self) -> dict:
        return self._levels

    @property
    def num_dimensions(self) -> int:
        return self._ustc.num_dimensions

    @property
    def num_levels(self) -> int:
        return self._ustc.num_levels

    @property
    def is_identity(self) -> bool:
        return self._ustc.is_identity

    @property
    def is_ordered(self) -> bool:
        return self._ustc.is_ordered

    @property
    def is_unique(self) -> bool:
        return self._ustc.is_unique

    def dim2lvl(self, dim_indices, as_size: bool = False) -> list[int]:
        return self._ustc.dim2lvl(dim_indices, as_size)

    def lvl2dim(self, lvl_indices) -> list[int]:
        return self._ustc.lvl2dim(lvl_indices)

    # -- ustc ------------------------------------------------------------------------------------
    @property
    def ustc(self) -> _f.TensorFormat:
        """The equivalent :class:`ustc.TensorFormat`."""
        return self._ustc

    def __eq__(self, other) -> bool:
        if isinstance(other, TensorFormat):
            return self._ustc == other._ustc
        if isinstance(other, _f.TensorFormat):
            return self._ustc == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._ustc)

    def __repr__(self) -> str:
        levels = ", ".join(f"{key!r}: {_value_repr(value)}" for key, value in self._levels.items())
        return f"{list(self._dimensions)!r} -> ({levels})"


def _value_repr(value) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(_value_repr(v) for v in value) + ")"
    return repr(value)


def as_ustc_format(fmt) -> _f.TensorFormat:
    """A :class:`ustc.TensorFormat` for a compat format, a ustc format or DSL text."""
    if isinstance(fmt, TensorFormat):
        return fmt.ustc
    if isinstance(fmt, _f.TensorFormat):
        return fmt
    if isinstance(fmt, str):
        return _f.parse(fmt)
    raise FormatTypeError(f"expected a TensorFormat, got {type(fmt).__name__}")
