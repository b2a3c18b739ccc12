"""The element-wise / einsum plan cache (``plan_cache.ELEMENTWISE``) and the one-shot matmul memo.

A repeated ``A + B``, ``A - B``, ``A * B``, ufunc, ``-A`` or ``ustc.einsum`` call with operands of
the same kinds takes its plan from the cache and only binds and runs. Every case runs twice or
more (a miss, then hits) and compares both against a dense NumPy oracle and against the
runtime's own unplanned execution of the same statement (same format, entries and dtype); the
operands are changed between calls (values in place, new patterns, other shapes) and must never
be modified by the calls.
"""

from __future__ import annotations

import dataclasses
import gc
import threading
import weakref

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import ustc
from op_helpers import (FAMILIES_2D, NAMED_2D, assert_matches, assert_unchanged, named_params, rotated_dtypes, snapshot,
                        sparse)
from ustc import Tensor
from ustc.codegen import notation as nt
from ustc.ops import elementwise, plan_cache, runtime
from ustc.ops import matmul as one_shot
from ustc.ops.elementwise import ElementwiseKey, MergePlan, union_format
from ustc.ops.operands import OperandKind, kind
from ustc.ops.plan_cache import ELEMENTWISE, DirectCall, KernelPlan
from ustc.tensor import fastpaths, kernels

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
SHAPES = ((0, 0), (0, 4), (4, 0), (1, 9), (9, 1), (6, 4), (5, 7))


@pytest.fixture(autouse=True)
def fresh_caches():
    plan_cache.clear()
    yield
    plan_cache.set_maxsize(64)
    plan_cache.clear()


def _reference(A: Tensor, B: Tensor, op: str):
    """``A op B`` through the runtime without any plan (the statement the operators generate)."""
    idx = ("i", "j")
    node = {"+": nt.Add, "-": nt.Sub, "*": nt.Mul}[op]
    program = nt.Program((nt.Statement(nt.Access("C", idx), node(nt.Access("A", idx), nt.Access("B", idx))),))
    out = A.format if op == "*" else union_format(A.format, B.format)
    return runtime.execute(program, {"A": A, "B": B, "C": out})["C"]


def _same_entries(got: Tensor, want: Tensor) -> None:
    assert got.format == want.format and got.shape == want.shape and got.dtype == want.dtype
    (gc_, gv), (wc, wv) = got.entries(), want.entries()
    order_g, order_w = np.lexsort(gc_[::-1]), np.lexsort(wc[::-1])
    for a, b in zip(gc_, wc):
        np.testing.assert_array_equal(a[order_g], b[order_w])
    np.testing.assert_array_equal(gv[order_g], wv[order_w])


def _hits() -> int:
    return ELEMENTWISE.stats()["hits"]


# -- operators over the registry -------------------------------------------------------------


def _registry_ops() -> list:
    """Every registry format with the operators it runs here: all three for the families (their
    kernels are test_dtypes_and_edge_shapes' float64 ones), ``-`` for the others (each operator is
    a kernel per format, and test_elementwise.py::test_add_and_mul_mixed_formats runs + and * on
    every format; the plan cache keys and hits the same way whichever operator it is)."""
    return [pytest.param(fmt, tuple(OPS) if name in FAMILIES_2D else ("-",),
                         id=name if name in FAMILIES_2D else f"{name}-sub") for name, fmt in NAMED_2D.items()]


@pytest.mark.parametrize("fmt, ops", _registry_ops())
def test_repeated_operators_every_registry_format(fmt, ops):
    """Same-format pairs: the second call of each operator is a hit; both calls equal NumPy and
    the unplanned runtime; new values and a new pattern of the same kinds still hit and are right."""
    if fmt.all_dense:
        pytest.skip("all-dense Tensors are dense operands (NumPy's operator)")
    A, B = sparse(fmt, (6, 5), seed=1), sparse(fmt, (6, 5), seed=2)
    before = snapshot(A, B)
    for op in ops:
        f = OPS[op]
        first = f(A, B)
        hits = _hits()
        second = f(A, B)
        assert _hits() == hits + 1, "the repeated call missed the plan cache"
        expected = f(A.to_dense(), B.to_dense())
        for C in (first, second):
            assert_matches(C, expected)
            C.validate()
        _same_entries(second, _reference(A, B, op))
        A2, B2 = sparse(fmt, (6, 5), seed=3, density=0.7), sparse(fmt, (6, 5), seed=4, density=0.2)
        if kind(A2) == kind(A) and kind(B2) == kind(B):         # a new pattern of the same kinds: a hit
            hits = _hits()
            assert_matches(f(A2, B2), f(A2.to_dense(), B2.to_dense()))
            assert _hits() == hits + 1
    assert_unchanged([A, B], before)


