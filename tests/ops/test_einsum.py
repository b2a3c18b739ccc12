"""``ustc.einsum``: SDDMM for every named format, MTTKRP on 3-D tensors, sparse outputs in
several formats, any number of dense or sparse operands; ``numpy.einsum`` is the oracle."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from op_helpers import (NAMED_2D, NAMED_3D, assert_matches, assert_unchanged, named_params, rand_values, seed_of,
                        snapshot, sparse, subset_2d)
from ustc import Tensor
from ustc import formats as F

FORMATS = named_params(NAMED_2D)


def _dense_operands(seed, *shapes, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [rand_values(s, dtype, rng) for s in shapes]


@pytest.mark.parametrize("shape", [(5, 7), (1, 6), (6, 1), (0, 4)], ids=["5x7", "1x6", "6x1", "0x4"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_sddmm_sparse_output_in_the_sampling_format(fmt, shape):
    """C = A .* (B @ D) with the output stored in A's format (its pattern is A's)."""
    seed = seed_of("sddmm", fmt, shape)
    A = sparse(fmt, shape, seed=seed)
    B, D = _dense_operands(seed, (shape[0], 3), (3, shape[1]))
    before = snapshot(A, B, D)
    C = ustc.einsum("ij,ik,kj->ij", A, B, D, out_format=fmt)
    assert isinstance(C, Tensor) and C.format == fmt
    C.validate()
    assert_matches(C, A.to_dense() * (B @ D))
    assert_unchanged([A, B, D], before)


@pytest.mark.parametrize("fmt", subset_2d("CSR", "COO", "DIAI", "BSR", "Structured"))
def test_sddmm_dense_output(fmt):
    seed = seed_of("sddmm-dense", fmt)
    A = sparse(fmt, (6, 5), seed=seed)
    B, D = _dense_operands(seed, (6, 2), (2, 5))
    out = ustc.einsum("ij,ik,kj->ij", A, B, D)
    assert isinstance(out, np.ndarray)
    assert_matches(out, np.einsum("ij,ik,kj->ij", A.to_dense(), B, D))


MTTKRP_FORMATS = named_params(NAMED_3D) + [pytest.param(F.COO(3), id="COO(3)"),
                                          pytest.param(F.Dense(3), id="Dense(3)")]


@pytest.mark.parametrize("shape", [(4, 5, 6), (1, 3, 2), (3, 0, 2), (2, 3, 1)], ids=str)
@pytest.mark.parametrize("fmt", MTTKRP_FORMATS)
def test_mttkrp(fmt, shape):
    """Y[i, j] = B[i, k, l] * C[k, j] * D[l, j] (MTTKRP of a 3-D sparse tensor)."""
    seed = seed_of("mttkrp", fmt, shape)
    Bt = sparse(fmt, shape, seed=seed, density=0.3)
    C, D = _dense_operands(seed, (shape[1], 3), (shape[2], 3))
    got = ustc.einsum("ikl,kj,lj->ij", Bt, C, D)
    assert_matches(got, np.einsum("ikl,kj,lj->ij", Bt.to_dense(), C, D))


def test_mttkrp_all_zero_tensor():
    Bt = sparse(F.CSF(3), (3, 4, 5), zero=True)
    C, D = _dense_operands(1, (4, 2), (5, 2))
    assert_matches(ustc.einsum("ikl,kj,lj->ij", Bt, C, D), np.zeros((3, 2)))


@pytest.mark.parametrize("out_format", ["CSR", "CSC", "COO", "DCSR", "Dense", "BSR", "DIAI"])
def test_sparse_output_formats(out_format):
    """A product of two sparse operands stored in several output formats."""
    out_fmt = NAMED_2D[out_format]
    A, B = sparse(F.CSR, (5, 6), seed=1), sparse(F.CSC, (6, 4), seed=2)
    C = ustc.einsum("ij,jk->ik", A, B, out_format=out_fmt)
    assert isinstance(C, Tensor) and C.format == out_fmt
    C.validate()
    assert_matches(C, A.to_dense() @ B.to_dense())


@pytest.mark.parametrize("subscripts, shapes, sparse_at", [
    ("ij,j->i", [(5, 7), (7,)], [0]),
    ("ij,jk", [(4, 5), (5, 3)], [0, 1]),             # implicit output: NumPy's alphabetical rule
    ("ij->ji", [(4, 6)], [0]),
    ("ij->", [(4, 6)], [0]),
    ("ijk->kj", [(2, 3, 4)], [0]),
    ("i,j->ij", [(4,), (5,)], []),                  # dense operands, sparse output (below)
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)], [0, 2]),
    ("ij,ij,ij->ij", [(4, 5), (4, 5), (4, 5)], [0, 1]),
], ids=lambda v: v if isinstance(v, str) else None)
def test_einsum_matches_numpy(subscripts, shapes, sparse_at):
    seed = seed_of("einsum", subscripts)
    dense = [np.where(np.random.default_rng(seed + k).random(s) < 0.5, x, 0)
             for k, (s, x) in enumerate(zip(shapes, _dense_operands(seed, *shapes)))]
    operands = [Tensor.from_dense(x, F.CSF(x.ndim) if x.ndim != 2 else F.CSR) if k in sparse_at else x
                for k, x in enumerate(dense)]
    before = snapshot(*operands)
    want = np.einsum(subscripts, *dense)
    assert_matches(ustc.einsum(subscripts, *operands), want)
    if want.ndim == 2:
        C = ustc.einsum(subscripts, *operands, out_format="COO")
        assert isinstance(C, Tensor)
        assert_matches(C, want)
    assert_unchanged(operands, before)


def test_einsum_dense_only_is_numpy():
    a, b = _dense_operands(3, (3, 4), (4,))
    got = ustc.einsum("ij,j->i", a, b)
    assert isinstance(got, np.ndarray)
    assert_matches(got, a @ b)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.complex128], ids=str)
def test_einsum_dtypes(dtype):
    A = sparse(F.CSR, (5, 7), dtype, seed=seed_of("einsum-dtype", dtype))
    x = rand_values(7, dtype, np.random.default_rng(4))
    got = ustc.einsum("ij,j->i", A, x)
    assert got.dtype == np.dtype(dtype)
    assert_matches(got, A.to_dense() @ x, dtype)


@pytest.mark.parametrize("subscripts, operands, error, match", [
    ("ij,j->i", 1, ustc.KernelError, "name 2 operands"),
    ("i1->i", 1, ustc.KernelError, "not an index letter"),
    ("ii->i", 1, ustc.UnsupportedOperation, "repeats an index"),
    ("...i->i", 1, ustc.UnsupportedOperation, "ellipsis"),
    ("ij->ii", 1, ustc.KernelError, "repeats an index"),
    ("ij->k", 1, ustc.KernelError, "appears in no operand"),
])
def test_einsum_bad_subscripts(subscripts, operands, error, match):
    A = sparse(F.CSR, (3, 3), seed=1)
    with pytest.raises(error, match=match):
        ustc.einsum(subscripts, *[A] * operands)


def test_einsum_extent_mismatch_raises_shape_error():
    A = sparse(F.CSR, (3, 4), seed=1)
    with pytest.raises(ustc.ShapeError):
        ustc.einsum("ij,j->i", A, np.ones(5))
    with pytest.raises(ustc.ShapeError):
        ustc.einsum("ij,jk->ik", A, sparse(F.CSR, (3, 2), seed=2), out_format="CSR")
    with pytest.raises(ustc.ShapeError):
        ustc.einsum("ijk,j->i", A, np.ones(4))
