"""NumPy-style indexing and assignment (``ustc.tensor.indexing``) on every registry format.

Every result is checked against NumPy indexing of the tensor's dense contents; formats come
from the registry (``op_helpers.NAMED``), shapes include empty, 1 x n and n x 1, and a
Hypothesis property draws random formats (from the registry and from ``strategies.formats``),
shapes and index expressions.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import ustc
from op_helpers import (FAMILIES_2D, NAMED, NAMED_2D, NAMED_3D, SHAPE_IDS, SHAPES_2D, assert_unchanged, named_params,
                        rand_dense, representable, seed_of, snapshot, sparse, structured_fit, subset_2d)
from strategies import examples, formats
from ustc import Tensor
from ustc import formats as F
from ustc.tensor import indexing

FORMATS = named_params(NAMED_2D)


def _dense(x):
    return x.to_dense() if isinstance(x, Tensor) else np.asarray(x)


def check(A: Tensor, key, a: np.ndarray | None = None):
    """``A[key]`` equals NumPy's ``a[key]`` (an IndexError on both sides counts as equal)."""
    a = A.to_dense() if a is None else a
    try:
        want = a[key]
    except IndexError:
        with pytest.raises(IndexError):
            A[key]
        return None
    got = A[key]
    if np.ndim(want) == 0:
        assert not isinstance(got, Tensor) and np.ndim(got) == 0, (key, type(got))
        assert got == want, (key, got, want)
        assert np.asarray(got).dtype == A.dtype
        return got
    if A.format.all_dense:
        assert isinstance(got, np.ndarray)
    else:
        assert isinstance(got, Tensor), (key, type(got))
        assert got.dtype == A.dtype
        got.validate()
    assert _dense(got).shape == want.shape, (key, _dense(got).shape, want.shape)
    np.testing.assert_array_equal(_dense(got), want)
    return got


def keys_2d(shape) -> list:
    """Index expressions valid for a matrix of ``shape`` (ints only where extents allow)."""
    m, n = shape
    out = [(slice(None),), (Ellipsis,), (slice(1, None),), (slice(None, None, 2),), (slice(None, None, -1),),
           (slice(-3, None), slice(None, -1)), (slice(1, 4, 2), slice(None, None, -2)), (slice(2, 2),),
           (None, slice(None)), (slice(None), None), ([],), (slice(None), [])]
    if m:
        out += [(0,), (-1,), (m - 1, slice(None)), ([m - 1, 0, 0],), (np.arange(m) % 2 == 0,),
                (np.array([[0], [m - 1]]),), ([0, m - 1], slice(1, None)), (Ellipsis, None)]
    if n:
        out += [(slice(None), 0), (slice(None), -1), (Ellipsis, n - 1), (slice(None), [n - 1, 0, n - 1]),
                (slice(None), np.arange(n) % 3 != 1)]
    if m and n:
        out += [(0, 0), (m - 1, n - 1), (-1, -n), (m // 2, slice(None, None, 2)), ([0, m - 1], [n - 1, 0]),
                (np.array([[0], [m - 1]]), [0, n - 1]), ([m - 1], 0), (0, [n - 1, 0]),
                (np.ones((m, n), dtype=bool),), (slice(None), [0], None)]
    return out


@pytest.mark.parametrize("shape", SHAPES_2D, ids=SHAPE_IDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_getitem_every_format(fmt, shape):
    A = sparse(fmt, shape, seed=seed_of("getitem", str(fmt), shape))
    before = snapshot(A)
    a = A.to_dense()
    for key in keys_2d(shape):
        check(A, key, a)
    rows = [k for k in range(shape[0])][::-1]
    cols = [k for k in range(shape[1]) if k % 2 == 0]
    sub = A[rows][:, cols]                                      # A[rows][:, cols]
    np.testing.assert_array_equal(_dense(sub), a[rows][:, cols])
    assert_unchanged([A], before)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_scalar_entry(fmt):
    """``A[i, j]`` (and negative indices) for every coordinate equals the dense entry."""
    A = sparse(fmt, (6, 7), seed=seed_of("scalar", str(fmt)))
    a = A.to_dense()
    for i in range(6):
        for j in range(7):
            assert A[i, j] == a[i, j]
            assert A[i - 6, j - 7] == a[i, j]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128, np.int64])
