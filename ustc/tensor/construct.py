"""Constructors and combinators: ``eye``, ``diags``, ``random``, ``kron``, ``vstack``,
``hstack``, ``block``, ``concatenate``.

    >>> import numpy as np, ustc
    >>> ustc.eye(3, k=1, tensor_format="DIAI").to_dense().tolist()
    [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    >>> A = ustc.diags([[1, 2, 3], [4, 5]], [0, 1])
    >>> ustc.block([[A, None], [None, np.ones((1, 1))]]).to_dense().tolist()
    [[1.0, 4.0, 0.0, 0.0], [0.0, 2.0, 5.0, 0.0], [0.0, 0.0, 3.0, 0.0], [0.0, 0.0, 0.0, 1.0]]

The SciPy counterparts (``scipy.sparse.eye_array``, ``diags_array``, ``random_array``,
``kron``, ``vstack``, ``hstack``, ``block_array``) are the reference for what each
computes. Every function here follows one contract:

* **Operands** may be ustc Tensors (on the host), SciPy sparse arrays or matrices (any
  class; those without a zero-copy ustc view are read through their ``tocoo()``), torch
  sparse or dense CPU tensors, or dense array-likes. Only their stored entries are read
  (a dense operand's nonzeros); an operand is never modified.
* **Building**: the result's coordinates and values are computed with vectorised NumPy,
  then made a tensor by ustc's own conversion: :meth:`Tensor.from_coo` (duplicates summed,
  zeros dropped, the COO tensor) and :meth:`Tensor.convert` to the target, whose generated
  writer kernels write the target in its own format. Nothing is densified unless the
  target is itself a dense format.
* **Format**: ``tensor_format`` (a TensorFormat, DSL text or a named format) of the
  result's rank. The default is CSR; the stacking functions (``vstack``, ``hstack``,
  ``block``, ``concatenate``) default to the first operand's format when that operand is
  sparse and its format holds any pattern (not dense storage, not n:m structured), else CSR
  (for ``concatenate`` of other than 2-D operands: COO of that rank).
* **dtype**: ``dtype=`` casts the values (as NumPy's ``astype``); the default is the
  operands' common type (``numpy.result_type``), float64 for ``eye`` and ``random``.
* **Errors**: operands whose shapes do not fit raise :class:`ustc.ShapeError` naming the
  function, the operand (``blocks[1][0]``, ``operand 2``, ``B``) and its shape. The number
  of entries is known before any coordinate array is allocated; a result whose
  construction would need more than :func:`ustc.memory.memory_budget` bytes (its int64
  coordinates and values, counted five times: the operands' entries, the result's, and the
  sorted copies ``from_coo`` makes;
  ``USTC_MEMORY_BUDGET`` overrides the budget) raises :class:`ustc.StorageError` first, and
  the target's writer refuses a target it cannot fit the same way.
"""

from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass

import numpy as np

from ..errors import DeviceError, FormatError, ShapeError, StorageError, UnsupportedOperation, UstcError
from ..format.ir import TensorFormat
from ..memory import BUDGET_VARIABLE, memory_budget
from . import packages
from .tensor import Tensor, as_format

__all__ = ["eye", "diags", "random", "kron", "vstack", "hstack", "block", "concatenate"]

#: peak bytes of a construction per byte of the result's int64 coordinates and values: the
#: operands' entries, the result's, and from_coo's sort (a permutation and permuted copies, then
#: zeros filtered out); measured 2.7x (eye) to 4.7x (hstack) with tracemalloc
PEAK_FACTOR = 5
_INDEX_MAX = np.iinfo(np.int64).max


# --------------------------------------------------------------------------- operands


@dataclass
class _Entries:
    """The stored entries of one operand: int64 coordinates per dimension, values, its shape,
    and the format a stacking result may default to (None: not a sparse operand, or one whose
    format does not hold every pattern)."""

    coords: tuple
    values: np.ndarray
    shape: tuple
    default: TensorFormat | None
    row_major: bool = False       # entries sorted row-major and unique (a matrix)

    @property
    def nnz(self) -> int:
        return len(self.values)

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype


