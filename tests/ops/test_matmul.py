"""SpMV, SpMM and sparse @ sparse against NumPy, for every named 2-D format of the registry.

Shapes include empty (0 x n, n x 0), one row, one column and non-square matrices;
every format also gets an all-zero operand.
"""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from op_helpers import (FAMILIES_2D, NAMED_2D, SHAPE_IDS, SHAPES_2D, assert_matches, assert_unchanged, named_params,
                        rand_values, seed_of, snapshot, sparse, subset_2d)
from ustc import Tensor

FORMATS = named_params(NAMED_2D)
FAMILIES = subset_2d(*FAMILIES_2D)
NAMES = list(NAMED_2D)


@ustc.jit
def spmv(y, A, x):
    y[i] += A[i, j] * x[j]


@pytest.mark.parametrize("shape", SHAPES_2D, ids=SHAPE_IDS)
@pytest.mark.parametrize("fmt", FAMILIES)
def test_spmv_jit(fmt, shape):
    seed = seed_of("spmv", fmt, shape)
    A = sparse(fmt, shape, seed=seed)
    x = rand_values(shape[1], rng=np.random.default_rng(seed))
    y0 = rand_values(shape[0], rng=np.random.default_rng(seed + 1))
    before = snapshot(A, x)
    y = y0.copy()
    result = spmv(y, A, x)
    assert result is y
    assert_matches(y, y0 + A.to_dense() @ x)
    assert_unchanged([A, x], before)


@pytest.mark.parametrize("shape", SHAPES_2D, ids=SHAPE_IDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_spmv_and_spmm(fmt, shape):
    seed = seed_of("matmul", fmt, shape)
    rng = np.random.default_rng(seed)
    A = sparse(fmt, shape, seed=seed)
    x, B = rand_values(shape[1], rng=rng), rand_values((shape[1], 3), rng=rng)
    before = snapshot(A, x, B)
    dense = A.to_dense()
    assert_matches(ustc.matmul(A, x), dense @ x)   # SpMV
    assert_matches(A @ B, dense @ B)               # SpMM
    assert_unchanged([A, x, B], before)


@pytest.mark.parametrize("shape", SHAPES_2D, ids=SHAPE_IDS)
@pytest.mark.parametrize("fmt", FAMILIES)
def test_vector_times_sparse(fmt, shape):
    seed = seed_of("vecmat", fmt, shape)
    A = sparse(fmt, shape, seed=seed)
    z = rand_values(shape[0], rng=np.random.default_rng(seed))
    assert_matches(z @ A, z @ A.to_dense())        # ndarray on the left defers to Tensor.__rmatmul__


@pytest.mark.parametrize("fmt", FORMATS)
def test_matmul_all_zero_operand(fmt):
    A = sparse(fmt, (6, 4), zero=True)
    x = rand_values(4)
    assert A.nse == 0 or not A.values.any()
    assert_matches(ustc.matmul(A, x), np.zeros(6))
    assert_matches(A @ np.ones((4, 2)), np.zeros((6, 2)))


@pytest.mark.parametrize("fmt", FAMILIES)
def test_matmul_alpha_beta_c(fmt):
    seed = seed_of("axpby", fmt)
    rng = np.random.default_rng(seed)
    A = sparse(fmt, (5, 7), seed=seed)
    B, C = rand_values((7, 2), rng=rng), rand_values((5, 2), rng=rng)
    c_before = C.copy()
    got = ustc.matmul(A, B, C, alpha=2.5, beta=-0.5)
    assert got is C                             # c is updated in place (nvmath's semantics)
    assert_matches(C, 2.5 * (A.to_dense() @ B) - 0.5 * c_before)


@pytest.mark.parametrize("fmt", FAMILIES)
def test_matmul_out_is_overwritten(fmt):
    A = sparse(fmt, (5, 7), seed=seed_of("out", fmt))
    x = rand_values(7)
    out = np.full(5, 99.0)
    got = ustc.matmul(A, x, out=out)
    assert_matches(out, A.to_dense() @ x)
    assert got is out or np.shares_memory(got, out)


@pytest.mark.parametrize("k", range(len(NAMES)), ids=NAMES)
def test_sparse_times_sparse_mixed_formats(k):
    """a @ b with b in the next registry format: a Tensor in a's format (CSR when a's is n:m)."""
    fa, fb = NAMED_2D[NAMES[k]], NAMED_2D[NAMES[(k + 1) % len(NAMES)]]
    seed = seed_of("spgemm", k)
    A, B = sparse(fa, (5, 6), seed=seed), sparse(fb, (6, 4), seed=seed + 1)
    before = snapshot(A, B)
    C = A @ B
    if fa.all_dense or fb.all_dense:                # an all-dense Tensor is a dense operand
        assert isinstance(C, np.ndarray), type(C)
    else:
        assert isinstance(C, Tensor)
        assert C.format == (fa if fa.holds_any_pattern else ustc.formats.CSR)  # n:m cannot hold a product
        C.validate()
    assert_matches(C, A.to_dense() @ B.to_dense())
    assert_unchanged([A, B], before)


@pytest.mark.parametrize("fa, fb", [("CSR", "CSR"), ("CSR", "CSC"), ("COO", "DCSR")])
@pytest.mark.parametrize("shapes", [((0, 4), (4, 3)), ((3, 0), (0, 5)), ((1, 5), (5, 1)), ((4, 4), (4, 4))],
                         ids=["0x4@4x3", "3x0@0x5", "1x5@5x1", "4x4@4x4"])
def test_sparse_times_sparse_shapes(fa, fb, shapes):
    A = sparse(NAMED_2D[fa], shapes[0], seed=seed_of(fa, shapes))
    B = sparse(NAMED_2D[fb], shapes[1], seed=seed_of(fb, shapes))
    assert_matches(A @ B, A.to_dense() @ B.to_dense())


def test_matmul_shape_mismatch_raises():
    A = sparse(NAMED_2D["CSR"], (3, 4))
    with pytest.raises(ustc.ShapeError, match="columns"):
        ustc.matmul(A, np.ones(5))
    with pytest.raises(ustc.ShapeError):
        A @ sparse(NAMED_2D["CSR"], (3, 4))
    with pytest.raises(ustc.ShapeError, match="out"):
        ustc.matmul(A, np.ones(4), out=np.zeros(4))
    with pytest.raises(ustc.ShapeError):
        ustc.matmul(A, np.ones((4, 2)), np.ones((2, 2)), beta=1.0)


def test_matmul_batched_three_dimensional_operand():
    T = sparse(ustc.formats.CSF(3), (2, 3, 4), seed=3)
    x = rand_values(4)
    assert_matches(ustc.matmul(T, x), np.matmul(T.to_dense(), x))
    with pytest.raises(ustc.ShapeError):
        ustc.matmul(T, np.ones(5))


def test_spmv_extent_mismatch_raises_shape_error():
    A = sparse(NAMED_2D["CSR"], (3, 4))
    with pytest.raises(ustc.ShapeError, match="index 'j'"):
        spmv(np.zeros(3), A, np.ones(5))
