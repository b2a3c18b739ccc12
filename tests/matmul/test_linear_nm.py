"""n:m structured SpMV without gathers (``routes.LinearNmRoute``, ``kernels._linear_nm``): the route a
planned ``ustc.Matmul`` SpMV of a ``Structured(n, m)`` operand (``m`` <= 4, float values) takes in place
of the built-in ``structured_spmv``, and its fallbacks. Oracle: NumPy on the pruned dense operand."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ustc import formats
from ustc.ops import routes, runtime
from matmul_helpers import random_dense, sparse, tol


@pytest.fixture
def every_size(monkeypatch):
    """Small operands take the parallel build too (normally above ``runtime.SERIAL_WORK`` only)."""
    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)


def _operand(rng, shape, nm, dtype, density=0.8):
    a = sparse(random_dense(rng, shape, density, dtype), formats.Structured(*nm))
    return a.to_dense(), a


def _chosen(mm) -> bool:
    return isinstance(mm._route, routes.LinearNmRoute)


# each (n, m, dtype) compiles a kernel: 2:4 in both dtypes, the other shapes of group in one each;
# widths 9 and 7 end in a partial group (padding slots past the matrix)
@pytest.mark.parametrize("nm, dtype", [((2, 4), np.float32), ((2, 4), np.float64), ((1, 4), np.float32),
                                       ((3, 3), np.float64), ((1, 2), np.float32), ((4, 4), np.float64)])
@pytest.mark.parametrize("shape", [(13, 16), (1, 9), (9, 1), (0, 8), (6, 7), (4, 0)])
def test_matches_numpy(shape, nm, dtype, rng, every_size):
    dense, a = _operand(rng, shape, nm, dtype)
    x = rng.standard_normal(shape[1]).astype(dtype)
    x_before = x.copy()
    mm = ustc.Matmul(a, x).plan()
    assert _chosen(mm), mm.plan_info
    for _ in range(2):  # overwrites its buffer: nothing left from the last execute
        np.testing.assert_allclose(np.asarray(mm.execute()), dense @ x, **tol(dtype))
    np.testing.assert_array_equal(x, x_before)


def test_serial_build_alpha_beta_and_zero_rows(rng):
    dense, a = _operand(rng, (10, 12), (2, 4), np.float64)
    a = sparse(np.vstack([dense[:5], np.zeros((3, 12)), dense[5:]]), formats.Structured(2, 4))
    x, c = rng.standard_normal(12), rng.standard_normal(13)
    mm = ustc.Matmul(a, x, c=c.copy(), alpha=-1.5, beta=0.5).plan()
    assert _chosen(mm), mm.plan_info
    np.testing.assert_allclose(np.asarray(mm.execute(out=np.empty(13))), -1.5 * a.to_dense() @ x + 0.5 * c,
                               rtol=1e-10)


def test_other_operands_keep_the_builtin_kernel(rng, every_size):
    """m above 4, complex values, a float64 x against float32 values: the built-in kernel; a
    strided x given after planning runs it too."""
    _, wide = _operand(rng, (6, 16), (2, 8), np.float64)
    assert not _chosen(ustc.Matmul(wide, np.ones(16)).plan())
    _, cplx = _operand(rng, (6, 8), (2, 4), np.complex128)
    assert not _chosen(ustc.Matmul(cplx, np.ones(8, np.complex128)).plan())
    _, a32 = _operand(rng, (6, 8), (2, 4), np.float32)
    assert not _chosen(ustc.Matmul(a32, np.ones(8)).plan())
    dense, a = _operand(rng, (6, 8), (2, 4), np.float64)
    x = rng.standard_normal(16)
    mm = ustc.Matmul(a, x[::2].copy()).plan()
    mm.reset_operands(b=x[::2])
    np.testing.assert_allclose(np.asarray(mm.execute()), dense @ x[::2], rtol=1e-10)
