"""The CUDA correctness matrix, run as a script in a process of its own.

    python tests/cuda/matrix.py sim    # NUMBA_ENABLE_CUDASIM=1: run each kernel, compare with NumPy
    python tests/cuda/matrix.py ptx    # no simulator: PTX for sm_90 + nvJitLink cubin per kernel
    python tests/cuda/matrix.py gpu    # a real GPU: launch each kernel, compare with NumPy
    python tests/cuda/matrix.py model  # no simulator, no GPU: the lock-step warp model runs each kernel

Prints one JSON object per case (``{"case", "ok", ...}``) on stdout. The simulator
replaces ``numba.cuda`` at import, so the two modes cannot share a process; tests
(``test_simulator.py``, ``test_ptx.py``) spawn this script once per mode and batch
every case into that one process. Sizes are tiny: the simulator runs each CUDA
thread as a Python thread.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import warnings

import ml_dtypes
import numpy as np
import scipy.sparse as sp

import ustc
from _cases import report
from ustc import ust
from ustc.codegen import notation as nt
from ustc.ops import library, runtime

F = ustc.formats
RNG = np.random.default_rng(7)
BFLOAT16 = ml_dtypes.bfloat16
M, N, K = 10, 12, 3


def sparse(m=M, n=N, density=0.35, fmt=None, seed=0):
    a = sp.random(m, n, density=density, format="csr", random_state=seed, dtype=np.float64)
    a.data[:] = np.round(a.data * 8 + 1)
    t = ustc.Tensor.from_package(a)
    return t if fmt is None else t.convert(tensor_format=fmt)


def two_four(m=M, n=N):
    """A matrix with at most 2 nonzeros in each group of 4 columns."""
    dense = RNG.integers(1, 9, (m, n)).astype(np.float64)
    for r in range(m):
        for g in range(0, n, 4):
            dense[r, g + RNG.choice(4, 2, replace=False)] = 0
    return dense


def skewed(m=M, n=40):
    """One long row, the rest short (warp schedules with long and short rows)."""
    dense = np.zeros((m, n))
    dense[3, :] = RNG.integers(1, 9, n)
    dense[7, ::9] = 2.0
    return dense


def very_skewed(m=64, n=400):
    """One row of 300 entries among rows of at most one (longest > 32x the mean: merge path),
    with empty rows at both ends."""
    dense = np.zeros((m, n))
    dense[5, :300] = RNG.integers(1, 9, 300)
    rows = np.arange(8, m - 3, 2)
    dense[rows, RNG.integers(0, n, len(rows))] = RNG.integers(1, 9, len(rows))
    return dense


def dense(*shape):
    return RNG.integers(-4, 5, shape).astype(np.float64)


def csf3():
    a = np.zeros((4, 5, 6))
    idx = RNG.integers(0, [4, 5, 6], (14, 3))
    a[tuple(idx.T)] = RNG.integers(1, 9, 14)
    return a


def D(t):
    return np.asarray(t.to_dense()) if isinstance(t, ustc.Tensor) else t


def program(*texts):
    return library.parse_program(list(texts))


SPMV = "y[i] = A[i,j] * x[j]"


def cases():
    """(name, program, bindings-maker, output, oracle(dense operands), schedule)."""
    out = []

    def spmv(name, a, schedule=None):
        out.append((name, program(SPMV), lambda: {"A": a(), "x": dense(N), "y": np.zeros(M)}, "y",
                    lambda b: D(b["A"]) @ b["x"], schedule))

    spmv("spmv_csr", lambda: sparse(fmt=F.CSR))
    spmv("spmv_csr_warp32", lambda: sparse(fmt=F.CSR), "warp_per_row")
    spmv("spmv_csr_warp4", lambda: sparse(fmt=F.CSR), "warp_per_row:4")
    spmv("spmv_csc_atomic", lambda: sparse(fmt=F.CSC))
    spmv("spmv_dcsr", lambda: sparse(fmt=F.DCSR))
    spmv("spmv_coo_nonzero_chunks", lambda: sparse(fmt=F.COO(2)))
    spmv("spmv_diai_streaming", lambda: sparse(density=0.2, fmt=F.DIAI))
    spmv("spmv_diaj_streaming", lambda: sparse(density=0.2, fmt=F.DIAJ))
    spmv("spmv_bsr22", lambda: sparse(fmt=F.BSR(2, 2)))
    spmv("spmv_bsc22", lambda: sparse(fmt=F.BSC(2, 2)))
    spmv("spmv_delta4_packed", lambda: sparse(fmt=F.DELTA(4, True)))
    spmv("spmv_delta2", lambda: sparse(fmt=F.DELTA(2)))
    spmv("spmv_structured24", lambda: ustc.Tensor.from_package(two_four()).convert(tensor_format=F.Structured(2, 4)))
    out.append(("spmv_skewed_auto_warp", program(SPMV),
                lambda: {"A": ustc.Tensor.from_package(sp.csr_array(skewed())), "x": dense(40), "y": np.zeros(M)},
                "y", lambda b: D(b["A"]) @ b["x"], None))

    spmv("spmv_csr_merge_path", lambda: sparse(fmt=F.CSR), "merge_path")
    spmv("spmv_csr_merge_path_all_zero", lambda: sparse(density=0.0, fmt=F.CSR), "merge_path")
    out.append(("spmv_merge_path_empty_matrix", program(SPMV),
                lambda: {"A": sparse(0, N, fmt=F.CSR), "x": dense(N), "y": np.zeros(0)}, "y",
                lambda b: D(b["A"]) @ b["x"], "merge_path"))
    out.append(("spmv_very_skewed_auto_merge", program(SPMV),
                lambda: {"A": ustc.Tensor.from_package(sp.csr_array(very_skewed())), "x": dense(400),
                         "y": np.zeros(64)}, "y", lambda b: D(b["A"]) @ b["x"], None))
    out.append(("sum_axis1_csr_merge_path", program("s[i] = A[i,j]"),
                lambda: {"A": sparse(fmt=F.CSR), "s": np.zeros(M)}, "s", lambda b: D(b["A"]).sum(1), "merge_path"))
    spmv("spmv_bsr32_tile_auto", lambda: sparse(fmt=F.BSR(3, 2)))
    spmv("spmv_bsr22_tile_forced", lambda: sparse(fmt=F.BSR(2, 2)), "block_tile:4:v_i_mod2")

    def spmm(name, fmt, schedule=None):
        out.append((name, program("C[i,k] = A[i,j] * B[j,k]"),
                    lambda: {"A": sparse(fmt=fmt), "B": dense(N, K), "C": np.zeros((M, K))}, "C",
                    lambda b: D(b["A"]) @ b["B"], schedule))

    spmm("spmm_csr", F.CSR)
    spmm("spmm_csr_warp8", F.CSR, "warp_per_row:8")
    spmm("spmm_bsr22_tile", F.BSR(2, 2))
    spmm("spmm_coo", F.COO(2))
    spmm("spmm_csr_tile_lanes2", F.CSR, "block_tile:2")
    spmm("spmm_csc_tile_atomic", F.CSC, "block_tile")
    out.append(("spmm_structured24", program("C[i,k] = A[i,j] * B[j,k]"),
                lambda: {"A": ustc.Tensor.from_package(two_four()).convert(tensor_format=F.Structured(2, 4)),
                         "B": dense(N, K), "C": np.zeros((M, K))}, "C", lambda b: D(b["A"]) @ b["B"], None))
    out.append(("sddmm_csr", program("C[i,j] = A[i,j] * B[i,k] * E[k,j]"),
                lambda: {"A": sparse(fmt=F.CSR), "B": dense(M, K), "E": dense(K, N), "C": F.CSR}, "C",
                lambda b: D(b["A"]) * (b["B"] @ b["E"]), None))
    out.append(("sddmm_csr_dense_out", program("C[i,j] = A[i,j] * B[i,k] * E[k,j]"),
                lambda: {"A": sparse(fmt=F.CSR), "B": dense(M, K), "E": dense(K, N), "C": np.zeros((M, N))}, "C",
                lambda b: D(b["A"]) * (b["B"] @ b["E"]), None))

    def binary(name, text, fa, fb, fc, op):
        out.append((name, program(text), lambda: {"A": sparse(fmt=fa, seed=1), "B": sparse(fmt=fb, seed=2), "C": fc},
                    "C", lambda b: op(D(b["A"]), D(b["B"])), None))

    binary("add_csr_dcsr", "C[i,j] = A[i,j] + B[i,j]", F.CSR, F.DCSR, F.CSR, np.add)
    binary("add_csr_coo", "C[i,j] = A[i,j] + B[i,j]", F.CSR, F.COO(2), F.CSR, np.add)
    binary("add_csr_csr_to_coo", "C[i,j] = A[i,j] + B[i,j]", F.CSR, F.CSR, F.COO(2), np.add)
    binary("mul_csr_csc", "C[i,j] = A[i,j] * B[i,j]", F.CSR, F.CSC, F.CSR, np.multiply)
    binary("mul_coo_csr", "C[i,j] = A[i,j] * B[i,j]", F.COO(2), F.CSR, F.CSR, np.multiply)
    binary("mul_bsr_csr", "C[i,j] = A[i,j] * B[i,j]", F.BSR(2, 2), F.CSR, F.CSR, np.multiply)
    out.append(("mul_csr_dense", program("C[i,j] = A[i,j] * B[i,j]"),
                lambda: {"A": sparse(fmt=F.CSR), "B": dense(M, N), "C": np.zeros((M, N))}, "C",
                lambda b: D(b["A"]) * b["B"], None))
    out.append(("mul_dia_dense_to_csr", program("C[i,j] = A[i,j] * B[i,j]"),
                lambda: {"A": sparse(density=0.2, fmt=F.DIAI), "B": dense(M, N), "C": F.CSR}, "C",
                lambda b: D(b["A"]) * b["B"], None))
    for fmt_name, fmt in (("csr", F.CSR), ("coo", F.COO(2)), ("csc", F.CSC)):
        out.append((f"sum_axis0_{fmt_name}", program("s[j] = A[i,j]"),
                    lambda fmt=fmt: {"A": sparse(fmt=fmt), "s": np.zeros(N)}, "s", lambda b: D(b["A"]).sum(0), None))
        out.append((f"sum_axis1_{fmt_name}", program("s[i] = A[i,j]"),
                    lambda fmt=fmt: {"A": sparse(fmt=fmt), "s": np.zeros(M)}, "s", lambda b: D(b["A"]).sum(1), None))
    total = nt.Program((nt.Statement(nt.Access("s", ()), nt.Access("A", ("i", "j"))),))
    out.append(("sum_all_csr", total, lambda: {"A": sparse(fmt=F.CSR), "s": np.zeros(())}, "s",
                lambda b: D(b["A"]).sum(), None))
    out.append(("mttkrp_csf3", program("Y[i,j] = B[i,k,l] * C[k,j] * E[l,j]"),
                lambda: {"B": ustc.Tensor.from_package(csf3()).convert(tensor_format=F.CSF(3)), "C": dense(5, K),
                         "E": dense(6, K), "Y": np.zeros((4, K))}, "Y",
                lambda b: np.einsum("ikl,kj,lj->ij", D(b["B"]), b["C"], b["E"]), None))
    out.append(("mttkrp_coo3", program("Y[i,j] = B[i,k,l] * C[k,j] * E[l,j]"),
                lambda: {"B": ustc.Tensor.from_package(csf3()).convert(tensor_format=F.COO(3)), "C": dense(5, K),
                         "E": dense(6, K), "Y": np.zeros((4, K))}, "Y",
                lambda b: np.einsum("ikl,kj,lj->ij", D(b["B"]), b["C"], b["E"]), None))
    out += scaled_cases()
    out += narrow_cases()
    return out


def half(fmt, m=M, n=N, density=0.35, seed=0, dtype=np.float16):
    """A float16 (or ``dtype``) matrix with small integer values (every sum below is exact in float32)."""
    return ustc.Tensor.from_dense(D(sparse(m, n, density, seed=seed)).astype(dtype), fmt)


def narrow_cases():
    """float16 and bfloat16 operands: values read as float32 and summed in float32, stored as
    the output's dtype (``codegen.lower.NARROW_FLOATS``; bfloat16 as 16-bit patterns,
    ``codegen.cuda_bfloat16``); outputs without an atomic fold keep the schedules that need none."""
    out = []
    for dtype in (np.float16, BFLOAT16):
        out += _narrow(np.dtype(dtype))
    # 1.46875^2 = 2.1572265625 is exact in float32; rounded in float16 it is off by 4.5e-4 relative
    fine = np.float16(1.46875)
    out.append(("spmv_csr_float16_products_in_float32", program(SPMV),
                lambda: {"A": ustc.Tensor.from_dense(np.full((M, N), fine), F.CSR), "x": np.full(N, fine),
                         "y": np.zeros(M, np.float32)}, "y",
                lambda b: np.full(M, N * float(fine) ** 2), "warp_per_row:4"))
    # (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14 is exact in float32; a bfloat16 product drops the 2^-14
    # (6e-5 relative, over the float32 result's tolerance)
    fine = BFLOAT16(1 + 2 ** -7)
    out.append(("spmv_csr_bfloat16_products_in_float32", program(SPMV),
                lambda: {"A": ustc.Tensor.from_dense(np.full((M, N), fine), F.CSR), "x": np.full(N, fine),
                         "y": np.zeros(M, np.float32)}, "y", lambda b: np.full(M, N * float(fine) ** 2), None))
    # every bfloat16 bit pattern widened; float32 patterns of every class rounded (ties, NaNs
    # whose payload is only in the dropped bits, overflow to infinity, subnormals)
    out.append(("copy_bfloat16_to_float32_every_pattern", program("y[i] = a[i]"),
                lambda: {"a": np.arange(1 << 16, dtype=np.uint16).view(BFLOAT16), "y": np.zeros(1 << 16, np.float32)},
                "y", lambda b: b["a"].astype(np.float32), None))
    out.append(("copy_float32_to_bfloat16_rounded", program("y[i] = a[i]"),
                lambda: {"a": float32_patterns(), "y": np.zeros(len(float32_patterns()), BFLOAT16)}, "y",
                lambda b: b["a"].astype(BFLOAT16), None))
    return out


def float32_patterns() -> np.ndarray:
    """float32 numbers of every class: random bit patterns and the edges of rounding to bfloat16."""
    edges = [0x3F808000, 0x3F818000, 0xBF808000, 0x3F808001, 0x3F807FFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000,
             0x7F800000, 0xFF800000, 0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00000, 0x00000000,
             0x00000001, 0x00008000, 0x00018000, 0x007FFFFF, 0x80008000]
    bits = np.random.default_rng(3).integers(0, 1 << 32, 2000, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([np.array(edges, np.uint32), bits]).view(np.float32)


def _narrow(dtype):
    """The narrow correctness cases of one dtype (float16 or bfloat16), named ``*_<dtype>``."""
    out, tag = [], dtype.name
    vec = lambda n=N: dense(n).astype(dtype)
    wide = lambda t: D(t).astype(np.float32)
    for fmt_name, fmt in (("csr", F.CSR), ("csc", F.CSC), ("coo", F.COO(2)), ("diai", F.DIAI),
                          ("bsr22", F.BSR(2, 2)), ("delta4_packed", F.DELTA(4, True))):
        out.append((f"spmv_{fmt_name}_{tag}", program(SPMV),
                    lambda fmt=fmt: {"A": half(fmt, dtype=dtype), "x": vec(), "y": np.zeros(M, dtype)}, "y",
                    lambda b: wide(b["A"]) @ wide(b["x"]), None))
    out.append((f"spmv_structured24_{tag}", program(SPMV),
                lambda: {"A": ustc.Tensor.from_dense(two_four().astype(dtype), F.Structured(2, 4)),
                         "x": vec(), "y": np.zeros(M, dtype)}, "y",
                lambda b: wide(b["A"]) @ wide(b["x"]), None))
    out.append((f"spmm_csr_{tag}", program("C[i,k] = A[i,j] * B[j,k]"),
                lambda: {"A": half(F.CSR, dtype=dtype), "B": dense(N, K).astype(dtype),
                         "C": np.zeros((M, K), dtype)},
                "C", lambda b: wide(b["A"]) @ wide(b["B"]), None))
    out.append((f"sddmm_csr_{tag}", program("C[i,j] = A[i,j] * B[i,k] * E[k,j]"),
                lambda: {"A": half(F.CSR, dtype=dtype), "B": dense(M, K).astype(dtype),
                         "E": dense(K, N).astype(dtype), "C": F.CSR}, "C",
                lambda b: wide(b["A"]) * (wide(b["B"]) @ wide(b["E"])), None))
    out.append((f"add_csr_coo_{tag}", program("C[i,j] = A[i,j] + B[i,j]"),
                lambda: {"A": half(F.CSR, seed=1, dtype=dtype), "B": half(F.COO(2), seed=2, dtype=dtype),
                         "C": F.CSR}, "C",
                lambda b: wide(b["A"]) + wide(b["B"]), None))
    return out


def close(got, expected) -> bool:
    """``got`` matches the oracle: bit for bit where the oracle is bfloat16 (it rounded itself);
    within one bfloat16 rounding (2^-8 relative) of a float32 oracle for a bfloat16 result;
    NumPy's default tolerance otherwise."""
    got = np.asarray(got)
    if np.asarray(expected).dtype == BFLOAT16:   # the oracle rounded: the same bits, NaNs as NaNs
        got, expected = got.astype(np.float32), np.asarray(expected).astype(np.float32)
        return bool(np.array_equal(got, expected, equal_nan=True))
    if got.dtype == BFLOAT16:
        return bool(np.allclose(got.astype(np.float32), expected, rtol=2 ** -8, atol=0))
    return bool(np.allclose(got, expected, equal_nan=True))


