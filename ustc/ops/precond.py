"""Factored preconditioners: ILU(0), IC(0) and SSOR, made once and applied by triangular sweeps.

    >>> import numpy as np, ustc
    >>> from ustc.ops import precond
    >>> A = ustc.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(5, 5), tensor_format="DIAI")
    >>> M = precond.ilu0(A)                        # factor once ...
    >>> M
    FactoredPreconditioner('ilu0', shape=(5, 5), dtype=float64, nnz=13)
    >>> for b in np.eye(5)[:2]:                     # ... and solve many right-hand sides
    ...     x, info = ustc.solve(A, b, "gmres", preconditioner=M, return_info=True)
    >>> info.iterations                             # a tridiagonal matrix: ILU(0) is its exact LU
    1

``ustc.solve(a, b, method, preconditioner="ilu0" | "ic0" | "ssor", omega=1.0)`` makes the same
objects, once per call. Every one of them applies ``z = M^-1 r`` as

    z = U^-1 (S (L^-1 r))

with ``L`` lower and ``U`` upper triangular on the *factor pattern* of ``a`` (its nonzero
entries, duplicates summed, plus the whole diagonal: :mod:`ustc.ops.factor`) and ``S`` a
diagonal scaling or the identity:

* ``ilu0``: ILU(0), ``A ≈ L U`` with ``L`` unit lower; ``(L U)[i, j] = a[i, j]`` on the
  pattern. For any square matrix whose pivots stay nonzero; BiCGSTAB and GMRES take it (it is
  not symmetric, so CG refuses it).
* ``ic0``: IC(0), ``A ≈ L L^H`` (``U = L^H``) for a Hermitian matrix; a pivot that is not
  positive raises :class:`ustc.SolveError` naming the row (``shift=`` factors
  ``a + shift * diag(a)`` instead, Manteuffel's shift, which succeeds for large enough shifts
  on positive definite matrices). Symmetric positive definite: CG takes it.
* ``ssor``: symmetric SOR, ``M = (D + w L_a) (w (2 - w) D)^-1 (D + w U_a)`` with ``D`` the
  diagonal and ``L_a`` / ``U_a`` the strict parts of ``a``, ``0 < w < 2`` (``omega``);
  nothing is factored. Symmetric positive definite for a Hermitian positive definite ``a``:
  CG takes it; a zero diagonal entry raises :class:`ustc.SolveError`.

The factors are computed on the host from ``a``'s entries, whatever its format and device
(a CSR copy made by ``Tensor.convert``), in ``a``'s precision (float32, float64, complex64,
complex128; integers in float64), by one-thread Numba kernels. On the host a sweep runs in row
order on one thread (:func:`ustc.ops.trisolve.sweep_serial`), or, with many threads and levels of
:data:`PARALLEL_LEVEL_ROWS` rows on average, level by level with the rows of wide levels on all
threads (:func:`ustc.ops.trisolve.sweep_levels`). In a device-resident solve
(a tensor on 'cuda') the factors are copied to the device once per solve and each sweep is the
level-scheduled kernel of :mod:`ustc.ops.cuda_trisolve`, one launch per level
(:class:`ustc.ops.trisolve.DeviceLevels`).
"""

from __future__ import annotations

import functools
import time

import numpy as np

from ..errors import ShapeError, SolveError, UstcError
from ..tensor import packages
from ..tensor.tensor import Tensor
from . import factor, krylov, trisolve

KINDS = ("ilu0", "ic0", "ssor")

#: a host sweep runs level by level, the rows of wide levels on all threads, only with at least
#: :data:`PARALLEL_MIN_THREADS` Numba threads and an average level of at least this many rows.
#: Otherwise the one-thread sweep in row order runs: on the 2-core project machine the ILU(0)
#: sweeps of the 64^3 Poisson matrix (190 levels of up to 3,072 rows) took 3.5 ms in row order
#: (dividing by the pivots; 2.4 ms now), 20.9 ms in level order on one thread (rows of a level lie
#: far apart in memory) and 20 to 26 ms with the wide levels on both threads (a parallel region costs ~45 µs of wake-up with
#: passive OpenMP workers). The level path is for many cores and wide levels; it has not been
#: measured to win on this machine.
PARALLEL_LEVEL_ROWS = 1 << 14
PARALLEL_MIN_THREADS = 8


