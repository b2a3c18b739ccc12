"""Conversions into CSR from the other row-major matrix formats, in parallel and without a sort.

``Tensor.convert`` to CSR from DCSR, BSR(r, c), DIAI and DIAJ (and, for :func:`to_csr` with
``share=True``, canonical COO) takes one of these instead of the generic path (a coordinate
list the host sorts: 74 ms DCSR, 407 ms BSR(2, 2), 167 ms DIAI -> CSR on the 512,000-row
stencil before):

* **DCSR**: the stored rows' offsets spread over the empty rows between them (one pass over
  the row buffers, ``kernels.dcsr_pos``); the column coordinates and values are copied in
  parallel (or shared, below).
* **COO** (canonical, row-major): the run borders of the sorted rows are the offsets
  (``kernels.sorted_pos``); columns and values as for DCSR.
* **BSR(r, c)** (block columns ordered and unique where the level promises it; else checked in
  one parallel pass, and where a row's are out of order, as SciPy's ``tobsr`` leaves them, the
  fill puts each block row in column order in a chunk-local list, no permutation buffer) and **DIA** (DIAI: values indexed by
  row, DIAJ: by column; offsets checked ascending): a parallel pass
  counts every output row's nonzeros (explicit zeros of a block or a diagonal are not stored in
  CSR), a parallel prefix places the rows, a parallel pass writes each row at its offset. Block
  columns are ordered and diagonal offsets ascend, so each row comes out in column order.

**Sharing.** With ``share=True`` (DCSR and COO sources only) the CSR takes the source's column
coordinates and values as they are (the same arrays, ``np.shares_memory`` holds, when their
dtype is the one CSR would choose), and a write to either tensor's values is seen by the other;
:func:`from_csr` does the same from CSR into DCSR or COO. ``Tensor.convert`` shares only when
asked (``copy=False``, as SciPy's ``tocoo(copy=False)``: :func:`shared`); by default it copies.
``ustc.Matmul`` shares for the operand conversion it makes at every execute and for its CSR
product's conversion into a DCSR or COO result: temporaries no user sees and no kernel writes.
The source is never written.

Each function returns None when its shortcut does not apply (another format, a GPU tensor,
float16, explicit zeros in a DCSR or COO source, unordered diagonal offsets); the caller then
takes the generic path, so results are identical either way.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from ..errors import StorageError
from ..format.ir import TensorFormat
from ..memory import BUDGET_VARIABLE, memory_budget
from .dtypes import buffer_dtypes
from .fastpaths import COMPRESSED, _csr_tensor, _fitting, _pos_dtype, coo_like, compiled_dtype, family, row_bounds

BLOCKS_PER_THREAD = 4  # prefix blocks per thread (kernels.prefix_in_place)


@functools.lru_cache(maxsize=64)
def _named(text: str) -> TensorFormat:
    return TensorFormat.parse(text)


def _bare(fmt: TensorFormat) -> TensorFormat:
    """``fmt`` without index widths (they change buffer dtypes, not the walk)."""
    if not fmt.pos_width and not fmt.crd_width:
        return fmt
    return TensorFormat(fmt.dims, [(lv.expr, lv.type) for lv in fmt.levels])


def source_kind(fmt: TensorFormat, level_shape) -> str | None:
    """'dcsr', 'coo', 'bsr', 'diai' or 'diaj' when ``fmt`` (a 2-D format, widths aside) is that
    named format, else None."""
    if fmt.ndim != 2 or fmt.batch_levels:
        return None
    bare = _bare(fmt)
    if fmt.nlevels == 2:
        if bare == _named("DCSR"):
            return "dcsr"
        if coo_like(bare):
            return "coo"
        if bare == _named("DIAI"):
            return "diai"
        if bare == _named("DIAJ"):
            return "diaj"
        return None
    if fmt.nlevels == 4 and len(level_shape) == 4:
        r, c = level_shape[2], level_shape[3]
        plain = TensorFormat(fmt.dims, [(lv.expr, replace(lv.type, properties=())) for lv in fmt.levels])
        if r >= 1 and c >= 1 and plain == _named(f"BSR({r}, {c})"):
            return "bsr"  # block columns checked at run time where the level does not promise order
    return None


def to_csr(t, fmt: TensorFormat, share: bool = False):
    """``t`` in the CSR ``fmt`` (rows major, ordered unique columns) by the kernels of the module
    docstring, or None where they do not apply. ``share``: a DCSR or COO source's column
    coordinates and values are the result's own (module docstring)."""
    fam = family(fmt)
    if fam is None or fam.kind != "csr" or fam.major != 0 or t.device != "cpu" or t.ndim != 2 \
            or not compiled_dtype(t.dtype):
        return None
    kind = source_kind(t.format, t._layout.level_shape)
    if kind is None or (kind == "coo" and not share):
        return None  # COO -> CSR with copies is fastpaths.convert's
    from . import kernels

    b = t._buffers
    nrows, ncols = t.shape
    if kind in ("dcsr", "coo"):
        pos0 = b[(0, "pos")]
        if int(pos0[0]) != 0:
            return None
        m = int(pos0[1])
        if kind == "dcsr":
            pos1 = b[(1, "pos")][:m + 1]
            if int(pos1[0]) != 0:
                return None
            nnz = int(pos1[m])
            pos = np.empty(nrows + 1, dtype=_pos_dtype(nnz))
            kernels.dcsr_pos(b[(0, "crd")][:m], pos1, nrows, pos)
        else:
            nnz = m
            pos = np.zeros(nrows + 1, dtype=_pos_dtype(nnz))
            kernels.sorted_pos(b[(0, "crd")][:nnz], pos, _chunks(kernels, nnz))
        crd, values = b[(1, "crd")][:nnz], t._values[:nnz]
        if share:
            if kernels.count_zeros(values):
                return None  # explicit zeros must be dropped: the generic path does it
            return _csr_tensor(t.shape, t.package, fmt, pos, crd, values)
        crd_out, values_out = np.empty(nnz, dtype=_fitting(max(ncols - 1, 0))), np.empty(nnz, dtype=values.dtype)
        if kernels.copy_entries(crd, values, crd_out, values_out, _chunks(kernels, nnz)):
            return None
        return _csr_tensor(t.shape, t.package, fmt, pos, crd_out, values_out)
    values = t._values
    counts = np.empty(nrows + 1, dtype=_pos_dtype(len(values)))  # a row's count, then its end
    counts[0] = 0
    if kind == "bsr":
        return _bsr_to_csr(t, fmt, kernels, counts)
    pos0 = b[(0, "pos")]
    offsets = b[(0, "crd")][int(pos0[0]):int(pos0[1])]
    if len(offsets) > 1 and not bool(np.all(offsets[1:] > offsets[:-1])):
        return None  # the generic path sorts
    args = (offsets, values, t._layout.level_shape[1], kind == "diai", nrows, ncols)
    kernels.dia_row_counts(*args, counts)
    crd_out, values_out = _place_rows(kernels, counts, nrows, ncols, values.dtype)
    kernels.dia_row_fill(*args, counts, crd_out, values_out)
    return _csr_tensor(t.shape, t.package, fmt, counts, crd_out, values_out)