@pytest.mark.parametrize("fmt", subset_2d(*FAMILIES_2D))
def test_dtypes(fmt, dtype):
    A = sparse(fmt, (5, 6), dtype=dtype, seed=seed_of("dtypes", str(fmt), str(dtype)))
    a = A.to_dense()
    for key in [(1, 2), (2,), (slice(1, 4),), (slice(None), 3), ([3, 0], [1, 5]), (a != 0,)]:
        check(A, key, a)


THREE_D = {**NAMED_3D, "COO(3)": F.COO(3), "Dense(3)": F.Dense(3),
           "CSF-kij": ustc.TensorFormat.parse("(i, j, k) -> (k : dense, i : compressed, j : compressed)")}


@pytest.mark.parametrize("shape", [(3, 4, 5), (1, 3, 2), (2, 0, 3)], ids=["3x4x5", "1x3x2", "2x0x3"])
@pytest.mark.parametrize("fmt", named_params(THREE_D))
def test_getitem_3d(fmt, shape):
    A = sparse(fmt, shape, seed=seed_of("3d", str(fmt), shape))
    a = A.to_dense()
    l, m, n = shape
    keys = [(slice(None),), (slice(1, None), slice(None, None, -1)), (Ellipsis, slice(None, None, 2)),
            (None, Ellipsis), (slice(None), [])]
    if l:
        keys += [(0,), (-1, slice(None)), ([l - 1, 0],), (np.arange(l) < 1,)]
    if l and m and n:
        keys += [(0, 1, 2), (-1, -1, -1), (0, slice(None), [n - 1, 0]), ([0, l - 1], slice(None), 0),
                 (Ellipsis, [n - 1, n - 1]), (a[:, :, 0] != 0,), (slice(None), a[0] != 0), (l - 1, m - 1),
                 ([0], [m - 1], [n - 1]), (0, None, slice(None), n - 1)]
    for key in keys:
        check(A, key, a)


# --------------------------------------------------------------------------- views and costs


def test_csr_row_slice_is_a_view():
    A = sparse(F.CSR, (8, 6), seed=1)
    B = A[2:6]
    assert B.format == A.format and B.shape == (4, 6)
    assert np.shares_memory(B.values, A.values) and np.shares_memory(B.crd(1), A.crd(1))
    np.testing.assert_array_equal(B.to_dense(), A.to_dense()[2:6])
    row = A[3]                                   # one row: a 1-D compressed view
    assert row.format == ustc.TensorFormat.parse("(j) -> (j : compressed)")
    assert np.shares_memory(row.values, A.values) or A.to_dense()[3].sum() == 0
    B[0, :] = 0                                  # a view: writing its stored values writes A's
    assert not A.to_dense()[2].any()


@pytest.mark.parametrize("name, key, shared", [("CSC", (slice(None), slice(1, 4)), True),
                                               ("COO", (slice(2, 5),), True),
                                               ("DCSR", (slice(2, 5),), True),
                                               ("CSC", (slice(None), 2), True)])
def test_other_first_level_views(name, key, shared):
    A = sparse(NAMED[name], (7, 6), seed=2, density=0.6)
    B = check(A, key)
    assert np.shares_memory(B.values, A.values) == shared


def test_batched_csr_batches_are_views():
    A = sparse(F.BatchedCSR, (3, 4, 5), seed=3, density=0.5)
    one = A[1]
    assert one.format == ustc.TensorFormat.parse("CSR") and np.shares_memory(one.values, A.values)
    np.testing.assert_array_equal(one.to_dense(), A.to_dense()[1])
    two = A[1:]
    assert two.format == A.format and np.shares_memory(two.values, A.values)
    np.testing.assert_array_equal(two.to_dense(), A.to_dense()[1:])


