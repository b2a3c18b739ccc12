"""Krylov solvers over one planned :class:`~ustc.ops.plan.Matmul`: CG, BiCGSTAB, GMRES(m).

Every method plans ``A @ v`` once, for a work vector ``v`` it owns, and then
only executes it: each product writes new values into ``v`` in place and
calls ``execute(out=...)``. The solvers are written once against a vector
backend (:mod:`ustc.ops.vectors`): :class:`~ustc.ops.vectors.HostVectors`
(NumPy vectors, fused Numba CPU kernels) or
:class:`~ustc.ops.cuda_vectors.DeviceVectors` (CuPy vectors on the GPU,
fused numba-cuda kernels; the product reads and writes them zero-copy). On
the device the scalars the method branches on (inner products, norms) come
to the host as they are needed, a small copy each: two per CG iteration, six
per BiCGSTAB iteration, one per GMRES inner step, as solvers built on
cuSPARSE do. The optional preconditioner is Jacobi's ``M^-1 = diag(A)^-1``
(a vector of the backend, applied by the fused kernels) or a
:class:`Preconditioner`: any ``M(r) -> z`` the caller gives (a function, a
``scipy.sparse.linalg.LinearOperator`` such as pyamg's
``ml.aspreconditioner()``, a matrix), ``z`` approximating ``A^-1 r``. GMRES and
BiCGSTAB apply it on the right, so the residual they test is the true residual
``b - A x``; CG applies it as ``z = M r`` (M must be symmetric positive definite).

Each solver returns ``(x, iterations, residual_norm, converged)`` from the
residual it updates recursively, where convergence means
``||b - A x|| <= max(rtol * ||b||, atol)`` (SciPy's rule). Rounding lets that
recursive residual drift from the true one (in float32 by orders of magnitude),
so :func:`run` recomputes ``||b - A x||`` once at the end (:func:`true_residual`,
float64 for float32 / complex64 systems) and reports convergence from it. Every
scalar a solver branches on is checked as it arrives: a NaN or Inf (an overflow
or a breakdown, the inputs being finite) raises :class:`ustc.SolveError` in that
iteration (:func:`check_finite`).
"""

from __future__ import annotations

import cmath
import math
from typing import NamedTuple

import numpy as np

from .. import _threads
from ..errors import ShapeError, SolveError, UstcError
from ..kernels._race import KernelRace
from ..tensor import packages
from . import _vector
from ._vector import givens_column
from .vectors import HOST, KEEP, HostVectors


class Operator:
    """``A @ v`` through one planned Matmul; ``apply(v, out)`` copies ``v`` into the planned
    operand. The operand is a vector of ``vec`` (host or device); ``target="cuda"`` with host
    vectors plans the product for the GPU while the vector updates stay on the CPU.

    The plan comes from the plan cache when an earlier solve (or ``ustc.matmul``) planned the
    same problem, and goes back there on :meth:`close`: repeated solves with one matrix plan once.
    """

    def __init__(self, a, n: int, dtype, target: str = "cpu", vec=HOST):
        from . import plan_cache
        from .plan import Matmul, bind

        self.vec = vec
        self.v = vec.zeros(n, dtype)
        options = {"target": target} if target != "cpu" else {}
        bound = bind(a, self.v, None, 1, 0, False, False, options)
        self.problem = bound.problem
        mm = plan_cache.take(self.problem)
        fresh = mm is None
        if fresh:
            mm = Matmul(a, self.v, options=options or None)
        mm._adopt((a, self.v, None, 1, 0), bound)
        try:
            if fresh:
                mm.plan()
        except BaseException:
            mm._detach()
            raise
        self.matmul = mm
        self.applications = 0
        #: ``(pos, crd, values)`` when the method runs its fused loop on CSR rows (:func:`csr_rows`)
        self.rows = None

    def close(self) -> None:
        """Give the plan back to the plan cache, holding no operand (released if caching is off)."""
        from . import plan_cache

        self.matmul._detach()
        if plan_cache.stats()["maxsize"]:
            plan_cache.put(self.problem, self.matmul)
        else:
            self.matmul.release()

    def apply(self, v, out):
        if v is not self.v:
            self.vec.copy(self.v, v)
        self.applications += 1
        self.matmul.execute(out=out)
        return out


