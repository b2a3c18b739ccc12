"""Matmul's plan / execute split, routes and plan_info, the kernel registry and the plan cache."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import ustc
from matmul_helpers import random_dense
from ustc.ops import plan_cache


def test_execute_sees_in_place_changes(rng):
    a = random_dense(rng, (8, 6))
    A = ustc.Tensor.from_dense(a, "CSR")
    x = rng.standard_normal(6)
    with ustc.Matmul(A, x) as mm:
        mm.plan()
        y = mm.execute()
        np.testing.assert_allclose(y, a @ x)
        x *= -3                       # operand values change in place
        A.values[:] *= 2
        assert mm.execute() is y      # the planned output, reused
        np.testing.assert_allclose(y, 2 * a @ x)
        assert mm.plans == 1
    with pytest.raises(ustc.UstcError, match="released"):
        mm.execute()


def test_execute_plans_on_demand_and_out(rng):
    A = ustc.Tensor.from_dense(random_dense(rng, (4, 3)), "COO")
    x = rng.standard_normal(3)
    mm = ustc.Matmul(A, x)
    out = np.empty(4)
    assert mm.execute(out=out) is out
    np.testing.assert_allclose(out, A.to_dense() @ x)
    assert mm.plans == 1


def test_reset_operands(rng):
    a, b = random_dense(rng, (5, 4)), random_dense(rng, (5, 4))
    mm = ustc.Matmul(ustc.Tensor.from_dense(a, "CSR"), np.ones(4), transpose_a=False).plan()
    x = rng.standard_normal(4)
    mm.reset_operands(a=ustc.Tensor.from_dense(b, "CSR"), b=x)
    np.testing.assert_allclose(mm.execute(), b @ x)
    with pytest.raises(ustc.UstcError, match="differ from the planned ones"):
        mm.reset_operands(a=ustc.Tensor.from_dense(b, "CSC"))
    with pytest.raises(ustc.UstcError, match="differ from the planned ones"):
        mm.reset_operands(b=np.ones(4, dtype=np.float32))


@pytest.mark.parametrize("fmt,route", [("CSR", "generated"), ("DIAI", "registered kernel: dia_spmv"),
                                       ("DIAJ", "registered kernel: dia_spmv"),
                                       ("DELTA(4)", "generated"),   # plain gaps: generated code is faster
                                       ("DELTA(1, packed)", "registered kernel: delta_spmv"),
                                       ("DELTA(2, packed)", "registered kernel: delta_spmv"),
                                       ("DELTA(8, packed)", "registered kernel: delta_spmv")])
def test_routes_for_spmv(fmt, route, rng):
    a = random_dense(rng, (37, 29), density=0.4)
    A = ustc.Tensor.from_dense(a, fmt)
    x = rng.standard_normal(29)
    mm = ustc.Matmul(A, x, alpha=0.5).plan()
    assert mm.plan_info.startswith(route)
    assert "why:" in mm.plan_info
    np.testing.assert_allclose(mm.execute(), 0.5 * a @ x)
    forced = ustc.Matmul(A, x, options={"route": "generated"}).plan()
    assert forced.plan_info.startswith("generated")
    np.testing.assert_allclose(forced.execute(), a @ x)


@pytest.mark.parametrize("fmt", ["DIAI", "DIAJ"])
def test_dia_spmv_serial_below_threshold_parallel_above(fmt, monkeypatch, rng):
    """Small operands run the one-thread twin (no parallel launch), large ones the tiled
    parallel kernel; both agree with SciPy, across several row tiles too."""
    from ustc.kernels import _dia
    from ustc.ops import runtime

    calls = []

    class Spy:
        def __init__(self, name):
            self.name, self.kernel = name, getattr(_dia, name)
            self.compile = self.kernel.compile

        def __call__(self, *args):
            calls.append(self.name)
            return self.kernel(*args)

    for name in ("dia_spmv", "dia_spmv_serial"):
        monkeypatch.setattr(_dia, name, Spy(name))
    n = _dia.TILE + 123                             # two row tiles
    offsets = (-300, -1, 0, 2, 4000)                 # a band: a random matrix this size has ~2n diagonals
    a = scipy.sparse.diags([rng.standard_normal(n - abs(k)) for k in offsets], offsets,
                           shape=(n, n), format="csr")
    A = ustc.Tensor.from_package(a).convert(fmt)
    x = rng.standard_normal(n)
    for limit, expected in ((10 ** 9, "dia_spmv_serial"), (0, "dia_spmv")):
        monkeypatch.setattr(runtime, "SERIAL_WORK", limit)
        np.testing.assert_allclose(ustc.Matmul(A, x).plan().execute(), a @ x, rtol=1e-12, atol=1e-12)
        assert calls[-1] == expected


def test_delta_packed_long_rows_cross_words(rng):
    a = random_dense(rng, (3, 200), density=0.5)   # rows start at every offset inside a word
    for fmt in ("DELTA(1, packed)", "DELTA(2, packed)", "DELTA(4, packed)", "DELTA(8, packed)", "DELTA(3)"):
        A = ustc.Tensor.from_dense(a, fmt)
        x = rng.standard_normal(200)
        np.testing.assert_allclose(ustc.matmul(A, x), a @ x)


def test_library_routes(rng):
    a, b = random_dense(rng, (6, 5)), random_dense(rng, (5, 7))
    A, B = ustc.Tensor.from_dense(a, "CSC"), ustc.Tensor.from_dense(b, "COO")
    mm = ustc.Matmul(A, B).plan()
    assert mm.plan_info.startswith("generated"), mm.plan_info   # SpGEMM: the generated workspace kernel
    np.testing.assert_allclose(mm.execute().to_dense(), a @ b)
    lib = ustc.Matmul(A, B, options={"route": "library"}).plan()
    assert lib.plan_info.startswith("library: SciPy")
    np.testing.assert_allclose(lib.execute().to_dense(), a @ b)
    x = rng.standard_normal(5)
    forced = ustc.Matmul(A, x, options={"route": "library"}).plan()
    assert forced.plan_info.startswith("library: SciPy")
    np.testing.assert_allclose(forced.execute(), a @ x)
    with pytest.raises(ustc.UnsupportedOperation, match="route 'library' cannot run"):
        ustc.Matmul(ustc.Tensor.from_dense(a, "DCSR"), x, options={"route": "library"}).plan()
    with pytest.raises(ustc.UnsupportedOperation, match="route 'registered' cannot run"):
        ustc.Matmul(A, x, options={"route": "registered"}).plan()


def test_csr_spgemm_registered(rng):
    a, b = random_dense(rng, (40, 30), 0.2), random_dense(rng, (30, 50), 0.2)
    A, B = ustc.Tensor.from_dense(a, "CSR"), ustc.Tensor.from_dense(b, "CSR")
    mm = ustc.Matmul(A, B, options={"route": "registered"}).plan()
    assert mm.plan_info.startswith("registered kernel: csr_spgemm")
    C = mm.execute()
    C.validate()
    np.testing.assert_allclose(C.to_dense(), a @ b, atol=1e-12)
    dense_row = np.zeros((3, 200))
    dense_row[0] = 1                                         # a long output row takes the sort path
    D = ustc.matmul(ustc.Tensor.from_dense(np.ones((2, 3)), "CSR"), ustc.Tensor.from_dense(dense_row, "CSR"))
    D.validate()
    np.testing.assert_allclose(D.to_dense(), np.ones((2, 3)) @ dense_row)


def test_user_registered_kernel_wins_and_can_decline(rng):
    calls = []

    @ustc.kernels.register("spmv", "CSR", target="cpu")
    def my_csr(a, b, out, alpha):
        calls.append(1)
        out += alpha * (a.to_dense() @ b)

    try:
        a = random_dense(rng, (4, 4))
        A, x = ustc.Tensor.from_dense(a, "CSR"), rng.standard_normal(4)
        mm = ustc.Matmul(A, x).plan()
        assert mm.plan_info.startswith("registered kernel: my_csr (spmv, cpu)")
        np.testing.assert_allclose(mm.execute(), a @ x)
        assert calls == [1]
        my_csr.supports = lambda a, b: b.dtype == np.float32      # decline float64: generated code runs
        assert ustc.Matmul(A, x).plan().plan_info.startswith("generated")
    finally:
        ustc.kernels.unregister(my_csr)
    assert ustc.kernels.lookup("spmv", ustc.TensorFormat.parse("CSR"), "cpu") is None


def test_register_rejects_bad_arguments():
    with pytest.raises(ustc.UstcError, match="op must be one of"):
        ustc.kernels.register("spmvv", "CSR")
    with pytest.raises(ustc.UstcError, match="target must be one of"):
        ustc.kernels.register("spmv", "CSR", target="tpu")
    with pytest.raises(ustc.FormatError):
        ustc.kernels.register("spmv", "(i, j) -> (i : dense")
    names = {r.name for r in ustc.kernels.registered() if r.builtin}
    assert {"dia_spmv", "delta_spmv", "csr_spgemm"} <= names


def test_plan_cache_hits_and_keys(rng):
    a = random_dense(rng, (6, 5))
    A = ustc.Tensor.from_dense(a, "CSR")
    y1 = ustc.matmul(A, np.ones(5))
    y2 = ustc.matmul(ustc.Tensor.from_dense(2 * a, "CSR"), np.ones(5))
    assert y1 is not y2                                   # one-shot results never share a buffer
    np.testing.assert_allclose(y2, 2 * y1)
    assert plan_cache.stats()["hits"] == 1 and plan_cache.stats()["misses"] == 1
    ustc.matmul(A, np.ones(5), alpha=2.0)                # another alpha kind: a new plan
    ustc.matmul(A, np.ones(5), alpha=3.0)                # same kind, new value: a hit
    np.testing.assert_allclose(ustc.matmul(A, np.ones(5), alpha=3.0), 3 * y1)
    ustc.matmul(A, np.ones(5, dtype=np.float32))         # another dtype: a new plan
    ustc.matmul(A.T, np.ones(6))                         # another format: a new plan
    s = plan_cache.stats()
    assert (s["misses"], s["hits"], s["size"]) == (4, 3, 4)


def test_plan_cache_executes_only_on_a_hit(rng, monkeypatch):
    A = ustc.Tensor.from_dense(random_dense(rng, (6, 5)), "DIAI")
    ustc.matmul(A, np.ones(5))
    planned = []
    monkeypatch.setattr(ustc.Matmul, "plan", lambda self: planned.append(self) or self)
    np.testing.assert_allclose(ustc.matmul(A, np.arange(5.0)), A.to_dense() @ np.arange(5.0))
    assert planned == []


def test_plan_cache_lru_bound_and_release(rng):
    plan_cache.set_maxsize(2)
    try:
        for n in (3, 4, 5):
            ustc.matmul(ustc.Tensor.from_dense(np.eye(n), "CSR"), np.ones(n))
        assert plan_cache.stats()["size"] == 2
        plan_cache.set_maxsize(0)
        ustc.matmul(ustc.Tensor.from_dense(np.eye(3), "CSR"), np.ones(3))
        assert plan_cache.stats()["size"] == 0
    finally:
        plan_cache.set_maxsize(64)
    with pytest.raises(ValueError):
        plan_cache.set_maxsize(-1)


def test_cached_plan_holds_no_operands(rng):
    import gc
    import weakref

    A = ustc.Tensor.from_dense(random_dense(rng, (6, 5)), "CSR")
    x = rng.standard_normal(5)
    ref = weakref.ref(A)
    ustc.matmul(A, x)
    del A
    gc.collect()
    assert ref() is None


def test_doctests():
    import doctest

    import ustc.kernels.registry
    import ustc.ops.plan
    import ustc.ops.plan_cache
    import ustc.ops.solve

    for module in (ustc.kernels.registry, ustc.ops.plan, ustc.ops.plan_cache, ustc.ops.solve):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_plan_calls_a_registered_kernels_compile_hook(rng):
    seen = []

    @ustc.kernels.register("spmv", "CSC", target="cpu")
    def my_csc(a, b, out, alpha):
        out += alpha * (a.to_dense() @ b)

    my_csc.compile = lambda a, b, out, alpha: seen.append((out.shape, alpha))
    try:
        A = ustc.Tensor.from_dense(random_dense(rng, (4, 3)), "CSC")
        mm = ustc.Matmul(A, np.ones(3), alpha=2.0).plan()
        assert seen == [((4,), 2.0)]                     # compiled at plan time, nothing run
        np.testing.assert_allclose(mm.execute(), 2 * A.to_dense() @ np.ones(3))
        assert len(seen) == 1
    finally:
        ustc.kernels.unregister(my_csc)
    for name in ("dia_spmv", "delta_spmv"):
        builtin = next(r for r in ustc.kernels.registered() if r.name == name)
        assert callable(builtin.fn.compile)