def test_csr_lookups_and_row_slices_do_not_scan_the_entries(monkeypatch):
    """``A[i, j]`` walks the levels (a binary search in the row) and ``A[i0:i1]`` / ``A[i]`` are
    views: none of them lists the tensor's entries."""
    A = sparse(F.CSR, (50, 40), seed=4, density=0.2)
    a = A.to_dense()

    def boom(*args, **kwargs):
        raise AssertionError("the entries were listed")

    monkeypatch.setattr(Tensor, "entries", boom)
    monkeypatch.setattr(indexing.storage, "unpack", boom)
    for i, j in [(0, 0), (17, 3), (49, 39), (-1, -1)]:
        assert A[i, j] == a[i, j]
    A[5, 5] = A[5, 5]                              # an assignment to one entry walks too
    np.testing.assert_array_equal(A[10:20].crd(1), A.crd(1)[A.pos(1)[10]:A.pos(1)[20]])
    assert A[7].shape == (40,)


def test_scalar_lookup_binary_searches_the_row(monkeypatch):
    """The search in a sorted compressed row is ``np.searchsorted`` on the row's ``crd`` slice."""
    A = sparse(F.CSR, (4, 1000), seed=5, density=0.5)
    calls = []
    real = np.searchsorted

    def spy(a, v, side="left", *args):
        calls.append(len(a))
        return real(a, v, side, *args)

    monkeypatch.setattr(indexing.np, "searchsorted", spy)
    row = int(np.diff(A.pos(1))[2])
    A[2, 500]
    assert calls == [row]


# --------------------------------------------------------------------------- result formats


def test_result_formats():
    A = sparse(F.DIAI, (6, 6), seed=6)
    assert A[1:4].format == F.DIAI                          # basic indexing keeps a format that holds it
    assert A[[0, 2]].format == F.CSR                        # integer arrays: plain formats only
    assert sparse(F.DCSC, (6, 6), seed=6)[[0, 2]].format == F.DCSC
    nm = sparse(NAMED["Structured"], (4, 8), seed=6)
    assert nm[1:3].format == nm.format                      # rows of n:m are a view, still n:m
    assert nm[:, 1:3].format == F.CSR                       # columns: n:m does not hold any pattern
    assert A[2].format == ustc.TensorFormat.parse("(i) -> (i : compressed)")
    assert A[None].format == F.COO(3)
    D = Tensor.from_dense(np.arange(12.0).reshape(3, 4))
    view = D[1:]                                            # an all-dense Tensor indexes as its array
    assert isinstance(view, np.ndarray) and np.shares_memory(view, D.values)


# --------------------------------------------------------------------------- errors


def test_out_of_range_names_the_dimension():
    A = sparse(F.CSR, (3, 4), seed=7)
    for key, dim, extent in [((3, 0), 0, 3), ((0, 4), 1, 4), ((-4, 0), 0, 3), (([0, 5],), 0, 3),
                             ((slice(None), [-5]), 1, 4)]:
        with pytest.raises(ustc.IndexingError, match=f"dimension {dim} of extent {extent}") as info:
            A[key]
        assert isinstance(info.value, IndexError)
        with pytest.raises(IndexError):
            A[key] = 1.0
    with pytest.raises(ustc.IndexingError, match="too many indices"):
        A[0, 0, 0]
    with pytest.raises(ustc.IndexingError, match="boolean index"):
        A[np.ones(2, dtype=bool)]
    with pytest.raises(ustc.IndexingError, match="valid indices"):
        A[0.5]
    with pytest.raises(ustc.IndexingError, match="broadcast"):
        A[[0, 1], [0, 1, 2]]
    with pytest.raises(ustc.IndexingError, match="single ellipsis"):
        A[..., ...]
    assert [len(list(A)), len(A)] == [3, 3]               # iteration stops at the end (an IndexError)


# --------------------------------------------------------------------------- assignment


def _grows(fmt) -> bool:
    return indexing.can_grow(fmt)


SET_CASES = [((1, 2), 5.0), ((0, 0), 0.0), ((slice(1, 3),), 0.0), ((slice(None), 1), 7.0),
             (([1, 1, 2], [3, 3, 0]), np.array([1.0, 2.0, 3.0])), ((slice(None, None, 2), slice(1, None)), -1.5),
             ((2,), np.arange(6.0)), ((slice(None), [0, 4]), np.array([[1.0, 2.0]]))]


