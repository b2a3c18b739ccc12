"""The registry of hand-written kernels: ``ustc.kernels.register(op, format, target)(fn)``.

A registered kernel is the first route :class:`ustc.Matmul` tries: when the
operation, the sparse operand's format and the target match, the kernel runs
instead of a library call or generated code. Contracts by operation
(``a`` is the sparse operand, a :class:`ustc.Tensor`, already transposed when
the caller asked for ``transpose_a``; ``b`` and ``out`` are dense arrays of the
target's package):

=========  ====================================================================
``spmv``   ``fn(a, b, out, alpha)``: ``out += alpha * a @ b``; ``b`` is 1-D.
``spmm``   ``fn(a, b, out, alpha)``: ``out += alpha * a @ b``; ``b`` is 2-D.
``spgemm`` ``fn(a, b, out_format) -> Tensor``: ``a @ b`` (both sparse) in
           ``out_format``; alpha and beta are applied by the caller.
=========  ====================================================================

``out`` already holds ``beta * c`` (or zeros), so a kernel only adds its
product. ``format`` is DSL text, a named format, a :class:`TensorFormat`
(matched by signature), or a predicate ``fn(TensorFormat) -> bool`` for a
family of formats (``delta(b, packed)`` for every ``b``). A kernel may also set
``fn.supports(a, b) -> bool`` to decline operands it does not handle (a
dtype, a shape); Matmul then moves on to the next route. An optional
``fn.compile(a, b, out, alpha)`` is called by ``Matmul.plan()`` to compile the
kernel without running it (the built-in SpMV kernels have one).

    >>> import numpy as np, ustc
    >>> @ustc.kernels.register("spmv", "CROW", target="cpu")
    ... def crow_spmv(a, b, out, alpha):
    ...     rows, dense = a.crd(0), a.values.reshape(-1, a.shape[1])
    ...     out[rows] += alpha * (dense @ b)
    >>> A = ustc.Tensor.from_dense(np.array([[0., 0], [1, 2]]), "CROW")
    >>> mm = ustc.Matmul(A, np.ones(2)).plan()
    >>> mm.plan_info
    'registered kernel: crow_spmv (spmv, cpu) [why: a registered kernel matches (op, format, target)]'
    >>> mm.execute().tolist()
    [0.0, 3.0]
    >>> ustc.kernels.unregister(crow_spmv)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

from ..errors import UstcError
from ..format.ir import TensorFormat

OPS = ("spmv", "spmm", "spgemm")
TARGETS = ("cpu", "cuda")

FormatMatch = Union[str, TensorFormat, Callable[[TensorFormat], bool]]


@dataclass(frozen=True)
class Registered:
    """One registered kernel: where it applies and the function to call."""

    op: str
    target: str
    signature: str | None           # exact format signature, or None when ``predicate`` decides
    predicate: Callable[[TensorFormat], bool] | None
    fn: Callable
    name: str
    builtin: bool = False

    def matches(self, op: str, fmt: TensorFormat, target: str) -> bool:
        if op != self.op or target != self.target:
            return False
        return fmt.signature == self.signature if self.signature is not None else bool(self.predicate(fmt))

    def accepts(self, a, b) -> bool:
        supports = getattr(self.fn, "supports", None)
        return supports is None or bool(supports(a, b))


_REGISTRY: list[Registered] = []


def register(op: str, format: FormatMatch, target: str = "cpu", *, name: str | None = None,
             builtin: bool = False):
    """Decorator: use ``fn`` for ``op`` on tensors in ``format`` on ``target``.

    Kernels registered later win over earlier ones for the same operands, so a
    user's kernel replaces a built-in one.
    """
    if op not in OPS:
        raise UstcError(f"register: op must be one of {', '.join(OPS)}, got {op!r}")
    if target not in TARGETS:
        raise UstcError(f"register: target must be one of {', '.join(TARGETS)}, got {target!r}")
    if callable(format) and not isinstance(format, TensorFormat):
        signature, predicate = None, format
    else:
        from ..tensor.tensor import as_format

        signature, predicate = as_format(format).signature, None

    def decorate(fn: Callable) -> Callable:
        _REGISTRY.append(Registered(op, target, signature, predicate, fn, name or fn.__name__, builtin))
        return fn

    return decorate


def unregister(fn: Callable) -> None:
    """Remove every registration of ``fn``."""
    _REGISTRY[:] = [r for r in _REGISTRY if r.fn is not fn]


def lookup(op: str, fmt: TensorFormat, target: str, a=None, b=None) -> Registered | None:
    """The most recently registered kernel for these operands, or None."""
    _load_builtins()
    for entry in reversed(_REGISTRY):
        if entry.matches(op, fmt, target) and (a is None or entry.accepts(a, b)):
            return entry
    return None


def registered() -> tuple[Registered, ...]:
    """Every registration, oldest first (built-ins included)."""
    _load_builtins()
    return tuple(_REGISTRY)


_BUILTINS_LOADED = False


def _load_builtins() -> None:
    """Import the built-in kernel modules once; they register themselves (Numba loads lazily)."""
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    from . import builtin, builtin_cuda  # noqa: F401