@pytest.mark.parametrize("fmt, dtype", rotated_dtypes(offset=0))
def test_dtypes_and_edge_shapes(fmt, dtype):
    """float64 (its kernels are those of the registry-wide test above) and one other dtype per
    family, rotated (test_elementwise.py::test_add_other_dtypes takes the others); every edge
    shape, all-zero or not, is a plan of its own but no new kernel."""
    for dtype in (np.float64, dtype):
        for shape in SHAPES:
            for zero in (False, True):
                A = sparse(fmt, shape, dtype, seed=5, zero=zero)
                B = sparse(fmt, shape, dtype, seed=6)
                for op, f in OPS.items():
                    for _ in range(2):
                        C = f(A, B)
                        assert C.dtype == np.dtype(dtype)
                        assert C.format == (fmt if op == "*" else union_format(fmt, fmt))
                        C.validate()
                        assert_matches(C, f(A.to_dense(), B.to_dense()), dtype)


@pytest.mark.parametrize("fmt", named_params({n: NAMED_2D[n] for n in FAMILIES_2D}))
def test_cancellations_keep_the_unplanned_semantics(fmt):
    A = sparse(fmt, (7, 6), seed=8)
    negA = -A
    for _ in range(2):
        C = A + negA
        _same_entries(C, _reference(A, negA, "+"))
        assert_matches(C, np.zeros((7, 6)))
        D = A - A.copy()                                    # another object: nothing short-circuits
        _same_entries(D, _reference(A, A, "-"))
    if fastpaths.family(A.format) is not None and fastpaths.family(A.format).kind == "csr":
        assert (A + negA).nse == 0 and (A - A.copy()).nse == 0     # exact zeros are not stored


def test_values_changed_in_place_between_calls():
    """Zero-copy SciPy views: changing the SciPy arrays changes the next result (nothing cached
    but the plan)."""
    S = sp.random(30, 20, 0.2, format="csr", random_state=1)
    T = sp.random(30, 20, 0.2, format="csr", random_state=2)
    A, B = Tensor.from_package(S), Tensor.from_package(T)
    for op, f in OPS.items():
        f(A, B)
        S.data *= 3.0
        T.data[::2] = -T.data[::2]
        assert_matches(f(A, B), f(S.toarray(), T.toarray()))
        assert_matches(A * 2.0, 2.0 * S.toarray())
        assert_matches(A + np.ones((30, 20)), S.toarray() + 1)


def test_different_shapes_of_one_format_plan_separately():
    for shape in ((3, 4), (4, 3), (40, 3), (3, 4)):
        A, B = sparse(NAMED_2D["CSR"], shape, seed=1), sparse(NAMED_2D["CSR"], shape, seed=2)
        for op, f in OPS.items():
            assert_matches(f(A, B), f(A.to_dense(), B.to_dense()))
    keys = [k for k in ELEMENTWISE._plans if isinstance(k, ElementwiseKey)]
    assert {k.a.shape for k in keys} == {(3, 4), (4, 3), (40, 3)}


def test_scalar_array_broadcast_negative_and_mixed_formats_hit():
    A = sparse(NAMED_2D["COO"], (5, 4), seed=3)
    B = sparse(NAMED_2D["DCSR"], (5, 4), seed=4)
    a, b = A.to_dense(), B.to_dense()
    x, row = np.arange(20.0).reshape(5, 4), np.arange(1.0, 5.0)
    calls = [(lambda: A * 2.5, a * 2.5), (lambda: 3 - A, 3 - a), (lambda: A + x, a + x), (lambda: x - A, x - a),
             (lambda: A * row, a * row), (lambda: -A, -a), (lambda: A + B, a + b), (lambda: B * A, b * a),
             (lambda: np.multiply(A, B), a * b), (lambda: np.subtract(x, A), x - a)]
    for call, expected in calls:
        assert_matches(call(), expected)
        hits = _hits()
        assert_matches(call(), expected)
        assert _hits() == hits + 1


