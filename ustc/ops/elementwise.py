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
from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError
from ..tensor import fastpaths, kernels, packages
from ..tensor.storage import Layout
from ..tensor.tensor import Tensor, as_format
from ..codegen import notation as nt
from . import runtime
from .operands import OperandKind, checked, dense_operand, kind, sparse_like
from .plan_cache import ELEMENTWISE, KernelPlan


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
    result = result.with_package(a.package)
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


@dataclass(frozen=True)
class ElementwiseKey:
    """The plan key of one element-wise statement: what it computes (``op``: '+', '-', '*',
    'neg', or 'broadcast*' for a product with a broadcast array), which side the tensor is on,
    and the operands' kinds (``b`` None for a unary statement)."""

    op: str
    reflected: bool
    a: OperandKind
    b: OperandKind | None


@dataclass(frozen=True)
class MergePlan:
    """``a op b`` for two matrices of one CSR-family format: the merge kernels
    (:func:`ustc.tensor.fastpaths.merge`); ``swap``: compute ``b op a``."""

    merge: fastpaths.Merge
    swap: bool = False

    def __post_init__(self):
        if self.swap and self.merge.op != kernels.SUB:
            raise ValueError("MergePlan: only a difference depends on the operands' order")

    def __call__(self, a: Tensor, b: Tensor) -> Tensor:
        checked(a)                     # index buffers in bounds before the kernels read them (cached)
        checked(b)
        return fastpaths.merge(self.merge, *((b, a) if self.swap else (a, b)), a.package)

    def release(self) -> None:
        """Nothing to drop: the plan holds no operand."""


_MERGE_OPS = {"+": kernels.ADD, "-": kernels.SUB, "*": kernels.MUL}


def binary(a: Tensor, other, op: str, reflected: bool = False):
    """``a op other`` (or ``other op a`` when ``reflected``) for op in '+', '-', '*'.

    A repeated call with operands of the same kinds takes its plan from
    :data:`ustc.ops.plan_cache.ELEMENTWISE` and only binds and runs."""
    if sparse_like(other) and not isinstance(other, Tensor):
        other = Tensor.from_package(other)       # SciPy / torch / CuPy sparse: a zero-copy Tensor
    if isinstance(other, Tensor) and other.shape == a.shape:
        result = _pair(a, other, op, reflected)   # the common case first: no broadcasting
        if result is not None:
            return result
    other = dense_operand(other)
    if a.format.all_dense:
        if isinstance(other, Tensor):            # a sparse other: it leads, a is its dense operand
            return binary(other, a.to_dense(), op, reflected=not reflected)
        return _dense_binary(a, other, op, reflected)
    scalar = isinstance(other, numbers.Number) or (isinstance(other, np.ndarray) and other.ndim == 0)
    if scalar:
        return _with_scalar(a, other, op, reflected)
    if not isinstance(other, Tensor):
        other = packages.host_array(other)
    shape = broadcast_shape(a.shape, other.shape, op)
    if isinstance(other, Tensor):
        return _pair(broadcast_tensor(a, shape), broadcast_tensor(other, shape), op, reflected)
    if op == "*":
        a = broadcast_tensor(a, shape)
        if tuple(other.shape) != shape:
            return _broadcast_product(a, other)
    elif tuple(other.shape) != shape or a.shape != shape:
        a = broadcast_tensor(a, shape)
        other = np.ascontiguousarray(np.broadcast_to(other, shape))
    _check_shapes(a, other, op)
    return _with_array(a, other, op, reflected)


@dataclass(frozen=True)
class _Merged:
    """A merge plan remembered for a pair of layouts (held, so their ids key :data:`_MERGED`
    while the entry lives) and the operands' values and index dtypes, devices and packages
    (everything else of their :func:`~ustc.ops.operands.kind` is in the layout), for the plan
    cache generation it was found in."""

    layouts: tuple
    operands: tuple
    plan: MergePlan
    generation: int


