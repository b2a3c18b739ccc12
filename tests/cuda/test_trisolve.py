"""Level-scheduled triangular solves on the ``cuda`` target: simulator, PTX / cubin, a real GPU.

The simulator and PTX checks each run ``trisolve_cases.py`` once in a subprocess
(``NUMBA_ENABLE_CUDASIM`` decides at import what ``numba.cuda`` is). The GPU tests
(``@pytest.mark.gpu``) skip cleanly without a device; with one they launch the same
cases on host operands and solve with CuPy operands on the device (zero-copy).
The level analysis and the dispatch errors are tested in ``tests/matmul/test_solve_levels.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _spawn import assert_cubins, failures, gpu_only, run_matrix

CASES = Path(__file__).with_name("trisolve_cases.py")


def test_trisolve_in_the_simulator(tmp_path):
    records = run_matrix("sim", tmp_path, simulator=True, script=CASES)
    assert len(records) >= 31
    assert not [r for r in records if not r["ok"]], failures(records)
    by_case = {r["case"]: r for r in records}
    assert by_case["diagonal_only_one_level"]["levels"] == 1
    assert by_case["bidiagonal_lower_n_levels"]["levels"] == 12
    assert by_case["empty_0x0"]["plan_info"] == "cuda: level-scheduled lower substitution on CSR rows, 0 levels"


def test_trisolve_kernels_compile_to_cubins(tmp_path):
    pytest.importorskip("numba.cuda")
    records = run_matrix("ptx", tmp_path, simulator=False, script=CASES)
    assert len(records) >= 6
    assert not [r for r in records if not r["ok"]], failures(records)
    kernels = [r["kernel"] for r in records]
    assert_cubins(kernels)


# -- a real GPU ----------------------------------------------------------------------------

GPU = gpu_only()


@pytest.mark.gpu
@GPU
def test_trisolve_cases_on_the_gpu(tmp_path):
    records = run_matrix("gpu", tmp_path, simulator=False, script=CASES)
    assert not [r for r in records if not r["ok"]], failures(records)


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("lower", [True, False])
def test_cupy_operands_stay_on_the_device(tmp_path, monkeypatch, lower):
    cupy = pytest.importorskip("cupy")
    import cupyx.scipy.sparse as csp
    import scipy.sparse as sp
    from scipy.sparse.linalg import spsolve_triangular

    import ustc

    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path))
    n = 2000
    m = sp.random(n, n, density=0.002, random_state=3) / n
    host = ((sp.tril(m, -1) if lower else sp.triu(m, 1)) + sp.diags(np.linspace(1, 2, n))).tocsr()
    device = csp.csr_matrix(host)
    a = ustc.Tensor.from_package(device)
    assert a.device == "cuda" and a._buffers[(1, "crd")].data.ptr == device.indices.data.ptr
    b = cupy.asarray(np.random.default_rng(0).standard_normal((n, 2)))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        x, info = ustc.solve(a, b, return_info=True)
    stream.synchronize()
    assert isinstance(x, cupy.ndarray) and x.shape == (n, 2) and x.dtype == np.float64
    assert info.plan_info.startswith("cuda: level-scheduled") and info.levels.nlevels > 1
    np.testing.assert_allclose(cupy.asnumpy(x), spsolve_triangular(host, cupy.asnumpy(b), lower=lower),
                               rtol=1e-10, atol=1e-12)
    x1 = ustc.solve(a, b[:, 0], unit_diagonal=True)
    np.testing.assert_allclose(cupy.asnumpy(x1), spsolve_triangular(host, cupy.asnumpy(b[:, 0]), lower=lower,
                                                                     unit_diagonal=True), rtol=1e-10, atol=1e-12)
    with pytest.raises(ustc.DeviceError, match="'a' is on cuda, 'b' is on cpu"):
        ustc.solve(a, cupy.asnumpy(b))
