"""The library SpMV of ``delta(b, packed)`` (``ustc.kernels._delta``) for every packed width,
odd counts of gaps a word included (b = 6: 5 a word, b = 10: 3), against NumPy: rows starting
at every slot of a word, gaps wide enough to need padding, empty and all-zero matrices."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ustc.format.levels.delta import PACKABLE_BITS


def _matrix(rows: int, cols: int, dtype, seed: int) -> np.ndarray:
    """Row r holds r % cols nonzeros (so rows start at every slot of a word); the last row
    has two entries 0 and cols - 1 apart (padding at every b < log2(cols))."""
    rng = np.random.default_rng(seed)
    dense = np.zeros((rows, cols), dtype)
    for r in range(rows - 1 if cols else 0):
        k = r % cols
        dense[r, np.sort(rng.choice(cols, k, replace=False))] = rng.integers(1, 9, k)
    if rows and cols:
        dense[-1, [0, cols - 1]] = [3, -2]
    return dense


#: widths test_plan.py does not already run through the library kernel (1, 2, 4, 8): one compile each
@pytest.mark.parametrize("bits", [b for b in PACKABLE_BITS if b not in (1, 2, 4, 8)])
def test_every_packed_width_routes_to_the_library_kernel_and_matches_numpy(bits):
    dense = _matrix(45, 70, np.float64, seed=bits)
    A = ustc.Tensor.from_dense(dense, ustc.formats.DELTA(bits, True))
    x = np.arange(70, dtype=np.float64) - 30
    before = [np.copy(b) for b in A._buffers.values()], np.copy(A._values), np.copy(x)
    mm = ustc.Matmul(A, x, alpha=0.5).plan()
    assert mm.plan_info.startswith("registered kernel: delta_spmv"), mm.plan_info
    np.testing.assert_array_equal(mm.execute(), 0.5 * (dense @ x))   # small integers: exact
    after = [np.copy(b) for b in A._buffers.values()], A._values, x
    for old, new in zip(before[0], after[0]):
        np.testing.assert_array_equal(old, new)
    np.testing.assert_array_equal(before[1], after[1])
    np.testing.assert_array_equal(before[2], after[2])


@pytest.mark.parametrize("bits, dtype", [(6, np.float32), (10, np.complex128)])
def test_odd_gap_counts_in_other_dtypes_and_accumulating(bits, dtype):
    from ustc.kernels._delta import packed_spmv

    dense = _matrix(23, 40, dtype, seed=1)
    if np.dtype(dtype).kind == "c":
        dense = dense + 1j * np.roll(dense, 1, axis=1) * (dense != 0)
    A = ustc.Tensor.from_dense(dense, ustc.formats.DELTA(bits, True))
    x = (np.arange(40) % 7 - 3).astype(dtype)
    y = np.ones(23, dtype)
    packed_spmv(bits)(A._buffers[(1, "pos")], A._buffers[(1, "crd")], A._values, x, y, dtype(2), 23)
    np.testing.assert_allclose(y, 1 + 2 * (dense @ x), rtol=1e-6)


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (1, 33), (33, 1), (4, 4)])
@pytest.mark.parametrize("bits", [6, 10])
def test_edge_shapes_and_all_zero(shape, bits):
    x = np.ones(shape[1])
    for dense in (_matrix(*shape, np.float64, seed=2), np.zeros(shape)):
        A = ustc.Tensor.from_dense(dense, ustc.formats.DELTA(bits, True))
        np.testing.assert_array_equal(ustc.matmul(A, x), dense @ x)


def test_best_delta_may_pick_a_width_with_an_odd_count_a_word():
    """Gaps of 32..63 columns: b = 5 pads each once (2 entries), b = 6 stores them in one, so
    6 is the cheapest packed width; the chosen format converts and multiplies correctly."""
    dense = np.zeros((8, 2000))
    dense[:, ::40] = 1.5
    fmt = ustc.formats.best_delta(dense)
    assert fmt == ustc.formats.DELTA(6, True)
    A = ustc.Tensor.from_dense(dense, fmt)
    assert A.nse == np.count_nonzero(dense)        # no padding
    x = np.linspace(-1, 1, 2000)
    np.testing.assert_allclose(ustc.matmul(A, x), dense @ x)


def test_delta_cost_counts_what_the_chosen_format_stores():
    """``formats.delta_cost``: the bytes ``best_delta``'s format stores (gaps + values, ``pos``
    apart), read from the converted tensor, for packed and plain widths and float16 values."""
    rng = np.random.default_rng(5)
    dense = (rng.random((12, 300)) < 0.2) * rng.integers(1, 9, (12, 300)).astype(np.float16)
    for packed in (True, False):
        cost = ustc.formats.delta_cost(dense, packed)
        fmt = ustc.formats.best_delta(dense, packed)
        assert fmt == ustc.formats.DELTA(cost.bits, packed)
        A = ustc.Tensor.from_dense(dense, fmt)
        stored = A._buffers[(1, "crd")].nbytes + A._values.nbytes
        assert (cost.entries, cost.bytes) == (A.nse, stored)
        assert cost.padding == A.nse - np.count_nonzero(dense)
    with pytest.raises(ustc.FormatError, match="packed must be True or False"):
        ustc.formats.delta_cost(dense, packed=1)
