"""CSR x CSR SpGEMM above the serial size takes the registered kernel (``routes._registered_spgemm``).

``runtime.SERIAL_WORK`` is lowered here so that small operands take the route the large ones take
(the generated serial twin keeps smaller products otherwise); the plan cache is cleared around
each test so no plan chosen under another threshold is reused. Results are compared with SciPy's
canonical product entry for entry; unlike SciPy (and the generated kernel) the registered kernel
keeps an entry whose products cancel, stored as zero (its pattern is every column the products
reach)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import ustc
from ustc.ops import plan_cache, runtime


def _canonical(a, b):
    ref = sp.csr_array(a @ b)
    ref.sum_duplicates()
    ref.sort_indices()
    return ref


@pytest.fixture
def large():
    """Every product counts as above the serial size; no plan from elsewhere is reused."""
    plan_cache.clear()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runtime, "SERIAL_WORK", 0)
        yield
    plan_cache.clear()


def _assert_product(C, a, b):
    ref = _canonical(a, b)
    assert C.format == ustc.TensorFormat.parse("CSR") and C.shape == ref.shape
    C.validate()
    np.testing.assert_array_equal(C.pos(1), ref.indptr)
    np.testing.assert_array_equal(C.crd(1), ref.indices)
    tol = 1e-5 if ref.dtype in (np.float32, np.complex64) else 1e-12
    np.testing.assert_allclose(C.values, ref.data, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_one_shot_and_planned_take_the_registered_kernel(large, dtype):
    rng = np.random.default_rng(5)
    a = sp.random_array((30, 40), density=0.2, rng=rng, format="csr").astype(dtype)
    b = sp.random_array((40, 25), density=0.2, rng=rng, format="csr").astype(dtype)
    if np.dtype(dtype).kind == "c":
        a.data = a.data * (1 + 2j)
    before = [x.copy() for x in (a.indptr, a.indices, a.data, b.indptr, b.indices, b.data)]
    A, B = ustc.Tensor.from_package(a), ustc.Tensor.from_package(b)
    mm = ustc.Matmul(A, B).plan()
    assert mm.plan_info.startswith("registered kernel: csr_spgemm"), mm.plan_info
    _assert_product(mm.execute(), a, b)
    _assert_product(ustc.matmul(A, B), a, b)
    for x, y in zip((a.indptr, a.indices, a.data, b.indptr, b.indices, b.data), before):
        np.testing.assert_array_equal(x, y)      # operands never written


@pytest.mark.parametrize("shape", [(0, 4, 3), (5, 4, 0), (1, 7, 9), (6, 5, 1)], ids=str)
def test_edge_shapes(large, shape):
    m, k, n = shape
    rng = np.random.default_rng(6)
    a = sp.random_array((m, k), density=0.6, rng=rng, format="csr")
    b = sp.random_array((k, n), density=0.6, rng=rng, format="csr")
    _assert_product(ustc.matmul(ustc.Tensor.from_package(a), ustc.Tensor.from_package(b)), a, b)
    zero = sp.csr_array((m, k))                  # all zero: an empty product of this shape
    _assert_product(ustc.matmul(ustc.Tensor.from_package(zero), ustc.Tensor.from_package(b)), zero, b)


def test_cancelled_products_keep_their_entry(large):
    a = sp.csr_array(np.array([[1.0, 1.0], [2.0, 0.0]]))
    b = sp.csr_array(np.array([[1.0, 3.0], [-1.0, 0.0]]))     # row 0 of a @ b: 1 - 1 = 0 and 3
    C = ustc.matmul(ustc.Tensor.from_package(a), ustc.Tensor.from_package(b))
    C.validate()
    np.testing.assert_array_equal(C.pos(1), [0, 2, 4])
    np.testing.assert_array_equal(C.crd(1), [0, 1, 0, 1])
    np.testing.assert_array_equal(C.values, [0.0, 3.0, 2.0, 6.0])
    np.testing.assert_array_equal(C.to_dense(), a.toarray() @ b.toarray())


def test_rows_through_csr_count_first(large):
    """DCSR operands convert to CSR at every execute; a product that compresses (a band) takes the
    registered kernel's counting pass, and the result comes back in DCSR."""
    n = 200
    band = sp.csr_array(sp.diags([np.full(n - 1, -1.0), np.full(n, 2.0), np.full(n - 1, -1.0)], [-1, 0, 1]))
    A = ustc.Tensor.from_package(band).convert("DCSR")
    mm = ustc.Matmul(A, A).plan()
    assert "to CSR at every execute; registered kernel: csr_spgemm" in mm.plan_info, mm.plan_info
    assert "counting pass" in mm.plan_info, mm.plan_info
    C = mm.execute()
    assert C.format == A.format
    _assert_product(C.convert("CSR"), band, band)


def test_integer_values_keep_the_generated_kernel(large):
    a = sp.csr_array(np.arange(12, dtype=np.int64).reshape(3, 4) % 3)
    mm = ustc.Matmul(ustc.Tensor.from_package(a), ustc.Tensor.from_package(a.T.tocsr())).plan()
    assert mm.plan_info.startswith("generated"), mm.plan_info   # the registered kernel takes floats only
    np.testing.assert_array_equal(mm.execute().to_dense(), (a @ a.T).toarray())


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 12), st.integers(0, 12), st.integers(0, 12), st.floats(0, 1), st.integers(0, 2**16))
def test_random_products(m, k, n, density, seed):
    a = sp.random_array((m, k), density=density, random_state=seed, format="csr")
    b = sp.random_array((k, n), density=density, random_state=seed + 1, format="csr")
    plan_cache.clear()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runtime, "SERIAL_WORK", 0)
        _assert_product(ustc.matmul(ustc.Tensor.from_package(a), ustc.Tensor.from_package(b)), a, b)
    plan_cache.clear()
