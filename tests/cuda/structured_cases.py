"""The n:m GEMV and small-batch SpMM on CUDA (``ustc.kernels._structured_cuda``), as a script.

    python tests/cuda/structured_cases.py sim   # NUMBA_ENABLE_CUDASIM=1: run each kernel, compare
                                                # with the CPU n:m kernels (ustc.kernels._structured)
    python tests/cuda/structured_cases.py ptx   # no simulator: sm_90 cubins held to their promises
    python tests/cuda/structured_cases.py gpu   # a real GPU: the sim cases launched on the device

Prints one JSON object per case, like ``matrix.py``.
"""

from __future__ import annotations

import sys
import warnings

import numba
import numpy as np

import ustc
from _cases import report
from ustc.kernels import _structured

F = ustc.formats
#: (n, m, rows, columns): 2:4 with a partial last group, 1:4, 2:8, 4:4 (dense), a 1 x n and an
#: empty matrix, a width under one group
SHAPES = ((2, 4, 9, 30), (1, 4, 5, 17), (2, 8, 6, 40), (4, 4, 3, 8), (2, 4, 1, 70), (2, 4, 0, 12), (2, 4, 4, 3))
DTYPES = (np.float64, np.float32, np.float16)


def nm_matrix(n: int, m: int, rows: int, cols: int, dtype, seed: int) -> np.ndarray:
    """At most ``n`` nonzeros (small integers) in each group of ``m`` columns of each row."""
    rng = np.random.default_rng(seed)
    dense = np.zeros((rows, cols))
    for r in range(rows):
        for g in range(0, cols, m):
            width = min(m, cols - g)
            keep = rng.choice(width, min(n, width), replace=False)
            dense[r, g + keep] = rng.integers(-4, 5, len(keep))
    return dense.astype(dtype)


def operands(n, m, rows, cols, dtype, seed, batch=None):
    A = ustc.Tensor.from_dense(nm_matrix(n, m, rows, cols, dtype, seed), F.Structured(n, m))
    shape = (cols,) if batch is None else (cols, batch)
    b = (np.arange(np.prod(shape)).reshape(shape) % 7 - 3).astype(dtype)
    out_shape = (rows,) if batch is None else (rows, batch)
    return A, b, np.full(out_shape, 1, dtype)


def cpu(A, b, out, alpha, n, m):
    """The CPU n:m kernel's result (the oracle), in float64 whatever the dtype (exact here: small
    integers and halves; one compile per kernel)."""
    vals, b, y = A._values.astype(np.float64), b.astype(np.float64), out.astype(np.float64)
    groups = -(-A.shape[1] // m)
    make = _structured.nm_spmv if b.ndim == 1 else _structured.nm_spmm
    make(n, m, False)(A._buffers[(2, "crd")], vals, b, y, float(alpha), A.shape[0], groups, A.shape[1])
    return y


def run_case(n, m, rows, cols, dtype, batch) -> dict:
    from ustc.kernels import _structured_cuda as nm

    A, b, out = operands(n, m, rows, cols, dtype, seed=n * m + rows, batch=batch)
    before = [A._values.copy(), A._buffers[(2, "crd")].copy(), b.copy()]
    expected = cpu(A, b, out, 0.5, n, m)
    (nm.gemv if batch is None else nm.spmm)(A._buffers[(2, "crd")], A._values, b, out, 0.5, n, m, cols)
    untouched = all(np.array_equal(x, y) for x, y in zip(before, [A._values, A._buffers[(2, "crd")], b]))
    ok = untouched and np.array_equal(out.astype(np.float64), expected.astype(np.float64))
    return {"ok": bool(ok), **({} if ok else {"got": out.astype(np.float64).tolist(),
                                               "expected": expected.astype(np.float64).tolist()})}


def sim_cases():
    for k, (n, m, rows, cols) in enumerate(SHAPES):
        for dtype in DTYPES if k == 0 else DTYPES[k % 3:k % 3 + 1]:   # every dtype once beyond the first shape
            tag = f"{n}{m}_{rows}x{cols}_{np.dtype(dtype).name}"
            yield f"gemv_{tag}", lambda a=(n, m, rows, cols, dtype, None): run_case(*a)
            for batch in (1, 5, 16) if k == 0 and dtype == np.float32 else (3,):
                yield f"spmm_{tag}_b{batch}", lambda a=(n, m, rows, cols, dtype, batch): run_case(*a)
    yield "spmm_24_batch_40", lambda: run_case(2, 4, 3, 12, np.float64, 40)   # more columns than a warp's lanes
    yield "matmul_registered_cuda_gemv", lambda: matmul(None)
    yield "matmul_registered_cuda_spmm", lambda: matmul(6)


def matmul(batch) -> dict:
    """ustc.Matmul on the cuda target picks the registered n:m kernel and matches NumPy."""
    A, b, _ = operands(2, 4, 7, 22, np.float32, seed=3, batch=batch)
    mm = ustc.Matmul(A, b, alpha=2.0, options={"target": "cuda"}).plan()
    got = mm.execute()
    want = 2 * np.asarray(A.to_dense()).astype(np.float64) @ b.astype(np.float64)
    ok = mm.plan_info.startswith("registered kernel: structured_") and np.array_equal(np.asarray(got), want)
    return {"ok": bool(ok), "plan_info": mm.plan_info}


def ptx_cases():
    from ustc.codegen import cuda_checks
    from ustc.kernels import _structured_cuda as nm

    def check(kind, n, m, width, dtype, ndim):
        wide = nm.wide_type(dtype)
        make = nm.gemv_kernel if kind == "gemv" else nm.spmm_kernel
        array = numba.types.Array
        value = numba.from_dtype(np.dtype(dtype))
        sig = (array(numba.int32, 1, "C"), array(value, 1, "C"), array(value, ndim, "C"), array(value, ndim, "C"),
               numba.from_dtype(np.dtype(wide)), numba.int64, numba.int64, numba.int64)
        report_ = cuda_checks.check_kernel(f"{kind}_{n}{m}_w{width}", make(n, m, width, wide), sig,
                                           nm.promise(kind, width))
        return {"ok": report_.ok, "kernel": {**report_.record(), "sm": "sm_90"}, "summary": report_.summary()}

    for dtype in DTYPES:
        tag = np.dtype(dtype).name
        yield f"ptx_gemv_24_w32_{tag}", lambda d=dtype: check("gemv", 2, 4, 32, d, 1)
        yield f"ptx_spmm_24_w16_{tag}", lambda d=dtype: check("spmm", 2, 4, 16, d, 2)
    yield "ptx_gemv_12_w1_float32", lambda: check("gemv", 1, 2, 1, np.float32, 1)   # a thread a row: no shuffles
    yield "ptx_gemv_28_w8_float16", lambda: check("gemv", 2, 8, 8, np.float16, 1)


def main(mode: str) -> int:
    warnings.simplefilter("ignore")
    cases = {"sim": sim_cases, "gpu": sim_cases, "ptx": ptx_cases}.get(mode)
    if cases is None:
        raise SystemExit(f"structured_cases.py: unknown mode {mode!r} (sim, gpu, ptx)")
    return report(cases())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
