"""``ustc.solve(a, b, method=None, ...)``: sparse triangular solves and Krylov methods.

    >>> import numpy as np, ustc
    >>> A = ustc.Tensor.from_dense(np.array([[4., 1, 0], [1, 3, 0], [0, 0, 2]]), "CSR")
    >>> x, info = ustc.solve(A, np.array([1., 2, 4]), return_info=True)
    >>> info.method, info.converged, np.allclose(A @ x, [1, 2, 4])
    ('cg', True, True)

Methods: ``"triangular"`` (forward or backward substitution on canonical CSR
rows; ``lower=None`` detects the side, ``unit_diagonal=True`` ignores the
stored diagonal), ``"cg"`` (symmetric / Hermitian positive definite),
``"bicgstab"`` and ``"gmres"`` (restarted, ``restart=30``), the Krylov ones
with a preconditioner optional: ``preconditioner="jacobi"`` (``1 / diag(a)``),
``"ilu0"``, ``"ic0"`` or ``"ssor"`` (with ``omega=``; factored once per call
from ``a``'s entries, see :mod:`ustc.ops.precond`, whose ``ilu0(a)`` /
``ic0(a)`` / ``ssor(a)`` objects are also accepted, to factor once for many
solves), or any ``M`` approximating ``A^-1``: a callable ``M(r) -> z``, a
``scipy.sparse.linalg.LinearOperator`` (pyamg's ``ml.aspreconditioner()``), a
ustc Tensor, SciPy sparse or NumPy matrix (applied as ``M @ r``). ``M``
receives a copy of the residual (a NumPy vector; CuPy on the device) and
returns ``n`` numbers; GMRES and BiCGSTAB apply it on the right, CG as
``z = M r`` (``M`` symmetric positive definite: CG refuses ILU(0)); the
substitution and the direct solve ignore it. ``"direct"``: SciPy's SuperLU
(``splu``) on a CSC copy, factored once for all columns of ``b`` (a vector or
(n, k) matrix); a singular matrix raises :class:`ustc.SolveError`; on 'cuda'
it needs cuDSS through nvmath-python, else :class:`ustc.UnsupportedOperation`.
``method=None`` picks from the structure: triangular → substitution;
symmetric → CG (GMRES with ``"ilu0"``); otherwise GMRES. Every
Krylov method plans one :class:`~ustc.Matmul` and reuses it each iteration.
Convergence: ``||b - A x|| <= max(rtol ||b||, atol)`` for the true residual,
recomputed from ``x`` at the end (float64 for float32 / complex64 systems, see
:func:`ustc.ops.krylov.true_residual`); otherwise :class:`ustc.SolveError` with
the residual reached, unless ``check=False``. A NaN or Inf in ``a``, ``b`` or
``x0`` raises :class:`ustc.SolveError` naming the input before anything runs,
one appearing during the iteration raises it in that iteration. A substitution
sums duplicate entries first, on a copy (:func:`ustc.ops.trisolve.canonical`).
``a`` is any 2-D ustc Tensor (or SciPy / torch sparse matrix); ``b`` a vector
(Krylov) or a vector or matrix of right-hand sides (triangular). ``x`` is
returned in ``b``'s package; with ``return_info=True`` also a
:class:`SolveInfo`.

``target``: where the solve runs. ``None`` (default) follows the operands: a
tensor on 'cuda' (``b`` and ``x0`` must be there too, else
:class:`ustc.DeviceError` naming both) runs on the GPU, host operands on the
CPU, exactly as before. ``target="cuda"`` with host operands runs on the GPU
(or in Numba's CUDA simulator) and returns ``x`` on the host. On ``cuda`` the
triangular method is a level-scheduled substitution (:mod:`ustc.ops.trisolve`:
rows grouped into levels of independent rows on the host, one kernel launch
per level; ``SolveInfo.levels`` holds the schedule and ``plan_info`` says e.g.
``"cuda: level-scheduled lower substitution on CSR rows, 37 levels"``); with
device operands it is zero-copy and ``x`` is a new CuPy array (torch for torch
``b``). The Krylov methods run device-resident for a tensor on 'cuda': ``b``,
``x0`` and every work vector are CuPy arrays on the device (a torch CUDA ``b``
is viewed through DLPack), the one planned Matmul reads and writes them
zero-copy, and the vector updates are fused numba-cuda kernels
(:mod:`ustc.ops.cuda_vectors`) on CuPy's current stream; only the scalars the
method branches on (inner products, norms) come to the host, a few small copies
per iteration, as in solvers built on cuSPARSE. ``x`` is a new CuPy array (a
torch CUDA tensor for torch ``b``); convergence, ``SolveError``, ``x0`` and the
Jacobi preconditioner (its diagonal summed on the device) behave as on the CPU.
With host operands, ``target="cuda"`` plans only the Matmul for the GPU and the
vector updates stay on the CPU. A zero or missing diagonal (triangular, or
Jacobi) raises :class:`ustc.SolveError` on every target, before the iteration.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import DeviceError, ShapeError, SolveError, UstcError
from ..tensor import packages
from ..tensor.tensor import Tensor
from . import operands as ops
from . import trisolve

METHODS = ("triangular", "cg", "bicgstab", "gmres", "direct")
KRYLOV = ("cg", "bicgstab", "gmres")
#: the preconditioners named by a string: Jacobi's diagonal and the factored ones of :mod:`ustc.ops.precond`
PRECONDITIONERS = ("jacobi", "ilu0", "ic0", "ssor")
TARGETS = ("cpu", "cuda")


@dataclass(frozen=True)
class SolveInfo:
    """What a solve did: method, convergence, iterations (matrix products for Krylov methods),
    the true residual norm ``||b - A x||`` recomputed from the returned ``x`` (float64 for a
    float32 / complex64 system) and relative to ``||b||``, the route (the Matmul's, or the
    substitution's, or the direct solver's), and for a triangular solve on the ``cuda`` target
    its :class:`~ustc.ops.trisolve.LevelSchedule` (reusable for the same pattern). ``converged``
    follows from that residual (a substitution or a direct solve: it is finite).
    ``preconditioner`` says which preconditioner a Krylov solve applied (None without one)."""

    method: str
    converged: bool
    iterations: int
    residual_norm: float
    relative_residual: float
    plan_info: str
    levels: trisolve.LevelSchedule | None = field(default=None, repr=False, compare=False)
    preconditioner: str | None = None


def solve(a, b, method: str | None = None, *, x0=None, rtol: float = 1e-8, atol: float = 0.0,
          maxiter: int | None = None, restart: int = 30, preconditioner=None, omega: float = 1.0,
          lower: bool | None = None, unit_diagonal: bool = False, check: bool = True,
          return_info: bool = False, target: str | None = None):
    a = ops.normalise(a, "a")
    if not isinstance(a, Tensor) or a.ndim != 2:
        raise ShapeError("solve: a must be a sparse matrix (a 2-D ustc Tensor or a SciPy / torch sparse matrix)")
    target = _target(a, b, x0, target)
    package, rhs = _rhs(b)
    n = a.shape[0]
    if a.shape[0] != a.shape[1]:
        raise ShapeError(f"solve: a must be square, got shape {a.shape}")
    if rhs.ndim not in (1, 2) or rhs.shape[0] != n:
        raise ShapeError(f"solve: b has shape {rhs.shape}; expected ({n},) or ({n}, k) for a of shape {a.shape}")
    if method not in (None,) + METHODS:
        raise UstcError(f"solve: method must be one of {', '.join(METHODS)} or None, got {method!r}")
    _check_preconditioner(preconditioner)
    _require_finite_matrix(a)
    _require_finite_vector("b", rhs)
    dtype = np.result_type(a.dtype, rhs.dtype, np.float32)
    if dtype.kind not in "fc":
        dtype = np.dtype(np.float64)
    host = _OnHost(a)
    side = lower if lower is not None else _triangular_side(host()) if method in (None, "triangular") else None
    if method is None:
        method = "triangular" if side is not None else \
            "cg" if _symmetric(host()) and _symmetric_preconditioner(preconditioner) else "gmres"
    if method == "cg" and not _symmetric_preconditioner(preconditioner):
        raise UstcError("solve: cg needs a symmetric positive definite preconditioner and ILU(0)'s L U is not "
                        "symmetric; use preconditioner='ic0' or 'ssor' with cg, or method 'bicgstab' / 'gmres' "
                        "with 'ilu0'")
    if method == "direct":
        x, info = _direct(a, rhs.astype(dtype, copy=False), target)
    elif method == "triangular":
        if side is None:
            raise SolveError("solve: method 'triangular' needs a triangular matrix (entries on both sides of "
                             "the diagonal were found); pass lower= to use one side only")
        run = _triangular_cuda if target == "cuda" else _triangular
        x, info = run(a, rhs.astype(dtype, copy=False), side, unit_diagonal)
    else:
        x, info = _krylov(a, rhs, dtype, method, x0, rtol, atol, maxiter, restart, preconditioner, omega, target)
    if check and not info.converged:
        raise SolveError(f"solve: {info.method} did not converge in {info.iterations} iterations: residual "
                         f"{info.residual_norm:.3e} (relative {info.relative_residual:.3e}, asked for "
                         f"{rtol:.1e}); try another method, a preconditioner or a larger maxiter")
    x = _wrap(x, package)
    return (x, info) if return_info else x


def _all_finite(v) -> bool:
    """Whether host or CuPy array ``v`` holds no NaN or Inf (one pass)."""
    if packages.is_cupy(v):  # pragma: no cover - needs a GPU
        import cupy

        return bool(cupy.isfinite(v).all())
    return bool(np.isfinite(v).all())


def _require_finite_matrix(a: Tensor) -> None:
    """SolveError naming ``a`` (and, on the host, the first offending entry) when a stored
    value is NaN or Inf."""
    values = a.raw_values if a.format.batch_levels else a.raw_values[:a.nse]
    if _all_finite(values):
        return
    (rows, cols), vals = a.to("cpu").entries()
    bad = np.flatnonzero(~np.isfinite(vals))
    where = f" at entry ({rows[bad[0]]}, {cols[bad[0]]})" if bad.size else ""
    raise SolveError(f"solve: the matrix a holds a non-finite value (NaN or Inf){where}; a solve needs "
                     f"finite inputs")


def _require_finite_vector(name: str, v) -> None:
    """SolveError naming input ``name`` (``b`` or ``x0``) and its first NaN / Inf."""
    if _all_finite(v):
        return
    host = v.get() if packages.is_cupy(v) else np.asarray(v)
    first = tuple(int(i) for i in np.argwhere(~np.isfinite(host))[0])
    index = first[0] if len(first) == 1 else first
    raise SolveError(f"solve: {name} holds a non-finite value (NaN or Inf) at index {index}; a solve needs "
                     f"finite inputs")


def _target(a: Tensor, b, x0, target: str | None) -> str:
    """The target: ``target``, else the operands' device; DeviceError when they differ."""
    where = {"a": a.device, "b": packages.device_of(b)}
    if x0 is not None:
        where["x0"] = packages.device_of(x0)
    (n0, d0), *rest = where.items()
    for name, device in rest:
        if device != d0:
            raise DeviceError(f"solve: operands live on different devices: '{n0}' is on {d0}, '{name}' is on "
                              f"{device}; move them with .to('{d0}') or .to('{device}')")
    if target is None:
        return d0
    if target not in TARGETS:
        raise UstcError(f"solve: target must be one of {', '.join(TARGETS)} or None, got {target!r}")
    if target == "cpu" and d0 != "cpu":
        raise DeviceError(f"solve: target 'cpu' but the operands are on {d0}; move them with a.to('cpu')")
    return target


