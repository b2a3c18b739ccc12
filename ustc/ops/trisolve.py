"""Level-scheduled sparse triangular solves: the level analysis (host) and the ``cuda`` driver.

Row ``r`` of a lower (upper) triangular CSR matrix depends on every row ``c < r``
(``c > r``) it stores an entry for. Its *level* is 0 without dependencies, else
``1 + max(level[c])`` over them, so the rows of one level depend only on earlier
levels and can be solved at the same time. :func:`analyse` computes the levels
on the host in one O(n + nnz) pass (:func:`ustc.ops._vector.triangular_levels`) and groups the rows by level
(:class:`LevelSchedule`); :func:`solve_cuda` runs one kernel launch per level
(:mod:`ustc.ops.cuda_trisolve`), in order, on one stream.

    >>> import numpy as np, ustc
    >>> from ustc.ops.trisolve import analyse
    >>> L = ustc.Tensor.from_dense(np.array([[2., 0, 0], [1, 2, 0], [0, 0, 2]]), "CSR")
    >>> s = analyse(L, lower=True)
    >>> s.nlevels, s.level_ptr.tolist(), s.level_rows.tolist()
    (2, [0, 2, 3], [0, 2, 1])

A schedule depends only on the sparsity pattern and the side: a caller that
solves with the same matrix again (new values on the same pattern, or new
right-hand sides) passes it back to :func:`solve_cuda`; ``ustc.solve`` returns
the one it used in ``SolveInfo.levels``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import prange

from ..cache._lean import njit_cached
from ..errors import SolveError, UstcError
from ..tensor import packages
from ..tensor.tensor import Tensor


@dataclass(frozen=True, eq=False)
class LevelSchedule:
    """The rows of an n×n triangular CSR matrix grouped by level (host NumPy arrays, read-only).

    ``level_ptr`` (``nlevels + 1`` entries) and ``level_rows`` (a permutation of
    ``0..n-1``) are CSR-like: level ``l`` holds the rows
    ``level_rows[level_ptr[l]:level_ptr[l + 1]]``, ascending. ``diag[r]`` is the
    position of row ``r``'s diagonal entry in the matrix's ``crd`` / values, -1 when
    none is stored. ``nnz`` is the matrix's ``pos[-1]`` (a reuse check). Every row's
    dependencies lie in strictly earlier levels, and ``nlevels`` is the length of the
    longest dependency chain (0 for an empty matrix).
    """

    lower: bool
    n: int
    nnz: int
    level_ptr: np.ndarray
    level_rows: np.ndarray
    diag: np.ndarray

    @property
    def nlevels(self) -> int:
        return len(self.level_ptr) - 1

    def rows(self, level: int) -> np.ndarray:
        """The rows of ``level``, ascending."""
        return self.level_rows[self.level_ptr[level]:self.level_ptr[level + 1]]

    def levels(self) -> np.ndarray:
        """``level[r]`` for every row (the inverse of the grouping)."""
        out = np.empty(self.n, dtype=np.int64)
        out[self.level_rows] = np.repeat(np.arange(self.nlevels), np.diff(self.level_ptr))
        return out

    def describe(self) -> str:
        side = "lower" if self.lower else "upper"
        return f"level-scheduled {side} substitution on CSR rows, {self.nlevels} levels"


def analyse_csr(pos, crd, lower: bool) -> LevelSchedule:
    """The :class:`LevelSchedule` of the CSR pattern ``pos`` / ``crd`` (host arrays; entries on
    the other side of the diagonal are ignored). Index arrays are int32 where they fit."""
    pos, crd = np.ascontiguousarray(pos), np.ascontiguousarray(crd)
    n, nnz = len(pos) - 1, int(pos[-1]) if len(pos) else 0
    if n < 0:
        raise UstcError("level analysis: pos must have n + 1 entries, got an empty array")
    from . import _vector

    ptr, rows, diag = _vector.triangular_levels(pos, crd, bool(lower))
    index = np.int32 if max(n, nnz) < 2**31 - 1 else np.int64
    arrays = [ptr.astype(index), rows.astype(index), diag.astype(index)]
    for a in arrays:
        a.setflags(write=False)
    return LevelSchedule(bool(lower), n, nnz, *arrays)


def analyse(a: Tensor, lower: bool) -> LevelSchedule:
    """The :class:`LevelSchedule` of square matrix ``a`` (any format and device; the pattern is
    read on the host), using its lower (``lower=True``) or upper triangle. Duplicate entries
    count once (the schedule is that of :func:`canonical` ``(as_csr(a))``)."""
    pos, crd = host_pattern(canonical(as_csr(a)))
    return analyse_csr(pos, crd, lower)


def as_csr(a: Tensor) -> Tensor:
    """``a`` itself when it is CSR, else a CSR copy on the same device."""
    from ..formats import CSR
    from ..tensor.interop import plain_format

    if plain_format(a.format) == plain_format(CSR):
        return a
    if a.device != "cpu":
        return a.to("cpu").convert(CSR).to(a.device)
    return a.convert(CSR)


def rows_canonical(pos, crd) -> bool:
    """Whether every row of the host CSR pattern ``pos`` / ``crd`` is sorted without duplicates (O(nnz))."""
    from . import _vector

    return bool(_vector.csr_rows_canonical(np.ascontiguousarray(pos), np.ascontiguousarray(crd)))


def canonical(csr: Tensor) -> Tensor:
    """``csr`` itself when every row is sorted without duplicates (one O(nnz) scan of the
    pattern), else :func:`summed`. ``csr`` is never modified."""
    pos, crd = host_pattern(csr)
    return csr if rows_canonical(pos, crd) else summed(csr, pos, crd)


def summed(csr: Tensor, pos, crd) -> Tensor:
    """A new CSR tensor on ``csr``'s device: each row sorted, duplicate entries summed.
    ``pos`` / ``crd``: ``csr``'s :func:`host_pattern`."""
    from ..formats import CSR

    if csr.device == "cpu":
        pos, crd, values = sum_duplicates(pos, crd, csr.raw_values)
        return Tensor(CSR, csr.shape, {(1, "pos"): pos, (1, "crd"): crd}, values, package=csr.package)
    return summed(csr.to("cpu"), pos, crd).to(csr.device)