def _row_major(fmt: TensorFormat) -> bool:
    """Whether ``entries()`` of a tensor in ``fmt`` come out sorted row-major and unique: two
    levels over the two dimensions in order, both ordered and unique (CSR, DCSR, canonical SciPy
    CSR, dense row-major)."""
    levels = fmt.levels
    return (fmt.ndim == 2 and len(levels) == 2 and all(lv.type.ordered and lv.type.unique for lv in levels)
            and [lv.expr for lv in levels] == list(fmt.dims))


def _sparse_default(fmt: TensorFormat) -> TensorFormat | None:
    return fmt if fmt.holds_any_pattern and not fmt.dense_storage else None


def _entries(x, name: str, fn: str) -> _Entries:
    """``x``'s nonzero entries (explicit zeros dropped); UstcError / DeviceError naming ``name``."""
    if isinstance(x, Tensor):
        if x.device != "cpu":
            raise DeviceError(f"{fn}: {name} is on '{x.device}'; the constructors run on the host "
                              f"(call .to('cpu') first)")
        coords, values = x.entries()
        return _nonzero(coords, values, x.shape, _sparse_default(x.format), _row_major(x.format))
    module = type(x).__module__
    if module.startswith("scipy.sparse"):
        from .interop import plain_format

        try:
            t = Tensor.from_package(x)
        except UnsupportedOperation:           # lil, dok: SciPy reads its own structure
            coo = x.tocoo()
            return _nonzero(tuple(coo.coords), coo.data, tuple(coo.shape), None)
        coords, values = t.entries()
        if x.format == "coo" and t.ndim == 2:   # SciPy's COO may repeat entries: ustc's COO (nonunique)
            from .. import formats

            return _nonzero(coords, values, t.shape, formats.COO())
        return _nonzero(coords, values, t.shape, _sparse_default(plain_format(t.format)), _row_major(t.format))
    if packages.is_cupy(x) or module.startswith("cupyx") or (packages.is_torch(x) and x.device.type != "cpu"):
        raise DeviceError(f"{fn}: {name} is a device array; the constructors run on the host (move it to the "
                          f"CPU first)")
    if packages.is_torch(x) and x.layout is not __import__("torch").strided:
        return _entries(Tensor.from_package(x), name, fn)
    if x is None or isinstance(x, (str, bytes, dict)):
        raise UstcError(f"{fn}: {name} is {type(x).__name__}, not a tensor, a sparse matrix or an array")
    try:
        array = packages.host_array(x)
    except Exception as exc:  # noqa: BLE001 - whatever NumPy cannot read is a bad operand
        raise UstcError(f"{fn}: {name} ({type(x).__name__}) is not a tensor, a sparse matrix or an array: "
                        f"{exc}") from None
    if array.dtype.kind not in "biufc":
        raise UstcError(f"{fn}: {name} has dtype {array.dtype}; numbers (bool, integer, float, complex) only")
    if array.ndim == 0:
        raise ShapeError(f"{fn}: {name} is a scalar (shape ()); pass a matrix")
    coords = np.nonzero(array)                  # in row-major order
    return _Entries(tuple(c.astype(np.int64, copy=False) for c in coords), array[coords], tuple(array.shape),
                    None, array.ndim == 2)


def _nonzero(coords, values, shape, default, row_major: bool = False) -> _Entries:
    values = np.asarray(values)
    keep = values != 0
    coords = tuple(np.asarray(c, dtype=np.int64) for c in coords)
    if not keep.all():
        coords, values = tuple(c[keep] for c in coords), values[keep]
    return _Entries(coords, values, tuple(int(n) for n in shape), default, row_major)


