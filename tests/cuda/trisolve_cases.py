"""Level-scheduled triangular solves on the ``cuda`` target, run as a script in a process of its own.

    python tests/cuda/trisolve_cases.py sim    # NUMBA_ENABLE_CUDASIM=1: solve, compare with SciPy
    python tests/cuda/trisolve_cases.py ptx    # no simulator: PTX for sm_90 + nvJitLink cubin per kernel
    python tests/cuda/trisolve_cases.py gpu    # a real GPU: the sim cases with host operands

Prints one JSON object per case (``{"case", "ok", ...}``) on stdout, like ``matrix.py``
(the simulator replaces ``numba.cuda`` at import, so each mode needs its own process;
``test_trisolve.py`` spawns them). Sizes are small: the simulator runs every CUDA
thread as a Python thread.
"""

from __future__ import annotations

import json
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import spsolve_triangular

import ustc
from _cases import ptx_records, report

TOL = {np.float32: 2e-4, np.float64: 1e-10, np.complex128: 1e-10}


def triangular(n, lower, dtype=np.float64, density=0.2, seed=0):
    """A random well-conditioned triangular CSR matrix: off-diagonal entries in [-1, 1) scaled
    by 1/n, diagonal in [1, 2]; ``dtype`` complex gets imaginary parts too."""
    rng = np.random.default_rng(seed)
    m = sp.random(n, n, density=density, random_state=seed, data_rvs=lambda k: rng.uniform(-1, 1, k)) / max(n, 1)
    if np.dtype(dtype).kind == "c":
        m = m + 1j * sp.random(n, n, density=density, random_state=seed + 1) / max(n, 1)
    off = sp.tril(m, -1) if lower else sp.triu(m, 1)
    return (off + sp.diags(rng.uniform(1, 2, n))).astype(dtype).tocsr()


def rhs(n, k, dtype, seed=1):
    rng = np.random.default_rng(seed)
    b = rng.standard_normal((n, k) if k else n)
    return (b + 1j * rng.standard_normal(b.shape) if np.dtype(dtype).kind == "c" else b).astype(dtype)


def oracle(s, b, lower, unit):
    """SciPy's solve with the solved triangle only (it reads both sides of the diagonal)."""
    if s.shape[0] == 0:
        return np.zeros_like(b)
    side = sp.tril(s) if lower else sp.triu(s)
    return spsolve_triangular(side.tocsr(), b, lower=lower, unit_diagonal=unit)


def check(name, s, b, lower, unit, levels=None, fmt=None, tol=None):
    """A case: ``ustc.solve(..., target="cuda")`` against SciPy and against the CPU path."""
    def run():
        A = ustc.Tensor.from_package(s) if fmt is None else ustc.Tensor.from_package(s).convert(fmt)
        x, info = ustc.solve(A, b, "triangular", lower=lower, unit_diagonal=unit, target="cuda", return_info=True)
        cpu = ustc.solve(A, b, "triangular", lower=lower, unit_diagonal=unit)
        expected = oracle(s, b, lower, unit)
        t = tol or TOL[b.dtype.type]
        ok = (x.shape == b.shape and x.dtype == cpu.dtype and np.allclose(x, expected, rtol=t, atol=t)
              and np.allclose(x, cpu, rtol=t, atol=t) and info.plan_info.startswith("cuda: level-scheduled")
              and (levels is None or info.levels.nlevels == levels))
        return {"ok": bool(ok), "plan_info": info.plan_info, "levels": info.levels.nlevels,
                **({} if ok else {"got": np.asarray(x).tolist(), "expected": np.asarray(expected).tolist()})}
    return name, run


def cases():
    out = []
    for dtype in (np.float32, np.float64):
        for lower in (True, False):
            for unit in (False, True):
                s = triangular(24, lower, dtype, seed=3)
                tag = f"{'lower' if lower else 'upper'}_{'unit' if unit else 'nonunit'}_{np.dtype(dtype).name}"
                out.append(check(f"random_{tag}_vector", s, rhs(24, 0, dtype), lower, unit))
                out.append(check(f"random_{tag}_3rhs", s, rhs(24, 3, dtype), lower, unit))
    out.append(check("random_lower_complex128_2rhs", triangular(16, True, np.complex128, seed=5),
                     rhs(16, 2, np.complex128), True, False))
    out.append(check("random_upper_coo_input", triangular(20, False, seed=6), rhs(20, 0, np.float64), False,
                     False, fmt="COO"))
    strided = rhs(24, 3, np.float64)
    out.append(check("strided_vector_rhs", triangular(24, True, seed=4), strided[:, 1], True, False))
    out.append(check("fortran_order_rhs", triangular(24, False, seed=4), np.asfortranarray(strided), False, False))
    out.append(check("empty_0x0", sp.csr_array((0, 0)), np.zeros(0), True, False, levels=0))
    out.append(check("empty_0x0_2rhs", sp.csr_array((0, 0)), np.zeros((0, 2)), True, False, levels=0))
    out.append(check("one_by_one", sp.csr_array(np.array([[4.0]])), np.array([2.0]), True, False, levels=1))
    out.append(check("diagonal_only_one_level", sp.diags(np.arange(1.0, 13)).tocsr(), rhs(12, 2, np.float64),
                     True, False, levels=1))
    bi = (sp.eye(12) * 2 + sp.eye(12, k=-1)).tocsr()
    out.append(check("bidiagonal_lower_n_levels", bi, rhs(12, 0, np.float64), True, False, levels=12))
    out.append(check("bidiagonal_upper_n_levels", bi.T.tocsr(), rhs(12, 2, np.float64), False, True, levels=12))
    full = (triangular(18, True, seed=8) + triangular(18, False, seed=9)).tocsr()
    out.append(check("full_matrix_lower_side_only", full, rhs(18, 0, np.float64), True, False))
    out.append(("singular_raises_before_launch", singular))
    for method in ("cg", "bicgstab", "gmres"):
        out.append((f"krylov_{method}_matmul_on_cuda", lambda method=method: krylov(method)))
    return out


def singular():
    t = np.tril(np.ones((5, 5)))
    t[3, 3] = 0
    try:
        ustc.solve(ustc.Tensor.from_dense(t, "CSR"), np.ones(5), target="cuda")
    except ustc.SolveError as exc:
        return {"ok": "diagonal entry (3, 3)" in str(exc), "error": str(exc)}
    return {"ok": False, "error": "no SolveError"}


def krylov(method):
    """A Krylov method with ``target="cuda"``: the planned Matmul runs the generated CUDA kernel."""
    n = 10
    s = (sp.diags([-1.0, 4.0, -1.5], [-1, 0, 1], shape=(n, n))).tocsr()
    s = (s + s.T).tocsr() if method == "cg" else s
    b = rhs(n, 0, np.float64)
    x, info = ustc.solve(ustc.Tensor.from_package(s), b, method, target="cuda", return_info=True)
    ok = info.converged and np.allclose(s @ x, b, atol=1e-7) and info.plan_info.startswith("generated: cuda")
    return {"ok": bool(ok), "plan_info": info.plan_info, "iterations": info.iterations}


def run_ptx():
    from ustc.ops import cuda_trisolve

    return ptx_records(cuda_trisolve.compile_kernels())


def main(mode: str) -> int:
    warnings.simplefilter("ignore")
    if mode == "ptx":
        t0 = time.perf_counter()
        records = run_ptx()
        for record in records:
            record["seconds"] = round((time.perf_counter() - t0) / len(records), 3)
            print(json.dumps(record), flush=True)
        return 0
    return report(cases())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