def sum_duplicates(pos, crd, values):
    """``(pos, crd, values)``: new host CSR arrays with each row sorted by coordinate and the
    values of repeated coordinates summed (index dtypes kept)."""
    n, lo, hi = len(pos) - 1, int(pos[0]), int(pos[-1])
    rows = np.repeat(np.arange(n), np.diff(pos))
    crd, values = np.asarray(crd)[lo:hi], np.asarray(values)[lo:hi]
    order = np.lexsort((crd, rows))
    rows, crd, values = rows[order], crd[order], values[order]
    first = np.ones(rows.size, dtype=bool)
    first[1:] = (rows[1:] != rows[:-1]) | (crd[1:] != crd[:-1])
    starts = np.flatnonzero(first)
    out_pos = np.zeros(n + 1, dtype=np.asarray(pos).dtype)
    out_pos[1:] = np.cumsum(np.bincount(rows[starts], minlength=n))
    sums = np.add.reduceat(values, starts) if starts.size else values[:0].copy()
    return out_pos, crd[starts], sums


def host_pattern(csr: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """``(pos, crd)`` of a CSR tensor's compressed level as host arrays (copied from a device)."""
    pos, crd = csr.raw_buffers[(1, "pos")], csr.raw_buffers[(1, "crd")]
    if packages.is_cupy(pos):
        import cupy

        return cupy.asnumpy(pos), cupy.asnumpy(crd)
    return pos, crd


def singular(row: int) -> SolveError:
    """The error of a triangular solve whose diagonal entry ``(row, row)`` is missing or zero."""
    return SolveError(f"solve: the triangular matrix is singular: diagonal entry ({row}, {row}) is missing or zero")


def check_diagonal(schedule: LevelSchedule, values) -> None:
    """Raise :func:`singular` for the first row, in substitution order, whose diagonal entry
    is missing or zero. ``values`` may live on a device; only the n diagonal values move."""
    diag = schedule.diag
    picked = np.maximum(diag, 0)
    if packages.is_cupy(values):
        import cupy

        d = cupy.asnumpy(values[cupy.asarray(picked)])
    else:
        d = np.asarray(values)[picked]
    bad = np.flatnonzero((diag < 0) | (d == 0))
    if bad.size:
        raise singular(int(bad[0] if schedule.lower else bad[-1]))


def solve_cuda(csr: Tensor, b, lower: bool, unit: bool, schedule: LevelSchedule | None = None):
    """``x`` with ``T x = b`` on the ``cuda`` target, ``T`` the lower / upper triangle of CSR
    tensor ``csr`` (the diagonal taken as 1 when ``unit``; duplicate entries summed first, on a
    copy, see :func:`canonical`), and the schedule used.

    ``b`` is (n,) or (n, k) of the solve's dtype: host (NumPy; copied to the device once,
    ``x`` copied back) or, with ``csr`` on 'cuda', CuPy (zero-copy; ``x`` is a new CuPy
    array). The level analysis and the singularity check (:class:`ustc.SolveError`) run
    before any launch; :class:`ustc.DeviceError` without a GPU or the simulator.
    """
    from . import cuda_host

    pos, crd = host_pattern(csr)
    if not rows_canonical(pos, crd):
        csr = summed(csr, pos, crd)
        pos, crd = host_pattern(csr)
    if schedule is None:
        schedule = analyse_csr(pos, crd, lower)
    elif (schedule.n, schedule.nnz, schedule.lower) != (csr.shape[0], int(pos[-1]), bool(lower)):
        raise UstcError(f"solve: the level schedule was made for a {schedule.n}×{schedule.n} "
                        f"{'lower' if schedule.lower else 'upper'} pattern with {schedule.nnz} entries, "
                        f"not this one; analyse the matrix again")
    values = csr.raw_values.astype(b.dtype, copy=False)
    if not unit:
        check_diagonal(schedule, values)
    cuda_host.require_device()
    from . import cuda_trisolve

    device = [csr.raw_buffers[(1, "pos")], csr.raw_buffers[(1, "crd")], values]
    x = cuda_trisolve.substitute(*device, schedule, b.reshape(b.shape[0], 1) if b.ndim == 1 else b, unit)
    return x.reshape(b.shape), schedule


# -- sweeps over a factor pattern: the triangular solves of ustc.ops.precond ------------------
#
# A factor pattern (:mod:`ustc.ops.factor`) is canonical CSR with every diagonal entry stored at
# ``diag[r]``; its entries left of the diagonal form the lower sweep's matrix, the diagonal and
# the entries right of it the upper sweep's. The level schedules of the two sides are
# :func:`analyse_csr` of the pattern (their ``diag`` is that position array).

@njit_cached(nogil=True)
def sweep_serial(pos, crd, vals, diag, dinv, mid, v, out, unit_lower, has_mid):
    """``out = U^-1 S L^-1 v`` on one thread in row order: ``L`` the lower part of the factor
    pattern (its diagonal taken as 1 when ``unit_lower``), ``S = diag(mid)`` when ``has_mid``
    else the identity, ``U`` the diagonal and upper part; ``dinv`` holds ``1 / vals[diag]``
    (each row multiplies by it: a division's latency would sit on the chain of dependent
    rows, 12% of an ILU(0) sweep of the 64^3 Poisson matrix). ``out`` may not alias ``v``; a
    zero pivot was excluded when the factors were made."""
    n = v.size
    for i in range(n):
        acc = v[i]
        for p in range(pos[i], diag[i]):
            acc -= vals[p] * out[crd[p]]
        out[i] = acc if unit_lower else acc * dinv[i]
    if has_mid:
        for i in range(n):
            out[i] *= mid[i]
    for i in range(n - 1, -1, -1):
        acc = out[i]
        for p in range(diag[i] + 1, pos[i + 1]):
            acc -= vals[p] * out[crd[p]]
        out[i] = acc * dinv[i]


@njit_cached(nogil=True, parallel=True)
def sweep_levels(pos, crd, vals, diag, level_ptr, level_rows, x, lower, unit, min_parallel):
    """One substitution in place on vector ``x`` (``b`` on entry) in the order of a level schedule
    (``level_ptr`` / ``level_rows`` of the ``lower`` or upper side): the rows of a level with at
    least ``min_parallel`` rows are solved on all threads, narrower levels on one (a parallel
    region costs a thread wake-up, ~45 µs with passive OpenMP workers)."""
    # the row's loop is written out in both branches: as a njit helper called per row (array
    # arguments) the serial levels ran 2.2x slower
    for lev in range(level_ptr.size - 1):
        lo, hi = level_ptr[lev], level_ptr[lev + 1]
        if hi - lo >= min_parallel:
            for t in prange(lo, hi):
                r = level_rows[t]
                acc = x[r]
                for p in range(pos[r], pos[r + 1]):
                    c = crd[p]
                    if (c < r) if lower else (c > r):
                        acc -= vals[p] * x[c]
                x[r] = acc if unit else acc / vals[diag[r]]
        else:
            for t in range(lo, hi):
                r = level_rows[t]
                acc = x[r]
                for p in range(pos[r], pos[r + 1]):
                    c = crd[p]
                    if (c < r) if lower else (c > r):
                        acc -= vals[p] * x[c]
                x[r] = acc if unit else acc / vals[diag[r]]


class DeviceLevels:
    """A :class:`LevelSchedule` staged on the device once (its rows and diagonal positions as
    arrays of the device vector backend ``vec``, :class:`ustc.ops.cuda_vectors.DeviceVectors`), for
    repeated substitutions through the kernel of :mod:`ustc.ops.cuda_trisolve`: one launch per
    level on the backend's stream, no host copy per call (the preconditioners of a
    device-resident solve)."""

    def __init__(self, schedule: LevelSchedule, vec):
        self.schedule, self.vec = schedule, vec
        self.rows = vec.xp.asarray(schedule.level_rows)
        self.diag = vec.xp.asarray(schedule.diag)
        self.ptr = schedule.level_ptr.tolist()

    def substitute(self, pos, crd, vals, b, x, unit: bool) -> None:
        """``x = T^-1 b`` for the schedule's side ``T`` of the pattern ``pos`` / ``crd`` / ``vals``
        (device arrays); ``b`` and ``x`` are (n, k) device arrays."""
        from .cuda_trisolve import trisolve_level

        k = b.shape[1]
        lower = self.schedule.lower
        for level in range(len(self.ptr) - 1):
            start, count = self.ptr[level], self.ptr[level + 1] - self.ptr[level]
            if count:
                self.vec._launch(trisolve_level, count * k, pos, crd, vals, self.diag, self.rows, start, count,
                                 b, x, lower, unit)