def scaled_cases():
    """Scaled levels ``c * d``: the loop walks every level coordinate, entries lie at multiples of c."""
    P = ustc.TensorFormat.parse
    v = dense(N)
    delta = P("(d) -> (2 * d : delta(1))")
    return [("add_dense_scaled_delta", program("C[i] = A[i] + B[i]"),
             lambda: {"A": ustc.Tensor.from_package(v), "B": ustc.Tensor.from_package(v * (v > 0)).convert(
                 tensor_format=delta), "C": np.zeros(N)}, "C", lambda b: D(b["A"]) + D(b["B"]), None),
            ("add_dense_scaled_rows_to_csr", program("C[i,j] = A[i,j] + B[i,j]"),
             lambda: {"A": ustc.Tensor.from_package(dense(M, N)),
                      "B": sparse(fmt=P("(i, j) -> (2 * i : dense, j : compressed)")), "C": F.CSR}, "C",
             lambda b: D(b["A"]) + D(b["B"]), None),
            ("spmv_scaled_3j", program(SPMV),
             lambda: {"A": sparse(fmt=P("(i, j) -> (i : dense, 3 * j : compressed)")), "x": dense(N),
                      "y": np.zeros(M)}, "y", lambda b: D(b["A"]) @ b["x"], None)]


def run_sim(case) -> dict:
    name, prog, make, output, oracle, schedule = case
    bindings = make()
    expected = oracle(bindings)
    result = runtime.execute(prog, bindings, target="cuda", schedule=schedule)[output]
    got = D(result)
    ok = close(got, expected)
    text = runtime.source(prog, bindings, target="cuda", schedule=schedule)
    schedules = [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("# schedule: ")]
    return {"ok": ok, "schedules": schedules, **({} if ok else {"got": _listed(got), "expected": _listed(expected)})}


