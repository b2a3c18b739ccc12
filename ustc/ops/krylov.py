"""Krylov solvers over one planned :class:`~ustc.ops.plan.Matmul`: CG, BiCGSTAB, GMRES(m).

Every method plans ``A @ v`` once, for a work vector ``v`` it owns, and then
only executes it: each product writes new values into ``v`` in place and
calls ``execute(out=...)``. Vector updates are fused Numba kernels
(:mod:`ustc.ops._vector`). The optional Jacobi preconditioner is
``M^-1 = diag(A)^-1``; GMRES and BiCGSTAB apply it on the right, so the
residual they test is the true residual ``b - A x``.

Each solver returns ``(x, iterations, residual_norm, converged)`` where
convergence means ``||b - A x|| <= max(rtol * ||b||, atol)`` (SciPy's rule).
"""

from __future__ import annotations

import math

import numpy as np

from . import _vector as vec


class Operator:
    """``A @ v`` through one planned Matmul; ``apply(v, out)`` copies ``v`` into the planned operand.
    ``target="cuda"`` plans the product for the GPU (host vectors; the vector updates stay on
    the CPU)."""

    def __init__(self, a, n: int, dtype, target: str = "cpu"):
        from .plan import Matmul

        self.v = np.zeros(n, dtype=dtype)
        self.matmul = Matmul(a, self.v, options={"target": target} if target != "cpu" else None)
        self.matmul.plan()
        self.applications = 0

    def apply(self, v: np.ndarray, out: np.ndarray) -> np.ndarray:
        if v is not self.v:
            self.v[...] = v
        self.applications += 1
        return self.matmul.execute(out=out)


def _norm2(x) -> float:
    return math.sqrt(max(float(np.real(vec.dot(x, x))), 0.0))


def cg(op: Operator, b, x, dinv, rtol, atol, maxiter):
    r, q = np.empty_like(b), np.empty_like(b)
    stop = max(rtol * _norm2(b), atol)
    rr = vec.residual(r, b, op.apply(x, q))
    jacobi = dinv is not None
    dinv = dinv if jacobi else np.ones(1, dtype=b.dtype)
    z = np.empty_like(b) if jacobi else r
    if jacobi:
        vec.scale_into(z, dinv, r)
    rz = vec.dot(r, z)
    p = op.v                      # the planned operand doubles as the search direction
    p[...] = z
    it = 0
    for it in range(1, maxiter + 1):
        if math.sqrt(rr) <= stop:
            return x, it - 1, math.sqrt(rr), True
        pq = vec.dot(p, op.apply(p, q))
        if pq == 0:
            break
        alpha = rz / pq
        rr, rz_new = vec.cg_step(x, r, z, p, q, dinv, alpha, jacobi)
        vec.xpby(z, rz_new / rz, p)
        rz = rz_new
    return x, it, math.sqrt(rr), math.sqrt(rr) <= stop


def bicgstab(op: Operator, b, x, dinv, rtol, atol, maxiter):
    r, v, t = np.empty_like(b), np.zeros_like(b), np.empty_like(b)
    stop = max(rtol * _norm2(b), atol)
    rr = vec.residual(r, b, op.apply(x, t))
    r0 = r.copy()
    p, s = np.zeros_like(b), np.empty_like(b)
    ph, sh = np.empty_like(b), np.empty_like(b)
    rho = alpha = omega = b.dtype.type(1)
    it = 0
    for it in range(1, maxiter + 1):
        if math.sqrt(rr) <= stop:
            return x, it - 1, math.sqrt(rr), True
        rho_new = vec.dot(r0, r)
        if rho_new == 0 or omega == 0:
            break
        vec.bicg_p(p, r, (rho_new / rho) * (alpha / omega), omega, v)
        rho = rho_new
        _precondition(ph, dinv, p)
        op.apply(ph, v)
        denom = vec.dot(r0, v)
        if denom == 0:
            break
        alpha = rho / denom
        ss = vec.axpy_norm(s, r, -alpha, v)
        if math.sqrt(ss) <= stop:
            vec.bicg_x(x, alpha, ph, 0.0, ph)
            return x, it, math.sqrt(ss), True
        _precondition(sh, dinv, s)
        op.apply(sh, t)
        tt = vec.dot(t, t)
        omega = vec.dot(t, s) / tt if tt != 0 else b.dtype.type(0)
        vec.bicg_x(x, alpha, ph, omega, sh)
        rr = vec.axpy_norm(r, s, -omega, t)
    return x, it, math.sqrt(rr), math.sqrt(rr) <= stop


def _precondition(out, dinv, v) -> None:
    if dinv is None:
        out[...] = v
    else:
        vec.scale_into(out, dinv, v)


def gmres(op: Operator, b, x, dinv, rtol, atol, maxiter, restart: int):
    """Restarted GMRES(m), modified Gram-Schmidt Arnoldi, Givens rotations; ``maxiter``
    counts inner iterations (matrix products)."""
    n, m = b.size, max(1, min(restart, b.size))
    stop = max(rtol * _norm2(b), atol)
    r, w, z = np.empty_like(b), np.empty_like(b), np.empty_like(b)
    V = np.empty((m + 1, n), dtype=b.dtype)
    done = 0
    while True:
        beta = math.sqrt(vec.residual(r, b, op.apply(x, w)))
        if beta <= stop or done >= maxiter:
            return x, done, beta, beta <= stop
        H = np.zeros((m + 1, m), dtype=b.dtype)
        cs, sn = np.zeros(m, dtype=b.dtype), np.zeros(m, dtype=b.dtype)
        g = np.zeros(m + 1, dtype=b.dtype)
        g[0] = beta
        V[0] = r / beta
        k = 0
        while k < m and done < maxiter:
            _precondition(z, dinv, V[k])
            op.apply(z, w)
            done += 1
            for _ in range(2):  # modified Gram-Schmidt, twice: keeps V orthogonal near convergence
                for j in range(k + 1):
                    h = vec.dot(V[j], w)
                    H[j, k] += h
                    w -= h * V[j]
            h_next = _norm2(w)
            H[k + 1, k] = h_next
            if h_next != 0:
                V[k + 1] = w / h_next
            _givens(H, cs, sn, g, k)
            k += 1
            if abs(g[k]) <= stop or h_next == 0:   # converged, or the Krylov space is exhausted
                break
        y = np.linalg.solve(np.triu(H[:k, :k]), g[:k]) if k else np.zeros(0, dtype=b.dtype)
        _precondition(z, dinv, y @ V[:k])
        x += z


def _givens(H, cs, sn, g, k) -> None:
    for j in range(k):
        t = cs[j] * H[j, k] + sn[j] * H[j + 1, k]
        H[j + 1, k] = -np.conj(sn[j]) * H[j, k] + cs[j] * H[j + 1, k]
        H[j, k] = t
    a, c = H[k, k], H[k + 1, k]
    d = math.hypot(abs(a), abs(c))
    if d == 0:
        cs[k], sn[k] = 1, 0
    else:
        cs[k] = abs(a) / d
        sn[k] = (a / abs(a) if a != 0 else 1) * np.conj(c) / d
    H[k, k] = cs[k] * a + sn[k] * c
    H[k + 1, k] = 0
    g[k + 1] = -np.conj(sn[k]) * g[k]
    g[k] = cs[k] * g[k]