def _matrix(e: _Entries, name: str, fn: str) -> None:
    if len(e.shape) != 2:
        raise ShapeError(f"{fn}: {name} has shape {e.shape}; {fn} takes 2-D operands"
                         + (" (ustc.concatenate joins tensors of any rank)" if fn in ("vstack", "hstack", "block")
                            else ""))


# --------------------------------------------------------------------------- sizes


def _extent(value, name: str, fn: str) -> int:
    """A dimension extent: a non-negative integer that fits int64."""
    try:
        n = operator.index(value)
    except TypeError:
        raise ShapeError(f"{fn}: {name} must be a non-negative integer, got {value!r}") from None
    if n < 0 or n > _INDEX_MAX:
        raise ShapeError(f"{fn}: {name} must be a non-negative integer below 2**63, got {n}")
    return n


def _shape(shape, fn: str) -> tuple[int, ...]:
    for d, n in enumerate(shape):
        if n > _INDEX_MAX:
            raise ShapeError(f"{fn}: the result would have shape {tuple(shape)}; dimension {d} exceeds the int64 "
                             f"coordinates ustc stores")
    return tuple(int(n) for n in shape)


def reserve(count: int, ndim: int, dtype, what: str) -> None:
    """StorageError, before anything is allocated, when building ``count`` entries of a rank-``ndim``
    result of ``dtype`` would need more than the memory budget: int64 coordinates and the values,
    counted :data:`PEAK_FACTOR` times (the operands' entries, the result's, ``from_coo``'s sort)."""
    per_entry = 8 * ndim + np.dtype(dtype).itemsize
    need = PEAK_FACTOR * per_entry * int(count)
    budget = memory_budget()
    if need > budget:
        raise StorageError(f"{what}: {count:,} entries would need about {need:,} bytes to build "
                           f"({per_entry} bytes an entry, {PEAK_FACTOR}x while building and sorting), more than the memory "
                           f"budget of {budget:,} bytes ({BUDGET_VARIABLE} sets it)")


# --------------------------------------------------------------------------- the result


def _target(tensor_format, default, ndim: int, fn: str) -> TensorFormat:
    if tensor_format is None:
        if default is not None:
            return default
        from .. import formats

        return formats.CSR if ndim == 2 else formats.COO(ndim) if ndim > 2 else TensorFormat.parse(
            "(i) -> (i : compressed)")
    fmt = as_format(tensor_format)
    if fmt.ndim != ndim:
        raise FormatError(f"{fn}: tensor_format {fmt} has {fmt.ndim} dimensions, the result has {ndim}")
    return fmt


def _build(coords, values, shape, fmt: TensorFormat, *, canonical: bool = False) -> Tensor:
    """The tensor of the entries in ``fmt``: ``from_coo`` (sorted, duplicates summed, zeros
    dropped) and ``convert`` (the generated writer, or ustc's NumPy route for small tensors).
    ``canonical``: the caller promises entries sorted in row-major order and unique (a matrix),
    so the COO tensor ``from_coo`` would build is made from them directly (zeros dropped)."""
    if canonical and len(shape) == 2:
        from .. import formats
        from .dtypes import narrow
        from .storage import Layout

        keep = values != 0                  # a cast to dtype= may have made zeros
        if not keep.all():
            coords, values = tuple(c[keep] for c in coords), values[keep]
        coo = formats.COO()
        layout = Layout.of(coo, shape)
        root = np.array([0, len(values)], dtype=np.int64)
        buffers = narrow(coo, {(0, "pos"): root, (0, "crd"): coords[0], (1, "crd"): coords[1]},
                         layout.level_shape, layout.origins)
        t = Tensor(coo, shape, buffers, values)
    else:
        t = Tensor.from_coo(coords, values, shape)
    return t if t.format == fmt else t.convert(fmt)


def _dtype(dtype, entries, fallback=np.float64) -> np.dtype:
    if dtype is not None:
        return np.dtype(dtype)
    dtypes = [e.dtype for e in entries]
    return np.result_type(*dtypes) if dtypes else np.dtype(fallback)


