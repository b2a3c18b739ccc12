"""SciPy-style methods, ufuncs, comparisons and broadcasting (``ustc.ops.methods``,
``ustc.ops.ufuncs``, ``ustc.ops.elementwise``) on every registry format, against SciPy and
NumPy oracles computed from the tensor's dense contents. Non-mutating methods leave their
input untouched (``snapshot`` / ``assert_unchanged``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from op_helpers import (NAMED, NAMED_2D, SHAPE_IDS, SHAPES_2D, assert_matches, assert_unchanged,
                        named_params, rotated_dtypes, seed_of, snapshot, sparse, tolerance)
from ustc import Tensor
from ustc import formats as F
from ustc.tensor import indexing

FORMATS = named_params(NAMED_2D)


def _oracle(a: np.ndarray):
    return sp.csr_array(a)


def _close(got, want, dtype=None):
    got = got.to_dense() if isinstance(got, Tensor) else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, **tolerance(dtype or want.dtype))


# --------------------------------------------------------------------------- counts and reductions


@pytest.mark.parametrize("shape", SHAPES_2D, ids=SHAPE_IDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_counts_and_reductions(fmt, shape):
    A = sparse(fmt, shape, seed=seed_of("reduce", str(fmt), shape))
    before = snapshot(A)
    a = A.to_dense()
    S = _oracle(a)
    assert A.nnz == len(A.entries()[1])
    assert A.count_nonzero() == S.count_nonzero() == np.count_nonzero(a)
    for axis in (0, 1, -1):
        np.testing.assert_array_equal(A.count_nonzero(axis=axis), np.count_nonzero(a, axis=axis))
    assert len(A) == shape[0]
    for axis in (None, 0, 1):
        for name in ("max", "min"):
            if a.size == 0 and (axis is None or a.shape[axis] == 0):
                with pytest.raises(ValueError):
                    getattr(A, name)(axis=axis)
                continue
            want = getattr(S, name)(axis=axis)
            want = want.toarray() if hasattr(want, "toarray") else want
            _close(getattr(A, name)(axis=axis), np.asarray(want).reshape(np.shape(getattr(a, name)(axis=axis))))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            want = a.mean(axis=axis)
        _close(A.mean(axis=axis), want)
    assert_unchanged([A], before)


def test_nnz_matches_scipy_where_scipy_has_the_format():
    """SciPy's own nnz (explicit zeros included, DIA and BSR counting what lies in the matrix)."""
    rng = np.random.default_rng(0)
    a = np.where(rng.random((6, 8)) < 0.3, rng.standard_normal((6, 8)), 0)
    a[2, 3] = 0
    for S in (sp.csr_array(a), sp.csc_array(a), sp.coo_array(a), sp.bsr_array(a, blocksize=(2, 2)),
              sp.dia_array(a)):
        A = Tensor.from_package(S)
        assert A.nnz == S.nnz, type(S).__name__
    S = sp.csr_array(a)
    S.data[:2] = 0                                  # explicit zeros count, as in SciPy
    A = Tensor.from_package(S)
    assert A.nnz == S.nnz and A.count_nonzero() == S.count_nonzero()


@pytest.mark.parametrize("fmt, dtype", rotated_dtypes(offset=0))
def test_reductions_dtypes(fmt, dtype):
    """float64 and one other dtype per family, rotated (each dtype on two or three families;
    test_value_maps_dtypes takes another rotation)."""
    for dtype in (np.float64, dtype):
        A = sparse(fmt, (5, 6), dtype=dtype, seed=seed_of("reduce-dtype", str(fmt), str(np.dtype(dtype))))
        a = A.to_dense()
        for axis in (None, 0, 1):
            _close(A.mean(axis=axis), a.mean(axis=axis), dtype)
            assert np.asarray(A.mean(axis=axis)).dtype == a.mean(axis=axis).dtype
            if dtype != np.complex128:
                _close(A.max(axis=axis), a.max(axis=axis), dtype)
                _close(A.min(axis=axis), a.min(axis=axis), dtype)