class FactoredPreconditioner:
    """``M ≈ A^-1`` from an incomplete factorisation (or SSOR splitting) of a square matrix, made
    once and applied to any number of vectors: pass it as ``ustc.solve(..., preconditioner=M)``,
    call it (``M(r)``, ``M.matvec(r)``: NumPy in, NumPy out; a (n, k) array is k vectors), or hand
    it to SciPy's solvers (it has ``shape``, ``dtype`` and ``matvec``).

    Attributes: ``kind`` (``'ilu0'``, ``'ic0'``, ``'ssor'``), ``shape``, ``dtype`` (the
    factors'), ``nnz`` (entries of the factor pattern), ``omega`` and ``shift`` (what it was
    made with), ``symmetric`` (whether CG may use it: IC(0) and SSOR), ``factor_seconds``.
    ``L`` and ``U`` are the triangular factors as CSR Tensors (``L`` with its diagonal: ones for
    ILU(0)) and ``scale`` the diagonal of ``S`` (None for the identity), so that
    ``M^-1 r = U^-1 (scale * (L^-1 r))``. ``lower_levels`` / ``upper_levels`` are the level
    schedules of the two sweeps (:class:`ustc.ops.trisolve.LevelSchedule`), computed when first
    needed. Build one with :func:`ilu0`, :func:`ic0` or :func:`ssor`.
    """

    def __init__(self, kind: str, pos, crd, vals, diag, *, unit_lower: bool, scale, symmetric: bool,
                 omega: float = 1.0, shift: float = 0.0, factor_seconds: float = 0.0):
        self.kind = kind
        if max(pos.size, int(pos[-1])) < 2**31 - 1:      # int32 indices: less to read per sweep
            pos, crd, diag = pos.astype(np.int32), crd.astype(np.int32), diag.astype(np.int32)
        self.pos, self.crd, self.vals, self.diag = pos, crd, vals, diag
        self.unit_lower, self._scale = unit_lower, scale
        self.symmetric, self.omega, self.shift = symmetric, omega, shift
        self.factor_seconds = factor_seconds
        n = pos.size - 1
        self.shape = (n, n)
        self.dtype = vals.dtype
        self._cast: dict = {}

    # -- what it holds -----------------------------------------------------------------------
    @property
    def nnz(self) -> int:
        return int(self.pos[-1])

    @property
    def scale(self):
        return None if self._scale is None else self._scale.copy()

    def _triangle(self, lower: bool) -> Tensor:
        from ..formats import CSR

        n = self.shape[0]
        rows = np.repeat(np.arange(n), np.diff(self.pos))
        keep = self.crd <= rows if lower else self.crd >= rows
        vals = self.vals[keep].copy()
        if lower and self.unit_lower:
            vals[self.crd[keep] == rows[keep]] = 1
        counts = np.bincount(rows[keep], minlength=n)
        pos = np.concatenate([[0], np.cumsum(counts)]).astype(self.crd.dtype)
        return Tensor(CSR, self.shape, {(1, "pos"): pos, (1, "crd"): self.crd[keep].copy()}, vals)

    @property
    def L(self) -> Tensor:
        """The lower factor with its diagonal (unit for ILU(0)), a new CSR Tensor."""
        return self._triangle(True)

    @property
    def U(self) -> Tensor:
        """The upper factor with its diagonal, a new CSR Tensor."""
        return self._triangle(False)

    @functools.cached_property
    def lower_levels(self) -> trisolve.LevelSchedule:
        return trisolve.analyse_csr(self.pos, self.crd, True)

    @functools.cached_property
    def upper_levels(self) -> trisolve.LevelSchedule:
        return trisolve.analyse_csr(self.pos, self.crd, False)

    def __repr__(self) -> str:
        extra = f", omega={self.omega}" if self.kind == "ssor" else f", shift={self.shift}" if self.shift else ""
        return f"FactoredPreconditioner({self.kind!r}, shape={self.shape}, dtype={self.dtype}, nnz={self.nnz}{extra})"

    # -- applying it -----------------------------------------------------------------------
    def arrays(self, dtype):
        """``(vals, dinv, scale)`` in ``dtype`` (cached per dtype; ``dinv = 1 / vals[diag]``);
        UstcError for complex factors in a real system."""
        dtype = np.dtype(dtype)
        hit = self._cast.get(dtype)
        if hit is None:
            if self.dtype.kind == "c" and dtype.kind != "c":
                raise UstcError(f"solve: the {self.kind} preconditioner holds complex factors ({self.dtype}); it "
                                f"cannot precondition a real ({dtype}) system")
            scale = None if self._scale is None else self._scale.astype(dtype)
            vals = self.vals.astype(dtype, copy=False)
            hit = self._cast[dtype] = (vals, (1 / vals[self.diag]).astype(dtype), scale)
        return hit

    def parallel(self) -> bool:
        """Whether host sweeps go level by level on all threads (:data:`PARALLEL_LEVEL_ROWS`,
        :data:`PARALLEL_MIN_THREADS`)."""
        import numba

        n = self.shape[0]
        if numba.get_num_threads() < PARALLEL_MIN_THREADS or n < PARALLEL_LEVEL_ROWS:
            return False
        return all(n >= PARALLEL_LEVEL_ROWS * s.nlevels for s in (self.lower_levels, self.upper_levels))

    def apply_host(self, v: np.ndarray, out: np.ndarray, dtype=None) -> np.ndarray:
        """``out = M^-1 v`` for host vectors ``v``, ``out`` of ``dtype`` (``out`` must not alias
        ``v``)."""
        vals, dinv, scale = self.arrays(dtype or out.dtype)
        has_mid = scale is not None
        mid = scale if has_mid else vals[:0]
        if not self.parallel():
            trisolve.sweep_serial(self.pos, self.crd, vals, self.diag, dinv, mid, v, out, self.unit_lower, has_mid)
            return out
        lo, up = self.lower_levels, self.upper_levels
        out[...] = v
        trisolve.sweep_levels(self.pos, self.crd, vals, self.diag, lo.level_ptr, lo.level_rows, out, True,
                              self.unit_lower, PARALLEL_LEVEL_ROWS // 8)
        if has_mid:
            out *= mid
        trisolve.sweep_levels(self.pos, self.crd, vals, self.diag, up.level_ptr, up.level_rows, out, False,
                              False, PARALLEL_LEVEL_ROWS // 8)
        return out

    def matvec(self, r):
        """``M^-1 r`` for a host vector (n,) or (n, k) block of vectors (NumPy, or anything
        ``numpy.asarray`` reads; a CuPy array is copied to the host and the result back); the
        result has the common dtype of ``r`` and the factors."""
        if packages.is_cupy(r):  # pragma: no cover - needs a GPU
            import cupy

            return cupy.asarray(self.matvec(cupy.asnumpy(r)))
        r = np.asarray(r)
        n = self.shape[0]
        if r.ndim not in (1, 2) or r.shape[0] != n:
            raise ShapeError(f"{self.kind}: r has shape {r.shape}; expected ({n},) or ({n}, k)")
        dtype = np.result_type(r.dtype, self.dtype)
        if r.ndim == 1:
            return self.apply_host(np.ascontiguousarray(r, dtype=dtype), np.empty(n, dtype=dtype))
        out = np.empty(r.shape, dtype=dtype)
        for j in range(r.shape[1]):
            out[:, j] = self.apply_host(np.ascontiguousarray(r[:, j], dtype=dtype), np.empty(n, dtype=dtype))
        return out

    __call__ = matvec
    solve = matvec

    def bind(self, n: int, dtype, vec):
        """The :class:`ustc.ops.krylov.Preconditioner` a Krylov solve applies (vectors of backend
        ``vec`` and ``dtype``): host sweeps, or, for the device backend, the factors staged on the
        device and level-scheduled sweeps there."""
        if (n, n) != self.shape:
            raise ShapeError(f"solve: the {self.kind} preconditioner has shape {self.shape}; it must have a's "
                             f"shape ({n}, {n})")
        self.arrays(dtype)      # the real / complex check, before anything is staged
        if getattr(vec, "name", "host") == "host":
            return _HostApply(self, dtype, vec)
        return _DeviceApply(self, dtype, vec)

    def describe(self) -> str:
        """One line for ``SolveInfo.preconditioner``."""
        what = {"ilu0": "ILU(0)", "ic0": "IC(0)", "ssor": f"SSOR (omega={self.omega:g})"}[self.kind]
        shift = f", shift {self.shift:g}" if self.shift else ""
        return (f"{what} on the factor pattern ({self.shape[0]} rows, {self.nnz} entries{shift}), "
                f"made in {self.factor_seconds * 1e3:.3g} ms")


class _HostApply(krylov.Preconditioner):
    """``out = M^-1 v`` on host vectors (``applications`` counts the applications)."""

    def __init__(self, pre: FactoredPreconditioner, dtype, vec):
        self.pre, self.dtype, self.vec, self.n = pre, np.dtype(dtype), vec, pre.shape[0]
        self.name = f"the {pre.kind} preconditioner"
        self.applications = 0
        pre.arrays(dtype)

    def apply(self, out, v) -> None:
        if np.shares_memory(out, v):
            v = v.copy()
        self.pre.apply_host(v, out, self.dtype)
        self.applications += 1


class _DeviceApply(krylov.Preconditioner):
    """``out = M^-1 v`` on device vectors: the factor pattern, values, scale and both level
    schedules copied to the device once; each application is a copy in, one launch per level of
    each sweep (:class:`ustc.ops.trisolve.DeviceLevels`), the scaling, a copy out."""

    def __init__(self, pre: FactoredPreconditioner, dtype, vec):
        self.pre, self.dtype, self.vec, self.n = pre, np.dtype(dtype), vec, pre.shape[0]
        self.name = f"the {pre.kind} preconditioner"
        self.applications = 0
        xp = vec.xp
        vals, _, scale = pre.arrays(dtype)
        index = np.int32 if max(pre.shape[0], pre.nnz) < 2**31 - 1 else np.int64
        self.pos, self.crd = xp.asarray(pre.pos.astype(index)), xp.asarray(pre.crd.astype(index))
        self.vals = xp.asarray(vals)
        self.scale = None if scale is None else xp.asarray(scale)
        self.lower = trisolve.DeviceLevels(pre.lower_levels, vec)
        self.upper = trisolve.DeviceLevels(pre.upper_levels, vec)
        n = self.n
        self.b2, self.y2, self.z2 = (xp.empty((n, 1), dtype=self.dtype) for _ in range(3))
        self.b1, self.y1, self.z1 = self.b2.reshape(n), self.y2.reshape(n), self.z2.reshape(n)

    def apply(self, out, v) -> None:
        vec = self.vec
        vec.copy(self.b1, v)
        self.lower.substitute(self.pos, self.crd, self.vals, self.b2, self.y2, self.pre.unit_lower)
        if self.scale is not None:
            vec.scale_into(self.y1, self.scale, self.y1)
        self.upper.substitute(self.pos, self.crd, self.vals, self.y2, self.z2, False)
        vec.copy(out, self.z1)
        self.applications += 1


# -- making them ---------------------------------------------------------------------------------

def _pattern(a, who: str, shift: float = 0.0):
    """``(a_host, pos, crd, vals, diag, dtype)``: the factor pattern of square ``a`` on the host,
    values in the factor dtype, ``shift * diag(a)`` added to the diagonal."""
    from . import operands as ops

    a = ops.normalise(a, "a")
    if not isinstance(a, Tensor) or a.ndim != 2:
        raise ShapeError(f"{who}: a must be a sparse matrix (a 2-D ustc Tensor or a SciPy / torch sparse matrix)")
    if a.shape[0] != a.shape[1]:
        raise ShapeError(f"{who}: a must be square, got shape {a.shape}")
    if a.format.batch_levels:
        raise ShapeError(f"{who}: a must be one matrix, not a batch")
    host = a if a.device == "cpu" else a.to("cpu")
    dtype = np.result_type(host.dtype, np.float32)
    if dtype.kind not in "fc":
        dtype = np.dtype(np.float64)
    csr = trisolve.canonical(trisolve.as_csr(host))
    pos, crd = trisolve.host_pattern(csr)
    vals = np.ascontiguousarray(csr.raw_values[:int(pos[-1])], dtype=dtype)
    if not np.isfinite(vals).all():
        raise SolveError(f"{who}: the matrix a holds a non-finite value (NaN or Inf)")
    pos, crd, vals, diag = factor.factor_pattern(np.ascontiguousarray(pos), np.ascontiguousarray(crd), vals)
    if shift:
        vals[diag] += vals[diag] * dtype.type(shift)
    return host, pos, crd, vals, diag, dtype


def _check_shift(shift) -> float:
    shift = float(shift)
    if not np.isfinite(shift) or shift < 0:
        raise UstcError(f"precond: shift must be a finite number >= 0, got {shift}")
    return shift


def ilu0(a, *, shift: float = 0.0) -> FactoredPreconditioner:
    """ILU(0) of square ``a`` (any format, device or package :func:`ustc.solve` takes): ``L U`` on
    ``a``'s factor pattern with ``(L U)[i, j] = a[i, j]`` there, ``L`` unit lower. ``shift``
    factors ``a + shift * diag(a)``. :class:`ustc.SolveError` when a pivot ``U[i, i]`` comes out
    zero (an empty row of ``a``, or a zero diagonal elimination does not fill), naming the row."""
    shift = _check_shift(shift)
    start = time.perf_counter()
    _, pos, crd, vals, diag, _ = _pattern(a, "ilu0", shift)
    original = vals[diag].copy()
    bad = factor.ilu0(pos, crd, vals, diag)
    if bad >= 0:
        raise _zero_pivot(bad, pos, original[bad])
    return FactoredPreconditioner("ilu0", pos, crd, vals, diag, unit_lower=True, scale=None, symmetric=False,
                                  shift=shift, factor_seconds=time.perf_counter() - start)


def _zero_pivot(row: int, pos, diagonal) -> SolveError:
    fix = ("reorder a so that its diagonal holds nonzeros, shift it (ustc.ops.precond.ilu0(a, shift=0.1)), or "
           "solve with method='direct'")
    if pos[row + 1] - pos[row] == 1 and diagonal == 0:
        return SolveError(f"solve: ILU(0) met a zero pivot at row {row}: row {row} of a is empty (no nonzero "
                          f"entry), so a is singular and ILU(0) cannot be formed")
    return SolveError(f"solve: ILU(0) met a zero pivot at row {row}: U[{row}, {row}] is 0 after elimination "
                      f"(a[{row}, {row}] = {diagonal}); {fix}")


def ic0(a, *, shift: float = 0.0) -> FactoredPreconditioner:
    """IC(0) of Hermitian positive definite ``a``: ``L L^H`` with ``L`` lower on the lower half of
    ``a``'s factor pattern and ``(L L^H)[i, j] = a[i, j]`` there. ``shift`` factors
    ``a + shift * diag(a)``. :class:`ustc.SolveError` when ``a`` is not Hermitian, or when a pivot
    is not positive (``a`` is not positive definite, or IC(0) breaks down on it), naming the row
    and suggesting a shift or ``'ilu0'``."""
    from .solve import _symmetric

    shift = _check_shift(shift)
    start = time.perf_counter()
    host, pos, crd, vals, diag, _ = _pattern(a, "ic0", shift)
    if not _symmetric(host) or not factor.symmetric_pattern(pos, crd, diag):
        raise SolveError("solve: IC(0) needs a Hermitian (symmetric) matrix and a is not; use preconditioner='ilu0' "
                         "with method 'bicgstab' or 'gmres'")
    bad, pivot = factor.ic0(pos, crd, vals, diag)
    if bad >= 0:
        raise SolveError(f"solve: IC(0) met a non-positive pivot at row {bad} ({pivot:.3e}): a is not positive "
                         f"definite, or IC(0) breaks down on it (possible for positive definite matrices that are "
                         f"not diagonally dominant); shift the diagonal (ustc.ops.precond.ic0(a, shift=0.1)) or use "
                         f"preconditioner='ilu0' with method 'bicgstab' or 'gmres'")
    return FactoredPreconditioner("ic0", pos, crd, vals, diag, unit_lower=False, scale=None, symmetric=True,
                                  shift=shift, factor_seconds=time.perf_counter() - start)


def ssor(a, omega: float = 1.0) -> FactoredPreconditioner:
    """Symmetric SOR of square ``a``: ``M = (D + w L_a) (w (2 - w) D)^-1 (D + w U_a)``, ``w = omega``
    in (0, 2), applied as a forward sweep, a diagonal scaling and a backward sweep (nothing is
    factored). :class:`ustc.SolveError` naming the first zero diagonal entry."""
    omega = float(omega)
    if not 0 < omega < 2:
        raise UstcError(f"solve: SSOR needs 0 < omega < 2, got omega={omega}")
    start = time.perf_counter()
    _, pos, crd, vals, diag, dtype = _pattern(a, "ssor")
    d = vals[diag]
    zero = np.flatnonzero(d == 0)
    if zero.size:
        raise SolveError(f"solve: SSOR needs a nonzero diagonal; entry ({zero[0]}, {zero[0]}) of a is zero")
    values = factor.ssor_values(pos, crd, vals, diag, dtype.type(omega))
    scale = (d * dtype.type(omega * (2 - omega))).astype(dtype)
    return FactoredPreconditioner("ssor", pos, crd, values, diag, unit_lower=False, scale=scale, symmetric=True,
                                  omega=omega, factor_seconds=time.perf_counter() - start)


def build(kind: str, a, omega: float = 1.0) -> FactoredPreconditioner:
    """The preconditioner ``kind`` (one of :data:`KINDS`) of ``a``: what ``ustc.solve`` makes for
    ``preconditioner=kind``."""
    if kind == "ilu0":
        return ilu0(a)
    if kind == "ic0":
        return ic0(a)
    if kind == "ssor":
        return ssor(a, omega)
    raise UstcError(f"precond: kind must be one of {', '.join(KINDS)}, got {kind!r}")