def _bsr_to_csr(t, fmt: TensorFormat, kernels, counts):
    """The BSR ``t`` in CSR ``fmt`` (``counts``: nrows + 1 zeroed-at-0 entries, the result's
    positions): count, prefix, fill. Block columns the level does not promise ordered are checked
    in one parallel pass; out of order (SciPy's ``tobsr`` leaves them in first-met order), each
    block row is sorted in a chunk-local list by the fill itself. None when a block column
    repeats within its block row (the generic path sums them)."""
    b, values = t._buffers, t._values
    (nrows, ncols), (r, c) = t.shape, t._layout.level_shape[2:]
    pos, crd = b[(1, "pos")], b[(1, "crd")]
    widest = 0
    if t.format.levels[1].type != COMPRESSED and kernels.segments_increasing(pos, crd):
        widest = int(np.diff(pos).max())
    args = (pos, crd, values, r, c, nrows, ncols)
    kernels.bsr_row_counts(*args, counts)
    crd_out, values_out = _place_rows(kernels, counts, nrows, ncols, values.dtype)
    chunks = kernels.threads() * BLOCKS_PER_THREAD
    bounds = row_bounds(pos, np.arange(chunks + 1, dtype=np.int64) * int(pos[-1]) // chunks)
    if kernels.bsr_row_fill(*args, bounds, widest, counts, crd_out, values_out):
        return None
    return _csr_tensor(t.shape, t.package, fmt, counts, crd_out, values_out)


def _place_rows(kernels, counts, nrows: int, ncols: int, dtype):
    """``counts`` (each row's nonzeros after a leading 0) turned into row offsets in place, in
    parallel; returns the CSR's column and value buffers of the total's size."""
    nblocks = max(1, min(nrows + 1, kernels.threads() * BLOCKS_PER_THREAD))
    total = int(kernels.prefix_in_place(counts, np.arange(nblocks + 1, dtype=np.int64) * (nrows + 1) // nblocks))
    return np.empty(total, dtype=_fitting(max(ncols - 1, 0))), np.empty(total, dtype=dtype)


def from_csr(t, fmt: TensorFormat):
    """The CSR ``t`` in DCSR or canonical COO ``fmt`` sharing ``t``'s column coordinates and values
    (the same arrays when their dtype is the one ``fmt`` chooses): DCSR keeps the offsets of the
    rows that hold entries (O(rows) with NumPy), COO expands the rows in parallel. For a CSR the
    caller drops (``ustc.Matmul``'s CSR product in the operands' format); None where it does not
    apply (another format, explicit zeros)."""
    fam = family(t.format)
    if fam is None or fam.kind != "csr" or fam.major != 0 or t.device != "cpu" or not compiled_dtype(t.dtype):
        return None
    kind = source_kind(fmt, ())
    if kind not in ("dcsr", "coo"):
        return None
    from . import kernels
    from .fastpaths import _coo_from_rows
    from .tensor import Tensor

    pos = t._buffers[(1, "pos")]
    nnz = int(pos[-1])
    crd, values = t._buffers[(1, "crd")][:nnz], t._values[:nnz]
    if kernels.count_zeros(values):
        return None
    if kind == "coo":
        return _coo_from_rows(t.shape, t.package, fmt, pos, crd, values)
    rows = np.flatnonzero(pos[1:] != pos[:-1])
    dtypes = buffer_dtypes(fmt, fmt.level_shape(t.shape), (0, 0), nnz)
    starts = np.empty(len(rows) + 1, dtype=dtypes[(1, "pos")])
    starts[:-1] = pos[rows]
    starts[-1] = nnz
    buffers = {(0, "pos"): np.array([0, len(rows)], dtype=dtypes[(0, "pos")]),
               (0, "crd"): rows.astype(dtypes[(0, "crd")]), (1, "pos"): starts,
               (1, "crd"): crd.astype(dtypes[(1, "crd")], copy=False)}
    return Tensor(fmt, t.shape, buffers, values, package=t.package)


def shared(t, fmt: TensorFormat):
    """``Tensor.convert(fmt, copy=False)``: ``t`` in ``fmt`` sharing the arrays both formats store
    (DCSR or COO -> CSR: :func:`to_csr` with ``share=True``; CSR -> DCSR or COO: :func:`from_csr`),
    or None where no such conversion applies (the caller then copies)."""
    if source_kind(t.format, t._layout.level_shape) in ("dcsr", "coo"):
        return to_csr(t, fmt, share=True)
    return from_csr(t, fmt)


DIA_PRODUCT_ROWS = 4096  # rows of C per chunk of the DIA product (a chunk's diagonals stay in cache)


def dia_product(a, b, fmt: TensorFormat):
    """``a @ b`` of two DIA matrices (DIAI or DIAJ, any mix) as a DIA tensor in ``fmt`` (DIAI or
    DIAJ), computed diagonal by diagonal (``kernels.dia_product``): C's offsets are the sums of
    A's and B's, each pair of diagonals a streaming multiply-add over the rows they share; the
    diagonals that come out all zero are dropped (as a conversion of the product would), those
    outside C never made. None where it does not apply (other formats, a GPU, values Numba does
    not compile, bool, offsets out of order)."""
    kinds = [source_kind(x.format, x._layout.level_shape) for x in (a, b)] + [source_kind(fmt, ())]
    if any(k not in ("diai", "diaj") for k in kinds) or a.device != "cpu" or b.device != "cpu" \
            or a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        return None
    dtype = np.result_type(a.dtype, b.dtype)
    if not compiled_dtype(dtype) or dtype.kind == "b" or not compiled_dtype(a.dtype) or not compiled_dtype(b.dtype):
        return None
    offsets = []
    for x in (a, b):
        pos0 = x._buffers[(0, "pos")]
        off = x._buffers[(0, "crd")][int(pos0[0]):int(pos0[1])].astype(np.int64)
        if len(off) > 1 and not bool(np.all(off[1:] > off[:-1])):
            return None
        offsets.append(off)
    from . import kernels
    from .storage import Layout
    from .dtypes import narrow
    from .tensor import Tensor

    (m, k), n = a.shape, b.shape[1]
    sums = (offsets[0][:, None] + offsets[1][None, :]).ravel()
    inside = (sums > -m) & (sums < n) if m and n else np.zeros(len(sums), bool)
    c_off = np.unique(sums[inside])
    pair = np.where(inside, np.searchsorted(c_off, sums), -1).astype(np.int64)
    c_rows = kinds[2] == "diai"
    c_len = m if c_rows else n
    c_val = np.zeros(len(c_off) * c_len, dtype=dtype)
    a_val = a._values if a.dtype == dtype else a._values.astype(dtype)
    b_val = b._values if b.dtype == dtype else b._values.astype(dtype)
    chunks = max(1, -(-m // DIA_PRODUCT_ROWS))
    bounds = np.arange(chunks + 1, dtype=np.int64) * m // chunks
    kernels.dia_product(offsets[0], a_val, kinds[0] == "diai", offsets[1], b_val, kinds[1] == "diai", pair,
                        c_val, c_rows, m, k, n, bounds)
    keep = np.zeros(len(c_off), dtype=np.bool_)
    kernels.diagonals_nonzero(c_val, c_len, keep)
    if not keep.all():
        c_off, c_val = c_off[keep], c_val.reshape(len(keep), c_len)[keep].ravel()
    layout = Layout.of(fmt, (m, n))
    buffers = narrow(fmt, {(0, "pos"): np.array([0, len(c_off)], dtype=np.int64), (0, "crd"): c_off},
                     layout.level_shape, layout.origins)
    return Tensor(fmt, (m, n), buffers, c_val)


def dia_target(fmt: TensorFormat) -> bool:
    """Whether ``fmt`` is DIAI or DIAJ (index widths aside): :func:`dia_from_dense` writes it."""
    return source_kind(fmt, ()) in ("diai", "diaj")


def dia_from_dense(x: np.ndarray, fmt: TensorFormat, package, mode: int, mask):
    """The 2-D array ``x``'s selected entries (``fastpaths.select``'s ``mode`` and ``mask``) as a
    DIA tensor in ``fmt`` (DIAI or DIAJ), or None where this does not apply (another format,
    values Numba does not compile). One parallel read of ``x`` sets a bit per diagonal holding an
    entry (a bit set of rows + columns bits per chunk), then only those diagonals are read into
    zeroed values: no CSR of the selection in between, so the extra memory is the output plus
    the bit sets. StorageError, before allocating, when the values would not fit the memory budget."""
    if x.ndim != 2 or not dia_target(fmt) or not compiled_dtype(x.dtype):
        return None
    from . import kernels

    rows = x.shape[0]
    chunks = _chunks(kernels, x.size)
    mask2 = np.zeros((1, 1), dtype=np.bool_) if mask is None else np.asarray(mask, dtype=np.bool_).reshape(x.shape)

    def flag(flags):
        kernels.diagonal_flags(x, mode, mask2, np.arange(chunks + 1, dtype=np.int64) * rows // chunks, flags)

    def fill(offsets, by_row, length, values):
        kernels.dense_dia_fill(x, mode, mask2, offsets, by_row, length, values)

    return _dia_tensor(fmt, x.shape, x.dtype, chunks, flag, fill, package, "array")


def dia_from_csr(t, fmt: TensorFormat):
    """The CSR ``t`` (rows major, ordered unique columns) as a DIA tensor in ``fmt`` (DIAI or DIAJ),
    or None where this does not apply: one parallel pass over the columns sets a bit per
    diagonal holding an entry (:func:`dia_from_dense`'s bit sets), then one parallel pass puts
    each entry on its diagonal (the next stored one, else a binary search in the few stored
    offsets) in zeroed values. The flags read no values; where the fill meets an explicit zero,
    both passes run again dropping zeros (a diagonal of zeros only is not stored). Extra memory:
    the output and the bit sets. Budget refusal as :func:`dia_from_dense`."""
    fam = family(t.format)
    if fam is None or fam.kind != "csr" or fam.major != 0 or t.device != "cpu" or not dia_target(fmt) \
            or not compiled_dtype(t.dtype):
        return None
    from . import kernels

    pos, crd = t._buffers[(1, "pos")], t._buffers[(1, "crd")]
    values = t._values
    chunks = _chunks(kernels, int(pos[-1]))
    bounds = row_bounds(pos, np.arange(chunks + 1, dtype=np.int64) * int(pos[-1]) // chunks)

    for drop in (False, True):  # first as if no entry were zero: the flags then read no values
        met = []

        def flag(flags, drop=drop):
            kernels.csr_diagonal_flags(pos, crd, values, bounds, flags, drop)

        def fill(offsets, by_row, length, out, drop=drop):
            met.append(kernels.csr_dia_fill(pos, crd, values, bounds, offsets, by_row, length, out, drop))

        try:
            result = _dia_tensor(fmt, t.shape, t.dtype, chunks, flag, fill, t.package, "matrix")
        except StorageError:
            if drop:
                raise
            continue  # diagonals of explicit zeros only may be what passes the budget
        if drop or not met[0]:
            return result
        del result  # a diagonal may hold explicit zeros only: flagged again, dropping them


def _dia_tensor(fmt, shape, dtype, chunks: int, flag, fill, package, what: str):
    """A DIA tensor in ``fmt`` of ``shape``: ``flag(flags)`` sets a bit per diagonal holding an
    entry (bit ``col - row + rows - 1`` of a chunk's row of ``flags``), the offsets follow, the
    zeroed values (refused first when over the memory budget) are ``fill(offsets, by_row,
    length, values)``'s."""
    from .dtypes import narrow
    from .storage import Layout
    from .tensor import Tensor

    rows, cols = shape
    diagonals = max(0, rows + cols - 1)
    flags = np.zeros((chunks, -(-diagonals // 64)), dtype=np.uint64)
    flag(flags)
    held = np.unpackbits(np.bitwise_or.reduce(flags, axis=0).view(np.uint8), bitorder="little")[:diagonals]
    del flags
    offsets = np.flatnonzero(held) - (rows - 1)
    del held
    layout = Layout.of(fmt, shape)
    length = layout.level_shape[1]
    need = len(offsets) * length * dtype.itemsize
    budget = memory_budget()
    if need > budget:
        raise StorageError(f"{fmt} of the {rows} x {cols} {what} would store {len(offsets):,} diagonals of "
                           f"{length:,} values ({need:,} bytes), more than the memory budget of {budget:,} "
                           f"bytes ({BUDGET_VARIABLE} sets it)")
    values = np.zeros(len(offsets) * length, dtype=dtype)
    fill(offsets, source_kind(fmt, ()) == "diai", length, values)
    buffers = narrow(fmt, {(0, "pos"): np.array([0, len(offsets)], dtype=np.int64), (0, "crd"): offsets},
                     layout.level_shape, layout.origins)
    return Tensor(fmt, tuple(shape), buffers, values, package=package)


def _chunks(kernels, n: int) -> int:
    from .fastpaths import PARALLEL_TRANSPOSE

    return kernels.threads() if n >= PARALLEL_TRANSPOSE else 1
