"""Reading Matrix Market files in every entry order (ustc.tensor.io._file_order / _sorted_entries,
io_kernels.entry_order / off_diagonal / mirror_append) against scipy.io.mmread: the default keeps
the entries exactly as mmread returns them, its format saying the order found (canonical COO
only when the entries are sorted by row); requested CSR-family and canonical COO formats are canonical and equal
mmread's matrix after SciPy's canonicalisation, whatever the file's order."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import scipy.io as sio
import scipy.sparse as sp

import ustc
from ustc import formats
from ustc.tensor import fastpaths, io, io_kernels

ORDERS = ("row", "column", "random", "duplicates", "zeros")
FIELDS = {"real": np.float64, "integer": np.int64, "complex": np.complex128, "pattern": np.float64}
SHAPES = ((40, 40), (1, 30), (30, 1), (25, 60), (0, 0), (5, 5))


def direct_formats():
    """Every registry format the direct path builds (CSR family, canonical COO), plus the
    file-order COO."""
    found = [nf.format() for nf in formats.NAMED]
    found = [f for f in found if f.ndim == 2 and fastpaths.family(f) is not None
             and (fastpaths.family(f).kind == "csr" or fastpaths.coo_like(f))]
    assert len(found) >= 3
    return found + [io.FILE_ORDER]


def entries(rng, shape, order, field, nnz):
    """``(rows, cols, values)`` of random entries listed in ``order``."""
    n, m = shape
    if not n * m:
        return np.zeros(0, int), np.zeros(0, int), np.zeros(0)
    flat = rng.choice(n * m, size=min(nnz, n * m), replace=False)
    if order == "duplicates":
        flat = np.concatenate((flat, rng.choice(flat, size=len(flat) // 3 + 1)))
    rows, cols = flat // m, flat % m
    values = _values(rng, len(flat), field)
    if order == "zeros":
        values[rng.random(len(values)) < 0.3] = 0
    if order == "row":
        key = np.lexsort((cols, rows))
    elif order == "column":
        key = np.lexsort((rows, cols))
    else:
        key = rng.permutation(len(flat))
    return rows[key], cols[key], values[key]


def _values(rng, k, field):
    if field == "pattern":
        return np.ones(k)
    if field == "integer":
        return rng.integers(-9, 10, k)
    if field == "complex":
        return rng.standard_normal(k) + 1j * rng.standard_normal(k)
    return rng.standard_normal(k)


def write_file(path, shape, rows, cols, values, field, symmetry):
    """A coordinate file listing the entries in the given order (1-based)."""
    lines = [f"%%MatrixMarket matrix coordinate {field} {symmetry}", f"{shape[0]} {shape[1]} {len(rows)}"]
    for r, c, v in zip(rows, cols, values):
        if field == "pattern":
            lines.append(f"{r + 1} {c + 1}")
        elif field == "complex":
            lines.append(f"{r + 1} {c + 1} {float(v.real)!r} {float(v.imag)!r}")
        elif field == "integer":
            lines.append(f"{r + 1} {c + 1} {int(v)}")
        else:
            lines.append(f"{r + 1} {c + 1} {float(v)!r}")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def triangle(rows, cols, values, symmetry):
    """The lower triangle (strict for skew) a symmetric file stores."""
    keep = rows > cols if symmetry == "skew-symmetric" else rows >= cols
    return rows[keep], cols[keep], values[keep]


def canonical(m) -> sp.csr_array:
    m = sp.csr_array(m)
    m.sum_duplicates()
    m.eliminate_zeros()
    return m


def storage_canonical(t, zeros: bool = False) -> bool:
    """Whether ``t`` (CSR family or COO) stores its entries strictly increasing, with no zero
    unless ``zeros`` (the default read keeps a file's explicit zeros, as mmread does)."""
    if not zeros and np.count_nonzero(t.values[:t.nse]) != t.nse:
        return False
    if fastpaths.family(t.format).kind == "csr":
        return io._rows_canonical(np.asarray(t.pos(1)), np.asarray(t.crd(1)))
    a, b = np.asarray(t.crd(0), dtype=np.int64), np.asarray(t.crd(1), dtype=np.int64)
    return bool(np.all((np.diff(a) > 0) | ((np.diff(a) == 0) & (np.diff(b) > 0))))


CASES = [(order, field, symmetry, shape)
         for order in ORDERS for field in FIELDS
         for symmetry in ("general", "symmetric", "skew-symmetric", "hermitian")
         for shape in SHAPES
         if (symmetry == "general" or shape[0] == shape[1])
         and not (symmetry == "hermitian" and field != "complex")
         and not (symmetry == "skew-symmetric" and field == "pattern")
         and not (order == "zeros" and field == "pattern")]


@pytest.mark.parametrize("order,field,symmetry,shape", CASES[::3] + CASES[1::7])
@pytest.mark.parametrize("chunk", [1 << 16, 4])
def test_every_order_against_mmread(tmp_path, monkeypatch, order, field, symmetry, shape, chunk):
    monkeypatch.setattr(io_kernels, "CHUNK_ENTRIES", chunk)   # several chunks even for small files
    rng = np.random.default_rng(zlib.crc32(repr((order, field, symmetry, shape)).encode()))
    rows, cols, values = entries(rng, shape, order, field, nnz=max(1, shape[0] * shape[1] // 4))
    if symmetry != "general":
        rows, cols, values = triangle(rows, cols, values, symmetry)
    if symmetry == "hermitian":
        values = np.where(rows == cols, values.real + 0j, values)
    path = write_file(tmp_path / "m.mtx", shape, rows, cols, values, field, symmetry)
    theirs = sio.mmread(path, spmatrix=False)
    want = canonical(theirs)

    t = ustc.from_file(path)                   # the default: mmread's entries, in mmread's order
    assert t.shape == shape and t.dtype == theirs.dtype
    (r, c), v = t.entries()
    if len(theirs.data):
        np.testing.assert_array_equal(r, theirs.row)
        np.testing.assert_array_equal(c, theirs.col)
        np.testing.assert_array_equal(v, theirs.data)
        if t.format == formats.COO(2):
            assert storage_canonical(t, zeros=True)
        else:
            assert t.format == io.FILE_ORDER and (order != "row" or symmetry != "general")
    for fmt in direct_formats():
        got = ustc.from_file(path, fmt)
        assert got.format == fmt and got.shape == shape
        if fmt != io.FILE_ORDER:
            assert storage_canonical(got), fmt
        np.testing.assert_allclose(np.asarray(got.to_dense()), want.toarray(), rtol=1e-13, atol=0)


@pytest.mark.parametrize("order", ["row", "column"])
def test_sorted_files_take_the_canonical_formats(tmp_path, order):
    rng = np.random.default_rng(3)
    rows, cols, values = entries(rng, (50, 70), order, "real", 600)
    path = write_file(tmp_path / "s.mtx", (50, 70), rows, cols, values, "real", "general")
    t = ustc.from_file(path)
    assert t.format == (formats.COO(2) if order == "row" else io.FILE_ORDER)
    assert np.array_equal(np.asarray(t.to_dense()), canonical(sio.mmread(path)).toarray())
    assert (sp.coo_array(t.to_package()).tocsr() != canonical(sio.mmread(path))).nnz == 0
    ours = ustc.from_file(path, "CSR" if order == "row" else "CSC")
    assert storage_canonical(ours)


def test_scipy_written_files(tmp_path):
    """What SciPy's mmwrite lists: a canonical COO by row, a CSC's entries by column."""
    m = sp.random_array((300, 200), density=0.05, random_state=1, format="csr")
    sio.mmwrite(tmp_path / "r.mtx", m.tocoo())
    sio.mmwrite(tmp_path / "c.mtx", m.tocsc().tocoo())
    assert ustc.from_file(tmp_path / "r.mtx").format == formats.COO(2)
    assert ustc.from_file(tmp_path / "c.mtx").format == io.FILE_ORDER
    written = ustc.to_file(ustc.Tensor.from_package(m), tmp_path / "u.mtx")
    assert ustc.from_file(written).format == formats.COO(2)


def test_out_of_range_entry_is_named(tmp_path):
    path = tmp_path / "o.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1\n4 1 2\n")
    for fmt in (None, "COO", "CSR", io.FILE_ORDER):
        with pytest.raises(ustc.FileFormatError, match="o.mtx"):
            ustc.from_file(path, fmt)


@pytest.mark.parametrize("chunks", [1, 2, 3, 5])
def test_entry_order_flags_across_chunk_borders(chunks):
    rows = np.array([0, 0, 1, 1, 2, 3], dtype=np.int32)
    cols = np.array([1, 2, 0, 3, 3, 0], dtype=np.int32)
    values = np.array([1.0, 0, 2, 3, 4, 5])
    flags, zeros = io_kernels.entry_order(rows, cols, values, 4, 4, chunks)
    assert flags == io_kernels.IN_RANGE | io_kernels.ROW_MAJOR and zeros == 1
    flags, _ = io_kernels.entry_order(cols, rows, values, 4, 4, chunks)
    assert flags == io_kernels.IN_RANGE | io_kernels.COLUMN_MAJOR
    for k in range(1, len(rows)):                   # one descent (or repeat) anywhere: not sorted
        for swapped in ((rows[[*range(k - 1), k, k - 1, *range(k + 1, len(rows))]],
                         cols[[*range(k - 1), k, k - 1, *range(k + 1, len(rows))]]),
                        (np.insert(rows, k, rows[k - 1]), np.insert(cols, k, cols[k - 1]))):
            flags, _ = io_kernels.entry_order(*swapped, np.ones(len(swapped[0])), 4, 4, chunks)
            assert flags & io_kernels.ROW_MAJOR == 0
    flags, _ = io_kernels.entry_order(rows, cols, values, 3, 4, chunks)
    assert flags & io_kernels.IN_RANGE == 0
    flags, _ = io_kernels.entry_order(rows - 1, cols, values, 4, 4, chunks)
    assert flags & io_kernels.IN_RANGE == 0


@pytest.mark.parametrize("chunks", [1, 2, 4])
@pytest.mark.parametrize("mirror", [io_kernels.SYMMETRIC, io_kernels.SKEW, io_kernels.HERMITIAN])
def test_mirror_append_is_mmreads_expansion(chunks, mirror):
    rng = np.random.default_rng(chunks)
    rows = rng.integers(0, 9, 40).astype(np.int32)
    cols = np.minimum(rows, rng.integers(0, 9, 40)).astype(np.int32)
    values = rng.standard_normal(40) + 1j * rng.standard_normal(40)
    off = io_kernels.off_diagonal(rows, cols, chunks)
    total = 40 + int(off[-1])
    out = np.empty(total, np.int32), np.empty(total, np.int32), np.empty(total, values.dtype)
    io_kernels.mirror_append(rows, cols, values, mirror, off, *out)
    strict = rows != cols
    mirrored = {io_kernels.SYMMETRIC: values[strict], io_kernels.SKEW: -values[strict],
                io_kernels.HERMITIAN: np.conj(values[strict])}[mirror]
    np.testing.assert_array_equal(out[0], np.concatenate((rows, cols[strict])))
    np.testing.assert_array_equal(out[1], np.concatenate((cols, rows[strict])))
    np.testing.assert_array_equal(out[2], np.concatenate((values, mirrored)))


def test_inputs_read_are_not_shared_between_calls(tmp_path):
    path = write_file(tmp_path / "n.mtx", (3, 3), np.array([0, 1]), np.array([1, 2]), np.array([1.0, 2.0]),
                      "real", "general")
    a = ustc.from_file(path)
    a.values[:] = 0
    assert ustc.from_file(path).values.tolist() == [1.0, 2.0]
