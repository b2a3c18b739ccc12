"""``Matmul.bind_call()``: the planned route on a ``b`` and an ``out`` given at each call, plus ``add``."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc.ops.plan_call import ArrayLayout, PlannedCall


def _csr(rows, cols, density, seed=0, dtype=np.float64):
    a = sp.random(rows, cols, density=density, random_state=seed, format="csr", dtype=dtype)
    a.indices = a.indices.astype(np.uint16)  # narrow columns: the CSR SpMV kernel's operand
    return ustc.Tensor.from_package(a), a


@pytest.mark.parametrize("rows, cols, density, route, direct_kind", [
    (40, 30, 0.2, "generated", "generated"),  # the generated kernel, arguments swapped
    (40, 30, 0.2, None, "registered kernel"),  # below the serial size: SerialCsrRoute (csr_rows)
    (700, 600, 0.75, None, "registered kernel"),  # LinearCsrRoute: the hand-written kernel on the given arrays
])
def test_direct_call_equals_dense_and_reads_the_given_arrays(rows, cols, density, route, direct_kind):
    A, a = _csr(rows, cols, density, dtype=np.float32)
    rng = np.random.default_rng(1)
    x0 = rng.random(cols, dtype=np.float32)
    mm = ustc.Matmul(A, x0.copy(), options={"route": route} if route else None).plan()
    assert direct_kind in mm.plan_info
    call = mm.bind_call(x0, np.empty(rows, np.float32))
    assert isinstance(call, PlannedCall) and call.direct and call.kind == direct_kind
    for seed in (2, 3):
        x, add = rng.random(cols, dtype=np.float32), rng.random(rows, dtype=np.float32)
        before = x.copy()
        out = np.full(rows, np.nan, np.float32)
        assert call(x, out) is out
        np.testing.assert_allclose(out, a @ x, rtol=1e-5, atol=1e-5)
        assert call(x, out, add) is out
        np.testing.assert_allclose(out, a @ x + add, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(x, before)  # b is only read
    a.data *= 2.0  # values edited in place are seen
    np.testing.assert_allclose(call(x, out), a @ x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(mm.execute()), a @ mm._bound.b, rtol=1e-5, atol=1e-5)  # plan still right


def test_staged_call_goes_through_the_plan_buffers():
    A, a = _csr(20, 12, 0.3)
    b_plan = np.ones(12)
    mm = ustc.Matmul(A, b_plan).plan()
    out_plan = mm.runner()()
    call = PlannedCall(mm._lock, ArrayLayout.of(b_plan), ArrayLayout.of(out_plan), None, (b_plan, mm.runner()))
    x, out, add = np.arange(12.0), np.empty(20), np.full(20, 0.5)
    np.testing.assert_allclose(call(x, out, add), a @ x + 0.5, rtol=1e-12)
    np.testing.assert_allclose(call(x, out), a @ x, rtol=1e-12)


def test_other_layouts_are_refused_and_unbindable_plans_say_none():
    A, a = _csr(30, 20, 0.3)
    x = np.ones(20)
    mm = ustc.Matmul(A, x).plan()
    call = mm.bind_call(x, np.empty(30))
    for b, out, add in ((np.ones(21), np.empty(30), None),            # shape
                        (np.ones(20, np.float32), np.empty(30), None),  # dtype
                        (np.ones(40)[::2], np.empty(30), None),        # strides
                        (x, np.empty(30)[None], None),                  # out shape
                        (x, np.empty(30), np.ones(29))):                # add shape
        with pytest.raises(ustc.ShapeError):
            call(b, out, add)
    read_only = np.empty(30)
    read_only.flags.writeable = False
    with pytest.raises(ustc.ShapeError):
        call(x, read_only)
    assert mm.bind_call(x, np.empty(31)) is None  # not the planned result's shape
    c = np.ones(30)
    accumulating = ustc.Matmul(A, x, c, alpha=1.0, beta=1.0).plan()
    assert accumulating.bind_call(x, np.empty(30)) is None  # execute does more than the route


def test_an_out_overlapping_b_is_refused_and_b_is_kept():
    A, a = _csr(20, 20, 0.3)
    x = np.arange(20.0)
    call = ustc.Matmul(A, x).plan().bind_call(x, np.empty(20))
    shared = np.arange(20.0)
    with pytest.raises(ustc.ShapeError, match="overlaps"):
        call(shared, shared)  # y = A @ y in place would read rows it has written
    np.testing.assert_array_equal(shared, np.arange(20.0))
    np.testing.assert_allclose(call(shared, np.empty(20)), a @ shared)
