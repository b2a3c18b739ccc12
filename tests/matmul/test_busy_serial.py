"""A planned product of a generated kernel takes its one-thread twin while only one core is free
(``routes.BUSY_WORK`` entries and up; ``ustc._threads.free_cores`` faked here), and the parallel
kernel otherwise; both agree with SciPy, over registry formats whose SpMV is generated."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc import _threads
from ustc import formats as F
from ustc.ops import routes, runtime

GENERATED = [pytest.param(nf.format(), id=nf.name) for nf in F.NAMED if nf.name in ("CSR", "DCSR", "DELTA")]


@pytest.mark.parametrize("free", [1, 2])
@pytest.mark.parametrize("fmt", GENERATED)
def test_one_free_core_runs_the_serial_twin(fmt, free, monkeypatch):
    monkeypatch.setattr(routes, "BUSY_WORK", 0)
    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)          # small operands bind the parallel kernel
    monkeypatch.setattr(_threads, "free_cores", lambda: free)
    S = sp.random(300, 200, density=0.05, format="csr", random_state=1)
    S.sort_indices()
    A = ustc.Tensor.from_package(S).convert(tensor_format=fmt)
    x = np.linspace(-1, 1, 200)
    mm = ustc.Matmul(A, x).plan()
    assert mm.plan_info.startswith("generated")
    route = mm._route
    calls = []
    module = route._module
    for name in (route._plan["function"], route._plan["serial"]):
        kernel = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *args, k=kernel, n=name: calls.append(n) or k(*args))
    route.unbind()
    np.testing.assert_allclose(mm.execute(), S @ x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mm.execute(), S @ x, rtol=1e-12, atol=1e-12)
    expected = route._plan["serial"] if free == 1 else route._plan["function"]
    assert calls == [expected, expected]


def test_small_products_never_look(monkeypatch):
    """Below BUSY_WORK nothing reads the load (the look costs ~30 us)."""
    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)

    def fail():
        raise AssertionError("free_cores was read for a small product")

    monkeypatch.setattr(_threads, "free_cores", fail)
    S = sp.random(50, 40, density=0.1, format="csr", random_state=2)
    A = ustc.Tensor.from_package(S)
    np.testing.assert_allclose(ustc.Matmul(A, np.ones(40)).plan().execute(), S @ np.ones(40))
