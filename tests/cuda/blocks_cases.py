"""BSR SpMV with compile-time block shapes (``codegen.cuda_blocks``) and block rows read in
vector loads (``cuda_schedule.block_row``), as a script run in a process of its own.

    python tests/cuda/blocks_cases.py sim    # NUMBA_ENABLE_CUDASIM=1: run each kernel, compare with NumPy
    python tests/cuda/blocks_cases.py gpu    # a real GPU: the same cases launched on the device

Prints one JSON object per case, like ``matrix.py``, whose runners it reuses. Every block
shape meets the matrix's edges with partial blocks (9 x 10 is a multiple of none of them
but 1 and 2 columns).
"""

from __future__ import annotations

import functools
import sys
import warnings

import ml_dtypes
import numpy as np

import ustc
from _cases import report
from matrix import D, program, run_sim

F = ustc.formats
SPMV = "y[i] = A[i,j] * x[j]"
M, N = 9, 10
#: block shapes: square and not, 16 / 8 bytes a row in some dtypes, a width no vector divides (3)
SHAPES = ((2, 2), (4, 4), (2, 4), (1, 4), (4, 1), (3, 3))
DTYPES = (np.float64, np.float32, np.float16, ml_dtypes.bfloat16)


def matrix(m: int, n: int, dtype, seed: int, density: float = 0.3) -> np.ndarray:
    """Small integers (every product and sum exact in float32)."""
    rng = np.random.default_rng(seed)
    return (rng.integers(1, 9, (m, n)) * (rng.random((m, n)) < density)).astype(dtype)


def case(name: str, dense: np.ndarray, fmt, schedule=None):
    dtype = dense.dtype
    wide = lambda a: np.asarray(a).astype(np.float32 if dtype.itemsize < 4 else dtype)
    x = (np.arange(dense.shape[1]) % 5 - 2).astype(dtype)
    return (name, program(SPMV),
            lambda: {"A": ustc.Tensor.from_dense(dense, fmt), "x": x, "y": np.zeros(dense.shape[0], dtype)}, "y",
            lambda b: wide(D(b["A"])) @ wide(b["x"]), schedule)


def cases():
    out = []
    for r, c in SHAPES:
        for k, dtype in enumerate(DTYPES):
            tag = np.dtype(dtype).name
            out.append(case(f"spmv_bsr{r}{c}_{tag}", matrix(M, N, dtype, seed=10 * r + c + k), F.BSR(r, c)))
    out += [case("spmv_bsr22_empty", matrix(0, N, np.float64, 1), F.BSR(2, 2)),
            case("spmv_bsr44_all_zero", np.zeros((M, N), np.float32), F.BSR(4, 4)),
            case("spmv_bsr44_one_row", matrix(1, N, np.float32, 2, 0.8), F.BSR(4, 4)),
            case("spmv_bsr22_thread_per_row", matrix(M, N, np.float64, 3), F.BSR(2, 2), "thread_per_row"),
            case("spmv_bsc22", matrix(M, N, np.float64, 4), F.BSC(2, 2)),
            case("spmv_bsc44_float32", matrix(M, N, np.float32, 5), F.BSC(4, 4))]
    return out


def main(mode: str) -> int:
    warnings.simplefilter("ignore")
    if mode not in ("sim", "gpu"):   # run_sim runs on whatever device numba.cuda has
        raise SystemExit(f"blocks_cases.py: unknown mode {mode!r} (sim, gpu)")
    return report((c[0], functools.partial(run_sim, c)) for c in cases())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
