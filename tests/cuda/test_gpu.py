"""Real launches on an NVIDIA GPU (``@pytest.mark.gpu``; skipped cleanly without one).

* the whole correctness matrix launched on the device (host arrays, copied by Numba);
* CuPy interop: a CuPy CSR matrix and CuPy vectors stay on the device (zero-copy) and
  the output is a CuPy array, on CuPy's current stream;
* torch CUDA interop: dense torch CUDA operands are viewed through DLPack and updated
  in place;
* Numba's CUDA cache: a second process loads the compiled kernel instead of compiling.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from _spawn import failures, no_gpu_reason, run_matrix


REASON = no_gpu_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"needs an NVIDIA GPU ({REASON})")]


def test_correctness_matrix_on_the_gpu(tmp_path):
    records = run_matrix("gpu", tmp_path, simulator=False)
    assert not [r for r in records if not r["ok"]], failures(records)


def test_cupy_operands_stay_on_the_device(tmp_path, monkeypatch):
    cupy = pytest.importorskip("cupy")
    import cupyx.scipy.sparse as csp
    import scipy.sparse as sp

    import ustc
    from ustc.ops import library, runtime

    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path))
    host = sp.random(300, 200, density=0.05, format="csr", random_state=0)
    a = ustc.Tensor.from_package(csp.csr_matrix(host))
    assert a.device == "cuda"
    x, y = cupy.asarray(np.random.default_rng(0).random(200)), cupy.zeros(300)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        out = runtime.execute(library.parse_program("y[i] = A[i,j] * x[j]"), {"A": a, "x": x, "y": y})["y"]
    stream.synchronize()
    assert out is y and isinstance(out, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(y), host @ cupy.asnumpy(x))
    moved = ustc.Tensor.from_package(host).to("cuda")
    assert moved.device == "cuda"
    with pytest.raises(ustc.DeviceError, match="cuda.*cpu|cpu.*cuda"):
        runtime.execute(library.parse_program("y[i] = A[i,j] * x[j]"), {"A": moved, "x": np.ones(200),
                                                                        "y": np.zeros(300)})


def test_a_launch_does_not_wait_for_the_stream(tmp_path, monkeypatch):
    """The operands' stream is busy (a long CuPy kernel queued); the launch returns at once
    and stream order still puts the product after that work."""
    cupy = pytest.importorskip("cupy")
    import cupyx.scipy.sparse as csp
    import scipy.sparse as sp
    import time

    import ustc
    from ustc.ops import library, runtime

    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path))
    host = sp.random(300, 200, density=0.05, format="csr", random_state=0)
    a, program = ustc.Tensor.from_package(csp.csr_matrix(host)), library.parse_program("y[i] = A[i,j] * x[j]")
    x, y = cupy.zeros(200), cupy.zeros(300)
    runtime.execute(program, {"A": a, "x": x, "y": y})          # compiled and loaded
    big = cupy.ones(1 << 26)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        busy = time.perf_counter()
        for _ in range(200):
            big *= 1.0000001                                   # ~200 passes over 512 MB queued
        x += 1.0                                               # written after the busy work
        t0 = time.perf_counter()
        runtime.execute(program, {"A": a, "x": x, "y": y})
        launch = time.perf_counter() - t0
    stream.synchronize()
    total = time.perf_counter() - busy
    np.testing.assert_allclose(cupy.asnumpy(y), host @ np.ones(200))
    assert launch < 0.5 * total, (launch, total)


def test_torch_cuda_dense_operands(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA build here")
    import scipy.sparse as sp

    import ustc
    from ustc.ops import library, runtime

    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path))
    host = sp.random(64, 48, density=0.1, format="csr", random_state=1)
    a = ustc.Tensor.from_package(host).to("cuda")
    x = torch.rand(48, dtype=torch.float64, device="cuda")
    y = torch.zeros(64, dtype=torch.float64, device="cuda")
    runtime.execute(library.parse_program("y[i] = A[i,j] * x[j]"), {"A": a, "x": x, "y": y})
    torch.cuda.synchronize()
    np.testing.assert_allclose(y.cpu().numpy(), host @ x.cpu().numpy())


SECOND_PROCESS = """
import json, numpy as np, scipy.sparse as sp, ustc
from ustc import cache
from ustc.ops import library, runtime
a = ustc.Tensor.from_package(sp.random(50, 40, density=0.2, format="csr", random_state=0))
runtime.execute(library.parse_program("y[i] = A[i,j] * x[j]"), {"A": a, "x": np.ones(40), "y": np.zeros(50)},
                target="cuda")
print(json.dumps(cache.stats()))
"""


def test_numba_cuda_cache_is_reused_by_a_second_process(tmp_path):
    env = {**os.environ, "USTC_CACHE_DIR": str(tmp_path)}
    runs = [json.loads(subprocess.run([sys.executable, "-c", SECOND_PROCESS], capture_output=True, text=True,
                                      env=env, timeout=300, check=True).stdout.strip().splitlines()[-1])
            for _ in range(2)]
    assert runs[0]["generated"] == 1 and runs[1]["generated"] == 0
    assert runs[1]["disk_hits"] >= 1
    assert list(tmp_path.rglob("*.nbi")), "numba-cuda wrote no cache index next to the kernel"
