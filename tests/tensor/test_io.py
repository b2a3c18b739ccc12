"""Reading and writing .mtx and .tns files (ustc.tensor.io), checked against dense NumPy oracles."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ustc import formats
from ustc.tensor import io
from ustc.tensor.io import from_file, to_file


def write(path, text: str):
    path.write_text(text)
    return path


def random_sparse(rng, shape, density=0.3, dtype=float):
    mask = rng.random(shape) < density
    mask.flat[0] = True                                    # never only zeros
    if np.issubdtype(dtype, np.integer):
        values = rng.integers(1, 50, shape) * rng.choice([-1, 1], shape)
    elif np.issubdtype(dtype, np.complexfloating):
        values = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    else:
        values = rng.standard_normal(shape)
    return np.where(mask, values, 0).astype(dtype)


def from_array(x, fmt=None):
    coords = np.nonzero(x)
    return ustc.Tensor.from_coo(coords, x[coords], x.shape, fmt)


# -- Matrix Market, hand-written files -------------------------------------------------------
MTX_CASES = {
    "real_general": ("""%%MatrixMarket matrix coordinate real general
% a comment
3 4 4
1 1 1.5
2 4 -2e-3
3 2 7
1 3 0.25
""", np.array([[1.5, 0, 0.25, 0], [0, 0, 0, -2e-3], [0, 7, 0, 0]])),
    "real_symmetric": ("""%%MatrixMarket matrix coordinate real symmetric
3 3 4
1 1 2.5
2 1 -1
3 2 4
3 3 1
""", np.array([[2.5, -1, 0], [-1, 0, 4], [0, 4, 1]])),
    "integer_skew": ("""%%MatrixMarket matrix coordinate integer skew-symmetric
3 3 2
2 1 4
3 1 -2
""", np.array([[0, -4, 2], [4, 0, 0], [-2, 0, 0]])),
    "complex_hermitian": ("""%%MatrixMarket matrix coordinate complex hermitian
2 2 2
1 1 1.0 0.0
2 1 2.0 3.0
""", np.array([[1, 2 - 3j], [2 + 3j, 0]])),
    "complex_general": ("""%%MatrixMarket matrix coordinate complex general
2 3 2
1 3 1.5 -1
2 2 0 2
""", np.array([[0, 0, 1.5 - 1j], [0, 2j, 0]])),
    "pattern_general": ("""%%MatrixMarket matrix coordinate pattern general
2 3 3
1 1
2 3
1 2
""", np.array([[1.0, 1, 0], [0, 0, 1]])),
    "pattern_symmetric": ("""%%MatrixMarket matrix coordinate pattern symmetric
3 3 2
2 1
3 3
""", np.array([[0, 1.0, 0], [1, 0, 0], [0, 0, 1]])),
    "integer_general": ("""%%MatrixMarket matrix coordinate integer general
2 2 3
1 1 5
1 2 -7
2 2 123456789
""", np.array([[5, -7], [0, 123456789]])),
}

MTX_ARRAY_CASES = {
    "array_real": ("""%%MatrixMarket matrix array real general
2 3
1
4
0
5
3.5
-6
""", np.array([[1, 0, 3.5], [4, 5, -6]])),
    "array_integer_symmetric": ("""%%MatrixMarket matrix array integer symmetric
3 3
1
2
3
4
0
6
""", np.array([[1, 2, 3], [2, 4, 0], [3, 0, 6]])),
    "array_complex": ("""%%MatrixMarket matrix array complex general
