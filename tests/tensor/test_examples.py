"""Exact buffers of the design's worked examples (design §2) and of every level type."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc import Tensor, TensorFormat
from ustc import formats as F

ENTRIES = {(0, 0): 1, (0, 1): 2, (1, 1): 3, (1, 3): 4, (2, 2): 5, (3, 3): 6}


def matrix_a(dtype=np.float64) -> np.ndarray:
    """The design's 4x8 example A."""
    a = np.zeros((4, 8), dtype=dtype)
    for (i, j), v in ENTRIES.items():
        a[i, j] = v
    return a


def lst(a):
    return np.asarray(a).tolist()


@pytest.fixture(params=["dense", "coo", "csr"])
def build(request):
    """Build a tensor of A three ways: from the dense array, from coordinates, by converting CSR."""
    def make(fmt):
        a = matrix_a()
        if request.param == "dense":
            return Tensor.from_dense(a, fmt)
        if request.param == "coo":
            r, c = np.nonzero(a)
            order = np.random.default_rng(0).permutation(len(r))  # any input order
            return Tensor.from_coo((r[order], c[order]), a[r, c][order], a.shape, fmt)
        return Tensor.from_dense(a, F.CSR).convert(fmt)
    return make


def check(t, expected_buffers: dict, values, level_shape=None):
    assert {k: lst(v) for k, v in t.buffers.items()} == expected_buffers
    assert lst(t.values) == values
    assert t.nse == len(values)
    if level_shape is not None:
        assert t.level_shape == level_shape
    t.validate()
    np.testing.assert_array_equal(np.asarray(t.to_dense()), matrix_a())


# --------------------------------------------------------------------------- design §2, matrix A


def test_coo(build):
    t = build(F.COO())
    assert t.format == TensorFormat.parse("(i, j) -> (i : compressed(nonunique), j : singleton)")
    check(t, {(0, "pos"): [0, 6], (0, "crd"): [0, 0, 1, 1, 2, 3], (1, "crd"): [0, 1, 1, 3, 2, 3]},
          [1, 2, 3, 4, 5, 6])


def test_coo_soa(build):
    t = build("(i, j) -> (i : compressed(nonunique), j : singleton(soa))")
    check(t, {(0, "pos"): [0, 6], (0, "crd"): [0, 0, 1, 1, 2, 3], (1, "crd"): [0, 1, 1, 3, 2, 3]},
          [1, 2, 3, 4, 5, 6])
    assert "soa" in str(t.format)


def test_csr(build):
    check(build(F.CSR), {(1, "pos"): [0, 2, 4, 5, 6], (1, "crd"): [0, 1, 1, 3, 2, 3]}, [1, 2, 3, 4, 5, 6])


def test_csc(build):
    check(build(F.CSC), {(1, "pos"): [0, 1, 3, 4, 6, 6, 6, 6, 6], (1, "crd"): [0, 0, 1, 2, 1, 3]},
          [1, 2, 3, 5, 4, 6])


def test_bsr_2x2(build):
    t = build(F.BSR(2, 2))
    check(t, {(1, "pos"): [0, 2, 3], (1, "crd"): [0, 1, 1]},
          [1, 2, 0, 3,  0, 0, 0, 4,  5, 0, 0, 6], level_shape=(2, 4, 2, 2))


def test_bsc_2x2(build):
    t = build(F.BSC(2, 2))
    # block columns 0..3: block (0,0) | blocks (0,1), (1,1) | none | none
    check(t, {(1, "pos"): [0, 1, 3, 3, 3], (1, "crd"): [0, 0, 1]},
          [1, 2, 0, 3,  0, 0, 0, 4,  5, 0, 0, 6], level_shape=(4, 2, 2, 2))


def test_diai(build):
    t = build(F.DIAI)
    # offsets 0, 1, 2; values ndiag x nrows: values[d, i] = A[i, i + offset[d]]
    check(t, {(0, "pos"): [0, 3], (0, "crd"): [0, 1, 2]},
          [1, 3, 5, 6,  2, 0, 0, 0,  0, 4, 0, 0], level_shape=(11, 4))


def test_diaj_equals_scipy_dia_data(build):
    t = build(F.DIAJ)
    d = sp.dia_array(matrix_a())
    order = np.argsort(d.offsets)
    data = np.zeros((len(d.offsets), 8))
    data[:, :d.data.shape[1]] = d.data[order]  # SciPy may store fewer columns; the rest is 0
    assert lst(t.crd(0)) == sorted(d.offsets.tolist()) == [0, 1, 2]
    assert lst(t.pos(0)) == [0, 3]
    np.testing.assert_array_equal(np.asarray(t.values).reshape(3, 8), data)
    assert t.level_shape == (11, 8)
    t.validate()


