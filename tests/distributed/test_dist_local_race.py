"""A block worker's local CSR product races its row sums (``worker._local_product``): the first six
products alternate between the masked 8-lane steps and two interleaved sums, timed, then the faster
is kept; every product, raced or not, is ``A_local x`` and returns its dot product."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

from ustc.distributed import worker
from ustc.kernels._race import KernelRace


@pytest.mark.parametrize("slow", [0, 1])
@pytest.mark.parametrize("square", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_local_product_race(monkeypatch, slow, square, dtype):
    a = sp.random_array((300, 300), density=0.03, random_state=1, format="csr").astype(dtype)
    a = (a + sp.eye_array(300, dtype=dtype)).tocsr()
    now, calls = [0.0], []
    real = worker.local_product

    def product(*args):
        calls.append(args[-1])
        now[0] += 10.0 if args[-1] == bool(slow) else 1.0
        return real(*args)

    monkeypatch.setattr(worker, "local_product", product)
    fast = SimpleNamespace(local=(a.indptr, a.indices, a.data), square=square, race=KernelRace(clock=lambda: now[0]))
    rng = np.random.default_rng(2)
    for k in range(9):
        x = rng.standard_normal(300).astype(dtype)
        out = np.full(300, np.nan, dtype=dtype)
        dot = worker._local_product(fast, x, out, dtype(0))
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(out, a @ x, rtol=tol, atol=tol)
        left = x if square else out
        np.testing.assert_allclose(dot, np.vdot(left, out), rtol=tol * 10)
    assert calls[:6] == [False, True] * 3
    assert fast.race.winner == 1 - slow and calls[6:] == [slow == 0] * 3
