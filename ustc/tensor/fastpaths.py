"""Fast paths in front of the generic pack/unpack pipeline.

* Conversions inside the 2-D compressed family (CSR, CSC, canonical COO)
  run as one counting pass (``kernels.transpose_compressed``) or one
  histogram, like SciPy's own, instead of unpack + sort + pack.
* Dense -> sparse runs one parallel count pass and one parallel fill pass
  over the dense array (``kernels.row_counts`` / ``row_fill``); CSR-like
  targets take the counts as their positions directly, so no row-index array
  is ever built. The same kernels implement ``sparsify`` and ``sparse_relu``
  without materialising the filtered dense array.

Each function returns None when its shortcut does not apply; the caller then
takes the generic path, so results are identical either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..format.expr import Dimension
from ..format.ir import TensorFormat
from ..format.levels import Compressed, Dense, LevelProperty, Singleton
from ..format.levels.base import prefix_sum
from .dtypes import index_dtype, narrow

# The level types of the family's kernels (ordered and unique unless said; equality is exact,
# so loose_compressed, a Compressed subclass, never matches)
DENSE, COMPRESSED, SINGLETON = Dense(), Compressed(), Singleton()
COMPRESSED_NONUNIQUE = Compressed(properties=(LevelProperty.NONUNIQUE,))

# Selection modes of the dense -> sparse kernels (ustc.tensor.kernels, imported on first use:
# Numba costs ~0.15 s to import and formats-only users never need it).
NONZERO, POSITIVE, MASKED = 0, 1, 2


@dataclass(frozen=True)
class Family:
    """A 2-D format of the compressed family: ``kind`` is 'csr' (dense major,
    ordered unique compressed minor) or 'coo' (canonical COO); ``major`` is the
    dimension of the outer level."""

    kind: str
    major: int


def _plain_levels(fmt: TensorFormat, in_order: bool) -> bool:
    """One level per dimension, each a plain dimension (in dimension order if ``in_order``)."""
    names = [d.name for d in fmt.dims]
    return fmt.nlevels == fmt.ndim and all(
        isinstance(lv.expr, Dimension) and (not in_order or lv.expr.name == names[k])
        for k, lv in enumerate(fmt.levels))


def _fitting(hi: int) -> np.dtype:
    """int32 when indices up to ``hi`` fit, else int64 (the default index policy)."""
    return index_dtype(0, 0, hi, "index")


def family(fmt: TensorFormat) -> Family | None:
    if fmt.ndim != 2 or not _plain_levels(fmt, in_order=False):
        return None
    kinds = tuple(lv.type for lv in fmt.levels)
    major = [d.name for d in fmt.dims].index(fmt.levels[0].expr.name)
    if fmt.compressed_rows:
        return Family("csr", major)
    if kinds in ((COMPRESSED, SINGLETON), (COMPRESSED_NONUNIQUE, SINGLETON)):
        return Family("coo", major)
    return None


def convert(t, fmt: TensorFormat):
    """``t`` in ``fmt`` through a compressed-family shortcut, or None."""
    from . import kernels

    src, dst = family(t.format), family(fmt)
    if src is None or dst is None or dst.kind != "csr" or not compiled_dtype(t.dtype):
        return None
    values = t._values[:t.nse]
    b = t._buffers
    if src.kind == "csr":
        pos, crd = b[(1, "pos")], b[(1, "crd")]
    else:
        pos = prefix_sum(kernels.histogram(b[(0, "crd")], t.shape[src.major]))
        crd = b[(1, "crd")]
    if src.major == dst.major:
        if kernels.count_zeros(values):
            return None  # explicit zeros must be dropped: the generic path does it
        out = (pos.copy(), crd.copy(), values.copy())
    else:
        out = _transpose(pos, crd, values, t.shape[1 - src.major])
        if out is None:
            return None
    return _csr_tensor(t.shape, t.package, fmt, *out)


def csr_from_sorted(major, minor, values, shape, fmt: TensorFormat, pos=None):
    """A tensor in CSR-family ``fmt`` that takes ``minor`` and ``values`` as they are (no copy):
    entries the caller has just assembled, with ``(major, minor)`` strictly increasing. ``pos``,
    when the caller has it, is the major level's positions (else counted from ``major``). None
    when ``fmt`` is not of the family or an explicit zero must be dropped (the generic path does it)."""
    from . import kernels

    fam = family(fmt)
    if fam is None or fam.kind != "csr" or not compiled_dtype(values.dtype) or kernels.count_zeros(values):
        return None
    if pos is None:
        pos = prefix_sum(kernels.histogram(major, shape[fam.major]))
    return _csr_tensor(tuple(shape), None, fmt, pos, minor, values)


def csr_from_transposed(outer, inner, values, shape, fmt: TensorFormat):
    """A tensor in CSR-family ``fmt`` from entries strictly increasing in ``(outer, inner)``, where
    ``outer`` is ``fmt``'s *minor* dimension (a walk in the other order: CSC entries for a CSR
    target): one histogram and one counting transpose, no sort. None as for ``csr_from_sorted``."""
    from . import kernels

    fam = family(fmt)
    if fam is None or fam.kind != "csr" or not compiled_dtype(values.dtype) or kernels.count_zeros(values):
        return None
    pos = prefix_sum(kernels.histogram(outer, shape[1 - fam.major]))
    out = _transpose(pos, inner, values, shape[fam.major])
    return None if out is None else _csr_tensor(tuple(shape), None, fmt, *out)


def _transpose(pos, crd, values, n_minor):
    from . import kernels

    pos_out = prefix_sum(kernels.histogram(crd, n_minor))
    crd_out = np.empty(len(values), dtype=_fitting(len(pos) - 2))
    values_out = np.empty_like(values)
    if kernels.transpose_compressed(pos, crd, values, n_minor, pos_out, crd_out, values_out):
        return None  # explicit zeros: the generic path drops them
    return pos_out, crd_out, values_out


def _csr_tensor(shape, package, fmt, pos, crd, values):
    from .tensor import Tensor

    buffers = narrow(fmt, {(1, "pos"): pos, (1, "crd"): crd}, fmt.level_shape(shape), (0, 0))
    return Tensor(fmt, shape, buffers, values, package=package)


# -- dense -> sparse -------------------------------------------------------------------


def select(x: np.ndarray, mode: int, mask: np.ndarray | None):
    """Rows of ``x`` (all but the last axis flattened): ``(pos, crd, values)`` of the
    selected entries in row-major order, in two passes over ``x``."""
    from . import kernels

    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    x2 = x.reshape(rows, x.shape[-1])
    if not compiled_dtype(x.dtype):
        return _select_numpy(x2, mode, mask)
    mask2 = np.zeros((1, 1), dtype=np.bool_) if mask is None else np.asarray(mask, dtype=np.bool_).reshape(x2.shape)
    pos = prefix_sum(kernels.row_counts(x2, mode, mask2))
    crd = np.empty(int(pos[-1]), dtype=_fitting(x2.shape[1] - 1))
    values = np.empty(int(pos[-1]), dtype=x.dtype)
    kernels.row_fill(x2, mode, mask2, pos, crd, values)
    return pos, crd, values


def compiled_dtype(dtype: np.dtype) -> bool:
    """Dtypes the Numba kernels handle (Numba has no CPU float16)."""
    return dtype.kind in "biuc" or (dtype.kind == "f" and dtype.itemsize >= 4)


def _select_numpy(x2: np.ndarray, mode: int, mask):
    """The same selection with NumPy: builds a boolean mask of x's size (1 byte per element)."""
    keep = x2 > 0 if mode == POSITIVE else x2 != 0
    if mode == MASKED:
        keep &= np.asarray(mask, dtype=np.bool_).reshape(x2.shape)
    rows, cols = np.nonzero(keep)
    pos = prefix_sum(np.bincount(rows, minlength=x2.shape[0]))
    return pos, cols.astype(_fitting(x2.shape[1] - 1)), x2[rows, cols]


