"""NumPy ufuncs and comparisons on ustc Tensors: zero-preserving ones stay sparse.

    >>> import numpy as np, ustc
    >>> A = ustc.Tensor.from_dense(np.array([[-1., 0, 4], [0, 9, 0]]), "CSR")
    >>> np.sqrt(abs(A)).to_dense().tolist()
    [[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]
    >>> (A > 0).to_dense().tolist(), (A / 2).format == A.format
    ([[False, False, True], [False, True, False]], True)
    >>> np.exp(A)
    Traceback (most recent call last):
    ...
    ustc.errors.UnsupportedOperation: np.exp is not zero-preserving (exp(0) = 1.0): its result is dense; apply it to A.to_dense() instead

A ufunc ``f`` applied to a Tensor keeps it sparse exactly when ``f`` maps the zeros it does not
store to zero: ``f(0) == 0`` for a unary ufunc (abs, negative, sqrt, sin, tanh, expm1, log1p,
sign, floor, ceil, rint, square, conj, isnan, ...), ``f(0, s) == 0`` for a scalar operand
``s`` (``A / 2``, ``A ** 3``, ``np.maximum(A, 0)``, ``A > 0``, ``A != 0``, ``A == 2``),
``f(0, x) == 0`` for every element of a dense operand ``x`` (broadcast by NumPy's rules), and
``f(0, 0) == 0`` for two sparse operands (the result then has the union of their patterns).
The test is run, not looked up, so it covers every ufunc. Otherwise the result would be dense
and :class:`ustc.UnsupportedOperation` says so, suggesting ``to_dense()``; nothing is densified
silently.

The maps run as vectorised NumPy over the values buffer (every position, padding included:
a zero-preserving map keeps padding zero), in the tensor's own format, with copies of its
index buffers. ``+``, ``-``, ``*`` and ``@`` go to the generated kernels of
:mod:`ustc.ops.elementwise` and :mod:`ustc.ops.matmul`; ``np.add.reduce``,
``np.maximum.reduce`` and ``np.minimum.reduce`` to ``sum``, ``max`` and ``min``.
Comparison results are boolean Tensors; where the format is CSR, CSC or COO their ``False``
entries are dropped, elsewhere they stay as stored ``False`` (padding-like) entries. ``A == B``
for two ustc Tensors is identity (a Python bool), so tensors keep working as dict keys.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError, UnsupportedOperation
from ..tensor import fastpaths, packages
from ..tensor.storage import Layout
from ..tensor.tensor import Tensor
from .operands import OperandKind, checked, dense_operand, kind, sparse_like
from .plan_cache import ELEMENTWISE

_OPERATOR_TEXT = {np.greater: ">", np.less: "<", np.greater_equal: ">=", np.less_equal: "<=",
                  np.equal: "==", np.not_equal: "!="}
COMPARISONS = tuple(_OPERATOR_TEXT)


def operand(x):
    """A Tensor (sparse objects of SciPy / torch / CuPy viewed), a scalar, or a host array
    (all-dense Tensors are their arrays)."""
    if isinstance(x, Tensor):
        return dense_operand(x)
    if sparse_like(x):
        return Tensor.from_package(x)
    if isinstance(x, (numbers.Number, np.generic)):
        return x
    return packages.host_array(x)


def _scalar(x) -> bool:
    return isinstance(x, (numbers.Number, np.generic)) or (isinstance(x, np.ndarray) and x.ndim == 0)


def _zero(t: Tensor):
    return np.zeros((), dtype=t.dtype)


def _text(f, args) -> str:
    return f"{f.__name__}({', '.join('0' if a is None else repr(a) for a in args)})"


def _is_zero(z) -> bool:
    z = np.asarray(z)
    return bool(np.all(z == 0))


def _refuse(f, args, value, hint: str = "") -> None:
    value = value.item() if isinstance(value, (np.generic, np.ndarray)) and np.ndim(value) == 0 else value
    op = _OPERATOR_TEXT.get(f)
    if op is not None:
        lhs, rhs = ("A" if args[0] is None else repr(args[0])), ("A" if args[1] is None else repr(args[1]))
        if not isinstance(args[0], (numbers.Number, np.generic)) and args[0] is not None:
            lhs = "x"
        if not isinstance(args[1], (numbers.Number, np.generic)) and args[1] is not None:
            rhs = "x"
        raise UnsupportedOperation(
            f"{lhs} {op} {rhs} is True where the tensor stores nothing ({_text(f, args)} is {value!r}), so the "
            f"result would be dense; compare the array instead: A.to_dense() {op} ...{hint}")
    raise UnsupportedOperation(f"np.{f.__name__} is not zero-preserving ({_text(f, args)} = {value!r}): its "
                               f"result is dense; apply it to A.to_dense() instead{hint}")


def _evaluate(f, *args):
    with np.errstate(all="ignore"):
        try:
            return f(*args)
        except (ValueError, TypeError, ZeroDivisionError, ArithmeticError) as exc:
            return exc


def mapped(t: Tensor, values) -> Tensor:
    """A tensor of ``t``'s format, shape and pattern (index buffers copied) holding ``values``."""
    buffers = {key: b.copy() for key, b in t.raw_buffers.items()}
    return Tensor(t.format, t.shape, buffers, np.ascontiguousarray(values), device=t.device, package=t.package)


