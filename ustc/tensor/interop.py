"""Zero-copy ``from_package`` / ``to_package`` for NumPy, SciPy, PyTorch and CuPy.

Every path references the source's buffers; the only arrays ustc creates are
O(1)-sized (the ``[0, nnz]`` root positions of COO and DIA). The format is
derived from the source: SciPy COO gives ``(i, j) -> (i : compressed(nonunique),
j : singleton)`` (with ``nonordered`` / ``nonunique`` where the source is not
canonical), SciPy DIA gives DIAJ, torch hybrid layouts get trailing dense levels.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import replace

import numpy as np

from ..errors import FormatError, UnsupportedOperation
from ..format.expr import Dimension, FloorDiv, Mod
from ..format.ir import TensorFormat
from ..format.levels import LevelFormat, LevelProperty
from . import packages
from .tensor import Tensor

C, D, S = LevelFormat.COMPRESSED, LevelFormat.DENSE, LevelFormat.SINGLETON
NONUNIQUE, NONORDERED = LevelProperty.NONUNIQUE, LevelProperty.NONORDERED


def _dims(rank: int) -> list[Dimension]:
    from ..formats import dimensions

    return dimensions(rank)


def memory_order(x) -> list[int]:
    """Axes of ``x`` from the largest stride to the smallest (the level order of a zero-copy view)."""
    return sorted(range(x.ndim), key=lambda d: -abs(x.strides[d]) if x.shape[d] > 1 else 0)


def _props(ordered: bool, unique: bool) -> tuple:
    return (() if unique else (NONUNIQUE,)) + (() if ordered else (NONORDERED,))


def _spec(level_format, ordered=True, unique=True):
    props = _props(ordered, unique)
    return (level_format, *props) if props else level_format


def _root(nnz: int, like: np.ndarray) -> np.ndarray:
    """The root level's ``pos`` ``[0, nnz]``: one read-only array per (nnz, dtype), so views of the same
    SciPy object taken again hold the same buffers and ``safety.ensure_safe`` checks them once."""
    return _shared_root(int(nnz), like.dtype.str if like.dtype.kind in "iu" else np.dtype(np.int64).str)


@functools.lru_cache(maxsize=256)
def _shared_root(nnz: int, dtype: str) -> np.ndarray:
    root = np.array([0, nnz], dtype=dtype)
    root.flags.writeable = False
    return root


# -- NumPy -------------------------------------------------------------------------


def from_numpy(x: np.ndarray, package: str = packages.NUMPY) -> Tensor:
    """Dense tensor whose level order follows ``x``'s memory order (a view when strides allow)."""
    if x.ndim == 0:
        raise FormatError("a 0-dimensional array is a scalar, not a tensor ustc can store")
    order = memory_order(x)
    moved = x.transpose(order)
    if not moved.flags.c_contiguous:
        order, moved = list(range(x.ndim)), np.ascontiguousarray(x)
    dims = _dims(x.ndim)
    fmt = TensorFormat(dims, {dims[d]: D for d in order})
    return Tensor(fmt, x.shape, {}, moved.reshape(-1), package=package)


# -- SciPy -------------------------------------------------------------------------