class Preconditioner:
    """``z = M(r)`` for a preconditioner the caller gives: ``fn`` is called with a vector of the
    backend (a NumPy vector on the host, CuPy on a device) holding a copy of ``r``, so it may
    keep or modify its argument; it returns ``z`` as an array of ``n`` entries (shape (n,) or
    (n, 1), host or device) that is copied into the solver's vector. ``name`` says what ``fn``
    is in errors. ``applications`` counts the calls."""

    def __init__(self, fn, n: int, dtype, vec, name: str = "the preconditioner"):
        self.fn, self.n, self.dtype, self.vec, self.name = fn, n, np.dtype(dtype), vec, name
        self.arg = vec.empty(n, self.dtype)
        self.applications = 0

    def apply(self, out, v) -> None:
        """``out = M(v)``; ShapeError / UstcError naming the preconditioner when it returns something
        else than ``n`` numbers of a kind the system's dtype holds."""
        self.vec.copy(self.arg, v)
        z = self.fn(self.arg)
        self.applications += 1
        if not packages.is_cupy(z):
            try:
                z = packages.host_array(z)                        # NumPy, torch CPU, sequences
            except Exception as exc:  # noqa: BLE001 - whatever NumPy cannot read is a bad result
                raise UstcError(f"solve: {self.name} returned {type(z).__name__}, not an array: {exc}") from None
        if tuple(z.shape) not in ((self.n,), (self.n, 1)):
            raise ShapeError(f"solve: {self.name} returned an array of shape {tuple(z.shape)} for a vector of "
                             f"shape ({self.n},); it must return ({self.n},)")
        if z.dtype.kind == "c" and self.dtype.kind != "c":
            raise UstcError(f"solve: {self.name} returned complex values for a {self.dtype} system")
        if z.dtype.kind not in "biufc":
            raise UstcError(f"solve: {self.name} returned values of dtype {z.dtype}; numbers only")
        z = z.reshape(self.n)
        if packages.is_cupy(self.arg) != packages.is_cupy(z):     # a host M on device vectors, or back
            z = self.vec.asarray(z if not packages.is_cupy(z) else z.get(), self.dtype)
        self.vec.copy(out, z)


#: what :func:`cg` and :func:`bicgstab` keep besides ``x`` (``state=`` / ``keep=``); CG with a
#: preconditioner keeps ``z`` too
KEPT_STATE = {"cg": ("r", "p", "rr", "rz"), "bicgstab": ("r", "r0", "p", "v", "rho", "alpha", "omega", "rr")}


def cg(op: Operator, b, x, dinv, rtol, atol, maxiter, *, state=None, keep=None):
    """Conjugate gradients; ``dinv``: None, Jacobi's ``1 / diag(A)`` or a :class:`Preconditioner`.
    With ``op.rows`` set, the fused loop of :data:`FUSED` runs the iterations. ``state``: start
    from a kept state (:data:`KEPT_STATE`, ``z`` with a preconditioner) instead of ``x``'s
    residual, continuing the kept solve's iterations bit for bit; ``keep(it, snapshot)`` after
    every iteration ``it``, ``snapshot()`` giving that state and ``x`` (a checkpoint's copy)."""
    if getattr(op, "rows", None) is not None and "cg" in FUSED and state is None and keep is None:
        return FUSED["cg"](op, op.rows, b, x, dinv, rtol, atol, maxiter)
    vec = op.vec
    r, q = vec.empty(b.size, b.dtype), vec.empty(b.size, b.dtype)
    stop = max(rtol * vec.norm2(b), atol)
    user = dinv if isinstance(dinv, Preconditioner) else None
    jacobi = dinv is not None and user is None
    dinv = dinv if jacobi else vec.asarray(np.ones(1, dtype=b.dtype), b.dtype)
    z = vec.empty(b.size, b.dtype) if jacobi or user is not None else r
    p = op.v                      # the planned operand doubles as the search direction
    if state is None:
        rr = vec.residual(r, b, op.apply(x, q))
        if jacobi:
            vec.scale_into(z, dinv, r)
        elif user is not None:
            user.apply(z, r)
        rz = vec.dot(r, z)
        vec.copy(p, z)
    else:
        _restore(vec, state, r=r, p=p, **({"z": z} if z is not r else {}))
        rr, rz = float(state["rr"]), b.dtype.type(state["rz"])
    check_finite("cg", 0, stop, rr, rz)

    def snapshot():
        kept = {"x": x, "r": r, "p": p, "rr": rr, "rz": rz}
        return kept if z is r else {**kept, "z": z}

    it = 0
    for it in range(1, maxiter + 1):
        if math.sqrt(rr) <= stop:
            return x, it - 1, math.sqrt(rr), True
        pq = vec.dot(p, op.apply(p, q))
        check_finite("cg", it, pq)
        if pq == 0:
            break
        alpha = rz / pq
        rr, rz_new = vec.cg_step(x, r, z, p, q, dinv, alpha, jacobi)
        if user is not None and math.sqrt(rr) > stop:   # z = M r for the next direction
            user.apply(z, r)
            rz_new = vec.dot(r, z)
        check_finite("cg", it, rr, rz_new)
        vec.xpby(z, rz_new / rz, p)
        rz = rz_new
        if keep is not None:
            keep(it, snapshot)
    return x, it, math.sqrt(rr), math.sqrt(rr) <= stop


