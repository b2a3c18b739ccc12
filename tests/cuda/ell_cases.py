"""The test-defined level type ``ell(K)`` (``tests/ell_level.py``) on the CUDA target, as a script.

    python tests/cuda/ell_cases.py sim    # NUMBA_ENABLE_CUDASIM=1: run each kernel, compare with NumPy
    python tests/cuda/ell_cases.py ptx    # no simulator: PTX for sm_90 + nvJitLink cubin per kernel

Prints one JSON object per case, like ``matrix.py``, whose runners it reuses.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: ell_level

import ustc  # noqa: E402
from _cases import report  # noqa: E402
from ell_level import ELL  # noqa: E402
from matrix import D, dense, program, run_ptx, run_sim  # noqa: E402
from ustc.format import levels  # noqa: E402

levels.register(ELL)  # the one registry line
F = ustc.formats
ELL_FMT = ustc.TensorFormat.parse("(i, j) -> (i : dense, j : ell(3))")
M, N = 10, 12


def ell(seed: int) -> ustc.Tensor:
    rng = np.random.default_rng(seed)
    x = np.zeros((M, N))
    for r in range(M):
        cols = rng.choice(N, size=rng.integers(0, 4), replace=False)
        x[r, cols] = rng.integers(1, 9, len(cols))
    return ustc.Tensor.from_dense(x, ELL_FMT)


def cases():
    add = "C[i,j] = A[i,j] + B[i,j]"
    return [
        ("spmv_ell", program("y[i] = A[i,j] * x[j]"), lambda: {"A": ell(1), "x": dense(N), "y": np.zeros(M)},
         "y", lambda b: D(b["A"]) @ b["x"], None),
        ("add_ell_ell_to_csr", program(add), lambda: {"A": ell(2), "B": ell(3), "C": F.CSR}, "C",
         lambda b: D(b["A"]) + D(b["B"]), None),
        ("add_ell_csr_to_coo", program(add),
         lambda: {"A": ell(4), "B": ell(5).convert(F.CSR), "C": F.COO(2)}, "C", lambda b: D(b["A"]) + D(b["B"]), None),
        ("convert_csr_to_ell", program("C[i,j] = A[i,j]"), lambda: {"A": ell(6).convert(F.CSR), "C": ELL_FMT}, "C",
         lambda b: D(b["A"]), None),
    ]


def main(mode: str) -> int:
    warnings.simplefilter("ignore")
    runner = run_ptx if mode == "ptx" else run_sim
    return report((case[0], functools.partial(runner, case)) for case in cases())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
