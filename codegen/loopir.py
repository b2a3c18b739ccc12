"""Loop IR: the imperative program a kernel becomes, before any target syntax.

Expressions: :class:`Var`, :class:`Const`, :class:`Load` (an array element),
:class:`Bin` (arithmetic, comparison, ``and``/``or``), :class:`Neg`,
:class:`Call` (``min``/``max``, casts, or a user function the module declares as an
:class:`Extern`), :class:`Select` (``a if c else b``) and
:class:`Index` (an array subscript known to be non-negative, which targets may
emit without a wrap-around check). Statements: :class:`Assign`, :class:`Store`
(``+=`` when ``accumulate``, or another fold: ``op``), :class:`For` (``parallel`` marks the loop a
target may run on several threads), :class:`While`, :class:`If`,
:class:`Comment`, :class:`Return`, :class:`Sort` (sort ``array[start:stop]`` in place: a
sparse output's segment staged for order, written by a level's workspace hook), :class:`Alloc` (a
kernel-local array: a reduction's workspace row). A :class:`Function` has typed
:class:`Param` s; a :class:`Module` is functions plus a header and the user functions
(:class:`Extern`) they call.

Folds (``Assign.op``, ``Store.op``): ``+``, ``*``, ``|``, ``&`` are written ``x op= v``;
``min``, ``max`` and an extern's name ``x = op(x, v)``.

Emitters (``emit_cpu``; later ``emit_cuda``) are visitors over these classes:
they never see formats or index notation. The helpers ``add``/``mul``/...
fold constants so lowering produces ``i`` rather than ``0 * n + i``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Sequence, Union

from .roles import Role


class Expr:
    pass


@dataclass(frozen=True)
class Var(Expr):
    name: str


@dataclass(frozen=True)
class Const(Expr):
    """A literal; with ``dtype`` (a NumPy scalar type name, ``"float32"``) it is that type's
    value, so a register it starts is that type (a float16 product's float32 sum)."""

    value: int | float | complex | bool
    dtype: str | None = None


@dataclass(frozen=True)
class Index(Expr):
    """An array subscript proved non-negative (coordinates, positions)."""

    value: Expr


@dataclass(frozen=True)
class Load(Expr):
    array: str
    index: tuple[Expr, ...]


@dataclass(frozen=True)
class Bin(Expr):
    op: str  # + - * // % & >> << == != < <= > >= and or
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Neg(Expr):
    operand: Expr


@dataclass(frozen=True)
class Call(Expr):
    fn: str  # min, max, bool, np.intp, len, or an Extern's name
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Select(Expr):
    cond: Expr
    then: Expr
    orelse: Expr


class Stmt:
    pass


Body = tuple[Stmt, ...]


INPLACE = ("+", "*", "|", "&")  # folds written `x op= v`; others (min, max, externs) `x = op(x, v)`


@dataclass(frozen=True)
class Assign(Stmt):
    name: str
    value: Expr
    op: str = ""  # "" for =, "+" for +=, or another fold (module docstring)


@dataclass(frozen=True)
class Store(Stmt):
    """``array[index] = value``; with ``accumulate`` ``array[index] = array[index] op value``.
    ``atomic``: a target may fold it atomically where iterations conflict (False: the array's
    element type has no atomic fold, float16)."""

    array: str
    index: tuple[Expr, ...]
    value: Expr
    accumulate: bool = False
    op: str = "+"
    atomic: bool = True


@dataclass(frozen=True)
class For(Stmt):
    """``for var in range(start, stop, step)``; ``full`` is the variable's whole range when
    ``start``/``stop`` were tightened (a parallel inner loop that ``optimize`` may tile)."""

    var: str
    start: Expr
    stop: Expr
    body: Body
    parallel: bool = False
    step: int = 1
    full: tuple[Expr, Expr] | None = None


@dataclass(frozen=True)
class While(Stmt):
    cond: Expr
    body: Body


@dataclass(frozen=True)
class If(Stmt):
    cond: Expr
    body: Body
    orelse: Body = ()


@dataclass(frozen=True)
class Comment(Stmt):
    text: str


@dataclass(frozen=True)
class Sort(Stmt):
    """Sort ``array[start:stop]`` ascending, in place."""

    array: str
    start: Expr
    stop: Expr


@dataclass(frozen=True)
class Alloc(Stmt):
    """``name = a new 1-D array of size`` ``dtype`` (a NumPy dtype name): zero-filled when ``zero``,
    else uninitialised (every element is written before it is read)."""

    name: str
    size: Expr
    dtype: str
    zero: bool = False


@dataclass(frozen=True)
class Return(Stmt):
    value: Expr


@dataclass(frozen=True)
class Param:
    """A kernel argument; ``role`` (:class:`~codegen.roles.Role`) tells the host what to pass."""

    name: str
    role: Role

    def __post_init__(self):
        if not isinstance(self.role, Role):
            raise TypeError(f"parameter {self.name!r}: its role must be a codegen.roles.Role, got {self.role!r}")


@dataclass(frozen=True)
class Function:
    name: str
    params: tuple[Param, ...]
    body: Body
    parallel: bool = False  # some loop is marked parallel
    doc: str = ""


@dataclass(frozen=True)
class Extern:
    """A user function the module's kernels call as ``name(...)``: the emitters bind ``name``
    to the function registered under ``key`` (``codegen.functions.resolve``) for their target."""

    name: str
    key: str


@dataclass(frozen=True)
class Module:
    header: tuple[str, ...]
    functions: tuple[Function, ...]
    meta: dict = field(default_factory=dict, compare=False, hash=False)
    externs: tuple[Extern, ...] = ()


# -- folding constructors -------------------------------------------------------------

ExprLike = Union[Expr, int]


def lift(x: ExprLike) -> Expr:
    return Const(x) if isinstance(x, (int, float, complex)) and not isinstance(x, bool) else x


def add(a: ExprLike, b: ExprLike) -> Expr:
    a, b = lift(a), lift(b)
    if a == Const(0):
        return b
    if b == Const(0):
        return a
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value + b.value)
    if isinstance(b, Const) and isinstance(b.value, int) and b.value < 0:
        return Bin("-", a, Const(-b.value))
    return Bin("+", a, b)