def _restore(vec, state: dict, **buffers) -> None:
    """Copy the kept vectors ``state[name]`` into ``buffers[name]``."""
    for name, out in buffers.items():
        vec.copy(out, state[name])


def two_sums(rows, x) -> bool:
    """Whether the fused loops' products on CSR ``rows = (pos, crd, values)`` should sum each row in
    :func:`ustc.ops._vector.csr_rows`' two interleaved sums rather than its masked 8-lane steps: the
    faster of three timed products each (:class:`ustc.kernels._race.KernelRace`), of ``x`` (a vector
    of ``A``'s columns and dtype: the solve's right-hand side). The masked steps won on an Intel Xeon;
    on an AMD EPYC (Zen 4, microcoded gathers) the 5-point Poisson matrix's product took 20.0 us
    against 9.0 at 4,096 rows and 201 against 90 at 40,000 (thread CPU, alternating)."""
    pos, crd, vals = rows
    out, race = np.empty(len(pos) - 1, dtype=vals.dtype), KernelRace()
    while race.winner is None:
        race.timed(_product, pos, crd, vals, x, out)
    return race.winner == 1


def _product(choice: int, pos, crd, vals, x, out) -> None:
    _vector.csr_rows(pos, crd, vals, x, out, 0, out.size, None, vals.dtype.type(0), choice == 1, None)


def cg_rows(op: Operator, rows, b, x, dinv, rtol, atol, maxiter):
    """:func:`cg` on host vectors and CSR rows ``rows = (pos, crd, values)`` of ``A``, its
    iterations one compiled one-thread call (:func:`ustc.ops._vector.cg_loop`); ``dinv``: None
    or Jacobi's vector. The first residual goes through the planned product ``op``."""
    pos, crd, vals = rows
    vec = op.vec
    r, q = vec.empty(b.size, b.dtype), vec.empty(b.size, b.dtype)
    stop = max(rtol * vec.norm2(b), atol)
    rr = vec.residual(r, b, op.apply(x, q))
    jacobi = dinv is not None
    z = vec.empty(b.size, b.dtype) if jacobi else r
    if jacobi:
        vec.scale_into(z, dinv, r)
    rz = vec.dot(r, z)
    p = vec.asarray(z, b.dtype, copy=True)
    check_finite("cg", 0, stop, rr, rz)
    scale = dinv if jacobi else np.ones(1, dtype=b.dtype)
    it, rr, state = _vector.cg_loop(pos, crd, vals, x, r, z, p, q, scale, jacobi, rr, b.dtype.type(rz), stop, maxiter,
                                    two_sums(rows, b))
    if state >= 2:
        check_finite("cg", it, rr, math.nan)
    return x, it, math.sqrt(rr), math.sqrt(rr) <= stop


