"""The everyday SciPy-style methods of a Tensor, on every format.

    >>> import numpy as np, ustc
    >>> A = ustc.Tensor.from_dense(np.array([[1., 0, 2], [0, 0, 3], [4, 0, 0]]), "DIAI")
    >>> A.diagonal().tolist(), A.nnz, A.count_nonzero()   # nnz: the 3 diagonals' in-bound entries
    ([1.0, 0.0, 0.0], 7, 4)
    >>> A.max(axis=1).tolist(), float(A.min()), float(A.mean())
    ([2.0, 3.0, 4.0], 0.0, 1.1111111111111112)
    >>> A.setdiag(7.0)
    >>> A.diagonal().tolist()
    [7.0, 7.0, 7.0]

What each computes is SciPy's (sparse arrays) and NumPy's: reductions see the zeros a tensor
does not store as values, duplicates are summed first, ``axis`` is None, an int or a tuple.

* ``nnz``: stored entries within the shape, explicit zeros and duplicates included (SciPy's
  ``nnz``; padding outside the shape, as in DIA or partial blocks, does not count). O(1) for
  plain formats, O(stored) otherwise. ``count_nonzero(axis=None)``: nonzero values, after
  summing duplicates.
* ``max`` / ``min`` (a scalar, or a NumPy array along ``axis``), ``mean`` (the generated
  ``sum`` divided by the extent; NumPy's dtype rules). A reduction over an empty extent raises
  :class:`ustc.ShapeError` (a ``ValueError``), as NumPy does.
* ``diagonal(k=0)``: a NumPy array. ``setdiag(values, k=0)``: in place; a scalar fills the
  diagonal, an array its first ``len(values)`` entries. New entries follow ``A[i, j] = v``
  (formats that grow by entries, and DIA formats, which take a whole new diagonal).
* ``eliminate_zeros()`` and ``sum_duplicates()``: in place. CSR, CSC and COO (any properties)
  filter their buffers (O(nnz), duplicates kept); other formats are rebuilt in their own format from their entries, so the
  zeros the format must store (blocks, diagonals, n:m groups, delta padding) stay.
  ``sum_duplicates`` sorts, and drops explicit zeros too.
* ``astype(dtype)``: a copy with cast values. ``tocsr()``, ``tocsc()``, ``tocoo()``: the tensor
  itself when already in that format, else ``convert``. ``toarray()``: a NumPy array;
  ``todense()``: ``to_dense()``.

Element-wise maps (``abs``, ``conj``, ``real``, ``imag``, ``power``, ``/``, comparisons) are
zero-preserving ufuncs: see :mod:`ustc.ops.ufuncs`.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..errors import ShapeError, UnsupportedOperation
from ..format.levels.base import prefix_sum
from ..tensor import packages
from ..tensor import indexing
from ..tensor.tensor import Tensor, as_format
from . import ufuncs

# --------------------------------------------------------------------------- entries


def canonical_entries(t: Tensor) -> tuple[tuple, np.ndarray]:
    """``(coords, values)`` with every stored coordinate once (duplicates summed)."""
    coords, values = t.entries()
    if t.format.is_unique or len(values) < 2:
        return coords, values
    k = indexing.keys(list(coords), t.shape)
    order = np.argsort(k, kind="stable")
    ks = k[order]
    starts = np.flatnonzero(np.concatenate([[True], ks[1:] != ks[:-1]]))
    return tuple(c[order][starts] for c in coords), np.add.reduceat(values[order], starts)


def _plain_storage(fmt) -> bool:
    """Every position of the last level is one in-bounds entry: plain levels, no loose gaps."""
    from ..format.levels.loose_compressed import LooseCompressed

    return indexing.plain(fmt) and not any(isinstance(lv.type, LooseCompressed) for lv in fmt.levels)


def nnz(t: Tensor) -> int:
    if _plain_storage(t.format):
        return int(t.nse)
    return int(len(t.entries()[1]))


def _axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    items = axis if isinstance(axis, tuple) else (axis,)
    out = []
    for x in items:
        if not isinstance(x, (numbers.Integral, np.integer)) or isinstance(x, bool):
            raise ShapeError(f"axis must be None, an int or a tuple of ints, got {axis!r}")
        x = int(x)
        if not -ndim <= x < ndim:
            raise ShapeError(f"axis {x} is out of range for a {ndim}-D tensor")
        out.append(x % ndim)
    if len(set(out)) != len(out):
        raise ShapeError(f"axis {axis!r} repeats a dimension")
    return tuple(sorted(out))


def count_nonzero(t: Tensor, axis=None):
    coords, values = canonical_entries(t)
    nz = values != 0
    axes = _axes(axis, t.ndim)
    keep = [d for d in range(t.ndim) if d not in axes]
    if not keep:
        return int(np.count_nonzero(nz))
    shape = tuple(t.shape[d] for d in keep)
    k = indexing.keys([coords[d][nz] for d in keep], shape)
    return np.bincount(k, minlength=math.prod(shape)).reshape(shape).astype(np.intp)


# --------------------------------------------------------------------------- reductions


def extreme(t: Tensor, axis, fn, name: str | None = None):
    """``max`` (``fn`` = np.maximum) or ``min`` (np.minimum) over ``axis``; unstored zeros count."""
    name = name or ("max" if fn is np.maximum else "min")
    t._require_host()
    axes = _axes(axis, t.ndim)
    keep = [d for d in range(t.ndim) if d not in axes]
    reduced = math.prod(t.shape[d] for d in axes)
    shape = tuple(t.shape[d] for d in keep)
    if reduced == 0 and math.prod(shape) > 0 or math.prod(t.shape) == 0 and not keep:
        raise ShapeError(f"{name}: zero-size reduction (shape {t.shape}, axis {axis}) has no identity")
    coords, values = canonical_entries(t)
    if not keep:
        if not len(values):
            return t.dtype.type(0)
        m = fn.reduce(values)
        return fn(m, t.dtype.type(0)) if len(values) < reduced else m
    out = np.zeros(math.prod(shape), dtype=t.dtype)
    if len(values):
        k = indexing.keys([coords[d] for d in keep], shape)
        order = np.argsort(k, kind="stable")
        ks = k[order]
        starts = np.flatnonzero(np.concatenate([[True], ks[1:] != ks[:-1]]))
        groups = ks[starts]
        best = fn.reduceat(values[order], starts)
        full = np.diff(np.append(starts, len(ks))) == reduced
        out[groups] = np.where(full, best, fn(best, t.dtype.type(0)))
    return out.reshape(shape)


def mean(t: Tensor, axis=None):
    axes = _axes(axis, t.ndim)
    count = math.prod(t.shape[d] for d in axes)
    s = t.sum(axis if axis is None else axes)
    dtype = np.dtype(np.float64) if t.dtype.kind in "biu" else t.dtype
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.asarray(s).astype(dtype) / dtype.type(count) if count else np.asarray(s).astype(dtype) * np.nan
    return out[()] if np.ndim(out) == 0 else out


# --------------------------------------------------------------------------- diagonals


def _diagonal_length(shape, k: int) -> int:
    m, n = shape
    return max(0, min(m, n - k)) if k >= 0 else max(0, min(m + k, n))


def _matrix(t: Tensor, what: str) -> None:
    if t.ndim != 2:
        raise ShapeError(f"{what} needs a 2-D tensor, this one has shape {t.shape}")


def diagonal(t: Tensor, k: int = 0) -> np.ndarray:
    _matrix(t, "diagonal")
    k = int(k)
    out = np.zeros(_diagonal_length(t.shape, k), dtype=t.dtype)
    if not len(out):
        return out
    coords, values = t.entries()
    on = np.flatnonzero(coords[1] - coords[0] == k)
    at = coords[0][on] if k >= 0 else coords[1][on]
    if t.format.is_unique:
        out[at] = values[on]
    else:
        np.add.at(out, at, values[on])
    return out


def setdiag(t: Tensor, values, k: int = 0) -> None:
    _matrix(t, "setdiag")
    k = int(k)
    m, n = t.shape
    if (k < 0 and -k >= m) or (k > 0 and k >= n):
        raise ShapeError(f"setdiag: k = {k} exceeds the tensor's shape {t.shape}")
    length = _diagonal_length(t.shape, k)
    v = np.asarray(packages.host_array(values) if not isinstance(values, numbers.Number) else values)
    v = np.full(length, v, dtype=np.result_type(v.dtype, t.dtype)) if v.ndim == 0 else v.reshape(-1)[:length]
    i = np.arange(len(v), dtype=np.int64)
    indexing.setitem(t, (i + max(0, -k), i + max(0, k)), v, diagonals=True)


# --------------------------------------------------------------------------- in place


def _compressed_filter(t: Tensor, keep: np.ndarray) -> Tensor:
    """CSR or CSC ``t`` without the entries where ``keep`` is False."""
    pos = t.raw_buffers[(1, "pos")]
    nparents = len(pos) - 1
    rows = np.repeat(np.arange(nparents, dtype=np.int64), np.diff(pos.astype(np.int64)))
    counts = np.bincount(rows[keep], minlength=nparents)
    buffers = {(1, "pos"): prefix_sum(counts).astype(pos.dtype, copy=False),
               (1, "crd"): t.raw_buffers[(1, "crd")][:t.nse][keep]}
    return Tensor(t.format, t.shape, buffers, t.raw_values[:t.nse][keep], device=t.device, package=t.package)


def _coo_filter(t: Tensor, keep: np.ndarray) -> Tensor:
    """COO-like ``t`` (a compressed head, singletons below) without the entries where ``keep``
    is False: every level's coordinates filtered, the order kept."""
    pos0 = t.raw_buffers[(0, "pos")]
    buffers = {(0, "pos"): np.array([0, int(keep.sum())], dtype=pos0.dtype)}
    for k in range(t.format.nlevels):
        buffers[(k, "crd")] = t.raw_buffers[(k, "crd")][:t.nse][keep]
    return Tensor(t.format, t.shape, buffers, t.raw_values[:t.nse][keep], device=t.device, package=t.package)


