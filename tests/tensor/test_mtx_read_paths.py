"""The Matrix Market reader's direct path (ustc.tensor.io._read_mtx_entries / _mtx_tensor and
ustc.tensor.io_kernels) against scipy.io.mmread: mirrored symmetries, duplicates and zeros,
chunked counting sorts, every target kind, and the mmread fallback."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.io as sio
import scipy.sparse as sp

import ustc
from ustc.tensor import io, io_kernels


def reference(path) -> sp.csr_array:
    m = sp.csr_array(sio.mmread(path))
    m.sum_duplicates()
    m.eliminate_zeros()
    m.sort_indices()
    return m


def same(t, want) -> None:
    got = sp.csr_array(np.asarray(t.to_dense()))
    got.sum_duplicates()
    got.eliminate_zeros()
    assert got.shape == want.shape and got.nnz == want.nnz
    assert np.array_equal(got.toarray(), want.toarray())


def write(tmp_path, name, text) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


SYMMETRIC = """%%MatrixMarket matrix coordinate {field} {symmetry}
4 4 6
1 1 {a}
2 1 {b}
3 2 {c}
4 1 {d}
4 4 {e}
3 3 {z}
"""


@pytest.mark.parametrize("symmetry", ["symmetric", "skew-symmetric", "hermitian"])
@pytest.mark.parametrize("fmt", [None, "CSR", "CSC", "DCSR", "Dense"])
def test_mirrored_files(tmp_path, symmetry, fmt, monkeypatch):
    monkeypatch.setattr(io_kernels, "CHUNK_ENTRIES", 1)       # several chunks even for six entries
    if symmetry == "hermitian":
        values = dict(a="2 0", b="1 1", c="0 -3", d="4 0.5", e="5 0", z="0 0", field="complex")
    elif symmetry == "skew-symmetric":                        # no diagonal in a skew file
        text = "%%MatrixMarket matrix coordinate real skew-symmetric\n4 4 3\n2 1 1.5\n3 2 -2\n4 1 4\n"
        values = None
    else:
        values = dict(a="2", b="1", c="-3", d="4", e="5", z="0", field="real")
    path = write(tmp_path, "m.mtx", text if values is None else SYMMETRIC.format(symmetry=symmetry, **values))
    same(ustc.from_file(path, fmt), reference(path))


def test_duplicates_and_zeros_are_summed_and_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(io_kernels, "CHUNK_ENTRIES", 2)
    text = ("%%MatrixMarket matrix coordinate real general\n3 5 8\n"
            "1 5 1\n3 1 2\n1 5 2\n2 2 0\n3 4 1\n3 4 -1\n1 1 7\n3 1 1\n")
    path = write(tmp_path, "d.mtx", text)
    for fmt in ("COO", "CSR", "CSC"):
        t = ustc.from_file(path, fmt)
        same(t, reference(path))
        assert t.nse == 3                                      # (1,1) 7, (1,5) 3, (3,1) 3
    coo = ustc.from_file(path, "COO")
    assert coo.crd(0).tolist() == [0, 0, 2] and coo.crd(1).tolist() == [0, 4, 0]
    as_listed = ustc.from_file(path)                           # the default keeps the file's entries
    assert as_listed.format == io.FILE_ORDER and as_listed.nse == 8
    same(as_listed, reference(path))


def test_pattern_and_integer_fields(tmp_path):
    pattern = write(tmp_path, "p.mtx", "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 3\n1 1\n3 1\n2 2\n")
    t = ustc.from_file(pattern, "CSR")
    same(t, reference(pattern))
    assert t.values.tolist() == [1.0, 1.0, 1.0, 1.0]
    integer = write(tmp_path, "i.mtx", "%%MatrixMarket matrix coordinate integer general\n2 2 2\n1 2 7\n2 1 -3\n")
    t = ustc.from_file(integer)
    assert t.dtype == np.int64 and t.to_dense().tolist() == [[0, 7], [-3, 0]]


def test_random_file_against_mmread(tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    n, nnz = 500, 6000                                        # ~70 coordinates repeat
    m = sp.coo_array((rng.standard_normal(nnz), (rng.integers(0, n, nnz), rng.integers(0, n, nnz))), shape=(n, n))
    path = str(tmp_path / "r.mtx")
    sio.mmwrite(path, m)
    want = reference(path)
    for chunk in (1 << 16, 100):
        monkeypatch.setattr(io_kernels, "CHUNK_ENTRIES", chunk)
        for fmt in (None, "CSR", "CSC"):
            same(ustc.from_file(path, fmt), want)


def test_mostly_duplicates_keep_no_oversized_buffers(tmp_path):
    text = "%%MatrixMarket matrix coordinate real general\n2 2 6\n" + "1 1 1\n" * 5 + "2 2 1\n"
    t = ustc.from_file(write(tmp_path, "dup.mtx", text), "CSR")
    assert t.crd(1).base is None or t.crd(1).base.size == 2
    assert t.to_dense().tolist() == [[5.0, 0.0], [0.0, 1.0]]


def test_shape_override_names_the_outside_entry(tmp_path):
    path = write(tmp_path, "s.mtx", "%%MatrixMarket matrix coordinate real symmetric\n4 4 2\n1 1 1\n4 2 3\n")
    with pytest.raises(ustc.FileFormatError, match="s.mtx"):
        ustc.from_file(path, "CSR", shape=(3, 3))
    assert ustc.from_file(path, "CSR", shape=(5, 5)).shape == (5, 5)


def test_fallback_through_mmread_agrees(tmp_path, monkeypatch):
    path = write(tmp_path, "f.mtx", SYMMETRIC.format(symmetry="symmetric", field="real", a=1, b=2, c=3, d=4, e=5, z=0))
    direct = ustc.from_file(path, "CSR").to_package()
    monkeypatch.setattr(io, "_read_mtx_entries", lambda path: None)
    fallback = ustc.from_file(path, "CSR").to_package()
    assert (direct != fallback).nnz == 0


def test_compact_in_place():
    pos = np.array([0, 3, 3, 6, 8])
    crd = np.array([0, 1, 2, 0, 1, 2, 5, 6], dtype=np.int32)
    vals = np.arange(8.0)
    counts = np.array([2, 0, 3, 1])
    assert io_kernels.compact_in_place(pos, crd, vals, counts) == 6
    assert pos.tolist() == [0, 2, 2, 5, 6]
    assert crd[:6].tolist() == [0, 1, 0, 1, 2, 5] and vals[:6].tolist() == [0, 1, 3, 4, 5, 6]