def from_scipy(x) -> Tensor:
    kind = x.format
    origin = {"class": type(x)}
    i, j = _dims(2)
    if kind in ("csr", "csc"):
        ordered, unique = _sorted_flags(x)
        outer, inner = (i, j) if kind == "csr" else (j, i)
        fmt = TensorFormat([i, j], {outer: D, inner: _spec(C, ordered, unique)})
        buffers = {(1, "pos"): x.indptr, (1, "crd"): x.indices}
        return Tensor(fmt, x.shape, buffers, x.data, package=packages.SCIPY, origin=origin)
    if kind == "coo":
        return _from_coords(x.coords if hasattr(x, "coords") else (x.row, x.col), x.data, x.shape,
                            bool(x.has_canonical_format), packages.SCIPY, origin)
    if kind == "bsr":
        bm, bn = x.blocksize
        ordered, unique = _sorted_flags(x)
        fmt = TensorFormat([i, j], {i // bm: D, j // bn: _spec(C, ordered, unique), i % bm: D, j % bn: D})
        buffers = {(1, "pos"): x.indptr, (1, "crd"): x.indices}
        return Tensor(fmt, x.shape, buffers, x.data.reshape(-1), package=packages.SCIPY, origin=origin)
    if kind == "dia":
        return _from_dia(x, origin)
    raise UnsupportedOperation(f"SciPy '{kind}' matrices have no zero-copy ustc view; call .tocsr() first")


def _sorted_flags(x) -> tuple[bool, bool]:
    canonical = bool(x.has_canonical_format)
    return (True, True) if canonical else (bool(x.has_sorted_indices), False)


def _from_dia(x, origin) -> Tensor:
    i, j = _dims(2)
    offsets, data = x.offsets, x.data
    if data.shape[1] != x.shape[1]:  # SciPy allows a shorter/longer data row; ustc needs ncols
        fixed = np.zeros((data.shape[0], x.shape[1]), dtype=data.dtype)
        width = min(data.shape[1], x.shape[1])
        fixed[:, :width] = data[:, :width]
        data = fixed
    ordered = bool(len(offsets) < 2 or (np.diff(offsets) > 0).all())
    unique = ordered or len(np.unique(offsets)) == len(offsets)
    fmt = TensorFormat([i, j], {j - i: _spec(C, ordered, unique), j: LevelFormat.RANGE})
    buffers = {(0, "pos"): _root(len(offsets), offsets), (0, "crd"): offsets}
    return Tensor(fmt, x.shape, buffers, data.reshape(-1), package=packages.SCIPY, origin=origin)


def _from_coords(coords, values, shape, canonical: bool, package, origin, dense_shape=()) -> Tensor:
    """COO of ``len(coords)`` sparse dims (+ trailing dense dims of a hybrid tensor)."""
    rank = len(coords) + len(dense_shape)
    dims = _dims(rank)
    levels = {dims[0]: _spec(C, canonical, False)}
    for d in dims[1:len(coords) - 1]:
        levels[d] = _spec(S, canonical, False)
    if len(coords) > 1:
        levels[dims[len(coords) - 1]] = _spec(S, canonical, canonical)
    else:
        levels[dims[0]] = _spec(C, canonical, canonical)
    levels.update({d: D for d in dims[len(coords):]})
    buffers = {(0, "pos"): _root(len(values), coords[0]), (0, "crd"): coords[0]}
    buffers.update({(k, "crd"): c for k, c in enumerate(coords) if k})
    return Tensor(TensorFormat(dims, levels), shape, buffers, values.reshape(-1), package=package, origin=origin)


def to_scipy(t: Tensor):
    """SciPy array (or the matrix class the tensor came from) sharing ``t``'s buffers."""
    import scipy.sparse as sp

    cls = t._origin.get("class")
    kind = _scipy_kind(t.format)
    if kind is None:
        raise UnsupportedOperation(f"no SciPy class holds format {t.format}; use to_dense() or convert() "
                                   f"to CSR, CSC, COO, BSR or DIAJ")
    b, v = t._buffers, t._values
    if kind in ("csr", "csc"):
        cls = cls or (sp.csr_array if kind == "csr" else sp.csc_array)
        return cls((v, b[(1, "crd")], b[(1, "pos")]), shape=t.shape, copy=False)
    if kind == "coo":
        cls = cls or sp.coo_array
        return cls((v, (b[(0, "crd")], b[(1, "crd")])), shape=t.shape, copy=False)
    if kind == "bsr":
        bm, bn = t.level_shape[2], t.level_shape[3]
        if t.shape[0] % bm or t.shape[1] % bn:
            raise UnsupportedOperation(f"SciPy BSR needs the shape {t.shape} to be a multiple of the block "
                                       f"({bm}, {bn}); convert to CSR or pad the matrix")
        cls = cls or sp.bsr_array
        return cls((v.reshape(-1, bm, bn), b[(1, "crd")], b[(1, "pos")]), shape=t.shape, copy=False)
    cls = cls or sp.dia_array
    return cls((v.reshape(-1, t.shape[1]), b[(0, "crd")]), shape=t.shape, copy=False)


@functools.lru_cache(maxsize=1024)      # formats are frozen and hashable; planning asks often
def _scipy_kind(fmt: TensorFormat) -> str | None:
    """'csr' | 'csc' | 'coo' | 'bsr' | 'dia' when SciPy has a class for ``fmt``, else None."""
    from .. import formats

    plain = plain_format(fmt)
    for kind, ref in (("csr", formats.CSR), ("csc", formats.CSC), ("coo", formats.COO()), ("dia", formats.DIAJ)):
        if plain == plain_format(ref):
            return kind
    exprs = [lv.expr for lv in fmt.levels]
    if len(exprs) == 4 and all(isinstance(e, (FloorDiv, Mod)) for e in exprs) \
            and plain == plain_format(formats.BSR(exprs[2].constant, exprs[3].constant)):
        return "bsr"
    return None


@functools.lru_cache(maxsize=1024)
def plain_format(fmt: TensorFormat) -> TensorFormat:
    """``fmt`` without level properties and index widths (libraries track those themselves)."""
    return TensorFormat(fmt.dims, [(lv.expr, replace(lv.type, properties=())) for lv in fmt.levels])


# -- dispatch -------------------------------------------------------------------------


def from_package(x, *, validate: bool = False) -> Tensor:
    """A ustc view of ``x`` (see the module docstring)."""
    if isinstance(x, Tensor):
        t = x
    elif isinstance(x, np.ndarray):
        t = from_numpy(x)
    elif _is_scipy_sparse(x):
        t = from_scipy(x)
    elif packages.is_torch(x):
        from .interop_torch import from_torch

        t = from_torch(x)
    elif packages.is_cupy(x) or _is_cupy_sparse(x):
        from .interop_cupy import from_cupy

        t = from_cupy(x)
    else:
        raise UnsupportedOperation(f"cannot view a {type(x).__module__}.{type(x).__name__} as a ustc tensor")
    return t.validate() if validate else t


def to_package(t: Tensor):
    if t.package == packages.TORCH:
        from .interop_torch import to_torch

        return to_torch(t)
    if t.package == packages.CUPY:
        from .interop_cupy import to_cupy

        return to_cupy(t)
    if t._origin.get("class") is None and _dense_order(t) is not None:
        return t.to_dense()
    return to_scipy(t)


def _dense_order(t: Tensor):
    from .tensor import _dense_permutation

    return _dense_permutation(t.format)


def _is_scipy_sparse(x) -> bool:
    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and sparse.issparse(x)


def _is_cupy_sparse(x) -> bool:
    sparse = sys.modules.get("cupyx.scipy.sparse")
    return sparse is not None and sparse.issparse(x)