def test_dia_padding_is_zero_where_diagonal_leaves_matrix():
    x = np.arange(1, 13, dtype=np.float64).reshape(4, 3)  # every entry nonzero: 6 diagonals
    ti = Tensor.from_dense(x, F.DIAI)
    tj = Tensor.from_dense(x, F.DIAJ)
    assert lst(ti.crd(0)) == lst(tj.crd(0)) == [-3, -2, -1, 0, 1, 2]
    vi = np.asarray(ti.values).reshape(6, 4)
    vj = np.asarray(tj.values).reshape(6, 3)
    for d, off in enumerate(range(-3, 3)):
        for i in range(4):
            j = i + off
            assert vi[d, i] == (x[i, j] if 0 <= j < 3 else 0), (off, i)
        for j in range(3):
            i = j - off
            assert vj[d, j] == (x[i, j] if 0 <= i < 4 else 0), (off, j)
    ref = sp.dia_array(x)
    np.testing.assert_array_equal(vj, ref.data[np.argsort(ref.offsets)])


def test_skew_diai(build):
    t = build(F.SkewDIAI)
    # anti-diagonals s = i + j present: 0, 1, 2, 4, 6; values[s, i] = A[i, s - i]
    check(t, {(0, "pos"): [0, 5], (0, "crd"): [0, 1, 2, 4, 6]},
          [1, 0, 0, 0,  2, 0, 0, 0,  0, 3, 0, 0,  0, 4, 5, 0,  0, 0, 0, 6], level_shape=(11, 4))


def test_dcsr_skips_empty_rows():
    a = np.zeros((5, 8))
    a[0, 1], a[0, 6], a[3, 2], a[4, 0] = 1, 2, 3, 4
    t = Tensor.from_dense(a, F.DCSR)
    assert {k: lst(v) for k, v in t.buffers.items()} == {
        (0, "pos"): [0, 3], (0, "crd"): [0, 3, 4], (1, "pos"): [0, 2, 3, 4], (1, "crd"): [1, 6, 2, 0]}
    assert lst(t.values) == [1, 2, 3, 4]
    t.validate()


def test_dcsr_a(build):
    check(build(F.DCSR), {(0, "pos"): [0, 4], (0, "crd"): [0, 1, 2, 3], (1, "pos"): [0, 2, 4, 5, 6],
                          (1, "crd"): [0, 1, 1, 3, 2, 3]}, [1, 2, 3, 4, 5, 6])


def test_crow_stores_nonempty_rows_densely():
    a = np.zeros((4, 3))
    a[1, 0], a[1, 2], a[3, 1] = 7, 8, 9
    t = Tensor.from_dense(a, F.CROW)
    assert {k: lst(v) for k, v in t.buffers.items()} == {(0, "pos"): [0, 2], (0, "crd"): [1, 3]}
    assert lst(t.values) == [7, 0, 8, 0, 9, 0]
    t.validate()
    c = Tensor.from_dense(a, F.CCOL)
    assert {k: lst(v) for k, v in c.buffers.items()} == {(0, "pos"): [0, 3], (0, "crd"): [0, 1, 2]}
    assert lst(c.values) == [0, 7, 0, 0,  0, 0, 0, 9,  0, 8, 0, 0]


def test_loose_compressed_pos_pairs(build):
    t = build("(i, j) -> (i : dense, j : loose_compressed)")
    check(t, {(1, "pos"): [0, 2, 2, 4, 4, 5, 5, 6], (1, "crd"): [0, 1, 1, 3, 2, 3]}, [1, 2, 3, 4, 5, 6])


def test_loose_compressed_with_gaps_between_segments():
    fmt = TensorFormat.parse("(i, j) -> (i : dense, j : loose_compressed)")
    # segments not back to back: row 0 at [3, 5), row 1 empty at [0, 0), row 2 at [6, 7); 0..2 and 5 unused
    pos = np.array([3, 5, 0, 0, 6, 7], dtype=np.int32)
    crd = np.array([9, 9, 9, 1, 4, 9, 0], dtype=np.int32)
    vals = np.array([-1, -1, -1, 10, 20, -1, 30], dtype=np.float64)
    t = Tensor(fmt, (3, 5), {(1, "pos"): pos, (1, "crd"): crd}, vals)
    t.validate()
    expected = np.zeros((3, 5))
    expected[0, 1], expected[0, 4], expected[2, 0] = 10, 20, 30
    np.testing.assert_array_equal(t.to_dense(), expected)
    coords, values = t.entries()
    assert sorted(zip(*[c.tolist() for c in coords], values.tolist())) == [(0, 1, 10), (0, 4, 20), (2, 0, 30)]