def _filter_kind(fmt) -> str | None:
    """'rows' (a dense level, then a compressed one: CSR, CSC, with any properties) or 'coo'
    (a compressed level, then singletons) over plain dimensions, else None."""
    from ..format.levels import Compressed, Dense, Singleton

    if not indexing.plain(fmt):
        return None
    kinds = [type(lv.type) for lv in fmt.levels]
    if kinds == [Dense, Compressed]:
        return "rows"
    if len(kinds) >= 2 and kinds[0] is Compressed and all(k is Singleton for k in kinds[1:]):
        return "coo"
    return None


def _cheap_filter(t: Tensor, keep_fn):
    """A filtered copy for CSR- and COO-like formats (None for other formats)."""
    kind = _filter_kind(t.format)
    if kind is None or (kind == "coo" and int(t.raw_buffers[(0, "pos")][0]) != 0):
        return None
    keep = keep_fn(t.raw_values[:t.nse])
    if keep.all():
        return t
    return _compressed_filter(t, keep) if kind == "rows" else _coo_filter(t, keep)


def eliminate_zeros(t: Tensor, *, cheap_only: bool = False) -> None:
    """Remove stored zeros in place (see the module docstring)."""
    t._require_host()
    if t.format.all_dense:
        return
    new = _cheap_filter(t, lambda v: v != 0)
    if new is None:
        if cheap_only:
            return
        coords, values = t.entries()
        nz = values != 0
        if nz.all():
            return
        new = Tensor._assembled(t.format, t.shape, tuple(c[nz] for c in coords), values[nz], t.package)
    if new is not t:
        indexing.replace_storage(t, new)