def _rhs(b):
    """``(package, array)``: NumPy for host data, CuPy for device data (torch CUDA through DLPack)."""
    from .cuda_host import device_array

    on_device = device_array(b)
    if on_device is not None:
        return (packages.TORCH if packages.is_torch(b) else packages.CUPY), on_device
    return (packages.TORCH if packages.is_torch(b) else packages.NUMPY), packages.host_array(b)


def _wrap(x, package: str):
    if packages.is_cupy(x) and package == packages.TORCH:  # pragma: no cover - needs a GPU
        import torch

        return torch.from_dlpack(x)
    return packages.wrap(x, package)


class _OnHost:
    """``a`` on the host, copied from a device at most once (both structure checks read it)."""

    def __init__(self, a: Tensor):
        self.a, self.copy = a, None

    def __call__(self) -> Tensor:
        if self.a.device == "cpu":
            return self.a
        if self.copy is None:
            self.copy = self.a.to("cpu")
        return self.copy


def _triangular_side(a: Tensor) -> bool | None:
    """True (lower), False (upper) or None (neither) for a host tensor; a diagonal matrix counts as
    lower. Stored zeros (block interiors, dense rows) do not count."""
    (rows, cols), vals = a.entries()
    rows, cols = rows[vals != 0], cols[vals != 0]
    if rows.size == 0 or bool((rows >= cols).all()):
        return True
    return False if bool((rows <= cols).all()) else None


