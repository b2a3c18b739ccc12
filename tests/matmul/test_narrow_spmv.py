"""A planned CSR SpMV executed again reads its column indices from a 16-bit copy
(``routes.NarrowColumnsRoute``, ``kernels._narrow_spmv``): uint16 columns for at most 65,536
columns, else int16 offsets from the diagonal where they fit, the same kernel on the operand's
own int32 / int64 indices otherwise. Oracle: SciPy on the operands' current values and structure."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc.kernels import _narrow_spmv
from ustc.ops import routes, runtime
from matmul_helpers import named_2d, random_dense, random_vector, sparse, tol


@pytest.fixture
def every_size(monkeypatch):
    """Small operands take the route too (normally above ``runtime.SERIAL_WORK`` only)."""
    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)


def _narrow(mm):
    route = mm._route
    return route._narrow if isinstance(route, routes.NarrowColumnsRoute) else None


def _csr(rng, shape, density=0.3, dtype=np.float64, index=np.int32):
    a = sp.csr_array(random_dense(rng, shape, density, dtype))
    a.indices, a.indptr = a.indices.astype(index), a.indptr.astype(index)
    return a


def _banded(n, reach, rng, dtype=np.float64):
    """n x n with entries on offsets 0, +-1 and +-reach (a stencil-like band)."""
    offsets = [o for o in (0, 1, -1, reach, -reach) if abs(o) < n]
    diags = [rng.standard_normal(n - abs(o)).astype(dtype) for o in offsets]
    a = sp.diags_array(diags, offsets=offsets, shape=(n, n), format="csr")
    a.indices, a.indptr = a.indices.astype(np.int32), a.indptr.astype(np.int32)
    return a


def _run(mm, times=3):
    return [np.array(mm.execute()) for _ in range(times)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.int64])
@pytest.mark.parametrize("shape", [(40, 30), (30, 40), (1, 50), (50, 1), (0, 7), (7, 0), (0, 0), (33, 33)])
def test_absolute_columns_match_scipy(shape, dtype, rng, every_size):
    a = _csr(rng, shape, dtype=np.float64)
    a.data = (a.data * 10).astype(dtype) if np.dtype(dtype).kind in "iu" else a.data.astype(dtype)
    x = random_vector(rng, shape[1], np.float64 if np.dtype(dtype).kind in "iu" else dtype)
    if np.dtype(dtype).kind in "iu":
        x = np.round(x * 10).astype(dtype)
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
    for y in _run(mm):
        np.testing.assert_allclose(y, a @ x, **tol(dtype))
    narrow = _narrow(mm)
    if shape[0] > 0:
        assert narrow is not None and narrow.off.dtype == np.uint16 and narrow.scale == 0


def test_all_zero_and_empty_rows(rng, every_size):
    a = sp.csr_array((np.zeros(0), np.zeros(0, np.int32), np.zeros(21, np.int32)), shape=(20, 10))
    x = random_vector(rng, 10)
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
    for y in _run(mm):
        assert np.array_equal(y, np.zeros(20))
    assert _narrow(mm) is not None
    # explicit zeros and a few empty rows between full ones
    b = _csr(rng, (20, 10), density=0.5)
    b.data[::3] = 0.0
    mm = ustc.Matmul(ustc.Tensor.from_package(b), x).plan()
    for y in _run(mm):
        np.testing.assert_allclose(y, b @ x, **tol(np.float64))


@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_diagonal_offsets_for_a_band(index, rng, every_size, monkeypatch):
    monkeypatch.setattr(_narrow_spmv, "ABSOLUTE_COLUMNS", 16)   # force offsets from the diagonal
    a = _banded(300, 40, rng)
    a.indices, a.indptr = a.indices.astype(index), a.indptr.astype(index)
    x = random_vector(rng, 300)
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
    for y in _run(mm):
        np.testing.assert_allclose(y, a @ x, **tol(np.float64))
    narrow = _narrow(mm)
    assert narrow.off.dtype == np.int16 and narrow.scale == 1
    assert int(np.abs(narrow.off.astype(np.int64)).max()) == 40


def test_offsets_at_the_int16_limits(rng):
    """Offsets 32,767 and -32,768 from the diagonal fit int16; one further either way refuses."""
    n = 70_000
    x = random_vector(rng, n)
    cases = {((0, 32_767), (32_768, 0)): True, ((0, 32_768),): False, ((32_769, 0),): False}
    for entries, fits in cases.items():
        rows, cols = (np.array(v) for v in zip(*entries, (n - 1, n - 1)))
        a = sp.csr_array((np.arange(1.0, len(rows) + 1), (rows, cols)), shape=(n, n))
        a.indices, a.indptr = a.indices.astype(np.int32), a.indptr.astype(np.int32)
        narrow = _narrow_spmv.NarrowColumns.of(a.indptr, a.indices, n, 2)
        assert (narrow is not None) == fits
        if fits:
            assert narrow.scale == 1 and narrow.off.dtype == np.int16
            y = np.full(n, np.nan)
            narrow.spmv(y, a.data, x, 1.0, False)
            np.testing.assert_allclose(y, a @ x)


def test_long_rows_keep_row_pointers(rng, every_size):
    """A row of more than 255 entries: row pointers are copied instead of uint8 lengths."""
    a = sp.lil_array((40, 600))
    a[3, :] = rng.standard_normal(600)
    a[7, ::2] = 1.0
    a = sp.csr_array(a)
    a.indices, a.indptr = a.indices.astype(np.int32), a.indptr.astype(np.int32)
    x = random_vector(rng, 600)
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
    for y in _run(mm):
        np.testing.assert_allclose(y, a @ x, **tol(np.float64))
    narrow = _narrow(mm)
    assert narrow.lens is None and narrow.pos is not None
    short = _csr(rng, (40, 600), density=0.05)
    mm = ustc.Matmul(ustc.Tensor.from_package(short), x).plan()
    for y in _run(mm):
        np.testing.assert_allclose(y, short @ x, **tol(np.float64))
    assert _narrow(mm).lens is not None and _narrow(mm).pos is None


def test_wide_band_reads_its_own_indices(rng, every_size, monkeypatch):
    monkeypatch.setattr(_narrow_spmv, "ABSOLUTE_COLUMNS", 16)
    monkeypatch.setattr(_narrow_spmv, "DIAGONAL_REACH", 20)     # a band of 40 does not fit 16 bits
    a = _banded(300, 40, rng)
    x = random_vector(rng, 300)
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
    for y in _run(mm, 4):
        np.testing.assert_allclose(y, a @ x, **tol(np.float64))
    narrow = _narrow(mm)
    assert narrow.own and narrow.scale == 0 and narrow.off.base is a.indices and narrow.pos is a.indptr


@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_own_indices_long_rows_alpha_and_c(index, rng, every_size, monkeypatch):
    """Rows far past 255 entries and 16 columns (gathers in vectors and a scalar tail), alpha and
    beta * c (c is the output: updated in place), values and x changed in place between executes;
    nothing copied, the index buffers unchanged."""
    monkeypatch.setattr(_narrow_spmv, "ABSOLUTE_COLUMNS", 16)
    monkeypatch.setattr(_narrow_spmv, "DIAGONAL_REACH", 20)
    a = _csr(rng, (23, 700), density=0.5, index=index)
    a.data[a.indptr[3]:a.indptr[4]] = 0.0                   # explicit zeros stay harmless
    x, c = random_vector(rng, 700), random_vector(rng, 23)
    keep = (a.indices.copy(), a.indptr.copy())
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x, c, alpha=-1.5, beta=0.5).plan()
    for step in range(5):
        if step == 3:
            a.data *= 3
            x[:] = random_vector(rng, 700)
        expected = -1.5 * (a @ x) + 0.5 * c
        np.testing.assert_allclose(mm.execute(), expected, **tol(np.float64))
    assert _narrow(mm).own and _narrow(mm).off.dtype == index
    for k, b in zip(keep, (a.indices, a.indptr)):
        np.testing.assert_array_equal(k, b)


@pytest.mark.parametrize("fmt", named_2d())
def test_registry_formats(fmt, rng, every_size):
    """Every named format's SpMV agrees with SciPy; only CSR takes the 16-bit copy."""
    a = random_dense(rng, (24, 18))
    A = sparse(a, fmt)
    x = random_vector(rng, 18)
    mm = ustc.Matmul(A, x).plan()
    for y in _run(mm):
        np.testing.assert_allclose(y, A.to_dense() @ x, **tol(np.float64))
    if _narrow(mm) is not None:
        assert ustc.tensor.interop.plain_format(A.format) == ustc.formats.CSR