def sum_duplicates(t: Tensor) -> None:
    """Sum repeated coordinates in place (and sort; explicit zeros are dropped too)."""
    t._require_host()
    if t.format.is_unique and t.format.is_ordered:
        return
    coords, values = canonical_entries(t)
    indexing.replace_storage(t, Tensor._assembled(t.format, t.shape, coords, values, t.package))


# --------------------------------------------------------------------------- copies


def astype(t: Tensor, dtype, copy: bool = True) -> Tensor:
    dtype = np.dtype(dtype)
    if dtype == t.dtype and not copy:
        return t
    t._require_host()
    if t.dtype.kind == "c" and dtype.kind != "c":
        values = np.real(t.raw_values).astype(dtype)
    else:
        values = t.raw_values.astype(dtype)
    return ufuncs.mapped(t, values)


def power(t: Tensor, p) -> Tensor:
    """``t ** p`` element-wise (zero-preserving: ``p > 0``)."""
    return ufuncs.binary(np.power, t, p)


def real(t: Tensor) -> Tensor:
    return ufuncs.mapped(t, np.real(t.raw_values).copy())


def imag(t: Tensor) -> Tensor:
    return ufuncs.mapped(t, np.imag(t.raw_values).copy() if t.dtype.kind == "c" else np.zeros_like(t.raw_values))


def conj(t: Tensor) -> Tensor:
    return ufuncs.mapped(t, np.conjugate(t.raw_values)) if t.dtype.kind == "c" else t.copy()


def toarray(t: Tensor) -> np.ndarray:
    return packages.host_array(t.to_dense())


def _converted(t: Tensor, fmt, copy: bool) -> Tensor:
    fmt = as_format(fmt)
    if t.format == fmt:
        return t.copy() if copy else t
    return t.convert(fmt, copy=copy)  # copy=False shares what both formats store, as SciPy


def tocsr(t: Tensor, copy: bool = False) -> Tensor:
    from .. import formats

    _matrix(t, "tocsr")
    return _converted(t, formats.CSR, copy)


def tocsc(t: Tensor, copy: bool = False) -> Tensor:
    from .. import formats

    _matrix(t, "tocsc")
    return _converted(t, formats.CSC, copy)


def tocoo(t: Tensor, copy: bool = False) -> Tensor:
    from .. import formats

    if t.ndim < 2:
        raise ShapeError(f"tocoo needs a tensor of 2 or more dimensions, this one has shape {t.shape}")
    return _converted(t, formats.COO(t.ndim), copy)


def length(t: Tensor) -> int:
    if t.ndim == 0:
        raise TypeError("len() of a 0-d tensor")
    return t.shape[0]


def truth(t: Tensor) -> bool:
    """Always True: a Tensor is an object, as before ``len()`` existed (``x or y`` on tensors
    keeps meaning "x unless it is None"); test ``A.nnz`` or ``A.count_nonzero()`` instead."""
    return True


def no_array(t: Tensor, dtype=None, copy=None):
    raise UnsupportedOperation("a ustc Tensor is not converted to a NumPy array implicitly (it could be "
                               "huge); call A.toarray() or A.to_dense(). (SciPy asks for one in S * A, S @ A "
                               "and S > A with a SciPy matrix S on the left: write A * S, A.T @ ..., or "
                               "ustc.Tensor.from_package(S) * A)")
