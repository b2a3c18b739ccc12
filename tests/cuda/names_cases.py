"""Kernels whose user tensors and indices are spelled like the names the emitters write, as a script.

    python tests/cuda/names_cases.py sim    # NUMBA_ENABLE_CUDASIM=1: each case on the cuda target
    python tests/cuda/names_cases.py cpu    # each case on the cpu target

The CUDA schedules write variables of their own (``lane``, ``group``, ``i_base``, the merge
path's ``mp_*``), the module binds ``np``, ``cuda``, ``config``, ``bounds``, ``blocks_for``, and
the launch wrappers take ``stream`` and use ``blocks`` and ``result``; the CPU module binds
``np``, ``njit``, ``prange``. A user name spelled like any of them must neither shadow nor be
overwritten. Prints one JSON object per case, like ``matrix.py``.
"""

from __future__ import annotations

import functools
import sys
import warnings

import numpy as np

from _cases import report
from matrix import D, F, K, M, N, dense, program, sparse
from ustc.ops import runtime


def cases():
    """(name, program, bindings-maker, output, oracle(dense operands), schedule)."""
    out = []

    def spmv(name, text, names, schedule, fmt=F.CSR, m=M):
        y, a, x = names
        out.append((name, program(text), lambda: {a: sparse(m=m, fmt=fmt), x: dense(N), y: np.zeros(m)}, y,
                    lambda b: D(b[a]) @ b[x], schedule))

    # warp_per_row with 4 lanes (8 rows a warp: lane, group and i_base all written)
    spmv("warp_lane_group_base", "i_base[i] = A[i, lane] * group[lane]", ("i_base", "A", "group"), "warp_per_row:4")
    spmv("warp_tensor_lane", "lane[i] = A[i, group] * x[group]", ("lane", "A", "x"), "warp_per_row:4")
    # merge path: the row index, the column index and the operands spelled like its variables
    spmv("merge_path_names", "mp_tid[mp_row] = A[mp_row, mp_d0] * mp_share[mp_d0]", ("mp_tid", "A", "mp_share"),
         "merge_path")
    out.append(("merge_path_more_names", program("mp_items[mp_first] = A[mp_first, mp_lo] * mp_grid[mp_lo] * "
                                                 "mp_hi[mp_lo]"),
                lambda: {"A": sparse(fmt=F.CSR), "mp_grid": dense(N), "mp_hi": dense(N), "mp_items": np.zeros(M)},
                "mp_items", lambda b: D(b["A"]) @ (b["mp_grid"] * b["mp_hi"]), "merge_path"))
    # block_tile: lanes share the dense loop over `lane`; the operands are `group` and `stream`
    out.append(("block_tile_lane", program("group[i, lane] = A[i, j] * stream[j, lane]"),
                lambda: {"A": sparse(fmt=F.CSR), "stream": dense(N, K), "group": np.zeros((M, K))}, "group",
                lambda b: D(b["A"]) @ b["stream"], "block_tile"))
    # module-level names: imports and helpers of the emitted modules
    out.append(("module_globals", program("cuda[i] = A[i, j] * np[j] * config[j] * bounds[j] * blocks_for[j]"),
                lambda: {"A": sparse(fmt=F.CSR), "np": dense(N), "config": dense(N), "bounds": dense(N),
                         "blocks_for": dense(N), "cuda": np.zeros(M)}, "cuda",
                lambda b: D(b["A"]) @ (b["np"] * b["config"] * b["bounds"] * b["blocks_for"]), None))
    out.append(("prange_names", program("njit[i, j] = A[i, j] * prange[i, j] * kernel_0[i, j]"),
                lambda: {"A": sparse(fmt=F.CSR), "prange": dense(M, N), "kernel_0": dense(M, N),
                         "njit": np.zeros((M, N))}, "njit", lambda b: D(b["A"]) * b["prange"] * b["kernel_0"], None))
    # a sparse output counted by one thread (the wrapper's `result`), dense operands `result` and `blocks`:
    # BSR, which the cuda writer leaves to the coordinate lists (a workspace level)
    out.append(("serial_result_blocks", program("C[i, j] = A[i, j] * result[i, j] * blocks[i, j]"),
                lambda: {"A": sparse(fmt=F.DCSR, seed=1), "result": dense(M, N), "blocks": dense(M, N),
                         "C": F.BSR(2, 2)}, "C", lambda b: D(b["A"]) * b["result"] * b["blocks"], None))
    # the same into COO: the writer's chunks, a thread each (its names `C_chunk`, `C_counts`, ...)
    out.append(("writer_result_blocks", program("C[i, j] = A[i, j] * result[i, j] * blocks[i, j]"),
                lambda: {"A": sparse(fmt=F.DCSR, seed=1), "result": dense(M, N), "blocks": dense(M, N),
                         "C": F.COO(2)}, "C", lambda b: D(b["A"]) * b["result"] * b["blocks"], None))
    return out


def run(case, target: str) -> dict:
    name, prog, make, output, oracle, schedule = case
    bindings = make()
    expected = oracle(bindings)
    schedule = schedule if target == "cuda" else None
    got = D(runtime.execute(prog, bindings, target=target, schedule=schedule)[output])
    ok = bool(np.allclose(got, expected))
    text = runtime.source(prog, bindings, target=target, schedule=schedule)
    schedules = [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("# schedule: ")]
    return {"ok": ok, "schedules": schedules, **({} if ok else {"got": np.asarray(got).tolist(),
                                                                "expected": np.asarray(expected).tolist()})}


def main(mode: str) -> int:
    warnings.simplefilter("ignore")
    target = "cuda" if mode == "sim" else "cpu"
    return report((case[0], functools.partial(run, case, target)) for case in cases())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
