"""Fast paths in front of the generic pack/unpack pipeline.

* Conversions inside the 2-D compressed family (CSR, CSC, canonical COO)
  where the walk cannot produce the target's order (CSR <-> CSC, COO <-> CSC,
  CSC -> COO) run as one stable counting transpose in parallel
  (:func:`transposed`); COO -> CSR is one histogram and copies. Same-order
  targets the writer can append (CSR -> COO) are the generated kernel's.
  DCSR, BSR and DIA into CSR walk their rows in parallel (``fastpaths_rows``).
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

from ..errors import StorageError
from ..format.expr import Dimension
from ..format.ir import TensorFormat
from ..format.levels import Compressed, Dense, LevelProperty, Singleton
from ..format.levels.base import prefix_sum
from ..memory import BUDGET_VARIABLE, memory_budget
from .dtypes import buffer_dtypes, index_dtype, narrow

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
    """``t`` in ``fmt`` through a compressed-family shortcut, or None: within the CSR family, or
    into COO of the other major order (CSC -> COO), where the walk cannot produce the target's
    order: one parallel counting transpose (:func:`transposed`). COO of the same order is the
    generated writer's (``ops.convert``). CSR -> DIA and DCSR / BSR / DIA -> CSR: ``fastpaths_rows``."""
    from . import kernels
    from .fastpaths_rows import dia_from_csr, to_csr

    src, dst = family(t.format), family(fmt)
    if src is None and dst is not None:
        return to_csr(t, fmt)  # DCSR, BSR, DIA -> CSR: parallel, no sort (fastpaths_rows)
    if src is not None and dst is None:
        return dia_from_csr(t, fmt)  # CSR -> DIA: the diagonals' bit sets, then one placing pass
    if src is None or dst is None or not compiled_dtype(t.dtype):
        return None
    if dst.kind == "coo" and (fmt.levels[0].type != COMPRESSED_NONUNIQUE
                              or (src.major == dst.major and src.kind == "coo")):
        return None
    values = t._values[:t.nse]
    b = t._buffers
    if dst.kind == "coo" and src.major == dst.major:  # CSR -> COO: rows expanded while copying
        return _coo_copied(t, fmt, b[(1, "pos")], b[(1, "crd")], values)
    if src.major != dst.major:
        n_out, n_in = t.shape[dst.major], t.shape[src.major]
        rows_dtype = None if dst.kind == "csr" else \
            buffer_dtypes(fmt, fmt.level_shape(t.shape), (0, 0), len(values))[(0, "crd")]
        if src.kind == "csr":
            *out, rows = transposed(values, b[(1, "crd")], n_out, n_in, pos=b[(1, "pos")], rows_dtype=rows_dtype)
        else:
            *out, rows = transposed(values, b[(1, "crd")], n_out, n_in, major=b[(0, "crd")], rows_dtype=rows_dtype)
        return _csr_tensor(t.shape, t.package, fmt, *out) if dst.kind == "csr" else \
            _coo_from_rows(t.shape, t.package, fmt, *out, rows=rows)
    nnz, crd = len(values), b[(1, "crd")]
    chunks = kernels.threads() if nnz >= PARALLEL_TRANSPOSE else 1
    crd_out, values_out = np.empty(nnz, dtype=crd.dtype), np.empty(nnz, dtype=values.dtype)
    if src.kind == "csr":
        pos = b[(1, "pos")].copy()
        zeros = kernels.copy_entries(crd[:nnz], values, crd_out, values_out, chunks)
    else:  # a canonical COO's rows are sorted: their run borders are the positions, marked while copying
        pos = np.zeros(t.shape[src.major] + 1, dtype=_pos_dtype(nnz))
        zeros = kernels.coo_to_rows(b[(0, "crd")][:nnz], crd[:nnz], values, pos, crd_out, values_out, chunks)
        kernels.run_max(pos, min(chunks, max(1, len(pos) >> 16)))
    if zeros:
        return None  # explicit zeros must be dropped: the generic path does it
    return _csr_tensor(t.shape, t.package, fmt, pos, crd_out, values_out)


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
    target): one counting transpose (zeros dropped), no sort. None when ``fmt`` is not of the family."""
    fam = family(fmt)
    if fam is None or fam.kind != "csr" or not compiled_dtype(values.dtype):
        return None
    *out, _ = transposed(values, inner, shape[fam.major], shape[1 - fam.major], major=outer)
    return _csr_tensor(tuple(shape), None, fmt, *out)


PARALLEL_TRANSPOSE = 1 << 16  # entries from which the counting transpose splits across threads
BLOCKS_PER_THREAD = 4         # blocks of output rows per thread in the transpose's prefix


BLOCKED_FROM_ROWS = 1 << 14    # output rows from which the transpose may be the blocked one (see transposed)
BLOCKED_WINDOW = 8 << 20       # bytes of output a direct scatter keeps open, from which the blocked one runs
PARTITION_STREAMS = 112        # arrays x blocks a chunk writes at once in the blocked partition (kernels' note)
SUB_BLOCK_BYTES = 32 << 10     # bytes of output a sub-block of the blocked sort aims at (its lines stay in L1)
SUB_SPLIT = 5                  # a block is cut into at most 2^SUB_SPLIT sub-blocks (its partition's streams)
BLOCK_BUFFER = 1 / 8           # the sort's buffers (a block per thread) at most this share of the output
MIN_BLOCK_SHIFT = 6            # fewer rows per block than 2^this: the direct scatter


@dataclass(frozen=True)
class Blocking:
    """How the blocked transpose cuts the output rows: blocks of ``2^shift`` rows (the partition's
    targets), each sorted through sub-blocks of ``2^sub`` rows; ``packed`` when an entry's row
    within its block travels in the low ``shift`` bits of its major coordinate (else in the COO
    target's row array)."""

    shift: int
    sub: int
    packed: bool

    def __post_init__(self):
        if not 0 <= self.sub <= self.shift or self.shift - self.sub > 30:
            raise ValueError(f"Blocking: sub-block shift {self.sub} outside [0, {self.shift}]")


def blocking(n_out: int, n_in: int, nnz: int, entry: int, crd_dtype, rows: bool) -> Blocking | None:
    """The cut of :func:`transposed`'s blocked path for ``n_out`` output rows holding ``nnz``
    entries of ``entry`` bytes, majors below ``n_in`` in ``crd_dtype``, ``rows`` when the target
    has a row array; None where rows per block would fall under ``2^MIN_BLOCK_SHIFT``.

    Packed, a chunk writes 2 streams per block (major, value), else 3 (and the row), so the
    blocks are at most ``PARTITION_STREAMS / streams``; the packing needs ``shift`` free bits
    above ``n_in``, else the row array carries the row (or, without one, the blocks get more
    numerous). Sub-blocks hold about ``SUB_BLOCK_BYTES``, at least ``2^-SUB_SPLIT`` of a block."""
    free = np.iinfo(crd_dtype).bits - 1 - max(n_in - 1, 0).bit_length()
    shift = _shift_for(n_out, PARTITION_STREAMS // 2)
    packed = shift <= free
    if not packed and rows:
        shift = _shift_for(n_out, PARTITION_STREAMS // 3)
    elif not packed:
        shift, packed = free, True
    if shift < MIN_BLOCK_SHIFT:
        return None
    per_row = max(nnz, 1) / max(n_out, 1) * entry
    sub = min(shift, max(0, int(np.log2(max(SUB_BLOCK_BYTES / per_row, 1)))))
    return Blocking(shift, max(sub, shift - SUB_SPLIT), packed)


def _shift_for(n: int, blocks: int) -> int:
    """The least shift cutting ``n`` rows into at most ``blocks`` blocks of ``2^shift`` rows."""
    return max(0, (max(n - 1, 0) // blocks).bit_length())


def transposed(values, crd, n_out: int, n_in: int, pos=None, major=None, rows_dtype=None):
    """``(pos, crd, values, rows)`` of the nonzeros of a compressed level (``pos``, ``crd``) or of
    a COO matrix (``major``, ``crd``, in row-major order) with the roles of the two dimensions
    swapped: ``n_out`` output rows (the old minor extent), each holding its entries in the old
    major order (coordinates below ``n_in``, the old major extent); ``rows`` is every entry's
    output row in ``rows_dtype`` (a COO target's first level), None without it. Explicit zeros
    are dropped: the passes first assume there are none (the count reads no values), and run
    again dropping them where the fill meets one (:func:`_transposed`). Stable, in parallel passes (``kernels.transpose_*``): each chunk of the source
    counts its nonzeros per output row, a prefix
    places every chunk's run of every row (or block of rows), then

    * where the entries land near the diagonal (a banded matrix: a stencil), each chunk scatters
      its entries to their rows directly: the rows it writes at one time are a window of the
      output (twice the band, from the count pass) that stays in cache;
    * where that window passes :data:`BLOCKED_WINDOW` bytes (entries at random: a direct
      scatter then touches a new cache line of each output for every entry) and there are at
      least :data:`BLOCKED_FROM_ROWS` output rows, each chunk moves its entries to a few dozen
      blocks of output rows (:func:`blocking`), then each block is sorted by row through
      sub-blocks in buffers that stay in cache (``kernels.partition_blocks``, ``sort_blocks``).
      The row within the block travels in the low bits of the major coordinate, or in ``rows``;
      a COO target's ``rows`` are written row by row after each sub-block, while it is in L1.

    Extra memory: chunks x output rows counts (int32 when positions fit), freed before a
    blocked transpose allocates the outputs in their final dtypes (int32 positions and
    coordinates when they fit) and one block per thread (at most :data:`BLOCK_BUFFER` of the
    output, else the scatter is direct)."""
    for drop in (False, True):
        out = _transposed(values, crd, n_out, n_in, pos, major, rows_dtype, drop)
        if out is not None:
            return out
    raise AssertionError("the transpose that drops zeros always completes")


def _transposed(values, crd, n_out: int, n_in: int, pos, major, rows_dtype, drop: bool):
    """:func:`transposed`; ``drop``: zeros are dropped in the count and the fill; else the count
    reads no values (the common case: no explicit zeros; ``values`` is most of the source's
    bytes) and the fill counts the zeros it meets, None when there were any (its outputs are
    freed; the caller runs again dropping them)."""
    from . import kernels

    nnz = len(values)
    chunks = kernels.threads() if nnz >= PARALLEL_TRANSPOSE else 1
    goals = np.arange(chunks + 1, dtype=np.int64) * nnz // chunks
    wide = _pos_dtype(nnz)
    counts = np.zeros((chunks, n_out), dtype=wide)
    if pos is not None:
        bounds = row_bounds(pos, goals)
        kernels.transpose_counts(pos, crd, values, bounds, counts, drop)
    else:
        bounds = goals
        kernels.transpose_counts_coo(crd, values, bounds, counts, drop)
    band = _band(crd, nnz, n_out, n_in, pos, major)
    pos_out = np.empty(n_out + 1, dtype=wide)
    crd_dtype = _fitting(max(n_in - 1, 0))
    entry = crd_dtype.itemsize + values.dtype.itemsize
    window = 2 * band * (nnz / max(n_out, 1)) * entry
    cut = blocking(n_out, n_in, nnz, entry + (0 if rows_dtype is None else np.dtype(rows_dtype).itemsize),
                   crd_dtype, rows_dtype is not None) if n_out >= BLOCKED_FROM_ROWS and window > BLOCKED_WINDOW else None
    starts = None if cut is None else _block_starts(kernels, counts, pos_out, cut, chunks)
    if starts is not None:
        del counts  # the outputs are allocated after the table is freed
        return _blocked(kernels, values, crd, pos, major, bounds, starts, pos_out, cut, crd_dtype, rows_dtype, drop)
    nblocks = max(1, min(n_out, chunks * BLOCKS_PER_THREAD))
    blocks = np.arange(nblocks + 1, dtype=np.int64) * n_out // nblocks
    total = int(kernels.column_starts(counts, pos_out, blocks))
    crd_out = np.empty(total, dtype=crd_dtype)
    values_out = np.empty(total, dtype=values.dtype)
    if pos is not None:
        zeros = kernels.transpose_fill(pos, crd, values, bounds, counts, crd_out, values_out, drop)
    else:
        zeros = kernels.transpose_fill_coo(major, crd, values, bounds, counts, crd_out, values_out, drop)
    if zeros and not drop:
        return None
    rows = None
    if rows_dtype is not None:
        rows = np.empty(total, dtype=rows_dtype)
        kernels.expand_rows(pos_out, rows, chunks)
    return pos_out, crd_out, values_out, rows


def _block_starts(kernels, counts, pos_out, cut: Blocking, chunks: int):
    """``pos_out`` and where each chunk writes its first entry of each block (``kernels.block_starts``),
    or None where the largest block passes the sort's buffers' share :data:`BLOCK_BUFFER` of the
    output (entries bunched in few rows: the direct scatter then; ``counts`` is left as it was)."""
    n_out = len(pos_out) - 1
    nblocks = -(-n_out >> cut.shift)
    starts = np.empty((chunks, nblocks), dtype=np.int64)
    total = int(kernels.block_starts(counts, cut.shift, pos_out, starts))
    widest = int(np.diff(_block_edges(pos_out, cut.shift)).max(initial=0))
    return None if widest * min(chunks, nblocks) > BLOCK_BUFFER * total + (1 << 16) else starts


def _block_edges(pos_out, shift: int) -> np.ndarray:
    """Each block's first position, then the end."""
    return np.append(pos_out[:len(pos_out) - 1:1 << shift], pos_out[-1])


def _blocked(kernels, values, crd, pos, major, bounds, starts, pos_out, cut: Blocking, crd_dtype, rows_dtype,
             drop: bool):
    """:func:`transposed`'s blocked path, the starts placed (:func:`_block_starts`); None where
    zeros were met and not ``drop`` (:func:`_transposed`)."""
    chunks, total = len(starts), int(pos_out[-1])
    crd_out, values_out = np.empty(total, dtype=crd_dtype), np.empty(total, dtype=values.dtype)
    local = np.empty(0 if rows_dtype is None else total, dtype=crd_dtype if rows_dtype is None else rows_dtype)
    args = (bounds, cut.shift, starts, cut.packed, crd_out, values_out, local, drop)
    if pos is not None:
        zeros = kernels.partition_blocks(pos, crd, values, *args)
    else:
        zeros = kernels.partition_blocks_coo(major, crd, values, *args)
    if zeros and not drop:
        return None
    edges = _block_edges(pos_out, cut.shift)
    work = np.arange(chunks + 1, dtype=np.int64) * total // chunks
    kernels.sort_blocks(pos_out, cut.shift, cut.sub, row_bounds(edges, work), cut.packed, crd_out, as_bits(values_out),
                        local)
    return pos_out, crd_out, values_out, (None if rows_dtype is None else local)


_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def as_bits(values: np.ndarray) -> np.ndarray:
    """The contiguous ``values`` viewed as unsigned integers of their item size (1, 2, 4, 8
    bytes), for kernels that only move them: one compile per item size instead of one per dtype,
    bit for bit (-0.0 and NaN payloads kept); 16-byte values (complex128) as they are."""
    bits = _BITS.get(values.dtype.itemsize)
    return values if bits is None or values.dtype.kind == "V" else values.view(bits)


BAND_SAMPLE = 4096  # entries whose distance from the diagonal estimates the band


def _band(crd, nnz: int, n_minor: int, n_major: int, pos=None, major=None) -> int:
    """About how far from the (scaled) diagonal the entries lie: the largest
    ``|minor - major * n_minor / n_major|`` over :data:`BAND_SAMPLE` evenly spaced entries of a
    compressed level (``pos``) or a COO (``major``), each entry's major coordinate found by a
    search in ``pos``: a few hundred microseconds, beside a count pass that a per-entry
    computation would slow down."""
    if nnz == 0:
        return 0
    q = np.linspace(0, nnz - 1, min(nnz, BAND_SAMPLE)).astype(np.int64)
    # q in pos's own dtype: NumPy would otherwise widen all of an int32 pos for the search (~1 ms)
    rows = np.searchsorted(pos, q.astype(pos.dtype), side="right") - 1 if pos is not None else major[q]
    return int(np.abs(crd[q] - rows * (n_minor / max(n_major, 1))).max())


def row_bounds(pos, goals) -> np.ndarray:
    """The rows at which the entry counts ``goals`` are reached in ``pos`` (the first and last
    row pinned), int64: chunks of about equal entries. ``goals`` are cast to ``pos``'s dtype
    first, so NumPy does not widen all of ``pos`` for the search."""
    bounds = np.searchsorted(pos, goals.astype(pos.dtype)).astype(np.int64)
    bounds[0], bounds[-1] = 0, len(pos) - 1
    return bounds


def _csr_tensor(shape, package, fmt, pos, crd, values):
    from .tensor import Tensor

    buffers = narrow(fmt, {(1, "pos"): pos, (1, "crd"): crd}, fmt.level_shape(shape), (0, 0))
    return Tensor(fmt, shape, buffers, values, package=package)


# -- dense -> sparse -------------------------------------------------------------------


def select(x: np.ndarray, mode: int, mask: np.ndarray | None, crd_dtype=None):
    """Rows of ``x`` (all but the last axis flattened): ``(pos, crd, values)`` of the
    selected entries in row-major order, in two passes over ``x`` (``crd`` in ``crd_dtype``,
    by default the index policy's)."""
    from . import kernels

    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    x2 = x.reshape(rows, x.shape[-1])
    if not compiled_dtype(x.dtype):
        return _select_numpy(x2, mode, mask)
    mask2 = np.zeros((1, 1), dtype=np.bool_) if mask is None else np.asarray(mask, dtype=np.bool_).reshape(x2.shape)
    pos = prefix_sum(kernels.row_counts(x2, mode, mask2))
    crd = np.empty(int(pos[-1]), dtype=crd_dtype or _fitting(x2.shape[1] - 1))
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


def select_columns(x2: np.ndarray, mode: int, mask):
    """Columns of the 2-D ``x2``: ``(pos, crd, values)`` of the selected entries in column-major
    order, straight from the row-major array: chunks of rows count their entries per column, a
    prefix places each chunk's run of each column, each chunk scatters (two passes over ``x2``;
    extra memory: chunks x columns counts)."""
    from . import kernels

    rows, cols = x2.shape
    chunks = kernels.threads() if x2.size >= PARALLEL_TRANSPOSE else 1
    bounds = np.arange(chunks + 1, dtype=np.int64) * rows // chunks
    mask2 = np.zeros((1, 1), dtype=np.bool_) if mask is None else np.asarray(mask, dtype=np.bool_).reshape(x2.shape)
    wide = _pos_dtype(x2.size)
    counts = np.zeros((chunks, cols), dtype=wide)
    kernels.column_counts(x2, mode, mask2, bounds, counts)
    pos = np.empty(cols + 1, dtype=wide)
    nblocks = max(1, min(cols, chunks * BLOCKS_PER_THREAD))
    total = int(kernels.column_starts(counts, pos, np.arange(nblocks + 1, dtype=np.int64) * cols // nblocks))
    crd, values = np.empty(total, dtype=_fitting(max(rows - 1, 0))), np.empty(total, dtype=x2.dtype)
    kernels.column_fill(x2, mode, mask2, bounds, counts, crd, values)
    return pos, crd, values


_STAGE = TensorFormat.parse("(i, j) -> (i : dense, j : compressed)")


def from_dense(x: np.ndarray, fmt: TensorFormat, package: str, mode: int = NONZERO, mask=None, **options):
    """``x``'s selected entries in ``fmt``: CSR-like formats directly from the row counts, CSC
    from the column counts, COO from the counts expanded, DIAI / DIAJ from the diagonals holding
    an entry (``fastpaths_rows.dia_from_dense``: no selection in between); every other matrix format converted
    from the selection held as a CSR (``Tensor.convert``: the generated writer where it writes
    ``fmt``, as ``Tensor.from_package(x).convert(fmt)`` does, else the pack hooks; ``prune``
    passed on), tensors of other ranks through the generic assembly of the selected coordinates."""
    from .tensor import Tensor

    fam = family(fmt)
    if fam is not None and fam.kind == "csr" and fam.major == 1 and compiled_dtype(x.dtype):
        return _csr_tensor(x.shape, package, fmt, *select_columns(x, mode, mask))
    if x.ndim == 2 and not options.get("prune", False):
        from .fastpaths_rows import dia_from_dense  # DIA straight from the array's diagonals

        dia = dia_from_dense(x, fmt, package, mode, mask)
        if dia is not None:
            return dia
    if csr_like(fmt):  # coordinates straight in the format's dtype (a crdWidth = 16 CSR: uint16)
        crd_dtype = buffer_dtypes(fmt, fmt.level_shape(x.shape), (0,) * fmt.nlevels, 0)[(fmt.nlevels - 1, "crd")]
        pos, crd, values = select(x, mode, mask, crd_dtype)
    else:
        pos, crd, values = select(x, mode, mask)
    if csr_like(fmt):
        buffers = narrow(fmt, {(fmt.nlevels - 1, "pos"): pos, (fmt.nlevels - 1, "crd"): crd},
                         fmt.level_shape(x.shape), (0,) * fmt.nlevels)
        return Tensor(fmt, x.shape, buffers, values, package=package)
    if x.ndim > 1 and coo_like(fmt):
        return _coo_tensor(x.shape, fmt, pos, crd, values, package)
    if x.ndim == 2:  # the selection as a CSR, then the conversion every CSR takes (the generated writer)
        stage = Tensor(_STAGE, x.shape, {(1, "pos"): pos, (1, "crd"): crd}, values, package=package)
        return stage.convert(fmt, prune=options.get("prune", False))
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

    major, minor = one_width(coords[fam.major], coords[1 - fam.major])
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


def one_width(major: np.ndarray, minor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates of two different integer dtypes both as contiguous int64 (the same arrays
    when their dtypes agree): ``coo_bucket`` then compiles one signature per width, not one per
    pair of widths. A uint64 coordinate past int64's range turns negative, which the kernel
    rejects as out of range, as it did the original."""
    if major.dtype == minor.dtype:
        return major, minor
    return np.ascontiguousarray(major, dtype=np.int64), np.ascontiguousarray(minor, dtype=np.int64)


def coo_like(fmt: TensorFormat) -> bool:
    """Canonical COO in dimension order: compressed(nonunique) then singletons."""
    nonunique = Singleton(properties=(LevelProperty.NONUNIQUE,))
    kinds = [lv.type for lv in fmt.levels]
    return (fmt.ndim >= 2 and _plain_levels(fmt, in_order=True)
            and kinds == [COMPRESSED_NONUNIQUE] + [nonunique] * (fmt.ndim - 2) + [SINGLETON]
            and not fmt.pos_width and not fmt.crd_width)


def _coo_from_rows(shape, package, fmt, pos, crd, values, rows=None):
    """A 2-D COO tensor (``fmt``: compressed(nonunique), singleton) of entries grouped by rows of
    ``fmt``'s first level (``pos``: their offsets, ``crd``: the other coordinate): the first
    level's coordinates ``rows`` when the caller has them in their final dtype, else expanded
    from ``pos`` in parallel; every buffer in its final dtype."""
    from . import kernels
    from .tensor import Tensor

    nnz = len(values)
    level_shape = fmt.level_shape(shape)
    dtypes = buffer_dtypes(fmt, level_shape, (0, 0), nnz)
    if rows is None:
        rows = np.empty(nnz, dtype=dtypes[(0, "crd")])
        kernels.expand_rows(pos, rows, kernels.threads() if nnz >= PARALLEL_TRANSPOSE else 1)
    buffers = {(0, "pos"): np.array([0, nnz], dtype=dtypes[(0, "pos")]), (0, "crd"): rows,
               (1, "crd"): crd.astype(dtypes[(1, "crd")], copy=False)}
    return Tensor(fmt, tuple(shape), buffers, values, package=package)


def _coo_copied(t, fmt, pos, crd, values):
    """The compressed-family ``t`` (rows major, as ``fmt``'s first level) as a COO tensor in
    ``fmt`` holding copies of its coordinates and values, every buffer written once, in its final
    dtype, by one parallel pass (``kernels.rows_to_coo``); None when an explicit zero must be
    dropped (the generic path does it)."""
    from . import kernels
    from .tensor import Tensor

    nnz = len(values)
    dtypes = buffer_dtypes(fmt, fmt.level_shape(t.shape), (0, 0), nnz)
    chunks = kernels.threads() if nnz >= PARALLEL_TRANSPOSE else 1
    goals = np.arange(chunks + 1, dtype=np.int64) * nnz // chunks
    bounds = row_bounds(pos, goals)
    rows = np.empty(nnz, dtype=dtypes[(0, "crd")])
    crd_out, values_out = np.empty(nnz, dtype=dtypes[(1, "crd")]), np.empty(nnz, dtype=values.dtype)
    if kernels.rows_to_coo(pos, crd, values, bounds, rows, crd_out, values_out):
        return None
    buffers = {(0, "pos"): np.array([0, nnz], dtype=dtypes[(0, "pos")]), (0, "crd"): rows, (1, "crd"): crd_out}
    return Tensor(fmt, tuple(t.shape), buffers, values_out, package=t.package)


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


# -- element-wise merges of two matrices of one compressed-family format -----------------------

MERGE_SERIAL_WORK = 300_000  # input entries below which one thread merges: a parallel launch costs ~0.05 ms
PAIRED_ROW_ENTRIES = 32      # union rows merge two at a time while A and B hold at most this many entries a row together (mean)


@dataclass(frozen=True)
class Merge:
    """One element-wise operation of two matrices stored in the same CSR-family format (same
    major dimension, no fixed index widths): what :func:`merge` needs besides the operands.

    ``op`` is ``kernels.ADD``, ``SUB`` or ``MUL``; ``layout`` the result's format and shape;
    ``dtype`` the result's values (operands of another dtype are cast first); ``crd_dtype``
    the result's coordinates (the index policy for the minor extent)."""

    op: int
    layout: object
    dtype: np.dtype
    crd_dtype: np.dtype

    def __post_init__(self):
        fam = family(self.layout.fmt)
        if fam is None or fam.kind != "csr" or self.layout.fmt.pos_width or self.layout.fmt.crd_width:
            raise ValueError(f"Merge needs a CSR-family format without index widths, got {self.layout.fmt}")
        if self.op not in (0, 1, 2) or not compiled_dtype(self.dtype) or self.dtype.kind == "b":
            raise ValueError(f"Merge: op {self.op} on {self.dtype} is not compiled")

    @classmethod
    def of(cls, op: int, layout, dtype) -> "Merge":
        minor = layout.level_shape[1]
        return cls(op, layout, np.dtype(dtype), index_dtype(0, 0, max(minor - 1, 0), "crd"))


def mergeable(a, b, bools: bool = False) -> bool:
    """``a`` and ``b`` are host matrices in one CSR-family format without index widths, of one
    shape, with values the merge kernels compile for (not float16; bool only with ``bools``:
    :func:`aligned` takes them, the arithmetic merges do not)."""
    fmt = a.format
    if fmt != b.format or a.shape != b.shape or a.device != "cpu" or b.device != "cpu" \
            or fmt.pos_width or fmt.crd_width:
        return False
    fam = family(fmt)
    return fam is not None and fam.kind == "csr" and all(
        compiled_dtype(t.dtype) and (bools or t.dtype.kind != "b") for t in (a, b))


def merge(spec: Merge, a, b, package):
    """``a op b`` (``spec.op``) as a new tensor of ``spec.layout``; entries that compute to zero
    are not stored (as every element-wise result of ustc).

    Small operands (fewer than :data:`MERGE_SERIAL_WORK` entries together) merge on one thread,
    appending. Larger ones merge in one parallel pass: work-balanced row chunks, each writing
    from the sum of its rows' bounds (``nnz_A(row) + nnz_B(row)``, or the smaller of the chunk's
    two counts for a product), then the chunks close up (:func:`_compact`). That over-allocation
    is at most the inputs' own entry count; it is refused before allocating when it (and the
    compact copy) would exceed :func:`ustc.memory.memory_budget`, and the merge then counts and
    fills (two passes, exact allocation; StorageError only when the result itself does not fit).
    The result keeps an over-allocated buffer only when at least half of it is used, else it is
    copied to its size (SciPy prunes the same way)."""
    from . import kernels

    op = kernels.MUL if spec.op == kernels.MUL else kernels.ADD
    a_pos, a_crd, a_val = a._buffers[(1, "pos")], a._buffers[(1, "crd")], _values_as(a, spec.dtype)
    b_pos, b_crd, b_val = b._buffers[(1, "pos")], b._buffers[(1, "crd")], _values_as(b, spec.dtype)
    if spec.op == kernels.SUB:           # A - B is A + (-B), exactly (negation is exact, integers wrap)
        b_val = np.negative(b_val[:int(b_pos[-1])])
    na, nb = int(a_pos[-1]), int(b_pos[-1])
    rows = len(a_pos) - 1
    bound = min(na, nb) if op == kernels.MUL else na + nb
    operands = (op, spec.dtype.type(0), a_pos, a_crd, a_val, b_pos, b_crd, b_val)
    paired = na + nb <= PAIRED_ROW_ENTRIES * rows
    entry = spec.crd_dtype.itemsize + spec.dtype.itemsize
    threads = 1 if na + nb < MERGE_SERIAL_WORK or rows < 2 else kernels.threads()
    if threads == 1 and (na + nb < MERGE_SERIAL_WORK or bound * entry <= memory_budget()):
        pos, crd, val = _buffers(rows, bound, spec)
        count = int(kernels.merge_serial(op, paired, *operands[1:], pos, crd, val))
    elif threads > 1 and bound * entry * (1 if threads <= 2 else 2) <= memory_budget():
        pos, crd, val, count = _one_pass(kernels, operands, paired, rows, bound, spec, threads)
    else:
        pos, crd, val, count = _two_pass(kernels, operands, rows, spec, entry)
    crd, val = _trimmed(crd, count), _trimmed(val, count)
    if pos.dtype != _pos_dtype(count):
        pos = pos.astype(_pos_dtype(count))
    return trusted_tensor(spec.layout, {(1, "pos"): pos, (1, "crd"): crd}, val, [rows, count], package)


def _values_as(t, dtype):
    values = t._values
    return values if values.dtype == dtype else values.astype(dtype)


_INT32, _INT64, _INT32_MAX = np.dtype(np.int32), np.dtype(np.int64), np.iinfo(np.int32).max


def _pos_dtype(hi: int) -> np.dtype:
    """``index_dtype(0, 0, hi, "pos")`` without widths (int32 when it fits), minus its overhead."""
    return _INT32 if hi <= _INT32_MAX else _INT64


def _buffers(rows: int, size: int, spec: Merge):
    return (np.empty(rows + 1, _pos_dtype(size)), np.empty(size, spec.crd_dtype), np.empty(size, spec.dtype))


def _trimmed(buffer: np.ndarray, count: int) -> np.ndarray:
    return buffer[:count].copy() if count < len(buffer) // 2 else buffer[:count]


def _one_pass(kernels, operands, paired: bool, rows: int, bound: int, spec: Merge, threads: int):
    """Work-balanced chunks merged in parallel into one over-allocated buffer, then closed up."""
    op, a_pos, b_pos = operands[0], operands[2], operands[5]
    cuts = kernels.split_rows(a_pos, b_pos, threads)
    na, nb = a_pos[cuts].astype(np.int64), b_pos[cuts].astype(np.int64)
    sizes = np.minimum(np.diff(na), np.diff(nb)) if op == kernels.MUL else np.diff(na) + np.diff(nb)
    starts = np.zeros(threads, np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    pos, crd, val = _buffers(rows, bound, spec)
    ends = np.empty(threads, np.int64)
    kernels.merge_chunks(op, paired, *operands[1:], cuts, starts, pos, crd, val, ends)
    return (pos,) + _compact(kernels, cuts, starts, ends, pos, crd, val, threads)


def _compact(kernels, cuts, starts, ends, pos, crd, val, threads: int):
    """The chunks made contiguous: moved down in place, in order, on up to two threads (the
    first chunk stays: half the entries move, against all of them for a copy); with more
    threads copied in parallel to compact arrays (a sequential move would not scale)."""
    if threads <= 2:
        count = int(kernels.close_gaps(cuts, starts, ends, pos, crd, val))
        return crd, val, count
    sizes = ends - starts
    offsets = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=offsets[1:])
    count = int(offsets[-1] + sizes[-1])
    crd_out, val_out = np.empty(count, crd.dtype), np.empty(count, val.dtype)
    kernels.gather_chunks(cuts, starts, ends, offsets, pos, crd, val, crd_out, val_out)
    return crd_out, val_out, count


def _two_pass(kernels, operands, rows: int, spec: Merge, entry: int):
    """Count each row's entries, then fill exact-size buffers (both passes in parallel)."""
    counts = np.zeros(rows + 1, np.int64)
    kernels.merge_counts(*operands, counts)
    np.cumsum(counts, out=counts)
    count = int(counts[-1])
    budget = memory_budget()
    if count * entry > budget:
        raise StorageError(f"the element-wise result would store {count:,} entries ({count * entry:,} bytes), "
                           f"more than the memory budget of {budget:,} bytes ({BUDGET_VARIABLE} sets it)")
    crd, val = np.empty(count, spec.crd_dtype), np.empty(count, spec.dtype)
    kernels.merge_fill(*operands, counts, crd, val)
    return counts, crd, val, count


def aligned(a, b):
    """``(pos, crd, left, right)``: the union pattern of two matrices of one CSR-family format
    (:func:`mergeable`, bool values too) and each one's values on it (zero where it stores
    nothing), for a binary ufunc over the aligned values (:func:`from_aligned`)."""
    from . import kernels

    a_pos, b_pos = a._buffers[(1, "pos")], b._buffers[(1, "pos")]
    size = int(a_pos[-1]) + int(b_pos[-1])
    rows = len(a_pos) - 1
    pos, crd = np.empty(rows + 1, _pos_dtype(size)), np.empty(size, index_dtype(0, 0, max(a.level_shape[1] - 1, 0), "crd"))
    left, right = np.empty(size, a.dtype), np.empty(size, b.dtype)
    count = int(kernels.align_union(a_pos, a._buffers[(1, "crd")], a._values, a.dtype.type(0), b_pos,
                                    b._buffers[(1, "crd")], b._values, b.dtype.type(0), pos, crd, left, right))
    return pos, crd[:count], left[:count], right[:count]


def from_aligned(layout, pos, crd, values, package):
    """The tensor of :func:`aligned`'s pattern holding ``values`` (a ufunc's results), its zero
    results dropped (in place on ``pos`` and ``crd``, which the caller hands over)."""
    from . import kernels

    values = np.ascontiguousarray(values)
    if compiled_dtype(values.dtype):
        count = int(kernels.drop_zeros(pos, crd, values))
    else:                                   # float16 and the like: NumPy's compaction
        keep = values != 0
        rows = np.repeat(np.arange(len(pos) - 1), np.diff(pos))
        pos = prefix_sum(np.bincount(rows[keep], minlength=len(pos) - 1)).astype(pos.dtype)
        crd, values = crd[keep], values[keep]
        count = len(values)
    crd, values = _trimmed(crd, count), _trimmed(values, count)
    return trusted_tensor(layout, {(1, "pos"): pos, (1, "crd"): crd}, values, [len(pos) - 1, count], package)


def trusted_tensor(layout, buffers: dict, values: np.ndarray, counts: list, package):
    """A host Tensor from buffers a ustc kernel has just written for ``layout``, skipping the
    constructor's checks (its level position counts ``counts`` are known). The attributes are
    ``Tensor.__init__``'s own; tests compare the two."""
    from .tensor import Tensor

    t = object.__new__(Tensor)
    t.__dict__ = {"_layout": layout, "_buffers": buffers, "_values": values, "_device": "cpu", "_package": package,
                  "_origin": {}, "_counts": counts}
    return t
