"""Tensor operators, reductions and transposes, all lowered as index-notation statements.

``A + B`` / ``A - B`` (union of the stored entries) and ``A * B`` (intersection)
keep ``A``'s format when both are sparse; ``A * x`` with a dense array or a
scalar keeps ``A``'s format too (its pattern cannot grow); ``A + x`` with a
dense array or a nonzero scalar is dense. ``A.sum(axis)`` returns a NumPy array
(a NumPy scalar for a full sum). ``A.T`` is a zero-copy view (the format's
dimensions swap, the buffers stay); ``A.transpose(axes, tensor_format=...)``
builds the transpose in any format through a generated kernel. A Tensor whose
levels are all dense is a dense operand: with a sparse one it acts as its array,
and two dense operands give an array of the first one's package.

Dense operands broadcast by NumPy's rules: ``A * row``, ``A * col`` and ``A * x`` run the
statement ``C[i, j] = A[i, j] * B[j]`` (or ``B[i]``, ...) with the broadcast array's own
dimensions, keeping ``A``'s format; ``A + x`` broadcasts ``x`` to the result's shape first (the
result is dense anyway). A sparse operand whose shape is smaller (``(1, n)`` against
``(m, n)``) is broadcast by repeating its entries. SciPy, torch and CuPy sparse operands are
viewed as Tensors (``Tensor.from_package``), so ``A + scipy_matrix`` works like ``A + B``.
"""

from __future__ import annotations

import functools
import numbers

import numpy as np

from ..errors import ShapeError
from ..tensor import packages
from ..tensor.tensor import Tensor, as_format
from ..codegen import notation as nt
from . import runtime
from .operands import dense_operand, sparse_like


def _indices(rank: int) -> tuple[str, ...]:
    letters = "ijklmnopqrstuvwxyzabcdefgh"
    return tuple(letters[k] if k < len(letters) else f"i{k}" for k in range(rank))


def _check_shapes(a: Tensor, other, op: str) -> None:
    shape = tuple(other.shape)
    if shape != a.shape:
        raise ShapeError(f"operands of '{op}' have shapes {a.shape} and {shape} (no broadcasting)")


def broadcast_shape(a_shape, b_shape, op: str) -> tuple[int, ...]:
    """NumPy's broadcast of two shapes, or ShapeError naming the operator."""
    try:
        return tuple(int(n) for n in np.broadcast_shapes(tuple(a_shape), tuple(b_shape)))
    except ValueError:
        raise ShapeError(f"operands of '{op}' have shapes {tuple(a_shape)} and {tuple(b_shape)}, which do not "
                         f"broadcast (no broadcasting between these shapes)") from None


def broadcast_tensor(a: Tensor, shape) -> Tensor:
    """``a`` broadcast to ``shape`` by NumPy's rules: its entries repeated along the new leading
    dimensions and its extent-1 dimensions (``a`` itself when the shape is already ``shape``)."""
    shape = tuple(int(n) for n in shape)
    if a.shape == shape:
        return a
    from ..tensor.indexing import default_format

    lead = len(shape) - a.ndim
    coords, values = a.entries()
    out = [None] * len(shape)
    count = len(values)
    reps = 1
    for d in range(len(shape)):
        src = d - lead
        if src < 0 or a.shape[src] != shape[d]:
            reps *= shape[d]
    index = np.arange(count * reps, dtype=np.int64)
    entry = index // reps if reps else index
    rest = index % reps if reps else index
    for d in reversed(range(len(shape))):
        src = d - lead
        if src >= 0 and a.shape[src] == shape[d]:
            out[d] = coords[src][entry]
        else:
            out[d] = rest % shape[d]
            rest = rest // shape[d]
    fmt = a.format if len(shape) == a.ndim and a.format.holds_any_pattern and not a.format.dense_storage \
        else default_format(len(shape))
    result = Tensor.from_coo(tuple(out), values[entry], shape, fmt)
    result._package = a.package
    return result


