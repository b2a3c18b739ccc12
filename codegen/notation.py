"""Index-notation IR: what a kernel computes, independent of how tensors are stored.

A :class:`Program` is a sequence of :class:`Statement` s such as
``y[i] += A[i, j] * x[j]``. Expressions are built from tensor accesses,
numeric literals and scalar parameters with ``+``, ``-``, ``*`` and unary
minus. An index that appears only on the right-hand side is summed over.

Every node is a frozen, hashable dataclass; ``str(node)`` is the canonical
text (it seeds kernel cache keys)::

    >>> y, A, x = Access("y", ("i",)), Access("A", ("i", "j")), Access("x", ("j",))
    >>> s = Statement(y, Mul(A, x), accumulate=True)
    >>> str(s), s.reduction_indices
    ('y[i] += A[i, j] * x[j]', ('j',))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

Location = tuple[int, int]  # (line, column) in the user's source, (0, 0) when unknown


class Expr:
    """Base of right-hand-side expressions."""

    precedence = 9

    def children(self) -> tuple["Expr", ...]:
        return ()

    def accesses(self) -> Iterator["Access"]:
        """Every tensor access, left to right."""
        if isinstance(self, Access):
            yield self
        for child in self.children():
            yield from child.accesses()

    def index_vars(self) -> tuple[str, ...]:
        """Index variables in order of first appearance."""
        seen: dict[str, None] = {}
        for access in self.accesses():
            seen.update(dict.fromkeys(access.indices))
        return tuple(seen)

    def scalars(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        stack = [self]
        while stack:
            node = stack.pop(0)
            if isinstance(node, Scalar):
                seen[node.name] = None
            stack[:0] = node.children()
        return tuple(seen)

    def _wrap(self, child: "Expr") -> str:
        return f"({child})" if child.precedence < self.precedence else str(child)


@dataclass(frozen=True)
class Access(Expr):
    """``tensor[indices]``; ``loc`` is where it was written and ``slot`` numbers the
    access within its statement (lowering assigns it); neither is part of equality."""

    tensor: str
    indices: tuple[str, ...]
    loc: Location = field(default=(0, 0), compare=False)
    slot: int = field(default=-1, compare=False)

    def __str__(self) -> str:
        return f"{self.tensor}[{', '.join(self.indices)}]"


@dataclass(frozen=True)
class Literal(Expr):
    value: int | float | complex

    def __str__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True)
class Scalar(Expr):
    """A scalar parameter of the kernel (a Python number at call time)."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Neg(Expr):
    operand: Expr
    precedence = 7

    def children(self):
        return (self.operand,)

    def __str__(self) -> str:
        return f"-{self._wrap(self.operand)}"


@dataclass(frozen=True)
class _Binary(Expr):
    left: Expr
    right: Expr
    symbol = "?"

    def children(self):
        return (self.left, self.right)

    def __str__(self) -> str:
        right = f"({self.right})" if self.right.precedence <= self.precedence else str(self.right)
        return f"{self._wrap(self.left)} {self.symbol} {right}"


@dataclass(frozen=True)
class Add(_Binary):
    symbol = "+"
    precedence = 5


@dataclass(frozen=True)
class Sub(_Binary):
    symbol = "-"
    precedence = 5


@dataclass(frozen=True)
class Mul(_Binary):
    symbol = "*"
    precedence = 6


@dataclass(frozen=True)
class Zero(Expr):
    """The value of an absent operand; only produced by lattice specialisation."""

    def __str__(self) -> str:
        return "0"


ZERO = Zero()


@dataclass(frozen=True)
class Statement:
    """``lhs = rhs`` or, with ``accumulate``, ``lhs += rhs``."""

    lhs: Access
    rhs: Expr
    accumulate: bool = False
    loc: Location = field(default=(0, 0), compare=False)

    @property
    def reduction_indices(self) -> tuple[str, ...]:
        """Indices summed over: those on the right only."""
        return tuple(i for i in self.rhs.index_vars() if i not in self.lhs.indices)

    @property
    def indices(self) -> tuple[str, ...]:
        """Output indices first, then reductions."""
        return tuple(dict.fromkeys(self.lhs.indices + self.rhs.index_vars()))

    def __str__(self) -> str:
        return f"{self.lhs} {'+=' if self.accumulate else '='} {self.rhs}"


@dataclass(frozen=True)
class Program:
    """Statements run in order; ``str`` is the canonical text used in cache keys."""

    statements: tuple[Statement, ...]

    def __str__(self) -> str:
        return "; ".join(str(s) for s in self.statements)

    @property
    def tensors(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for s in self.statements:
            seen[s.lhs.tensor] = None
            seen.update(dict.fromkeys(a.tensor for a in s.rhs.accesses()))
        return tuple(seen)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.lhs.tensor for s in self.statements))


def number_accesses(expr: Expr, start: int = 0) -> Expr:
    """``expr`` with every access given a distinct ``slot``, left to right from ``start``."""
    counter = iter(range(start, 1 << 30))

    def visit(node: Expr) -> Expr:
        if isinstance(node, Access):
            return Access(node.tensor, node.indices, node.loc, next(counter))
        if isinstance(node, Neg):
            return Neg(visit(node.operand))
        if isinstance(node, _Binary):
            left = visit(node.left)
            return type(node)(left, visit(node.right))
        return node

    return visit(expr)


def substitute(expr: Expr, absent: frozenset[int]) -> Expr:
    """``expr`` with the accesses whose ``slot`` is in ``absent`` replaced by zero, simplified.

    ``0 * a = 0``, ``a + 0 = a``, ``0 - a = -a``, ``-0 = 0``; the result is
    :data:`ZERO` when nothing remains.
    """
    if isinstance(expr, Access):
        return ZERO if expr.slot in absent else expr
    if isinstance(expr, Neg):
        inner = substitute(expr.operand, absent)
        return ZERO if inner is ZERO else (expr if inner is expr.operand else Neg(inner))
    if isinstance(expr, _Binary):
        a, b = substitute(expr.left, absent), substitute(expr.right, absent)
        if isinstance(expr, Mul):
            return ZERO if ZERO in (a, b) else _rebuild(expr, a, b)
        if b is ZERO:
            return a
        if a is ZERO:
            return b if isinstance(expr, Add) else Neg(b)
        return _rebuild(expr, a, b)
    return expr


def _rebuild(expr: _Binary, a: Expr, b: Expr) -> Expr:
    return expr if (a is expr.left and b is expr.right) else type(expr)(a, b)