# --------------------------------------------------------------------------- constructors


def eye(n, m=None, k: int = 0, *, dtype=np.float64, tensor_format=None) -> Tensor:
    """The ``n x m`` matrix (``m`` defaults to ``n``) with ones on diagonal ``k`` (0: the main
    diagonal, > 0 above it, < 0 below), as ``scipy.sparse.eye_array(n, m, k=k)``. Default format
    CSR."""
    n = _extent(n, "n", "eye")
    m = n if m is None else _extent(m, "m", "eye")
    k = _offset(k, "k", "eye")
    dtype = np.dtype(dtype)
    start = max(0, -k)
    count = max(0, min(n, m - k) - start)
    reserve(count, 2, dtype, f"eye: the {n} x {m} identity")
    rows = np.arange(start, start + count, dtype=np.int64)
    values = np.ones(count, dtype)
    return _build((rows, rows + k), values, (n, m), _target(tensor_format, None, 2, "eye"), canonical=True)


def _offset(value, name: str, fn: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise UstcError(f"{fn}: {name} must be an integer, got {value!r}") from None


def diags(diagonals, offsets=0, *, shape=None, tensor_format=None, dtype=None) -> Tensor:
    """A matrix from its diagonals, as ``scipy.sparse.diags_array``: ``diagonals[j]`` is placed on
    diagonal ``offsets[j]`` (0 main, > 0 above, < 0 below), starting at its first entry. With a
    scalar ``offset``, ``diagonals`` is the one diagonal. A diagonal of length 1 (or a scalar) is
    repeated along its whole diagonal; a longer one is cut to the diagonal's length, as SciPy
    does; a shorter one is a ShapeError. ``shape`` defaults to the square matrix that holds the
    first diagonal exactly. Repeated offsets add up. Default format CSR; dtype: the diagonals'
    common type."""
    if np.ndim(offsets) == 0:
        one = _is_scalar(diagonals) or not len(diagonals) or _is_scalar(diagonals[0])
        if not one and len(diagonals) != 1:
            raise ShapeError(f"diags: one offset ({offsets}) but {len(diagonals)} diagonals; pass one offset "
                             f"per diagonal")
        diagonals = [diagonals] if one else list(diagonals)
    else:
        diagonals = list(diagonals)
    offsets = [_offset(o, f"offsets[{j}]", "diags") for j, o in enumerate(np.atleast_1d(offsets).tolist())]
    arrays = []
    for j, d in enumerate(diagonals):
        a = np.atleast_1d(packages.host_array(d) if packages.is_torch(d) else np.asarray(d))
        if a.ndim != 1:
            raise ShapeError(f"diags: diagonals[{j}] has shape {a.shape}; each diagonal is a 1-D array or a scalar")
        if a.dtype.kind not in "biufc":
            raise UstcError(f"diags: diagonals[{j}] has dtype {a.dtype}; numbers only")
        arrays.append(a)
    if len(arrays) != len(offsets):
        raise ShapeError(f"diags: {len(arrays)} diagonals but {len(offsets)} offsets; pass one offset per diagonal")
    if shape is None:
        if not arrays:
            raise ShapeError("diags: no diagonals and no shape; pass shape=")
        side = len(arrays[0]) + abs(offsets[0])
        shape = (side, side)
    if np.ndim(shape) != 1 or len(shape) != 2:
        raise ShapeError(f"diags: shape must be (rows, columns), got {shape!r}")
    m, n = (_extent(s, f"shape[{d}]", "diags") for d, s in enumerate(shape))
    dtype = np.dtype(dtype) if dtype is not None else (np.result_type(*arrays) if arrays else np.dtype(np.float64))
    spans = []
    for j, (a, k) in enumerate(zip(arrays, offsets)):
        length = min(m + k, n - k, min(m, n))
        if length < 0:
            raise ShapeError(f"diags: offsets[{j}] = {k} is outside a matrix of shape {(m, n)} (offsets run from "
                             f"{-(m - 1) if m else 0} to {n - 1 if n else 0})")
        if len(a) not in (1,) and len(a) < length:
            raise ShapeError(f"diags: diagonals[{j}] has length {len(a)} but diagonal {k} of a {m} x {n} matrix "
                             f"has {length} entries")
        spans.append(length)
    total = sum(spans)
    reserve(total, 2, dtype, f"diags: a {m} x {n} matrix")
    rows, cols, values = (np.empty(total, np.int64), np.empty(total, np.int64), np.empty(total, dtype))
    at = 0
    for a, k, length in zip(arrays, offsets, spans):
        part = slice(at, at + length)
        rows[part] = np.arange(max(0, -k), max(0, -k) + length)
        np.add(rows[part], k, out=cols[part])
        values[part] = a[:length] if len(a) != 1 else a[0]
        at += length
    return _build((rows, cols), values, (m, n), _target(tensor_format, None, 2, "diags"))


def _is_scalar(x) -> bool:
    return isinstance(x, (numbers.Number, np.generic)) or (isinstance(x, np.ndarray) and x.ndim == 0)


def random(m, n, density: float = 0.01, *, tensor_format=None, dtype=np.float64, rng=None, seed=None,
           data_sampler=None) -> Tensor:
    """An ``m x n`` matrix with ``round(density * m * n)`` entries at distinct positions drawn
    uniformly, with uniform [0, 1) values (integers over the dtype's range for integer dtypes,
    ``u + 1j v`` for complex), or ``data_sampler(size=nnz)``; default format CSR.

    ``rng`` is a ``numpy.random.Generator`` or anything ``numpy.random.default_rng`` takes (an
    integer seed, a SeedSequence); ``seed`` is the same thing under another name (pass one of
    them). With the same generator state the result equals ``scipy.sparse.random_array((m, n),
    density=density, rng=rng, dtype=dtype)`` (SciPy's sampling: ``rng.choice(m * n, nnz,
    replace=False)``, positions unravelled column-major), except where that sampling would
    allocate more than the memory budget (NumPy's ``choice`` builds an index over all ``m * n``
    positions once ``nnz`` exceeds 2% of them) or ``m * n`` exceeds int64: then positions are
    drawn with replacement and repeats discarded, until ``nnz`` distinct ones remain (the same
    uniform distribution over patterns, another pattern than SciPy's for the same seed). A value
    the sampler draws as 0 is not stored."""
    m, n = _extent(m, "m", "random"), _extent(n, "n", "random")
    try:
        density = float(density)
    except (TypeError, ValueError):
        raise UstcError(f"random: density must be a number in [0, 1], got {density!r}") from None
    if not 0 <= density <= 1:
        raise UstcError(f"random: density must be in [0, 1], got {density}")
    if rng is not None and seed is not None:
        raise UstcError("random: pass rng= or seed=, not both (they are the same thing)")
    gen = np.random.default_rng(rng if rng is not None else seed)
    dtype = np.dtype(dtype)
    total = m * n
    nnz = int(round(density * total))
    reserve(nnz, 2, dtype, f"random: a {m} x {n} matrix of density {density}")
    if total <= _INDEX_MAX and _choice_bytes(total, nnz) <= memory_budget():
        flat = gen.choice(total, size=nnz, replace=False)
        rows, cols = (np.empty(0, np.int64),) * 2 if not nnz else (flat % m, flat // m)
    else:
        rows, cols = _distinct_positions(gen, m, n, nnz)
    values = (data_sampler or _sampler(gen, dtype))(size=nnz)
    values = np.asarray(values).astype(dtype, copy=False)
    if values.shape != (nnz,):
        raise ShapeError(f"random: data_sampler(size={nnz}) returned shape {values.shape}, expected ({nnz},)")
    return _build((rows, cols), values, (m, n), _target(tensor_format, None, 2, "random"))


def _choice_bytes(total: int, k: int) -> int:
    """Bytes ``Generator.choice(total, k, replace=False)`` allocates: an index over every position
    (a tail shuffle) above 2% of a population over 10,000, else Floyd's sampling with a hash set of
    at least 1.2 k slots (a power of two), besides the k results."""
    if total > 10_000 and k > total // 50:
        return 8 * total
    return 8 * k + 8 * (1 << max(1, math.ceil(math.log2(1.2 * k + 1))))


def _distinct_positions(gen, m: int, n: int, k: int):
    """``k`` distinct positions of an ``m x n`` matrix, uniformly: draws with replacement, repeats
    dropped, until at least ``k`` remain; then a uniform subset of ``k`` of them. The process is
    symmetric under relabelling positions, so every ``k``-subset is equally likely. O(k) memory."""
    rows = cols = np.empty(0, np.int64)
    while len(rows) < k:
        need = k - len(rows)
        more = need + need // 8 + 16
        rows = np.concatenate([rows, gen.integers(0, m, size=more, dtype=np.int64)])
        cols = np.concatenate([cols, gen.integers(0, n, size=more, dtype=np.int64)])
        order = np.lexsort((cols, rows))
        rows, cols = rows[order], cols[order]
        first = np.ones(len(rows), bool)
        first[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
        rows, cols = rows[first], cols[first]
    if len(rows) > k:
        keep = np.sort(gen.choice(len(rows), size=k, replace=False))
        rows, cols = rows[keep], cols[keep]
    return rows, cols


def _sampler(gen, dtype: np.dtype):
    """SciPy's default value samplers for ``random_array``."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return lambda size: gen.integers(info.min, info.max, size=size, dtype=dtype)
    if np.issubdtype(dtype, np.complexfloating):
        return lambda size: gen.uniform(size=size) + gen.uniform(size=size) * 1j
    return gen.uniform


# --------------------------------------------------------------------------- combinators


def kron(A, B, *, tensor_format=None, dtype=None) -> Tensor:
    """The Kronecker product: for ``A`` of shape ``(p, q)`` and ``B`` of shape ``(r, s)``, the
    ``(p r, q s)`` matrix whose block ``(i, j)`` is ``A[i, j] * B`` (``scipy.sparse.kron``). It has
    ``nnz(A) * nnz(B)`` entries, counted before they are built. Default format CSR; dtype: the
    operands' common type."""
    a, b = _entries(A, "A", "kron"), _entries(B, "B", "kron")
    _matrix(a, "A", "kron")
    _matrix(b, "B", "kron")
    (p, q), (r, s) = a.shape, b.shape
    shape = _shape((p * r, q * s), "kron")
    dtype = _dtype(dtype, [a, b])
    count = a.nnz * b.nnz
    reserve(count, 2, dtype, f"kron: the product of A {a.shape} ({a.nnz:,} entries) and B {b.shape} "
                             f"({b.nnz:,} entries)")
    rows = (a.coords[0][:, None] * r + b.coords[0][None, :]).reshape(-1)
    cols = (a.coords[1][:, None] * s + b.coords[1][None, :]).reshape(-1)
    values = np.multiply(a.values[:, None], b.values[None, :], dtype=np.result_type(a.dtype, b.dtype))
    values = values.reshape(-1).astype(dtype, copy=False)
    return _build((rows, cols), values, shape, _target(tensor_format, None, 2, "kron"))


def block(blocks, *, tensor_format=None, dtype=None) -> Tensor:
    """The matrix of a grid of blocks, as ``scipy.sparse.block_array``: ``blocks`` is a list of
    rows, each a list of operands or None (an all-zero block). The blocks of one grid row share
    their number of rows, those of one grid column their number of columns (else ShapeError naming
    the block, its shape and the extent its row or column has); a grid row or column that is all
    None has extent 0, as in SciPy. Default format: the first block's (row-major, None skipped)
    where it is sparse and holds any pattern, else CSR."""
    return _block(_grid(blocks), tensor_format, dtype, "block", lambda i, j: f"blocks[{i}][{j}]", True)


def vstack(blocks, *, tensor_format=None, dtype=None) -> Tensor:
    """Matrices stacked top to bottom (``scipy.sparse.vstack``); they share their number of
    columns. ``block([[b] for b in blocks])``: None is an all-zero block of no rows."""
    _sequence(blocks, "vstack")
    return _block([[b] for b in blocks], tensor_format, dtype, "vstack", lambda i, j: f"blocks[{i}]", False)


def hstack(blocks, *, tensor_format=None, dtype=None) -> Tensor:
    """Matrices side by side (``scipy.sparse.hstack``); they share their number of rows.
    ``block([blocks])``: None is an all-zero block of no columns."""
    _sequence(blocks, "hstack")
    return _block([list(blocks)], tensor_format, dtype, "hstack", lambda i, j: f"blocks[{j}]", False)


def _sequence(blocks, fn: str) -> None:
    if not isinstance(blocks, (list, tuple)) and not (isinstance(blocks, np.ndarray) and blocks.dtype == object):
        raise UstcError(f"{fn}: blocks must be a list of matrices, got {type(blocks).__name__}")
    if not len(blocks):
        raise ShapeError(f"{fn}: blocks is empty; pass at least one matrix")


def _grid(blocks) -> list[list]:
    """``blocks`` as a list of equally long rows; UstcError / ShapeError naming what is wrong."""
    if isinstance(blocks, np.ndarray) and blocks.dtype == object and blocks.ndim == 2:
        return [list(row) for row in blocks]
    if not isinstance(blocks, (list, tuple)):
        raise UstcError(f"block: blocks must be a list of rows (lists of blocks or None), got "
                        f"{type(blocks).__name__}")
    if not blocks:
        raise ShapeError("block: blocks is empty; pass at least one row of blocks")
    rows = []
    for i, row in enumerate(blocks):
        if not isinstance(row, (list, tuple)) and not (isinstance(row, np.ndarray) and row.dtype == object):
            raise UstcError(f"block: blocks[{i}] is {type(row).__name__}; blocks must be a list of rows, each a "
                            f"list of blocks or None (ustc.vstack and ustc.hstack take a flat list)")
        rows.append(list(row))
    if len({len(r) for r in rows}) != 1:
        raise ShapeError(f"block: the rows of blocks have different lengths {[len(r) for r in rows]}; the grid "
                         f"must be rectangular (None is an all-zero block)")
    if not rows[0]:
        raise ShapeError("block: the rows of blocks are empty; pass at least one block")
    return rows


def _block(grid, tensor_format, dtype, fn: str, name, lines: bool) -> Tensor:
    """The grid's blocks' entries offset into place. ``name(i, j)``: how errors call block (i, j);
    ``lines``: whether they name its grid row or column (``block``) or just "the other blocks"."""
    heights: list = [None] * len(grid)
    widths: list = [None] * len(grid[0])
    parts = []
    for i, row in enumerate(grid):
        for j, x in enumerate(row):
            if x is None:
                continue
            e = _entries(x, name(i, j), fn)
            _matrix(e, name(i, j), fn)
            for extents, at, size, what in ((heights, i, e.shape[0], "rows"), (widths, j, e.shape[1], "columns")):
                if extents[at] is None:
                    extents[at] = size
                elif extents[at] != size:
                    line = "" if not lines else f" of blocks[{i}][:]" if what == "rows" else f" of blocks[:][{j}]"
                    raise ShapeError(f"{fn}: {name(i, j)} has shape {e.shape}, but the other blocks{line} have "
                                     f"{extents[at]} {what}")
            parts.append((i, j, e))
    row_at = np.concatenate([[0], np.cumsum([h or 0 for h in heights], dtype=object)]).tolist()
    col_at = np.concatenate([[0], np.cumsum([w or 0 for w in widths], dtype=object)]).tolist()
    shape = _shape((row_at[-1], col_at[-1]), fn)
    entries = [e for _, _, e in parts]
    dtype = _dtype(dtype, entries)
    total = sum(e.nnz for e in entries)
    reserve(total, 2, dtype, f"{fn}: a matrix of shape {shape}")
    rows, cols, values = np.empty(total, np.int64), np.empty(total, np.int64), np.empty(total, dtype)
    at = 0
    for i, j, e in parts:
        part = slice(at, at + e.nnz)
        np.add(e.coords[0], row_at[i], out=rows[part])
        np.add(e.coords[1], col_at[j], out=cols[part])
        values[part] = e.values
        at += e.nnz
    default = entries[0].default if entries else None
    # one grid column of row-major operands, stacked in row order: the result is row-major too
    canonical = len(widths) == 1 and all(e.row_major for e in entries)
    return _build((rows, cols), values, shape, _target(tensor_format, default, 2, fn), canonical=canonical)


def concatenate(tensors, axis: int = 0, *, tensor_format=None, dtype=None) -> Tensor:
    """Tensors of one rank joined along ``axis`` (``numpy.concatenate`` for sparse operands): their
    extents agree on every other axis (else ShapeError naming the operand and its shape). Any rank;
    negative ``axis`` counts from the end. Default format: the first operand's where it is sparse
    and holds any pattern, else CSR for matrices (COO of the rank otherwise)."""
    _sequence(tensors, "concatenate")
    entries = []
    for k, x in enumerate(tensors):
        if x is None:
            raise UstcError(f"concatenate: operand {k} is None; every operand must be a tensor or an array")
        entries.append(_entries(x, f"operand {k}", "concatenate"))
    ndim = len(entries[0].shape)
    try:
        axis = operator.index(axis)
    except TypeError:
        raise UstcError(f"concatenate: axis must be an integer, got {axis!r}") from None
    if not -ndim <= axis < ndim:
        raise ShapeError(f"concatenate: axis {axis} is out of range for operand 0 of shape {entries[0].shape} "
                         f"({ndim}-D)")
    axis %= ndim
    first = entries[0].shape
    for k, e in enumerate(entries[1:], 1):
        if len(e.shape) != ndim:
            raise ShapeError(f"concatenate: operand {k} has shape {e.shape} ({len(e.shape)}-D), operand 0 has "
                             f"shape {first} ({ndim}-D); the operands must have one rank")
        if any(a != b for d, (a, b) in enumerate(zip(e.shape, first)) if d != axis):
            raise ShapeError(f"concatenate: operand {k} has shape {e.shape}, operand 0 has shape {first}; along "
                             f"axis {axis} they may differ, on the other axes they must agree")
    offsets = np.concatenate([[0], np.cumsum([e.shape[axis] for e in entries], dtype=object)]).tolist()
    shape = _shape(first[:axis] + (offsets[-1],) + first[axis + 1:], "concatenate")
    dtype = _dtype(dtype, entries)
    total = sum(e.nnz for e in entries)
    reserve(total, ndim, dtype, f"concatenate: a tensor of shape {shape}")
    coords = [np.empty(total, np.int64) for _ in range(ndim)]
    values = np.empty(total, dtype)
    at = 0
    for e, offset in zip(entries, offsets):
        part = slice(at, at + e.nnz)
        for d in range(ndim):
            if d == axis:
                np.add(e.coords[d], offset, out=coords[d][part])
            else:
                coords[d][part] = e.coords[d]
        values[part] = e.values
        at += e.nnz
    canonical = ndim == 2 and axis == 0 and all(e.row_major for e in entries)
    return _build(tuple(coords), values, shape, _target(tensor_format, entries[0].default, ndim, "concatenate"),
                  canonical=canonical)
