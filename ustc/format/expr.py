"""Affine index expressions of the format DSL.

A level of a format is addressed by an expression over the tensor's
dimensions, e.g. ``i``, ``i floordiv 2``, ``i mod 2``, ``j - i``. The same
classes describe the inverse map (each dimension as an expression over level
variables ``l0, l1, ...``) and the optional ``d0 = l0 * 2 + l2`` bindings of
the MLIR syntax.

Expressions are frozen, hashable dataclasses. Python operators build them,
so the object API reads like the DSL::

    >>> i, j = Dimension("i"), Dimension("j")
    >>> str(i // 2), str(i % 2), str(j - i), str(3 * j)
    ('i floordiv 2', 'i mod 2', 'j - i', '3 * j')

``evaluate`` works on Python integers and element-wise on NumPy arrays,
so the same expression object maps single coordinates or whole coordinate
arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

# Binding strength used when printing: sums < products < atoms.
_SUM, _PRODUCT, _ATOM = 1, 2, 3


class Expr:
    """Base class of index expressions (see the module docstring)."""

    precedence = _ATOM

    # -- operator sugar -------------------------------------------------
    def __floordiv__(self, divisor: int) -> "FloorDiv":
        return FloorDiv(self, _constant(divisor, "floordiv"))

    __truediv__ = __floordiv__  # the DSL's "/" is floor division by a constant

    def __mod__(self, modulus: int) -> "Mod":
        return Mod(self, _constant(modulus, "mod"))

    def __add__(self, other: "Expr | int") -> "Add":
        return Add(self, as_expr(other))

    def __radd__(self, other: int) -> "Add":
        return Add(as_expr(other), self)

    def __sub__(self, other: "Expr | int") -> "Sub":
        return Sub(self, as_expr(other))

    def __rsub__(self, other: int) -> "Sub":
        return Sub(as_expr(other), self)

    def __mul__(self, factor: int) -> "Mul":
        return Mul(_constant(factor, "*", allow_zero=True), self)

    __rmul__ = __mul__

    # -- protocol -------------------------------------------------------
    def evaluate(self, env: Mapping[str, Any]) -> Any:
        """Value of the expression with each variable name bound by ``env``."""
        raise NotImplementedError

    def variables(self) -> tuple[str, ...]:
        """Names of the variables, in first-use order, without repeats."""
        raise NotImplementedError

    def render(self, rename: Callable[[str], str] = str) -> str:
        """Text of the expression, variables renamed by ``rename``."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.render()

    def _child(self, child: "Expr", rename: Callable[[str], str], min_precedence: int) -> str:
        text = child.render(rename)
        return f"({text})" if child.precedence < min_precedence else text


@dataclass(frozen=True, repr=False)
class Dimension(Expr):
    """A named index variable, e.g. ``Dimension(dimension_name="i")``."""

    dimension_name: str

    def __post_init__(self):
        if not isinstance(self.dimension_name, str):
            raise TypeError(f"a dimension name must be a str, not {type(self.dimension_name).__name__}")
        if not self.dimension_name.isidentifier():
            from ..errors import FormatError

            raise FormatError(f"a dimension name must be an identifier, not {self.dimension_name!r}")

    @property
    def name(self) -> str:
        return self.dimension_name

    def evaluate(self, env):
        return env[self.dimension_name]

    def variables(self):
        return (self.dimension_name,)

    def render(self, rename=str):
        return rename(self.dimension_name)

    def __repr__(self) -> str:
        return self.dimension_name


@dataclass(frozen=True, repr=False)
class Const(Expr):
    """An integer constant (only inside dimension bindings such as ``l0 * 2 + 1``)."""

    value: int

    def evaluate(self, env):
        return self.value

    def variables(self):
        return ()

    def render(self, rename=str):
        return str(self.value)

    def __repr__(self) -> str:
        return str(self.value)


@dataclass(frozen=True, repr=False)
class _Binary(Expr):
    left: Expr
    right: Expr

    op = ""

    def variables(self):
        return _merge(self.left.variables(), self.right.variables())

    def render(self, rename=str):
        left = self._child(self.left, rename, _SUM)
        right = self._child(self.right, rename, _SUM + 1)
        return f"{left} {self.op} {right}"

    def __repr__(self) -> str:
        return self.render()


@dataclass(frozen=True, repr=False)
class Add(_Binary):
    """``left + right``."""

    precedence = _SUM
    op = "+"

    def evaluate(self, env):
        return self.left.evaluate(env) + self.right.evaluate(env)


@dataclass(frozen=True, repr=False)
class Sub(_Binary):
    """``left - right``."""

    precedence = _SUM
    op = "-"

    def evaluate(self, env):
        return self.left.evaluate(env) - self.right.evaluate(env)


@dataclass(frozen=True, repr=False)
class _ByConstant(Expr):
    operand: Expr
    constant: int

    precedence = _PRODUCT
    op = ""

    def variables(self):
        return self.operand.variables()

    def render(self, rename=str):
        return f"{self._child(self.operand, rename, _PRODUCT)} {self.op} {self.constant}"

    def __repr__(self) -> str:
        return self.render()


@dataclass(frozen=True, repr=False)
class FloorDiv(_ByConstant):
    """``operand floordiv constant`` (also written ``//`` or ``/``)."""

    op = "floordiv"

    def evaluate(self, env):
        return self.operand.evaluate(env) // self.constant


@dataclass(frozen=True, repr=False)
class Mod(_ByConstant):
    """``operand mod constant`` (also written ``%``)."""

    op = "mod"

    def evaluate(self, env):
        return self.operand.evaluate(env) % self.constant


@dataclass(frozen=True, repr=False)
class Mul(Expr):
    """``factor * operand`` with a constant factor."""

    factor: int
    operand: Expr

    precedence = _PRODUCT

    def evaluate(self, env):
        return self.factor * self.operand.evaluate(env)

    def variables(self):
        return self.operand.variables()

    def render(self, rename=str):
        return f"{self.factor} * {self._child(self.operand, rename, _PRODUCT + 1)}"

    def __repr__(self) -> str:
        return self.render()


def as_expr(value: "Expr | int | str") -> Expr:
    """``value`` as an expression: expressions pass, ints become constants, names dimensions."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool):
        raise TypeError("a boolean is not an index expression")
    if isinstance(value, int):
        return Const(value)
    if isinstance(value, str):
        return Dimension(value)
    raise TypeError(f"not an index expression: {value!r}")


def _constant(value: Any, op: str, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"'{op}' takes an integer constant, not {value!r}")
    return value


def _merge(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    return a + tuple(name for name in b if name not in a)


def canonical(expr: Expr, order: Mapping[str, int]) -> Expr:
    """The canonical spelling of an expression.

    ``order`` maps each dimension name to its position. Sums are ordered by
    their operands' dimension positions (``j + i`` and ``i + j`` are the same
    coordinate) and ``1 * d`` is ``d``. Names are kept; the caller renames.
    """
    if isinstance(expr, Add):
        left, right = canonical(expr.left, order), canonical(expr.right, order)
        if _position(right, order) < _position(left, order):
            left, right = right, left
        return Add(left, right)
    if isinstance(expr, Sub):
        return Sub(canonical(expr.left, order), canonical(expr.right, order))
    if isinstance(expr, Mul):
        inner = canonical(expr.operand, order)
        return inner if expr.factor == 1 else Mul(expr.factor, inner)
    if isinstance(expr, _ByConstant):
        return type(expr)(canonical(expr.operand, order), expr.constant)
    return expr


def _position(expr: Expr, order: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(order.get(name, len(order)) for name in expr.variables())