def test_csf_3d():
    x = np.zeros((3, 2, 4))
    x[0, 0, 1], x[0, 0, 3], x[0, 1, 0], x[2, 1, 2] = 1, 2, 3, 4
    t = Tensor.from_dense(x, F.CSF(3))
    assert {k: lst(v) for k, v in t.buffers.items()} == {
        (0, "pos"): [0, 2], (0, "crd"): [0, 2],
        (1, "pos"): [0, 2, 3], (1, "crd"): [0, 1, 1],
        (2, "pos"): [0, 2, 3, 4], (2, "crd"): [1, 3, 0, 2]}
    assert lst(t.values) == [1, 2, 3, 4]
    t.validate()
    np.testing.assert_array_equal(t.to_dense(), x)


def test_coo_3d():
    x = np.zeros((3, 2, 4))
    x[0, 0, 1], x[0, 0, 3], x[0, 1, 0], x[2, 1, 2] = 1, 2, 3, 4
    t = Tensor.from_dense(x, F.COO(3))
    assert {k: lst(v) for k, v in t.buffers.items()} == {
        (0, "pos"): [0, 4], (0, "crd"): [0, 0, 0, 2], (1, "crd"): [0, 0, 1, 1], (2, "crd"): [1, 3, 0, 2]}


# --------------------------------------------------------------------------- delta


def test_delta2_design_row():
    x = np.zeros((1, 16))
    x[0, 0], x[0, 15] = 1, 2
    t = Tensor.from_dense(x, F.DELTA(2))
    assert lst(t.pos(1)) == [0, 5]
    assert lst(t.crd(1)) == [0, 3, 3, 3, 2]
    assert lst(t.values) == [1, 0, 0, 0, 2]
    assert t.crd(1).dtype == np.uint8
    t.validate()
    np.testing.assert_array_equal(t.to_dense(), x)


def test_delta_padding_never_runs_past_last_entry():
    x = np.zeros((3, 16))
    x[0, 0], x[0, 15] = 1, 2   # padding between the two
    x[1, 1] = 3                # early last entry: nothing after it
    x[2, 5] = 4                # single entry after a 5-gap: one padding entry (3) then 1
    t = Tensor.from_dense(x, F.DELTA(2))
    assert lst(t.pos(1)) == [0, 5, 6, 8]
    assert lst(t.crd(1)) == [0, 3, 3, 3, 2,  1,  3, 1]
    assert lst(t.values) == [1, 0, 0, 0, 2,  3,  0, 4]
    t.validate()
    np.testing.assert_array_equal(t.to_dense(), x)
    # a row whose only entry is at column 0 stores exactly one gap
    y = np.zeros((1, 64))
    y[0, 0] = 5
    u = Tensor.from_dense(y, F.DELTA(1))
    assert lst(u.pos(1)) == [0, 1] and lst(u.crd(1)) == [0] and lst(u.values) == [5]


def test_delta1_gap_bridging():
    x = np.zeros((1, 8))
    x[0, 7] = 1
    t = Tensor.from_dense(x, F.DELTA(1))
    # coordinates: pad at 1 (gap 1), 3 (gap 1), 5 (gap 1), then 7 (gap 1)
    assert lst(t.crd(1)) == [1, 1, 1, 1]
    assert lst(t.values) == [0, 0, 0, 1]
    np.testing.assert_array_equal(t.to_dense(), x)


