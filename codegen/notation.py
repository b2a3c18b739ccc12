"""Index-notation IR: what a kernel computes, independent of how tensors are stored.

A :class:`Program` is a sequence of :class:`Statement` s such as
``y[i] += A[i, j] * x[j]``. Expressions are built from tensor accesses,
numeric literals and scalar parameters with ``+``, ``-``, ``*``, unary
minus, ``min`` / ``max``, logical ``&`` / ``|``, calls of user functions of
two or more arguments (:class:`Call`, e.g. a semiring's ⊗) and *applications*
of one-argument user functions to the stored values of an expression
(:class:`Apply`: prologs). An index that appears only on the right-hand side
is reduced over: summed, or folded with the statement's semiring ⊕
(:mod:`codegen.semiring`); a statement may name an epilog applied to each
output element it writes.

Every node is a frozen, hashable dataclass; ``str(node)`` is the canonical
text (it seeds kernel cache keys)::

    >>> y, A, x = Access("y", ("i",)), Access("A", ("i", "j")), Access("x", ("j",))
    >>> s = Statement(y, Mul(A, x), accumulate=True)
    >>> str(s), s.reduction_indices
    ('y[i] += A[i, j] * x[j]', ('j',))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

from .functions import Function
from .semiring import PLUS_TIMES, Semiring

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
class _Function2(_Binary):
    """A binary operator written as a call: ``min(a, b)``."""

    def __str__(self) -> str:
        return f"{self.symbol}({self.left}, {self.right})"


@dataclass(frozen=True)
class Min(_Function2):
    symbol = "min"


@dataclass(frozen=True)
class Max(_Function2):
    symbol = "max"


@dataclass(frozen=True)
class And(_Binary):
    """Logical and of the operands' truth values (a bool)."""

    symbol = "&"
    precedence = 4


@dataclass(frozen=True)
class Or(_Binary):
    """Logical or of the operands' truth values (a bool)."""

    symbol = "|"
    precedence = 3


@dataclass(frozen=True)
class Call(Expr):
    """A user function of two or more arguments (``fn(a, b)``), e.g. a semiring's ⊗."""

    fn: Function
    args: tuple[Expr, ...]

    def children(self):
        return self.args

    def __str__(self) -> str:
        return f"{self.fn}({', '.join(str(a) for a in self.args)})"


@dataclass(frozen=True)
class Apply(Expr):
    """A one-argument user function applied to the *stored values* of ``operand``: where the
    operand has no entry the result has none either (a prolog on load)."""

    fn: Function
    operand: Expr

    def children(self):
        return (self.operand,)

    def __str__(self) -> str:
        return f"{self.fn}({self.operand})"


@dataclass(frozen=True)
class Identity(Expr):
    """The statement's ⊕ identity as a value (an absent operand seen by an operator that is
    neither ⊕ nor ⊗); only produced by lattice specialisation."""

    def __str__(self) -> str:
        return "identity"


IDENTITY = Identity()


@dataclass(frozen=True)
class Zero(Expr):
    """The value of an absent operand; only produced by lattice specialisation."""

    def __str__(self) -> str:
        return "0"


ZERO = Zero()


@dataclass(frozen=True)
class Statement:
    """``lhs = rhs`` or, with ``accumulate``, ``lhs += rhs``.

    ``semiring``: the ⊕ that reduces (and folds into the output for ``accumulate``) and the ⊗
    that absent entries annihilate (:mod:`codegen.semiring`); ``epilog``: a one-argument user
    function applied to every output element the statement writes (dense outputs: every
    element, after the reduction and the fold; sparse outputs: every stored entry)."""

    lhs: Access
    rhs: Expr
    accumulate: bool = False
    loc: Location = field(default=(0, 0), compare=False)
    semiring: Semiring = PLUS_TIMES
    epilog: Function | None = None

    @property
    def reduction_indices(self) -> tuple[str, ...]:
        """Indices summed over: those on the right only."""
        return tuple(i for i in self.rhs.index_vars() if i not in self.lhs.indices)

    @property
    def indices(self) -> tuple[str, ...]:
        """Output indices first, then reductions."""
        return tuple(dict.fromkeys(self.lhs.indices + self.rhs.index_vars()))

    @property
    def functions(self) -> tuple[Function, ...]:
        """User functions the statement calls (rhs, semiring, epilog), each once."""
        found: dict[Function, None] = {}
        stack: list[Expr] = [self.rhs]
        while stack:
            node = stack.pop()
            if isinstance(node, (Call, Apply)):
                found[node.fn] = None
            stack.extend(node.children())
        found.update(dict.fromkeys(self.semiring.functions))
        if self.epilog is not None:
            found[self.epilog] = None
        return tuple(found)

    def __str__(self) -> str:
        sr = self.semiring
        if not self.accumulate:
            op = "="
        elif sr.is_plus_times:
            op = "+="
        else:
            op = f"{sr.add if isinstance(sr.add, Function) else _REDUCE_TEXT[sr.add]}="
        text = f"{self.lhs} {op} {self.rhs}"
        if not sr.is_plus_times:
            text += f" [semiring {sr.name}]"
        if self.epilog is not None:
            text += f" [epilog {self.epilog}]"
        return text


