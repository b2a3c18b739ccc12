"""ustc.solve: triangular substitution and Krylov methods against SciPy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ustc
from matmul_helpers import named_2d
from ustc.ops import plan_cache


def spd(n, seed=0):
    m = sp.random(n, n, density=0.05, random_state=seed)
    return ((m + m.T) + sp.eye(n) * 4).tocsr()


def nonsymmetric(n, seed=1):
    return (sp.random(n, n, density=0.05, random_state=seed) + sp.eye(n) * 3).tocsr()


@pytest.mark.parametrize("method", ["cg", "bicgstab", "gmres", None])
@pytest.mark.parametrize("pre", [None, "jacobi"])
def test_spd_methods(method, pre, rng):
    s = spd(120)
    b = rng.standard_normal(120)
    x, info = ustc.solve(ustc.Tensor.from_package(s), b, method, preconditioner=pre, return_info=True)
    assert info.converged and info.relative_residual <= 1e-8
    assert np.linalg.norm(s @ x - b) <= 1.01e-8 * np.linalg.norm(b)      # the convergence contract
    np.testing.assert_allclose(x, spla.spsolve(s.tocsc(), b), rtol=1e-5, atol=1e-6)
    assert info.method == (method or "cg")


@pytest.mark.parametrize("fmt", named_2d())
def test_every_named_format(fmt, rng):
    if any(lv.type.keyword == "structured" for lv in fmt.levels):
        pytest.skip("an n:m format cannot hold an arbitrary matrix")
    s = nonsymmetric(40, seed=7)
    A = ustc.Tensor.from_dense(s.toarray(), fmt)
    b = rng.standard_normal(40)
    x = ustc.solve(A, b, "bicgstab", preconditioner="jacobi")
    np.testing.assert_allclose(s @ x, b, atol=1e-6)
    x = ustc.solve(A, b, restart=5)
    np.testing.assert_allclose(s @ x, b, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_dtypes(dtype, rng):
    s = nonsymmetric(60).astype(dtype)
    if np.dtype(dtype).kind == "c":
        s = s + 1j * sp.random(60, 60, density=0.03, random_state=5)
    b = rng.standard_normal(60).astype(dtype)
    rtol = 1e-5 if dtype == np.float32 else 1e-10
    x = ustc.solve(ustc.Tensor.from_package(s.tocsr()), b, "gmres", rtol=rtol)
    assert x.dtype == np.dtype(dtype)
    np.testing.assert_allclose(s @ x, b, atol=1e-3 if dtype == np.float32 else 1e-8)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit", [False, True])
@pytest.mark.parametrize("fmt", ["CSR", "CSC", "COO"])
def test_triangular(lower, unit, fmt, rng):
    m = nonsymmetric(50).toarray()
    t = np.tril(m) if lower else np.triu(m)
    A = ustc.Tensor.from_dense(t, fmt)
    B = rng.standard_normal((50, 3))
    x, info = ustc.solve(A, B, unit_diagonal=unit, return_info=True)
    eff = t.copy()
    if unit:
        np.fill_diagonal(eff, 1)
    np.testing.assert_allclose(eff @ x, B, atol=1e-9)
    assert info.method == "triangular" and info.converged
    np.testing.assert_allclose(ustc.solve(A, B[:, 0], "triangular", unit_diagonal=unit), x[:, 0])


def test_triangular_errors(rng):
    t = np.tril(np.ones((4, 4)))
    t[2, 2] = 0
    with pytest.raises(ustc.SolveError, match=r"diagonal entry \(2, 2\)"):
        ustc.solve(ustc.Tensor.from_dense(t, "CSR"), np.ones(4))
    with pytest.raises(ustc.SolveError, match="needs a triangular matrix"):
        ustc.solve(ustc.Tensor.from_dense(np.ones((3, 3)), "CSR"), np.ones(3), "triangular")


def test_non_convergence(rng):
    s = nonsymmetric(80)
    A = ustc.Tensor.from_package(s)
    b = rng.standard_normal(80)
    with pytest.raises(ustc.SolveError, match=r"did not converge in 2 iterations: residual \d"):
        ustc.solve(A, b, "gmres", maxiter=2)
    x, info = ustc.solve(A, b, "gmres", maxiter=2, check=False, return_info=True)
    assert not info.converged and info.iterations == 2
    assert info.residual_norm == pytest.approx(np.linalg.norm(b - s @ x), rel=1e-6)


def test_iterative_solve_plans_exactly_once(rng, counted_plans, monkeypatch):
    """One plan for the whole solve, executed every iteration (on a small host CSR matrix: for the
    first residual, each GMRES restart's and the final one; the products of the iterations run in
    the fused loops of ustc.ops.krylov.FUSED); later solves with the same matrix take it from the
    plan cache (and give it back), a new matrix plans again."""
    from ustc.ops.plan import Matmul

    plans, executed = counted_plans, []
    run = Matmul.execute
    monkeypatch.setattr(Matmul, "execute", lambda self, **kw: executed.append(self) or run(self, **kw))
    s = spd(100)
    for k, method in enumerate(("cg", "bicgstab", "gmres", "cg")):
        executed.clear()
        _, info = ustc.solve(ustc.Tensor.from_package(s), rng.standard_normal(100), method, return_info=True)
        least = 2                          # every method of this small CSR system runs fused
        assert len(plans) == 1 and info.iterations > 3 and len(executed) >= least
        assert set(executed) == set(plans) and plans[0]._bound is None     # cached, holding no operand
    ustc.solve(ustc.Tensor.from_package(spd(90)), np.ones(90), "cg")
    assert len(plans) == 2 and plan_cache.stats()["hits"] == 3


def test_concurrent_solves_of_one_matrix_each_get_a_plan(rng):
    """A solve holds its plan out of the cache: a second solve of the same problem meanwhile
    plans its own instead of waiting, and both give correct answers."""
    import threading

    s = ustc.Tensor.from_package(spd(200))
    b = [rng.standard_normal(200) for _ in range(4)]
    out = [None] * 4
    threads = [threading.Thread(target=lambda k=k: out.__setitem__(k, ustc.solve(s, b[k], "cg", rtol=1e-10)))
               for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        np.testing.assert_allclose(spd(200) @ out[k], b[k], rtol=1e-7, atol=1e-7)


def test_x0_and_torch_rhs(rng):
    torch = pytest.importorskip("torch")
    s = spd(30)
    b = torch.from_numpy(rng.standard_normal(30))
    exact = spla.spsolve(s.tocsc(), b.numpy())
    x, info = ustc.solve(ustc.Tensor.from_package(s), b, x0=exact, return_info=True)
    assert isinstance(x, torch.Tensor) and info.iterations == 0
    np.testing.assert_allclose(x.numpy(), exact)


def test_bad_input():
    A = ustc.Tensor.from_dense(np.eye(3), "CSR")
    with pytest.raises(ustc.ShapeError, match="b has shape"):
        ustc.solve(A, np.ones(4))
    with pytest.raises(ustc.ShapeError, match="must be square"):
        ustc.solve(ustc.Tensor.from_dense(np.ones((2, 3)), "CSR"), np.ones(2))
    with pytest.raises(ustc.UstcError, match="method must be one of"):
        ustc.solve(A, np.ones(3), "lu")
    with pytest.raises(ustc.UstcError, match="preconditioner"):
        ustc.solve(A, np.ones(3), "cg", preconditioner="ilu")
    with pytest.raises(ustc.ShapeError, match="one right-hand side"):
        ustc.solve(ustc.Tensor.from_dense(np.ones((3, 3)) + np.eye(3), "CSR"), np.ones((3, 2)), "cg")
    with pytest.raises(ustc.SolveError, match="Jacobi preconditioner needs a nonzero diagonal"):
        ustc.solve(ustc.Tensor.from_dense(np.ones((3, 3)) - np.eye(3), "CSR"), np.ones(3), "gmres",
                   preconditioner="jacobi")