def csr_like(fmt: TensorFormat) -> bool:
    """Leading dimensions dense in order, the last one an ordered unique compressed level."""
    return (_plain_levels(fmt, in_order=True)
            and all(lv.type == DENSE for lv in fmt.levels[:-1]) and fmt.levels[-1].type == COMPRESSED)


def from_dense(x: np.ndarray, fmt: TensorFormat, package: str, mode: int = NONZERO, mask=None, **options):
    """``x``'s selected entries in ``fmt``: CSR-like formats directly from the row counts,
    every other format through the generic assembly of the selected coordinates."""
    from .tensor import Tensor

    pos, crd, values = select(x, mode, mask)
    if csr_like(fmt):
        buffers = narrow(fmt, {(fmt.nlevels - 1, "pos"): pos, (fmt.nlevels - 1, "crd"): crd},
                         fmt.level_shape(x.shape), (0,) * fmt.nlevels)
        return Tensor(fmt, x.shape, buffers, values, package=package)
    if x.ndim > 1 and coo_like(fmt):
        return _coo_tensor(x.shape, fmt, pos, crd, values, package)
    rows = np.repeat(np.arange(len(pos) - 1, dtype=np.int64), np.diff(pos))
    coords = (*np.unravel_index(rows, x.shape[:-1]), crd) if x.ndim > 1 else (crd,)
    return Tensor._assembled(fmt, x.shape, coords, values, package, **options)