def _symmetric(a: Tensor) -> bool:
    """Whether host tensor ``a`` is Hermitian."""
    from ..tensor.interop import to_scipy

    s = to_scipy(trisolve.as_csr(a))
    diff = abs(s - s.T.conj())
    return diff.nnz == 0 or float(diff.max()) <= 8 * np.finfo(np.float64).eps * float(abs(s).max())


def _triangular(a: Tensor, b: np.ndarray, lower: bool, unit: bool):
    from . import _vector as vec

    csr = trisolve.canonical(trisolve.as_csr(a))      # duplicates summed, on a copy
    b2 = b.reshape(b.shape[0], 1) if b.ndim == 1 else b
    x = np.empty_like(b2)
    values = csr.raw_values[:csr.nse].astype(b2.dtype, copy=False)
    bad = vec.triangular_csr(csr.raw_buffers[(1, "pos")], csr.raw_buffers[(1, "crd")], values, b2, x, unit, lower)
    if bad >= 0:
        raise trisolve.singular(bad)
    x = x.reshape(b.shape)
    side = "lower" if lower else "upper"
    return x, _triangular_info(a, x, b, f"{side} substitution on CSR rows")


def _triangular_cuda(a: Tensor, b, lower: bool, unit: bool):
    """The level-scheduled substitution of :mod:`ustc.ops.trisolve` on the ``cuda`` target."""
    x, schedule = trisolve.solve_cuda(trisolve.as_csr(a), b, lower, unit)
    return x, _triangular_info(a, x, b, "cuda: " + schedule.describe(), schedule)