def bicgstab(op: Operator, b, x, dinv, rtol, atol, maxiter, *, state=None, keep=None):
    """BiCGSTAB, right-preconditioned by ``dinv`` (None, Jacobi's vector or a Preconditioner).
    With ``op.rows`` set, the fused loop of :data:`FUSED` runs the iterations. ``state`` and
    ``keep`` as in :func:`cg`."""
    if getattr(op, "rows", None) is not None and "bicgstab" in FUSED and state is None and keep is None:
        return FUSED["bicgstab"](op, op.rows, b, x, dinv, rtol, atol, maxiter)
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
        r0, p = vec.empty(n, dt), vec.empty(n, dt)
        _restore(vec, state, r=r, v=v, r0=r0, p=p)
        rr = float(state["rr"])
        rho, alpha, omega = (dt.type(state[k]) for k in ("rho", "alpha", "omega"))
    s = vec.empty(n, dt)
    ph, sh = vec.empty(n, dt), vec.empty(n, dt)
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


def bicgstab_rows(op: Operator, rows, b, x, dinv, rtol, atol, maxiter):
    """:func:`bicgstab` on host vectors and CSR rows ``rows = (pos, crd, values)`` of ``A``, its
    iterations one compiled one-thread call (:func:`ustc.ops._vector.bicgstab_loop`); ``dinv``:
    None or Jacobi's vector. The first residual goes through the planned product ``op``."""
    pos, crd, vals = rows
    vec = op.vec
    n, dt = b.size, b.dtype
    r, t = vec.empty(n, dt), vec.empty(n, dt)
    stop = max(rtol * vec.norm2(b), atol)
    rr = vec.residual(r, b, op.apply(x, t))
    check_finite("bicgstab", 0, stop, rr)
    r0 = vec.asarray(r, dt, copy=True)
    p, v, s, ph, sh = vec.zeros(n, dt), vec.zeros(n, dt), vec.empty(n, dt), vec.empty(n, dt), vec.empty(n, dt)
    jacobi = dinv is not None
    scale = dinv if jacobi else np.ones(1, dtype=dt)
    it, value, state = _vector.bicgstab_loop(pos, crd, vals, x, r, r0, p, v, s, t, ph, sh, scale, jacobi, rr, stop,
                                             maxiter, two_sums(rows, b))
    if state == 2:
        check_finite("bicgstab", it, math.nan)
    if state in (1, 4):
        return x, it, math.sqrt(value), True
    return x, it, math.sqrt(value), math.sqrt(value) <= stop


def check_finite(method: str, iteration: int, *scalars) -> None:
    """SolveError when one of the scalars ``method`` computed in ``iteration`` is NaN or Inf.
    The inputs were checked finite before the solve, so this is an overflow or a breakdown."""
    if not all(cmath.isfinite(v) for v in scalars):
        raise SolveError(f"solve: {method} broke down at iteration {iteration}: a NaN or Inf appeared in its "
                         f"inner products or norms although the inputs were finite (an overflow: scale the "
                         f"system; or a matrix the method does not suit: try another method)")


def _precondition(vec, out, dinv, v) -> None:
    """``out = M v``: a copy without a preconditioner, Jacobi's scaling, or the caller's ``M``."""
    if dinv is None:
        vec.copy(out, v)
    elif isinstance(dinv, Preconditioner):
        dinv.apply(out, v)
    else:
        vec.scale_into(out, dinv, v)


