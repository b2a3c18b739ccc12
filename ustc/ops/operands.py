"""Operands of a matrix product, normalised: what :class:`ustc.Matmul` plans for.

Sparse inputs (ustc Tensors, SciPy / torch / CuPy sparse objects) become ustc
Tensors, zero-copy; dense inputs (NumPy, torch, CuPy) stay arrays of their
package. :class:`OperandSpec` is the hashable part that a plan depends on —
kind, format signature, shape, dtype, index dtypes, device — and
:class:`Problem` is the whole plan key.
"""

from __future__ import annotations

import numbers
import weakref
from dataclasses import dataclass

import numpy as np

from ..errors import DeviceError, ShapeError, UstcError
from ..tensor import packages
from ..tensor.safety import ensure_safe
from ..tensor.tensor import Tensor


@dataclass(frozen=True)
class OperandSpec:
    """What a plan depends on for one operand."""

    name: str
    sparse: bool
    format: str | None        # format signature (sparse) or None
    shape: tuple[int, ...]
    dtype: str
    index: tuple[str, ...]     # index buffer dtypes (sparse)
    device: str
    package: str

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class Problem:
    """The plan key: operands, transposes, the kind of alpha and beta, output format, options."""

    a: OperandSpec
    b: OperandSpec
    c: OperandSpec | None
    transpose_a: bool
    transpose_b: bool
    alpha: str                 # "one" or a scalar type name
    beta: str                  # "zero" or a scalar type name
    out_format: str | None
    route: str | None
    target: str
    out_dtype: str = ""        # the result's dtype (c's own where c is updated in place)

    @property
    def device(self) -> str:
        return self.a.device


@dataclass(frozen=True)
class OperandKind:
    """What an element-wise or einsum plan depends on for one operand: a Tensor's format
    signature, shape, dtype, index dtypes, device and package; a dense array's shape, dtype,
    device and package (``format`` None); a scalar's dtype (``scalar`` True, shape ``()``)."""

    format: str | None
    shape: tuple[int, ...]
    dtype: str
    index: tuple[str, ...] = ()
    device: str = "cpu"
    package: str = packages.NUMPY
    scalar: bool = False


def kind(x) -> OperandKind:
    """``x``'s :class:`OperandKind` (a Tensor, a dense array of any package, or a NumPy scalar)."""
    if isinstance(x, Tensor):
        layout = x.layout
        return OperandKind(layout.fmt.signature, layout.shape, dtype_name(x.raw_values.dtype), _index_names(x.raw_buffers),
                           x.device, x.package)
    if isinstance(x, np.generic):
        return OperandKind(None, (), dtype_name(x.dtype), scalar=True)
    return OperandKind(None, tuple(x.shape), dtype_name(x.dtype), (), packages.device_of(x), package_of(x))


def _index_names(buffers: dict) -> tuple[str, ...]:
    """The distinct dtype names of a Tensor's index buffers, sorted."""
    names = {dtype_name(b.dtype) for b in buffers.values()}
    return tuple(sorted(names)) if len(names) > 1 else tuple(names)


_CHECKED: dict[int, tuple] = {}   # id(tensor) -> what checked(tensor) last saw (weak references)
_CHECKED_LIMIT = 256


def checked(t: Tensor) -> None:
    """:func:`~ustc.tensor.safety.ensure_safe` for a Tensor a planned call binds, remembered per
    Tensor object: the same object with the same layout, values length and buffer arrays (the
    same objects under the same keys, of the same shapes and dtypes) is not looked up again
    (safety's own cache costs ~4 us a hit: it keys every buffer by its address). The memo holds
    weak references only; anything else goes to ``ensure_safe``."""
    seen = _CHECKED.get(id(t))
    buffers = t.raw_buffers
    if seen is not None and seen[0]() is t and seen[1] is t.layout and seen[2] == len(t.raw_values) \
            and len(seen[3]) == len(buffers):
        for key, ref, shape, dtype in seen[3]:
            a = buffers.get(key)
            if a is None or ref() is not a or a.shape != shape or a.dtype != dtype:
                break
        else:
            return
    ensure_safe(t)
    try:
        arrays = tuple((key, weakref.ref(b), b.shape, b.dtype) for key, b in buffers.items())
        entry = (weakref.ref(t), t.layout, len(t.raw_values), arrays)
    except TypeError:                  # not weak-referenceable: checked by ensure_safe every time
        return
    if len(_CHECKED) >= _CHECKED_LIMIT:
        _CHECKED.clear()
    _CHECKED[id(t)] = entry


def sparse_like(x) -> bool:
    """A ustc Tensor or a sparse object of SciPy, torch or CuPy."""
    if isinstance(x, Tensor):
        return True
    if packages.is_torch(x):
        return x.layout is not __import__("torch").strided
    module = type(x).__module__
    return module.startswith("scipy.sparse") or module.startswith("cupyx.scipy.sparse")