def _triangular_info(a: Tensor, x, b, route: str, schedule=None) -> SolveInfo:
    """The info of a substitution (:func:`_exact_info`)."""
    return _exact_info("triangular", a, x, b, route, schedule)


def _exact_info(method: str, a: Tensor, x, b, route: str, schedule=None) -> SolveInfo:
    """The info of a substitution or a direct solve: the true residual
    (:func:`ustc.ops.krylov.true_residual`), converged when it is finite."""
    from . import krylov
    from .matmul import matmul

    res, bn = krylov.true_residual(a, b, x, lambda v: matmul(a, v))
    return SolveInfo(method, bool(np.isfinite(res)), 1, res, res / (bn or 1.0), route, schedule)


def _direct(a: Tensor, b, target: str):
    """``method="direct"``: SciPy's SuperLU (``scipy.sparse.linalg.splu``, COLAMD ordering) on a CSC
    copy of ``a``'s entries (duplicates summed) in ``b``'s dtype, factored once and solved for
    every column of ``b``; on ``cuda`` :func:`_direct_cuda`. SolveError for a singular matrix
    (SuperLU's exact zero pivot, or a solution that is not finite)."""
    if target == "cuda" or a.device != "cpu":
        return _direct_cuda(a, b)
    import scipy.sparse as sp
    import scipy.sparse.linalg as sla

    n = a.shape[0]
    if n == 0:
        x = np.zeros(b.shape, dtype=b.dtype)
        return x, SolveInfo("direct", True, 1, 0.0, 0.0, "scipy: SuperLU (splu), empty matrix")
    (rows, cols), vals = a.entries()
    csc = sp.csc_array((np.asarray(vals, dtype=b.dtype), (rows, cols)), shape=a.shape)
    try:
        lu = sla.splu(csc)
    except RuntimeError as exc:          # "Factor is exactly singular", "... structurally singular"
        raise SolveError(f"solve: method 'direct': a is singular (SuperLU: {exc})") from None
    x = lu.solve(np.asarray(b))
    if not np.isfinite(x).all():
        raise SolveError("solve: method 'direct': the solution is not finite; a is singular to working precision")
    route = f"scipy: SuperLU (splu) on CSC, COLAMD ordering, {lu.L.nnz + lu.U.nnz - n} entries in L + U"
    return x, _exact_info("direct", a, x, b, route)


