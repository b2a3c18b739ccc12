"""CUDA kernel of the level-scheduled triangular solve (numba-cuda).

Imported only when a solve runs on the ``cuda`` target (:func:`ustc.ops.trisolve.solve_cuda`),
so ``import ustc`` does not import ``numba.cuda``; under ``NUMBA_ENABLE_CUDASIM=1`` the same
kernel runs in Numba's simulator.

Thread mapping. One launch per level (:class:`~ustc.ops.trisolve.LevelSchedule`), launches in
order on one stream, so every ``x[c]`` a row reads was written by an earlier launch. Within a
launch, thread ``t`` (grid-stride) owns the pair ``(row, column) = (rows[t // k], t % k)`` of
the level's rows and the k right-hand sides, and walks that row serially:
``x[r, j] = (b[r, j] - sum_{c on the solved side} T[r, c] x[c, j]) / T[r, r]``.

Why a thread per (row, column) rather than a warp per row: the rows of triangular factors
(incomplete Cholesky / LU, discretised operators) are short, typically under 16 entries, so a
warp per row would leave most lanes idle and add a shuffle reduction to every row; the time of
a level-scheduled solve goes to launches and to the narrow levels, which a wider row mapping
does not shorten. With k right-hand sides the k threads of one row sit in adjacent lanes: they
read the same ``crd`` / values entries (broadcast) and adjacent ``x[c, :]`` (coalesced).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ..tensor import packages
from . import cuda_host

THREADS = 128        # threads per block on a GPU
MAX_BLOCKS = 4096    # grid-stride loops cover wider levels
SIM_THREADS, SIM_BLOCKS = 32, 2   # the simulator runs every thread as a Python thread


@cuda.jit(cache=True)
def trisolve_level(pos, crd, vals, diag, rows, start, count, b, x, lower, unit):
    """Solve rows ``rows[start:start + count]`` (one level) for every column of ``b`` into ``x``."""
    k = b.shape[1]
    for t in range(cuda.grid(1), count * k, cuda.gridsize(1)):
        r = rows[start + t // k]
        j = t % k
        acc = b[r, j]
        for p in range(pos[r], pos[r + 1]):
            c = crd[p]
            if (c < r) if lower else (c > r):
                acc -= vals[p] * x[c, j]
        if unit:
            x[r, j] = acc
        else:
            x[r, j] = acc / vals[diag[r]]


KERNELS = {"trisolve_level": trisolve_level}


def substitute(pos, crd, vals, schedule, b, unit: bool):
    """Run every level of ``schedule`` for (n, k) right-hand sides ``b``; returns (n, k) ``x``.

    Host (NumPy) operands are copied to the device once and ``x`` back once; CuPy operands
    are used in place (zero-copy) and ``x`` is a new CuPy array, all on CuPy's current stream.
    ``vals`` has ``b``'s dtype; the diagonal was checked (:func:`ustc.ops.trisolve.check_diagonal`).
    """
    n, k = b.shape
    on_device = packages.is_cupy(b)
    stream = (cuda_host.current_stream([b]) if on_device else None) or 0
    if on_device:  # pragma: no cover - needs a GPU and CuPy
        import cupy

        x = cupy.empty((n, k), dtype=b.dtype)
        arrays = (pos, crd, vals, cupy.asarray(schedule.diag), cupy.asarray(schedule.level_rows), b, x)
        *args, bd, xd = [cuda.as_cuda_array(cupy.ascontiguousarray(a), sync=False) for a in arrays]
    else:
        arrays = (pos, crd, vals, schedule.diag, schedule.level_rows, b)
        *args, bd = [cuda.to_device(np.ascontiguousarray(a), stream=stream) for a in arrays]
        xd = cuda.device_array((n, k), dtype=b.dtype, stream=stream)
    threads, max_blocks = (SIM_THREADS, SIM_BLOCKS) if cuda_host.simulator() else (THREADS, MAX_BLOCKS)
    ptr = schedule.level_ptr.tolist()
    for level in range(schedule.nlevels):
        start, count = ptr[level], ptr[level + 1] - ptr[level]
        work = count * k
        if work:
            blocks = min(max_blocks, (work + threads - 1) // threads)
            trisolve_level[blocks, threads, stream](*args, start, count, bd, xd, schedule.lower, unit)
    return x if on_device else xd.copy_to_host(stream=stream)


def signatures():
    """Argument types ``trisolve_level`` is compiled for ahead of a launch (the PTX check):
    int32 indices with float32 / float64 / complex64 / complex128 values, and int64 matrix
    indices with an int32 or int64 schedule (the schedule is int64 only past 2**31 entries)."""
    from numba import types

    def arr(dtype, ndim=1):
        return types.Array(dtype, ndim, "C")

    out = []
    i32, i64 = types.int32, types.int64
    for index, sched, value in [(i32, i32, types.float32), (i32, i32, types.float64), (i32, i32, types.complex64),
                                (i32, i32, types.complex128), (i64, i32, types.float64), (i64, i64, types.float64)]:
        out.append((arr(index), arr(index), arr(value), arr(sched), arr(sched), i64, i64, arr(value, 2),
                    arr(value, 2), types.boolean, types.boolean))
    return out


def compile_kernels(cc=None) -> list:
    """Every trisolve kernel for every :func:`signatures` entry, as PTX for ``cc`` (sm_90 by
    default) linked to a cubin (:class:`ustc.ops.cuda_ptx.CompiledKernel` each). No GPU needed;
    not in the simulator."""
    from . import cuda_ptx

    cc = cc or cuda_ptx.ARCH
    return [cuda_ptx.compile_kernel(name, kernel, sig, "level-scheduled triangular solve", cc)
            for name, kernel in KERNELS.items() for sig in signatures()]