def _listed(a) -> list:
    """An array as JSON numbers (bfloat16 through float32)."""
    a = np.asarray(a)
    return (a.astype(np.float32) if a.dtype == BFLOAT16 else a).tolist()


def run_ptx(case) -> dict:
    """Each kernel linked for sm_90 and held to its schedule's promises (``codegen.cuda_checks``);
    the record keeps every kernel's facts, problems included, for the test to report."""
    from ustc.codegen import cuda_checks

    name, prog, make, output, oracle, schedule = case
    prepared = runtime.prepare(prog, make(), "cuda", schedule)
    reports = cuda_checks.check_run(prepared)
    return {"ok": bool(reports) and all(r.cubin_bytes > 0 for r in reports),
            "kernels": [{**r.record(), "sm": "sm_90"} for r in reports]}


MODEL_LOG: list = []


def install_model() -> None:
    """Launches run in the lock-step warp model (``codegen.warp_model``), with the schedules a
    GPU gets (256 threads a block, up to 4096 blocks), each launch's stats in ``MODEL_LOG``."""
    from ustc.codegen import warp_model
    from ustc.ops import cuda_host

    def launcher(module, name, views):
        return functools.partial(warp_model.launch, module, name, getattr(module, "launch_" + name), log=MODEL_LOG)

    cuda_host.launcher = launcher


