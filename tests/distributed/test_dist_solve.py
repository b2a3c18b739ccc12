"""SPMD Krylov solves reproduce single-process ustc.solve: same iterations, x within 1e-10
relative; no scheduler transitions during a solve; <= 3 synchronisations per CG iteration."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from dist_helpers import poisson2d

import ustc
import ustc.distributed as ud


def _rel(x, y):
    return np.linalg.norm(x - y) / np.linalg.norm(y)


@pytest.mark.parametrize("partition", [1, 2, 3, 7, [0, 50, 50, 144]], ids=str)
def test_cg_reproduces_single_process(rt, partition):
    a = ustc.Tensor.from_package(poisson2d(12))
    b = np.random.default_rng(0).standard_normal(144)
    x1, i1 = ustc.solve(a, b, "cg", rtol=1e-6, return_info=True)
    d = ud.DTensor.from_tensor(a, partition)
    x, info = ud.solve(d, b, "cg", rtol=1e-6, return_info=True)
    assert info.converged and info.iterations == i1.iterations
    assert _rel(x, x1) < 1e-10
    assert info.scheduler_transitions == 0
    # one halo exchange and two all-reduces per iteration; 4 before the loop (||b||, r0 and its halo, r.z)
    assert info.syncs == 3 * info.iterations + 4


def test_cg_jacobi_and_complex_hermitian(rt):
    a = poisson2d(10) @ sp.diags(np.linspace(1, 3, 100))
    a = (a + a.T).tocsr() / 2 + sp.eye(100)
    h = (a + 1j * (sp.eye(100, k=1) - sp.eye(100, k=-1)) * 0.3).tocsr()      # Hermitian positive definite
    b = np.ones(100) + 0.5j
    for m, pre in ((a, "jacobi"), (h, None)):
        t = ustc.Tensor.from_package(m)
        x1, i1 = ustc.solve(t, b if m is h else b.real, "cg", rtol=1e-8, preconditioner=pre, return_info=True)
        x, info = ud.solve(ud.DTensor.from_tensor(t, 3), b if m is h else b.real, "cg", rtol=1e-8,
                           preconditioner=pre, return_info=True)
        assert info.iterations == i1.iterations and _rel(x, x1) < 1e-10


@pytest.mark.parametrize("method", ["bicgstab", "gmres"])
@pytest.mark.parametrize("pre", [None, "jacobi"])
def test_nonsymmetric(rt, method, pre):
    n = 10
    conv = sp.diags([-1.3, 2.6, -0.7], [-1, 0, 1], shape=(n, n))
    a = (sp.kron(conv, sp.eye(n)) + sp.kron(sp.eye(n), sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))))
    t = ustc.Tensor.from_package(a.tocsr())
    b = np.random.default_rng(1).standard_normal(n * n)
    x1, i1 = ustc.solve(t, b, method, rtol=1e-8, preconditioner=pre, restart=7, return_info=True)
    x, info = ud.solve(ud.DTensor.from_tensor(t, [0, 30, 30, 100]), b, method, rtol=1e-8,
                       preconditioner=pre, restart=7, return_info=True)
    assert info.converged and info.iterations == i1.iterations
    assert _rel(x, x1) < 1e-8
    assert info.scheduler_transitions == 0


def test_x0_and_not_converged(rt):
    t = ustc.Tensor.from_package(poisson2d(8))
    d = ud.DTensor.from_tensor(t, 2)
    b = np.ones(64)
    x = ud.solve(d, b, "cg", rtol=1e-10)
    x2, info = ud.solve(d, b, "cg", x0=x, rtol=1e-10, return_info=True)
    assert info.iterations <= 1
    with pytest.raises(ustc.SolveError):
        ud.solve(d, b, "cg", rtol=1e-12, maxiter=2)
    _, info = ud.solve(d, b, "cg", rtol=1e-12, maxiter=2, check=False, return_info=True)
    assert not info.converged and info.iterations == 2