def test_scipy_operands_and_reflected_difference():
    S = sp.random(8, 9, 0.3, format="csr", random_state=3)
    A = sparse(NAMED_2D["CSR"], (8, 9), seed=9)
    for _ in range(2):
        assert_matches(A - S, A.to_dense() - S.toarray())
        assert_matches(elementwise.binary(A, Tensor.from_package(S), "-", reflected=True), S.toarray() - A.to_dense())


def test_csr_and_csc_pairs_take_the_merge_kernels_and_csr_csc_does_not():
    A, B = sparse(NAMED_2D["CSC"], (6, 6), seed=1), sparse(NAMED_2D["CSC"], (6, 6), seed=2)
    A + B
    assert any(isinstance(p, MergePlan) for p in ELEMENTWISE._plans.values())
    plan_cache.clear()
    R = sparse(NAMED_2D["CSR"], (6, 6), seed=3)
    assert_matches(R + A, R.to_dense() + A.to_dense())
    assert not any(isinstance(p, MergePlan) for p in ELEMENTWISE._plans.values())


# -- the cache itself ------------------------------------------------------------------------


def test_bounded_lru_and_disabled_cache():
    plan_cache.set_maxsize(2)
    for n in (3, 4, 5, 6):
        A = sparse(NAMED_2D["CSR"], (n, n), seed=n)
        assert_matches(A + A, 2 * A.to_dense())
    assert ELEMENTWISE.stats()["size"] == 2
    plan_cache.set_maxsize(0)
    A = sparse(NAMED_2D["COO"], (4, 4), seed=1)
    for _ in range(2):
        assert_matches(A * A, A.to_dense() ** 2)
        assert_matches(ustc.einsum("ij,j->i", A, np.ones(4)), A.to_dense().sum(1))
    assert ELEMENTWISE.stats()["size"] == 0
    with pytest.raises(ValueError):
        ELEMENTWISE.set_maxsize(-1)


def test_plans_hold_no_operands():
    for fmt in ("CSR", "COO"):
        A = sparse(NAMED_2D[fmt], (6, 5), seed=1)
        B = sparse(NAMED_2D[fmt], (6, 5), seed=2)
        x = np.ones(5)
        A + B, A * B, A * 2.0, ustc.einsum("ij,j->i", A, x), ustc.matmul(A, x)
        refs = [weakref.ref(t) for t in (A, B)] + [weakref.ref(b) for b in A._buffers.values()]
        del A, B
        gc.collect()
        assert all(r() is None for r in refs)


def test_keys_and_plans_are_frozen_hashable_and_validated():
    A = sparse(NAMED_2D["CSR"], (4, 4), seed=1)
    A + A, A + 1.0
    for key, plan in ELEMENTWISE._plans.items():
        hash(key), hash(plan)
        with pytest.raises(dataclasses.FrozenInstanceError):
            key.op = "*"
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(plan, dataclasses.fields(plan)[0].name, None)
    merge = next(p for p in ELEMENTWISE._plans.values() if isinstance(p, MergePlan))
    with pytest.raises(ValueError):
        MergePlan(dataclasses.replace(merge.merge, op=kernels.ADD), swap=True)
    kernel = next(p for p in ELEMENTWISE._plans.values() if isinstance(p, KernelPlan))
    with pytest.raises(ValueError):
        KernelPlan(kernel.program, runtime.prepare(kernel.program, {"A": A, "s": 1.0, "C": np.zeros((4, 4))}, None))
    with pytest.raises(ValueError):
        DirectCall(None, None, (), (("bogus",),), (1,), np.dtype(float), None)
    assert OperandKind("x", (1,), "float64") == OperandKind("x", (1,), "float64")


