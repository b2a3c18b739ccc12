"""Sparse outputs written in their own format on the cuda target (``codegen.writer`` on a GPU), as
a script in a process of its own (the simulator replaces ``numba.cuda`` at import).

    python tests/cuda/writer_cases.py sim   # NUMBA_ENABLE_CUDASIM=1: run every kernel, compare with the oracle
    python tests/cuda/writer_cases.py ptx   # no simulator: PTX for sm_90 + nvJitLink cubin per writer kernel
    python tests/cuda/writer_cases.py gpu   # a real GPU: the sim cases, tensors on the device in CuPy arrays

``Tensor.convert`` of a tensor on 'cuda' for every (source, target) pair of the format registry
(2-D and 3-D; no batched tensor lives on a device, so batched formats are targets only), on random, empty, all-zero, 1 x n, n x 1 and non-square tensors, float64 and
float32, and a COO source with duplicates; einsum copies and products into sparse formats on the
cuda target. Each result equals the NumPy pack oracle buffer for buffer; a pair the device cannot
write raises DeviceError naming both formats. Whether a pair *must* be written on the device is
decided from the compiler's facts, not a list: the cuda lowering's plan is split (a thread per
chunk) and converts nothing first. Prints one JSON object per case, like ``matrix.py``.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared oracle

import ustc  # noqa: E402
from _cases import report  # noqa: E402
from storage_oracle import assert_same_storage, oracle  # noqa: E402
from ustc import Tensor  # noqa: E402
from ustc import formats as F  # noqa: E402
from ustc.codegen import optimize  # noqa: E402
from ustc.codegen.compile import Operand, compile_program  # noqa: E402
from ustc.ops import convert as generated  # noqa: E402
from ustc.ops import runtime  # noqa: E402
from ustc.tensor.tensor import as_format  # noqa: E402

REGISTRY = {nf.name: nf.format() for nf in F.NAMED}
TWO_D = {n: f for n, f in REGISTRY.items() if f.ndim == 2}
THREE_D = {**{n: f for n, f in REGISTRY.items() if f.ndim == 3}, "COO3": F.COO(3),
           "BatchedCOO": as_format("(i, j, k) -> (i : batch, j : compressed(nonunique), k : singleton)")}
EDGES = {"empty": (0, 5), "all_zero": (4, 6), "one_row": (1, 9), "one_column": (7, 1), "tall": (9, 4)}
DTYPES = (np.float64, np.float32)


def fitting(shape, dtype, density=0.45, seed=0) -> np.ndarray:
    """Random entries, at most 2 in each group of 4 columns (every registry format holds them)."""
    rng = np.random.default_rng(seed)
    x = np.round(rng.random(shape) * 8 + 1).astype(dtype) * (rng.random(shape) < density)
    flat = x.reshape(-1, x.shape[-1]) if x.size else x.reshape(0, max(x.shape[-1], 1))
    for row in flat:
        for g in range(0, len(row), 4):
            nz = np.flatnonzero(row[g:g + 4])
            row[g + nz[2:]] = 0
    return flat.reshape(shape)


SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def on_device(t: Tensor) -> Tensor:
    """``t`` as a tensor on 'cuda': the simulator's device arrays are NumPy arrays; on a GPU CuPy's."""
    return Tensor(t.format, t.shape, t._buffers, t._values, device="cuda") if SIMULATED else t.to("cuda")


def on_host(t: Tensor) -> Tensor:
    return Tensor(t.format, t.shape, t._buffers, t._values) if SIMULATED else t.to("cpu")


@functools.lru_cache(maxsize=None)
def device_writes(source, target) -> bool:
    """The compiler's own verdict: the cuda lowering of ``B[...] = A[...]`` is a split writer that
    converts nothing first (codegen only: nothing is compiled or run)."""
    ndim = source.ndim
    if source.batch_levels or target.batch_levels or not generated.writable(target):
        return False  # batched storage lives on the host only (ustc.ops.written)
    ops = {"B": Operand("B", target, ndim, "float64"), "A": Operand("A", source, ndim, "float64")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = compile_program(generated.copy_program(ndim), ops, (), optimize.CUDA).meta["plan"][0]
    return plan.split and not plan.convert


def converted(host: Tensor, target) -> dict:
    """``host`` moved to 'cuda' and converted there: the result against the oracle."""
    got = on_device(host).convert(target)
    assert got.device == "cuda", got.device
    assert_same_storage(on_host(got), oracle(host, target))
    return {"nse": int(got.nse)}


def pair_case(k: int, source_name: str, target_name: str, formats: dict):
    """One registry pair: a random tensor, then two edge cases (cycled over the pairs, so every
    edge meets both dtypes), or the DeviceError of a pair the device does not write."""
    source, target = formats[source_name], formats[target_name]

    def run() -> dict:
        cases = [("random", (5, 7) if source.ndim == 2 else (3, 4, 5), np.float64)]
        if source.ndim == 2:
            names = list(EDGES)
            cases += [(names[k % 5], EDGES[names[k % 5]], DTYPES[k % 2]),
                      (names[(k + 2) % 5], EDGES[names[(k + 2) % 5]], DTYPES[(k + 1) % 2])]
        else:
            cases += [("one_by_one", (1, 1, 9), DTYPES[k % 2]), ("empty", (0, 3, 4), DTYPES[(k + 1) % 2])]
        expect = source == target or device_writes(source, target)  # the same format: a device copy
        written, refusals = [], []
        for label, shape, dtype in cases:
            dense = np.zeros(shape, dtype) if label == "all_zero" else fitting(shape, dtype, seed=k)
            host = Tensor.from_dense(dense, source)
            try:
                written.append({label: converted(host, target)})
            except ustc.DeviceError as exc:
                refusals.append(str(exc))
        named = all(str(source) in r and str(target) in r and ".to('cpu')" in r for r in refusals)
        ok = named and (not refusals if expect else not written)
        return {"ok": ok, "expect": expect, "written": bool(written), "refusals": refusals[:1]}

    return f"convert_{source_name}_to_{target_name}", run


def duplicates_case(target_name: str):
    """A COO source with repeated coordinates (a pair summing to zero, an explicit zero) in runs
    that cross chunk borders."""
    def run() -> dict:
        rows = np.array([0, 0, 0, 1, 1, 3, 3, 3, 3, 4, 6, 6])
        cols = np.array([3, 3, 5, 0, 2, 1, 1, 4, 4, 4, 0, 0])
        vals = np.array([1.0, 2.0, 3.0, 5.0, 0.0, 4.0, -4.0, 1.0, 1.0, 7.0, 2.0, 2.0])
        fmt = "(i, j) -> (i : compressed(nonunique), j : singleton(nonunique))"
        host = Tensor(fmt, (8, 6), {(0, "pos"): np.array([0, len(vals)]), (0, "crd"): rows, (1, "crd"): cols}, vals)
        return {"ok": True, **converted(host, TWO_D[target_name])}

    return f"duplicates_COO_to_{target_name}", run


def spy_plans() -> list:
    """Plans of the statements ``Run._written`` runs (the writer path), recorded."""
    seen: list = []
    original = runtime.Run._written

    def spy(self, statement, fn, plan, views, out):
        seen.append(plan)
        return original(self, statement, fn, plan, views, out)

    runtime.Run._written = spy
    return seen


WRITTEN = spy_plans()


def einsum_case(name: str, subscripts: str, shapes, out_format, writer: bool):
    """``ustc.einsum`` on the cuda target into a sparse format: equal to the oracle of the dense
    result, through the writer (a split plan) when ``writer``, else the coordinate lists."""
    def run() -> dict:
        fmt = as_format(out_format)
        operands = [Tensor.from_dense(fitting(s, np.float64, seed=n), F.CSR) for n, s in enumerate(shapes)]
        del WRITTEN[:]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = ustc.einsum(subscripts, *operands, out_format=fmt, target="cuda")
        want = Tensor.from_dense(np.einsum(subscripts, *[o.to_dense() for o in operands]), F.COO(len(shapes[0])))
        assert_same_storage(got, oracle(want, fmt))
        took = [(p.writer, p.split) for p in WRITTEN]
        return {"ok": took == ([(2, True)] if writer else []), "plans": took}

    return name, run


def operator_case(out_name: str):
    """``A * B`` of two tensors on 'cuda' (the cuda target by their device), then into a sparse
    format by the writer."""
    def run() -> dict:
        a, b = (Tensor.from_dense(fitting((6, 9), np.float64, seed=s), F.CSR) for s in (1, 2))
        del WRITTEN[:]
        product = on_device(a) * on_device(b)
        got = product.convert(TWO_D[out_name]) if product.format != TWO_D[out_name] else product
        want = Tensor.from_dense(a.to_dense() * b.to_dense(), F.CSR)
        assert got.device == "cuda"
        assert_same_storage(on_host(got), oracle(want, TWO_D[out_name]))
        return {"ok": bool(WRITTEN) and all(p.split for p in WRITTEN), "plans": [(p.writer, p.split) for p in WRITTEN]}

    return f"operator_mul_into_{out_name}", run


def sim_cases():
    out = [pair_case(k, s, t, TWO_D) for k, (s, t) in enumerate((s, t) for s in TWO_D for t in TWO_D)]
    out += [pair_case(k, s, t, THREE_D) for k, (s, t) in enumerate((s, t) for s in THREE_D for t in THREE_D)
            if not THREE_D[s].batch_levels]  # no batched tensor lives on a device
    coo = TWO_D["COO"]
    out += [duplicates_case(t) for t, f in TWO_D.items() if device_writes(coo, f)]
    out += [einsum_case(f"einsum_copy_into_{n}", "ij->ij", [(6, 9)], TWO_D[n], True)
            for n in ("COO", "DCSR", "CSR", "DELTA")]
    out += [einsum_case("einsum_mul_into_COO", "ij,ij->ij", [(6, 9), (6, 9)], F.COO(2), True),
            einsum_case("einsum_mul_into_DCSR", "ij,ij->ij", [(6, 9), (6, 9)], F.DCSR, True),
            # the reduction index between the output's: no in-order walk, the coordinate lists
            einsum_case("einsum_spgemm_into_DCSR_falls_back", "ik,kj->ij", [(6, 5), (5, 9)], F.DCSR, False),
            einsum_case("einsum_copy_into_BSR_falls_back", "ij->ij", [(6, 8)], F.BSR(2, 2), False),
            einsum_case("einsum_copy_into_structured_falls_back", "ij->ij", [(6, 8)], TWO_D["Structured"], False)]
    out += [operator_case(n) for n in ("COO", "DCSR")]
    return out


def ptx_case(source_name: str, target_name: str, formats: dict):
    """The writer kernel of one pair the device writes, linked for sm_90 (``codegen.cuda_checks``)."""
    def run() -> dict:
        from ustc.codegen import cuda_checks

        source, target = formats[source_name], formats[target_name]
        host = Tensor.from_dense(fitting((5, 7) if source.ndim == 2 else (3, 4, 5), np.float64), source)
        prepared = runtime.prepare(generated.copy_program(source.ndim), {"B": target, "A": host}, "cuda")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reports = cuda_checks.check_run(prepared)
        return {"ok": bool(reports) and all(r.cubin_bytes > 0 for r in reports),
                "kernels": [{**r.record(), "sm": "sm_90"} for r in reports]}

    return f"ptx_convert_{source_name}_to_{target_name}", run


def ptx_cases():
    out = []
    for formats in (TWO_D, THREE_D):
        out += [ptx_case(s, t, formats) for s in formats for t in formats
                if s != t and device_writes(formats[s], formats[t])]
    return out


def main(mode: str) -> int:
    warnings.simplefilter("ignore")
    return report(ptx_cases() if mode == "ptx" else sim_cases())  # "sim" and "gpu" run the kernels


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