def from_coo(coords, values: np.ndarray, shape: tuple, fmt: TensorFormat, package):
    """Coordinates of a matrix straight into CSR-family or canonical COO ``fmt`` — one counting
    sort by the major dimension, each row sorted and its duplicates summed in parallel, zero sums
    dropped — or None where the generic assembly must run (other formats, float16, out-of-range
    coordinates: the generic path names them)."""
    fam = family(fmt)
    if len(shape) != 2 or fam is None or not (fam.kind == "csr" or coo_like(fmt)) \
            or not compiled_dtype(values.dtype) or fmt.pos_width or fmt.crd_width \
            or any(c.dtype.kind not in "iu" or c.ndim != 1 for c in coords) or values.ndim != 1:
        return None
    from . import kernels

    major, minor = coords[fam.major], coords[1 - fam.major]
    pos, crd, vals, ok = kernels.coo_bucket(major, minor, values, shape[fam.major], shape[1 - fam.major])
    if not ok:
        return None
    counts = np.empty(shape[fam.major], dtype=np.int64)
    kernels.sort_sum_rows(pos, crd, vals, counts)
    new_pos = prefix_sum(counts)
    crd_out = np.empty(int(new_pos[-1]), dtype=_fitting(max(shape[1 - fam.major] - 1, 0)))
    vals_out = np.empty(int(new_pos[-1]), dtype=vals.dtype)
    kernels.compact_rows(pos, crd, vals, new_pos, crd_out, vals_out)
    if fam.kind == "csr":
        return _csr_tensor(tuple(shape), package, fmt, new_pos, crd_out, vals_out)
    return _coo_tensor(tuple(shape), fmt, new_pos, crd_out, vals_out, package)


def coo_like(fmt: TensorFormat) -> bool:
    """Canonical COO in dimension order: compressed(nonunique) then singletons."""
    nonunique = Singleton(properties=(LevelProperty.NONUNIQUE,))
    kinds = [lv.type for lv in fmt.levels]
    return (fmt.ndim >= 2 and _plain_levels(fmt, in_order=True)
            and kinds == [COMPRESSED_NONUNIQUE] + [nonunique] * (fmt.ndim - 2) + [SINGLETON]
            and not fmt.pos_width and not fmt.crd_width)


def _coo_tensor(shape, fmt, pos, crd, values, package):
    """COO buffers straight from row counts: each leading coordinate is built once, in int32
    when the extents allow, so the extra memory is the output itself."""
    from .tensor import Tensor

    lead = shape[:-1]
    dtype = _fitting(max(max(shape) - 1, len(values)))
    rows = np.repeat(np.arange(len(pos) - 1, dtype=dtype), np.diff(pos))
    buffers = {(0, "pos"): np.array([0, len(values)], dtype=dtype)}
    for k in range(len(lead) - 1, -1, -1):  # peel dimensions from the fastest-varying one
        buffers[(k, "crd")] = rows % lead[k] if k else rows
        if k:
            rows //= lead[k]
    buffers[(len(lead), "crd")] = crd.astype(dtype, copy=False)
    return Tensor(fmt, shape, buffers, values, package=package)
