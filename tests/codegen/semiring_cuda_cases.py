"""Semirings, prologs and epilogs on the CUDA target, as a script (a process of its own per mode).

    python tests/codegen/semiring_cuda_cases.py sim    # NUMBA_ENABLE_CUDASIM=1: run, compare with NumPy
    python tests/codegen/semiring_cuda_cases.py ptx    # no simulator: PTX for sm_90 + nvJitLink cubin

Prints one JSON object per case, like ``tests/cuda/matrix.py``, whose runners it reuses. User
functions are module-level (stable keys), so the kernels that call them are cached like others.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import sys
import warnings

import numpy as np
import scipy.sparse as sp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "cuda"))  # tests/cuda: _cases, matrix

import ustc  # noqa: E402
from _cases import report  # noqa: E402
from matrix import run_ptx, run_sim  # noqa: E402
from ustc.codegen import functions  # noqa: E402
from ustc.codegen import notation as nt  # noqa: E402
from ustc.codegen.semiring import Semiring, as_semiring  # noqa: E402
from ustc.ops import library  # noqa: E402

F = ustc.formats
M, N, K = 10, 12, 3


def relu(v):
    return v if v > 0 else 0.0


def magnitude(v):
    return v if v >= 0 else -v


def smaller(a, b):
    return a if a < b else b


def plus(a, b):
    return a + b


USER_MIN_PLUS = Semiring(add=smaller, mul=plus, zero=math.inf)


def program(text: str, semiring=None, epilog=None, prolog: dict | None = None):
    """``text`` (one statement) with a semiring, an epilog, and prologs on named tensors."""
    st = library.parse_program(text).statements[0]
    rhs = st.rhs
    if semiring is not None:
        sr = as_semiring(semiring)
        factors = list(rhs.accesses())
        rhs = factors[0]
        for f in factors[1:]:
            rhs = sr.multiply(rhs, f)
        st = dataclasses.replace(st, semiring=sr)
    if prolog:
        rhs = nt.map_accesses(rhs, lambda a: nt.Apply(functions.function(prolog[a.tensor], 1), a)
                              if a.tensor in prolog else a)
    st = dataclasses.replace(st, rhs=rhs, epilog=functions.function(epilog, 1) if epilog else None)
    return nt.Program((st,))


def weights(m=M, n=N, density=0.35, fmt=F.CSR, seed=0, dtype=np.float64):
    a = sp.random(m, n, density=density, format="csr", random_state=seed)
    a.data[:] = np.round(a.data * 8 + 1)
    t = ustc.Tensor.from_package(sp.csr_array(a.astype(dtype)))
    return t.convert(tensor_format=fmt)


def infinite(t) -> np.ndarray:
    """The dense matrix with +inf where ``t`` stores nothing (min-plus oracle)."""
    out = np.full(t.shape, np.inf)
    coords, values = t.entries()
    keep = values != 0
    out[tuple(c[keep] for c in coords)] = values[keep]
    return out


def minplus_spmv(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.min(a + x[None, :], axis=1, initial=np.inf)


RNG = np.random.default_rng(11)
X = RNG.integers(0, 6, N).astype(np.float64)


def cases():
    """(name, program, bindings-maker, output, oracle, schedule) as ``matrix.run_sim`` takes them."""
    out = []
    spmv = "y[i] = A[i,j] * x[j]"

    def minplus(name, fmt, schedule=None, semiring="min_plus"):
        out.append((name, program(spmv, semiring), lambda: {"A": weights(fmt=fmt), "x": X.copy(), "y": np.zeros(M)},
                    "y", lambda b: minplus_spmv(infinite(b["A"]), b["x"]), schedule))

    minplus("minplus_spmv_csr", F.CSR)
    minplus("minplus_spmv_csr_warp4", F.CSR, "warp_per_row:4")  # lanes combine with min shuffles
    minplus("minplus_spmv_csc_atomic_min", F.CSC)                # columns spread: cuda.atomic.min
    minplus("minplus_spmv_coo", F.COO(2))
    minplus("minplus_spmv_bsr22_padding", F.BSR(2, 2))           # stored zeros in blocks are no edges
    minplus("minplus_spmv_diai_padding", F.DIAI)
    minplus("minplus_spmv_csr_merge_path", F.CSR, "merge_path")
    minplus("user_minplus_spmv_csr", F.CSR, semiring=USER_MIN_PLUS)  # device functions for add and mul
    out.append(("maxtimes_spmv_csr", program(spmv, "max_times"),
                lambda: {"A": weights(), "x": X + 1, "y": np.zeros(M)}, "y",
                lambda b: np.max(np.where(infinite(b["A"]) < np.inf, infinite(b["A"]), -np.inf) * b["x"][None, :],
                                 axis=1, initial=-np.inf), None))
    out.append(("orand_spmv_csr_bool", program(spmv, "or_and"),
                lambda: {"A": weights(dtype=np.bool_), "x": X > 2, "y": np.zeros(M, bool)}, "y",
                lambda b: (b["A"].to_dense().astype(int) @ b["x"].astype(int)) > 0, None))
    out.append(("orand_spmv_csc_bool_serial", program(spmv, "or_and"),
                lambda: {"A": weights(fmt=F.CSC, dtype=np.bool_), "x": X > 2, "y": np.zeros(M, bool)}, "y",
                lambda b: (b["A"].to_dense().astype(int) @ b["x"].astype(int)) > 0, None))
    spmm = "C[i,k] = A[i,j] * B[j,k]"
    bmat = RNG.standard_normal((N, K))
    out.append(("spmm_csr_prolog_abs_epilog_relu_pass", program(spmm, epilog=relu, prolog={"A": magnitude}),
                lambda: {"A": weights(), "B": bmat.copy(), "C": np.zeros((M, K))}, "C",
                lambda b: np.maximum(np.abs(b["A"].to_dense()) @ b["B"], 0), None))
    out.append(("spmv_dcsr_epilog_pass", program(spmv, epilog=relu),
                lambda: {"A": weights(fmt=F.DCSR), "x": RNG.standard_normal(N), "y": np.zeros(M)}, "y",
                lambda b: np.maximum(b["A"].to_dense() @ b["x"], 0), None))
    out.append(("minplus_spgemm_csr", program("C[i,j] = A[i,k] * B[k,j]", "min_plus"),
                lambda: {"A": weights(M, N, seed=1), "B": weights(N, M, seed=2), "C": F.CSR}, "C",
                lambda b: np.where(np.isinf(r := np.min(infinite(b["A"])[:, :, None] + infinite(b["B"])[None, :, :],
                                                         axis=1)), 0, r), None))
    return out


def main(mode: str) -> int:
    warnings.simplefilter("ignore")
    runner = run_ptx if mode == "ptx" else run_sim
    return report((case[0], functools.partial(runner, case)) for case in cases())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
