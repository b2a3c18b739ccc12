"""Tensor operators ``A + B``, ``A - B``, ``A * B``, unary minus and scalar/dense operands.

Sparse-sparse operations pair every named 2-D format with the next one of the registry
(mixed formats) and with itself; results are checked against NumPy and for their format:
a union keeps ``A``'s format when every pattern fits it (else ``B``'s, else CSR), an
intersection and a product with a dense array or a scalar keep ``A``'s format, and a sum
with a dense array or a nonzero scalar is dense.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ustc
from op_helpers import (NAMED_2D, NAMED_3D, SHAPE_IDS, SHAPES_2D, assert_matches, assert_unchanged,
                        named_params, rand_values, rotated_dtypes, seed_of, snapshot, sparse, subset_2d)
from ustc import Tensor
from ustc import formats as F
from ustc.ops.elementwise import union_format

FORMATS = named_params(NAMED_2D)
NAMES = list(NAMED_2D)
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def _check_sparse_result(C, expected_format, expected):
    if expected_format.all_dense:       # an all-dense Tensor is a dense operand: the result is an array
        assert isinstance(C, np.ndarray), type(C)
        np.testing.assert_allclose(C, expected, rtol=1e-12, atol=1e-12)
        return
    assert isinstance(C, Tensor), type(C)
    assert C.format == expected_format
    C.validate()
    assert_matches(C, expected)


CASES = [(shape, None) for shape in SHAPES_2D] + [((6, 4), "A"), ((6, 4), "B")]
CASE_IDS = SHAPE_IDS + ["zero-A", "zero-B"]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("k", range(len(NAMES)), ids=NAMES)
def test_add_and_mul_mixed_formats(k, case):
    """A (format k) + B and A * B with B in format k + 1 of the registry; one operand all-zero
    in the ``zero-*`` cases."""
    fa, fb = NAMED_2D[NAMES[k]], NAMED_2D[NAMES[(k + 1) % len(NAMES)]]
    shape, zero = case
    seed = seed_of("mixed", k, case)
    A, B = sparse(fa, shape, seed=seed, zero=zero == "A"), sparse(fb, shape, seed=seed + 1, zero=zero == "B")
    before = snapshot(A, B)
    a, b = A.to_dense(), B.to_dense()
    dense = fa.all_dense or fb.all_dense            # sparse + dense is dense; sparse * dense is sparse
    _check_sparse_result(A + B, (fa if fa.all_dense else fb) if dense else union_format(fa, fb), a + b)
    _check_sparse_result(A * B, fa if not fa.all_dense else fb, a * b)
    assert_unchanged([A, B], before)


@pytest.mark.parametrize("shape", SHAPES_2D, ids=SHAPE_IDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_sparse_times_dense(fmt, shape):
    seed = seed_of("sxd", fmt, shape)
    A = sparse(fmt, shape, seed=seed)
    X = rand_values(shape, rng=np.random.default_rng(seed))
    before = snapshot(A, X)
    _check_sparse_result(A * X, fmt, A.to_dense() * X)
    assert_unchanged([A, X], before)


@pytest.mark.parametrize("fmt", subset_2d("CSR", "BSR"))
def test_dense_and_scalar_operands(fmt):
    A = sparse(fmt, (5, 7), seed=seed_of("scalar", fmt))
    X = rand_values((5, 7), rng=np.random.default_rng(1))
    a = A.to_dense()
    _check_sparse_result(2.5 * A, fmt, 2.5 * a)
    _check_sparse_result(X * A, fmt, X * a)             # ndarray on the left defers to Tensor.__rmul__
    _check_sparse_result(-A, fmt, -a)
    for got, want in [(A + X, a + X), (X - A, X - a), (A - 1.5, a - 1.5), (3 - A, 3 - a)]:
        assert isinstance(got, np.ndarray)
        assert_matches(got, want)


@pytest.mark.parametrize("fmt", subset_2d("CSR", "BSR"))
def test_add_zero_scalar_is_a_copy(fmt):
    A = sparse(fmt, (4, 6), seed=seed_of("zero", fmt))
    for got in (A + 0, 0 + A):
        assert isinstance(got, Tensor) and got is not A and got.format == fmt
        assert_matches(got, A.to_dense())
    _check_sparse_result(0 - A, fmt, -A.to_dense())


@pytest.mark.parametrize("fmt", named_params(NAMED_3D))
def test_three_dimensional_operators(fmt):
    seed = seed_of("3d", fmt)
    A, B = sparse(fmt, (3, 4, 5), seed=seed), sparse(F.CSF(3), (3, 4, 5), seed=seed + 1)
    a, b = A.to_dense(), B.to_dense()
    _check_sparse_result(A + B, union_format(fmt, F.CSF(3)), a + b)
    _check_sparse_result(A * B, fmt, a * b)


@pytest.mark.parametrize("pair", [("DIAI", "DIAJ"), ("SkewDIAI", "SkewDIAJ")], ids=["DIAI+DIAJ", "SkewDIAI+SkewDIAJ"])
def test_diagonal_formats_deriving_each_others_index(pair, fresh_cache):
    """Regression: DIAI derives j from (j - i, i) while DIAJ derives i from (j - i, j), so no
    loop variable was left to start from (networkx NodeNotFound); the planner now converts
    the second operand to the first one's levels."""
    fa, fb = (NAMED_2D[n] for n in pair)
    A, B = sparse(fa, (5, 7), seed=1), sparse(fb, (5, 7), seed=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ustc.ConversionWarning)
        C = A + B
    _check_sparse_result(C, fa, A.to_dense() + B.to_dense())
    assert any("derived" in str(w.message) for w in caught if issubclass(w.category, ustc.ConversionWarning))