def gmres(op: Operator, b, x, dinv, rtol, atol, maxiter, restart: int, size: int | None = None):
    """Restarted GMRES(m): Arnoldi with classical Gram-Schmidt, a second pass where the first
    cancelled much (the host's DGKS test) or always (a device), Givens rotations; ``maxiter``
    counts inner iterations (matrix products); ``size``: the system's size where ``b`` holds only
    a part of it (one block of a distributed solve), which bounds the restart length. With
    ``op.rows`` set, the fused cycle of :data:`FUSED` runs the iterations."""
    if getattr(op, "rows", None) is not None and "gmres" in FUSED and size is None:
        return FUSED["gmres"](op, op.rows, b, x, dinv, rtol, atol, maxiter, restart)
    vec = op.vec
    n, m, dt = b.size, max(1, min(restart, b.size if size is None else size)), b.dtype
    stop = max(rtol * vec.norm2(b), atol)
    r, w, z = vec.empty(n, dt), vec.empty(n, dt), vec.empty(n, dt)
    V = vec.basis(m + 1, n, dt)
    done = 0
    while True:
        beta = math.sqrt(vec.residual(r, b, op.apply(x, w)))
        check_finite("gmres", done, stop, beta)
        if beta <= stop or done >= maxiter:
            return x, done, beta, beta <= stop
        H = np.zeros((m + 1, m), dtype=dt)
        cs, sn = np.zeros(m, dtype=dt), np.zeros(m, dtype=dt)
        g = np.zeros(m + 1, dtype=dt)
        g[0] = beta
        vec.set_row(V, 0, r, beta)
        k = 0
        while k < m and done < maxiter:
            _precondition(vec, z, dinv, V.rows[k])
            op.apply(z, w)
            done += 1
            h, h_next = vec.orthogonalize(V, k + 1, w)
            H[:k + 1, k] = h
            H[k + 1, k] = h_next
            if h_next != 0:
                vec.set_row(V, k + 1, w, h_next)
            givens_column(H, cs, sn, g, k)
            check_finite("gmres", done, h_next, g[k + 1])
            k += 1
            if abs(g[k]) <= stop or h_next == 0:   # converged, or the Krylov space is exhausted
                break
        y = np.linalg.solve(np.triu(H[:k, :k]), g[:k]) if k else np.zeros(0, dtype=dt)
        check_finite("gmres", done, *y)
        vec.combine(w, V, y)
        _precondition(vec, z, dinv, w)
        vec.axpy(x, dt.type(1), z)