def unary(f, t: Tensor, **kwargs) -> Tensor:
    """``f(t)`` for a zero-preserving unary ufunc, on the stored values."""
    t._require_host()
    z = _evaluate(f, _zero(t))
    if isinstance(z, Exception) or not _is_zero(z):
        _refuse(f, (None,), z)
    with np.errstate(all="ignore"):
        return mapped(t, f(t.raw_values, **kwargs))


def binary(f, a, b):
    """``f(a, b)`` for a binary ufunc with at least one Tensor operand (module docstring)."""
    a, b = operand(a), operand(b)
    ta, tb = isinstance(a, Tensor), isinstance(b, Tensor)
    if ta and tb:
        return _both(f, a, b)
    if not (ta or tb):                        # all-dense Tensors: NumPy's ufunc on their arrays
        return f(a, b)
    t, x, left = (a, b, True) if ta else (b, a, False)
    t._require_host()
    if _scalar(x):
        x = x.item() if isinstance(x, np.ndarray) else x
        args = (None, x) if left else (x, None)
        z = _evaluate(f, _zero(t), x) if left else _evaluate(f, x, _zero(t))
        if isinstance(z, Exception) or not _is_zero(z):
            _refuse(f, args, z)
        with np.errstate(all="ignore"):
            out = f(t.raw_values, x) if left else f(x, t.raw_values)
        return _finish(f, mapped(t, out))
    return _with_array(f, t, x, left)


def _with_array(f, t: Tensor, x: np.ndarray, left: bool) -> Tensor:
    try:
        shape = tuple(np.broadcast_shapes(t.shape, x.shape))
    except ValueError:
        raise ShapeError(f"np.{f.__name__}: operands of shapes {t.shape} and {x.shape} do not broadcast") from None
    if shape != t.shape:
        from .elementwise import broadcast_tensor

        t = broadcast_tensor(t, shape)
    z = _evaluate(f, _zero(t), x) if left else _evaluate(f, x, _zero(t))
    if isinstance(z, Exception) or not _is_zero(z):
        bad = z if isinstance(z, Exception) else np.asarray(z)[np.asarray(z) != 0].flat[0]
        _refuse(f, (None, "x") if left else ("x", None), bad, " (the dense operand x makes it nonzero somewhere)")
    from ..tensor.indexing import entry_positions

    coords, where = entry_positions(t)
    xs = np.broadcast_to(x, shape)[coords]
    with np.errstate(all="ignore"):
        vals = t.raw_values[where]
        got = f(vals, xs) if left else f(xs, vals)
        out = np.zeros(t.raw_values.shape, dtype=np.asarray(got).dtype)
        out[where] = got
    return _finish(f, mapped(t, out))


@dataclass(frozen=True)
class UfuncKey:
    """The plan key of a binary ufunc of two tensors: the ufunc itself and both operands' kinds."""

    ufunc: np.ufunc
    a: OperandKind
    b: OperandKind


@dataclass(frozen=True)
class AlignedPlan:
    """``f(A, B)`` for two matrices of one CSR-family format whose ``f(0, 0)`` is zero: the union
    pattern with both operands' values aligned on it (one compiled pass,
    :func:`ustc.tensor.fastpaths.aligned`), ``f`` over the aligned values (one NumPy call), zero
    results dropped."""

    ufunc: np.ufunc
    layout: Layout

    def __post_init__(self):
        if self.ufunc.nin != 2 or self.ufunc.nout != 1 or fastpaths.family(self.layout.fmt) is None:
            raise ValueError("AlignedPlan: a binary ufunc over a CSR-family layout")

    def __call__(self, a: Tensor, b: Tensor) -> Tensor:
        checked(a)                     # index buffers in bounds before the kernel reads them (cached)
        checked(b)
        pos, crd, left, right = fastpaths.aligned(a, b)
        with np.errstate(all="ignore"):
            values = self.ufunc(left, right)
        return fastpaths.from_aligned(self.layout, pos, crd, values, a.package)

    def release(self) -> None:
        """Nothing to drop: the plan holds no operand."""


