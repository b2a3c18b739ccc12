"""Reading and writing tensors: Matrix Market (``.mtx``) and FROSTT (``.tns``).

    >>> from ustc.tensor.io import from_file, to_file
    >>> t = from_file("bcsstk01.mtx", tensor_format="CSR")         # doctest: +SKIP
    >>> to_file(t, "copy.tns")                                     # doctest: +SKIP

Matrix Market goes through SciPy's multithreaded fast_matrix_market: coordinate
and array files; real, integer, pattern and complex fields; general, symmetric,
skew-symmetric and hermitian symmetry (expanded to every entry on reading).
Pattern entries read as 1.0. A coordinate file's entries are parsed in file
order by its core. By default they stay in that order, as ``scipy.io.mmread``
returns them (no sort, no copy; a symmetric file's mirrored entries appended),
and one parallel pass picks the format that says what the order is: canonical
COO for a file sorted by row, else :data:`FILE_ORDER` (nonordered, nonunique:
duplicates and explicit zeros kept; a file sorted by column, as most
collections' are, is one: a COO over (column, row) would have no SciPy view). A requested CSR-family or canonical COO
format is built straight from the entries: taken as they are when the file is
already in its order; else one parallel counting sort
(:mod:`ustc.tensor.io_kernels`) that also places a symmetric file's mirrored
entries, then each row sorted and summed (the sort skipped for a file sorted in
the other order, which the stable counting sort leaves canonical); CSR / CSC
tensors are written from their rows, their symmetry found on them. Where
SciPy's internal interface is missing, ``scipy.io.mmread`` / ``mmwrite`` do the
work.

FROSTT ``.tns`` files hold one entry per line, ``i1 i2 ... iN value`` with
1-based indices, separated by any whitespace; ``#`` starts a comment that runs
to the end of its line. The reader is NumPy's C text reader (``np.loadtxt``,
rewritten in C for NumPy 1.23 and faster than ``np.fromstring`` here); a
rejected file is re-read by a chunked byte-level pass that finds the offending
line. FROSTT has no header, so the extents are, in order of preference: the ``shape`` argument, a
``# shape: n1 n2 ... nN`` comment in the first 64 KiB (``to_file`` writes it
as the first line), the largest index in each dimension. Values read as int64
when no token of the file looks like a float (no ``.``, exponent, ``nan`` or
``inf``), else float64; tokens are parsed as float64 either way, so integers
beyond 2**53 lose precision.

Malformed files raise :class:`ustc.FileFormatError`, whose message names the
file and, where known, the line; the error carries ``path`` and ``line``
(1-based, or None) attributes.
"""

from __future__ import annotations

import os
import re
import warnings
from io import BytesIO

import numpy as np

from ..errors import FileFormatError, ShapeError, StorageError, UnsupportedOperation
from ..format.ir import TensorFormat
from ..format.levels import LevelFormat, LevelProperty
from ..formats import COO
from ..formats import i as _i
from ..formats import j as _j

SUPPORTED = (".mtx", ".tns")
SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")
SHAPE_WINDOW = 1 << 16  # a '# shape:' comment is looked for in the first 64 KiB
CHUNK_BYTES = 8 << 20   # the careful .tns pass works on pieces this big (np.fromstring slows on huge inputs)
_SPACE_TABLE = np.zeros(256, dtype=bool)
_SPACE_TABLE[[9, 10, 11, 12, 13, 32]] = True   # the bytes C's isspace accepts
_FLOAT_MARKS = (b".", b"e", b"E", b"n", b"N", b"i", b"I")
_COMMENT = re.compile(rb"#[^\n]*")
_SHAPE_COMMENT = re.compile(rb"#[ \t]*shape[ \t]*:?[ \t]*(\d+(?:[ \t]+\d+)*)[ \t]*\r?$", re.MULTILINE)


def _error(path, message: str, line: int | None = None) -> FileFormatError:
    where = f"{os.fspath(path)}, line {line}" if line is not None else os.fspath(path)
    exc = FileFormatError(f"{where}: {message}")
    exc.path, exc.line = os.fspath(path), line
    return exc


def _kind(path) -> str:
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    if suffix not in SUPPORTED:
        raise _error(path, f"unknown file extension {suffix or '(none)'!r}; supported: {', '.join(SUPPORTED)}")
    return suffix


def _host(t):
    """``t`` with its buffers on the host (a copy only for CUDA tensors)."""
    return t.to("cpu") if t.device != "cpu" else t