def sub(a: ExprLike, b: ExprLike) -> Expr:
    a, b = lift(a), lift(b)
    if b == Const(0):
        return a
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value - b.value)
    if isinstance(b, Const) and isinstance(b.value, int) and b.value < 0:
        return Bin("+", a, Const(-b.value))
    return Bin("-", a, b)


def mul(a: ExprLike, b: ExprLike) -> Expr:
    a, b = lift(a), lift(b)
    if Const(0) in (a, b):
        return Const(0)
    if a == Const(1):
        return b
    if b == Const(1):
        return a
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value * b.value)
    return Bin("*", a, b)


def lt(a: ExprLike, b: ExprLike) -> Expr:
    return Bin("<", lift(a), lift(b))


def eq(a: ExprLike, b: ExprLike) -> Expr:
    return Bin("==", lift(a), lift(b))


def conj(terms: Sequence[Expr]) -> Expr:
    return _chain("and", terms, Const(True))


def disj(terms: Sequence[Expr]) -> Expr:
    return _chain("or", terms, Const(False))


def _chain(op: str, terms: Sequence[Expr], empty: Expr) -> Expr:
    terms = [t for t in terms if t != Const(op == "and")]
    if not terms:
        return empty
    out = terms[0]
    for t in terms[1:]:
        out = Bin(op, out, t)
    return out


def load(array: str, *index: ExprLike) -> Load:
    return Load(array, tuple(lift(i) for i in index))


def walk(body: Body):
    """Every statement, depth first."""
    for stmt in body:
        yield stmt
        for attr in ("body", "orelse"):
            yield from walk(getattr(stmt, attr, ()))


def children(node: Expr | Stmt) -> tuple[Expr, ...]:
    """The expressions directly inside ``node`` (an expression's operands; a statement's own
    expressions, not those of statements nested in it)."""
    out: list[Expr] = []
    for value in vars(node).values():
        for child in value if isinstance(value, tuple) else (value,):
            if isinstance(child, Expr):
                out.append(child)
    return tuple(out)


def nodes(e: Expr):
    """``e`` and every expression inside it, depth first."""
    yield e
    for child in children(e):
        yield from nodes(child)


def names_in(fn: "Function") -> set[str]:
    """Every name ``fn`` uses: parameters, assigned and loop variables, arrays, variables read."""
    out = {p.name for p in fn.params}
    for s in walk(fn.body):
        out.update(n for n in (getattr(s, "name", None), getattr(s, "var", None), getattr(s, "array", None)) if n)
        for e in children(s):
            out.update(n.name if isinstance(n, Var) else n.array for n in nodes(e) if isinstance(n, (Var, Load)))
    return out


def variables(e: Expr) -> set[str]:
    """The names of the variables ``e`` reads."""
    return {n.name for n in nodes(e) if isinstance(n, Var)}


#: the fields of each node that name a variable or array (what :func:`rename` maps)
_NAMES = {Var: ("name",), Load: ("array",), Assign: ("name",), Store: ("array",), For: ("var",),
          Sort: ("array",), Alloc: ("name",)}


def rename(fn: Function, mapping: dict[str, str]) -> Function:
    """``fn`` with every parameter, variable and array named in ``mapping`` renamed (roles keep
    what the host passes, so only the text changes); ``fn`` itself when ``mapping`` is empty."""
    if not mapping:
        return fn

    def node(x):
        if isinstance(x, tuple):
            return tuple(node(v) for v in x)
        if not isinstance(x, (Expr, Stmt)):
            return x
        changes = {}
        named = _NAMES.get(type(x), ())
        for f in dataclasses.fields(x):
            value = getattr(x, f.name)
            new = mapping.get(value, value) if f.name in named else node(value)
            if new is not value:
                changes[f.name] = new
        return dataclasses.replace(x, **changes) if changes else x

    params = tuple(Param(mapping.get(p.name, p.name), p.role) for p in fn.params)
    return dataclasses.replace(fn, params=params, body=node(fn.body))