def _broadcast_operand(a: Tensor, other: np.ndarray, idx: tuple[str, ...]):
    """``other`` (broadcasting to ``a.shape``) as an access over ``a``'s indices: its extent-1
    and missing dimensions dropped, or a scalar when none is left."""
    lead = a.ndim - other.ndim
    kept = [d for d in range(a.ndim) if d >= lead and other.shape[d - lead] != 1]
    array = np.ascontiguousarray(other.reshape(tuple(a.shape[d] for d in kept)))
    if not kept:
        return nt.Scalar("s"), {"s": array.reshape(()).item()}
    return nt.Access("B", tuple(idx[d] for d in kept)), {"B": array}


_NUMPY_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply}


def binary(a: Tensor, other, op: str, reflected: bool = False):
    """``a op other`` (or ``other op a`` when ``reflected``) for op in '+', '-', '*'."""
    if sparse_like(other) and not isinstance(other, Tensor):
        other = Tensor.from_package(other)       # SciPy / torch / CuPy sparse: a zero-copy Tensor
    other = dense_operand(other)
    if a.format.all_dense:
        if isinstance(other, Tensor):            # a sparse other: it leads, a is its dense operand
            return binary(other, a.to_dense(), op, reflected=not reflected)
        return _dense_binary(a, other, op, reflected)
    scalar = isinstance(other, numbers.Number) or (isinstance(other, np.ndarray) and other.ndim == 0)
    if not scalar:
        if not isinstance(other, Tensor):
            other = packages.host_array(other)
        shape = broadcast_shape(a.shape, other.shape, op)
        if isinstance(other, Tensor):
            a, other = broadcast_tensor(a, shape), broadcast_tensor(other, shape)
        elif op == "*":
            a = broadcast_tensor(a, shape)
            if tuple(other.shape) != shape:
                return _broadcast_product(a, other)
        elif tuple(other.shape) != shape or a.shape != shape:
            a = broadcast_tensor(a, shape)
            other = np.ascontiguousarray(np.broadcast_to(other, shape))
    idx = _indices(a.ndim)
    node = {"+": nt.Add, "-": nt.Sub, "*": nt.Mul}[op]
    A = nt.Access("A", idx)
    bindings: dict = {"A": a}
    if isinstance(other, numbers.Number) or (isinstance(other, np.ndarray) and other.ndim == 0):
        if op in "+-" and other == 0:
            return negative(a) if op == "-" and reflected else a.copy()
        b: nt.Expr = nt.Scalar("s")
        value = other.item() if isinstance(other, np.ndarray) else other
        # NumPy's rule: a Python scalar takes the tensor's dtype within its kind (float32 * 3 is
        # float32); a NumPy scalar or 0-d array promotes like an array of its dtype
        kind = np.result_type(a.dtype, other if isinstance(other, (np.ndarray, np.generic)) else value)
        bindings["s"] = kind.type(value)
        dense_out = op != "*"
    else:
        if not isinstance(other, Tensor):
            other = packages.host_array(other)
        _check_shapes(a, other, op)
        b = nt.Access("B", idx)
        bindings["B"] = other
        dense_out = op != "*" and not isinstance(other, Tensor)
    rhs = node(b, A) if reflected else node(A, b)
    program = nt.Program((nt.Statement(nt.Access("C", idx), rhs),))
    if not dense_out and op != "*":
        out_format = union_format(a.format, other.format)
    else:
        out_format = a.format
    if dense_out:
        dtypes = [a.dtype, np.asarray(bindings.get("B", bindings.get("s"))).dtype]
        bindings["C"] = np.zeros(a.shape, dtype=np.result_type(*dtypes))
    else:
        bindings["C"] = out_format
    result = runtime.execute(program, bindings)["C"]
    if isinstance(result, Tensor):
        result._package = a.package
    return result


def _dense_binary(a: Tensor, other, op: str, reflected: bool):
    """Both operands dense: NumPy's operator on ``a``'s array, the result in ``a``'s package."""
    x = packages.host_array(a.to_dense())
    y = other if isinstance(other, numbers.Number) else packages.host_array(other)
    if not isinstance(y, numbers.Number) and y.ndim:
        broadcast_shape(x.shape, y.shape, op)
    result = _NUMPY_OPS[op](y, x) if reflected else _NUMPY_OPS[op](x, y)
    return packages.wrap(result, a.package)


