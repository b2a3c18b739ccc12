"""SerialCsrRoute: a planned CSR SpMV below the serial size with narrow (16-bit or fewer) columns runs
ops._vector.csr_rows on one thread (its row sums raced), on the plan's arrays, on arrays given per call
(bind_call, plus a bias) and on an x given by its address (the batch-1 nn.Linear's)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc.ops._vector import csr_rows

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
TOL = {np.dtype(np.float32): 2e-5, np.dtype(np.complex64): 2e-5, np.dtype(np.float64): 1e-12,
       np.dtype(np.complex128): 1e-12}


def _csr(rows, cols, density, dtype, index=np.uint16, seed=0):
    rng = np.random.default_rng(seed)
    a = sp.random(rows, cols, density=density, random_state=seed, format="csr", dtype=np.float64)
    a.data = (a.data + (1j * rng.random(a.nnz) if np.dtype(dtype).kind == "c" else 0)).astype(dtype)
    a.indices = a.indices.astype(index)
    return ustc.Tensor.from_package(a), a


def _vector(n, dtype, rng):
    x = rng.random(n)
    return (x + 1j * rng.random(n) if np.dtype(dtype).kind == "c" else x).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows, cols, density", [(1, 30, 0.5), (30, 1, 0.5), (50, 40, 0.2), (50, 40, 0.01),
                                                 (6, 40_000, 0.002)])  # columns past 32767 in uint16
def test_route_matches_dense_through_execute_bind_call_and_address(dtype, rows, cols, density):
    A, a = _csr(rows, cols, density, dtype)
    rng = np.random.default_rng(1)
    x = _vector(cols, dtype, rng)
    mm = ustc.Matmul(A, x).plan()
    assert mm.plan_info.startswith("registered kernel: serial_csr_spmv"), mm.plan_info
    tol = TOL[np.dtype(dtype)]
    for _ in range(8):  # the race's six timed runs and after
        x[:] = _vector(cols, dtype, rng)
        np.testing.assert_allclose(np.asarray(mm.execute()), a @ x, rtol=tol, atol=tol)
    call = mm.bind_call(x, np.empty(rows, dtype))
    assert call.direct and call.kind == "registered kernel" and call.at_address is not None
    for _ in range(8):
        b, add = _vector(cols, dtype, rng), _vector(rows, dtype, rng)
        before = b.copy()
        out = np.full(rows, np.nan, dtype)
        np.testing.assert_allclose(call(b, out), a @ b, rtol=tol, atol=tol)
        np.testing.assert_allclose(call(b, out, add), a @ b + add, rtol=tol, atol=tol)
        out[:] = np.nan
        call.unchecked(b, out, None)
        np.testing.assert_allclose(out, a @ b, rtol=tol, atol=tol)
        out[:] = np.nan
        call.at_address(b.ctypes.data, out, add)
        np.testing.assert_allclose(out, a @ b + add, rtol=tol, atol=tol)
        np.testing.assert_array_equal(b, before)  # b is only read


@pytest.mark.parametrize("index, route", [(np.uint16, "registered kernel: serial_csr_spmv"),
                                          (np.uint8, "registered kernel: serial_csr_spmv"),
                                          (np.int32, "generated"), (np.int64, "generated")])
def test_narrow_columns_take_the_route_and_wide_ones_the_generated_twin(index, route):
    A, a = _csr(20, 30, 0.3, np.float64, index=index)
    x = np.arange(30.0)
    mm = ustc.Matmul(A, x).plan()
    assert mm.plan_info.startswith(route), mm.plan_info
    np.testing.assert_allclose(np.asarray(mm.execute()), a @ x)


def test_scaled_accumulating_and_large_products_keep_other_routes():
    A, a = _csr(20, 30, 0.3, np.float64)
    x, c = np.arange(30.0), np.ones(20)
    assert not ustc.Matmul(A, x, alpha=2.0).plan().plan_info.startswith("registered kernel: serial_csr")
    assert not ustc.Matmul(A, x, c, beta=1.0).plan().plan_info.startswith("registered kernel: serial_csr")
    big, _ = _csr(2000, 2000, 0.1, np.float64)  # above the serial size: LinearCsrRoute
    assert ustc.Matmul(big, np.ones(2000)).plan().plan_info.startswith("registered kernel: linear_csr_spmv")


def test_repeated_one_shot_calls_stay_right():
    A, a = _csr(40, 50, 0.2, np.float32)
    rng = np.random.default_rng(3)
    for _ in range(4):  # the first plans; later ones repeat the remembered kernel
        x = rng.random(50, dtype=np.float32)
        np.testing.assert_allclose(np.asarray(ustc.matmul(A, x)), a @ x, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("pairs", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=str)
def test_csr_rows_reads_uint16_columns_past_32767(pairs, dtype):
    _, a = _csr(8, 60_000, 0.003, dtype)
    assert a.indices.max() > 32_767
    x, add = np.random.default_rng(2).random(60_000).astype(dtype), np.arange(8, dtype=dtype)
    out = np.empty(8, dtype)
    csr_rows(a.indptr, a.indices, a.data, x, out, 0, 8, None, dtype(0), pairs, add)
    np.testing.assert_allclose(out, a @ x + add, rtol=TOL[np.dtype(dtype)])