@pytest.mark.parametrize("fmt", FORMATS)
def test_setitem_every_format(fmt):
    """Stored entries change in place in every format; new nonzeros are inserted where the
    format grows entry by entry, and refused (tensor untouched) elsewhere."""
    for key, value in SET_CASES:
        A = sparse(fmt, (5, 6), seed=seed_of("set", str(fmt), str(key)))
        a = A.to_dense().copy()
        before = snapshot(A)
        want = a.copy()
        want[key] = value
        try:
            A[key] = value
        except ustc.UnsupportedOperation as exc:
            assert not _grows(fmt), (fmt, key)
            assert (fmt.name or str(fmt)) in str(exc) and "convert" in str(exc)
            assert_unchanged([A], before)
            continue
        A.validate()
        np.testing.assert_array_equal(A.to_dense(), want)
        assert A.format == fmt


def test_existing_entries_change_in_place_in_every_format():
    """Assigning to stored coordinates never needs growth: every format takes it, in place."""
    for name, fmt in NAMED_2D.items():
        A = sparse(fmt, (6, 6), seed=seed_of("inplace", name), density=0.5)
        coords, values = A.entries()
        values_buffer = A.values
        nz = np.flatnonzero(values != 0)[:3]
        want = A.to_dense().copy()
        for e in nz:
            i, j = int(coords[0][e]), int(coords[1][e])
            A[i, j] = 42.0
            want[i, j] = 42.0
        np.testing.assert_array_equal(A.to_dense(), want)
        assert A.values is values_buffer or np.shares_memory(A.values, values_buffer), name


@pytest.mark.parametrize("name", ["DIAI", "DIAJ", "SkewDIAI", "BSR", "BSC", "Structured", "CROW", "CCOL"])
def test_growth_is_refused_with_a_conversion_hint(name):
    fmt = NAMED_2D[name]
    x = np.zeros((8, 8))
    x[0, 0] = 1.0
    A = Tensor.from_dense(x, fmt)
    before = snapshot(A)
    with pytest.raises(ustc.UnsupportedOperation, match="convert") as info:
        A[7, 3] = 2.0
    assert fmt.name in str(info.value)
    assert_unchanged([A], before)
    A[7, 3] = 0.0                                   # zeros need no growth
    A[0, 0] = 3.0
    assert A[0, 0] == 3.0
    B = A.convert("CSR")                            # the suggested way
    B[7, 3] = 2.0
    assert B.convert(fmt.named(name))[7, 3] == 2.0 if fmt.holds_any_pattern else B[7, 3] == 2.0


@pytest.mark.parametrize("name", ["CSR", "CSC", "COO", "DCSR", "DCSC", "DELTA", "CSF", "BatchedCSR"])
def test_growth_where_levels_take_insertions(name):
    fmt = NAMED[name]
    shape = (3, 4, 5)[:fmt.ndim] if fmt.ndim == 3 else (6, 7)
    A = sparse(fmt, shape, seed=seed_of("grow", name), density=0.2)
    a = A.to_dense().copy()
    key = tuple(n - 1 for n in shape)
    A[key] = 9.0
    a[key] = 9.0
    mask = a == 0
    A[mask] = 1.0                                   # a boolean mask: every zero becomes stored
    a[mask] = 1.0
    A.validate()
    assert A.format == fmt
    np.testing.assert_array_equal(A.to_dense(), a)


def test_duplicates_sum_on_read_and_collapse_on_write():
    import scipy.sparse as sp

    S = sp.coo_array((np.array([1.0, 2.0, 4.0]), (np.array([0, 0, 1]), np.array([1, 1, 2]))), shape=(2, 3))
    A = Tensor.from_package(S)                      # COO with a repeated coordinate
    assert A[0, 1] == 3.0 and A[0].to_dense().tolist() == [0.0, 3.0, 0.0]
    A[0, 1] = 5.0
    assert A[0, 1] == 5.0 and A.to_dense()[0, 1] == 5.0
    A[:, 1] = np.array([6.0, 7.0])
    np.testing.assert_array_equal(A.to_dense(), [[0, 6, 0], [0, 7, 4]])


