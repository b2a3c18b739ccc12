"""SpMV through a bit mask of the pattern (``kernels._linear_csr_bitmap``): the kernel a planned float32
``ustc.Matmul`` SpMV of a CSR operand with at least ``MIN_DENSITY`` of its entries stored runs inside
``routes.LinearCsrRoute``, and of an n:m operand whose groups tile 16 columns inside
``routes.LinearNmRoute``; refusals, and a pattern changed in place. Oracle: NumPy in float64."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ustc import formats
from ustc.formats import CSR
from ustc.kernels import _linear_csr_bitmap as bitmap, _linear_nm
from ustc.ops import routes, runtime
from ustc.torch.reformat import with_widths
from matmul_helpers import random_dense


@pytest.fixture
def every_size(monkeypatch):
    """Small operands take the route too (normally above ``runtime.SERIAL_WORK`` only), and the masks
    are taken on any host (routes take them only with AVX-512; the kernel is right without)."""
    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)
    monkeypatch.setattr(bitmap, "USE_MASKS", True)


def _weight(rng, shape, density, width=16):
    w = random_dense(rng, shape, density, np.float32)
    w[::5] = 0  # empty rows
    if shape[0] > 3:
        w[3] = rng.standard_normal(shape[1])  # a full row
    return w, ustc.Tensor.from_dense(w, with_widths(CSR, crd_width=width))


def _masked(mm) -> bool:
    return isinstance(mm._route, routes.LinearCsrRoute) and mm._route.kernel._masks.bits is not None


def _check(got, want):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5, atol=1e-5 * (1 + np.abs(want).max()))


# 37 and 45 columns: the last mask is partial (x padded); 16: one mask; 2048: the layer's width
@pytest.mark.parametrize("shape, density, width", [((40, 37), 0.5, 16), ((9, 16), 0.9, 8), ((3, 45), 0.8, 16),
                                                   ((6, 2048), 0.3, 16)])
def test_matches_numpy(shape, density, width, rng, every_size):
    w, a = _weight(rng, shape, density, width)
    x = rng.standard_normal(shape[1]).astype(np.float32)
    x_before, values_before = x.copy(), a._values.copy()
    mm = ustc.Matmul(a, x).plan()
    for _ in range(2):  # overwrites its result: nothing left from the last execute
        _check(mm.execute(), w.astype(np.float64) @ x)
    assert _masked(mm), mm.plan_info
    np.testing.assert_array_equal(x, x_before)
    np.testing.assert_array_equal(a._values, values_before)


def test_alpha_beta_c_and_values_edited_in_place(rng, every_size):
    w, a = _weight(rng, (30, 40), 0.5)
    x, c = rng.standard_normal(40).astype(np.float32), rng.standard_normal(30).astype(np.float32)
    mm = ustc.Matmul(a, x, c=c.copy(), alpha=-1.5, beta=0.5).plan()
    _check(mm.execute(), -1.5 * w.astype(np.float64) @ x + 0.5 * c)
    assert _masked(mm)
    mm = ustc.Matmul(a, x).plan()
    mm.execute()
    a._values[:] *= 2  # values are read in place at every execute
    _check(mm.execute(), 2 * w.astype(np.float64) @ x)


def test_a_pattern_changed_in_place_is_seen(rng, every_size):
    """Row lengths changed in the operand's own buffers: the kernel refuses before reading and the masks
    are made again."""
    w, a = _weight(rng, (8, 32), 0.5)
    x = rng.standard_normal(32).astype(np.float32)
    mm = ustc.Matmul(a, x).plan()
    mm.execute()
    pos, crd = a._buffers[(1, "pos")], a._buffers[(1, "crd")]
    row = 1  # its last entry moves to the start of row 2 (both keep increasing columns if the column fits)
    moved = int(crd[pos[row + 1] - 1])
    if pos[row + 2] > pos[row + 1] and moved >= int(crd[pos[row + 1]]):
        crd[pos[row + 1] - 1] = 0 if int(crd[pos[row + 1]]) > 0 else moved
    pos[row + 1] -= 1
    dense = np.zeros((8, 32))
    for i in range(8):
        dense[i, crd[pos[i]:pos[i + 1]]] = a._values[pos[i]:pos[i + 1]]
    _check(mm.execute(), dense @ x)


def test_refusals(rng, every_size):
    """Below MIN_DENSITY, float64, 2-D ``b``, fewer than 16 columns: the gather / SpMM kernels. Columns
    out of order within a row: no masks (the gather kernel, same results)."""
    w, a = _weight(rng, (20, 64), 0.1)
    assert not bitmap.accepts(a.shape, a._buffers[(1, "pos")], a._values, np.ones(64, np.float32))
    assert not bitmap.accepts((20, 8), np.zeros(21, np.int32), np.ones(160, np.float32), np.ones(8, np.float32))
    assert not bitmap.accepts((2, 16), np.zeros(3, np.int32), np.ones(32), np.ones(16))
    assert not bitmap.accepts((2, 16), np.zeros(3, np.int32), np.ones(32, np.float32), np.ones((16, 2), np.float32))
    masks = bitmap.Bitmap()
    assert not masks.ready((1, 32), np.array([0, 2], np.int32), np.array([5, 3], np.uint16))
    assert not masks.ready((1, 32), np.array([0, 2], np.int32), np.array([3, 3], np.uint16))
    assert masks.ready((1, 32), np.array([0, 2], np.int32), np.array([3, 31], np.uint16))
    assert masks.bits.tolist() == [[1 << 3, 1 << 15]] and masks.counts.tolist() == [2]


# n:m SpMV (routes.LinearNmRoute, kernels._linear_nm.NmSelect): float32 groups tiling 16 columns take the masks
@pytest.mark.parametrize("nm, shape", [((2, 4), (33, 64)), ((1, 2), (5, 22)), ((3, 4), (4, 36))])
def test_nm_spmv_through_the_masks(nm, shape, rng, every_size):
    w = random_dense(rng, shape, 0.8, np.float32)
    a = ustc.Tensor.from_dense(w, formats.Structured(*nm), prune=True)
    x = rng.standard_normal(shape[1]).astype(np.float32)
    mm = ustc.Matmul(a, x, c=np.ones(shape[0], np.float32), alpha=2.0, beta=-1.0).plan()
    _check(mm.execute(), 2.0 * a.to_dense().astype(np.float64) @ x - 1.0)
    assert isinstance(mm._route, routes.LinearNmRoute) and mm._route.kernel._masks is not None


def test_nm_masks_refused():
    """A partial last group, a group of 3 columns (not tiling 16), coordinates out of order or out of
    range: no masks (the select kernel runs)."""
    crd = np.array([0, 1, 2, 3], np.uint8)
    assert _linear_nm.nm_masks(2, 4, (1, 8), crd) is not None
    assert _linear_nm.nm_masks(2, 4, (1, 7), crd) is None
    assert _linear_nm.nm_masks(1, 3, (1, 12), crd) is None
    assert _linear_nm.nm_masks(2, 4, (1, 8), np.array([1, 0, 2, 3], np.uint8)) is None
    assert _linear_nm.nm_masks(2, 4, (1, 8), np.array([0, 4, 2, 3], np.uint8)) is None
    pos, counts, bits = _linear_nm.nm_masks(2, 4, (1, 8), np.array([0, 3, 1, 2], np.uint8))
    assert bits.tolist() == [[0b0110_1001]] and counts.tolist() == [4] and pos.tolist() == [0, 4]


def test_no_masks_without_avx512(rng, every_size, monkeypatch):
    """Where expand-loads are not one instruction (no AVX-512: ``USE_MASKS`` False) the CSR and n:m
    SpMV keep their gather / select kernels, with the same results."""
    monkeypatch.setattr(bitmap, "USE_MASKS", False)
    w, a = _weight(rng, (20, 64), 0.6)
    x = rng.standard_normal(64).astype(np.float32)
    mm = ustc.Matmul(a, x).plan()
    _check(mm.execute(), w.astype(np.float64) @ x)
    assert isinstance(mm._route, routes.LinearCsrRoute) and not _masked(mm)
    s = ustc.Tensor.from_dense(random_dense(rng, (33, 64), 0.8, np.float32), formats.Structured(2, 4), prune=True)
    mm = ustc.Matmul(s, x).plan()
    _check(mm.execute(), s.to_dense().astype(np.float64) @ x)
    assert isinstance(mm._route, routes.LinearNmRoute) and mm._route.kernel._masks is None
