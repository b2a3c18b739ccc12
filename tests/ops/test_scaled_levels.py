"""Operations on formats with a scaled level ``c * d`` (coordinates 0, c, 2c, ...).

A ``c * d`` level spans c (n - 1) + 1 coordinates of which only the multiples of c hold
tensor entries: a dense ``c * d`` level stores zeros between them, a delta level may pad
there, and a loop over the level visits every coordinate. The lowering must keep the
derived index ``d = l floordiv c`` to multiples of c (it once added a dense operand's
entry again at every other coordinate). Each case is checked against NumPy on the stored
contents, with random nonzero data, all-zero operands and empty shapes.
"""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from op_helpers import assert_matches, rand_dense, sparse
from pairwise import pairwise
from ustc import Tensor
from ustc import formats as F

P = ustc.TensorFormat.parse

SCALED_1D = [f"(d) -> ({c} * d : {kind})" for c in (2, 3) for kind in ("dense", "compressed", "delta(1)")]
SCALED_2D = ["(i, j) -> (i : dense, 3 * j : compressed)",
             "(i, j) -> (2 * i : dense, j : compressed)",
             "(i, j) -> (2 * i : compressed, 3 * j : dense)",
             "(i, j) -> (3 * j : dense, i : delta(1))",
             "(i, j) -> (i : compressed, 2 * j : delta(2))"]
# the other operand: dense storage (every entry), plain sparse, the same scaled format (2-D), a NumPy array
# (1-D: dense, compressed or an array, drawn pairwise with the scale in test_binary_1d)
PARTNERS_2D = ["dense", "CSR", "same", "array"]
SHAPES_2D = [(5, 7), (1, 4), (0, 5), (5, 0)]


def _partner(kind: str, fmt, shape, seed: int, zero: bool = False):
    if kind == "array":
        return np.zeros(shape) if zero else rand_dense(shape, density=0.7, seed=seed)
    if kind == "dense":
        return sparse(F.Dense(len(shape)), shape, seed=seed, density=1.0, zero=zero)
    other = {"same": fmt, "compressed": P("(d) -> (d : compressed)"), "CSR": F.CSR}[kind]
    return sparse(other, shape, seed=seed, zero=zero)


def _dense(x):
    return x.to_dense() if isinstance(x, Tensor) else x


# A + B and A * B with the scaled operand first, B - A with it second. ``-`` lowers to the union
# ``+`` does (its own kernel, so A - B, a kernel more, is left to the plain formats' tests in
# test_elementwise.py): the union runs with the scaled operand on both sides. Each is a kernel
# per (format, partner), so the cases take them pairwise with the formats and partners.
OPS = {"A + B": lambda a, b: a + b, "A * B": lambda a, b: a * b, "B - A": lambda a, b: b - a}


def _check_binary(A, B, ops=tuple(OPS)):
    a, b = _dense(A), _dense(B)
    for op in ops:
        assert_matches(OPS[op](A, B), OPS[op](a, b))


def test_union_dense_with_scaled_level_3():
    """The pinned bug with c = 3 and a dense scaled level: each entry counted once."""
    A, B = sparse(F.Dense(1), (6,), seed=3, density=1.0), sparse(P("(d) -> (3 * d : dense)"), (6,), seed=4)
    assert_matches(A + B, A.to_dense() + B.to_dense())


def _pairwise_1d() -> list:
    """The level kind, the sparse-storage partner (dense, compressed), the scale c and the
    operator, pairwise: each kind meets both partners, both scales and every operator, each
    partner both scales and every operator; a NumPy-array partner (no kernel) meets every scaled
    format with every operator."""
    params = [(f"(d) -> ({c} * d : {kind})", partner, (op,))
              for kind, partner, c, op in pairwise(("dense", "compressed", "delta(1)"), ("dense", "compressed"), (2, 3),
                                                  tuple(OPS))]
    return params + [(text, "array", tuple(OPS)) for text in SCALED_1D]


@pytest.mark.parametrize("text, partner, ops", _pairwise_1d())
def test_binary_1d(text, partner, ops):
    fmt = P(text)
    for n, seed in ((9, 1), (1, 2), (0, 3)):
        A = sparse(fmt, (n,), seed=seed, density=0.5)
        _check_binary(A, _partner(partner, fmt, (n,), seed + 10), ops)


# every (format, partner), (format, operator) and (partner, operator) pair once
CASES_2D = pairwise(SCALED_2D, PARTNERS_2D, tuple(OPS))


@pytest.mark.parametrize("text, partner, op", CASES_2D)
def test_binary_2d(text, partner, op):
    fmt = P(text)
    for k, shape in enumerate(SHAPES_2D):
        A = sparse(fmt, shape, seed=k)
        _check_binary(A, _partner(partner, fmt, shape, 20 + k), (op,))


@pytest.mark.parametrize("text", SCALED_2D)
def test_all_zero_operands(text):
    fmt = P(text)
    A, Z = sparse(fmt, (4, 6), seed=5), sparse(fmt, (4, 6), zero=True)
    for partner, op in [(partner, op) for t, partner, op in CASES_2D if t == text]:   # test_binary_2d's kernels
        _check_binary(Z, _partner(partner, fmt, (4, 6), 6), (op,))
        _check_binary(A, _partner(partner, fmt, (4, 6), 6, zero=True), (op,))
    assert_matches(Z.sum(0), np.zeros(6))
    assert_matches(ustc.matmul(Z, np.ones(6)), np.zeros(4))


@pytest.mark.parametrize("text", SCALED_2D)
def test_sum_over_each_axis(text):
    fmt = P(text)
    for k, shape in enumerate(SHAPES_2D):
        A = sparse(fmt, shape, seed=30 + k)
        a = A.to_dense()
        for axis in (0, 1):
            assert_matches(A.sum(axis), a.sum(axis=axis))
        assert_matches(A.sum(), a.sum())


@pytest.mark.parametrize("text", SCALED_2D)
def test_spmv_and_spmm(text):
    fmt = P(text)
    rng = np.random.default_rng(7)
    for k, shape in enumerate(SHAPES_2D):
        A = sparse(fmt, shape, seed=40 + k)
        x, X = rng.standard_normal(shape[1]), rng.standard_normal((shape[1], 3))
        assert_matches(ustc.matmul(A, x), A.to_dense() @ x)
        assert_matches(A @ X, A.to_dense() @ X)


@pytest.mark.parametrize("out", SCALED_2D[:3])
@pytest.mark.parametrize("text", ["CSR", SCALED_2D[0], SCALED_2D[3]])
def test_sparse_output_in_scaled_format(text, out):
    """A * X (dense X) stored in a scaled format, from a plain or scaled operand."""
    A = sparse(F.CSR if text == "CSR" else P(text), (5, 7), seed=50)
    X = rand_dense((5, 7), density=1.0, seed=51)
    C = ustc.einsum("ij,ij->ij", A, X, out_format=P(out))
    assert isinstance(C, Tensor) and C.format == P(out)
    C.validate()
    assert_matches(C, A.to_dense() * X)


def test_one_dimensional_sum_and_dot():
    for text in SCALED_1D:
        A = sparse(P(text), (8,), seed=60, density=0.5)
        x = rand_dense((8,), density=1.0, seed=61)
        assert_matches(A.sum(0), A.to_dense().sum())
        assert_matches(ustc.einsum("i,i->", A, x), A.to_dense() @ x)