def _manual_pack(gaps, b):
    words = [0] * (-(-len(gaps) * b // 32))
    for k, g in enumerate(gaps):
        words[k * b // 32] |= int(g) << ((k * b) % 32)
    return words


def test_delta2_packed_design_row():
    x = np.zeros((1, 16))
    x[0, 0], x[0, 15] = 1, 2
    t = Tensor.from_dense(x, F.DELTA(2, True))
    assert t.crd(1).dtype == np.uint32
    assert lst(t.crd(1)) == [0 | 3 << 2 | 3 << 4 | 3 << 6 | 2 << 8] == [764]
    assert lst(t.values) == [1, 0, 0, 0, 2]
    assert lst(t.pos(1)) == [0, 5]
    t.validate()


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_delta_packed_bit_layout(bits):
    rng = np.random.default_rng(bits)
    x = np.where(rng.random((4, 120)) < 0.2, rng.integers(1, 9, (4, 120)), 0).astype(np.float64)
    plain = Tensor.from_dense(x, F.DELTA(bits))
    packed = Tensor.from_dense(x, F.DELTA(bits, True))
    gaps = lst(plain.crd(1))
    assert max(gaps) < 2**bits
    assert lst(packed.crd(1)) == _manual_pack(gaps, bits)
    assert lst(packed.pos(1)) == lst(plain.pos(1))
    assert lst(packed.values) == lst(plain.values)
    packed.validate()
    np.testing.assert_array_equal(packed.to_dense(), x)


# --------------------------------------------------------------------------- structured


def test_structured_2_4_padding_at_lowest_unused():
    x = np.array([[1, 0, 2, 0,  0, 0, 0, 7],
                  [0, 5, 0, 0,  0, 0, 0, 0],
                  [0, 0, 3, 4,  0, 6, 8, 0]], dtype=np.float64)
    t = Tensor.from_dense(x, F.Structured(2, 4))
    assert t.level_shape == (3, 2, 4)
    assert lst(t.crd(2)) == [0, 2,  0, 3,
                             0, 1,  0, 1,
                             2, 3,  1, 2]
    assert lst(t.values) == [1, 2,  0, 7,
                             0, 5,  0, 0,
                             3, 4,  6, 8]
    assert set(t.buffers) == {(2, "crd")}
    t.validate()
    np.testing.assert_array_equal(t.to_dense(), x)


def test_structured_ust_spelling_same_storage():
    x = np.array([[0, 0, 0, 9, 1, 0, 0, 0]], dtype=np.float64)
    a = Tensor.from_dense(x, "(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured(2))")
    b = Tensor.from_dense(x, F.Structured(2, 4))
    assert a.format == b.format
    assert lst(a.crd(2)) == lst(b.crd(2)) == [0, 3, 0, 1]
    assert lst(a.values) == [0, 9, 1, 0]


# --------------------------------------------------------------------------- nonunique levels


def test_nonunique_level_from_raw_buffers():
    fmt = TensorFormat.parse("(i, j) -> (i : dense, j : compressed(nonunique))")
    pos = np.array([0, 3, 4], dtype=np.int32)
    crd = np.array([1, 1, 2, 0], dtype=np.int32)  # (0, 1) stored twice
    vals = np.array([1.5, 2.5, 4.0, -1.0])
    t = Tensor(fmt, (2, 3), {(1, "pos"): pos, (1, "crd"): crd}, vals)
    t.validate()
    np.testing.assert_array_equal(t.to_dense(), np.array([[0, 4.0, 4.0], [-1.0, 0, 0]]))
    assert t.get_value(0, 1) == 4.0
    coords, values = t.entries()  # duplicates are kept by entries()
    assert lst(coords[0]) == [0, 0, 0, 1] and lst(coords[1]) == [1, 1, 2, 0]
    assert lst(values) == [1.5, 2.5, 4.0, -1.0]
    canonical = t.convert(F.CSR)
    assert lst(canonical.crd(1)) == [1, 2, 0] and lst(canonical.values) == [4.0, 4.0, -1.0]
    # the same buffers under a unique level are invalid
    unique = Tensor(F.CSR, (2, 3), {(1, "pos"): pos, (1, "crd"): crd}, vals)
    with pytest.raises(ustc.StorageError, match="crd"):
        unique.validate()


def test_nonunique_coo_repeated_pairs():
    pos = np.array([0, 4], dtype=np.int64)
    rows = np.array([0, 0, 1, 1], dtype=np.int64)
    cols = np.array([2, 2, 0, 0], dtype=np.int64)
    fmt = TensorFormat.parse("(i, j) -> (i : compressed(nonunique), j : singleton(nonunique))")
    t = Tensor(fmt, (2, 3), {(0, "pos"): pos, (0, "crd"): rows, (1, "crd"): cols}, np.array([1, 2, 3, 4]))
    t.validate()
    np.testing.assert_array_equal(t.to_dense(), np.array([[0, 0, 3], [7, 0, 0]]))
    with pytest.raises(ustc.StorageError):
        Tensor(F.COO(), (2, 3), {(0, "pos"): pos, (0, "crd"): rows, (1, "crd"): cols},
               np.array([1, 2, 3, 4])).validate()


def test_batched_csr_buffers():
    x = np.zeros((2, 2, 3))
    x[0, 0, 1], x[0, 1, 2], x[1, 1, 0] = 1, 2, 3
    t = Tensor.from_dense(x, F.BatchedCSR)
    assert lst(t.pos(2)) == [[0, 1, 2], [0, 0, 1]]
    assert lst(t.crd(2)) == [[1, 2], [0, 0]]  # batch 1 uses 1 entry; its tail is padding
    assert lst(t.values) == [[1, 2], [3, 0]]
    t.validate()
    np.testing.assert_array_equal(t.to_dense(), x)