_REDUCE_TEXT = {"plus": "+", "times": "*", "min": "min", "max": "max", "or": "|", "and": "&"}


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

    @property
    def functions(self) -> tuple[Function, ...]:
        """User functions of every statement, each once."""
        return tuple(dict.fromkeys(f for s in self.statements for f in s.functions))


_BINARY_OPS = {"plus": Add, "times": Mul, "min": Min, "max": Max, "or": Or, "and": And}


def binary(op, left: Expr, right: Expr) -> Expr:
    """The node of operator ``op`` (a built-in name such as ``"min"``, or a user Function)."""
    if isinstance(op, Function):
        return Call(op, (left, right))
    return _BINARY_OPS[op](left, right)


def operator_of(node: Expr):
    """The operator of a binary node as a semiring names it (``"plus"``, ``"min"``, a user
    Function); ``"minus"`` for subtraction; None for other nodes."""
    if isinstance(node, Call) and len(node.args) == 2:
        return node.fn
    if isinstance(node, Sub):
        return "minus"
    for name, cls in _BINARY_OPS.items():
        if type(node) is cls:
            return name
    return None


def rebuild(node: Expr, children: tuple[Expr, ...]) -> Expr:
    """``node`` with new children (``node`` itself when they are the same objects)."""
    if all(a is b for a, b in zip(children, node.children())):
        return node
    if isinstance(node, _Binary):
        return type(node)(*children)
    if isinstance(node, Neg):
        return Neg(children[0])
    if isinstance(node, Call):
        return Call(node.fn, tuple(children))
    if isinstance(node, Apply):
        return Apply(node.fn, children[0])
    return node  # pragma: no cover - leaves have no children


def map_accesses(expr: Expr, fn: Callable[[Access], Expr]) -> Expr:
    """``expr`` with every access replaced by ``fn(access)``."""
    if isinstance(expr, Access):
        return fn(expr)
    kids = expr.children()
    return rebuild(expr, tuple(map_accesses(k, fn) for k in kids)) if kids else expr


def number_accesses(expr: Expr, start: int = 0) -> Expr:
    """``expr`` with every access given a distinct ``slot``, left to right from ``start``."""
    counter = iter(range(start, 1 << 30))
    return map_accesses(expr, lambda a: Access(a.tensor, a.indices, a.loc, next(counter)))


def substitute(expr: Expr, absent: frozenset[int], semiring: Semiring = PLUS_TIMES) -> Expr:
    """``expr`` with the accesses whose ``slot`` is in ``absent`` replaced by the semiring's
    zero ``𝟘`` (no entry), simplified; :data:`ZERO` when nothing remains to compute.

    ``𝟘 ⊗ a = 𝟘`` (⊗ is structural: a product needs every factor), ``a ⊕ 𝟘 = a``, an
    application of a prolog to ``𝟘`` is ``𝟘`` (it sees stored values only). Where ⊕ is plus:
    ``𝟘 - a = -a``, ``a - 𝟘 = a``, ``-𝟘 = 𝟘``. Any other operator with an absent operand
    computes with the value: the operand becomes :data:`IDENTITY`.
    """
    if isinstance(expr, Access):
        return ZERO if expr.slot in absent else expr
    kids = expr.children()
    if not kids:
        return expr
    args = tuple(substitute(k, absent, semiring) for k in kids)
    if all(a is k for a, k in zip(args, kids)):
        return expr
    if isinstance(expr, Apply):
        return ZERO if args[0] is ZERO else rebuild(expr, args)
    plus = semiring.add == "plus"
    if isinstance(expr, Neg):
        if args[0] is ZERO:
            return ZERO if plus else Neg(IDENTITY)
        return rebuild(expr, args)
    op = operator_of(expr)
    if op == semiring.mul:
        return ZERO if any(a is ZERO for a in args) else rebuild(expr, args)
    if op == semiring.add:
        kept = [a for a in args if a is not ZERO]
        return ZERO if not kept else kept[0] if len(kept) == 1 else rebuild(expr, args)
    if plus and op == "minus":
        a, b = args
        if b is ZERO:
            return a
        return Neg(b) if a is ZERO else rebuild(expr, args)
    return rebuild(expr, tuple(IDENTITY if a is ZERO else a for a in args))
