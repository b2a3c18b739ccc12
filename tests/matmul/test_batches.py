"""Batches of any rank in Matmul (NumPy ``matmul`` rules): sparse batched operands whose batch
dimensions are stored by any level type, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from matmul_helpers import random_dense

BATCH_LEVELS = ["dense", "compressed", "batch"]


def _format(rank: int, batch_level: str, inner: str) -> str:
    names = [f"b{n}" for n in range(rank - 2)] + ["i", "j"]
    levels = [f"{d} : {batch_level}" for d in names[:-2]] + [f"i : {inner}", "j : compressed"]
    return f"({', '.join(names)}) -> ({', '.join(levels)})"


def _pairwise() -> list:
    """(rank, batch level, inner level) covering every pair of values of any two of the three
    (each case is a format of its own: its kernels compile apiece): every batch level with
    rank 4 and 5 and with a dense and a compressed inner level, the two ranks crossed with the
    two inner levels."""
    out = []
    for k, batch_level in enumerate(BATCH_LEVELS):
        inner = ("dense", "compressed") if k % 2 == 0 else ("compressed", "dense")
        out += [(4, batch_level, inner[0]), (5, batch_level, inner[1])]
    return out


@pytest.mark.parametrize("rank,batch_level,inner", _pairwise())
def test_sparse_batches_of_any_rank(rank, batch_level, inner, rng):
    batch = (2, 3, 2)[: rank - 2]
    a = random_dense(rng, batch + (4, 5), 0.4)
    A = ustc.Tensor.from_dense(a, _format(rank, batch_level, inner))
    b = rng.standard_normal(batch + (5, 3))
    np.testing.assert_allclose(ustc.matmul(A, b), a @ b, atol=1e-12)
    np.testing.assert_allclose(ustc.matmul(A, b[(0,) * len(batch)]), a @ b[(0,) * len(batch)], atol=1e-12)
    x = rng.standard_normal(5)
    np.testing.assert_allclose(ustc.matmul(A, x), a @ x, atol=1e-12)
    c = rng.standard_normal(batch + (4, 3))
    want = a @ b + c
    assert ustc.matmul(A, b, c) is c
    np.testing.assert_allclose(c, want, atol=1e-12)


def test_dense_batches_and_mismatches(rng):
    a, b = rng.standard_normal((2, 2, 3, 4)), rng.standard_normal((2, 2, 4, 5))
    np.testing.assert_allclose(ustc.matmul(a, b), a @ b)
    A = ustc.Tensor.from_dense(a * (a > 0), "COO(4)")
    with pytest.raises(ustc.ShapeError, match=r"batch shapes differ: a has \(2, 2\), b has \(3, 2\)"):
        ustc.matmul(A, rng.standard_normal((3, 2, 4, 5)))
    with pytest.raises(ustc.ShapeError, match="a has 4 columns but b has 3 rows"):
        ustc.matmul(A, rng.standard_normal((2, 2, 3, 5)))