# -- public entry points ---------------------------------------------------------------
def from_file(path, tensor_format=None, *, shape=None):
    """The tensor stored in ``path`` (``.mtx`` or ``.tns``, chosen by extension).

    ``tensor_format`` (a ``TensorFormat`` or DSL text / name) is the format of
    the result; by default COO for coordinate data (a compressed vector for a
    rank-1 ``.tns``) and dense for Matrix Market array files. A Matrix Market
    coordinate file's default keeps the entries in file order, duplicates and
    explicit zeros included (as ``scipy.io.mmread``), its format saying the
    order found: ``COO`` when sorted by row (strictly), else
    ``io.FILE_ORDER`` (nonordered, nonunique);
    pass ``"COO"`` for canonical COO whatever the file's order. ``shape``
    overrides the extents (entries outside it raise FileFormatError).
    Otherwise duplicate entries are summed and zero values dropped unless the
    format stores them. Raises FileFormatError (unknown extension, malformed file)
    and FileNotFoundError.
    """
    kind = _kind(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such tensor file: {os.fspath(path)}")
    if kind == ".mtx":
        return _read_mtx(path, tensor_format, shape)
    return _read_tns(path, tensor_format, shape)


def to_file(t, path, *, symmetry: str | None = None):
    """Write tensor ``t`` to ``path`` (``.mtx`` for matrices, ``.tns`` for any rank); returns ``path``.

    The file holds the nonzero stored entries: padding and explicit zeros are
    left out, duplicates are written as stored (readers sum them). A Matrix
    Market file of an all-dense tensor is an array file, else a coordinate
    file whose symmetry (symmetric, skew-symmetric, hermitian: one triangle
    written) is found from the entries unless ``symmetry`` (``"general"``, ...)
    says it. ``.tns`` indices are 1-based and a ``# shape:`` comment
    records the extents. Never mutates ``t``. Raises UnsupportedOperation for
    ``.mtx`` of rank != 2 and ``.tns`` of complex values.
    """
    kind = _kind(path)
    if symmetry is not None and (kind != ".mtx" or symmetry not in SYMMETRIES):
        raise UnsupportedOperation(f"symmetry={symmetry!r}: Matrix Market files take one of "
                                   f"{', '.join(SYMMETRIES)}" + ("" if kind == ".mtx" else f", and {kind} none"))
    t = _host(t)
    if kind == ".mtx":
        _write_mtx(t, path, symmetry)
    else:
        _write_tns(t, path)
    return path


# -- Matrix Market -------------------------------------------------------------------------
def _read_mtx(path, tensor_format, shape):
    from scipy import io as sio
    from scipy import sparse

    from .tensor import Tensor

    try:
        entries = _read_mtx_entries(path)
        m = sio.mmread(os.fspath(path), spmatrix=False) if entries is None else None
    except (ValueError, OverflowError, UnicodeDecodeError, IndexError, RuntimeError) as exc:
        text = str(exc)
        found = re.match(r"Line (\d+):\s*(.*)", text, re.DOTALL)
        if found:
            raise _error(path, found.group(2), int(found.group(1))) from exc
        raise _error(path, text or type(exc).__name__) from exc
    shape = (entries[0] if m is None else tuple(m.shape)) if shape is None else tuple(int(n) for n in shape)
    if len(shape) != 2:
        raise _error(path, f"a Matrix Market file holds a matrix; shape {shape} is not 2-D")
    try:
        if m is None:
            return _mtx_tensor(entries, shape, tensor_format, path)
        if sparse.issparse(m):
            return Tensor.from_coo((m.row, m.col), m.data, shape, tensor_format)
        if shape != m.shape:
            raise _error(path, f"array file of shape {m.shape} does not fit shape {shape}")
        if tensor_format is None:
            return Tensor.from_dense(np.ascontiguousarray(m))
        coords = np.nonzero(m)          # assemble the target directly (any format, any dtype)
        return Tensor.from_coo(coords, m[coords], shape, tensor_format)
    except (StorageError, ShapeError) as exc:
        raise _error(path, str(exc)) from exc


def _read_mtx_entries(path):
    """``(shape, rows, cols, values, symmetry)`` of a coordinate file as it lists its entries
    (0-based, a symmetric file's stored triangle only), read by SciPy's fast_matrix_market core
    into arrays that are not zeroed first; None for an array file, or where that SciPy-internal
    interface is missing (the caller then goes through ``scipy.io.mmread``). Parse errors
    propagate as SciPy raises them."""
    try:
        from scipy.io import _fast_matrix_market as fmm
        from scipy.io._fast_matrix_market import _fmm_core

        open_cursor, dtypes = fmm._get_read_cursor, fmm._field_to_dtype
    except (ImportError, AttributeError):
        return None
    cursor, stream = open_cursor(os.fspath(path))
    try:
        head = cursor.header
        if head.format != "coordinate" or head.field not in dtypes:
            return None
        index = np.int32 if max(head.nrows, head.ncols) < 2 ** 31 else np.int64
        rows, cols = np.empty(head.nnz, dtype=index), np.empty(head.nnz, dtype=index)
        values = np.empty(head.nnz, dtype=dtypes[head.field])
        if head.field == "pattern":
            values.fill(1)
        _fmm_core.read_body_coo(cursor, rows, cols, values)
        return (int(head.nrows), int(head.ncols)), rows, cols, values, str(head.symmetry)
    finally:
        cursor.close()
        if stream is not None:
            stream.close()


def _mtx_tensor(entries, shape, tensor_format, path):
    """The tensor of :func:`_read_mtx_entries`' entries. The default format (and
    :data:`FILE_ORDER`) keeps the entries as the file lists them (:func:`_file_order`); CSR-family
    and canonical COO targets come straight from the entries (:func:`_sorted_entries`); other
    targets through ``Tensor.from_coo`` of the expanded entries."""
    from . import fastpaths, io_kernels
    from .tensor import Tensor, as_format

    _, rows, cols, values, symmetry = entries
    mirror = {"general": io_kernels.GENERAL, "symmetric": io_kernels.SYMMETRIC,
              "skew-symmetric": io_kernels.SKEW, "hermitian": io_kernels.HERMITIAN}.get(symmetry)
    if mirror is None:
        raise _error(path, f"unknown Matrix Market symmetry {symmetry!r}")
    fmt = None if tensor_format is None else as_format(tensor_format)
    direct = len(values) and fastpaths.compiled_dtype(values.dtype) \
        and (mirror == io_kernels.GENERAL or shape[0] == shape[1])
    if direct and (fmt is None or fmt == FILE_ORDER):
        found = _file_order(shape, rows, cols, values, mirror, fmt is None)
        if found is not None:
            return found
    if direct and fmt is not None:
        found = _sorted_entries(shape, rows, cols, values, mirror, fmt)
        if found is not None:
            return found
    if mirror != io_kernels.GENERAL:
        off = rows != cols
        mirrored = values[off]
        if mirror == io_kernels.SKEW:
            mirrored = -mirrored
        elif mirror == io_kernels.HERMITIAN:
            mirrored = np.conj(mirrored)
        rows, cols = np.concatenate((rows, cols[off])), np.concatenate((cols, rows[off]))
        values = np.concatenate((values, mirrored))
    return Tensor.from_coo((rows, cols), values, shape, tensor_format)


_C, _S = LevelFormat.COMPRESSED, LevelFormat.SINGLETON
_NU, _NO = LevelProperty.NONUNIQUE, LevelProperty.NONORDERED
#: the default formats of a Matrix Market coordinate file's tensor, chosen by its entry order:
#: ROW_MAJOR (COO) for entries strictly increasing by (row, column), else FILE_ORDER (COO, rows
#: and columns nonordered and nonunique: the entries as listed)
FILE_ORDER = TensorFormat([_i, _j], {_i: (_C, _NU, _NO), _j: (_S, _NU, _NO)}, name="COO(file order)")
ROW_MAJOR = COO(2)


def _entry_chunks(n: int) -> int:
    from . import io_kernels, kernels

    return max(1, min(kernels.threads(), n // io_kernels.CHUNK_ENTRIES))


def _file_order(shape, rows, cols, values, mirror, default: bool):
    """The entries as the file lists them (a general file's arrays as read, no copy; a mirrored
    file's stored entries, then the mirrored off-diagonal ones: ``scipy.io.mmread``'s expansion,
    in one parallel pass), in :data:`FILE_ORDER`; with ``default``, in canonical COO
    (:data:`ROW_MAJOR`) when one parallel pass finds them strictly increasing by (row, column).
    None when a coordinate is out of range (the generic path names it)."""
    from . import io_kernels

    chunks = _entry_chunks(len(values))
    flags, _ = io_kernels.entry_order(rows, cols, values, shape[0], shape[1], chunks)
    if not flags & io_kernels.IN_RANGE:
        return None
    fmt = FILE_ORDER
    if mirror != io_kernels.GENERAL:
        off = io_kernels.off_diagonal(rows, cols, chunks)
        total = len(values) + int(off[-1])
        rows_out, cols_out = np.empty(total, dtype=rows.dtype), np.empty(total, dtype=cols.dtype)
        vals_out = np.empty(total, dtype=values.dtype)
        io_kernels.mirror_append(rows, cols, values, mirror, off, rows_out, cols_out, vals_out)
        rows, cols, values = rows_out, cols_out, vals_out
    elif default and flags & io_kernels.ROW_MAJOR:
        fmt = ROW_MAJOR
    return _coo_tensor(shape, fmt, (rows, cols), values)


def _coo_tensor(shape, fmt, coords, values):
    """A 2-D COO tensor of ``fmt`` holding ``coords`` (by level) and ``values`` as they are."""
    from . import packages
    from .dtypes import buffer_dtypes
    from .tensor import Tensor

    dtypes = buffer_dtypes(fmt, fmt.level_shape(shape), (0, 0), len(values))
    buffers = {(0, "pos"): np.array([0, len(values)], dtype=dtypes[(0, "pos")]),
               (0, "crd"): coords[0].astype(dtypes[(0, "crd")], copy=False),
               (1, "crd"): coords[1].astype(dtypes[(1, "crd")], copy=False)}
    return Tensor(fmt, tuple(shape), buffers, values, package=packages.NUMPY)


def _sorted_entries(shape, rows, cols, values, mirror, fmt):
    """The entries in CSR-family or canonical COO ``fmt``, or None for other formats (and
    out-of-range coordinates). A general file already in the target's order (one parallel check)
    is taken as it is; else one parallel counting sort by the major coordinate that also places
    a mirrored file's mirrored entries (:mod:`ustc.tensor.io_kernels`), then each row sorted and
    summed (skipped when the file is sorted in the other order: the counting sort is stable),
    packed in place where something was dropped."""
    from . import fastpaths, io_kernels, kernels, packages

    fam = fastpaths.family(fmt)
    if fam is None or not (fam.kind == "csr" or fastpaths.coo_like(fmt)) or fmt.pos_width or fmt.crd_width:
        return None
    major, minor = (rows, cols) if fam.major == 0 else (cols, rows)
    n_major, n_minor = shape[fam.major], shape[1 - fam.major]
    chunks = _entry_chunks(len(values))
    order = 0
    if mirror == io_kernels.GENERAL:
        flags, zeros = io_kernels.entry_order(major, minor, values, n_major, n_minor, chunks)
        if not flags & io_kernels.IN_RANGE:
            return None
        order = flags if zeros == 0 else 0
    if order & io_kernels.ROW_MAJOR:                 # canonical already: no copy
        if fam.kind != "csr":
            return _coo_tensor(shape, fmt, (major, minor), values)
        pos = np.zeros(n_major + 1, dtype=np.int64)
        kernels.sorted_pos(major, pos, chunks)
        return fastpaths._csr_tensor(tuple(shape), packages.NUMPY, fmt, pos, minor, values)
    starts, ok = io_kernels.bucket_counts(major, minor, n_major, n_minor, mirror, chunks)
    if not ok:
        return None
    pos = np.empty(n_major + 1, dtype=np.int64)
    io_kernels.bucket_starts(starts, pos)
    total = int(pos[-1])
    crd = np.empty(total, dtype=fastpaths._fitting(max(n_minor - 1, 0)))
    vals = np.empty(total, dtype=values.dtype)
    io_kernels.bucket_scatter(major, minor, values, mirror, starts, crd, vals)
    del starts
    if not order & io_kernels.COLUMN_MAJOR:       # a stable bucketing of (minor, major) order is canonical
        counts = np.empty(n_major, dtype=np.int64)
        kernels.sort_sum_rows(pos, crd, vals, counts)
        if int(counts.sum()) != total:         # duplicates summed or zeros dropped: pack the rows
            kept = io_kernels.compact_in_place(pos, crd, vals, counts)
            crd, vals = crd[:kept], vals[:kept]
            if kept < total - total // 8:          # much dropped: do not hold the rest
                crd, vals = crd.copy(), vals.copy()
    if fam.kind == "csr":
        return fastpaths._csr_tensor(tuple(shape), packages.NUMPY, fmt, pos, crd, vals)
    return fastpaths._coo_from_rows(tuple(shape), packages.NUMPY, fmt, pos, crd, vals)


def _write_mtx(t, path, symmetry: str | None = None) -> None:
    from scipy import io as sio
    from scipy import sparse

    from .._version import __version__

    if t.ndim != 2:
        raise UnsupportedOperation(f"Matrix Market holds matrices; this tensor has rank {t.ndim} "
                                   f"(write it as .tns instead)")
    comment = f" written by ustc {__version__} from format {t.format}"
    if t.format.dense_storage:
        dense = np.asarray(_mtx_values(np.asarray(t.to_dense())))
        sio.mmwrite(os.fspath(path), dense, comment=comment, symmetry="general")
        return
    rows = _compressed_rows(t)
    if rows is None:
        coords, values = _nonzero_entries(t)
        a = sparse.coo_array((_mtx_values(values), coords), shape=t.shape)
        sio.mmwrite(os.fspath(path), a, comment=comment, symmetry=symmetry or _symmetry(a))
        return
    (row, col), values, found = rows
    symmetry = symmetry or found
    if symmetry != "general":              # the file holds the lower triangle (as mmwrite writes it)
        lower = row >= col
        if not lower.all():
            row, col, values = row[lower], col[lower], values[lower]
    _write_coo(path, t.shape, row, col, _mtx_values(values), comment, symmetry)


def _compressed_rows(t):
    """``((rows, cols), values, symmetry)`` of a CSR or CSC tensor with canonical rows (columns)
    and no stored zeros, without copies but the expanded major coordinate (in parallel), and
    its symmetry found on the compressed rows (:func:`ustc.tensor.io_kernels.mirror_symmetry`:
    a binary search per entry for its mirror, stopping at the first that rules every kind out);
    None for every other tensor (the caller goes through SciPy's COO)."""
    from . import fastpaths, io_kernels, kernels

    fam = fastpaths.family(t.format)
    if fam is None or fam.kind != "csr" or t.ndim != 2:
        return None
    pos, crd, values = t.pos(1), t.crd(1), t.values
    if not all(isinstance(v, np.ndarray) for v in (pos, crd, values)) or not len(values) \
            or not fastpaths.compiled_dtype(values.dtype):
        return None
    n_major, nnz = t.shape[fam.major], len(values)
    index = np.int32 if n_major < 2 ** 31 else np.int64
    if nnz < PARALLEL_WRITE:               # NumPy and SciPy: no kernel to load, no thread to wake
        if np.count_nonzero(values) != nnz or not _rows_canonical(pos, crd):
            return None
        major = np.repeat(np.arange(n_major, dtype=index), np.diff(pos))
        symmetry = "general"
        if t.shape[0] == t.shape[1]:
            from scipy import sparse

            symmetry = _symmetry(sparse.csr_array((values, crd, pos), shape=(n_major, n_major)))
    else:
        chunks = max(1, min(kernels.threads(), nnz // io_kernels.CHUNK_ENTRIES))
        if kernels.count_zeros(values) or not io_kernels.rows_canonical(pos, crd, chunks):
            return None
        major = np.empty(nnz, dtype=index)
        kernels.expand_rows(pos, major, chunks)
        symmetry = "general"
        if t.shape[0] == t.shape[1]:
            code = io_kernels.mirror_symmetry(pos, crd, values, chunks)
            symmetry = {io_kernels.SYMMETRIC: "symmetric", io_kernels.SKEW: "skew-symmetric",
                        io_kernels.HERMITIAN: "hermitian"}.get(code, "general")
    coords = (major, crd) if fam.major == 0 else (crd, major)
    return coords, values, symmetry


#: entries from which :func:`_compressed_rows` runs its parallel kernels; below, NumPy and
#: SciPy do the same work without loading a kernel or waking a thread (the first parallel
#: kernel of a process cost 0.3 s to load and start its threads in the 10^4-row workflow of
#: benchmarks/bench_coldstart.py). Loaded, on 2 cores: 0.26 ms NumPy vs 0.30 kernels at 50k
#: entries of the 2-D Poisson matrix, 6.4-10.4 vs 2.5 ms at 449k
PARALLEL_WRITE = 1 << 17


def _rows_canonical(pos, crd) -> bool:
    """:func:`ustc.tensor.io_kernels.rows_canonical` in NumPy (for short inputs)."""
    if len(crd) < 2:
        return True
    rising = np.diff(crd) > 0
    starts = pos[1:-1]
    rising[starts[(starts > 0) & (starts < len(crd))] - 1] = True   # a row's first entry follows any
    return bool(rising.all())


def _write_coo(path, shape, row, col, values, comment: str, symmetry: str) -> None:
    """A coordinate file of the given entries (0-based, written as they come) through SciPy's
    fast_matrix_market core (parallel formatting), or ``scipy.io.mmwrite`` where that internal
    interface is missing."""
    writer = _fmm_writer()
    if writer is None:
        from scipy import io as sio
        from scipy import sparse

        sio.mmwrite(os.fspath(path), sparse.coo_array((values, (row, col)), shape=shape), comment=comment,
                    symmetry=symmetry)
        return
    open_cursor, write_body = writer
    cursor = open_cursor(os.fspath(path), comment=comment, symmetry=symmetry)
    write_body(cursor, tuple(shape), row, col, values)


def _fmm_writer():
    """``(open_write_cursor, write_body_coo)`` of SciPy's fast_matrix_market, or None."""
    try:
        from scipy.io import _fast_matrix_market as fmm
        from scipy.io._fast_matrix_market import _fmm_core

        return fmm._get_write_cursor, _fmm_core.write_body_coo
    except (ImportError, AttributeError):
        return None


def _symmetry(a) -> str:
    """The Matrix Market symmetry of coordinate matrix ``a``: symmetric, skew-symmetric or
    hermitian when its transpose shows it (two O(nnz) passes through SciPy's CSR; SciPy's
    own detection took 57 s on a 14M-entry matrix), else general."""
    if a.shape[0] != a.shape[1] or a.nnz == 0:
        return "general"
    m = a.tocsr()
    m.sum_duplicates()
    t = m.T.tocsr()
    t.sort_indices()
    if not (np.array_equal(m.indptr, t.indptr) and np.array_equal(m.indices, t.indices)):
        return "general"
    if np.array_equal(m.data, t.data):
        return "symmetric"
    if np.array_equal(m.data, -t.data):
        return "skew-symmetric"
    if np.iscomplexobj(m.data) and np.array_equal(m.data, np.conj(t.data)):
        return "hermitian"
    return "general"


def _mtx_values(values: np.ndarray) -> np.ndarray:
    """Values in a dtype Matrix Market writes losslessly (bool and small ints widened)."""
    if values.dtype == np.bool_ or np.issubdtype(values.dtype, np.integer):
        return values.astype(np.int64, copy=False)
    if np.issubdtype(values.dtype, np.complexfloating):
        return values.astype(np.complex128, copy=False)
    return values.astype(np.float64, copy=False)


def _nonzero_entries(t):
    coords, values = t.entries()
    keep = values != 0
    if not keep.all():
        coords, values = tuple(c[keep] for c in coords), values[keep]
    return coords, values


# -- FROSTT ----------------------------------------------------------------------------------
def _read_tns(path, tensor_format, shape):
    from .tensor import Tensor

    with open(path, "rb") as f:
        data = f.read()
    index, values, hinted = parse_tns(data, path, None if shape is None else len(shape))
    rank = index.shape[1] if index.ndim == 2 and index.shape[1] else (len(hinted) if hinted else 0)
    if shape is None:
        shape = hinted
    if shape is None:
        if not len(values):
            raise _error(path, "no entries and no '# shape:' comment: pass shape= to give the extents")
        shape = tuple(int(n) for n in index.max(axis=0))
    shape = tuple(int(n) for n in shape)
    if len(shape) != rank:
        raise _error(path, f"entries have {rank} indices, the shape {shape} has {len(shape)}")
    if len(values):
        over = index > np.asarray(shape, dtype=np.int64)
        if over.any():
            row, dim = np.argwhere(over)[0]
            raise _error(path, f"index {index[row, dim]} in dimension {dim} exceeds the extent {shape[dim]}",
                         _line_of_entry(data, int(row)))
    if tensor_format is None and rank >= 2:
        tensor_format = COO(rank)
    coords = tuple(index[:, d] - 1 for d in range(rank))
    return Tensor.from_coo(coords, values, shape, tensor_format)


def parse_tns(data: bytes, path="<bytes>", rank: int | None = None):
    """Parse the bytes of a ``.tns`` file.

    Returns ``(index, values, shape)``: ``index`` an (entries x rank) int64
    array of the 1-based indices as written, ``values`` int64 or float64, and
    ``shape`` the extents of a ``# shape:`` comment (or None). ``rank``, when
    given, is the number of indices every line must have. Raises
    FileFormatError naming ``path`` and the line for: lines with differing
    field counts, non-numeric tokens, fractional indices, indices < 1.

    NumPy's C reader (``np.loadtxt``) does the work; when it rejects the text,
    a chunked byte-level pass finds the offending line for the message.
    """
    hinted = _shape_comment(data)
    table = _loadtxt(data)
    if table is None:
        return _parse_careful(data, path, rank, hinted)
    if not table.size:
        empty = np.zeros((0, rank if rank is not None else len(hinted or ())), dtype=np.int64)
        return empty, np.zeros(0, dtype=np.float64), hinted
    nfields = table.shape[1]
    if rank is not None and nfields != rank + 1:
        raise _error(path, f"expected {rank + 1} fields ({rank} indices and a value), found {nfields}",
                     _line_of_entry(data, 0))
    if nfields < 2:
        raise _error(path, "a line needs at least one index and a value", _line_of_entry(data, 0))
    index = table[:, :-1]
    wrong = ~((index >= 1) & (index < 2.0 ** 62)) | (index != np.floor(index))   # NaN and inf too
    if wrong.any():
        row, dim = np.argwhere(wrong)[0]
        raise _error(path, f"index {index[row, dim]:g} in dimension {dim} is not an integer >= 1 "
                           f"(indices are 1-based)", _line_of_entry(data, int(row)))
    values = table[:, -1]
    return index.astype(np.int64), values.astype(np.int64 if _integral_text(data) else np.float64), hinted


def _loadtxt(data: bytes) -> np.ndarray | None:
    """The (entries x fields) float64 table of ``data``, or None where NumPy's reader rejects it."""
    stream = BytesIO(data)
    if data.startswith(b"\xef\xbb\xbf"):                # a UTF-8 byte order mark
        stream.seek(3)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)   # "input contained no data"
            return np.loadtxt(stream, dtype=np.float64, comments="#", ndmin=2)
    except (ValueError, UnicodeError):
        return None


def _integral_text(data: bytes) -> bool:
    """True when no token outside comments looks like a float (``.``, exponent, nan, inf)."""
    last = data.rfind(b"#")
    end = 0 if last < 0 else (data.find(b"\n", last) + 1 or len(data))
    head = _blank_comments(data[:end])
    return not any(mark in head or data.find(mark, end) >= 0 for mark in _FLOAT_MARKS)


def _parse_careful(data: bytes, path, rank: int | None, hinted):
    """``parse_tns`` by a chunked byte-level pass that knows the line of every token."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = b"   " + data[3:]
    nfields = None if rank is None else rank + 1
    tables, line0, integral = [], 0, True
    for lo, hi in _chunks(data, CHUNK_BYTES):
        chunk = _blank_comments(data[lo:hi])
        fields = _fields_per_line(np.frombuffer(chunk, dtype=np.uint8))
        lines = np.flatnonzero(fields)
        if len(lines):
            nfields = nfields or int(fields[lines[0]])
            tables.append(_parse_chunk(chunk, fields, lines, nfields, line0, path))
            integral = integral and not any(mark in chunk for mark in _FLOAT_MARKS)
        line0 += len(fields)
    if not tables:
        empty = np.zeros((0, rank if rank is not None else len(hinted or ())), dtype=np.int64)
        return empty, np.zeros(0, dtype=np.float64), hinted
    index = np.concatenate([ix for ix, _ in tables])
    values = np.concatenate([v for _, v in tables])
    return index, values.astype(np.int64) if integral else values, hinted


def _chunks(data: bytes, size: int):
    """``(lo, hi)`` byte ranges of about ``size`` bytes, each ending after a newline (or at the end)."""
    lo = 0
    while lo < len(data):
        hi = data.find(b"\n", min(lo + size, len(data)) - 1)
        hi = len(data) if hi < 0 else hi + 1
        yield lo, hi
        lo = hi


def _parse_chunk(chunk: bytes, fields, lines, nfields: int, line0: int, path):
    """``(index, values)`` of one chunk: (entries x rank) int64 and float64; ``line0`` lines precede it."""
    bad = fields[lines] != nfields
    if bad.any():
        line = int(lines[np.argmax(bad)])
        raise _error(path, f"expected {nfields} fields ({nfields - 1} indices and a value), "
                           f"found {fields[line]}", line0 + line + 1)
    if nfields < 2:
        raise _error(path, "a line needs at least one index and a value", line0 + int(lines[0]) + 1)
    table = _numbers(chunk, int(fields.sum()), path, line0).reshape(len(lines), nfields)
    index = table[:, :-1]
    wrong = ~((index >= 1) & (index < 2.0 ** 62)) | (index != np.floor(index))   # NaN and inf too
    if wrong.any():
        row, dim = np.argwhere(wrong)[0]
        raise _error(path, f"index {index[row, dim]:g} in dimension {dim} is not an integer >= 1 "
                           f"(indices are 1-based)", line0 + int(lines[row]) + 1)
    return index.astype(np.int64), table[:, -1].copy()


def _shape_comment(data: bytes) -> tuple[int, ...] | None:
    """The extents of a ``# shape: n1 n2 ...`` comment in the first SHAPE_WINDOW bytes, else None."""
    found = _SHAPE_COMMENT.search(data, 0, SHAPE_WINDOW)
    return tuple(int(n) for n in found.group(1).split()) if found else None


def _blank_comments(data: bytes) -> bytes:
    """``data`` with every ``#`` ... end-of-line run replaced by spaces (line numbers and offsets kept)."""
    if b"#" not in data:
        return data
    return _COMMENT.sub(lambda m: b" " * len(m[0]), data)


def _fields_per_line(raw: np.ndarray) -> np.ndarray:
    """Number of whitespace-separated tokens on every line (index = line number - 1)."""
    if not len(raw):
        return np.zeros(0, dtype=np.int64)
    space = _SPACE_TABLE[raw]
    start = ~space
    start[1:] &= space[:-1]
    line_starts = np.flatnonzero(raw == ord("\n")) + 1
    line_starts = np.concatenate(([0], line_starts[line_starts < len(raw)]))
    longest = int(np.diff(line_starts, append=len(raw)).max())
    # a line of n bytes holds at most (n + 1) // 2 tokens: count in uint16 when that cannot overflow
    wide = np.int64 if longest >= 2 * np.iinfo(np.uint16).max else np.uint16
    return np.add.reduceat(start.view(np.uint8), line_starts, dtype=wide).astype(np.int64)


def _numbers(data: bytes, tokens: int, path, line0: int = 0) -> np.ndarray:
    """Every token as float64, or FileFormatError at the line of the first non-number."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        try:
            numbers = np.fromstring(data, dtype=np.float64, sep=" ")
            failed = None
        except (ValueError, DeprecationWarning):
            numbers, failed = None, True
    if failed is None and len(numbers) == tokens:
        return numbers
    line, token = _first_bad_token(data)
    raise _error(path, f"{token!r} is not a number", None if line is None else line0 + line)


def _first_bad_token(data: bytes) -> tuple[int | None, str]:
    """Line (1-based) and text of the first token NumPy's parser rejects (error path only)."""
    def parses(text: bytes) -> bool:
        try:
            return len(np.fromstring(text, dtype=np.float64, sep=" ")) == len(text.split())
        except ValueError:
            return False

    for number, line in enumerate(data.split(b"\n"), start=1):
        if not parses(line):
            bad = next((tok for tok in line.split() if not parses(tok)), line.strip())
            return number, bad.decode("utf-8", "replace")
    return None, "?"


def _line_of_entry(data: bytes, row: int) -> int | None:
    """File line (1-based) of the ``row``-th entry line (error path only)."""
    data = _blank_comments(data)
    fields = _fields_per_line(np.frombuffer(data, dtype=np.uint8))
    lines = np.flatnonzero(fields)
    return int(lines[row]) + 1 if row < len(lines) else None


def _write_tns(t, path, chunk: int = 1 << 16) -> None:
    if np.issubdtype(t.dtype, np.complexfloating):
        raise UnsupportedOperation("FROSTT .tns files hold real values; this tensor is complex "
                                   "(write it as .mtx instead)")
    coords, values = _nonzero_entries(t)
    integral = values.dtype == np.bool_ or np.issubdtype(values.dtype, np.integer)
    values = values.astype(np.int64 if integral else np.float64)
    index = np.stack([np.asarray(c, dtype=np.int64) + 1 for c in coords], axis=1) if coords \
        else np.zeros((len(values), 0), dtype=np.int64)
    row = " ".join(["%d"] * t.ndim + ["%d" if integral else "%r"]) + "\n"
    with open(path, "w", encoding="ascii") as f:
        f.write(f"# shape: {' '.join(str(n) for n in t.shape)}\n")
        for lo in range(0, len(values), chunk):
            table = np.empty((min(chunk, len(values) - lo), t.ndim + 1), dtype=object)
            table[:, :-1] = index[lo:lo + chunk]
            table[:, -1] = values[lo:lo + chunk].tolist()
            f.write((row * len(table)) % tuple(table.ravel().tolist()))