def test_alpha_beta_and_c(rng, every_size):
    a = _csr(rng, (25, 25))
    x, c = random_vector(rng, 25), random_vector(rng, 25)
    A = ustc.Tensor.from_package(a)
    acc = c.copy()
    mm = ustc.Matmul(A, x, c=acc, alpha=2.5, beta=0.5).plan()
    for _ in range(3):                              # c is updated in place at every execute
        before = acc.copy()
        np.testing.assert_allclose(mm.execute(), 2.5 * (a @ x) + 0.5 * before, **tol(np.float64))
    assert _narrow(mm) is not None
    out = np.empty(25)
    for _ in range(3):                              # with out: c only read
        mm.execute(out=out)
        np.testing.assert_allclose(out, 2.5 * (a @ x) + 0.5 * acc, **tol(np.float64))
    acc = c.copy()
    mm = ustc.Matmul(A, x, c=acc, alpha=-1.0).plan()
    expect = c.copy()
    for _ in range(3):
        mm.execute()
        expect = expect - a @ x
        np.testing.assert_allclose(acc, expect, **tol(np.float64))
    assert _narrow(mm) is not None


def test_values_and_x_changed_in_place_are_seen(rng, every_size):
    a = _csr(rng, (30, 20))
    A = ustc.Tensor.from_package(a)
    x = random_vector(rng, 20)
    mm = ustc.Matmul(A, x).plan()
    for _ in range(4):
        np.testing.assert_allclose(mm.execute(), a @ x, **tol(np.float64))
        a.data *= 1.5
        x[...] = random_vector(rng, 20)
    assert _narrow(mm) is not None


