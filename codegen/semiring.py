"""Semirings: the ``(⊕, ⊗)`` a statement reduces and multiplies with.

``y[i] = ⊕_j A[i, j] ⊗ x[j]``. Ordinary sums of products are ``plus_times``; ``min_plus`` relaxes
shortest paths, ``or_and`` steps reachability, ``max_times`` finds most reliable paths, and a
:class:`Semiring` may take user functions for either operator.

Semantics (the same for every front end):

* **Absent entries** of a sparse operand are the ⊕ identity ``𝟘`` (``0`` for plus, ``+inf`` for
  min, ``-inf`` for max, ``False`` for or, ``True`` for and, ``1`` for times; integers use their
  dtype's largest / smallest value), and they **annihilate ⊗**: a product is formed only where
  every factor has a stored entry (structurally, as in GraphBLAS, even where ``𝟘 ⊗ v`` would not
  be ``𝟘`` numerically, e.g. ``-inf * -1``). So co-iterating ``A ⊗ x`` is an intersection whatever
  ⊗ is, and ``A ⊕ B`` (⊕ written between operands) is a union.
* Other operators in a statement see an absent entry as the value ``𝟘`` (the lattice keeps such
  points, computing with ``𝟘``).
* A reduction starts at ``𝟘``; ``=`` into a dense output starts every element at ``𝟘`` (rows with
  no contribution hold ``𝟘``), ``+=`` (``y[i] = min(y[i], ...)`` in ``@ustc.jit``) folds into the
  values the output holds: ``y[i] = y[i] ⊕ (⊕_j ...)``.
* ⊕ must be associative and commutative with identity ``zero``; user functions are checked on a
  few sample values when the semiring is made.

Built-in operators (and their aliases): ``plus`` (``+``, ``add``, ``sum``), ``times`` (``*``,
``mul``, ``prod``), ``min``, ``max``, ``or`` (``|``, ``any``, ``lor``), ``and`` (``&``, ``all``,
``land``). A semiring is named ``<add>_<mul>`` (``"min_plus"``, ``"max_min"``, ``"or_and"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ustc.errors import UnsupportedOperation, UstcError

from . import functions
from .functions import Function


@dataclass(frozen=True)
class Op:
    """A built-in binary operator: its name, its text in statements, the CUDA atomic that
    folds into memory with it (None: none), the NumPy ufunc that computes it on the host."""

    name: str
    symbol: str
    atomic: str | None
    ufunc: object


OPS = {
    "plus": Op("plus", "+", "add", np.add),
    "times": Op("times", "*", None, np.multiply),
    "min": Op("min", "min", "min", np.minimum),
    "max": Op("max", "max", "max", np.maximum),
    "or": Op("or", "|", None, np.logical_or),
    "and": Op("and", "&", None, np.logical_and),
}
ALIASES = {"+": "plus", "add": "plus", "sum": "plus", "*": "times", "mul": "times", "prod": "times",
           "product": "times", "|": "or", "any": "or", "lor": "or", "&": "and", "all": "and", "land": "and",
           "minimum": "min", "maximum": "max"}
LOGICAL = ("or", "and")


def op_name(op) -> str:
    """The canonical name of a built-in operator (``"|"`` → ``"or"``); UstcError for others."""
    text = str(op).strip().lower()
    text = ALIASES.get(text, text)
    if text not in OPS:
        raise UstcError(f"unknown semiring operator {op!r} (operators: {', '.join(OPS)}; aliases: "
                        f"{', '.join(sorted(ALIASES))}; or a Python function)")
    return text


def identity(op, dtype) -> object:
    """The identity of ⊕ ``op`` (a built-in name) for ``dtype``, as a Python scalar."""
    dt = np.dtype(dtype)
    kind = dt.kind
    if op == "plus":
        return False if kind == "b" else 0j if kind == "c" else 0.0 if kind == "f" else 0
    if op == "times":
        return True if kind == "b" else 1 + 0j if kind == "c" else 1.0 if kind == "f" else 1
    if op in LOGICAL:
        return op == "and"
    if kind == "c":
        raise UnsupportedOperation(f"a {op} reduction over complex values ({dt}): complex numbers are not ordered")
    if kind == "b":
        return op == "min"
    if kind == "f":
        return math.inf if op == "min" else -math.inf
    info = np.iinfo(dt)
    return int(info.max if op == "min" else info.min)


@dataclass(frozen=True)
class Semiring:
    """``(add, mul)`` with ``add``'s identity ``zero`` (see the module docstring).

    ``add`` and ``mul`` are built-in operator names (``"min"``, ``"+"``, ...) or Numba-compilable
    Python functions of two arguments; after construction they hold the canonical name or a
    :class:`~codegen.functions.Function`. ``zero`` is required when ``add`` is a function (its
    identity, a number or bool) and derived from the dtype otherwise (where it may only be given
    as the floating-point identity, e.g. ``math.inf`` for min). Frozen and hashable; equal
    semirings give equal kernels."""

    add: object = "plus"
    mul: object = "times"
    zero: object = None

    def __post_init__(self):
        add = self._operator(self.add, "add")
        mul = self._operator(self.mul, "mul")
        object.__setattr__(self, "add", add)
        object.__setattr__(self, "mul", mul)
        zero = self.zero
        if isinstance(add, Function):
            if isinstance(zero, np.generic):
                zero = zero.item()
            if zero is None or not isinstance(zero, (bool, int, float, complex)):
                raise UstcError(f"Semiring(add={add.name}): a user add function needs its identity as zero= "
                                f"(a number or bool), got {self.zero!r}")
            object.__setattr__(self, "zero", zero)
            _check_monoid(add, zero)
        elif zero is not None:
            natural = identity(add, np.bool_ if add in LOGICAL else np.float64)
            if zero != natural:
                raise UstcError(f"Semiring(add={add!r}): its identity is {natural!r} (the dtype's extreme for "
                                f"integers); zero={zero!r} would change the operator, use a user add function")
            object.__setattr__(self, "zero", None)

    @staticmethod
    def _operator(op, role: str):
        if isinstance(op, str):
            return op_name(op)
        return functions.function(op, 2, f"semiring {role}")

    # -- description ---------------------------------------------------------------------
    @property
    def name(self) -> str:
        """``min_plus``; user functions by their key (``mymin#ab12..._plus``), and a user zero."""
        text = f"{_text(self.add)}_{_text(self.mul)}"
        return text + (f"(zero={self.zero!r})" if isinstance(self.add, Function) else "")

    def __str__(self) -> str:
        return self.name

    @property
    def is_plus_times(self) -> bool:
        return self.add == "plus" and self.mul == "times"

    @property
    def functions(self) -> tuple[Function, ...]:
        return tuple(f for f in (self.add, self.mul) if isinstance(f, Function))

    @property
    def stable(self) -> bool:
        """Every user function has a stable key (kernels may go to the disk cache)."""
        return all(f.stable for f in self.functions)

    @property
    def logical(self) -> bool:
        """⊕ is or / and: the accumulator is a bool."""
        return self.add in LOGICAL

    def identity(self, dtype) -> object:
        """``𝟘`` for values of ``dtype``, a Python scalar."""
        if isinstance(self.add, Function):
            return np.dtype(dtype).type(self.zero).item()
        return identity(self.add, dtype)

    @property
    def atomic(self) -> str | None:
        """The ``numba.cuda.atomic`` function that folds with ⊕ (None: no atomic exists)."""
        return None if isinstance(self.add, Function) else OPS[self.add].atomic

    @property
    def ufunc(self):
        """The NumPy ufunc of ⊕ (None for a user function)."""
        return None if isinstance(self.add, Function) else OPS[self.add].ufunc

    def combine(self, a, b):
        """``a ⊕ b`` on the host (arrays or scalars)."""
        if isinstance(self.add, Function):
            return self.add(a, b)
        return self.ufunc(a, b)

    def result_dtype(self, dtype) -> np.dtype:
        """The dtype of a result whose operands' common dtype is ``dtype``: bool for or / and."""
        return np.dtype(np.bool_) if self.logical and self.mul in LOGICAL else np.dtype(dtype)

    def multiply(self, left, right):
        """The index-notation node ``left ⊗ right``."""
        from . import notation as nt

        return nt.binary(self.mul, left, right)


def _text(op) -> str:
    return str(op) if isinstance(op, Function) else op


PLUS_TIMES = Semiring()
NAMED = {f"{a}_{m}" for a in OPS for m in OPS}


def as_semiring(spec) -> Semiring:
    """A :class:`Semiring` from ``None`` (plus_times), a Semiring, a name such as ``"min_plus"``
    (``<add>_<mul>``, operators and aliases as in the module docstring) or a dict with keys
    ``add``, ``mul`` and, for a user add, ``zero`` (nvmath-python's ``atomic_add`` key is accepted
    and ignored: ustc derives atomics from ``add``)."""
    if spec is None:
        return PLUS_TIMES
    if isinstance(spec, Semiring):
        return spec
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - {"add", "mul", "zero", "atomic_add"})
        if unknown:
            raise UstcError(f"semiring dict: unknown key {unknown[0]!r} (keys: add, mul, zero)")
        return Semiring(spec.get("add", "plus"), spec.get("mul", "times"), spec.get("zero"))
    if isinstance(spec, str):
        text = spec.strip().lower()
        add, sep, mul = text.partition("_")
        if not sep:
            raise UstcError(f"semiring {spec!r}: name it <add>_<mul>, e.g. min_plus, max_times, or_and "
                            f"(operators: {', '.join(OPS)})")
        return Semiring(op_name(add), op_name(mul))
    raise UstcError(f"semiring must be a name such as 'min_plus', a ustc.Semiring or a dict, got {spec!r}")


def _check_monoid(add: Function, zero) -> None:
    """Spot checks of a user ⊕ on sample values of zero's type: identity, commutativity,
    associativity. Samples the function cannot take (it raises) skip the checks."""
    samples = (True, False, True) if isinstance(zero, bool) else \
        (2, 5, -3) if isinstance(zero, int) else (2.0, 5.0, -3.0)
    a, b, c = samples
    f = add.host
    try:
        checks = [(f(zero, b) == b and f(b, zero) == b, f"{zero!r} is not its identity: add({zero!r}, {b!r}) = "
                   f"{f(zero, b)!r}"),
                  (f(a, b) == f(b, a), f"it is not commutative: add({a!r}, {b!r}) = {f(a, b)!r} but "
                   f"add({b!r}, {a!r}) = {f(b, a)!r}"),
                  (f(f(a, b), c) == f(a, f(b, c)), f"it is not associative on ({a!r}, {b!r}, {c!r})")]
    except Exception:  # noqa: BLE001 - the function takes other types: nothing to check here
        return
    for ok, why in checks:
        if not bool(ok):
            raise UstcError(f"Semiring add {add.name}: {why}")
