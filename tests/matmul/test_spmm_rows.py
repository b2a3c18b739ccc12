"""SpMM of DCSR, row-sorted COO and BSR(2, 2) operands by the CSR route's row walk
(``routes.RowSpmmRoute``, ``kernels._spmm_rows``): the route planned and one-shot products take,
its fallbacks, and the row segments it keeps. Oracle: NumPy on the dense operands."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ustc
from ustc import formats as F
from ustc.kernels import _spmm_rows
from ustc.ops import routes, runtime

KINDS = {"dcsr": F.DCSR, "coo": F.COO(2), "bsr22": F.BSR(2, 2)}


@pytest.fixture
def every_size(monkeypatch):
    """Small operands take the route too (normally above ``runtime.SERIAL_WORK`` only)."""
    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)


def _dense(rng, shape, density, dtype, empty_rows=()):
    a = np.where(rng.random(shape) < density, rng.standard_normal(shape), 0).astype(dtype)
    a[list(empty_rows)] = 0
    return a


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


def _row_route(mm) -> bool:
    return isinstance(mm._route, routes.RowSpmmRoute)


def _snapshot(t):
    return {k: v.copy() for k, v in t._buffers.items()}, t.values.copy()


def _unchanged(t, snap):
    for k, v in snap[0].items():
        np.testing.assert_array_equal(t._buffers[k], v)
    np.testing.assert_array_equal(t.values, snap[1])


# one (kind, dtype) a case: each compiles its kernel once; the shapes share it
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", list(KINDS))
def test_matches_numpy_every_element_written(kind, dtype, rng, every_size):
    """Empty, 1-row-block, non-square and all-zero operands, rows left empty at both ends and in
    between (DCSR / COO: rows no segment names, zeroed by the chunk spanning them): the result
    equals NumPy's with ``out`` filled with NaN before, twice over; operands untouched."""
    cases = [((0, 6), 0.5, ()), ((2, 10), 0.5, ()), ((10, 2), 0.5, ()), ((24, 16), 0.3, (0, 1, 7, 8, 9, 23)),
             ((16, 30), 0.0, ()), ((40, 40), 0.05, range(0, 40, 3))]
    for shape, density, empty in cases:
        a = _dense(rng, shape, density, dtype, empty)
        A = ustc.Tensor.from_dense(a, KINDS[kind])
        b = rng.standard_normal((shape[1], 5)).astype(dtype)
        snap, b_before = _snapshot(A), b.copy()
        mm = ustc.Matmul(A, b).plan()
        assert _row_route(mm), (shape, mm.plan_info)
        for _ in range(2):
            out = np.full((shape[0], 5), np.nan, dtype)
            np.testing.assert_allclose(np.asarray(mm.execute(out=out)), a @ b, **_tol(dtype))
        _unchanged(A, snap)
        np.testing.assert_array_equal(b, b_before)


@pytest.mark.parametrize("kind", list(KINDS))
def test_alpha_beta_c_and_values_edited_in_place(kind, rng, every_size):
    a = _dense(rng, (20, 14), 0.3, np.float64, empty_rows=(3, 4))
    A = ustc.Tensor.from_dense(a, KINDS[kind])
    b, c = rng.standard_normal((14, 6)), rng.standard_normal((20, 6))
    mm = ustc.Matmul(A, b, c=c.copy(), alpha=0.5, beta=2.0).plan()
    assert _row_route(mm), mm.plan_info
    np.testing.assert_allclose(np.asarray(mm.execute(out=np.empty((20, 6)))), 0.5 * a @ b + 2.0 * c, rtol=1e-12)
    plain = ustc.Matmul(A, b).plan()
    plain.execute()
    A.values[...] *= -3          # the kept segments stay; the values are read at every execute
    np.testing.assert_allclose(np.asarray(plain.execute()), -3 * (a @ b), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(ustc.matmul(A, b)), -3 * (a @ b), rtol=1e-12)


def test_new_operands_and_layouts(rng, every_size):
    """``reset_operands`` with another COO remakes the segments; a Fortran-ordered ``b`` runs the
    generated kernel; float64 ``b`` against float32 values and integer values never take the route."""
    a1, a2 = _dense(rng, (18, 12), 0.3, np.float64), _dense(rng, (18, 12), 0.3, np.float64, (0, 17))
    A1, A2 = ustc.Tensor.from_dense(a1, F.COO(2)), ustc.Tensor.from_dense(a2, F.COO(2))
    b = rng.standard_normal((12, 4))
    mm = ustc.Matmul(A1, b).plan()
    np.testing.assert_allclose(np.asarray(mm.execute()), a1 @ b, rtol=1e-12)
    mm.reset_operands(a=A2)
    np.testing.assert_allclose(np.asarray(mm.execute()), a2 @ b, rtol=1e-12)
    mm.reset_operands(b=np.asfortranarray(2 * b))
    np.testing.assert_allclose(np.asarray(mm.execute()), a2 @ (2 * b), rtol=1e-12)
    A32 = ustc.Tensor.from_dense(a1.astype(np.float32), F.DCSR)
    assert not _row_route(ustc.Matmul(A32, b).plan())
    Ai = ustc.Tensor.from_dense((a1 * 8).astype(np.int64), F.BSR(2, 2))
    mi = ustc.Matmul(Ai, b.astype(np.int64)).plan()
    assert not _row_route(mi)
    np.testing.assert_array_equal(np.asarray(mi.execute()), (a1 * 8).astype(np.int64) @ b.astype(np.int64))


