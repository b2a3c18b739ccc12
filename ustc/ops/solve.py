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
with ``preconditioner="jacobi"`` optional. ``method=None`` picks from the
structure: triangular → substitution; symmetric → CG; otherwise GMRES. Every
Krylov method plans one :class:`~ustc.Matmul` and reuses it each iteration.
Convergence: ``||b - A x|| <= max(rtol ||b||, atol)``; otherwise
:class:`ustc.SolveError` with the residual reached, unless ``check=False``.
``a`` is any 2-D ustc Tensor (or SciPy / torch sparse matrix); ``b`` a vector
(Krylov) or a vector or matrix of right-hand sides (triangular). ``x`` is
returned in ``b``'s package; with ``return_info=True`` also a
:class:`SolveInfo`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError, SolveError, UnsupportedOperation, UstcError
from ..tensor import packages
from ..tensor.tensor import Tensor
from . import operands as ops

METHODS = ("triangular", "cg", "bicgstab", "gmres")
PRECONDITIONERS = (None, "jacobi")


@dataclass(frozen=True)
class SolveInfo:
    """What a solve did: method, convergence, iterations (matrix products for Krylov methods),
    the final residual norm ``||b - A x||`` and relative to ``||b||``, and the Matmul route."""

    method: str
    converged: bool
    iterations: int
    residual_norm: float
    relative_residual: float
    plan_info: str


def solve(a, b, method: str | None = None, *, x0=None, rtol: float = 1e-8, atol: float = 0.0,
          maxiter: int | None = None, restart: int = 30, preconditioner: str | None = None,
          lower: bool | None = None, unit_diagonal: bool = False, check: bool = True,
          return_info: bool = False):
    a = ops.normalise(a, "a")
    if not isinstance(a, Tensor) or a.ndim != 2:
        raise ShapeError("solve: a must be a sparse matrix (a 2-D ustc Tensor or a SciPy / torch sparse matrix)")
    if a.device != "cpu":
        raise UnsupportedOperation("solve runs on the CPU for now; move a with a.to('cpu')")
    package = packages.TORCH if packages.is_torch(b) else packages.NUMPY
    rhs = packages.host_array(b)
    n = a.shape[0]
    if a.shape[0] != a.shape[1]:
        raise ShapeError(f"solve: a must be square, got shape {a.shape}")
    if rhs.ndim not in (1, 2) or rhs.shape[0] != n:
        raise ShapeError(f"solve: b has shape {rhs.shape}; expected ({n},) or ({n}, k) for a of shape {a.shape}")
    if method not in (None,) + METHODS:
        raise UstcError(f"solve: method must be one of {', '.join(METHODS)} or None, got {method!r}")
    if preconditioner not in PRECONDITIONERS:
        raise UstcError(f"solve: preconditioner must be None or 'jacobi', got {preconditioner!r}")
    dtype = np.result_type(a.dtype, rhs.dtype, np.float32)
    if dtype.kind not in "fc":
        dtype = np.dtype(np.float64)
    side = lower if lower is not None else _triangular_side(a) if method in (None, "triangular") else None
    if method is None:
        method = "triangular" if side is not None else "cg" if _symmetric(a) else "gmres"
    if method == "triangular":
        if side is None:
            raise SolveError("solve: method 'triangular' needs a triangular matrix (entries on both sides of "
                             "the diagonal were found); pass lower= to use one side only")
        x, info = _triangular(a, rhs.astype(dtype, copy=False), side, unit_diagonal)
    else:
        x, info = _krylov(a, rhs, dtype, method, x0, rtol, atol, maxiter, restart, preconditioner)
    if check and not info.converged:
        raise SolveError(f"solve: {info.method} did not converge in {info.iterations} iterations: residual "
                         f"{info.residual_norm:.3e} (relative {info.relative_residual:.3e}, asked for "
                         f"{rtol:.1e}); try another method, a preconditioner or a larger maxiter")
    x = packages.wrap(x, package)
    return (x, info) if return_info else x