def _direct_cuda(a: Tensor, b):
    """The direct solve on the GPU: cuDSS through nvmath-python (``nvmath.sparse.advanced
    .direct_solver`` on a CuPy CSR copy of ``a``), else UnsupportedOperation naming what to
    install or how to solve on the host."""
    from ..errors import UnsupportedOperation

    try:
        from nvmath.sparse.advanced import direct_solver
    except ImportError:
        raise UnsupportedOperation(
            "solve: method 'direct' on cuda needs NVIDIA cuDSS through nvmath-python, which is not installed "
            "(pip install 'nvmath-python[cu12]'); or solve on the host: ustc.solve(a.to('cpu'), b_on_host, "
            "'direct') runs SciPy's SuperLU, or use a Krylov method on the GPU") from None
    import cupy  # pragma: no cover - needs a GPU, CuPy and nvmath-python
    import cupyx.scipy.sparse as csp

    from ..tensor.interop import to_scipy

    host = a if a.device == "cpu" else a.to("cpu")
    s = to_scipy(trisolve.as_csr(host)).tocsr()
    s.sum_duplicates()
    dev = csp.csr_matrix((cupy.asarray(s.data.astype(b.dtype)), cupy.asarray(s.indices), cupy.asarray(s.indptr)),
                         shape=s.shape)
    on_device = packages.is_cupy(b)
    rhs = cupy.asfortranarray(cupy.asarray(b))
    try:
        x = direct_solver(dev, rhs)
    except Exception as exc:  # noqa: BLE001 - cuDSS reports a singular matrix as an error
        raise SolveError(f"solve: method 'direct' (cuDSS) failed: {exc}") from None
    x = cupy.ascontiguousarray(x)
    if not bool(cupy.isfinite(x).all()):
        raise SolveError("solve: method 'direct': the solution is not finite; a is singular to working precision")
    if not on_device:
        x = cupy.asnumpy(x)
    return x, _exact_info("direct", a, x, b, "cuda: cuDSS (nvmath.sparse.advanced.direct_solver) on CSR")


def _krylov(a: Tensor, rhs, dtype, method, x0, rtol, atol, maxiter, restart, preconditioner, omega, target):
    """A Krylov solve: host vectors (Numba CPU updates; ``target="cuda"`` plans the product for
    the GPU), or, for ``a`` on 'cuda', device vectors end to end (:mod:`ustc.ops.cuda_vectors`)."""
    from . import krylov

    if rhs.ndim != 1:
        raise ShapeError(f"solve: method {method!r} takes one right-hand side (a vector), got shape {rhs.shape}")
    n = rhs.shape[0]
    vec = _vectors(a)
    if x0 is not None:
        start = _x0(x0, a.device)
        if tuple(start.shape) != (n,):
            raise ShapeError(f"solve: x0 has shape {tuple(start.shape)}, expected ({n},)")
        _require_finite_vector("x0", start)
    from .precond import FactoredPreconditioner, build

    described = None
    if isinstance(preconditioner, str) and preconditioner == "jacobi":
        dinv = _jacobi(a, n, dtype, vec)
        described = "Jacobi (1 / diag(a))"
    elif isinstance(preconditioner, str):
        factored = build(preconditioner, a, omega)          # factored once per solve
        dinv, described = factored.bind(n, dtype, vec), factored.describe()
    elif isinstance(preconditioner, FactoredPreconditioner):
        dinv, described = preconditioner.bind(n, dtype, vec), preconditioner.describe()
    elif preconditioner is not None:
        fn, name = _user_preconditioner(preconditioner, a)
        dinv = krylov.Preconditioner(fn, n, dtype, vec, name)
        described = name
    else:
        dinv = None
    b = vec.asarray(rhs, dtype)
    x = vec.zeros(n, dtype) if x0 is None else vec.asarray(start, dtype, copy=True)
    maxiter = 10 * n if maxiter is None else int(maxiter)
    out = krylov.run(a, b, x, dinv, method, rtol=rtol, atol=atol, maxiter=maxiter, restart=restart,
                     target=target, vec=vec)
    return out.x, SolveInfo(method, bool(out.converged), int(out.iterations), float(out.residual),
                            float(out.relative), out.plan_info, preconditioner=described)