def test_threads_share_plans():
    S = sp.random(200, 150, 0.05, format="csr", random_state=5)
    A, B = Tensor.from_package(S), sparse(NAMED_2D["CSR"], (200, 150), seed=6)
    expected = {op: f(A.to_dense(), B.to_dense()) for op, f in OPS.items()}
    errors = []

    def work():
        try:
            for _ in range(20):
                for op, f in OPS.items():
                    np.testing.assert_allclose(f(A, B).to_dense(), expected[op], rtol=1e-12)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["CSR", "CSC", "COO"]), st.sampled_from(sorted(OPS)), st.integers(0, 7), st.integers(0, 7),
       st.floats(0, 1), st.floats(0, 1), st.integers(0, 2**16))
def test_property_planned_equals_unplanned(fmt, op, rows, cols, da, db, seed):
    A = sparse(NAMED_2D[fmt], (rows, cols), seed=seed, density=da, zero=da < 0.1)
    B = sparse(NAMED_2D[fmt], (rows, cols), seed=seed + 1, density=db)
    f = OPS[op]
    for _ in range(2):
        _same_entries(f(A, B), _reference(A, B, op))


# -- einsum ----------------------------------------------------------------------------------


def test_einsum_repeats_hit_and_see_new_values():
    A = sparse(NAMED_2D["CSR"], (6, 5), seed=1)
    B = sparse(NAMED_2D["COO"], (6, 5), seed=2)
    x = np.arange(5.0)
    cases = [("ij,j->i", (A, x), {}), ("ij,ij->ij", (A, B), {"out_format": "CSR"}),
             ("ij,ij->ji", (A, B), {"out_format": "CSC"}), ("ij,j->i", (A, x), {"semiring": "min_plus"})]
    for subscripts, operands, kw in cases:
        want = ustc.einsum(subscripts, *operands, **kw)
        hits = _hits()
        got = ustc.einsum(subscripts, *operands, **kw)
        assert _hits() == hits + 1
        np.testing.assert_allclose(dense(got), dense(want))
    before = dense(ustc.einsum("ij,j->i", A, x))
    A._values[...] *= 2                                    # values changed in place
    np.testing.assert_allclose(ustc.einsum("ij,j->i", A, x), 2 * before)
    np.testing.assert_allclose(ustc.einsum("ij,j->i", A, 2 * x), 4 * before)


def test_an_einsum_copy_is_a_conversion_not_a_plan():
    """``"ij->ji"`` into a format (one operand, no semiring or functions) is ``Tensor.convert`` of
    the operand's transposed view: no plan is made or hit."""
    A = sparse(NAMED_2D["CSR"], (6, 5), seed=1)
    size, hits = ELEMENTWISE.stats()["size"], _hits()
    for _ in range(2):
        got = ustc.einsum("ij->ji", A, out_format="CSC")
        np.testing.assert_allclose(got.to_dense(), A.to_dense().T)
    assert ELEMENTWISE.stats()["size"] == size and _hits() == hits


def test_einsum_with_a_process_local_function_is_not_cached():
    A = sparse(NAMED_2D["CSR"], (4, 4), seed=1)
    size = ELEMENTWISE.stats()["size"]
    scale = np.array([2.0])
    local = lambda v: v * scale[0]  # noqa: E731 - a closure over an array: no stable key
    for _ in range(2):
        np.testing.assert_allclose(ustc.einsum("ij->ij", A, out_format="CSR", epilog=local).to_dense(),
                                   2 * A.to_dense())
    assert ELEMENTWISE.stats()["size"] == size


def dense(x):
    return x.to_dense() if isinstance(x, Tensor) else np.asarray(x)


# -- the one-shot matmul memo ----------------------------------------------------------------


def test_one_shot_matmul_repeat_hits_and_sees_changes():
    S = sp.random(40, 30, 0.2, format="csr", random_state=1)
    A = Tensor.from_package(S)
    x = np.arange(30.0)
    np.testing.assert_allclose(ustc.matmul(A, x), S @ x)
    hits = plan_cache.stats()["hits"]
    for k in range(3):
        y = np.full(30, float(k))
        got = ustc.matmul(A, y)
        assert got is not ustc.matmul(A, y)                 # a fresh output every call
        np.testing.assert_allclose(got, S @ y)
    assert plan_cache.stats()["hits"] == hits + 6
    S.data[:] = -S.data                                     # values changed in place
    np.testing.assert_allclose(ustc.matmul(A, x), S @ x)
    np.testing.assert_allclose(ustc.matmul(A, x.astype(np.float32)), S @ x.astype(np.float32), rtol=1e-5)
    np.testing.assert_allclose(ustc.matmul(A, np.ones((30, 2))), S @ np.ones((30, 2)))
    np.testing.assert_allclose(ustc.matmul(A, x, alpha=2), 2 * (S @ x))