_MERGED: dict[tuple, _Merged] = {}
_MERGED_LIMIT = 64


def _merged_kind(a: Tensor, b: Tensor) -> tuple:
    return (a.raw_values.dtype, b.raw_values.dtype, a.device, b.device, a.package, b.package,
            *(x.dtype for x in a.raw_buffers.values()), None, *(x.dtype for x in b.raw_buffers.values()))


def _pair(a: Tensor, b: Tensor, op: str, reflected: bool):
    """``a op b`` for two tensors of one shape through the plan cache: the merge kernels for one
    CSR-family format, else a generated kernel; None where an operand is all-dense (its array is
    the operand: the caller's general path). A merge plan is also remembered by the operands'
    layouts (:class:`_Merged`): a repeated call checks their dtypes, device and package there
    instead of building and hashing a plan key (~4 us of a 1000^2 A + B)."""
    memo = _MERGED.get((op, reflected, id(a.layout), id(b.layout)))
    if memo is not None and memo.layouts[0] is a.layout and memo.layouts[1] is b.layout \
            and memo.generation == ELEMENTWISE.generation and memo.operands == _merged_kind(a, b):
        ELEMENTWISE.count_hit()
        return memo.plan(a, b)
    key = ElementwiseKey(op, reflected, kind(a), kind(b))
    plan = ELEMENTWISE.get(key)
    if isinstance(plan, MergePlan):
        _remember_merge(op, reflected, a, b, plan)
        return plan(a, b)
    if plan is not None:
        result = plan.execute({"A": a, "B": b}, {})["C"]
    elif a.format.all_dense or b.format.all_dense:
        return None
    elif fastpaths.mergeable(a, b):
        spec = fastpaths.Merge.of(_MERGE_OPS[op], Layout.of(_out_format(a, b, op), a.shape),
                                  np.result_type(a.dtype, b.dtype))
        plan = MergePlan(spec, swap=reflected and op == "-")
        ELEMENTWISE.put(key, plan)
        return plan(a, b)
    else:
        program = _statement(a, op, reflected, "B")
        result = _first_run(key, program, {"A": a, "B": b}, {}, {"C": _out_format(a, b, op)})["C"]
    result = result.with_package(a.package)
    return result


def _remember_merge(op: str, reflected: bool, a: Tensor, b: Tensor, plan: MergePlan) -> None:
    if not ELEMENTWISE.enabled:
        return
    if len(_MERGED) >= _MERGED_LIMIT:
        _MERGED.clear()
    _MERGED[(op, reflected, id(a.layout), id(b.layout))] = _Merged((a.layout, b.layout), _merged_kind(a, b),
                                                                     plan, ELEMENTWISE.generation)


def _out_format(a: Tensor, b: Tensor, op: str):
    """``A + B`` / ``A - B``: :func:`union_format`; ``A * B`` keeps ``A``'s format."""
    return a.format if op == "*" else union_format(a.format, b.format)


def _statement(a: Tensor, op: str, reflected: bool, other: str) -> nt.Program:
    """``C[i, j, ...] = A op B`` (``other`` 'B': an access of the same indices; 's': a scalar)."""
    idx = _indices(a.ndim)
    node = {"+": nt.Add, "-": nt.Sub, "*": nt.Mul}[op]
    A = nt.Access("A", idx)
    b: nt.Expr = nt.Access("B", idx) if other == "B" else nt.Scalar("s")
    rhs = node(b, A) if reflected else node(A, b)
    return nt.Program((nt.Statement(nt.Access("C", idx), rhs),))


def _run_planned(key, program_of, values: dict, scalars: dict, outputs: dict) -> dict:
    """Run the statement ``program_of()`` builds on ``values`` and ``scalars`` through the plan
    cached under ``key``; on a miss see :func:`_first_run`."""
    plan = ELEMENTWISE.get(key)
    if plan is not None:
        return plan.execute(values, scalars)
    return _first_run(key, program_of(), values, scalars, outputs)


