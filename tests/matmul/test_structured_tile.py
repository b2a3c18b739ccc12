"""n:m structured SpMM with a register tile (``kernels._structured_tile``, ``routes.LinearNmRoute`` for
SpMM): the route a planned float32 ``ustc.Matmul`` SpMM of a ``Structured(n, m)`` operand takes when the
batch is a multiple of 16, and its fallbacks. Oracle: NumPy on the pruned dense operand, in float64."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ustc import formats
from ustc.kernels import _simd, _structured_tile
from ustc.ops import routes, runtime
from matmul_helpers import random_dense, sparse


@pytest.fixture
def every_size(monkeypatch):
    """Small operands take the tile kernel too (normally above ``runtime.SERIAL_WORK`` only)."""
    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)


def _operand(rng, shape, nm, density=0.8):
    a = sparse(random_dense(rng, shape, density, np.float32), formats.Structured(*nm))
    return a.to_dense().astype(np.float64), a


def _tiled(mm) -> bool:
    return isinstance(mm._route, routes.LinearNmRoute) and mm._route.op == "spmm"


def _check(got, want):
    """float32 sums of up to ~1,000 products against float64: an error relative to the largest entry."""
    scale = 1.0 + (np.abs(want).max() if want.size else 0.0)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=1e-5, atol=2e-6 * scale)


# batch 128: the widest tile (one row, 128 columns); 64: the wide tile (64 columns); 16 and 48: the tall
# tile (four rows, 16 columns);
# 70 rows: chunks of 32 and a last chunk of 6 (the tall tile repeats its last row); 1 row; 0 rows
@pytest.mark.parametrize("nm, shape, batch", [((2, 4), (70, 64), 64), ((2, 4), (70, 64), 16),
                                              ((2, 4), (5, 2048), 48), ((1, 4), (33, 24), 128),
                                              ((3, 6), (9, 12), 16), ((2, 4), (1, 8), 64), ((2, 4), (0, 8), 16)])
def test_matches_numpy(nm, shape, batch, rng, every_size):
    dense, a = _operand(rng, shape, nm)
    b = rng.standard_normal((shape[1], batch)).astype(np.float32)
    b_before, values_before = b.copy(), a._values.copy()
    mm = ustc.Matmul(a, b).plan()
    assert _tiled(mm), mm.plan_info
    for _ in range(2):  # overwrites its buffer: nothing left from the last execute
        _check(mm.execute(), dense @ b)
    np.testing.assert_array_equal(b, b_before)
    np.testing.assert_array_equal(a._values, values_before)


def test_alpha_beta_c_and_an_unaligned_b(rng, every_size):
    """``alpha * A @ B + beta * C`` (the kernel accumulates into the result), and a ``B`` 16 bytes off a
    64-byte boundary (copied into aligned scratch: the results are the same)."""
    dense, a = _operand(rng, (40, 32), (2, 4))
    raw = np.empty(32 * 64 + 16, np.float32)
    start = (-raw.ctypes.data % 64) // 4 + 4
    b = raw[start:start + 32 * 64].reshape(32, 64)
    b[:] = rng.standard_normal((32, 64))
    assert not _simd.is_aligned(b)
    c = rng.standard_normal((40, 64)).astype(np.float32)
    mm = ustc.Matmul(a, b, c=c.copy(), alpha=-1.5, beta=0.5).plan()
    assert _tiled(mm), mm.plan_info
    _check(mm.execute(), -1.5 * dense @ b + 0.5 * c)
    mm = ustc.Matmul(a, b).plan()
    _check(mm.execute(), dense @ b)
    b[:] = rng.standard_normal((32, 64))  # B edited in place: the next execute copies it again
    _check(mm.execute(), dense @ b)


def test_other_operands_keep_the_builtin_kernel(rng, every_size):
    """A batch not a multiple of 16, float64, a partial last group, an odd number of slots a row: the
    built-in ``structured_spmm``, with the same results."""
    cases = [((8, 16), (2, 4), np.float32, 17), ((8, 16), (2, 4), np.float64, 16), ((8, 10), (2, 4), np.float32, 16),
             ((8, 9), (1, 3), np.float32, 16)]
    for shape, nm, dtype, batch in cases:
        a = sparse(random_dense(rng, shape, 0.8, dtype), formats.Structured(*nm))
        b = rng.standard_normal((shape[1], batch)).astype(dtype)
        mm = ustc.Matmul(a, b).plan()
        assert not _tiled(mm), (shape, nm, dtype, batch)
        _check(mm.execute(), a.to_dense().astype(np.float64) @ b)


def test_small_products_keep_the_serial_kernel(rng):
    _, a = _operand(rng, (8, 16), (2, 4))
    assert not _tiled(ustc.Matmul(a, np.ones((16, 16), np.float32)).plan())


def test_aligned_empty():
    for shape, dtype in (((3, 5), np.float32), ((0,), np.float64), ((7,), np.uint8)):
        x = _simd.aligned_empty(shape, dtype)
        assert x.shape == shape and x.dtype == dtype and x.flags.c_contiguous
        assert _simd.is_aligned(x) or x.size == 0  # (an empty view's address is NumPy's choice)
    assert _structured_tile.kernel_for(2, 4, 8) is None