def _both(f, a: Tensor, b: Tensor) -> Tensor:
    """Two sparse operands: the union of their patterns, ``f`` of the aligned values (a cached
    :class:`AlignedPlan` for two matrices of one CSR-family format)."""
    from ..tensor.indexing import _joint_keys
    from .elementwise import broadcast_tensor, union_format
    from .methods import canonical_entries

    key = UfuncKey(f, kind(a), kind(b)) if a.shape == b.shape else None
    plan = ELEMENTWISE.get(key) if key is not None else None
    if plan is not None:
        return plan(a, b)
    try:
        shape = tuple(np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        raise ShapeError(f"np.{f.__name__}: operands of shapes {a.shape} and {b.shape} do not broadcast") from None
    a, b = broadcast_tensor(a, shape), broadcast_tensor(b, shape)
    za = np.zeros((), a.dtype)
    z = _evaluate(f, za, np.zeros((), b.dtype))
    if isinstance(z, Exception) or not _is_zero(z):
        _refuse(f, (None, None), z, " (both operands are sparse)")
    if key is not None and fastpaths.mergeable(a, b, bools=True):
        plan = AlignedPlan(f, Layout.of(a.format, shape))
        ELEMENTWISE.put(key, plan)
        return plan(a, b)
    ca, va = canonical_entries(a)
    cb, vb = canonical_entries(b)
    ka, kb = _joint_keys(list(ca), list(cb), shape)
    every, first = np.unique(np.concatenate([ka, kb]), return_index=True)
    coords = tuple(np.concatenate([x, y])[first] for x, y in zip(ca, cb))
    left = np.zeros(len(every), dtype=va.dtype)
    right = np.zeros(len(every), dtype=vb.dtype)
    left[np.searchsorted(every, ka)] = va
    right[np.searchsorted(every, kb)] = vb
    with np.errstate(all="ignore"):
        vals = f(left, right)
    out = Tensor.from_coo(coords, vals, shape, union_format(a.format, b.format))
    out = out.with_package(a.package)
    return out


def _finish(f, t: Tensor) -> Tensor:
    """Comparison results: ``False`` entries dropped where that is cheap (CSR, CSC, COO)."""
    if f in COMPARISONS:
        from .methods import eliminate_zeros

        eliminate_zeros(t, cheap_only=True)
    return t


def compare(f, t: Tensor, other):
    """``t op other`` for a comparison ufunc ``f`` (Python's comparison operators).

    ``A == B`` between two ustc Tensors is identity, as before comparisons were element-wise
    (element-wise it would be dense: ``0 == 0``): tensors stay usable as keys of dicts and weak
    dicts, whose lookups compare a tensor with itself."""
    if f is np.equal and isinstance(other, Tensor):
        return t is other
    if other is None or not (isinstance(other, (numbers.Number, np.generic, np.ndarray, list, tuple, Tensor))
                             or sparse_like(other) or packages.is_torch(other)):
        return NotImplemented
    return binary(f, t, other)


def array_ufunc(t: Tensor, ufunc, method: str, inputs, kwargs):
    """``Tensor.__array_ufunc__``: NumPy's protocol, so ``np.abs(A)``, ``x * A`` and ``x < A``
    reach ustc (module docstring)."""
    out = kwargs.pop("out", None)
    if out is not None and any(o is not None for o in out):
        raise UnsupportedOperation(f"np.{ufunc.__name__}(..., out=...) is not supported for ustc Tensors")
    if method == "reduce":
        return _reduce(ufunc, inputs, kwargs)
    if method != "__call__":
        raise UnsupportedOperation(f"np.{ufunc.__name__}.{method} is not supported for ustc Tensors")
    dtype = kwargs.pop("dtype", None)
    if kwargs:
        raise UnsupportedOperation(f"np.{ufunc.__name__}: the arguments {sorted(kwargs)} are not supported "
                                   f"for ustc Tensors")
    if ufunc.nout != 1:
        raise UnsupportedOperation(f"np.{ufunc.__name__} has {ufunc.nout} outputs; apply it to A.to_dense()")
    result = _call(ufunc, inputs)
    if dtype is not None and isinstance(result, Tensor):
        from .methods import astype

        result = astype(result, dtype, copy=False)
    return result


def _call(ufunc, inputs):
    from . import elementwise

    if ufunc.nin == 1:
        (x,) = inputs
        if ufunc is np.negative:
            return -x
        if ufunc is np.positive:
            return x.copy()
        return unary(ufunc, x)
    a, b = inputs
    ops = {np.add: "+", np.subtract: "-", np.multiply: "*"}
    if ufunc in ops:
        if isinstance(a, Tensor):
            return elementwise.binary(a, b, ops[ufunc])
        return elementwise.binary(b, a, ops[ufunc], reflected=True)
    if ufunc is np.matmul:
        from .matmul import matmul

        return matmul(a, b)
    return binary(ufunc, a, b)


def _reduce(ufunc, inputs, kwargs):
    from . import methods

    (t,) = inputs
    axis = kwargs.pop("axis", 0)
    kwargs.pop("dtype", None)
    if kwargs.pop("keepdims", False) or kwargs:
        raise UnsupportedOperation(f"np.{ufunc.__name__}.reduce: only axis= is supported for ustc Tensors")
    if ufunc is np.add:
        return t.sum(axis)
    if ufunc is np.maximum:
        return methods.extreme(t, axis, np.maximum)
    if ufunc is np.minimum:
        return methods.extreme(t, axis, np.minimum)
    raise UnsupportedOperation(f"np.{ufunc.__name__}.reduce is not supported for ustc Tensors")
