"""ustc tensors in scipy.sparse.linalg: ``ustc.aslinearoperator`` (planned Matmuls), the
``matvec`` / ``rmatvec`` / ``rmatmat`` protocol that lets SciPy's solvers take a Tensor as it is,
and SciPy's cg, gmres, bicgstab, eigsh and svds on both, against SciPy on the same matrix."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import ustc
from matmul_helpers import named_2d, random_dense, sparse
from ustc.ops import linop

SHAPES = [(5, 7), (7, 5), (1, 6), (6, 1), (0, 4), (4, 0)]


def poisson_2d(n: int):
    """The 5-point Laplacian on an n x n grid, built by ustc (kron of 1-D ones) and by SciPy."""
    T = ustc.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    I = ustc.eye(n)
    Ts = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
    Is = sp.eye_array(n)
    return ustc.kron(T, I) + ustc.kron(I, T), (sp.kron(Ts, Is) + sp.kron(Is, Ts)).tocsr()


@pytest.mark.parametrize("fmt", named_2d())
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_operator_products_in_every_format(fmt, shape, rng):
    A = sparse(random_dense(rng, shape), fmt)
    dense = A.to_dense()
    op = ustc.aslinearoperator(A)
    assert isinstance(op, sla.LinearOperator) and op.shape == shape and op.dtype == A.dtype
    m, n = shape
    x, y = rng.standard_normal(n), rng.standard_normal(m)
    X, Y = rng.standard_normal((n, 3)), rng.standard_normal((m, 2))
    np.testing.assert_allclose(op.matvec(x), dense @ x, atol=1e-12)
    np.testing.assert_allclose(op.rmatvec(y), dense.T @ y, atol=1e-12)
    np.testing.assert_allclose(op.matmat(X), dense @ X, atol=1e-12)
    np.testing.assert_allclose(op.rmatmat(Y), dense.T @ Y, atol=1e-12)
    np.testing.assert_allclose(op @ x, dense @ x, atol=1e-12)
    np.testing.assert_allclose(op.H @ y, dense.T @ y, atol=1e-12)
    np.testing.assert_allclose(op.matvec(x.reshape(n, 1)), (dense @ x).reshape(m, 1), atol=1e-12)
    # the protocol on the Tensor itself
    np.testing.assert_allclose(A.matvec(x), dense @ x, atol=1e-12)
    np.testing.assert_allclose(A.rmatvec(y), dense.T @ y, atol=1e-12)
    np.testing.assert_allclose(A.rmatmat(Y), dense.T @ Y, atol=1e-12)
    np.testing.assert_allclose(sla.aslinearoperator(A).matvec(x), dense @ x, atol=1e-12)


@pytest.mark.parametrize("dtypes", [(np.complex128, np.complex128), (np.complex128, np.float64),
                                    (np.float64, np.complex128), (np.float32, np.float64),
                                    (np.float32, np.float32), (np.int64, np.float64)], ids=str)
def test_adjoint_and_mixed_dtypes(dtypes, rng):
    a_dtype, x_dtype = dtypes
    dense = random_dense(rng, (6, 4), 0.5, a_dtype)
    if np.dtype(a_dtype).kind == "i":
        dense = np.round(dense * 4).astype(a_dtype)
    A = ustc.Tensor.from_dense(dense, "CSR")
    x = random_dense(rng, (4,), 1.0, x_dtype)
    y = random_dense(rng, (6,), 1.0, x_dtype)
    op = ustc.aslinearoperator(A)
    want = np.result_type(a_dtype, x_dtype)
    tol = {"rtol": 1e-5} if np.dtype(want) in (np.float32, np.complex64) else {"rtol": 1e-12}
    for got, oracle in ((op.matvec(x), dense @ x), (op.rmatvec(y), dense.conj().T @ y),
                        (op.rmatmat(y[:, None]), dense.conj().T @ y[:, None]),
                        (A.matvec(x), dense @ x), (A.rmatvec(y), dense.conj().T @ y),
                        (A.rmatmat(y[:, None]), dense.conj().T @ y[:, None])):
        assert got.dtype == want
        np.testing.assert_allclose(got, oracle, atol=1e-6, **tol)


def test_plan_once_execute_per_call_fresh_results(counted_plans, rng):
    A = ustc.Tensor.from_dense(random_dense(rng, (8, 8), 0.5), "DCSR")
    op = ustc.aslinearoperator(A)
    x = rng.standard_normal(8)
    x_before = x.copy()
    first = op.matvec(x)
    kept = first.copy()
    for _ in range(5):
        again = op.matvec(2 * x)
        assert again is not first and not np.shares_memory(again, first)
    np.testing.assert_array_equal(first, kept)                     # SciPy may keep what it was given
    np.testing.assert_array_equal(x, x_before)                     # x is only read
    op.rmatvec(x)
    op.rmatvec(x)
    op.matmat(np.ones((8, 2)))
    op.matmat(np.ones((8, 2)))
    assert len(counted_plans) == 3                                 # A x, A^T x, A X: one plan each
    assert len(op.plan_info) == 3
    A.values[:] *= 2                                               # values changed in place are seen
    np.testing.assert_allclose(op.matvec(x), 2 * kept)
    op.release()
    np.testing.assert_allclose(op.matvec(x), 2 * kept)             # plans again after release
    assert len(counted_plans) == 4


def test_plans_are_bounded(counted_plans):
    op = ustc.aslinearoperator(ustc.eye(4))
    for k in range(1, linop.MAX_PLANS + 4):
        np.testing.assert_array_equal(op.matmat(np.ones((4, k))), np.ones((4, k)))
    assert len(op.plan_info) == linop.MAX_PLANS


def test_operator_inputs_and_errors(rng):
    dense = random_dense(rng, (5, 4), 0.5)
    for source in (sp.csr_array(dense), sp.coo_matrix(dense), dense):
        op = ustc.aslinearoperator(source)
        np.testing.assert_allclose(op.matvec(np.ones(4)), dense @ np.ones(4), atol=1e-12)
    with pytest.raises(ustc.ShapeError, match=r"aslinearoperator: A has shape \(2, 3, 4\); a linear operator is a "
                                              r"matrix"):
        ustc.aslinearoperator(np.ones((2, 3, 4)))
    A = ustc.Tensor.from_dense(dense, "CSR")
    with pytest.raises(ustc.ShapeError, match=r"matvec: x has shape \(5,\), expected \(4,\) or \(4, 1\)"):
        A.matvec(np.ones(5))
    with pytest.raises(ustc.ShapeError, match=r"rmatmat: X has shape \(4, 2\), expected \(5, k\)"):
        A.rmatmat(np.ones((4, 2)))
    with pytest.raises(ustc.ShapeError, match=r"matmat: X has shape \(3, 2\), expected \(4, k\)"):
        ustc.aslinearoperator(A)._matmat(np.ones((3, 2)))
    A._device = "cuda"                 # what a tensor on a GPU reports (no GPU needed to check)
    with pytest.raises(ustc.DeviceError, match="scipy.sparse.linalg works on host arrays"):
        ustc.aslinearoperator(A)


# --------------------------------------------------------------------------- SciPy's solvers


@pytest.mark.parametrize("solver", ["cg", "gmres", "bicgstab", "minres"])
@pytest.mark.parametrize("how", ["operator", "tensor"])
def test_scipy_krylov_solvers(solver, how, counted_plans):
    A, S = poisson_2d(12)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    operand = ustc.aslinearoperator(A) if how == "operator" else A
    kwargs = {"rtol": 1e-10} if solver != "minres" else {"rtol": 1e-12}
    x, info = getattr(sla, solver)(operand, b, **kwargs)
    assert info == 0
    np.testing.assert_allclose(x, sla.spsolve(S.tocsc(), b), rtol=1e-6, atol=1e-8)
    assert len(counted_plans) == 1         # planned once (operator) or once through the plan cache (tensor)


@pytest.mark.parametrize("fmt", ["CSR", "DIAI", "BSR(2, 2)"])
@pytest.mark.parametrize("how", ["operator", "tensor"])
def test_eigsh_matches_scipy(fmt, how):
    A, S = poisson_2d(10)
    A = A.convert(fmt)
    operand = ustc.aslinearoperator(A) if how == "operator" else A
    v0 = np.random.default_rng(0).random(A.shape[0])     # not ones: that is orthogonal to half the eigenvectors
    for which in ("LM", "SA"):
        got = sla.eigsh(operand, k=4, which=which, v0=v0, return_eigenvectors=False)
        want = sla.eigsh(S, k=4, which=which, v0=v0, return_eigenvectors=False)
        np.testing.assert_allclose(np.sort(got), np.sort(want), rtol=1e-8)
    vals, vecs = sla.eigsh(operand, k=3, v0=v0)
    np.testing.assert_allclose(S @ vecs, vecs * vals, atol=1e-8)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("how", ["operator", "tensor"])
def test_svds_matches_scipy(dtype, how):
    rng = np.random.default_rng(3)
    dense = random_dense(rng, (40, 25), 0.3, dtype)
    A = ustc.Tensor.from_dense(dense, "DCSC")
    operand = ustc.aslinearoperator(A) if how == "operator" else A
    got = sla.svds(operand, k=4, return_singular_vectors=False, rng=np.random.default_rng(0))
    want = sla.svds(sp.csr_array(dense), k=4, return_singular_vectors=False, rng=np.random.default_rng(0))
    np.testing.assert_allclose(np.sort(got), np.sort(want), rtol=1e-8)
    np.testing.assert_allclose(np.sort(got), np.sort(np.linalg.svd(dense, compute_uv=False))[-4:], rtol=1e-8)
    u, s, vh = sla.svds(operand, k=3, rng=np.random.default_rng(0))
    np.testing.assert_allclose(dense @ vh.conj().T, u * s, atol=1e-8)


def test_lobpcg_uses_matmat():
    A, S = poisson_2d(10)
    X = np.random.default_rng(1).standard_normal((A.shape[0], 3))
    op = ustc.aslinearoperator(A)
    got, _ = sla.lobpcg(op, X, largest=True, tol=1e-6, maxiter=200)
    want, _ = sla.lobpcg(S, X, largest=True, tol=1e-6, maxiter=200)
    np.testing.assert_allclose(np.sort(got), np.sort(want), rtol=1e-6)
    assert any(tail == (3,) for _, _, tail in op._plans)          # block products: one planned SpMM