@pytest.mark.parametrize("fmt, dtype", rotated_dtypes(offset=2))
def test_add_other_dtypes(fmt, dtype):
    """One dtype per family against a CSR operand; test_elementwise_plans.py::test_dtypes_and_edge_shapes
    runs each family with another one (same-format pairs), so each family sees two of the three."""
    seed = seed_of("dtype", fmt, dtype)
    A, B = sparse(fmt, (5, 7), dtype, seed=seed), sparse(F.CSR, (5, 7), dtype, seed=seed + 1)
    C = A + B
    assert C.dtype == np.dtype(dtype)
    assert_matches(C, A.to_dense() + B.to_dense(), dtype)


@pytest.mark.parametrize("dtype", [np.int64, np.complex128], ids=str)
@pytest.mark.parametrize("fmt", subset_2d("CSR", "DIAI"))
def test_mul_other_dtypes(fmt, dtype):
    seed = seed_of("dtype*", fmt, dtype)
    A, B = sparse(fmt, (5, 7), dtype, seed=seed, density=0.7), sparse(fmt, (5, 7), dtype, seed=seed + 1, density=0.7)
    C = A * B
    assert C.dtype == np.dtype(dtype)
    assert_matches(C, A.to_dense() * B.to_dense(), dtype)


def test_mixed_dtypes_promote():
    A = sparse(F.CSR, (4, 5), np.float32, seed=5)
    B = sparse(F.CSR, (4, 5), np.float64, seed=6)
    C = A + B
    assert C.dtype == np.float64
    assert_matches(C, A.to_dense().astype(np.float64) + B.to_dense())


def test_shape_mismatch_raises():
    A = sparse(F.CSR, (3, 4), seed=1)
    with pytest.raises(ustc.ShapeError, match="no broadcasting"):
        A + sparse(F.CSR, (4, 3), seed=2)
    with pytest.raises(ustc.ShapeError):
        A * np.ones((3, 5))
    with pytest.raises(ustc.ShapeError):
        A - np.ones(5)                      # (3, 4) and (5,) do not broadcast; (4,) would