def _first_run(key, program: nt.Program, values: dict, scalars: dict, outputs: dict) -> dict:
    """Prepare and run ``program`` as the runtime does (``outputs``: the output bindings, formats
    or dense arrays), then cache its plan under ``key`` (host targets only)."""
    run = runtime.prepare(program, {**values, **scalars, **outputs}, None)
    results = run.run()
    if run.target == "cpu":
        ELEMENTWISE.put(key, KernelPlan.of(program, run))
    return results


def _with_scalar(a: Tensor, other, op: str, reflected: bool):
    """``a op s`` for a Python or NumPy scalar (or 0-d array) ``s``."""
    if op in "+-" and other == 0:
        return negative(a) if op == "-" and reflected else a.copy()
    value = other.item() if isinstance(other, np.ndarray) else other
    # NumPy's rule: a Python scalar takes the tensor's dtype within its kind (float32 * 3 is
    # float32); a NumPy scalar or 0-d array promotes like an array of its dtype
    dtype = np.result_type(a.dtype, other if isinstance(other, (np.ndarray, np.generic)) else value)
    s = dtype.type(value)
    key = ElementwiseKey(op, reflected, kind(a), kind(s))
    if op == "*":
        outputs = {"C": a.format}
    else:
        outputs = {"C": np.zeros(a.shape, dtype=np.result_type(a.dtype, np.asarray(s).dtype))}
    result = _run_planned(key, lambda: _statement(a, op, reflected, "s"), {"A": a}, {"s": s}, outputs)["C"]
    if isinstance(result, Tensor):
        result = result.with_package(a.package)
    return result


def _with_array(a: Tensor, other: np.ndarray, op: str, reflected: bool):
    """``a op x`` for a dense host array ``x`` of ``a``'s shape (dense unless ``op`` is '*')."""
    key = ElementwiseKey(op, reflected, kind(a), kind(other))
    if op == "*":
        outputs = {"C": a.format}
    else:
        outputs = {"C": np.zeros(a.shape, dtype=np.result_type(a.dtype, other.dtype))}
    result = _run_planned(key, lambda: _statement(a, op, reflected, "B"), {"A": a, "B": other}, {}, outputs)["C"]
    if isinstance(result, Tensor):
        result = result.with_package(a.package)
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
    scalars = {k: v for k, v in bindings.items() if k == "s"}
    values = {"A": a, **{k: v for k, v in bindings.items() if k != "s"}}
    key = ElementwiseKey("broadcast*", False, kind(a), kind(other))
    program = lambda: nt.Program((nt.Statement(nt.Access("C", idx), nt.Mul(nt.Access("A", idx), b)),))  # noqa: E731
    result = _run_planned(key, program, values, scalars, {"C": a.format})["C"]
    if isinstance(result, Tensor):
        result = result.with_package(a.package)
    return result


def negative(a: Tensor) -> Tensor:
    """``-a`` in ``a``'s format (a planned kernel, cached like the binary operators)."""
    idx = _indices(a.ndim)
    program = lambda: nt.Program((nt.Statement(nt.Access("C", idx), nt.Neg(nt.Access("A", idx))),))  # noqa: E731
    key = ElementwiseKey("neg", False, kind(a), None)
    return _run_planned(key, program, {"A": a}, {}, {"C": a.format})["C"]


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
    return Tensor(_permuted_format(a.format, perm), shape, a.raw_buffers, a.raw_values, device=a.device,
                  package=a.package)


@functools.lru_cache(maxsize=256)     # a transposed weight is viewed at every forward call
def _permuted_format(fmt, perm: tuple[int, ...]):
    """``fmt`` with its dimensions listed in ``perm`` order (same levels: a zero-copy view)."""
    from ..format.ir import TensorFormat

    return TensorFormat(tuple(fmt.dims[p] for p in perm), fmt.levels, fmt.pos_width, fmt.crd_width)
