"""Matmul's contract with ``c``, dtypes and dense-format Tensors, as nvmath-python documents it.

nvmath's sparse Matmul computes ``c := alpha * a @ b + beta * c`` in place: ``beta`` is 1
when ``c`` is given and not stated, ``execute()`` returns ``c`` itself, and executing
again accumulates again. The result's dtype is the operands', not the Python scalars'.
A Tensor whose levels are all dense is a dense operand: dense route, dense result.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from matmul_helpers import named_2d, random_dense, sparse, tol

torch = pytest.importorskip("torch")


def _operands(rng, fmt, shape=(6, 5), k=3, dtype=np.float64):
    a = random_dense(rng, shape, dtype=dtype)
    A = sparse(a, fmt)
    a = np.asarray(A.to_dense())                       # what n:m pruning kept
    b = rng.standard_normal((shape[1], k)).astype(dtype)
    c = rng.standard_normal((shape[0], k)).astype(dtype)
    return A, a, b, c


@pytest.mark.parametrize("fmt", named_2d())
def test_c_is_updated_in_place_and_accumulates(fmt, rng):
    A, a, b, c = _operands(rng, fmt)
    c0 = c.copy()
    with ustc.Matmul(A, b, c) as mm:                   # beta defaults to 1 with c
        mm.plan()
        r = mm.execute()
        assert r is c
        np.testing.assert_allclose(c, a @ b + c0, **tol(c.dtype))
        assert mm.execute() is c                        # a second execute accumulates again
        np.testing.assert_allclose(c, 2 * (a @ b) + c0, **tol(c.dtype))


def test_blog_example_c_plus_a_times_b(rng):
    a = sp.random_array((8, 8), density=0.3, rng=rng, format="csr")
    b, c = rng.standard_normal((8, 4)), rng.standard_normal((8, 4))
    want = a @ b + c
    with ustc.Matmul(ustc.Tensor.from_package(a), b, c, beta=1.0) as mm:
        mm.plan()
        mm.execute()
    np.testing.assert_allclose(c, want)


@pytest.mark.parametrize("alpha,beta", [(2.5, -0.5), (1, 0), (0, 3.0), (-1, 1)])
def test_alpha_beta_in_place_and_functional(alpha, beta, rng):
    A, a, b, c = _operands(rng, "CSR")
    c0 = c.copy()
    out = np.empty_like(c)
    assert ustc.matmul(A, b, c, alpha=alpha, beta=beta, out=out) is out
    np.testing.assert_array_equal(c, c0)               # with out=, c is only read
    np.testing.assert_allclose(out, alpha * a @ b + beta * c0)
    assert ustc.matmul(A, b, c, alpha=alpha, beta=beta) is c
    np.testing.assert_allclose(c, alpha * a @ b + beta * c0)


def test_one_shot_calls_do_not_share_buffers(rng):
    A, a, b, _ = _operands(rng, "CSR")
    first = ustc.matmul(A, b)
    second = ustc.matmul(A, 2 * b)                     # the same plan, from the plan cache
    assert not np.shares_memory(first, second)
    np.testing.assert_allclose(first, a @ b)
    np.testing.assert_allclose(second, 2 * a @ b)


def test_torch_c_is_returned_itself(rng):
    A, a, b, c = _operands(rng, "CSR")
    ct, c0 = torch.from_numpy(c.copy()), c.copy()
    r = ustc.matmul(A, torch.from_numpy(b), ct, alpha=2.0)
    assert r is ct
    np.testing.assert_allclose(ct.numpy(), 2 * a @ b + c0)


@pytest.mark.parametrize("layout", ["fortran", "transposed view", "strided"])
def test_non_contiguous_c_is_updated(layout, rng):
    A, a, b, c = _operands(rng, "CSR")
    if layout == "fortran":
        c = np.asfortranarray(c)
    elif layout == "transposed view":
        c = np.ascontiguousarray(c.T).T
    else:
        c = np.repeat(c, 2, axis=1)[:, ::2]
    c0 = c.copy()
    with ustc.Matmul(A, b, c) as mm:
        assert mm.execute() is c
        assert mm.execute() is c
    np.testing.assert_allclose(c, 2 * (a @ b) + c0)


def test_reset_operands_moves_the_in_place_target(rng):
    A, a, b, c = _operands(rng, "CSR")
    c2, c0, c20 = c.copy() + 1, c.copy(), c.copy() + 1
    with ustc.Matmul(A, b, c) as mm:
        mm.execute()
        assert mm.reset_operands(c=c2).execute() is c2
    np.testing.assert_allclose(c, a @ b + c0)
    np.testing.assert_allclose(c2, a @ b + c20)


SCALARS = [(2.0, 0.5), (np.float64(2.0), np.float64(0.5)), (3, 1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("alpha,beta", SCALARS)
def test_scalars_never_widen_the_result(dtype, alpha, beta, rng):
    A, a, b, c = _operands(rng, "CSR", dtype=dtype)
    y = ustc.matmul(A, b[:, 0], alpha=alpha)
    assert y.dtype == dtype
    c0 = c.copy()
    r = ustc.matmul(A, b, c, alpha=alpha, beta=beta)
    assert r is c and c.dtype == dtype
    np.testing.assert_allclose(c, alpha * (a @ b) + beta * c0, **tol(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("alpha,beta", SCALARS)
def test_scalars_never_widen_a_sparse_result(dtype, alpha, beta, rng):
    """Sparse c, the functional form, on the narrow dtypes (the ones a float64 scalar could
    widen): each dtype compiles its own merge of A @ B with C (~11 s). float64 with a sparse c:
    test_products.py::test_spgemm_with_sparse_c; complex64 stands for the complex kind."""
    A, a, b, c = _operands(rng, "CSR", dtype=dtype)
    C = ustc.Tensor.from_dense(c, "CSR")
    S = ustc.matmul(A, ustc.Tensor.from_dense(b, "CSR"), C, alpha=alpha, beta=beta)
    assert S.dtype == dtype
    np.testing.assert_allclose(S.to_dense(), alpha * (a @ b) + beta * c, **tol(dtype))


def test_scalar_kind_still_counts(rng):
    A = ustc.Tensor.from_dense(np.array([[1, 0], [2, 3]], dtype=np.int64), "CSR")
    x = np.array([1, 1], dtype=np.int64)
    assert ustc.matmul(A, x).dtype == np.int64
    y = ustc.matmul(A, x, alpha=0.5)                    # an int product scaled by 0.5 is float
    assert y.dtype == np.float64 and y.tolist() == [0.5, 2.5]
    z = ustc.matmul(ustc.Tensor.from_dense(np.eye(2, dtype=np.float32), "CSR"), np.ones(2, np.float32), alpha=1j)
    assert z.dtype == np.complex64 and z.tolist() == [1j, 1j]


def test_c_sets_the_dtype_within_its_kind(rng):
    A, a, b, c = _operands(rng, "CSR")
    c32 = c.astype(np.float32)
    c0 = c32.copy()
    assert ustc.matmul(A, b, c32) is c32                # a float64 product stored in float32 c
    np.testing.assert_allclose(c32, a @ b + c0, rtol=1e-5, atol=1e-5)
    ci = np.zeros(c.shape, dtype=np.int64)
    with pytest.raises(ustc.UstcError, match=r"c \(int64\) is updated in place and cannot hold the float64"):
        ustc.matmul(A, b, ci)
    np.testing.assert_array_equal(ci, 0)


def test_read_only_c_is_refused(rng):
    A, _, b, c = _operands(rng, "CSR")
    c.flags.writeable = False
    with pytest.raises(ustc.UstcError, match="c is read-only"):
        ustc.Matmul(A, b, c).execute()
    np.testing.assert_allclose(ustc.matmul(A, b, c, out=np.empty_like(c)), ustc.matmul(A, b) + c)


def test_spgemm_into_dense_c(rng):
    a, b = random_dense(rng, (7, 6)), random_dense(rng, (6, 5))
    A, B = ustc.Tensor.from_dense(a, "CSR"), ustc.Tensor.from_dense(b, "COO")
    c = rng.standard_normal((7, 5))
    c0 = c.copy()
    with ustc.Matmul(A, B, c, alpha=2.0, beta=0.5) as mm:
        assert mm.execute() is c
        np.testing.assert_allclose(c, 2 * a @ b + 0.5 * c0)
        mm.execute()
        np.testing.assert_allclose(c, 2 * a @ b + 0.5 * (2 * a @ b + 0.5 * c0))
    out = np.empty((7, 5))
    assert ustc.matmul(A, B, c0, beta=0, out=out) is out
    np.testing.assert_allclose(out, a @ b)


DENSE_FORMATS = [fmt for fmt in (p.values[0] for p in named_2d()) if fmt.all_dense] + \
    [ustc.TensorFormat.parse("(i, j) -> (j : dense, i : dense)")]


def _dense_operand_cases() -> list:
    """Every registry format as A with the first dense format as B; the other dense formats
    (another layout of B: an SpMM kernel of its own per A format) with a row-major and a
    column-major A (CSR, CSC)."""
    out = [pytest.param(p.values[0], DENSE_FORMATS[0], id=f"{p.id}-{DENSE_FORMATS[0]}") for p in named_2d()]
    return out + [pytest.param(p.values[0], d, id=f"{p.id}-{d}") for d in DENSE_FORMATS[1:]
                  for p in named_2d() if p.id in ("CSR", "CSC")]


@pytest.mark.parametrize("fmt,dense_fmt", _dense_operand_cases())
def test_dense_format_tensors_are_dense_operands(dense_fmt, fmt, rng):
    A, a, b, c = _operands(rng, fmt)
    B = ustc.Tensor.from_dense(b, dense_fmt)
    mm = ustc.Matmul(A, B).plan()
    y = mm.execute()
    assert isinstance(y, np.ndarray)                    # a dense result, in B's package
    np.testing.assert_allclose(y, a @ b, **tol(b.dtype))
    assert mm.problem.out_format is None and not mm.problem.b.sparse   # SpMM, not SpGEMM
    C = ustc.Tensor.from_dense(c, dense_fmt)
    c0 = c.copy()
    assert ustc.matmul(A, B, C) is C                    # a dense-format c is updated in place
    np.testing.assert_allclose(np.asarray(C.to_dense()), a @ b + c0, **tol(b.dtype))


def test_dense_format_tensor_result_keeps_torch(rng):
    A, a, b, _ = _operands(rng, "CSR")
    B = ustc.Tensor.from_package(torch.from_numpy(b))
    assert B.format.all_dense
    y = ustc.matmul(A, B)
    assert isinstance(y, torch.Tensor)
    np.testing.assert_allclose(y.numpy(), a @ b)


def test_release_operands_keeps_the_plan(rng):
    A, a, b, c = _operands(rng, "CSR")
    c0 = c.copy()
    mm = ustc.Matmul(A, b, c).plan()
    mm.release_operands()
    with pytest.raises(ustc.UstcError, match="released"):
        mm.execute()
    with pytest.raises(ustc.UstcError, match="operands were released"):
        mm.reset_operands(c=c)
    c2 = c0 + 1
    assert mm.reset_operands_unchecked(A, 2 * b, c2).execute() is c2
    assert mm.plans == 1
    np.testing.assert_allclose(c2, 2 * a @ b + c0 + 1)
    np.testing.assert_array_equal(c, c0)
    mm.free()
    with pytest.raises(ustc.UstcError, match="released"):
        mm.reset_operands(A, b, c)


@pytest.mark.parametrize("fmt", named_2d())
def test_float16_products_accumulate_in_float32(fmt, rng):
    """float16 operands on the CPU: float16 results, computed in float32 (Numba has no CPU
    float16), operands changed in place between executes are seen, c updated in place."""
    A, a, b, c = _operands(rng, fmt, dtype=np.float16)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    want = a32 @ b32
    y = ustc.matmul(A, b)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), want, rtol=2e-3, atol=2e-3)
    c0 = c.astype(np.float32)
    assert ustc.matmul(A, b, c, alpha=2.0) is c and c.dtype == np.float16
    np.testing.assert_allclose(c.astype(np.float32), 2 * want + c0, rtol=4e-3, atol=4e-3)
    x = b[:, 0].copy()
    with ustc.Matmul(A, x) as mm:
        mm.execute()
        x[:] = 1
        np.testing.assert_allclose(mm.execute().astype(np.float32), a32 @ np.ones(a.shape[1], np.float32),
                                   rtol=2e-3, atol=2e-3)
    out = np.empty(a.shape[0], np.float16)
    assert ustc.matmul(A, x, out=out) is out


def test_float16_spgemm_and_torch(rng):
    a, b = random_dense(rng, (6, 5), dtype=np.float16), random_dense(rng, (5, 4), dtype=np.float16)
    S = ustc.matmul(ustc.Tensor.from_dense(a, "CSR"), ustc.Tensor.from_dense(b, "COO"))
    assert S.dtype == np.float16
    np.testing.assert_allclose(np.asarray(S.to_dense(), np.float32), a.astype(np.float32) @ b.astype(np.float32),
                               rtol=2e-3, atol=2e-3)
    y = ustc.matmul(ustc.Tensor.from_dense(a, "CSR"), torch.from_numpy(b))
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float16