def _check_preconditioner(m) -> None:
    """UstcError unless ``m`` is None, one of :data:`PRECONDITIONERS`, or something
    :func:`_user_preconditioner` applies (a :class:`~ustc.ops.precond.FactoredPreconditioner` is
    callable)."""
    if m is None or (isinstance(m, str) and m in PRECONDITIONERS):
        return
    if isinstance(m, str) or not (callable(m) or hasattr(m, "matvec") or _matrix_like(m)):
        raise UstcError(f"solve: preconditioner must be None, 'jacobi', a callable M(r) -> z, a "
                        f"scipy.sparse.linalg.LinearOperator or a matrix approximating A^-1, or one of the "
                        f"factored ones 'ilu0', 'ic0', 'ssor' (or an object of ustc.ops.precond); got {m!r}")


def _symmetric_preconditioner(m) -> bool:
    """Whether CG may take ``m``: everything but ILU(0) (by name or as an object), whose
    ``L U`` is not symmetric; the caller's own ``M`` is taken at its word."""
    if isinstance(m, str):
        return m != "ilu0"
    from .precond import FactoredPreconditioner

    return not isinstance(m, FactoredPreconditioner) or m.symmetric


def _matrix_like(m) -> bool:
    return isinstance(m, np.ndarray) or type(m).__module__.startswith("scipy.sparse")


def _user_preconditioner(m, a: Tensor):
    """``(fn, name)``: how to apply the caller's ``M`` to a vector (``M.matvec`` for a
    LinearOperator or a ustc Tensor, ``M @ r`` for a SciPy sparse or NumPy matrix, else ``M(r)``)
    and how errors call it. ShapeError when ``M`` has a shape other than ``a``'s."""
    shape = getattr(m, "shape", None)
    name = f"the preconditioner ({type(m).__name__})"
    if shape is not None and tuple(shape) != tuple(a.shape):
        raise ShapeError(f"solve: {name} has shape {tuple(shape)}; it must have a's shape {a.shape}")
    if hasattr(m, "matvec"):
        return m.matvec, name
    if _matrix_like(m):
        return (lambda r: m @ r), name
    return m, name


def _vectors(a: Tensor):
    """The vector backend: the device one for a tensor on 'cuda', else the host one."""
    if a.device == "cpu":
        from .vectors import HOST

        return HOST
    from .cuda_vectors import DeviceVectors

    return DeviceVectors()


def _x0(x0, device: str):
    if device == "cpu":
        return packages.host_array(x0)
    from .cuda_host import device_array

    return device_array(x0)


def _jacobi(a: Tensor, n: int, dtype, vec):
    """``1 / diag(a)`` as a vector of ``vec``; SolveError naming the first zero diagonal entry."""
    diag = vec.diagonal(a, n, dtype)
    zero = np.flatnonzero(diag == 0)
    if zero.size:
        raise SolveError(f"solve: the Jacobi preconditioner needs a nonzero diagonal; entry ({zero[0]}, "
                         f"{zero[0]}) is zero")
    return vec.asarray((1 / diag).astype(dtype), dtype)
