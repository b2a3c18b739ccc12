"""``t.sum(axis)`` over each axis and ``t.transpose`` (views and stored copies) against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ustc.codegen.optimize import TILE
from op_helpers import (FAMILIES_2D, NAMED_2D, NAMED_3D, SHAPE_IDS, SHAPES_2D, assert_matches, assert_unchanged,
                        named_params, rand_dense, seed_of, snapshot, sparse, structured_fit, subset_2d)
from ustc import Tensor
from ustc import formats as F

FORMATS = named_params(NAMED_2D)
FAMILIES = subset_2d(*FAMILIES_2D)


@pytest.mark.parametrize("shape", SHAPES_2D + [(6, 4)], ids=SHAPE_IDS + ["all-zero"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_sum_each_axis_2d(fmt, shape, request):
    zero = request.node.callspec.id.endswith("all-zero")
    A = sparse(fmt, shape, seed=seed_of("sum", fmt, shape), zero=zero)
    before = snapshot(A)
    a = A.to_dense()
    for axis in (0, 1, -1, None, (0, 1)):
        got = A.sum(axis)
        want = a.sum(axis=axis)
        assert np.shape(got) == np.shape(want), axis
        assert_matches(got, want)
    assert_unchanged([A], before)


@pytest.mark.parametrize("fmt", named_params(NAMED_3D) + [pytest.param(F.COO(3), id="COO(3)")])
def test_sum_each_axis_3d(fmt):
    A = sparse(fmt, (3, 4, 5), seed=seed_of("sum3", fmt))
    a = A.to_dense()
    for axis in (0, 1, 2, (0, 2), (1, 2), None):
        assert_matches(A.sum(axis), a.sum(axis=axis))


@pytest.mark.parametrize("dtype, result", [(np.int32, np.int64), (np.int64, np.int64), (np.float32, np.float32),
                                           (np.complex128, np.complex128)], ids=str)
@pytest.mark.parametrize("fmt", subset_2d("CSR", "BSR"))
def test_sum_dtypes(fmt, dtype, result):
    A = sparse(fmt, (5, 7), dtype, seed=seed_of("sumdt", fmt, dtype))
    got = A.sum(0)
    assert got.dtype == np.dtype(result)
    assert_matches(got, A.to_dense().sum(axis=0, dtype=result), dtype)


def test_sum_axis_out_of_range_raises():
    A = sparse(F.CSR, (3, 4), seed=1)
    with pytest.raises(ustc.ShapeError, match="axis 2"):
        A.sum(2)
    with pytest.raises(ustc.ShapeError):
        A.sum((0, -3))


@pytest.mark.parametrize("shape", [(5, 7), (1, 7), (0, 5)], ids=["5x7", "1x7", "0x5"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_transpose_view(fmt, shape):
    A = sparse(fmt, shape, seed=seed_of("T", fmt, shape))
    T = A.T
    assert T.shape == shape[::-1]
    assert_matches(T, A.to_dense().T)
    assert T.values is A.values or np.shares_memory(T.values, A.values)


@pytest.mark.parametrize("target", ["COO", "same"])
@pytest.mark.parametrize("fmt", FAMILIES)
def test_transpose_stored(fmt, target):
    out_fmt = fmt if target == "same" else NAMED_2D[target]
    x = structured_fit(rand_dense((5, 7), seed=seed_of("Tstored", fmt, target)), fmt)
    x = structured_fit(x.T, out_fmt).T.copy()  # n:m: rows fit both before and after transposing
    A = Tensor.from_dense(x, fmt)
    before = snapshot(A)
    B = A.transpose(tensor_format=out_fmt)
    assert B.format == out_fmt and B.shape == (7, 5)
    B.validate()
    assert_matches(B, A.to_dense().T)
    assert_unchanged([A], before)


@pytest.mark.parametrize("axes", [(2, 0, 1), (1, 0, 2), (0, 2, 1)], ids=str)
def test_transpose_3d(axes):
    A = sparse(F.CSF(3), (2, 3, 4), seed=seed_of("T3", axes))
    want = np.transpose(A.to_dense(), axes)
    assert_matches(A.transpose(axes), want)
    B = A.transpose(axes, tensor_format=F.CSF(3))
    B.validate()
    assert_matches(B, want)


def test_transpose_bad_axes_raise():
    A = sparse(F.CSF(3), (2, 3, 4), seed=2)
    with pytest.raises(ustc.ShapeError, match="permutation"):
        A.transpose((0, 0, 1))


@pytest.mark.parametrize("shape", [(4, 3), (64, 4 * TILE)], ids=["one-tile", "many-tiles"])
@pytest.mark.parametrize("fmt", [pytest.param(ustc.TensorFormat.parse("(i, j) -> (j - i : delta(1), j : range)"),
                                              id="delta-DIAJ"), pytest.param(F.DIAJ, id="DIAJ")])
def test_diagonals_over_columns_with_row_output(fmt, shape):
    """Regressions of the hoisted row tiles (DIA): (1) a delta level over ``j - i`` keeps a
    running coordinate whose start (``lo - 1``) stayed outside the prange, where Numba took
    it for a reduction from 0; (2) with a column range level, ``y[i]`` is written at ``j - d``,
    so column tiles hoisted above the diagonal loop raced on ``y`` (now they are not hoisted)."""
    rows, cols = shape
    x = np.arange(cols, dtype=np.float64)
    dense = rand_dense(shape, seed=seed_of("dia-tiles", shape), density=0.5)
    if cols > TILE:  # several tiles of columns; plain DIAJ: one diagonal per tile, each writing all rows of y
        delta = fmt.levels[0].type.keyword == "delta"  # far-apart offsets would need TILE padding diagonals
        offsets = np.arange(8) if delta else np.arange(0, cols - rows + 1, TILE)
        i, d = np.meshgrid(np.arange(rows), offsets, indexing="ij")
        dense = np.zeros(shape)
        dense[i, i + d] = 1.0 + i
    A = Tensor.from_dense(dense, fmt)
    a = A.to_dense()
    assert_matches(ustc.einsum("ij,j->i", A, x), a @ x)
    assert_matches(A.sum(0), a.sum(axis=0))