def test_structure_changed_in_place_is_refreshed(rng, every_size):
    """Columns rewritten in place (the sample sees them), then a single entry moved and the operand
    given again through reset_operands: the copy is made again each time."""
    a = _csr(rng, (40, 30), density=0.5)
    A = ustc.Tensor.from_package(a)
    x = random_vector(rng, 30)
    mm = ustc.Matmul(A, x).plan()
    _run(mm)
    first = _narrow(mm)
    assert first is not None
    a.indices[:] = (a.indices + 7) % 30          # every column moves (rows unsorted: SpMV does not care)
    for y in _run(mm):
        np.testing.assert_allclose(y, a @ x, **tol(np.float64))
    assert _narrow(mm) is not None and _narrow(mm) is not first
    second = _narrow(mm)
    p = int(a.indptr[5])
    a.indices[p] = (a.indices[p] + 1) % 30       # one entry: announced by reset_operands
    mm.reset_operands(a=A)
    for y in _run(mm):
        np.testing.assert_allclose(y, a @ x, **tol(np.float64))
    assert _narrow(mm) is not None and _narrow(mm) is not second


def test_new_buffers_and_new_operand(rng, every_size, monkeypatch):
    monkeypatch.setattr(_narrow_spmv, "ABSOLUTE_COLUMNS", 16)
    a = _banded(200, 10, rng)
    A = ustc.Tensor.from_package(a)
    x = random_vector(rng, 200)
    mm = ustc.Matmul(A, x).plan()
    _run(mm)
    assert _narrow(mm) is not None
    wide = _banded(200, 150, rng)                 # same shape, a band the int16 offsets still fit
    mm.reset_operands(a=ustc.Tensor.from_package(wide))
    for y in _run(mm):
        np.testing.assert_allclose(y, wide @ x, **tol(np.float64))
    monkeypatch.setattr(_narrow_spmv, "DIAGONAL_REACH", 100)   # now it does not: its own indices
    mm.reset_operands(a=ustc.Tensor.from_package(_banded(200, 150, rng)))
    ref = mm._raw[0].to_dense() @ x
    for y in _run(mm):
        np.testing.assert_allclose(y, ref, **tol(np.float64))
    assert _narrow(mm).own


def test_one_shot_calls_keep_nothing(rng, every_size):
    a = _csr(rng, (30, 30))
    A = ustc.Tensor.from_package(a)
    x = random_vector(rng, 30)
    for _ in range(3):
        np.testing.assert_allclose(ustc.matmul(A, x), a @ x, **tol(np.float64))
        np.testing.assert_allclose(np.asarray(A @ x), a @ x, **tol(np.float64))
    from ustc.ops import matmul as one_shot

    assert id(A._layout) in one_shot._REPEATS     # the repeat fast path runs the generated kernel directly


def test_inputs_not_mutated_and_16_bit_indices_skip(rng, every_size):
    a = _csr(rng, (30, 30))
    keep = (a.indices.copy(), a.indptr.copy(), a.data.copy())
    x = random_vector(rng, 30)
    x0 = x.copy()
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
    _run(mm)
    assert all(np.array_equal(u, v) for u, v in zip((a.indices, a.indptr, a.data), keep))
    assert np.array_equal(x, x0)
    small = _csr(rng, (30, 30), index=np.int16)
    mm = ustc.Matmul(ustc.Tensor.from_package(small), x).plan()
    for y in _run(mm):
        np.testing.assert_allclose(y, small @ x, **tol(np.float64))
    assert not isinstance(mm._route, routes.NarrowColumnsRoute)


def test_small_products_keep_the_serial_generated_kernel(rng):
    a = _csr(rng, (30, 30))
    mm = ustc.Matmul(ustc.Tensor.from_package(a), random_vector(rng, 30)).plan()
    assert not isinstance(mm._route, routes.NarrowColumnsRoute)


def test_thread_count_change_rebuilds_chunks(rng, every_size):
    import numba

    a = _csr(rng, (64, 64))
    x = random_vector(rng, 64)
    mm = ustc.Matmul(ustc.Tensor.from_package(a), x).plan()
    _run(mm)
    assert _narrow(mm) is not None
    numba.set_num_threads(1)
    try:
        for y in _run(mm):
            np.testing.assert_allclose(y, a @ x, **tol(np.float64))
        assert len(_narrow(mm).bounds) == 2
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
