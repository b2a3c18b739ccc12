"""Storage round trips: dense -> format -> dense, format -> format -> format, duplicates, index widths.

Every check compares exactly against a dense NumPy oracle built from random data.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import ustc
from strategies import formats
from fitting import structured_fit
from ustc import Tensor, TensorFormat
from ustc import formats as F

# --------------------------------------------------------------------------- helpers


def rand_dense(shape, dtype=np.float64, density=0.35, seed=0):
    """Random array with roughly ``density`` nonzeros (never all zeros when it has room)."""
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < density
    if mask.size and not mask.any():
        mask.flat[rng.integers(mask.size)] = True
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return mask.copy()
    if dtype.kind == "c":
        vals = rng.integers(1, 9, shape) * rng.choice([-1, 1], shape) + 1j * rng.integers(-5, 6, shape)
    elif dtype.kind == "f":
        vals = rng.standard_normal(shape)
        vals[vals == 0] = 0.5
    else:
        vals = rng.integers(1, 100, shape) * rng.choice([-1, 1], shape)
    return np.where(mask, vals, 0).astype(dtype)


def assert_same(got, expected):
    got = np.asarray(got)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    np.testing.assert_array_equal(got, expected)


def fmt_id(fmt) -> str:
    return fmt.name or str(fmt)


def two_four(shape, seed=0, dtype=np.float64, full_blocks=False):
    """Random matrix where every block of 4 columns (per row) has at most 2 nonzeros."""
    rng = np.random.default_rng(seed)
    x = np.zeros(shape, dtype=dtype)
    rows, cols = shape
    for r in range(rows):
        for b0 in range(0, cols, 4):
            width = min(4, cols - b0)
            k = min(2, width) if full_blocks else rng.integers(0, min(2, width) + 1)
            for c in rng.choice(width, size=k, replace=False):
                x[r, b0 + c] = rng.integers(1, 50) * rng.choice([-1, 1])
    return x


def prune_oracle(x: np.ndarray, n: int, m: int) -> np.ndarray:
    """Keep the n largest magnitudes of every row block of m columns."""
    out = np.zeros_like(x)
    for r in range(x.shape[0]):
        for b0 in range(0, x.shape[1], m):
            block = x[r, b0:b0 + m]
            nz = np.flatnonzero(block)
            keep = nz[np.argsort(-np.abs(block[nz]), kind="stable")][:n]
            out[r, b0 + keep] = block[keep]
    return out


def representable(x: np.ndarray, fmt: TensorFormat):
    """How ``fmt`` can hold the nonzeros of ``x``.

    'ok'; 'raise' when a unique level heading or inside a COO region (followed by singleton
    levels) would have to repeat a coordinate among the region's distinct coordinate tuples
    (the level must refuse with StorageError).
    """
    coords = np.nonzero(x)
    if not len(coords[0]):
        return "ok"
    level_coords = [np.broadcast_to(np.asarray(c, dtype=np.int64), coords[0].shape)
                    for c in fmt.level_coordinates(coords)]
    levels = fmt.levels
    for k, lv in enumerate(levels[:-1]):
        end = k  # the COO region: k and the singleton levels that follow it
        while end + 1 < len(levels) and levels[end + 1].type.keyword == "singleton":
            end += 1
        if not lv.type.unique or end == k:
            continue
        tuples = np.unique(np.stack(level_coords[:end + 1], axis=1), axis=0)  # one position each
        if len(np.unique(tuples[:, :k + 1], axis=0)) < len(tuples):
            return "raise"
    return "ok"


def widthless(fmt: TensorFormat) -> TensorFormat:
    return TensorFormat(fmt.dims, fmt.levels)


def expected_index_dtypes(fmt: TensorFormat, t0: Tensor):
    """(pos dtype, crd dtype) ``fmt``'s widths ask for, or None when they cannot hold ``t0``'s indices.

    ``t0`` is the same data stored without widths. pos must hold its largest entry; crd
    must hold the coordinate range of every (non-delta) crd level.
    """
    layout = t0._layout
    pos_hi = max((int(np.asarray(b).max()) for (k, n), b in t0._buffers.items() if n == "pos" and b.size),
                 default=0)
    crd_levels = [k for (k, n) in fmt.buffers if n == "crd" and fmt.levels[k].type.keyword != "delta"]
    lo = min([0] + [layout.origins[k] for k in crd_levels])
    hi = max([0] + [layout.origins[k] + layout.level_shape[k] - 1 for k in crd_levels])

    def pick(width, lo_, hi_):
        if not width:
            return np.dtype(np.int32) if hi_ <= 2**31 - 1 and lo_ >= -2**31 else np.dtype(np.int64)
        dt = np.dtype(f"{'u' if width < 32 and lo_ >= 0 else ''}int{width}")
        info = np.iinfo(dt)
        return dt if info.min <= lo_ and hi_ <= info.max else None

    return pick(fmt.pos_width, 0, pos_hi), pick(fmt.crd_width, lo, hi)


# --------------------------------------------------------------------------- named formats

NAMED_2D = [nf.format() for nf in F.NAMED if nf.format().ndim == 2 and nf.name != "Structured"]
EXTRA_2D = [
    F.BSR(2, 3), F.BSR(3, 2), F.BSC(2, 3), F.BSC(3, 2), F.BSR(1, 1), F.BSR(5, 7),
    F.DELTA(1), F.DELTA(2), F.DELTA(8), F.DELTA(3), F.DELTA(16),
    F.DELTA(1, True), F.DELTA(2, True), F.DELTA(4, True), F.DELTA(8, True),
    TensorFormat.parse("(i, j) -> (i : dense, j : loose_compressed)"),
    TensorFormat.parse("(i, j) -> (i : loose_compressed(nonunique), j : singleton(soa))"),
    TensorFormat.parse("(i, j) -> (j : compressed(nonunique, nonordered), i : singleton(nonordered))"),
    TensorFormat.parse("(i, j) -> (i : dense, j : compressed(nonunique))"),
    TensorFormat.parse("(i, j) -> (j : dense, i : delta(2, packed))"),
    TensorFormat.parse("(i, j) -> (i : compressed, j : delta(1))"),
]
FORMATS_2D = NAMED_2D + EXTRA_2D
SHAPES_2D = [(0, 5), (5, 0), (0, 0), (1, 7), (7, 1), (5, 7), (8, 3), (4, 4), (3, 17)]
DTYPES = [np.float32, np.float64, np.int64, np.complex128, np.bool_]


def test_named_list_is_covered():
    names = {nf.name for nf in F.NAMED}
    covered = {f.name.split("(")[0] for f in FORMATS_2D if f.name} | {"Structured", "CSF", "BatchedCSR"}
    assert names <= covered, names - covered


@pytest.mark.parametrize("shape", SHAPES_2D, ids=str)
@pytest.mark.parametrize("fmt", FORMATS_2D, ids=fmt_id)
def test_from_dense_round_trip_2d(fmt, shape):
    x = rand_dense(shape, seed=zlib.crc32(f"{fmt}{shape}".encode()))
    t = Tensor.from_dense(x, fmt)
    t.validate()
    assert t.shape == shape
    assert t.format == fmt
    assert_same(t.to_dense(), x)


@pytest.mark.parametrize("fmt", FORMATS_2D, ids=fmt_id)
def test_all_zero_stores_nothing_sparse(fmt):
    x = np.zeros((5, 7))
    t = Tensor.from_dense(x, fmt)
    t.validate()
    assert_same(t.to_dense(), x)
    if fmt.levels[0].type.keyword in ("compressed", "loose_compressed"):
        assert t.nse == 0
    assert not np.asarray(t.values[:t.nse]).any()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fmt", FORMATS_2D, ids=fmt_id)
def test_from_dense_dtypes(fmt, dtype):
    x = rand_dense((6, 9), dtype=dtype, seed=7)
    t = Tensor.from_dense(x, fmt)
    t.validate()
    assert t.dtype == np.dtype(dtype)
    assert_same(t.to_dense(), x)


@pytest.mark.parametrize("fmt", FORMATS_2D, ids=fmt_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_from_coo_dtypes(fmt, dtype):
    """The assembly path (no dense kernels) works for every dtype, complex included."""
    x = rand_dense((6, 9), dtype=dtype, seed=11)
    r, c = np.nonzero(x)
    t = Tensor.from_coo((r, c), x[r, c], x.shape, fmt)
    t.validate()
    assert_same(t.to_dense(), x)


def test_complex_from_dense_through_convert():
    x = rand_dense((5, 6), dtype=np.complex128, seed=3)
    t = Tensor.from_dense(x).convert(F.CSR)
    t.validate()
    assert_same(t.to_dense(), x)


def test_complex_from_dense_csr():
    x = rand_dense((5, 6), dtype=np.complex128, seed=3)
    assert_same(Tensor.from_dense(x, F.CSR).to_dense(), x)


# --------------------------------------------------------------------------- higher rank

HIGH = [
    (F.CSF(3), (3, 4, 5)), (F.CSF(3), (0, 4, 5)), (F.CSF(3), (3, 1, 0)), (F.CSF(3), (1, 1, 1)),
    (F.COO(3), (3, 4, 5)), (F.Dense(3), (3, 4, 5)), (F.BatchedCSR, (3, 4, 5)), (F.BatchedCSR, (2, 1, 6)),
    (F.CSF(4), (2, 3, 2, 4)), (F.CSF(4), (2, 0, 2, 4)), (F.COO(4), (2, 3, 2, 4)), (F.Dense(4), (2, 3, 2, 4)),
    (TensorFormat.parse("(i, j, k) -> (k : dense, i : compressed(nonunique), j : singleton)"), (4, 3, 5)),
    (TensorFormat.parse("(i, j, k) -> (j : dense, k : dense, i : compressed)"), (4, 3, 5)),
    (TensorFormat.parse("(i, j, k) -> (i : batch, j : dense, k : delta(2, packed))"), (3, 4, 9)),
    (TensorFormat.parse("(i, j, k) -> (i : dense, k - j : compressed, j : range)"), (3, 4, 5)),
    (TensorFormat.parse("(i, j, k) -> (i : compressed, j floordiv 2 : dense, k floordiv 2 : compressed, "
                        "j mod 2 : dense, k mod 2 : dense)"), (3, 5, 5)),
]


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.bool_], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fmt, shape", HIGH, ids=lambda v: fmt_id(v) if isinstance(v, TensorFormat) else str(v))
def test_from_dense_high_rank(fmt, shape, dtype):
    x = rand_dense(shape, dtype=dtype, seed=5)
    t = Tensor.from_dense(x, fmt)
    t.validate()
    assert_same(t.to_dense(), x)
    back = t.convert(F.CSF(len(shape))).convert(fmt)
    back.validate()
    assert_same(back.to_dense(), x)


def test_csf3_buffers():
    x = np.zeros((2, 3, 4))
    x[0, 1, 2], x[0, 1, 3], x[1, 0, 0], x[1, 2, 1] = 1, 2, 3, 4
    t = Tensor.from_dense(x, F.CSF(3))
    assert t.pos(0).tolist() == [0, 2]
    assert t.crd(0).tolist() == [0, 1]
    assert t.pos(1).tolist() == [0, 1, 3]
    assert t.crd(1).tolist() == [1, 0, 2]
    assert t.pos(2).tolist() == [0, 2, 3, 4]
    assert t.crd(2).tolist() == [2, 3, 0, 1]
    assert t.values.tolist() == [1, 2, 3, 4]


# --------------------------------------------------------------------------- structured and delta


@pytest.mark.parametrize("shape", [(4, 8), (3, 7), (5, 4), (0, 4), (4, 0), (1, 3)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64], ids=lambda d: np.dtype(d).name)
def test_structured_2_4_satisfying_input(shape, dtype):
    x = two_four(shape, seed=sum(shape), dtype=dtype)
    for fmt in (F.Structured(2, 4), TensorFormat.parse("(i, j) -> (i : dense, j // 4 : dense, j % 4 : structured(2))")):
        t = Tensor.from_dense(x, fmt)
        t.validate()
        assert t.nse == shape[0] * (-(-shape[1] // 4)) * 2
        assert_same(t.to_dense(), x)
        crd = np.asarray(t.crd(2)).reshape(-1, 2)
        assert (crd[:, 0] < crd[:, 1]).all()


def test_structured_overfull_raises_without_prune():
    x = np.array([[1.0, 2.0, 3.0, 0.0]])
    with pytest.raises(ustc.StorageError):
        Tensor.from_dense(x, F.Structured(2, 4))
    with pytest.raises(ustc.StorageError):
        Tensor.from_dense(x, F.CSR).convert(F.Structured(2, 4))


@pytest.mark.parametrize("shape", [(4, 8), (3, 10), (6, 5)], ids=str)
def test_structured_prune_keeps_largest(shape):
    x = rand_dense(shape, density=0.8, seed=shape[1])
    expected = prune_oracle(x, 2, 4)
    t = Tensor.from_dense(x, F.Structured(2, 4), prune=True)
    t.validate()
    assert_same(t.to_dense(), expected)
    c = Tensor.from_dense(x, F.CSR).convert(F.Structured(2, 4), prune=True)
    c.validate()
    assert_same(c.to_dense(), expected)


@pytest.mark.parametrize("nm", [(1, 4), (2, 4), (3, 4), (4, 4), (0, 3), (1, 2), (2, 8)], ids=str)
def test_structured_n_m(nm):
    n, m = nm
    x = rand_dense((5, 11), density=0.7, seed=n * 10 + m)
    fmt = F.Structured(n, m)
    fitted = structured_fit(x, fmt)
    t = Tensor.from_dense(fitted, fmt)
    t.validate()
    assert t.nse == 5 * (-(-11 // m)) * n
    assert_same(t.to_dense(), fitted)
    assert_same(Tensor.from_dense(x, fmt, prune=True).to_dense(), prune_oracle(x, n, m))


def test_structured_prune_bool():
    x = np.array([[True, True, True, False]])
    t = Tensor.from_dense(x, F.Structured(2, 4), prune=True)
    assert np.asarray(t.to_dense()).sum() == 2


@pytest.mark.parametrize("bits", [1, 2, 4, 8], ids=lambda b: f"b{b}")
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "packed"])
@pytest.mark.parametrize("shape", [(5, 40), (3, 1), (1, 300), (0, 9), (4, 0)], ids=str)
def test_delta_round_trip(bits, packed, shape):
    x = rand_dense(shape, density=0.15, seed=bits + 7 * packed)
    fmt = F.DELTA(bits, packed)
    t = Tensor.from_dense(x, fmt)
    t.validate()
    assert_same(t.to_dense(), x)
    assert t.crd(1).dtype == (np.uint32 if packed else np.uint8)
    # every stored gap fits b bits and decodes to the oracle coordinates
    gaps = fmt.levels[1].type.gaps(np.asarray(t.crd(1)), t.nse)
    assert (gaps < 2**bits).all()
    assert_same(t.convert(F.CSR).to_dense(), x)
    assert_same(Tensor.from_dense(x, F.CSR).convert(fmt).to_dense(), x)


def test_delta_crd_dtypes_by_width():
    x = rand_dense((3, 70000), density=0.0001, seed=1)
    for bits, dt in ((3, np.uint8), (8, np.uint8), (9, np.uint16), (16, np.uint16), (17, np.uint32), (32, np.uint32)):
        t = Tensor.from_dense(x, F.DELTA(bits))
        assert t.crd(1).dtype == dt, bits
        t.validate()
        assert_same(t.to_dense(), x)


# --------------------------------------------------------------------------- conversions between pairs

REPRESENTATIVE = [
    F.Dense(2), F.CSR, F.CSC, F.COO(), F.DCSR, F.DCSC, F.CROW, F.CCOL, F.DIAI, F.DIAJ, F.SkewDIAI, F.SkewDIAJ,
    F.BSR(2, 3), F.BSC(3, 2), F.DELTA(2), F.DELTA(4, True),
    TensorFormat.parse("(i, j) -> (i : dense, j : loose_compressed)"),
    TensorFormat.parse("(i, j) -> (j : compressed(nonunique, nonordered), i : singleton(nonordered))"),
]


@pytest.mark.parametrize("b", REPRESENTATIVE, ids=fmt_id)
@pytest.mark.parametrize("a", REPRESENTATIVE, ids=fmt_id)
def test_convert_pairs(a, b):
    x = rand_dense((5, 7), seed=42)
    ta = Tensor.from_dense(x, a)
    tb = ta.convert(b)
    tb.validate()
    assert tb.format == b
    assert_same(tb.to_dense(), x)
    back = tb.convert(a)
    back.validate()
    assert back.format == a
    assert_same(back.to_dense(), x)
    # the round trip reproduces the canonical storage exactly
    assert sorted(back.buffers) == sorted(ta.buffers)
    for key, buf in ta.buffers.items():
        assert_same(back.buffers[key], np.asarray(buf))
    assert_same(np.asarray(back.values[:back.nse]), np.asarray(ta.values[:ta.nse]))


@pytest.mark.parametrize("b", [F.CSR, F.CSC, F.COO(), F.DIAJ, F.BSR(2, 2)], ids=fmt_id)
def test_convert_empty_shapes(b):
    for shape in [(0, 3), (3, 0), (0, 0)]:
        t = Tensor.from_dense(np.zeros(shape), F.COO()).convert(b)
        t.validate()
        assert_same(t.to_dense(), np.zeros(shape))


def test_convert_rank_mismatch_raises():
    t = Tensor.from_dense(rand_dense((3, 4)), F.CSR)
    with pytest.raises(ustc.FormatError):
        t.convert(F.CSF(3))
    with pytest.raises(ustc.FormatError):
        Tensor.from_dense(rand_dense((3, 4)), F.CSF(3))


def test_convert_does_not_alias_source():
    x = rand_dense((5, 7), seed=2)
    t = Tensor.from_dense(x, F.CSR)
    for fmt in (F.CSC, F.CSR, F.COO(), F.DIAI):
        u = t.convert(fmt)
        u.values[:] = 0
    assert_same(t.to_dense(), x)


# --------------------------------------------------------------------------- duplicates and zeros

DUP_FORMATS = [F.CSR, F.CSC, F.COO(), F.DCSR, F.DCSC, F.CROW, F.BSR(2, 3), F.DIAI, F.DIAJ, F.DELTA(2),
               F.Dense(2), TensorFormat.parse("(i, j) -> (i : compressed(nonunique), j : singleton(nonunique))"),
               TensorFormat.parse("(i, j) -> (i : dense, j : compressed(nonunique))")]


@pytest.mark.parametrize("fmt", DUP_FORMATS, ids=fmt_id)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_from_coo_sums_duplicates(fmt, seed):
    rng = np.random.default_rng(seed)
    shape = (6, 5)
    n = 60
    r, c = rng.integers(0, shape[0], n), rng.integers(0, shape[1], n)
    v = rng.integers(-3, 4, n).astype(np.int64)  # exact sums; some cancel to 0
    expected = np.zeros(shape, dtype=np.int64)
    np.add.at(expected, (r, c), v)
    r0, c0, v0 = r.copy(), c.copy(), v.copy()
    t = Tensor.from_coo((r, c), v, shape, fmt)
    t.validate()
    assert_same(t.to_dense(), expected)
    np.testing.assert_array_equal(r, r0)  # inputs untouched
    np.testing.assert_array_equal(c, c0)
    np.testing.assert_array_equal(v, v0)
    if fmt in (F.CSR, F.CSC, F.COO(), F.DCSR, F.DCSC):
        assert t.nse == np.count_nonzero(expected)  # duplicates merged, zero sums dropped
        assert np.all(np.asarray(t.values) != 0)


def test_from_coo_default_format_is_coo():
    t = Tensor.from_coo((np.array([1, 0]), np.array([2, 2])), np.array([5.0, 6.0]), (3, 3))
    assert t.format == F.COO()
    assert t.crd(0).tolist() == [0, 1]
    assert t.crd(1).tolist() == [2, 2]
    assert t.values.tolist() == [6.0, 5.0]
    v = Tensor.from_coo((np.array([3, 1, 3]),), np.array([1.0, 2.0, 3.0]), (5,))
    assert_same(v.to_dense(), np.array([0, 2.0, 0, 4.0, 0]))


def test_explicit_zeros_dropped_except_where_stored():
    r, c = np.array([0, 0, 1, 2]), np.array([0, 1, 1, 2])
    v = np.array([1.0, 0.0, 0.0, 5.0])
    csr = Tensor.from_coo((r, c), v, (3, 4), F.CSR)
    assert csr.nse == 2 and csr.crd(1).tolist() == [0, 2]
    assert csr.values.tolist() == [1.0, 5.0]
    # BSR stores whole blocks: the zero inside a block is kept as a stored zero
    bsr = Tensor.from_coo((r, c), v, (3, 4), F.BSR(2, 2))
    assert bsr.nse == 2 * 4  # blocks (0, 0) and (1, 1)
    assert bsr.crd(1).tolist() == [0, 1]
    assert bsr.values.tolist() == [1.0, 0.0, 0.0, 0.0, 5.0, 0.0, 0.0, 0.0]
    # a SciPy CSR holding an explicit zero keeps it on the zero-copy view, conversion drops it
    import scipy.sparse as sp

    s = sp.csr_array((np.array([1.0, 0.0, 3.0]), np.array([0, 2, 1]), np.array([0, 2, 3])), shape=(2, 3))
    t = Tensor.from_package(s)
    assert t.nse == 3
    for fmt in (F.CSC, F.CSR, F.COO(), F.DCSR):
        u = t.convert(fmt)
        assert u.nse == 2, fmt
        assert_same(u.to_dense(), s.toarray())


def test_from_coo_out_of_range_raises():
    with pytest.raises(ustc.StorageError):
        Tensor.from_coo((np.array([0, 3]), np.array([0, 0])), np.array([1.0, 2.0]), (3, 3), F.CSR)
    with pytest.raises(ustc.StorageError):
        Tensor.from_coo((np.array([0, -1]), np.array([0, 0])), np.array([1.0, 2.0]), (3, 3), F.CSR)
    with pytest.raises(ustc.StorageError):
        Tensor.from_coo((np.array([0, 1]),), np.array([1.0, 2.0]), (3, 3), F.CSR)


def test_unique_compressed_before_singleton_refuses_repeats():
    fmt = TensorFormat.parse("(i, j) -> (i : compressed, j : singleton)")
    x = np.array([[1.0, 2.0], [0.0, 3.0]])
    r, c = np.nonzero(x)
    with pytest.raises(ustc.StorageError):
        Tensor.from_coo((r, c), x[r, c], x.shape, fmt)
    with pytest.raises(ustc.StorageError):
        Tensor.from_dense(x, F.CSR).convert(fmt)
    # a permuted variant does not take the dense->COO fast path and refuses too
    with pytest.raises(ustc.StorageError):
        Tensor.from_dense(x.T.copy(), "(i, j) -> (j : compressed, i : singleton)")
    y = np.array([[1.0, 0.0], [0.0, 3.0]])
    t = Tensor.from_dense(y, fmt)
    t.validate()
    assert_same(t.to_dense(), y)


# --------------------------------------------------------------------------- index widths

WIDTH_FORMATS = {
    "CSR": "(i, j) -> (i : dense, j : compressed)",
    "COO": "(i, j) -> (i : compressed(nonunique), j : singleton)",
    "DCSC": "(i, j) -> (j : compressed, i : compressed)",
    "BSR": "(i, j) -> (i floordiv 2 : dense, j floordiv 2 : compressed, i mod 2 : dense, j mod 2 : dense)",
    "loose": "(i, j) -> (i : dense, j : loose_compressed)",
}


@pytest.mark.parametrize("crd_width", [0, 8, 16, 32, 64])
@pytest.mark.parametrize("pos_width", [0, 8, 16, 32, 64])
@pytest.mark.parametrize("name", sorted(WIDTH_FORMATS))
def test_index_widths_honoured(name, pos_width, crd_width):
    fmt = TensorFormat.parse(f"{WIDTH_FORMATS[name]}, posWidth = {pos_width}, crdWidth = {crd_width}")
    x = rand_dense((6, 9), seed=pos_width + crd_width)
    default = {0: np.int32, 8: np.uint8, 16: np.uint16, 32: np.int32, 64: np.int64}
    for t in (Tensor.from_dense(x, fmt), Tensor.from_dense(x, F.CSR).convert(fmt)):
        t.validate()
        for (k, kind), buf in t.buffers.items():
            want = default[pos_width if kind == "pos" else crd_width]
            assert buf.dtype == want, (k, kind, buf.dtype, want)
        assert_same(t.to_dense(), x)


@pytest.mark.parametrize("width, dtype", [(0, np.int32), (8, np.int8), (16, np.int16), (32, np.int32),
                                          (64, np.int64)])
def test_dia_offsets_signed_width(width, dtype):
    fmt = TensorFormat.parse(f"(i, j) -> (j - i : compressed, i : range), crdWidth = {width}")
    x = rand_dense((6, 6), density=0.5, seed=4)
    t = Tensor.from_dense(x, fmt)
    assert t.crd(0).dtype == dtype
    assert int(t.crd(0).min()) < 0
    t.validate()
    assert_same(t.to_dense(), x)


def test_width_overflow_raises():
    many = np.ones((1, 300))
    with pytest.raises(ustc.StorageError):
        Tensor.from_dense(many, "(i, j) -> (i : dense, j : compressed), posWidth = 8")
    with pytest.raises(ustc.StorageError):
        Tensor.from_dense(np.eye(2, 300), "(i, j) -> (i : dense, j : compressed), crdWidth = 8")
    with pytest.raises(ustc.StorageError):
        Tensor.from_dense(np.ones((2, 40000)), "(i, j) -> (i : dense, j : compressed), posWidth = 16")
    with pytest.raises(ustc.StorageError):
        Tensor.from_dense(many, F.CSR).convert("(i, j) -> (i : dense, j : compressed), posWidth = 8")
    with pytest.raises(ustc.StorageError):  # 130 diagonals below the main one: offsets < -128
        Tensor.from_dense(np.eye(200, 5, -150), "(i, j) -> (j - i : compressed, i : range), crdWidth = 8")
    # exactly at the limit fits
    t = Tensor.from_dense(np.ones((1, 255)), "(i, j) -> (i : dense, j : compressed), posWidth = 8")
    assert t.pos(1).dtype == np.uint8 and int(t.pos(1)[-1]) == 255
    t = Tensor.from_dense(np.eye(2, 256), "(i, j) -> (i : dense, j : compressed), crdWidth = 8")
    assert t.crd(1).dtype == np.uint8


def test_default_index_dtype_int32_and_int64_when_needed():
    x = rand_dense((5, 7), seed=9)
    for fmt in (F.CSR, F.COO(), F.DCSR, F.BSR(2, 2), F.DIAI, F.CSF(2)):
        t = Tensor.from_dense(x, fmt)
        for buf in t.buffers.values():
            assert buf.dtype == np.int32
    big = 3 * 2**31
    t = Tensor.from_coo((np.array([0, 0]), np.array([5, big - 1])), np.array([1.0, 2.0]), (2, big), F.CSR)
    assert t.crd(1).dtype == np.int64
    assert t.pos(1).dtype == np.int32
    assert t.crd(1).tolist() == [5, big - 1]
    assert t.get_value(0, big - 1) == 2.0
    t.validate()


# --------------------------------------------------------------------------- known bugs (strict xfail)


def test_unique_compressed_before_singleton_from_dense_refuses():
    fmt = TensorFormat.parse("(i, j) -> (i : compressed, j : singleton)")
    x = np.array([[1.0, 2.0], [0.0, 3.0]])
    try:
        t = Tensor.from_dense(x, fmt)
    except ustc.StorageError:
        return
    t.validate()


def test_dense_scaled_level_round_trip():
    x = np.arange(1, 31, dtype=np.float64).reshape(6, 5)
    fmt = TensorFormat.parse("(a, b) -> (4 * b : dense, a : dense)")
    t = Tensor.from_dense(x, fmt)
    assert_same(t.to_dense(), x)


def test_delta_scaled_level_padding():
    x = np.zeros((2, 3))
    x[0, 2], x[1, 0] = -0.5, -1.25
    t = Tensor.from_dense(x, "(a, b) -> (3 * a : delta(1), b : dense)")
    assert_same(t.to_dense(), x)


def test_compressed_scaled_level_round_trip():
    x = rand_dense((4, 5), seed=1)
    fmt = TensorFormat.parse("(a, b) -> (a : dense, 3 * b : compressed)")
    t = Tensor.from_dense(x, fmt)
    t.validate()
    assert_same(t.to_dense(), x)
    assert np.asarray(t.crd(1)).max() % 3 == 0


def test_empty_batch_extent():
    t = Tensor.from_dense(np.zeros((0, 3)), "(a, b) -> (a : batch, b : compressed)")
    assert t.shape == (0, 3)


def test_batch_over_loose_compressed():
    x = np.array([[0.0, 7.0, 1.0, -9.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    fmt = "(a, b) -> (b : batch, a floordiv 1 : loose_compressed, a mod 1 : compressed)"
    t = Tensor.from_dense(x, fmt)
    assert t.nse == 4
    t.validate()
    assert_same(t.to_dense(), x)


def test_unique_singleton_with_singleton_child():
    fmt = TensorFormat.parse("(i, j, k) -> (i : compressed(nonunique), j : singleton, k : singleton)")
    x = np.zeros((2, 2, 2))
    x[0, 0, 0], x[0, 0, 1] = 1.0, 2.0
    try:
        t = Tensor.from_dense(x, fmt)
    except ustc.StorageError:
        return  # refusing is fine
    t.validate()


def test_hybrid_coo_one_position_per_sparse_coordinate():
    fmt = TensorFormat.parse("(i, j, k) -> (i : compressed(nonunique), j : singleton, k : dense)")
    x = np.zeros((2, 3, 2))
    x[0, 1, 0], x[0, 1, 1], x[1, 2, 1] = 1.0, 2.0, 3.0
    t = Tensor.from_dense(x, fmt)
    t.validate()
    assert t.crd(0).tolist() == [0, 1]
    assert t.crd(1).tolist() == [1, 2]
    assert t.values.tolist() == [1.0, 2.0, 0.0, 3.0]


# --------------------------------------------------------------------------- property tests


@st.composite
def format_and_array(draw, max_rank=3, allow_widths=False):
    fmt = draw(formats(max_rank=max_rank, allow_widths=allow_widths))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=fmt.ndim, max_size=fmt.ndim)))
    dtype = draw(st.sampled_from([np.float64, np.int64, np.float32]))
    density = draw(st.sampled_from([0.0, 0.2, 0.5, 1.0]))
    x = rand_dense(shape, dtype=dtype, density=density, seed=draw(st.integers(0, 2**32 - 1)))
    if density == 0.0:
        x[...] = 0
    return fmt, structured_fit(x, fmt)


def _build(x, fmt):
    """Tensor of ``x`` in ``fmt``, or None after checking a refusal was justified."""
    verdict = representable(x, fmt)
    if verdict == "raise":
        with pytest.raises(ustc.StorageError):
            Tensor.from_dense(x, fmt)
        return None
    return Tensor.from_dense(x, fmt)


@settings(max_examples=150, deadline=None)
@given(format_and_array())
def test_property_from_dense_round_trip(case):
    fmt, x = case
    t = _build(x, fmt)
    if t is None:
        return
    t.validate()
    assert t.format == fmt
    assert_same(t.to_dense(), x)


@settings(max_examples=80, deadline=None)
@given(format_and_array())
def test_property_convert_through_standard_formats(case):
    fmt, x = case
    t = _build(x, fmt)
    if t is None:
        return
    rank = fmt.ndim
    targets = [F.CSF(rank), F.Dense(rank)] + ([F.COO(rank), F.CSR, F.CSC] if rank == 2 else
                                              [F.COO(rank)] if rank > 2 else [])
    for target in targets:
        u = t.convert(target)
        u.validate()
        assert_same(u.to_dense(), x)
        v = u.convert(fmt)
        v.validate()
        assert v.format == fmt
        assert_same(v.to_dense(), x)


@settings(max_examples=100, deadline=None)
@given(format_and_array(max_rank=2, allow_widths=True))
def test_property_index_widths(case):
    fmt, x = case
    assume(representable(x, fmt) == "ok")
    t0 = Tensor.from_dense(x, widthless(fmt))
    want_pos, want_crd = expected_index_dtypes(fmt, t0)
    if want_pos is None or want_crd is None:
        with pytest.raises(ustc.StorageError):
            Tensor.from_dense(x, fmt)
        return
    t = Tensor.from_dense(x, fmt)
    t.validate()
    for (k, kind), buf in t.buffers.items():
        if kind == "crd" and fmt.levels[k].type.keyword == "delta":
            continue
        assert buf.dtype == (want_pos if kind == "pos" else want_crd), (k, kind, buf.dtype)
    assert_same(t.to_dense(), x)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_property_from_coo_duplicates(data):
    fmt = data.draw(formats(max_rank=3, allow_widths=False, allow_structured=False))
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=fmt.ndim, max_size=fmt.ndim)))
    n = data.draw(st.integers(0, 40))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    coords = tuple(rng.integers(0, s, n) for s in shape)
    values = rng.integers(-2, 3, n).astype(np.int64)
    expected = np.zeros(shape, dtype=np.int64)
    np.add.at(expected, coords, values)
    verdict = representable(expected, fmt)
    if verdict == "raise":
        with pytest.raises(ustc.StorageError):
            Tensor.from_coo(coords, values, shape, fmt)
        return
    t = Tensor.from_coo(coords, values, shape, fmt)
    t.validate()
    assert_same(t.to_dense(), expected)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_property_convert_between_random_formats(data):
    a, x = data.draw(format_and_array())
    b = data.draw(formats(max_rank=a.ndim, allow_widths=False).filter(lambda f: f.ndim == a.ndim))
    y = structured_fit(x, b)
    assume(representable(y, b) == "ok")
    t = _build(y, a)
    if t is None:
        return
    u = t.convert(b)
    u.validate()
    assert u.format == b
    assert_same(u.to_dense(), y)
    v = u.convert(a)
    v.validate()
    assert_same(v.to_dense(), y)
