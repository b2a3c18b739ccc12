"""Planned products whose operands go through CSR at every execute (``ops.routes``): SpGEMM on
DCSR, COO, BSR and DIA operands (``ViaRowsRoute``), SpMM on a BSR operand times a wide X
(``CsrOperandRoute``). Results equal NumPy's, operands are never written, the temporaries'
shared buffers never reach the user's result, and values changed in place are seen at the
next execute."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ustc import formats as F
from ustc.formats import NAMED
from ustc.ops import routes
from ustc.tensor import fastpaths_rows



def rand_dense(shape, dtype, density, seed=0):
    """Random entries (none zero) at about ``density`` of the places."""
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < density
    vals = rng.integers(1, 9, shape) * rng.choice([-1, 1], shape)
    if np.dtype(dtype).kind == "c":
        vals = vals + 1j * rng.integers(-3, 4, shape)
    return np.where(mask, vals, 0).astype(dtype)


def _kinds() -> dict:
    """The registry's 2-D formats that convert to CSR by the row kernels: name -> source kind."""
    out = {}
    for nf in NAMED:
        fmt = nf.format()
        kind = fastpaths_rows.source_kind(fmt, fmt.level_shape((4, 4))) if fmt.ndim == 2 else None
        if kind is not None:
            out[nf.name if not nf.example else str(fmt)] = kind
    return out


SOURCE_KIND = _kinds()
KINDS = list(SOURCE_KIND)


def _snapshot(t):
    return [b.copy() for b in t.buffers.values()], t.values.copy()


def _unchanged(t, snap):
    for b, old in zip(t.buffers.values(), snap[0]):
        np.testing.assert_array_equal(b, old)
    np.testing.assert_array_equal(t.values, snap[1])


def _no_shared(result, *operands):
    arrays = [*result.buffers.values(), result.values]
    for t in operands:
        for a in [*t.buffers.values(), t.values]:
            assert not any(np.shares_memory(a, r) for r in arrays)


DTYPES = [np.float64, np.float32, np.int64, np.complex128]   # test_dia_product's too (one compile each)


def _kinds_by_dtype() -> list:
    """Every kind on float64; the other dtypes (each a compile of its own) on one format of each
    route that is not the DIA product: through CSR (coo) and the BSR product (test_dia_product
    runs the DIA product in every dtype)."""
    picked = {}
    for fmt, kind in SOURCE_KIND.items():
        if kind in ("coo", "bsr"):
            picked.setdefault(kind, fmt)
    assert len(picked) == 2, SOURCE_KIND
    return [(fmt, np.float64) for fmt in KINDS] + [(fmt, dtype) for fmt in picked.values() for dtype in DTYPES[1:]]


