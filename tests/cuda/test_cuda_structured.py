"""n:m structured GEMV and small-batch SpMM on CUDA (``ustc.kernels._structured_cuda``): every
case of ``structured_cases.py`` equals the CPU n:m kernel in the simulator (a process of its
own), each kernel links for sm_90 within its promise, and Matmul on the cuda target picks
them only where they apply."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ustc
from _spawn import failures, gpu_only, run_matrix
from ustc.kernels import registry

CASES = Path(__file__).with_name("structured_cases.py")
F = ustc.formats


def test_gemv_and_spmm_equal_the_cpu_kernels_in_the_simulator(tmp_path):
    records = run_matrix("sim", tmp_path, simulator=True, script=CASES)
    assert len(records) == 3 + 5 + 6 * 2 + 3
    assert all(r["ok"] for r in records), failures(records)


@pytest.mark.gpu
@gpu_only()
def test_gemv_and_spmm_equal_the_cpu_kernels_on_a_gpu(tmp_path):
    records = run_matrix("gpu", tmp_path, simulator=False, script=CASES)
    assert len(records) == 3 + 5 + 6 * 2 + 3 and all(r["ok"] for r in records), failures(records)


def test_kernels_link_for_sm90_within_their_promises(tmp_path):
    pytest.importorskip("numba.cuda")
    records = run_matrix("ptx", tmp_path, simulator=False, script=CASES)
    assert len(records) == 8
    assert all(r["ok"] for r in records), failures(records) + "\n".join(r.get("summary", "") for r in records)
    kernels = {r["case"]: r["kernel"] for r in records}
    for k in kernels.values():
        assert k["spill_stores"] == k["spill_loads"] == k["local_ops"] == k["stack"] == 0
        assert 0 < k["registers"] <= k["budget"] and k["readonly_loads"] > 0 and k["atomics"] == 0
    assert kernels["ptx_gemv_24_w32_float32"]["shuffles"] > 0          # a row's lanes meet by shuffles
    assert kernels["ptx_gemv_12_w1_float32"]["shuffles"] == 0          # a thread a row: none
    assert kernels["ptx_spmm_24_w16_float16"]["shuffles"] == 0


@pytest.mark.parametrize("n, m, rows, cols, dtype, batch", [
    (2, 4, 40, 70, np.float64, None), (1, 4, 5, 17, np.float16, None), (2, 8, 9, 300, np.float32, None),
    (2, 4, 9, 30, np.float32, 5), (2, 8, 6, 40, np.float16, 16), (2, 4, 3, 12, np.float64, 40)])
def test_the_launch_a_gpu_gets_in_the_warp_model(monkeypatch, n, m, rows, cols, dtype, batch):
    """The kernels as a GPU launches them (256 threads a block, lanes and rows per warp, shuffles
    in lock step) run in the NumPy warp model (``codegen.warp_model``) and equal the CPU kernel."""
    pytest.importorskip("numba.cuda")
    from structured_cases import cpu, operands
    from ustc.codegen import warp_model
    from ustc.kernels import _structured_cuda as nm
    from ustc.ops import cuda_host

    log: list = []
    for name in ("gemv_kernel", "spmm_kernel"):
        made = getattr(nm, name)
        monkeypatch.setattr(nm, name, lambda *key, made=made: warp_model.Kernel(made(*key), log))
    monkeypatch.setattr(cuda_host, "simulator", lambda: False)
    monkeypatch.setattr(cuda_host, "require_device", lambda: None)
    A, b, out = operands(n, m, rows, cols, dtype, seed=rows + cols, batch=batch)
    expected = cpu(A, b, out, 0.5, n, m)
    (nm.gemv if batch is None else nm.spmm)(A._buffers[(2, "crd")], A._values, b, out, 0.5, n, m, cols)
    np.testing.assert_array_equal(out.astype(np.float64), expected)
    assert len(log) == 1 and log[0].threads == nm.THREADS and log[0].atomics == 0
    assert (log[0].shuffles > 0) == (batch is None)


def _operands(dtype=np.float32, batch=None, n=2, m=4):
    dense = np.zeros((6, 16), dtype)
    dense[:, ::m] = 1
    A = ustc.Tensor.from_dense(dense, F.Structured(n, m))
    b = np.ones((16,) if batch is None else (16, batch), dtype)
    return A, b


@pytest.mark.parametrize("op, batch", [("spmv", None), ("spmm", 16)])
def test_registered_for_the_cuda_target_only_where_they_apply(op, batch):
    A, b = _operands(batch=batch)
    entry = registry.lookup(op, A.format, "cuda", A, b)
    assert entry is not None and entry.name == f"structured_{op}_cuda" and entry.builtin
    assert registry.lookup(op, A.format, "cpu", A, b).name == f"structured_{op}"   # the CPU keeps its own
    for dtype in (np.complex128, ml_dtypes.bfloat16, np.int32):   # the generated route takes these
        A2, b2 = _operands(dtype, batch)
        assert registry.lookup(op, A2.format, "cuda", A2, b2) is None, dtype
    A3, b3 = _operands(batch=batch)
    assert registry.lookup(op, A3.format, "cuda", A3, b3.astype(np.float64)) is None   # mixed dtypes
    if op == "spmm":
        A4, b4 = _operands(batch=17)     # past the small batches: the tensor-core range
        assert registry.lookup("spmm", A4.format, "cuda", A4, b4) is None


def test_promises_follow_the_lanes():
    pytest.importorskip("numba.cuda")
    from ustc.kernels import _structured_cuda as nm

    assert nm.promise("gemv", 32).shuffles and not nm.promise("gemv", 1).shuffles
    assert not nm.promise("spmm", 16).shuffles and not nm.promise("spmm", 16).atomics
    assert nm.promise("gemv", 8).max_registers == 128 and nm.promise("gemv", 8).readonly
    assert nm.wide_type(np.float16) is np.float32 and nm.wide_type(np.float64) is np.float64
