"""Device-resident Krylov solves (CG, BiCGSTAB, GMRES on 'cuda'): simulator, PTX / cubin, a real GPU.

The simulator and PTX checks each run ``krylov_cases.py`` once in a subprocess. The GPU
tests (``@pytest.mark.gpu``) skip cleanly without a device; with one they run the same
cases on CuPy vectors and 'cuda' tensors, and solve with CuPy and torch CUDA right-hand
sides, checking that ``x`` stays on the device, matches SciPy and that the product was
planned once. The backend protocol on the host is tested in ``tests/matmul/test_krylov_backends.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from _spawn import assert_cubins, failures, gpu_only, run_matrix

CASES = Path(__file__).with_name("krylov_cases.py")


def test_krylov_in_the_simulator(tmp_path):
    records = run_matrix("sim", tmp_path, simulator=True, script=CASES)
    assert not [r for r in records if not r["ok"]], failures(records)
    by_case = {r["case"]: r for r in records}
    assert {f"ops_{d}" for d in ("float32", "complex64", "complex128")} <= set(by_case)
    assert "simulator_shared_arrays_locked" in by_case
    solves = [r for r in records if "plans" in r]
    assert len(solves) >= 25 and all(r["plans"] == 1 and r["launches"] > r["iterations"] for r in solves)
    assert len([c for c in by_case if c.startswith("format_")]) >= 10
    # an all-dense Tensor is a dense operand: its product is the dense (BLAS) route
    assert all(r["plan_info"].startswith("generated: cuda") or
               (r["case"].startswith("format_Dense_") and r["plan_info"].startswith("library: dense matmul"))
               for r in solves)
    assert by_case["gmres_None_float64_CSR_restart4"]["iterations"] > 4      # it restarted


def test_krylov_kernels_compile_to_cubins(tmp_path):
    pytest.importorskip("numba.cuda")
    records = run_matrix("ptx", tmp_path, simulator=False, script=CASES)
    assert not [r for r in records if not r["ok"]], failures(records)
    kernels = [r["kernel"] for r in records]
    assert len(kernels) == 4 * 13          # 12 kernels, csr_diagonal for two index widths; 4 dtypes
    assert_cubins(kernels)


# -- a real GPU ----------------------------------------------------------------------------

GPU = gpu_only()


@pytest.mark.gpu
@GPU
def test_krylov_cases_on_the_gpu(tmp_path):
    records = run_matrix("gpu", tmp_path, simulator=False, script=CASES)
    assert not [r for r in records if not r["ok"]], failures(records)


def _matrix(method, n=3000):
    m = sp.random(n, n, density=3 / n, random_state=11)
    if method == "cg":
        m = m + m.T
    return (m + sp.diags(1 + np.asarray(abs(m).sum(axis=1)).ravel())).tocsr()


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("method", ["cg", "bicgstab", "gmres"])
@pytest.mark.parametrize("pre", [None, "jacobi"])
@pytest.mark.parametrize("rhs", ["cupy", "torch"])
def test_device_rhs_stays_on_the_device(tmp_path, monkeypatch, counted_plans, method, pre, rhs):
    cupy = pytest.importorskip("cupy")
    import cupyx.scipy.sparse as csp

    import ustc

    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path))
    host = _matrix(method)
    a = ustc.Tensor.from_package(csp.csr_matrix(host))
    assert a.device == "cuda"
    b_host = np.random.default_rng(1).standard_normal(host.shape[0])
    if rhs == "torch":
        torch = pytest.importorskip("torch")
        b = torch.as_tensor(b_host, device="cuda")
    else:
        b = cupy.asarray(b_host)
    x, info = ustc.solve(a, b, method, preconditioner=pre, rtol=1e-10, return_info=True)
    if rhs == "torch":
        assert isinstance(x, torch.Tensor) and x.device.type == "cuda"
        x = cupy.from_dlpack(x)
    assert isinstance(x, cupy.ndarray) and x.dtype == np.float64
    assert info.converged and info.iterations > 0 and len(counted_plans) == 1
    x = cupy.asnumpy(x)
    assert np.linalg.norm(host @ x - b_host) <= 1.01e-10 * np.linalg.norm(b_host)
    np.testing.assert_allclose(x, spla.spsolve(host.tocsc(), b_host), rtol=1e-6, atol=1e-8)


@pytest.mark.gpu
@GPU
def test_device_semantics_match_the_cpu(tmp_path, monkeypatch):
    cupy = pytest.importorskip("cupy")

    import ustc

    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path))
    host = _matrix("gmres", 500)
    a = ustc.Tensor.from_package(host).convert("DIAI").to("cuda")      # a generated cuda kernel
    b = cupy.asarray(np.random.default_rng(2).standard_normal(500))
    exact = spla.spsolve(host.tocsc(), cupy.asnumpy(b))
    x, info = ustc.solve(a, b, x0=cupy.asarray(exact), return_info=True)
    assert info.method == "gmres" and info.iterations == 0 and isinstance(x, cupy.ndarray)
    with pytest.raises(ustc.SolveError, match="did not converge in 2 iterations"):
        ustc.solve(a, b, "gmres", maxiter=2)
    x, info = ustc.solve(a, b, "bicgstab", maxiter=2, check=False, return_info=True)
    assert not info.converged and info.iterations == 2
    with pytest.raises(ustc.DeviceError, match="'a' is on cuda, 'b' is on cpu"):
        ustc.solve(a, cupy.asnumpy(b), "cg")
    x32 = ustc.solve(a, b.astype(np.float32), "bicgstab", rtol=1e-5)
    assert x32.dtype == np.float64       # a's float64 values decide: as on the CPU