def gmres_rows(op: Operator, rows, b, x, dinv, rtol, atol, maxiter, restart: int):
    """GMRES(m) as :func:`gmres`, on host vectors and CSR rows ``rows = (pos, crd, values)`` of
    ``A``, each restart cycle one compiled one-thread call (:func:`ustc.ops._vector.gmres_cycle`:
    product, Gram-Schmidt, normalisation and Givens step of every inner iteration) instead of a
    few Python-level kernel calls per iteration; ``dinv``: None or Jacobi's vector. The restart
    residual goes through the planned product ``op``."""
    pos, crd, vals = rows
    vec = op.vec
    n, m, dt = b.size, max(1, min(restart, b.size)), b.dtype
    stop = max(rtol * vec.norm2(b), atol)
    r, w, z = vec.empty(n, dt), vec.empty(n, dt), vec.empty(n, dt)
    V = np.empty((m + 1, n), dtype=dt)
    chunks = -(-n // _vector.GS_CHUNK)
    partial, norms = np.empty((chunks, m + 1), dtype=dt), np.empty(chunks)
    jacobi = dinv is not None
    scale = dinv if jacobi else np.ones(1, dtype=dt)
    pairs = two_sums(rows, b)
    done = 0
    while True:
        beta = math.sqrt(vec.residual(r, b, op.apply(x, w)))
        check_finite("gmres", done, stop, beta)
        if beta <= stop or done >= maxiter:
            return x, done, beta, beta <= stop
        H = np.zeros((m + 1, m), dtype=dt)
        cs, sn = np.zeros(m, dtype=dt), np.zeros(m, dtype=dt)
        g = np.zeros(m + 1, dtype=dt)
        g[0] = beta
        np.divide(r, beta, out=V[0])
        k, ok = _vector.gmres_cycle(pos, crd, vals, scale, jacobi, V, H, cs, sn, g, z, w, partial, norms, m,
                                    maxiter - done, stop, KEEP, pairs)
        done += k
        if not ok:
            check_finite("gmres", done, H[k, k - 1], g[k], math.nan)
        y = np.linalg.solve(np.triu(H[:k, :k]), g[:k]) if k else np.zeros(0, dtype=dt)
        check_finite("gmres", done, *y)
        if k:
            np.matmul(y, V[:k], out=w)
        else:
            w.fill(0)
        _precondition(vec, z, dinv, w)
        vec.axpy(x, dt.type(1), z)


#: systems of at most this many rows run GMRES through :func:`gmres_rows` (one thread, one
#: compiled call per restart cycle) where ``A`` is a host CSR tensor: below it the per-step path's
#: vector kernels run on one thread too (``_vector.SERIAL_LENGTH``). 2-D Poisson GMRES(30) on the
#: 2-core machine under a load of 7-10: 10^4 rows 0.37 s against 0.55 (SciPy 1.1), 131k rows
#: 5.7 against 6.3 ms a step, 262k and 524k rows even
FUSED_GMRES_ROWS = 1 << 18


def csr_rows(a, b, dinv, vec, threads: int = 0, method: str = "gmres"):
    """``(pos, crd, values)`` of ``a`` when a fused method (:data:`FUSED`) can run the solve:
    host vectors of the plain backend, a 2-D CSR tensor on the CPU with NumPy buffers and
    ``b``'s value dtype, no preconditioner or Jacobi's, and a solve limited to one thread
    (``threads``, from :func:`solve_threads`) or small enough: GMRES up to
    :data:`FUSED_GMRES_ROWS` rows, CG and BiCGSTAB where every kernel of their per-step paths
    would run its one-thread twin anyway (fewer than ``_vector.SERIAL_LENGTH`` rows and
    ``runtime.SERIAL_WORK`` entries: the crossovers measured for them); else None."""
    from ..formats import CSR
    from ..tensor.interop import plain_format
    from . import runtime

    if type(vec) is not HostVectors or not isinstance(b, np.ndarray):
        return None
    if method == "gmres":
        small = b.size <= FUSED_GMRES_ROWS
    else:
        small = b.size < _vector.SERIAL_LENGTH and int(getattr(a, "nse", 0) or 0) < runtime.SERIAL_WORK
    if not small and threads != 1:
        return None
    if dinv is not None and not isinstance(dinv, np.ndarray):
        return None
    if getattr(a, "device", None) != "cpu" or len(a.shape) != 2 or plain_format(a.format) != CSR:
        return None
    rows = a.pos(1), a.crd(1), a.values
    if not all(isinstance(v, np.ndarray) for v in rows) or rows[2].dtype != b.dtype:
        return None
    return rows


SOLVERS = {"cg": cg, "bicgstab": bicgstab, "gmres": gmres}
#: the methods with a fused host path on CSR rows (:func:`csr_rows` says when it runs)
FUSED = {"cg": cg_rows, "bicgstab": bicgstab_rows, "gmres": gmres_rows}


class Outcome(NamedTuple):
    """What :func:`run` found: ``residual`` is the true ``||b - A x||`` (:func:`true_residual`),
    ``relative`` that over ``||b||`` (``||b||`` taken as 1 when 0), ``converged`` whether
    ``residual <= max(rtol ||b||, atol)``."""

    x: object
    iterations: int
    residual: float
    relative: float
    converged: bool
    plan_info: str


#: how many times :func:`run` restarts a method from its ``x`` when the recursive residual
#: claimed convergence that the true residual denies (float64 / complex128 systems)
RESIDUAL_RESTARTS = 3


def run(a, b, x, dinv, method: str, *, rtol, atol, maxiter: int, restart: int = 30, target: str = "cpu",
        vec=HOST) -> Outcome:
    """Plan ``A @ v`` (or take the cached plan), run ``method``, then recompute the true residual
    and judge convergence by it. ``b``, ``x`` (updated in place) and ``dinv`` are vectors of
    ``vec``. SolveError when the iteration breaks down (:func:`check_finite`).

    Where the method's recursive residual reached the target but the true one did not (rounding
    lets them drift apart: BiCGSTAB with ILU(0) on a 262,144-row convection-diffusion matrix
    stopped at a true relative residual of 7e-7 for 1e-8), the method starts again from ``x``
    with the residual recomputed, up to :data:`RESIDUAL_RESTARTS` times within ``maxiter``
    (34 more iterations there). Only for float64 / complex128 systems: a float32 system's true
    residual is checked in float64 and may lie below what float32 arithmetic reaches.

    A system large enough for parallel kernels runs on the cores free when the solve starts
    (:func:`solve_threads`)."""
    threads = solve_threads(a, b, vec, target)
    if threads is None:
        return _run(a, b, x, dinv, method, rtol, atol, maxiter, restart, target, vec, 0)
    with _threads.limited(threads) as used:
        return _run(a, b, x, dinv, method, rtol, atol, maxiter, restart, target, vec, used)


def solve_threads(a, b, vec, target: str) -> int | None:
    """Threads for a host solve's parallel kernels, or None to leave Numba's count alone: a
    system small enough that every kernel of the solve runs its one-thread twin (vectors under
    ``_vector.SERIAL_LENGTH``, a product under ``runtime.SERIAL_WORK`` entries) needs no
    decision; with ``USTC_ADAPTIVE_THREADS=1`` (:func:`ustc._threads.adaptive`) a larger one runs
    on the cores free now (:func:`ustc._threads.free_cores`): beside a CPU hog on 2 cores that is
    one thread, which no barrier of a parallel region then waits on while the OS runs the hog in
    its place. Without it, Numba's count."""
    from . import runtime

    if target != "cpu" or not isinstance(vec, HostVectors):
        return None
    if not _threads.adaptive() or (b.size < _vector.SERIAL_LENGTH
                                   and int(getattr(a, "nse", 0) or 0) < runtime.SERIAL_WORK):
        return None
    return _threads.free_cores()


def _run(a, b, x, dinv, method, rtol, atol, maxiter, restart, target, vec, threads) -> Outcome:
    op = Operator(a, b.size, b.dtype, target, vec)
    try:
        extra = (restart,) if method == "gmres" else ()
        solver = SOLVERS[method]
        op.rows = csr_rows(a, b, dinv, vec, threads, method) if target == "cpu" and method in FUSED else None
        x, it, _, claimed = solver(op, b, x, dinv, rtol, atol, maxiter, *extra)

        def residual():
            res, bn = true_residual(a, b, x, lambda v: op.apply(v, vec.empty(b.size, b.dtype)))
            check_finite(method, it, res)             # x itself overflowed
            return res, bn

        res, bn = residual()
        again = 0
        while (claimed and res > max(rtol * bn, atol) and it < maxiter and again < RESIDUAL_RESTARTS
               and wide_dtype(b.dtype) == b.dtype):
            again += 1
            x, more, _, claimed = solver(op, b, x, dinv, rtol, atol, maxiter - it, *extra)
            it += more
            res, bn = residual()
        ok = res <= max(rtol * bn, atol)
        return Outcome(x, it, res, res / (bn or 1.0), ok, op.matmul.plan_info)
    finally:
        op.close()


def wide_dtype(dtype) -> np.dtype:
    """The dtype a residual is checked in: float64 for float32 (complex128 for complex64), else
    ``dtype`` itself."""
    return np.result_type(dtype, np.float64)


def true_residual(a, b, x, product) -> tuple[float, float]:
    """``(||b - A x||, ||b||)`` recomputed from ``x`` (Frobenius norms for (n, k) ``b`` and ``x``;
    host or CuPy arrays). In working precision through ``product(x)`` (``A x`` of ``x``'s dtype);
    for a float32 / complex64 system in float64 (:func:`wide_dtype`): for a host ``a`` one pass
    over its entries, for a tensor on 'cuda' a float64 copy of its values through ``ustc.matmul``."""
    wide = wide_dtype(b.dtype)
    if wide == b.dtype:
        return norm(b - product(x)), norm(b)
    if a.device == "cpu":
        return _host_residual(a, _on_host(b), _on_host(x), wide)
    from ..tensor.tensor import Tensor
    from .matmul import matmul

    a = Tensor(a.format, a.shape, a.raw_buffers, a.raw_values.astype(wide), device=a.device, package=a.package)
    b = b.astype(wide)
    return norm(b - matmul(a, x.astype(wide))), norm(b)


def _host_residual(a, b: np.ndarray, x: np.ndarray, wide) -> tuple[float, float]:
    (rows, cols), vals = a.entries()
    r = b.astype(wide).reshape(b.shape[0], -1)
    rr = _vector.coo_residual(rows, cols, vals, np.ascontiguousarray(x).reshape(x.shape[0], -1), r)
    return math.sqrt(max(rr, 0.0)), norm(b.astype(wide))


def _on_host(v) -> np.ndarray:
    return v.get() if packages.is_cupy(v) else np.asarray(v)


def norm(v) -> float:
    """The 2-norm (Frobenius for a matrix) of a host or CuPy array, as a float."""
    if packages.is_cupy(v):  # pragma: no cover - needs a GPU
        import cupy

        return float(cupy.linalg.norm(v))
    return float(np.linalg.norm(v))