2 1
1 2
0 -1
""", np.array([[1 + 2j], [-1j]])),
}


@pytest.mark.parametrize("name", sorted(MTX_CASES))
def test_mtx_coordinate_kinds(tmp_path, name):
    text, oracle = MTX_CASES[name]
    t = from_file(write(tmp_path / f"{name}.mtx", text))
    assert t.format in (io.FILE_ORDER, formats.COO(2))   # the file's order, as found
    assert t.shape == oracle.shape
    np.testing.assert_array_equal(np.asarray(t.to_dense()), oracle)
    assert np.asarray(t.to_dense()).dtype.kind == oracle.dtype.kind
    coo = from_file(tmp_path / f"{name}.mtx", tensor_format="COO")
    assert coo.format == formats.COO(2)
    np.testing.assert_array_equal(np.asarray(coo.to_dense()), oracle)
    csr = from_file(tmp_path / f"{name}.mtx", tensor_format="CSR")
    assert csr.format == formats.CSR
    np.testing.assert_array_equal(np.asarray(csr.to_dense()), oracle)


@pytest.mark.parametrize("name", sorted(MTX_ARRAY_CASES))
def test_mtx_array_kinds(tmp_path, name):
    text, oracle = MTX_ARRAY_CASES[name]
    path = write(tmp_path / f"{name}.mtx", text)
    t = from_file(path)
    assert all(lv.type.keyword == "dense" for lv in t.format.levels)
    np.testing.assert_array_equal(np.asarray(t.to_dense()), oracle)
    csc = from_file(path, "CSC")
    assert csc.format == formats.CSC
    np.testing.assert_array_equal(np.asarray(csc.to_dense()), oracle)


@pytest.mark.parametrize("name", sorted(MTX_CASES) + sorted(MTX_ARRAY_CASES))
def test_mtx_written_files_read_back(tmp_path, name):
    text, oracle = {**MTX_CASES, **MTX_ARRAY_CASES}[name]
    t = from_file(write(tmp_path / "in.mtx", text))
    out = to_file(t, tmp_path / "out.mtx")
    assert out == tmp_path / "out.mtx"
    np.testing.assert_array_equal(np.asarray(from_file(out).to_dense()), oracle)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32, np.complex128])
@pytest.mark.parametrize("fmt", ["CSR", "CSC", "COO(2)", "DCSR", "DIAI", "BSR(2, 2)", "DELTA(2)", "Dense(2)"])
def test_mtx_round_trip(tmp_path, dtype, fmt):
    rng = np.random.default_rng(7)
    x = random_sparse(rng, (6, 8), dtype=dtype)
    t = from_array(x, fmt)
    path = to_file(t, tmp_path / "m.mtx")
    header = path.read_text().splitlines()[0]
    assert ("array" in header) == (fmt == "Dense(2)")
    back = from_file(path, fmt)
    assert back.format == t.format
    np.testing.assert_array_equal(np.asarray(back.to_dense()), x)


def test_mtx_empty_round_trip(tmp_path):
    t = ustc.Tensor.from_coo((np.zeros(0, int), np.zeros(0, int)), np.zeros(0), (5, 3))
    back = from_file(to_file(t, tmp_path / "e.mtx"))
    assert back.shape == (5, 3) and back.nse == 0
    np.testing.assert_array_equal(np.asarray(back.to_dense()), np.zeros((5, 3)))


def test_mtx_rejects_other_ranks(tmp_path):
    t = from_array(random_sparse(np.random.default_rng(1), (2, 3, 4)))
    with pytest.raises(ustc.UnsupportedOperation, match="tns"):
        to_file(t, tmp_path / "t.mtx")


@pytest.mark.parametrize("text, line, words", [
    ("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.5\n2 x 2\n", 4, "integer"),
    ("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.5\n5 1 2\n", 4, "out of bounds"),
    ("hello\n", 1, "banner"),
])
def test_mtx_malformed(tmp_path, text, line, words):
    path = write(tmp_path / "bad.mtx", text)
    with pytest.raises(ustc.FileFormatError, match=words) as info:
        from_file(path)
    assert "bad.mtx" in str(info.value) and f"line {line}" in str(info.value)
    assert info.value.line == line and info.value.path.endswith("bad.mtx")


def test_mtx_truncated(tmp_path):
    path = write(tmp_path / "short.mtx", "%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1.5\n")
    with pytest.raises(ustc.FileFormatError, match="short.mtx"):
        from_file(path)


# -- FROSTT .tns ------------------------------------------------------------------------------
@pytest.mark.parametrize("rank", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_tns_round_trip(tmp_path, rank, dtype):
    rng = np.random.default_rng(rank)
    shape = (7, 5, 4, 3)[:rank]
    x = random_sparse(rng, shape, density=0.25, dtype=dtype)
    x[(slice(None),) * (rank - 1) + (-1,)] = 0             # empty last slice: the shape comment keeps it
    t = from_array(x, formats.CSF(rank))
    path = to_file(t, tmp_path / "t.tns")
    lines = path.read_text().splitlines()
    assert lines[0] == "# shape: " + " ".join(map(str, shape))
    assert len(lines) == 1 + np.count_nonzero(x)
    back = from_file(path)
    assert back.shape == shape
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(back.to_dense()), x)
    if rank >= 2:
        assert back.format == formats.COO(rank)
    assert from_file(path, formats.CSF(rank)).format == formats.CSF(rank)


def test_tns_floats_round_trip_exactly(tmp_path):
    values = np.array([0.1, 1 / 3, -1e-300, 1e300, 2.0 ** -1074, np.pi])
    t = ustc.Tensor.from_coo((np.arange(6),), values, (6,))
    back = from_file(to_file(t, tmp_path / "f.tns"))
    np.testing.assert_array_equal(np.asarray(back.to_dense()), values)


def test_tns_hand_written(tmp_path):
    text = ("# a FROSTT file\n"
            "1 1 1 1.5\n"
            "\n"
            "  2\t3 1   -2   # trailing comment\r\n"
            "# another comment\n"
            "3 1 2 4e2\n"
            "2 3 1 0.5\n")                                  # a duplicate: summed
    t = from_file(write(tmp_path / "h.tns", text))
    oracle = np.zeros((3, 3, 2))
    oracle[0, 0, 0], oracle[1, 2, 0], oracle[2, 0, 1] = 1.5, -1.5, 400
    assert t.shape == (3, 3, 2)                             # largest index per dimension
    np.testing.assert_array_equal(np.asarray(t.to_dense()), oracle)
    bigger = from_file(tmp_path / "h.tns", shape=(4, 5, 6))
    assert bigger.shape == (4, 5, 6)
    np.testing.assert_array_equal(np.asarray(bigger.to_dense())[:3, :3, :2], oracle)


def test_tns_integer_values_and_no_trailing_newline(tmp_path):
    t = from_file(write(tmp_path / "i.tns", "1 2 3\n2 1 -4"))
    assert t.dtype == np.int64
    np.testing.assert_array_equal(np.asarray(t.to_dense()), [[0, 3], [-4, 0]])


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_tns_careful_pass_agrees(tmp_path, monkeypatch, dtype):
    monkeypatch.setattr(io, "CHUNK_BYTES", 100)
    x = random_sparse(np.random.default_rng(4), (30, 20, 10), density=0.05, dtype=dtype)
    data = to_file(from_array(x), tmp_path / "c.tns").read_bytes()
    data = data.replace(b"\n", b"  # comment 1.5\n", 3).replace(b"\n", b"\r\n")
    fast, careful = io.parse_tns(data), io._parse_careful(data, "c.tns", None, io._shape_comment(data))
    for a, b in zip(fast, careful):
        np.testing.assert_array_equal(a, b)
    assert fast[1].dtype == careful[1].dtype == np.dtype(dtype)


def test_tns_many_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "CHUNK_BYTES", 100)
    rng = np.random.default_rng(3)
    x = random_sparse(rng, (40, 30, 20), density=0.05)
    path = to_file(from_array(x), tmp_path / "c.tns")
    np.testing.assert_array_equal(np.asarray(from_file(path).to_dense()), x)
    lines = path.read_text().splitlines()
    lines[250] = "1 1"
    write(path, "\n".join(lines) + "\n")
    with pytest.raises(ustc.FileFormatError, match="line 251"):
        from_file(path)


def test_tns_empty(tmp_path):
    t = ustc.Tensor.from_coo((np.zeros(0, int),) * 3, np.zeros(0), (2, 3, 4))
    back = from_file(to_file(t, tmp_path / "e.tns"))
    assert back.shape == (2, 3, 4) and back.nse == 0
    empty = write(tmp_path / "none.tns", "# nothing here\n\n")
    with pytest.raises(ustc.FileFormatError, match="shape="):
        from_file(empty)
    t = from_file(empty, shape=(3, 3))
    assert t.shape == (3, 3) and not np.asarray(t.to_dense()).any()


def test_tns_writes_no_padding(tmp_path):
    x = np.zeros((2, 16))
    x[0, 0], x[0, 15], x[1, 7] = 1, 2, 3
    t = ustc.Tensor.from_dense(x, "DELTA(2)")
    assert t.nse > 3                                        # padding entries are stored
    path = to_file(t, tmp_path / "d.tns")
    assert len(path.read_text().splitlines()) == 1 + 3
    np.testing.assert_array_equal(np.asarray(from_file(path, "DELTA(2)").to_dense()), x)


@pytest.mark.parametrize("text, line, words", [
    ("1 1 1.0\n2 2 2.0 5\n", 2, "expected 3 fields"),
    ("# c\n1 1 1.0\n\n2 2\n", 4, "expected 3 fields"),
    ("1 1 1.0\n2 abc 2.0\n", 2, "'abc' is not a number"),
    ("1 1 1.0\n\n2 2 1e5x\n", 3, "not a number"),
    ("1 1 1.0\n0 2 2.0\n", 2, "1-based"),
    ("1 1 1.0\n1.5 2 2.0\n", 2, "not an integer"),
    ("1 1 1.0\n-3 2 2.0\n", 2, "1-based"),
    ("# shape: 2 2\n1 1 1.0\n3 2 2.0\n", 3, "exceeds the extent 2"),
    ("5\n", 1, "at least one index"),
    ("# c\n\n5\n6\n", 3, "at least one index"),
    ("# c\n\n1 1 1.5\n1 1.5 2\n", 4, "not an integer"),
    ("1 1 1.0\n2 1 \xff\n", 2, "not a number"),
])
def test_tns_malformed(tmp_path, text, line, words):
    path = write(tmp_path / "bad.tns", text)
    with pytest.raises(ustc.FileFormatError, match=words) as info:
        from_file(path)
    assert "bad.tns" in str(info.value) and f"line {line}" in str(info.value)
    assert info.value.line == line


def test_tns_shape_argument_checked(tmp_path):
    path = write(tmp_path / "s.tns", "# c\n1 1 1.0\n4 2 2.0\n")
    with pytest.raises(ustc.FileFormatError, match="line 3"):
        from_file(path, shape=(3, 3))
    with pytest.raises(ustc.FileFormatError, match="line 2: expected 4 fields"):
        from_file(path, shape=(3, 3, 3))


def test_tns_byte_order_mark(tmp_path):
    path = tmp_path / "bom.tns"
    path.write_bytes(b"\xef\xbb\xbf1 2 3.5\n2 1 1\n")
    np.testing.assert_array_equal(np.asarray(from_file(path).to_dense()), [[0, 3.5], [1, 0]])


def test_tns_rejects_complex(tmp_path):
    t = from_array(np.array([[1j, 0], [0, 2]]))
    with pytest.raises(ustc.UnsupportedOperation, match="mtx"):
        to_file(t, tmp_path / "c.tns")


# -- both --------------------------------------------------------------------------------------
def test_unknown_extension(tmp_path):
    path = write(tmp_path / "x.csv", "1,2\n")
    with pytest.raises(ustc.FileFormatError, match=r"\.mtx.*\.tns") as info:
        from_file(path)
    assert "x.csv" in str(info.value)
    with pytest.raises(ustc.FileFormatError, match="supported"):
        to_file(from_array(np.eye(2)), tmp_path / "y.npz")


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        from_file(tmp_path / "nope.mtx")
    with pytest.raises(FileNotFoundError):
        from_file(str(tmp_path / "nope.tns"))


def test_mtx_and_tns_agree(tmp_path):
    rng = np.random.default_rng(11)
    x = random_sparse(rng, (30, 20), density=0.1)
    t = from_array(x, "CSR")
    a = from_file(to_file(t, tmp_path / "a.mtx"), "CSR")
    b = from_file(to_file(t, tmp_path / "b.tns"), "CSR")
    for u in (a, b):
        np.testing.assert_array_equal(np.asarray(u.pos(1)), np.asarray(t.pos(1)))
        np.testing.assert_array_equal(np.asarray(u.crd(1)), np.asarray(t.crd(1)))
        np.testing.assert_array_equal(np.asarray(u.values), np.asarray(t.values))


def test_to_file_does_not_mutate(tmp_path):
    x = random_sparse(np.random.default_rng(5), (5, 9))
    t = from_array(x, "DELTA(2)")
    before = {k: v.copy() for k, v in t._buffers.items()}, t._values.copy()
    to_file(t, tmp_path / "m.mtx")
    to_file(t, tmp_path / "m.tns")
    for key, buf in before[0].items():
        np.testing.assert_array_equal(t._buffers[key], buf)
    np.testing.assert_array_equal(t._values, before[1])


def _header(path) -> str:
    with open(path) as f:
        return f.readline().split()[-1]


@pytest.mark.parametrize("kind", ["symmetric", "skew-symmetric", "hermitian", "general"])
@pytest.mark.parametrize("fmt", ["CSR", "COO", "DIAI"])
def test_mtx_symmetry_is_kept(tmp_path, kind, fmt):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((9, 9)) * (rng.random((9, 9)) < 0.4)
    if kind == "hermitian":
        a = a + 1j * rng.standard_normal((9, 9)) * (a != 0)
        a = a + a.conj().T
    elif kind == "symmetric":
        a = a + a.T
    elif kind == "skew-symmetric":
        a = a - a.T
    t = ustc.Tensor.from_dense(a, fmt)
    to_file(t, tmp_path / "a.mtx")
    assert _header(tmp_path / "a.mtx") == kind
    np.testing.assert_array_equal(from_file(tmp_path / "a.mtx").to_dense(), a)


def test_mtx_symmetry_forced_and_checked(tmp_path):
    a = np.diag([1.0, 2.0, 3.0]) + np.eye(3, k=1) + np.eye(3, k=-1)
    t = ustc.Tensor.from_dense(a, "CSR")
    to_file(t, tmp_path / "g.mtx", symmetry="general")
    assert _header(tmp_path / "g.mtx") == "general"
    np.testing.assert_array_equal(from_file(tmp_path / "g.mtx").to_dense(), a)
    with pytest.raises(ustc.UnsupportedOperation, match="symmetry='upper'"):
        to_file(t, tmp_path / "u.mtx", symmetry="upper")
    with pytest.raises(ustc.UnsupportedOperation, match=".tns none"):
        to_file(t, tmp_path / "u.tns", symmetry="symmetric")
    assert not (tmp_path / "u.mtx").exists()


def test_mtx_nonsquare_and_near_symmetric_are_general(tmp_path):
    a = np.arange(6.0).reshape(2, 3)
    to_file(ustc.Tensor.from_dense(a, "COO"), tmp_path / "r.mtx")
    assert _header(tmp_path / "r.mtx") == "general"
    b = np.array([[1.0, 2.0], [2.0 + 1e-12, 1.0]])
    to_file(ustc.Tensor.from_dense(b, "CSR"), tmp_path / "n.mtx")
    assert _header(tmp_path / "n.mtx") == "general"
    np.testing.assert_array_equal(from_file(tmp_path / "n.mtx").to_dense(), b)