@pytest.mark.parametrize("fmt,dtype", _kinds_by_dtype(), ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("shape", [(0, 0), (1, 9), (9, 1), (8, 8), (13, 10)], ids=str)
def test_spgemm_through_csr(fmt, shape, dtype):
    a = rand_dense(shape, dtype, 0.3, seed=1)
    b = rand_dense(shape[::-1], dtype, 0.3, seed=2)
    A, B = ustc.Tensor.from_dense(a, fmt), ustc.Tensor.from_dense(b, fmt)
    snaps = _snapshot(A), _snapshot(B)
    for left, right, want in ((A, B, a @ b), (A, A if shape[0] == shape[1] else B, None)):
        if want is None and left is not right:
            continue
        want = a @ a if want is None else want
        mm = ustc.Matmul(left, right).plan()
        kind = fastpaths_rows.source_kind(A.format, A.level_shape)
        own = {"diai": "DIA product", "diaj": "DIA product", "bsr": "BSR product"}  # no conversion
        assert own.get(kind, "to CSR at every execute") in mm.plan_info, mm.plan_info
        C = mm.execute()
        assert C.format == A.format
        np.testing.assert_allclose(C.to_dense(), want, rtol=1e-5)
        _no_shared(C, left, right)
        _unchanged(A, snaps[0]), _unchanged(B, snaps[1])


@pytest.mark.parametrize("fmt", ["DCSR", "COO"])
def test_spgemm_sees_values_changed_in_place(fmt):
    a = rand_dense((20, 20), np.float64, 0.2, seed=3)
    A = ustc.Tensor.from_dense(a, fmt)
    mm = ustc.Matmul(A, A).plan()
    C1 = mm.execute()
    A.values[...] *= 2   # the next execute's shared CSR temporary reads these
    C2 = mm.execute()
    np.testing.assert_allclose(C1.to_dense(), a @ a)
    np.testing.assert_allclose(C2.to_dense(), 4 * (a @ a))
    _no_shared(C1, C2)


@pytest.mark.parametrize("block", [(1, 1), (2, 2), (3, 2)])
@pytest.mark.parametrize("columns", [1, routes.CSR_OPERAND_COLUMNS - 1, routes.CSR_OPERAND_COLUMNS, 40])
def test_bsr_spmm_route_by_columns(block, columns):
    a = rand_dense((14, 11), np.float64, 0.3, seed=4)
    x = np.random.default_rng(5).standard_normal((11, columns))
    A = ustc.Tensor.from_dense(a, F.BSR(*block))
    snap = _snapshot(A)
    mm = ustc.Matmul(A, x).plan()
    via = "generated CSR kernel after converting a (" in mm.plan_info
    assert via == (columns >= routes.CSR_OPERAND_COLUMNS), mm.plan_info
    np.testing.assert_allclose(mm.execute(), a @ x)
    A.values[...] *= -1
    np.testing.assert_allclose(mm.execute(), -(a @ x))
    c = np.ones((14, columns))
    out = ustc.Matmul(A, x, c, alpha=2.0, beta=3.0).plan().execute()
    np.testing.assert_allclose(out, -2 * (a @ x) + 3)
    A.values[...] *= -1
    _unchanged(A, snap)


def test_from_csr_shares_the_dropped_csr():
    a = rand_dense((30, 25), np.float64, 0.2, seed=6)
    C = ustc.Tensor.from_dense(a, F.CSR)
    for fmt in (F.DCSR, F.COO(2)):
        got = fastpaths_rows.from_csr(C, fmt)
        assert got.format == fmt
        np.testing.assert_array_equal(got.to_dense(), a)
        assert np.shares_memory(got.values, C.values) and np.shares_memory(got.crd(1), C.crd(1))
        got.validate()
    assert fastpaths_rows.from_csr(C, F.CSC) is None and fastpaths_rows.from_csr(C, F.BSR(2, 2)) is None
    empty = ustc.Tensor.from_dense(np.zeros((0, 4)), F.CSR)
    assert fastpaths_rows.from_csr(empty, F.DCSR).nse == 0


DIAS = [f for f in KINDS if f.startswith("DIA")]


def _dia_pairs() -> list:
    """Every (A, B) pair of the registry's DIA formats on float64; each other dtype (a kernel
    and its DIA conversions compiled apiece) on one pair, A and B in one format, the formats in
    turn (the product kernel takes the orientation as an argument: one compile per dtype)."""
    out = [(fa, fb, np.float64) for fa in DIAS for fb in DIAS]
    return out + [(DIAS[i % len(DIAS)],) * 2 + (dtype,) for i, dtype in enumerate(DTYPES[1:])]


@pytest.mark.parametrize("fa,fb,dtype", _dia_pairs(), ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("mkn", [(0, 3, 4), (3, 0, 4), (1, 1, 1), (1, 6, 1), (7, 9, 5), (9, 7, 11), (40, 40, 40)], ids=str)
def test_dia_product(fa, fb, mkn, dtype):
    m, k, n = mkn
    a, b = rand_dense((m, k), dtype, 0.3, seed=m + k), rand_dense((k, n), dtype, 0.3, seed=n)
    A, B = ustc.Tensor.from_dense(a, fa), ustc.Tensor.from_dense(b, fb)
    snaps = _snapshot(A), _snapshot(B)
    mm = ustc.Matmul(A, B).plan()
    assert "DIA product" in mm.plan_info, mm.plan_info
    C = mm.execute()
    assert C.format == A.format
    C.validate()
    np.testing.assert_allclose(C.to_dense(), a @ b, rtol=1e-5)
    want = ustc.Tensor.from_dense(a @ b, fa)   # the same diagonals a conversion of the product keeps
    np.testing.assert_array_equal(C.buffers[(0, "crd")], want.buffers[(0, "crd")])
    _no_shared(C, A, B)
    _unchanged(A, snaps[0]), _unchanged(B, snaps[1])
    A.values[...] *= 2
    np.testing.assert_allclose(mm.execute().to_dense(), 2 * (a @ b), rtol=1e-5)
    np.testing.assert_allclose(ustc.Matmul(A, B, alpha=3).plan().execute().to_dense(), 6 * (a @ b), rtol=1e-5)


def test_dia_product_cancelling_diagonal_is_dropped():
    """A diagonal of C whose products cancel everywhere is not stored."""
    a = np.diag(np.ones(5)) + np.diag(np.ones(4), 1)
    b = np.diag(np.ones(5)) - np.diag(np.ones(4), 1)   # (a @ b) has offsets 0 and 2; offset 1 cancels
    A, B = ustc.Tensor.from_dense(a, "DIAI"), ustc.Tensor.from_dense(b, "DIAI")
    C = ustc.matmul(A, B)
    np.testing.assert_allclose(C.to_dense(), a @ b)
    assert C.buffers[(0, "crd")].tolist() == [0, 2]
    assert ustc.Matmul(A, B, options={"out_format": "CSR"}).plan().execute().format == F.CSR