def test_reductions_of_3d_tensors_and_numpy_entry_points():
    A = sparse(F.CSF(3), (3, 4, 5), seed=1)
    a = A.to_dense()
    for axis in (None, 0, 2, (0, 2)):
        _close(A.max(axis=axis), a.max(axis=axis))
        _close(A.min(axis=axis), a.min(axis=axis))
        _close(A.mean(axis=axis), a.mean(axis=axis))
        _close(A.count_nonzero(axis=axis), np.count_nonzero(a, axis=axis))
    _close(np.max(A), a.max())                       # np.max calls A.max(axis=None, out=None)
    _close(np.maximum.reduce(A, axis=1), a.max(axis=1))
    _close(np.add.reduce(A, axis=0), a.sum(axis=0))


def test_duplicates_are_summed_before_reducing():
    S = sp.coo_array((np.array([-5.0, 2.0, 3.0]), (np.array([0, 0, 1]), np.array([1, 1, 0]))), shape=(2, 2))
    A = Tensor.from_package(S)
    a = S.toarray()
    assert A.nnz == 3 and A.count_nonzero() == 2
    _close(A.min(axis=1), a.min(axis=1))
    _close(A.max(), a.max())
    _close(A.diagonal(1), np.diagonal(a, 1))


# --------------------------------------------------------------------------- diagonals


