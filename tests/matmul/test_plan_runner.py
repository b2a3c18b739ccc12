"""``Matmul.runner()``: the planned product as one callable, equal to ``execute()``."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

import ustc


def _operands(rows=40, cols=30, seed=0):
    rng = np.random.default_rng(seed)
    a = sp.random(rows, cols, density=0.2, random_state=seed, format="csr")
    return ustc.Tensor.from_package(a), a, rng.random(cols)


def test_runner_computes_what_execute_does_and_sees_values_edited_in_place():
    A, a, x = _operands()
    mm = ustc.Matmul(A, x)
    mm.plan()
    run = mm.runner()
    assert run != mm.execute            # the route alone
    y = run()
    np.testing.assert_allclose(y, a @ x, rtol=1e-12)
    a.data *= 2.0                       # the runner reads the operand's buffers as they are now
    x[:] = np.arange(len(x))
    np.testing.assert_allclose(run(), a @ x, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(mm.execute()), a @ x, rtol=1e-12)


def test_runner_is_execute_where_execute_does_more():
    A, a, x = _operands(seed=1)
    c = np.ones(A.shape[0])
    mm = ustc.Matmul(A, x, c, alpha=1.0, beta=1.0)
    mm.plan()
    assert mm.runner() == mm.execute   # c is accumulated: execute's own path
    assert mm.runner()() is c
    np.testing.assert_allclose(c, 1.0 + a @ x, rtol=1e-12)
