"""``Tensor.from_coo`` into CSR-family and COO formats (the counting-sort fast path) equals the
generic assembly buffer for buffer, dtypes included; and the counting sort behind the generic
assembly orders entries as NumPy's stable argsort does."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ustc
from ustc import formats
from ustc.tensor import fastpaths, sort
from ustc.tensor.tensor import Tensor, as_format


def _fast_formats() -> list:
    """Registry formats the fast path takes (2-D, CSR family or canonical COO)."""
    out = []
    for nf in formats.NAMED:
        fmt = nf.format()
        fam = fastpaths.family(fmt) if fmt.ndim == 2 else None
        if fam is not None and (fam.kind == "csr" or fastpaths.coo_like(fmt)):
            out.append(pytest.param(fmt, id=nf.name))
    return out


FAST = _fast_formats()


def _generic(fmt, shape, coords, values) -> Tensor:
    return Tensor._assembled(as_format(fmt), shape, coords, values, "numpy")


def _same(t: Tensor, g: Tensor) -> None:
    assert t.format == g.format and t.shape == g.shape and t.nse == g.nse
    assert set(t.buffers) == set(g.buffers)
    for key, buf in g.buffers.items():
        assert t.buffers[key].dtype == buf.dtype, key
        np.testing.assert_array_equal(t.buffers[key], buf, err_msg=str(key))
    np.testing.assert_array_equal(t.values[:t.nse], g.values[:g.nse])
    assert t.values.dtype == g.values.dtype


def test_the_registry_has_fast_formats():
    names = {p.id for p in FAST}
    assert {"CSR", "CSC", "COO"} <= names


@pytest.mark.parametrize("fmt", FAST)
@pytest.mark.parametrize("shape,nnz", [((40, 30), 2000), ((1, 50), 300), ((50, 1), 300), ((0, 4), 0),
                                       ((4, 0), 0), ((200, 3), 40), ((6, 6), 36)], ids=str)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.complex128])
def test_fast_path_equals_generic(fmt, shape, nnz, dtype):
    rng = np.random.default_rng(hash((str(fmt), shape, nnz)) % 2**32)
    coords = (rng.integers(0, max(shape[0], 1), nnz).astype(np.int32), rng.integers(0, max(shape[1], 1), nnz))
    values = rng.integers(-2, 3, nnz).astype(dtype)          # duplicates, zeros and cancelling sums
    if 0 in shape:
        coords, values = (coords[0][:0], coords[1][:0]), values[:0]
    t = Tensor.from_coo(coords, values, shape, fmt)
    _same(t, _generic(fmt, shape, coords, values))
    want = np.zeros(shape, dtype=dtype)
    np.add.at(want, coords, values)
    np.testing.assert_array_equal(t.to_dense(), want)
    t.validate()


@pytest.mark.parametrize("fmt", FAST)
def test_fast_path_leaves_inputs_alone_and_checks_ranges(fmt):
    rows, cols, vals = np.array([2, 0, 2]), np.array([1, 1, 1]), np.array([1.0, 2.0, 3.0])
    before = rows.copy(), cols.copy(), vals.copy()
    t = Tensor.from_coo((rows, cols), vals, (3, 2), fmt)
    np.testing.assert_array_equal(t.to_dense(), [[0, 2], [0, 0], [0, 4]])
    for a, b in zip((rows, cols, vals), before):
        np.testing.assert_array_equal(a, b)
    for bad in ((np.array([0, 3]), np.array([0, 0])), (np.array([0, 0]), np.array([0, -1]))):
        with pytest.raises(ustc.StorageError, match="outside dimension"):
            Tensor.from_coo(bad, np.ones(2), (3, 2), fmt)


@pytest.mark.parametrize("widths", [(np.int32, np.int64), (np.uint16, np.int8), (np.uint64, np.int32)], ids=str)
def test_coordinates_of_two_widths_take_one(widths):
    """Mixed coordinate dtypes reach coo_bucket both as contiguous int64 (one signature per
    width, not per pair); a uint64 coordinate past int64's range is still out of range."""
    rows, cols = np.array([2, 0, 2, 1], dtype=widths[0]), np.array([1, 1, 1, 0], dtype=widths[1])
    before = rows.copy(), cols.copy()
    major, minor = fastpaths.one_width(rows[::2], cols[::2])
    assert major.dtype == minor.dtype == np.int64 and major.flags.c_contiguous and minor.flags.c_contiguous
    t = Tensor.from_coo((rows, cols), np.arange(1.0, 5.0), (3, 2), formats.CSR)
    np.testing.assert_array_equal(t.to_dense(), [[0, 2], [4, 0], [0, 4]])
    np.testing.assert_array_equal(rows, before[0])
    np.testing.assert_array_equal(cols, before[1])
    same = np.array([0, 1], dtype=widths[0])
    assert all(a is same for a in fastpaths.one_width(same, same))
    if widths[0] == np.uint64:
        with pytest.raises(ustc.StorageError, match="outside dimension"):
            Tensor.from_coo((np.array([0, 2**63 + 1], dtype=np.uint64), np.array([0, 0], dtype=np.int32)),
                            np.ones(2), (3, 2), formats.CSR)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 60), st.integers(1, 60), st.integers(0, 400), st.integers(0, 2**32 - 1))
def test_counting_sort_matches_argsort(n_major, n_minor, n, seed):
    rng = np.random.default_rng(seed)
    major, minor = rng.integers(0, n_major, n), rng.integers(0, n_minor, n)
    from ustc.tensor import kernels

    order = kernels.lexicographic_order(major, minor, n_major)
    np.testing.assert_array_equal(order, np.argsort(major * n_minor + minor, kind="stable"))


def test_generic_sort_takes_the_counting_sort_for_many_entries(monkeypatch):
    rng = np.random.default_rng(3)
    n = sort.BUCKET_MIN + 1000
    coords = [rng.integers(0, 50, n), rng.integers(0, 40, n), rng.integers(0, 30, n)]
    values = rng.standard_normal(n)
    got_coords, got_values = sort.sort_entries(coords, values, (0, 0, 0), (50, 40, 30))
    monkeypatch.setattr(sort, "BUCKET_MIN", 1 << 62)
    want_coords, want_values = sort.sort_entries(coords, values, (0, 0, 0), (50, 40, 30))
    for a, b in zip(got_coords, want_coords):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got_values, want_values)