@pytest.mark.parametrize("shape", SHAPES_2D, ids=SHAPE_IDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_diagonal(fmt, shape):
    A = sparse(fmt, shape, seed=seed_of("diag", str(fmt), shape))
    a = A.to_dense()
    S = _oracle(a)
    for k in range(-shape[0] - 1, shape[1] + 2):
        _close(A.diagonal(k), S.diagonal(k) if -shape[0] < k < shape[1] else np.diagonal(a, k))


@pytest.mark.parametrize("fmt", FORMATS)
def test_setdiag(fmt):
    """``setdiag`` as SciPy's: a scalar fills the diagonal, an array its first entries. Formats
    that cannot grow by entries refuse new nonzeros (DIA takes a whole diagonal)."""
    for k, values in [(0, 2.5), (1, np.array([1.0, 2.0])), (-2, np.arange(1.0, 9.0)), (3, 0.0)]:
        A = sparse(fmt, (5, 6), seed=seed_of("setdiag", str(fmt), k))
        S = _oracle(A.to_dense()).tolil()
        S.setdiag(values, k)
        before = snapshot(A)
        try:
            A.setdiag(values, k)
        except ustc.UnsupportedOperation:
            assert not indexing.can_grow(fmt) and not indexing.grows_by_diagonals(fmt)
            assert_unchanged([A], before)
            continue
        A.validate()
        _close(A, S.toarray())
    with pytest.raises(ustc.ShapeError):
        sparse(fmt, (5, 6), seed=1).setdiag(1.0, 6)


def test_setdiag_adds_a_whole_diagonal_to_dia():
    A = Tensor.from_dense(np.eye(4), "DIAI")
    A.setdiag([5.0, 6.0, 7.0], 1)
    assert A.format == F.DIAI
    assert A.crd(0)[A.pos(0)[0]:A.pos(0)[1]].tolist() == [0, 1]
    _close(A, np.eye(4) + np.diag([5.0, 6.0, 7.0], 1))


# --------------------------------------------------------------------------- in-place cleanup


@pytest.mark.parametrize("fmt", FORMATS)
def test_eliminate_zeros(fmt):
    A = sparse(fmt, (6, 7), seed=seed_of("elim", str(fmt)), density=0.6)
    coords, values = A.entries()
    nz = np.flatnonzero(values != 0)
    for e in nz[::2]:                                    # make explicit zeros
        A[int(coords[0][e]), int(coords[1][e])] = 0.0
    a = A.to_dense().copy()
    A.eliminate_zeros()
    A.validate()
    assert A.format == fmt
    _close(A, a)
    if indexing.plain(fmt) and fmt.holds_any_pattern and fmt.is_unique and not any(
            lv.type.locate and k > 0 for k, lv in enumerate(fmt.levels)) and "delta" not in str(fmt):
        assert A.nnz == np.count_nonzero(a)                  # nothing the format must store is left


def test_eliminate_zeros_keeps_duplicates_and_sum_duplicates_sums_them():
    S = sp.coo_array((np.array([1.0, 0.0, 2.0, 3.0]), (np.array([0, 1, 0, 1]), np.array([1, 0, 1, 2]))),
                     shape=(2, 3))
    A = Tensor.from_package(S)
    A.eliminate_zeros()
    assert A.nnz == 3                                        # the zero went, both (0, 1) copies stayed
    _close(A, S.toarray())
    A.sum_duplicates()
    rows, cols = A.entries()[0]
    assert A.nnz == 2 and (rows * 3 + cols).tolist() == sorted(rows * 3 + cols)   # summed and sorted
    _close(A, S.toarray())
    B = sparse(F.CSR, (4, 4), seed=2)
    before = snapshot(B)
    B.sum_duplicates()                                       # canonical already: nothing changes
    assert_unchanged([B], before)


# --------------------------------------------------------------------------- element-wise maps


UNARY_ZERO_PRESERVING = [np.abs, np.negative, np.sqrt, np.sin, np.tanh, np.expm1, np.log1p, np.sign, np.floor,
                         np.ceil, np.rint, np.square, np.conj, np.trunc, np.arcsin, np.sinh, np.deg2rad,
                         np.isnan, np.signbit]
UNARY_DENSE = [np.exp, np.cos, np.cosh, np.log, np.reciprocal, np.isfinite, np.logical_not, np.arccos]


@pytest.mark.parametrize("fmt", FORMATS)
def test_unary_ufuncs(fmt):
    A = sparse(fmt, (5, 6), seed=seed_of("unary", str(fmt)))
    before = snapshot(A)
    a = A.to_dense()
    with np.errstate(all="ignore"):
        for f in UNARY_ZERO_PRESERVING:
            got = f(A)
            assert isinstance(got, Tensor) and got.format == A.format, f
            np.testing.assert_allclose(got.to_dense(), f(a), equal_nan=True, err_msg=f.__name__)
        for f in UNARY_DENSE:
            with pytest.raises(ustc.UnsupportedOperation, match="not zero-preserving"):
                f(A)
    _close(abs(A), np.abs(a))
    _close(A.abs(), np.abs(a))
    assert_unchanged([A], before)


@pytest.mark.parametrize("fmt, dtype", rotated_dtypes(offset=1))
def test_value_maps_dtypes(fmt, dtype):
    """Each family with float64 and one other dtype (test_reductions_dtypes rotates the other way)."""
    for dtype in (np.float64, dtype):
        _check_value_maps(fmt, dtype)


def _check_value_maps(fmt, dtype):
    A = sparse(fmt, (5, 6), dtype=dtype, seed=seed_of("maps", str(fmt), str(np.dtype(dtype))))
    before = snapshot(A)
    a = A.to_dense()
    for got, want in [(abs(A), np.abs(a)), (A.conj(), np.conj(a)), (A.conjugate(), np.conj(a)),
                      (A.real, np.real(a)), (A.imag, np.imag(a)), (A.power(2), a ** 2), (A ** 3, a ** 3),
                      (A / 2, a / 2), (A.astype(np.complex64), a.astype(np.complex64)),
                      (np.square(A), np.square(a)), (A * 3, a * 3)]:
        assert isinstance(got, Tensor)
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        assert got.format == A.format
        _close(got, want)
    if dtype != np.complex128:
        _close(A.astype(np.int64), a.astype(np.int64))
        _close(np.maximum(A, 0), np.maximum(a, 0))
        _close(np.minimum(A, 0), np.minimum(a, 0))
    assert A.astype(A.dtype, copy=False) is A
    assert_unchanged([A], before)


def test_non_zero_preserving_operations_are_refused():
    A = sparse(F.CSR, (4, 5), seed=3)
    for op in (lambda: A ** 0, lambda: A ** -1, lambda: A / 0, lambda: 1 / A, lambda: 2 ** A,
               lambda: np.power(A, 0.0), lambda: np.add(A, 1) if False else np.exp(A),
               lambda: np.maximum(A, 1)):
        with pytest.raises(ustc.UnsupportedOperation, match="to_dense"):
            op()
    with pytest.raises(ustc.UnsupportedOperation, match="out="):
        np.abs(A, out=np.zeros((4, 5)))
    with pytest.raises(ustc.UnsupportedOperation, match="not converted to a NumPy array"):
        np.asarray(A)


# --------------------------------------------------------------------------- comparisons


@pytest.mark.parametrize("fmt", FORMATS)
def test_comparisons(fmt):
    A = sparse(fmt, (5, 6), seed=seed_of("cmp", str(fmt)))
    before = snapshot(A)
    a = A.to_dense()
    for got, want in [(A > 0, a > 0), (A < 0, a < 0), (A != 0, a != 0), (A > 0.5, a > 0.5), (A < -0.5, a < -0.5),
                      (A == 1.0, a == 1.0), (A >= 0.5, a >= 0.5), (A <= -1, a <= -1), (0 < A, 0 < a),
                      (np.greater(A, 0), a > 0), (A != A, a != a), (A > np.full(6, 0.25), a > 0.25),
                      (np.zeros(6) < A, a > 0)]:
        assert isinstance(got, np.ndarray if fmt.all_dense else Tensor) and got.dtype == np.bool_
        np.testing.assert_array_equal(got.to_dense() if isinstance(got, Tensor) else got, want)
    if fmt.all_dense:                                        # a dense operand: NumPy's comparisons
        np.testing.assert_array_equal(A >= 0, a >= 0)
        return
    for op, text in [(lambda: A >= 0, ">="), (lambda: A <= 0, "<="), (lambda: A == 0, "=="),
                     (lambda: A > -1, ">"), (lambda: A < np.full(6, 1.0), "<")]:
        with pytest.raises(ustc.UnsupportedOperation, match="to_dense") as info:
            op()
        assert text in str(info.value)
    assert A == A and not (A == A.copy())                  # two tensors: identity (hashable keys)
    assert {A: 1}[A] == 1
    assert_unchanged([A], before)


def test_comparison_patterns_drop_false_entries_in_csr():
    A = sparse(F.CSR, (6, 6), seed=4)
    B = A > 0
    assert B.nnz == np.count_nonzero(A.to_dense() > 0)
    C = sparse(F.CSR, (6, 6), seed=5)
    D = A > C                                                # two sparse operands: the union's pattern
    np.testing.assert_array_equal(D.to_dense(), A.to_dense() > C.to_dense())


# --------------------------------------------------------------------------- conversions


@pytest.mark.parametrize("fmt", FORMATS)
def test_conversions(fmt):
    A = sparse(fmt, (5, 6), seed=seed_of("conv", str(fmt)))
    before = snapshot(A)
    a = A.to_dense()
    for method, target in [("tocsr", F.CSR), ("tocsc", F.CSC), ("tocoo", F.COO)]:
        got = getattr(A, method)()
        assert isinstance(got, Tensor) and got.format == target
        _close(got, a)
        assert getattr(got, method)() is got
        assert getattr(got, method)(copy=True) is not got
    arr = A.toarray()
    assert type(arr) is np.ndarray
    np.testing.assert_array_equal(arr, a)
    np.testing.assert_array_equal(A.todense(), a)
    assert_unchanged([A], before)


def test_scipy_style_conversions_share_as_scipy_does():
    """``tocoo()`` / ``tocsr()`` default to SciPy's ``copy=False``: a CSR's column coordinates and
    values are the COO's (and back); ``copy=True`` shares nothing."""
    A = sparse(F.CSR, (7, 5), seed=seed_of("share", "csr"))
    coo = A.tocoo()
    assert np.shares_memory(coo.values, A.values)
    back = coo.tocsr()
    assert np.shares_memory(back.values, A.values)
    _close(back, A.to_dense())
    for got in (A.tocoo(copy=True), coo.tocsr(copy=True)):
        assert not any(np.shares_memory(b, x) for b in got.buffers.values() for x in A.buffers.values())
        assert not np.shares_memory(got.values, A.values)


def test_3d_conversions_and_len():
    A = sparse(F.CSF(3), (2, 3, 4), seed=6)
    assert A.tocoo().format == F.COO(3) and len(A) == 2
    with pytest.raises(ustc.ShapeError):
        A.tocsr()


# --------------------------------------------------------------------------- broadcasting and SciPy operands


# Broadcast operands other than a row: each is a kernel per format, so they rotate over the
# registry (format k runs group k % 3): every group runs on five or six formats of several
# families, every format runs a row broadcast (its format kept) and one group.
BROADCAST_GROUPS = (
    lambda A, a, row, col, full: [(A * col, a * col), (col + A, col + a), (A * row[None, :], a * row),
                                  (A * sparse(F.CSR, (1, 6), seed=8), a * sparse(F.CSR, (1, 6), seed=8).to_dense())],
    lambda A, a, row, col, full: [(A * full, a * full), (A - row, a - row), (A * np.float64(2.0), a * 2)],
    lambda A, a, row, col, full: [(row * A, row * a), (A / row, a / row)],
)


@pytest.mark.parametrize("k", range(len(NAMED_2D)), ids=list(NAMED_2D))
def test_broadcasting(k):
    fmt = list(NAMED_2D.values())[k]
    A = sparse(fmt, (5, 6), seed=seed_of("bcast", str(fmt)))
    before = snapshot(A)
    a = A.to_dense()
    rng = np.random.default_rng(7)
    row, col, full = rng.standard_normal(6), rng.standard_normal((5, 1)), rng.standard_normal((5, 6))
    dense_result = A.format.all_dense
    for got, want in [(A * row, a * row)] + BROADCAST_GROUPS[k % len(BROADCAST_GROUPS)](A, a, row, col, full):
        if not dense_result and not isinstance(got, np.ndarray):
            assert isinstance(got, Tensor)
        _close(got, want)
    if not dense_result:
        assert (A * row).format == A.format
    _close(sparse(F.CSR, (5, 1), seed=9) * row, sparse(F.CSR, (5, 1), seed=9).to_dense() * row)
    with pytest.raises(ustc.ShapeError):
        A * np.ones(5)
    assert_unchanged([A], before)


def test_scipy_operands():
    A = sparse(F.CSR, (4, 5), seed=10)
    a = A.to_dense()
    for S in (sp.csr_array(np.eye(4, 5)), sp.coo_matrix(np.eye(4, 5) * 3), sp.dia_array(np.eye(4, 5))):
        s = S.toarray()
        for got, want in [(A + S, a + s), (A - S, a - s), (A * S, a * s), (S + A, s + a)]:
            assert isinstance(got, Tensor)
            _close(got, want)
    _close(np.maximum(A, sp.csr_array(np.eye(4, 5))), np.maximum(a, np.eye(4, 5)))


def test_arrays_doc_examples():
    """docs/arrays.md is executable: every example prints what it shows."""
    import doctest
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "docs" / "arrays.md"
    result = doctest.testfile(str(path), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 20 and result.failed == 0
