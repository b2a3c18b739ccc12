"""CG and BiCGSTAB whose whole state can be kept and restored: the distributed solves' loops.

:mod:`ustc.ops.krylov` keeps its solvers' state (residual, search direction, the scalars of
the recurrences) inside the function, so a solve restarted from a checkpointed ``x`` would
rebuild its Krylov space and take other iterations. These loops make the same backend calls
in the same order as :func:`ustc.ops.krylov.cg` and :func:`ustc.ops.krylov.bicgstab` (no
preconditioner or Jacobi's; the distributed backend
:class:`~ustc.distributed.worker.BlockVectors` all-reduces every sum), so they take the same
iterations as ``ustc.solve``, and in addition:

* ``keep(it, state)`` is called at the end of every iteration ``it`` with a function giving
  the state (a dict of this rank's vectors and the scalars): the checkpoint
  :class:`~ustc.distributed.checkpoint.Watch` copies it when due;
* ``state=`` starts the loop from such a state instead of ``x0``: the iterations that follow
  are those of the uninterrupted solve, bit for bit (every all-reduce adds in rank order).

Each returns ``(x, iterations, residual_norm, converged)`` as krylov's do; ``iterations``
counts this call's iterations only.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import UstcError
from ..ops.krylov import check_finite

#: the state each method keeps, besides ``x`` (``z``: CG with Jacobi only)
STATE = {"cg": ("r", "p", "rr", "rz"), "bicgstab": ("r", "r0", "p", "v", "rho", "alpha", "omega", "rr")}


def _restore(method, state, name, out=None):
    if name not in state:
        raise UstcError(f"ustc.distributed.solve: the {method} checkpoint has no {name!r} (its keys: "
                        f"{sorted(state)}); was it taken with another preconditioner?")
    value = state[name]
    if out is None:
        return value
    out[...] = value
    return out


def cg(op, b, x, dinv, rtol, atol, maxiter, *, state=None, keep=None):
    """CG as :func:`ustc.ops.krylov.cg` (``dinv``: None or Jacobi's vector)."""
    vec = op.vec
    r, q = vec.empty(b.size, b.dtype), vec.empty(b.size, b.dtype)
    stop = max(rtol * vec.norm2(b), atol)
    jacobi = dinv is not None
    scale = dinv if jacobi else np.ones(1, dtype=b.dtype)
    z = vec.empty(b.size, b.dtype) if jacobi else r
    p = op.v                      # the planned operand doubles as the search direction
    if state is None:
        rr = vec.residual(r, b, op.apply(x, q))
        if jacobi:
            vec.scale_into(z, dinv, r)
        rz = vec.dot(r, z)
        vec.copy(p, z)
    else:
        _restore("cg", state, "r", r)
        _restore("cg", state, "p", p)
        if jacobi:
            _restore("cg", state, "z", z)
        elif "z" in state:
            raise UstcError("ustc.distributed.solve: the cg checkpoint was taken with Jacobi's preconditioner; "
                            "resume it with preconditioner='jacobi'")
        rr, rz = float(_restore("cg", state, "rr")), b.dtype.type(_restore("cg", state, "rz"))
    check_finite("cg", 0, stop, rr, rz)

    def snapshot():
        kept = {"x": x, "r": r, "p": p, "rr": rr, "rz": rz}
        return {**kept, "z": z} if jacobi else kept

    it = 0
    for it in range(1, maxiter + 1):
        if math.sqrt(rr) <= stop:
            return x, it - 1, math.sqrt(rr), True
        pq = vec.dot(p, op.apply(p, q))
        check_finite("cg", it, pq)
        if pq == 0:
            break
        alpha = rz / pq
        rr, rz_new = vec.cg_step(x, r, z, p, q, scale, alpha, jacobi)
        check_finite("cg", it, rr, rz_new)
        vec.xpby(z, rz_new / rz, p)
        rz = rz_new
        if keep is not None:
            keep(it, snapshot)
    return x, it, math.sqrt(rr), math.sqrt(rr) <= stop


def _precondition(vec, out, dinv, v) -> None:
    if dinv is None:
        vec.copy(out, v)
    else:
        vec.scale_into(out, dinv, v)


def bicgstab(op, b, x, dinv, rtol, atol, maxiter, *, state=None, keep=None):
    """BiCGSTAB as :func:`ustc.ops.krylov.bicgstab`, right-preconditioned by ``dinv`` (None or
    Jacobi's vector)."""
    vec = op.vec
    n, dt = b.size, b.dtype
    r, v, t = vec.empty(n, dt), vec.zeros(n, dt), vec.empty(n, dt)
    stop = max(rtol * vec.norm2(b), atol)
    if state is None:
        rr = vec.residual(r, b, op.apply(x, t))
        r0 = vec.asarray(r, dt, copy=True)
        p = vec.zeros(n, dt)
        rho = alpha = omega = dt.type(1)
    else:
        _restore("bicgstab", state, "r", r)
        _restore("bicgstab", state, "v", v)
        r0 = _restore("bicgstab", state, "r0", vec.empty(n, dt))
        p = _restore("bicgstab", state, "p", vec.empty(n, dt))
        rr = float(_restore("bicgstab", state, "rr"))
        rho, alpha, omega = (dt.type(_restore("bicgstab", state, k)) for k in ("rho", "alpha", "omega"))
    s, ph, sh = vec.empty(n, dt), vec.empty(n, dt), vec.empty(n, dt)
    check_finite("bicgstab", 0, stop, rr)

    def snapshot():
        return {"x": x, "r": r, "r0": r0, "p": p, "v": v, "rho": rho, "alpha": alpha, "omega": omega, "rr": rr}

    it = 0
    for it in range(1, maxiter + 1):
        if math.sqrt(rr) <= stop:
            return x, it - 1, math.sqrt(rr), True
        rho_new = vec.dot(r0, r)
        check_finite("bicgstab", it, rho_new)
        if rho_new == 0 or omega == 0:
            break
        vec.bicg_p(p, r, (rho_new / rho) * (alpha / omega), omega, v)
        rho = rho_new
        _precondition(vec, ph, dinv, p)
        op.apply(ph, v)
        denom = vec.dot(r0, v)
        check_finite("bicgstab", it, denom)
        if denom == 0:
            break
        alpha = rho / denom
        ss = vec.axpy_norm(s, r, -alpha, v)
        check_finite("bicgstab", it, alpha, ss)
        if math.sqrt(ss) <= stop:
            vec.bicg_x(x, alpha, ph, 0.0, ph)
            return x, it, math.sqrt(ss), True
        _precondition(vec, sh, dinv, s)
        op.apply(sh, t)
        tt = vec.dot(t, t)
        omega = vec.dot(t, s) / tt if tt != 0 else dt.type(0)
        check_finite("bicgstab", it, tt, omega)
        vec.bicg_x(x, alpha, ph, omega, sh)
        rr = vec.axpy_norm(r, s, -omega, t)
        if keep is not None:
            keep(it, snapshot)
    return x, it, math.sqrt(rr), math.sqrt(rr) <= stop


SOLVERS = {"cg": cg, "bicgstab": bicgstab}