def test_untiled_bsr_and_rows_out_of_order_fall_back(rng, every_size):
    """BSR(2, 2) over an odd shape is not taken; a COO whose rows are out of order and an
    unvalidated DCSR with rows out of order are refused at the first execute and run the
    generated kernel (right results either way)."""
    b = rng.standard_normal((9, 3))
    a = _dense(rng, (7, 9), 0.4, np.float64)
    mm = ustc.Matmul(ustc.Tensor.from_dense(a, F.BSR(2, 2)), b).plan()
    assert not _row_route(mm)
    np.testing.assert_allclose(np.asarray(mm.execute()), a @ b, rtol=1e-12)
    rows, cols, vals = np.array([3, 0, 3, 1], np.int32), np.array([2, 1, 0, 8], np.int32), np.array([1., 2, 3, 4])
    dense = np.zeros((5, 9))
    np.add.at(dense, (rows, cols), vals)
    unordered = ustc.TensorFormat.parse("(i, j) -> (i : compressed(nonunique, nonordered), j : singleton)")
    coo = ustc.Tensor(unordered, (5, 9), {(0, "pos"): np.array([0, 4], np.int32), (0, "crd"): rows,
                                           (1, "crd"): cols}, vals)
    dcsr = ustc.Tensor(F.DCSR, (5, 9), {(0, "pos"): np.array([0, 3], np.int32), (0, "crd"): np.array([3, 0, 1], np.int32),
                                        (1, "pos"): np.array([0, 2, 3, 4], np.int32),
                                        (1, "crd"): np.array([0, 2, 1, 8], np.int32)}, np.array([3., 1, 2, 4]))
    for t in (coo, dcsr):
        mm = ustc.Matmul(t, b).plan()
        assert _row_route(mm), mm.plan_info
        np.testing.assert_allclose(np.asarray(mm.execute(out=np.full((5, 3), np.nan))), dense @ b, rtol=1e-12)
        assert mm._route._inner_ready    # the kernel refused these rows


def test_segments():
    pos0, crd0 = np.array([2, 9], np.int32), np.array([7, 7, 0, 0, 2, 2, 2, 5, 5], np.int32)
    rows, seg = _spmm_rows.coo_segments(pos0, crd0)
    np.testing.assert_array_equal(rows, [0, 2, 5])
    np.testing.assert_array_equal(seg, [2, 4, 7, 9])
    assert rows.dtype == crd0.dtype and seg.dtype == pos0.dtype
    assert _spmm_rows.coo_segments(np.array([0, 3], np.int32), np.array([1, 0, 2], np.int32)) is None
    empty = _spmm_rows.coo_segments(np.array([0, 0], np.int32), np.zeros(0, np.int32))
    assert len(empty[0]) == 0 and list(empty[1]) == [0]
    assert _spmm_rows.dcsr_segments(np.array([0, 2]), np.array([1, 1]), np.array([0, 1, 2])) is None
    with pytest.raises(ValueError, match="kind"):
        _spmm_rows.RowSpmm("csr")


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(list(KINDS)), half=st.tuples(st.integers(0, 12), st.integers(1, 12)),
       density=st.sampled_from([0.0, 0.05, 0.3, 1.0]), batch=st.integers(0, 9), seed=st.integers(0, 2**16))
def test_random_operands(kind, half, density, batch, seed):
    rng = np.random.default_rng(seed)
    shape = (2 * half[0], 2 * half[1])
    a = _dense(rng, shape, density, np.float64)
    A = ustc.Tensor.from_dense(a, KINDS[kind])
    b = rng.standard_normal((shape[1], batch))
    old, runtime.SERIAL_WORK = runtime.SERIAL_WORK, 0   # a fixture would not reset between examples
    try:
        mm = ustc.Matmul(A, b).plan()
        assert _row_route(mm), mm.plan_info
        np.testing.assert_allclose(np.asarray(mm.execute(out=np.full((shape[0], batch), np.nan))), a @ b,
                                   rtol=1e-12, atol=1e-12)
    finally:
        runtime.SERIAL_WORK = old
