"""n:m structured GEMV and small-batch SpMM on the cuda target: numba-cuda kernels, one per ``(n, m)``.

The layout is the CPU kernels' (:mod:`ustc.kernels._structured`): row ``i`` holds
``groups * n`` slots, slot ``q`` at ``p = i * groups * n + q`` in column
``(q // n) * m + crd[p]``; a last group reaching past the matrix's width may hold
padding whose column is past it (skipped, as on the CPU).

* GEMV (``y += alpha * A @ x``): ``width`` lanes per row, ``32 // width`` rows a warp.
  Lane ``l`` walks the row's groups ``l, l + width, ...``: per group it computes the
  group's first column ``g * m`` once and adds its ``n`` slots (``n`` a compile-time
  constant: unrolled), so adjacent lanes read adjacent groups' coordinates and values
  (coalesced). The lanes' sums meet by ``shfl_down_sync``; lane 0 stores.
* SpMM (``Y += alpha * A @ B``, ``B``: ``(columns, batch)``, ``Y``: ``(rows, batch)``,
  both row-major, for the small batches of inference): ``width`` lanes per row, one
  per column of ``B`` (``j = lane, lane + width, ...``), ``32 // width`` rows a warp.
  A row's coordinates and values are read once per warp request (every lane of the row
  reads the same slot: one broadcast transaction) and ``B[c, j]`` is contiguous over
  the lanes. No shuffles, no atomics.

Values are read as float32 or float64 (float16 values widen to float32, as the
generated kernels do) and summed in that type; the store rounds to ``y``'s dtype.
Operands the kernels never write are read through the read-only path
(``ldg``, :mod:`ustc.codegen.cuda_loads`). Under ``NUMBA_ENABLE_CUDASIM=1`` the same
kernels run in Numba's simulator on NumPy arrays (shuffles through
:func:`ustc.ops.cuda_host.install_simulated_shuffle`). Importing this module imports
``numba.cuda``: :mod:`ustc.kernels.builtin_cuda` imports it on the first launch only.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import config, cuda

from ..codegen.cuda_checks import Promise
from ..codegen.cuda_loads import ldg
from ..codegen.cuda_schedule import lane_bucket
from ..ops import cuda_host

THREADS = 256          # threads a block on a GPU
MIN_BLOCKS = 2         # launch bounds: blocks a multiprocessor holds at once (128 registers a thread)
MAX_BLOCKS = 4096      # grid-stride loops cover more rows
SIM_THREADS, SIM_BLOCKS = 32, 2   # the simulator runs every thread as a Python thread
FULL_MASK = 0xFFFFFFFF


def _bounds() -> dict:
    return {} if config.ENABLE_CUDASIM else {"launch_bounds": (THREADS, MIN_BLOCKS)}


def wide_type(dtype) -> type:
    """The type a kernel reads values as and sums in: float32 for float16 / float32, else float64."""
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


@functools.lru_cache(maxsize=None)
def gemv_kernel(n: int, m: int, width: int, wide: type):
    """The kernel ``(crd, vals, x, y, alpha, n_rows, n_groups, n_cols)``: ``y += alpha * A @ x``
    for the n:m ``A`` with ``n_groups`` groups a row, ``width`` lanes a row."""
    rows = 32 // width

    @cuda.jit(**_bounds())
    def kernel(crd, vals, x, y, alpha, n_rows, n_groups, n_cols):
        lane = cuda.threadIdx.x % width
        slot = cuda.threadIdx.x % 32 // width
        per_row = n_groups * n
        full = n_cols // m                      # groups wholly inside the matrix
        for base in range(cuda.grid(1) // 32 * rows, n_rows, cuda.gridsize(1) // 32 * rows):
            i = base + slot                     # the loop is uniform over the warp: every lane shuffles
            acc = wide(0)
            if i < n_rows:
                start = i * per_row
                for g in range(lane, n_groups, width):
                    p = start + g * n
                    first = g * m               # the group's first column, once per group
                    if g < full:
                        for s in range(n):
                            acc += wide(ldg(vals, p + s)) * wide(ldg(x, first + ldg(crd, p + s)))
                    else:                       # padding may point past the matrix
                        for s in range(n):
                            c = first + ldg(crd, p + s)
                            if c < n_cols:
                                acc += wide(ldg(vals, p + s)) * wide(ldg(x, c))
            offset = width // 2
            while offset > 0:
                acc += cuda.shfl_down_sync(FULL_MASK, acc, offset)
                offset //= 2
            if lane == 0 and i < n_rows:
                y[i] += alpha * acc

    return kernel


@functools.lru_cache(maxsize=None)
def spmm_kernel(n: int, m: int, width: int, wide: type):
    """The kernel ``(crd, vals, b, y, alpha, n_rows, n_groups, n_cols)``: ``y += alpha * A @ b``
    (``b``: ``(n_cols, batch)``) for the n:m ``A``, ``width`` lanes (columns of ``b``) a row."""
    rows = 32 // width

    @cuda.jit(**_bounds())
    def kernel(crd, vals, b, y, alpha, n_rows, n_groups, n_cols):
        lane = cuda.threadIdx.x % width
        slot = cuda.threadIdx.x % 32 // width
        per_row = n_groups * n
        batch = b.shape[1]
        for base in range(cuda.grid(1) // 32 * rows, n_rows, cuda.gridsize(1) // 32 * rows):
            i = base + slot
            if i < n_rows:
                start = i * per_row
                for j in range(lane, batch, width):
                    acc = wide(0)
                    for g in range(n_groups):
                        p = start + g * n
                        first = g * m           # the group's first column, once per group
                        for s in range(n):
                            c = first + ldg(crd, p + s)
                            if c < n_cols:
                                acc += wide(ldg(vals, p + s)) * wide(ldg(b, (c, j)))
                    y[i, j] += alpha * acc

    return kernel


def promise(kernel: str, width: int) -> Promise:
    """What the machine code of ``gemv_kernel`` / ``spmm_kernel`` (``kernel``: ``"gemv"`` or
    ``"spmm"``) at ``width`` lanes keeps (``codegen.cuda_checks``): the launch bounds' register
    budget, no spills or local memory, read-only loads, shuffles only where a GEMV row's lanes
    meet, no atomics."""
    budget = min(255, 65536 // (THREADS * MIN_BLOCKS) // 8 * 8)
    return Promise(budget, MIN_BLOCKS, THREADS, shuffles=kernel == "gemv" and width > 1, atomics=False,
                   readonly=True)


def _grid(work: int) -> tuple[int, int]:
    """``(blocks, threads)`` for ``work`` threads of grid-stride work."""
    threads, limit = (SIM_THREADS, SIM_BLOCKS) if cuda_host.simulator() else (THREADS, MAX_BLOCKS)
    return max(1, min(limit, -(-work // threads))), threads


def gemv(crd, vals, x, y, alpha, n: int, m: int, n_cols: int) -> None:
    """``y += alpha * A @ x`` for the n:m ``A`` stored as ``crd`` / ``vals`` with ``len(y)`` rows."""
    n_rows = len(y)
    n_groups = -(-n_cols // m)
    width = lane_bucket(n_groups)   # a lane per group, up to a warp a row
    wide = wide_type(vals.dtype)
    kernel = gemv_kernel(n, m, width, wide)
    _launch(kernel, n_rows * width, crd, vals, x, y, wide(alpha), n_rows, n_groups, n_cols)


def spmm(crd, vals, b, y, alpha, n: int, m: int, n_cols: int) -> None:
    """``y += alpha * A @ b`` for the n:m ``A`` (``b``: ``(n_cols, batch)``, ``y``: ``(rows, batch)``)."""
    n_rows = y.shape[0]
    n_groups = -(-n_cols // m)
    width = lane_bucket(b.shape[1])
    wide = wide_type(vals.dtype)
    kernel = spmm_kernel(n, m, width, wide)
    _launch(kernel, n_rows * width, crd, vals, b, y, wide(alpha), n_rows, n_groups, n_cols)


def _launch(kernel, work: int, *args) -> None:
    if work == 0:
        return
    cuda_host.require_device()
    if cuda_host.simulator():
        cuda_host.install_simulated_shuffle()
    blocks, threads = _grid(work)
    stream = cuda_host.current_stream([a for a in args if hasattr(a, "dtype")])

    def launch(*views, stream=0):
        kernel[blocks, threads, stream](*views)

    if stream is None:
        launch(*args)
    else:  # pragma: no cover - a real stream needs a GPU
        cuda_host.on_stream(launch, stream, *args)