def union_format(a, b):
    """The format of ``A + B``: ``A``'s, else ``B``'s, else CSF (patterns grow under a union)."""
    from ..formats import CSF, CSR

    for fmt in (a, b):
        if fmt.holds_any_pattern:
            return fmt
    return CSR if a.ndim == 2 else CSF(a.ndim)


def _broadcast_product(a: Tensor, other: np.ndarray) -> Tensor:
    """``a * other`` where ``other`` broadcasts to ``a``'s shape: ``C[i, j] = A[i, j] * B[j]`` (or
    the dimensions ``other`` has), generated like any other statement, in ``a``'s format."""
    idx = _indices(a.ndim)
    b, bindings = _broadcast_operand(a, other, idx)
    bindings["A"] = a
    bindings["C"] = a.format
    program = nt.Program((nt.Statement(nt.Access("C", idx), nt.Mul(nt.Access("A", idx), b)),))
    result = runtime.execute(program, bindings)["C"]
    if isinstance(result, Tensor):
        result._package = a.package
    return result


def negative(a: Tensor) -> Tensor:
    idx = _indices(a.ndim)
    program = nt.Program((nt.Statement(nt.Access("C", idx), nt.Neg(nt.Access("A", idx))),))
    return runtime.execute(program, {"A": a, "C": a.format})["C"]


def reduce_sum(a: Tensor, axis=None):
    """Sum over ``axis`` (None: all; an int or a tuple of ints) as a NumPy array or scalar."""
    idx = _indices(a.ndim)
    if axis is None:
        axes = set(range(a.ndim))
    else:
        axes = {axis} if isinstance(axis, (int, np.integer)) else set(axis)
        axes = {int(x) + a.ndim if int(x) < 0 else int(x) for x in axes}
        bad = [x for x in axes if not 0 <= x < a.ndim]
        if bad:
            raise ShapeError(f"axis {bad[0]} is out of range for a {a.ndim}-D tensor")
    keep = tuple(i for d, i in enumerate(idx) if d not in axes)
    shape = tuple(n for d, n in enumerate(a.shape) if d not in axes)
    out = np.zeros(shape, dtype=np.result_type(a.dtype, np.int64) if a.dtype.kind in "bui" else a.dtype)
    program = nt.Program((nt.Statement(nt.Access("s", keep), nt.Access("A", idx)),))
    result = runtime.execute(program, {"A": a, "s": out})["s"]
    return result[()] if result.ndim == 0 else result


def transpose(a: Tensor, axes=None, tensor_format=None) -> Tensor:
    """The transpose; a zero-copy view unless ``tensor_format`` asks for a stored copy."""
    perm = tuple(reversed(range(a.ndim))) if axes is None else tuple(int(x) for x in axes)
    if sorted(perm) != list(range(a.ndim)):
        raise ShapeError(f"axes {perm} are not a permutation of {a.ndim} dimensions")
    if tensor_format is None:
        return view_transposed(a, perm)
    idx = _indices(a.ndim)
    out = tuple(idx[p] for p in perm)
    program = nt.Program((nt.Statement(nt.Access("B", out), nt.Access("A", idx)),))
    return runtime.execute(program, {"A": a, "B": as_format(tensor_format)})["B"]


def view_transposed(a: Tensor, perm: tuple[int, ...]) -> Tensor:
    shape = tuple(a.shape[p] for p in perm)
    return Tensor(_permuted_format(a.format, perm), shape, a._buffers, a._values, device=a.device,
                  package=a.package)


@functools.lru_cache(maxsize=256)     # a transposed weight is viewed at every forward call
def _permuted_format(fmt, perm: tuple[int, ...]):
    """``fmt`` with its dimensions listed in ``perm`` order (same levels: a zero-copy view)."""
    from ..format.ir import TensorFormat

    return TensorFormat(tuple(fmt.dims[p] for p in perm), fmt.levels, fmt.pos_width, fmt.crd_width)