def test_unordered_block_format_with_plain_operand():
    """Regression: B was converted to A's block levels, A (unordered) then to plain levels, B
    back to A's ... until the planner gave up ('could not find a loop order'); an unordered
    format is no longer a conversion model."""
    fa = ustc.TensorFormat.parse("(d) -> (d floordiv 2 : compressed(nonunique, nonordered), d mod 2 : delta(1))")
    for fb in (F.CSF(1), ustc.TensorFormat.parse("(d) -> (d floordiv 1 : dense, d mod 1 : structured[1, 1])")):
        A, B = sparse(fa, (7,), seed=3), sparse(fb, (7,), seed=4)
        assert_matches(A + B, A.to_dense() + B.to_dense())
        assert_matches(A * B, A.to_dense() * B.to_dense())


def test_block_format_with_repeats_and_other_block_map():
    """Regression (found by the random formats): a block level with repeats above a dense level
    cannot be co-iterated, yet B was converted to A's levels, then A to plain levels, then A back
    to B's ... until 'could not find a loop order'; such a format is no longer a conversion model."""
    fa = ustc.TensorFormat.parse("(d) -> (d floordiv 2 : compressed(nonunique), d mod 2 : dense)")
    fb = ustc.TensorFormat.parse("(d) -> (d floordiv 1 : dense, d mod 1 : structured[1, 1])")
    for n in (7, 0):
        A, B = sparse(fa, (n,), seed=5), sparse(fb, (n,), seed=6)
        for a, b in ((A, B), (B, A)):
            assert_matches(a + b, a.to_dense() + b.to_dense())
            assert_matches(a * b, a.to_dense() * b.to_dense())


def test_cycle_with_unique_level_above_singleton():
    """Regression (found by the random formats): on a loop-order cycle B = (j : compressed,
    i : singleton) was converted to (i : compressed, j : singleton), which cannot hold two
    entries of one row (StorageError at execute); it now becomes CSF in the loop order."""
    fb = ustc.TensorFormat.parse("(i, j) -> (j : compressed, i : singleton)")
    fm = ustc.TensorFormat.parse("(i, j) -> (i : compressed(nonunique, nonordered), 1 * j : singleton)")
    x = np.zeros((2, 6))
    x[1, 0], x[1, 2], x[0, 3] = 1.0, 2.0, 3.0
    B = Tensor.from_dense(x, fb)
    for fa in (F.CSR, fm):
        A = sparse(fa, (2, 6), seed=7, density=0.5)
        for op, fn in OPS.items():
            assert_matches(fn(A, B), fn(A.to_dense(), x))


def test_diagonal_level_with_narrow_crd_width():
    """Narrow unsigned crd (crdWidth=8 -> uint8) mixed with int64 loop variables made Numba
    promote to float64 (a typing error) or wrap; index loads are now cast to a signed intp."""
    fmt = ustc.TensorFormat.parse("(i, j, k) -> (j - i : compressed, i : range, k : dense), crdWidth=8")
    A = Tensor.from_dense(np.array([[[0.0], [0.7]]]), fmt)
    assert_matches(A.sum(0), A.to_dense().sum(axis=0))
    fa = ustc.TensorFormat.parse("(a, b) -> (a : delta(3), b floordiv 1 : compressed(nonunique, nonordered), "
                                 "b mod 1 : dense), posWidth=8, crdWidth=8")
    B, X = Tensor.from_dense(np.array([[0.0, 0.7]]), fa), np.array([[1.0, -0.02]])
    for out in ("CSR", ustc.TensorFormat.parse("(a, b) -> (a : batch, b : compressed(nonunique))")):
        assert_matches(ustc.einsum("ab,ab->ab", B, X, out_format=out), B.to_dense() * X)


def test_union_dense_with_scaled_level():
    fb = ustc.TensorFormat.parse("(d) -> (2 * d : delta(6))")
    A, B = sparse(F.Dense(1), (5,), seed=1, density=1.0), sparse(fb, (5,), seed=2)
    assert_matches(A + B, A.to_dense() + B.to_dense())