def normalise(x, name: str):
    """``x`` as a ustc Tensor (sparse) or an array of its own package (dense); zero-copy."""
    if x is None:
        return None
    if sparse_like(x):
        t = x if isinstance(x, Tensor) else Tensor.from_package(x)
        ensure_safe(t)                 # index buffers in bounds before any kernel reads them (cached)
        return t
    if packages.is_cupy(x) or (packages.is_torch(x) and x.device.type != "cpu"):
        return x
    if isinstance(x, numbers.Number):
        raise ShapeError(f"matmul: operand {name} is a scalar; scale with alpha or beta instead")
    try:
        return packages.host_array(x)
    except UstcError:
        raise
    except Exception as exc:  # noqa: BLE001 - anything NumPy cannot read is a bad operand
        raise UstcError(f"matmul: operand {name} ({type(x).__name__}) is not an array or a tensor: {exc}") from None


def dense_operand(x):
    """``x``, or its array (in its package; a view where the levels permute the dimensions)
    when it is a Tensor whose levels are all dense: such a Tensor is a dense operand."""
    return x.to_dense() if isinstance(x, Tensor) and x.format.all_dense else x


def package_of(x) -> str:
    """The package a dense input came from (its result goes back as that package)."""
    if isinstance(x, Tensor):
        return x.package
    return packages.TORCH if packages.is_torch(x) else packages.CUPY if packages.is_cupy(x) else packages.NUMPY


_DTYPE_NAMES: dict = {}


def dtype_name(dtype) -> str:
    """``"float64"`` for a NumPy, CuPy or torch dtype (memoised: NumPy's ``str(dtype)`` runs
    Python code, and every one-shot call names four of them)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


def spec(x, name: str, package: str | None = None) -> OperandSpec:
    """``x``'s plan-relevant description; ``package``: where a dense ``x`` came from (before
    :func:`normalise` viewed it as NumPy)."""
    if isinstance(x, Tensor):
        index = tuple(sorted({dtype_name(buf.dtype) for buf in x.raw_buffers.values()}))
        return OperandSpec(name, True, x.format.signature, tuple(x.shape), dtype_name(np.dtype(x.dtype)), index,
                           x.device, x.package)
    device = packages.device_of(x)
    package = package or package_of(x)
    return OperandSpec(name, False, None, tuple(int(n) for n in x.shape), dtype_name(x.dtype), (), device, package)


def scalar_kind(value, neutral) -> str:
    if not isinstance(value, (numbers.Number, np.generic)):
        raise UstcError(f"matmul: alpha and beta must be numbers, got {type(value).__name__}")
    if value == neutral and not isinstance(value, (complex, np.complexfloating)):
        return "one" if neutral == 1 else "zero"
    return np.asarray(value).dtype.name


def check_devices(specs) -> str:
    devices = {(s.name, s.device) for s in specs if s is not None}
    seen = sorted({d for _, d in devices})
    if len(seen) > 1:
        where = ", ".join(f"{n} on {d}" for n, d in sorted(devices))
        raise DeviceError(f"matmul: operands live on different devices ({where}); move them with .to(device)")
    return seen[0]


def product_shape(a: OperandSpec, b: OperandSpec) -> tuple[int, ...]:
    """NumPy ``matmul`` shape rules: vectors, matrices and batches of matrices of any rank
    (batch dimensions equal on both sides, or one side a plain matrix broadcast over them)."""
    for s in (a, b):
        if s.ndim == 0:
            raise ShapeError(f"matmul: operand {s.name} is a scalar (shape ()); scale with alpha or beta instead")
    batch_a, batch_b = a.shape[:-2], b.shape[:-2]
    if batch_a and batch_b and batch_a != batch_b:
        raise ShapeError(f"matmul: batch shapes differ: a has {batch_a}, b has {batch_b} "
                         f"(shapes {a.shape} and {b.shape}); batches must match or one operand be a matrix")
    inner_a = a.shape[-1]
    inner_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if inner_a != inner_b:
        raise ShapeError(f"matmul: a has {inner_a} columns but b has {inner_b} rows "
                         f"(shapes {a.shape} and {b.shape})")
    rows = a.shape[-2:-1] if a.ndim >= 2 else ()
    cols = b.shape[-1:] if b.ndim >= 2 else ()
    return tuple(batch_a or batch_b) + tuple(rows) + tuple(cols)


def _batch(rank: int) -> tuple[str, ...]:
    """Batch index names for ``rank`` batch dimensions (``b``, ``b1``, ``b2``, ...)."""
    return tuple("b" if n == 0 else f"b{n}" for n in range(rank))


def indices(a: OperandSpec, b: OperandSpec) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Index-notation subscripts of a, b and the output (``b``... batch, ``k`` contracted)."""
    ai = _batch(a.ndim - 2) + ("i", "k") if a.ndim >= 2 else ("k",)
    bi = _batch(b.ndim - 2) + ("k", "j") if b.ndim >= 2 else ("k",)
    batch = _batch(max(a.ndim, b.ndim) - 2) if max(a.ndim, b.ndim) > 2 else ()
    out = batch + tuple(x for x in ai if x == "i") + tuple(x for x in bi if x == "j")
    return ai, bi, out


def transposed(x, flag: bool, name: str):
    """``x`` with its last two dimensions swapped (a view) when ``flag``."""
    if not flag:
        return x
    if x.ndim < 2:
        raise ShapeError(f"matmul: transpose_{name} needs a matrix, operand {name} is {x.ndim}-D")
    if isinstance(x, Tensor):
        axes = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
        return x.transpose(axes)
    return x.mT if packages.is_torch(x) else x.swapaxes(-1, -2)
