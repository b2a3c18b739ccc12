"""``ustc.solve(..., preconditioner=M)`` with the caller's ``M``: a callable, a SciPy
LinearOperator (hand-built, and pyamg's ``ml.aspreconditioner()`` when pyamg is installed), a
ustc Tensor or a SciPy / NumPy matrix; iteration counts drop and the solution matches SciPy's
``spsolve``."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import ustc
from test_linop import poisson_2d

KRYLOV = ["cg", "bicgstab", "gmres"]


def graded_spd(n: int = 200):
    """SPD with a diagonal spread over four decades: Jacobi (and any good M) helps a lot."""
    rng = np.random.default_rng(0)
    d = np.logspace(0, 4, n)
    m = sp.random_array((n, n), density=0.02, rng=rng)
    off = (m + m.T) * 0.1
    s = (sp.diags_array(d) + off).tocsr()
    s = s + sp.diags_array(np.asarray(abs(off).sum(axis=1)).ravel())        # diagonally dominant
    return s.tocsr()


@pytest.mark.parametrize("method", KRYLOV)
def test_a_hand_built_linear_operator(method):
    s = graded_spd()
    n = s.shape[0]
    A = ustc.Tensor.from_package(s)
    b = np.random.default_rng(1).standard_normal(n)
    d = s.diagonal()
    calls = []

    def apply(r):
        calls.append(r.copy())
        return r / d
    M = sla.LinearOperator((n, n), matvec=apply, dtype=np.float64)
    _, plain = ustc.solve(A, b, method, return_info=True, maxiter=20 * n, check=False)
    x, info = ustc.solve(A, b, method, preconditioner=M, return_info=True)
    _, jacobi = ustc.solve(A, b, method, preconditioner="jacobi", return_info=True)
    assert info.converged and info.iterations < plain.iterations
    assert info.iterations == jacobi.iterations          # the same M as the built-in Jacobi
    np.testing.assert_allclose(x, sla.spsolve(s.tocsc(), b), rtol=1e-6, atol=1e-9)
    assert len(calls) >= info.iterations


@pytest.mark.parametrize("method", KRYLOV)
def test_an_exact_inverse_converges_at_once(method):
    s = graded_spd(120)
    lu = sla.splu(s.tocsc())
    b = np.random.default_rng(2).standard_normal(120)
    x, info = ustc.solve(ustc.Tensor.from_package(s), b, method, preconditioner=lu.solve, return_info=True)
    assert info.iterations <= 2
    np.testing.assert_allclose(x, lu.solve(b), rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("kind", ["tensor", "scipy", "numpy", "function"])
def test_matrix_and_callable_preconditioners(kind):
    s = graded_spd(80)
    inv_diag = sp.diags_array(1 / s.diagonal()).tocsr()
    M = {"tensor": ustc.Tensor.from_package(inv_diag), "scipy": inv_diag, "numpy": inv_diag.toarray(),
         "function": lambda r: inv_diag @ r}[kind]
    b = np.ones(80)
    x, info = ustc.solve(ustc.Tensor.from_package(s), b, "cg", preconditioner=M, return_info=True)
    _, jacobi = ustc.solve(ustc.Tensor.from_package(s), b, "cg", preconditioner="jacobi", return_info=True)
    assert info.converged and info.iterations == jacobi.iterations
    np.testing.assert_allclose(s @ x, b, atol=1e-7)


def test_the_preconditioner_gets_a_copy_and_inputs_are_untouched():
    s = graded_spd(60)
    A = ustc.Tensor.from_package(s)
    b = np.random.default_rng(3).standard_normal(60)
    b0, values0 = b.copy(), A.values.copy()
    d = s.diagonal()

    def scribbling(r):
        z = r / d
        r[:] = np.nan              # its argument is a copy: the solver's residual survives
        return z
    for method in KRYLOV:
        x = ustc.solve(A, b, method, preconditioner=scribbling)
        np.testing.assert_allclose(s @ x, b, atol=1e-6)
    np.testing.assert_array_equal(b, b0)
    np.testing.assert_array_equal(A.values, values0)


def test_complex_systems():
    rng = np.random.default_rng(4)
    s = (graded_spd(50) + 1j * sp.random_array((50, 50), density=0.02, rng=rng)).tocsr()
    b = rng.standard_normal(50) + 1j * rng.standard_normal(50)
    d = s.diagonal()
    for method in ("bicgstab", "gmres"):
        x = ustc.solve(ustc.Tensor.from_package(s), b, method, preconditioner=lambda r: r / d)
        np.testing.assert_allclose(s @ x, b, atol=1e-6)


def test_preconditioner_errors():
    s = graded_spd(30)
    A = ustc.Tensor.from_package(s)
    b = np.ones(30)
    with pytest.raises(ustc.ShapeError, match=r"the preconditioner \(ndarray\) has shape \(3, 3\); it must have a's "
                                              r"shape \(30, 30\)"):
        ustc.solve(A, b, "cg", preconditioner=np.eye(3))
    with pytest.raises(ustc.ShapeError, match=r"the preconditioner \(function\) returned an array of shape \(3,\) "
                                              r"for a vector of shape \(30,\)"):
        ustc.solve(A, b, "gmres", preconditioner=lambda r: r[:3])
    with pytest.raises(ustc.UstcError, match="returned complex values for a float64 system"):
        ustc.solve(A, b, "bicgstab", preconditioner=lambda r: r * 1j)
    with pytest.raises(ustc.UstcError, match="returned NoneType, not an array|returned an array of shape"):
        ustc.solve(A, b, "cg", preconditioner=lambda r: None)
    for bad in ("ilu", 5, object()):
        with pytest.raises(ustc.UstcError, match="preconditioner must be None, 'jacobi', a callable"):
            ustc.solve(A, b, "cg", preconditioner=bad)


def test_pyamg_on_poisson_2d():
    pyamg = pytest.importorskip("pyamg")
    A, S = poisson_2d(48)
    b = np.random.default_rng(5).standard_normal(A.shape[0])
    ml = pyamg.ruge_stuben_solver(S)
    M = ml.aspreconditioner(cycle="V")
    want = sla.spsolve(S.tocsc(), b)
    for method in KRYLOV:
        _, plain = ustc.solve(A, b, method, return_info=True, rtol=1e-10, maxiter=5000)
        x, info = ustc.solve(A, b, method, preconditioner=M, return_info=True, rtol=1e-10)
        assert info.converged and info.iterations <= 15 < plain.iterations
        np.testing.assert_allclose(x, want, rtol=1e-7, atol=1e-9)
