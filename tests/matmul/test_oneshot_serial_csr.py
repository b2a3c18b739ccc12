"""A repeated plain one-shot ``ustc.matmul(A, x)`` on a small CSR ``A`` runs the hand-written
serial row loop (``ops.matmul.SerialCsrCall``, ``ops._vector.csr_rows``, the fused solvers' row loop) instead
of the generated serial twin. Oracle: SciPy on the operands' current values."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc.ops import matmul as one_shot
from matmul_helpers import random_dense, random_vector, tol


def _csr(rng, shape, dtype=np.float64, index=np.int32, density=0.3):
    a = sp.csr_array(random_dense(rng, shape, density, dtype))
    a.indices, a.indptr = a.indices.astype(index), a.indptr.astype(index)
    return a


def _call(A):
    repeat = one_shot._REPEATS.get(id(A._layout))
    return None if repeat is None else repeat.call


@pytest.mark.parametrize("dtype, index", [(np.float64, np.int32), (np.float32, np.int64), (np.complex128, np.int32)])
def test_repeats_match_scipy(dtype, index, rng):
    for shape in ((40, 30), (1, 25), (25, 1), (0, 6)):
        a = _csr(rng, shape, dtype, index)
        a.data[::4] = 0                                   # explicit zeros
        A = ustc.Tensor.from_package(a)
        x = random_vector(rng, shape[1], dtype)
        keep = (a.data.copy(), a.indices.copy(), a.indptr.copy(), x.copy())
        for step in range(4):
            y = ustc.matmul(A, x)
            assert y.dtype == dtype and y.shape == (shape[0],)
            np.testing.assert_allclose(y, a @ x, **tol(dtype))
            if step == 1:
                assert all(np.array_equal(u, v) for u, v in zip((a.data, a.indices, a.indptr, x), keep))
                a.data *= 2                               # values changed in place count at the next call
                x[:] = random_vector(rng, shape[1], dtype)
        assert isinstance(_call(A), one_shot.SerialCsrCall)


def test_empty_rows_and_all_zero(rng):
    a = _csr(rng, (30, 20), density=0.1)
    a.data[:] = 0
    A = ustc.Tensor.from_package(a)
    x = random_vector(rng, 20, np.float64)
    for _ in range(3):
        assert np.array_equal(ustc.matmul(A, x), np.zeros(30))
    assert isinstance(_call(A), one_shot.SerialCsrCall)


def test_other_kinds_keep_the_generated_kernel(rng):
    """Mixed dtypes, integer values and CSC take the generated kernel's direct call; all agree."""
    cases = [(ustc.Tensor.from_package(_csr(rng, (20, 20))), random_vector(rng, 20, np.float32)),
             (ustc.Tensor.from_package(sp.csr_array(np.arange(400).reshape(20, 20) % 3)), np.arange(20)),
             (ustc.Tensor.from_dense(random_dense(rng, (20, 20)), "CSC"), random_vector(rng, 20, np.float64))]
    for A, x in cases:
        for _ in range(3):
            np.testing.assert_allclose(ustc.matmul(A, x), A.to_dense() @ x, rtol=1e-5, atol=1e-5)
        assert _call(A) is not None and not isinstance(_call(A), one_shot.SerialCsrCall)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex64])
def test_both_row_sums_race_and_agree(dtype, rng):
    """The repeat's row sums alternate between masked 8-lane steps and two interleaved sums for six
    calls, timed, then keep the faster (``SerialCsrCall.race``); every call matches SciPy."""
    a = _csr(rng, (200, 150), dtype, density=0.05)
    A = ustc.Tensor.from_package(a)
    x = random_vector(rng, 150, dtype)
    for _ in range(10):
        np.testing.assert_allclose(ustc.matmul(A, x), a @ x, **tol(dtype))
    race = _call(A).race
    assert race.winner in (0, 1) and race.calls == 6 and all(np.isfinite(race.best))