def test_setitem_value_shapes_and_types():
    A = sparse(F.CSR, (4, 5), seed=8)
    with pytest.raises(ustc.ShapeError):
        A[0:2, 0:2] = np.ones(3)
    with pytest.raises(ustc.ShapeError):
        A[0, 0] = np.ones(2)
    with pytest.raises(ustc.UnsupportedOperation, match="complex"):
        A[0, 0] = 1 + 2j
    B = sparse(F.CSR, (2, 2), seed=9)
    A[1:3, 2:4] = B                                  # a sparse value: its dense contents
    np.testing.assert_array_equal(A.to_dense()[1:3, 2:4], B.to_dense())
    D = Tensor.from_dense(np.zeros((2, 3)))          # all-dense: NumPy's assignment into the values
    D[1] = [1.0, 2.0, 3.0]
    assert D.values.tolist() == [0, 0, 0, 1, 2, 3]


# --------------------------------------------------------------------------- properties


@st.composite
def index_keys(draw, shape):
    """A random NumPy index expression for ``shape`` (sometimes out of range or malformed)."""
    items: list = []
    for n in shape:
        kind = draw(st.sampled_from(["int", "slice", "slice", "full", "array", "mask"]))
        if kind == "int":
            items.append(draw(st.integers(-n - 1, n)) if draw(st.integers(0, 9)) == 0
                         else draw(st.integers(-n, n - 1)) if n else 0)
        elif kind == "slice":
            bound = st.none() | st.integers(-n - 2, n + 2)
            items.append(slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, 3, -1, -2]))))
        elif kind == "full":
            items.append(slice(None))
        elif kind == "array":
            items.append(np.array(draw(st.lists(st.integers(-n, n - 1), max_size=4)) if n else [], dtype=np.int64))
        else:
            items.append(np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool))
    cut = draw(st.integers(0, len(items)))
    if draw(st.booleans()):
        items = items[:cut]                        # trailing dimensions implicit
    elif draw(st.booleans()) and cut < len(items):
        items = items[:cut] + [Ellipsis]
    if draw(st.integers(0, 4)) == 0:
        items.insert(draw(st.integers(0, len(items))), None)
    return tuple(items)


REGISTRY = st.sampled_from(sorted(NAMED)).map(NAMED.__getitem__)


@st.composite
def tensors(draw, fmt):
    shape = tuple(draw(st.lists(st.integers(0, 6), min_size=fmt.ndim, max_size=fmt.ndim)))
    dtype = draw(st.sampled_from([np.float64, np.int64, np.complex128, np.float32]))
    x = rand_dense(shape, dtype, density=draw(st.sampled_from([0.0, 0.3, 0.8])),
                   seed=draw(st.integers(0, 2 ** 32 - 1)))
    x = structured_fit(x, fmt)
    assume(representable(x, fmt))
    try:
        return Tensor.from_dense(x, fmt)
    except ustc.StorageError:
        assume(False)


@settings(max_examples=examples(300), deadline=None)
@given(st.data())
def test_property_getitem_registry(data):
    A = data.draw(tensors(data.draw(REGISTRY)))
    before = snapshot(A)
    check(A, data.draw(index_keys(A.shape)))
    assert_unchanged([A], before)


@settings(max_examples=examples(150), deadline=None)
@given(st.data())
def test_property_getitem_random_formats(data):
    A = data.draw(tensors(data.draw(formats(max_rank=3))))
    check(A, data.draw(index_keys(A.shape)))


@settings(max_examples=examples(200), deadline=None)
@given(st.data())
def test_property_setitem(data):
    """``A[key] = v`` equals NumPy's assignment, or is refused (the tensor untouched) by a
    format that cannot grow by single entries."""
    A = data.draw(tensors(data.draw(REGISTRY)))
    key = data.draw(index_keys(A.shape))
    value = data.draw(st.sampled_from([0, 1, -3]))
    a = A.to_dense().copy()
    try:
        a[key] = value
    except IndexError:
        with pytest.raises(IndexError):
            A[key] = value
        return
    before = snapshot(A)
    try:
        A[key] = value
    except ustc.UnsupportedOperation:
        assert not indexing.can_grow(A.format)
        assert_unchanged([A], before)
        return
    np.testing.assert_array_equal(A.to_dense(), a)