def run_model(case) -> dict:
    del MODEL_LOG[:]
    record = run_sim(case)
    return {**record, "launches": [dataclasses.asdict(s) for s in MODEL_LOG]}


def matmul_cases():
    """ustc.Matmul planned for the cuda target (generated route): plan once, execute twice."""
    def spmv_twice(fmt):
        A, x = sparse(fmt=fmt), dense(N)
        mm = ustc.Matmul(A, x, alpha=2.0, options={"target": "cuda"}).plan()
        first = mm.execute().copy()
        x *= -1
        return [first, mm.execute()], [2 * D(A) @ -x, 2 * D(A) @ x], mm.plan_info

    def spmm_one_shot(fmt):
        A, B = sparse(fmt=fmt), dense(N, K)
        return [ustc.matmul(A, B, options={"target": "cuda"})], [D(A) @ B], "one-shot"

    def spmv_half(fmt):
        A, x = half(fmt), dense(N).astype(np.float16)
        mm = ustc.Matmul(A, x, alpha=2.0, options={"target": "cuda"}).plan()
        got = mm.execute()
        wide = 2 * D(A).astype(np.float32) @ x.astype(np.float32)
        return [got, np.asarray(got).dtype == np.float16], [wide.astype(np.float16), True], mm.plan_info

    def bfloat16(fmt, k=None):
        """A planned bfloat16 product on the generated CUDA kernels (no float32 twins): alpha, c
        updated in place and returned, a second execute accumulating again."""
        A = half(fmt, dtype=BFLOAT16)
        b = (dense(N) if k is None else dense(N, k)).astype(BFLOAT16)
        c = np.ones((M,) if k is None else (M, k), BFLOAT16)
        mm = ustc.Matmul(A, b, c, alpha=2.0, options={"target": "cuda"}).plan()
        product = 2 * D(A).astype(np.float32) @ b.astype(np.float32)
        first = mm.execute()
        once = first.copy()
        again = mm.execute()
        wide = lambda v: np.asarray(v).astype(np.float32)
        kernel_dtypes = [line for line in mm._route._run.header() if line.startswith(("A ", "B ", "C "))]
        checks = [first is c and again is c and c.dtype == BFLOAT16,
                  all(line.endswith("[bfloat16]") for line in kernel_dtypes)]   # the kernel reads bfloat16
        return [wide(once), wide(again), checks], [product + 1, 2 * product + 1, [True, True]], mm.plan_info

    def compat_bfloat16(fmt):
        """nvmath-python's Matmul (``ustc.ust``) on bfloat16 with ExecutionCUDA: the same kernels."""
        A, x = half(fmt, dtype=BFLOAT16), dense(N).astype(BFLOAT16)
        c = np.zeros(M, BFLOAT16)
        with ust.Matmul(ust.Tensor.from_package(A), x, c, alpha=0.5, execution=ust.ExecutionCUDA()) as mm:
            mm.plan()
            got = mm.execute()
            info = mm._mm.plan_info
            read = [line for line in mm._mm._route._run.header() if line.startswith(("A ", "B "))]
        checks = [got is c, all(line.endswith("[bfloat16]") for line in read)]
        return [np.asarray(got).astype(np.float32), checks], [0.5 * D(A).astype(np.float32) @ x.astype(np.float32),
                                                              [True, True]], info

    return [("matmul_spmv_delta_float16_planned", lambda: spmv_half(F.DELTA(4, True))),
            ("matmul_spmv_delta_bfloat16_planned", lambda: bfloat16(F.DELTA(4, True))),
            ("matmul_spmm_csr_bfloat16_planned", lambda: bfloat16(F.CSR, K)),
            ("matmul_ust_spmv_bsr_bfloat16", lambda: compat_bfloat16(F.BSR(2, 2))),
            ("matmul_spmv_csr_planned", lambda: spmv_twice(F.CSR)),
            ("matmul_spmv_coo_planned", lambda: spmv_twice(F.COO(2))),
            ("matmul_spmm_bsr_one_shot", lambda: spmm_one_shot(F.BSR(2, 2)))]


def run_matmul(case) -> dict:
    got, expected, info = case[1]()
    ok = all(np.allclose(g, e, rtol=2 ** -7) for g, e in zip(got, expected))
    return {"ok": ok and (info == "one-shot" or info.startswith("generated: cuda")), "plan_info": info}


def main(mode: str) -> int:
    warnings.simplefilter("ignore")
    if mode == "model":
        install_model()
    runner = {"ptx": run_ptx, "model": run_model}.get(mode, run_sim)  # "sim" and "gpu" (a device) run kernels
    extra = [] if mode in ("ptx", "model") else [(case, run_matmul) for case in matmul_cases()]
    pairs = [(case, runner) for case in cases()] + extra
    return report((case[0], functools.partial(run, case)) for case, run in pairs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