def _triangular_side(a: Tensor) -> bool | None:
    """True (lower), False (upper) or None (neither); a diagonal matrix counts as lower."""
    (rows, cols), _ = a.entries()
    if rows.size == 0 or bool((rows >= cols).all()):
        return True
    return False if bool((rows <= cols).all()) else None


def _symmetric(a: Tensor) -> bool:
    csr = _csr(a)
    from ..tensor.interop import to_scipy

    s = to_scipy(csr)
    diff = abs(s - s.T.conj())
    return diff.nnz == 0 or float(diff.max()) <= 8 * np.finfo(np.float64).eps * float(abs(s).max())


def _csr(a: Tensor) -> Tensor:
    from ..formats import CSR
    from ..tensor.interop import plain_format

    return a if plain_format(a.format) == plain_format(CSR) else a.convert(CSR)


def _triangular(a: Tensor, b: np.ndarray, lower: bool, unit: bool):
    from . import _vector as vec

    csr = _csr(a)
    b2 = b.reshape(b.shape[0], -1)
    x = np.empty_like(b2)
    values = csr._values.astype(b2.dtype, copy=False)
    bad = vec.triangular_csr(csr._buffers[(1, "pos")], csr._buffers[(1, "crd")], values, b2, x, unit, lower)
    if bad >= 0:
        raise SolveError(f"solve: the triangular matrix is singular: diagonal entry ({bad}, {bad}) is "
                         f"missing or zero")
    x = x.reshape(b.shape)
    res = _residual_norm(a, x, b)
    bn = float(np.linalg.norm(b)) or 1.0
    side = "lower" if lower else "upper"
    return x, SolveInfo("triangular", bool(np.isfinite(res)), 1, res, res / bn, f"{side} substitution on CSR rows")


def _residual_norm(a: Tensor, x, b) -> float:
    from .matmul import matmul

    return float(np.linalg.norm(b - matmul(a, x)))


def _krylov(a: Tensor, rhs, dtype, method, x0, rtol, atol, maxiter, restart, preconditioner):
    from . import krylov

    if rhs.ndim != 1:
        raise ShapeError(f"solve: method {method!r} takes one right-hand side (a vector), got shape {rhs.shape}")
    n = rhs.shape[0]
    b = np.ascontiguousarray(rhs, dtype=dtype)
    x = np.zeros(n, dtype=dtype) if x0 is None else np.array(packages.host_array(x0), dtype=dtype)
    if x.shape != (n,):
        raise ShapeError(f"solve: x0 has shape {x.shape}, expected ({n},)")
    dinv = _jacobi(a, n, dtype) if preconditioner == "jacobi" else None
    maxiter = 10 * n if maxiter is None else int(maxiter)
    op = krylov.Operator(a, n, dtype)
    if method == "gmres":
        x, it, res, ok = krylov.gmres(op, b, x, dinv, rtol, atol, maxiter, restart)
    else:
        x, it, res, ok = getattr(krylov, method)(op, b, x, dinv, rtol, atol, maxiter)
    bn = float(np.linalg.norm(b)) or 1.0
    info = SolveInfo(method, bool(ok) and math.isfinite(res), int(it), float(res), float(res) / bn,
                     op.matmul.plan_info)
    op.matmul.release()
    return x, info


def _jacobi(a: Tensor, n: int, dtype) -> np.ndarray:
    (rows, cols), vals = a.entries()
    diag = np.zeros(n, dtype=dtype)
    on = rows == cols
    np.add.at(diag, rows[on], vals[on])
    zero = np.flatnonzero(diag == 0)
    if zero.size:
        raise SolveError(f"solve: the Jacobi preconditioner needs a nonzero diagonal; entry ({zero[0]}, "
                         f"{zero[0]}) is zero")
    return (1 / diag).astype(dtype)