def test_one_shot_matmul_repeat_respects_cache_clear_and_safety():
    A = sparse(NAMED_2D["CSR"], (5, 5), seed=1)
    x = np.ones(5)
    ustc.matmul(A, x)
    assert one_shot._REPEATS
    plan_cache.clear()
    misses = plan_cache.stats()["misses"]
    np.testing.assert_allclose(ustc.matmul(A, x), A.to_dense() @ x)
    assert plan_cache.stats()["misses"] == misses + 1       # a cleared cache plans again
    plan_cache.set_maxsize(0)
    np.testing.assert_allclose(ustc.matmul(A, x), A.to_dense() @ x)
    plan_cache.set_maxsize(64)
    ustc.matmul(A, x)
    bad = A._buffers[(1, "crd")].copy()
    bad[0] = 10**6                                          # an out-of-range column in a new buffer
    A._buffers[(1, "crd")] = bad
    with pytest.raises(ustc.StorageError):
        ustc.matmul(A, x)


def test_one_shot_matmul_results_of_a_shared_layout():
    """Merge results share their plan's layout object: each is its own operand."""
    A, B = sparse(NAMED_2D["CSR"], (6, 6), seed=1), sparse(NAMED_2D["CSR"], (6, 6), seed=2)
    x = np.arange(6.0)
    E, F = sparse(NAMED_2D["CSR"], (6, 6), seed=3, density=0.9), sparse(NAMED_2D["CSR"], (6, 6), seed=4)
    C, D = A + B, E + F
    assert C._layout is D._layout and C.nse != D.nse
    for _ in range(2):
        np.testing.assert_allclose(ustc.matmul(C, x), (A.to_dense() + B.to_dense()) @ x)
        np.testing.assert_allclose(ustc.matmul(D, x), (E.to_dense() + F.to_dense()) @ x)


# -- binary ufuncs of two tensors --------------------------------------------------------------

UFUNCS = (np.maximum, np.minimum, np.greater, np.not_equal, np.hypot, np.logical_xor, np.copysign)


@pytest.mark.parametrize("dtype", (np.float64, np.int64, np.bool_))
@pytest.mark.parametrize("fmt", ("CSR", "CSC", "COO"))
def test_binary_ufuncs_of_two_tensors(fmt, dtype):
    for shape in ((0, 3), (1, 7), (6, 5)):
        A = sparse(NAMED_2D[fmt], shape, seed=1, density=0.5).astype(dtype)
        B = sparse(NAMED_2D[fmt], shape, seed=2, density=0.5).astype(dtype)
        before = snapshot(A, B)
        for f in UFUNCS:
            with np.errstate(all="ignore"):
                expected = f(A.to_dense(), B.to_dense())
            for _ in range(2):
                C = f(A, B)
                assert C.format == A.format and C.dtype == expected.dtype
                np.testing.assert_array_equal(C.to_dense(), expected)
                assert np.all(C.entries()[1] != 0)
                C.validate()
        assert_unchanged([A, B], before)


def test_binary_ufunc_plans_hit_and_key_on_the_ufunc():
    A, B = sparse(NAMED_2D["CSR"], (5, 5), seed=1), sparse(NAMED_2D["CSR"], (5, 5), seed=2)
    np.maximum(A, B)
    hits = _hits()
    np.testing.assert_array_equal(np.maximum(A, B).to_dense(), np.maximum(A.to_dense(), B.to_dense()))
    np.testing.assert_array_equal(np.minimum(A, B).to_dense(), np.minimum(A.to_dense(), B.to_dense()))
    assert _hits() == hits + 1
    with pytest.raises(ustc.UnsupportedOperation):
        np.power(A, B)                                          # 0 ** 0 = 1: refused, as before
