"""GMRES and CG on a host CSR matrix through their fused loops (ustc.ops.krylov.gmres_rows /
cg_rows, ustc.ops._vector.gmres_cycle / cg_loop) against the per-step paths they replace and
against SciPy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ustc
from ustc.ops import _vector, krylov


def poisson(n: int, dtype=np.float64):
    return sp.diags_array([-1.0, -1.0, 4.0, -1.0, -1.0], offsets=[-n, -1, 0, 1, n], shape=(n * n, n * n),
                          format="csr").astype(dtype)


def convection(n: int, dtype=np.float64):
    """A nonsymmetric matrix (upwinded convection on a 1-D grid, diagonally dominant)."""
    return sp.diags_array([-1.6, 3.0, -0.4], offsets=[-1, 0, 1], shape=(n, n), format="csr").astype(dtype)


@pytest.fixture
def cycles(monkeypatch):
    """Counts the calls of the fused cycle."""
    calls = []
    inner = krylov.gmres_rows

    def counted(*args, **kw):
        calls.append(1)
        return inner(*args, **kw)

    monkeypatch.setattr(krylov, "FUSED", {**krylov.FUSED, "gmres": counted})
    return calls


def solve_both(monkeypatch, a, b, **kw):
    fused = ustc.solve(a, b, "gmres", return_info=True, **kw)
    monkeypatch.setattr(krylov, "FUSED_GMRES_ROWS", 0)
    plain = ustc.solve(a, b, "gmres", return_info=True, **kw)
    monkeypatch.undo()
    return fused, plain


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("preconditioner", [None, "jacobi"])
def test_fused_matches_per_step_path(monkeypatch, cycles, dtype, preconditioner):
    s = convection(300, dtype)
    if np.dtype(dtype).kind == "c":
        s = s + 0.3j * sp.eye_array(300, format="csr")
    rng = np.random.default_rng(3)
    b = rng.standard_normal(300).astype(dtype)
    rtol = 1e-5 if dtype == np.float32 else 1e-10
    (x, info), (x_plain, info_plain) = solve_both(monkeypatch, ustc.Tensor.from_package(s), b, restart=7,
                                                  rtol=rtol, preconditioner=preconditioner)
    assert cycles and info.converged and info_plain.converged
    assert abs(info.iterations - info_plain.iterations) <= 1
    assert np.linalg.norm(b - s @ x) <= 2 * rtol * np.linalg.norm(b)
    assert np.allclose(x, x_plain, rtol=1e-3 if dtype == np.float32 else 1e-7)


def test_poisson_against_scipy(cycles):
    s = poisson(30)
    b = np.ones(900)
    x, info = ustc.solve(ustc.Tensor.from_package(s), b, "gmres", rtol=1e-8, return_info=True)
    ref, code = spla.gmres(s, b, rtol=1e-8, restart=30)
    assert cycles and info.converged and code == 0
    assert np.linalg.norm(b - s @ x) <= 1e-8 * np.linalg.norm(b)
    assert np.allclose(x, ref, rtol=1e-6)


def test_int32_indices_and_maxiter(cycles):
    s = convection(200)
    s.indices, s.indptr = s.indices.astype(np.int32), s.indptr.astype(np.int32)
    a = ustc.Tensor.from_package(s)
    b = np.arange(200.0)
    x, info = ustc.solve(a, b, "gmres", restart=5, maxiter=12, check=False, return_info=True)
    assert cycles and info.iterations == 12 and not info.converged
    assert info.residual_norm == pytest.approx(np.linalg.norm(b - s @ x), rel=1e-9)


def test_exhausted_krylov_space(cycles):
    """A restart longer than the system: the Krylov space runs out (||w|| = 0) and the
    solution is exact."""
    s = sp.csr_array(np.diag([1.0, 2.0, 3.0]) + np.diag([0.5, 0.5], 1))
    b = np.array([1.0, -2.0, 0.5])
    x, info = ustc.solve(ustc.Tensor.from_package(s), b, "gmres", restart=30, return_info=True)
    assert cycles and info.converged and info.iterations <= 3
    assert np.allclose(s @ x, b)


def test_breakdown_raises(cycles):
    """||A v||^2 overflowing inside the cycle raises SolveError naming the iteration."""
    s = convection(50) * 1e300
    with pytest.raises(ustc.SolveError, match="broke down at iteration 1"):
        ustc.solve(ustc.Tensor.from_package(s), np.ones(50), "gmres")
    assert cycles


def test_other_formats_and_sizes_take_the_per_step_path(monkeypatch, cycles):
    s = convection(100)
    b = np.ones(100)
    ustc.solve(ustc.Tensor.from_package(s).convert("CSC"), b, "gmres")
    assert not cycles
    monkeypatch.setattr(krylov, "FUSED_GMRES_ROWS", 99)
    ustc.solve(ustc.Tensor.from_package(s), b, "gmres")
    assert not cycles
    ustc.solve(ustc.Tensor.from_package(s), b, "gmres", preconditioner=lambda r: r)
    assert not cycles


def test_gram_schmidt_chunks_orthonormalise():
    """The fused cycle's basis is orthonormal to working precision across several chunks."""
    n = 3 * _vector.GS_CHUNK + 17
    s = convection(n)
    m = 12
    V = np.empty((m + 1, n))
    H = np.zeros((m + 1, m))
    cs, sn, g = np.zeros(m), np.zeros(m), np.zeros(m + 1)
    r = np.random.default_rng(0).standard_normal(n)
    g[0] = np.linalg.norm(r)
    V[0] = r / g[0]
    chunks = -(-n // _vector.GS_CHUNK)
    k, ok = _vector.gmres_cycle(s.indptr, s.indices, s.data, np.ones(1), False, V, H, cs, sn, g, np.empty(n),
                                np.empty(n), np.empty((chunks, m + 1)), np.empty(chunks), m, m, 0.0, 0.01)
    assert ok and k == m
    assert np.allclose(V @ V.T, np.eye(m + 1), atol=1e-12)


@pytest.fixture
def cg_loops(monkeypatch):
    calls = []
    inner = krylov.cg_rows
    monkeypatch.setattr(krylov, "FUSED", {**krylov.FUSED, "cg": lambda *a: calls.append(1) or inner(*a)})
    return calls


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("preconditioner", [None, "jacobi"])
def test_cg_fused_matches_per_step_path(monkeypatch, cg_loops, dtype, preconditioner):
    s = poisson(15, dtype)
    if np.dtype(dtype).kind == "c":                      # Hermitian positive definite
        s = sp.csr_array(s + 0.5j * (sp.eye_array(225, k=1) - sp.eye_array(225, k=-1)))
    s = sp.csr_array(s @ sp.diags_array(np.linspace(1, 3, 225)) @ s.conj().T + s) if preconditioner else s
    b = np.random.default_rng(2).standard_normal(225).astype(dtype)
    rtol = 1e-4 if dtype == np.float32 else 1e-10             # float32 stalls near 1e-5 on both paths
    a = ustc.Tensor.from_package(s.astype(dtype))
    x, info = ustc.solve(a, b, "cg", rtol=rtol, preconditioner=preconditioner, return_info=True)
    assert cg_loops
    monkeypatch.setattr(krylov, "FUSED", {})
    x_plain, info_plain = ustc.solve(a, b, "cg", rtol=rtol, preconditioner=preconditioner, return_info=True)
    assert info.converged and info_plain.converged     # rounding moves the count on this ill-conditioned system
    assert abs(info.iterations - info_plain.iterations) <= max(2, info_plain.iterations // 20)
    scale = np.abs(x_plain).max()
    tol = 1e-3 if dtype == np.float32 else 1e-7
    assert np.allclose(x, x_plain, rtol=tol, atol=tol * scale)
    ref, code = spla.cg(s, b.astype(np.result_type(dtype, np.float64)), rtol=rtol)
    assert code == 0 and np.allclose(x, ref, rtol=10 * tol, atol=10 * tol * scale)


def test_cg_maxiter_and_breakdown(cg_loops):
    s = poisson(20)
    a = ustc.Tensor.from_package(s)
    b = np.ones(400)
    x, info = ustc.solve(a, b, "cg", maxiter=7, check=False, return_info=True)
    assert info.iterations == 7 and not info.converged
    assert info.residual_norm == pytest.approx(np.linalg.norm(b - s @ x), rel=1e-9)
    with pytest.raises(ustc.SolveError, match=r"cg broke down at iteration \d"):
        ustc.solve(ustc.Tensor.from_package(s * 1e306), b, "cg")   # p·q overflows
    assert cg_loops


@pytest.fixture
def bicg_loops(monkeypatch):
    calls = []
    inner = krylov.bicgstab_rows
    monkeypatch.setattr(krylov, "FUSED", {**krylov.FUSED, "bicgstab": lambda *a: calls.append(1) or inner(*a)})
    return calls


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("preconditioner", [None, "jacobi"])
def test_bicgstab_fused_matches_per_step_path(monkeypatch, bicg_loops, dtype, preconditioner):
    s = convection(300, dtype)
    if np.dtype(dtype).kind == "c":
        s = s + 0.3j * sp.eye_array(300, format="csr")
    s = sp.csr_array(s @ sp.diags_array(np.linspace(1, 4, 300)).astype(dtype)) if preconditioner else s
    b = np.random.default_rng(4).standard_normal(300).astype(dtype)
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    a = ustc.Tensor.from_package(s)
    x, info = ustc.solve(a, b, "bicgstab", rtol=rtol, preconditioner=preconditioner, return_info=True)
    assert bicg_loops
    monkeypatch.setattr(krylov, "FUSED", {})
    x_plain, info_plain = ustc.solve(a, b, "bicgstab", rtol=rtol, preconditioner=preconditioner,
                                     return_info=True)
    assert info.converged and info_plain.converged
    assert abs(info.iterations - info_plain.iterations) <= max(2, info_plain.iterations // 20)
    scale = np.abs(x_plain).max()
    tol = 1e-3 if dtype == np.float32 else 1e-7
    assert np.allclose(x, x_plain, rtol=tol, atol=tol * scale)
    assert np.linalg.norm(b - s @ x) <= 2 * rtol * np.linalg.norm(b)


def test_bicgstab_maxiter_convergence_on_s_and_breakdown(bicg_loops):
    s = convection(200)
    a = ustc.Tensor.from_package(s)
    b = np.ones(200)
    x, info = ustc.solve(a, b, "bicgstab", maxiter=3, check=False, return_info=True)
    assert info.iterations == 3 and not info.converged
    assert info.residual_norm == pytest.approx(np.linalg.norm(b - s @ x), rel=1e-9)
    d = sp.csr_array(sp.diags_array(np.full(50, 2.0)))       # s = 0 after one step: converges on s
    x, info = ustc.solve(ustc.Tensor.from_package(d), np.ones(50), "bicgstab", return_info=True)
    assert info.converged and info.iterations == 1 and np.allclose(x, 0.5)
    with pytest.raises(ustc.SolveError, match=r"bicgstab broke down at iteration \d"):
        ustc.solve(ustc.Tensor.from_package(s * 1e306), b, "bicgstab")
    assert len(bicg_loops) == 3


@pytest.mark.parametrize("method", ["cg", "bicgstab", "gmres"])
@pytest.mark.parametrize("pairs", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_either_row_sum_in_the_fused_loops(monkeypatch, method, pairs, dtype):
    """The fused loops' products in either row sum (masked steps, two interleaved sums: ``two_sums``
    races them per solve) converge to SciPy's solution, in about the iterations of the race's choice
    (sums in another order: BiCGSTAB's count moves by a few)."""
    s = poisson(24, dtype)
    b = np.random.default_rng(5).standard_normal(s.shape[0]).astype(dtype)
    rtol = 1e-5 if dtype == np.float32 else 1e-10
    chosen = []
    monkeypatch.setattr(krylov, "two_sums", lambda rows, x: chosen.append(1) or pairs)
    x, info = ustc.solve(ustc.Tensor.from_package(s), b, method, rtol=rtol, return_info=True)
    monkeypatch.undo()
    other, info_other = ustc.solve(ustc.Tensor.from_package(s), b, method, rtol=rtol, return_info=True)
    assert chosen and info.converged and info_other.converged
    assert abs(info.iterations - info_other.iterations) <= max(1, info_other.iterations // 10)
    np.testing.assert_allclose(s @ x, b, rtol=0, atol=20 * rtol * np.linalg.norm(b))
    exact = spla.spsolve(s.astype(np.float64).tocsc(), b.astype(np.float64))
    assert np.linalg.norm(x - exact) <= (1e-3 if dtype == np.float32 else 1e-7) * np.linalg.norm(exact)


def test_two_sums_is_the_faster_by_the_clock(monkeypatch):
    """``two_sums`` keeps the row sum whose timed products were faster (an injected clock on which
    the two sums run slow, then the masked steps), runs both, and changes neither operand nor ``x``."""
    from ustc.kernels._race import KernelRace

    s = poisson(8)
    rows = (s.indptr, s.indices, s.data)
    x = np.arange(s.shape[0], dtype=np.float64)
    before = [a.copy() for a in rows + (x,)]
    real = krylov._product
    for slow in (1, 0):
        now, calls = [0.0], []

        def product(choice, *args):
            calls.append(choice)
            now[0] += 10.0 if choice == slow else 1.0
            real(choice, *args)

        monkeypatch.setattr(krylov, "_product", product)
        monkeypatch.setattr(krylov, "KernelRace", lambda: KernelRace(clock=lambda: now[0]))
        assert krylov.two_sums(rows, x) is (slow == 0)
        assert sorted(set(calls)) == [0, 1]
        monkeypatch.undo()
    for a, b in zip(before, rows + (x,)):
        np.testing.assert_array_equal(a, b)
