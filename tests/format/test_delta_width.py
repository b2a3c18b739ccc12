"""The delta gap width chosen per matrix (``ustc.formats.best_delta``, ``levels.delta_width``):
the chosen b stores the fewest bytes of every width, checked against what conversion really
stores (the pack hook's entries and buffers), and the padding is counted without allocating it."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import ustc
from ustc.errors import FormatError, ShapeError
from ustc.format.levels.delta import PACKABLE_BITS, Delta, row_gaps
from ustc.format.levels.delta_width import GapHistogram, choose_width, gap_histogram, width_costs
from ustc.formats import DELTA, best_delta

RNG = np.random.default_rng(19)


def random_matrix(m, n, zeros, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    values = rng.integers(1, 9, (m, n)) * rng.choice([-1, 1], (m, n))
    return np.where(rng.random((m, n)) < zeros, 0, values).astype(dtype)


def stored_bytes(dense, bits, packed):
    """What conversion really stores for ``delta(bits[, packed])``: (entries, crd + value bytes)."""
    t = ustc.Tensor.from_dense(dense, DELTA(bits, packed))
    np.testing.assert_array_equal(np.asarray(t.to_dense()), dense)
    return t.nse, np.asarray(t.crd(1)).nbytes + t.nse * dense.dtype.itemsize


def histogram_of(dense):
    rows, cols = np.nonzero(dense)
    return gap_histogram(rows, cols)


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("zeros, shape, dtype", [(0.5, (12, 200), np.float16), (0.7, (9, 301), np.float32),
                                                  (0.9, (16, 257), np.float16), (0.97, (6, 900), np.float64),
                                                  (0.0, (3, 40), np.float32), (0.999, (1, 3000), np.float16)])
def test_chosen_width_stores_the_fewest_bytes_of_all_widths(zeros, shape, dtype, packed):
    dense = random_matrix(*shape, zeros, dtype, seed=int(zeros * 1000))
    hist = histogram_of(dense)
    costs = width_costs(hist, dense.dtype.itemsize, packed)
    assert [c.bits for c in costs] == list(PACKABLE_BITS if packed else range(1, 33))
    real = {}
    for cost in costs:
        entries, nbytes = stored_bytes(dense, cost.bits, packed)
        assert (cost.entries, cost.bytes) == (entries, nbytes), cost.level.text()
        assert cost.padding == entries - np.count_nonzero(dense)
        real[cost.bits] = nbytes
    chosen = choose_width(hist, dense.dtype.itemsize, packed)
    assert real[chosen.bits] == min(real.values())
    assert best_delta(dense, packed) == DELTA(chosen.bits, packed)


def test_issue_widths_for_half_values():
    """fp16 values, random zeros: 2 or 3 bits at 50%, 5 at 90%; a fixed 4 bits stores more."""
    picks = {}
    for zeros in (0.5, 0.9):
        dense = random_matrix(256, 2048, zeros, np.float16, seed=3)
        costs = {c.bits: c.bytes for c in width_costs(histogram_of(dense), 2)}
        picks[zeros] = best_delta(dense).levels[1].type.bits
        assert costs[picks[zeros]] == min(costs.values())
    assert picks[0.5] in (2, 3) and picks[0.9] == 5
    dense = random_matrix(256, 2048, 0.9, np.float16, seed=3)
    costs = {c.bits: c.bytes for c in width_costs(histogram_of(dense), 2)}
    assert costs[5] < 0.95 * costs[4]


@pytest.mark.parametrize("shape", [(0, 7), (7, 0), (0, 0), (4, 9), (1, 1)])
def test_empty_and_all_zero_matrices(shape):
    dense = np.zeros(shape)
    for packed in (True, False):
        fmt = best_delta(dense, packed)
        assert fmt == DELTA(1, packed)  # every width stores nothing: the narrowest
        t = ustc.Tensor.from_dense(dense, fmt)
        assert t.nse == 0 and np.asarray(t.to_dense()).shape == shape
    hist = histogram_of(dense)
    assert hist.nonzeros == 0 and hist.widest == 0 and hist.padding(1) == 0
    assert all(c.bytes == 0 and c.entries == 0 for c in width_costs(hist, 2))


def test_padding_is_counted_without_allocating_it():
    """Gaps of 2**40 and 2**61 columns: delta(1) would store 2**60 padding entries; the counts are
    exact Python integers, computed with a few kilobytes."""
    rows = np.array([0, 0, 1, 2, 2], np.int64)
    cols = np.array([5, (1 << 40) + 6, 1 << 61, 0, 3], np.int64)
    tracemalloc.start()
    try:
        hist = gap_histogram(rows, cols)
        costs = {c.bits: c for c in width_costs(hist, 2)}
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 10
    gaps = [5, 1 << 40, 1 << 61, 0, 2]
    for b, cost in costs.items():
        assert cost.padding == sum(g >> b for g in gaps)
        assert cost.entries == 5 + cost.padding
    assert costs[1].padding > 1 << 60
    assert choose_width(hist, 2).bits == 16  # the widest: padding is everything here


@pytest.mark.parametrize("bits", [1, 3, 8])
def test_padding_count_agrees_with_the_pack_hooks_room_check(bits):
    dense = random_matrix(30, 500, 0.95, seed=bits)
    rows, cols = np.nonzero(dense)
    gap = row_gaps(rows, cols.astype(np.int64), 0)
    hist = GapHistogram.of(gap)
    assert Delta(bits=bits).require_room(gap) == hist.nonzeros + hist.padding(bits)


def test_wide_gaps_take_the_sorted_histogram():
    gap = np.array([0, 3, 3, 1 << 30, 7, 1 << 30], np.int64)
    hist = GapHistogram.of(gap)
    np.testing.assert_array_equal(hist.gaps, [0, 3, 7, 1 << 30])
    np.testing.assert_array_equal(hist.counts, [1, 2, 1, 2])
    dense_hist = GapHistogram.of(np.array([0, 3, 3, 7], np.int64))
    np.testing.assert_array_equal(dense_hist.gaps, [0, 3, 7])
    np.testing.assert_array_equal(dense_hist.counts, [1, 2, 1])


def test_every_kind_of_matrix_gives_the_same_choice():
    dense = random_matrix(40, 333, 0.85, np.float32, seed=5)
    want = best_delta(dense)
    assert best_delta(sp.csr_array(dense)) == want
    assert best_delta(sp.coo_matrix(dense).T.T) == want
    assert best_delta(torch.from_numpy(dense)) == want
    assert best_delta(torch.from_numpy(dense).to_sparse()) == want
    for fmt in (ustc.formats.CSR, ustc.formats.CSC, ustc.formats.COO, ustc.formats.BSR(2, 3)):
        assert best_delta(ustc.Tensor.from_dense(dense, fmt)) == want, fmt
    # explicit zeros and duplicates do not count
    coo = sp.coo_array(dense)
    doubled = sp.coo_array((np.r_[coo.data / 2, coo.data / 2, 0.0], (np.r_[coo.row, coo.row, 0],
                                                                      np.r_[coo.col, coo.col, 1])),
                           shape=dense.shape)
    assert best_delta(doubled) == want
    # value bytes change the price of padding: 16-byte values make padding dearer
    assert best_delta(dense, value_bytes=16).levels[1].type.bits >= want.levels[1].type.bits


def test_chosen_format_converts_and_multiplies():
    dense = random_matrix(17, 203, 0.8, np.float64, seed=9)
    x = RNG.standard_normal(203)
    for packed in (True, False):
        t = ustc.Tensor.from_dense(dense, ustc.formats.CSR).convert(best_delta(dense, packed))
        np.testing.assert_allclose(np.asarray(ustc.matmul(t, x)), dense @ x)


def test_bad_input_is_refused_clearly():
    with pytest.raises(ShapeError, match="2-D matrix, got shape \\(5,\\)"):
        best_delta(np.ones(5))
    with pytest.raises(ShapeError, match="2-D matrix, got shape \\(2, 2, 2\\)"):
        best_delta(np.ones((2, 2, 2)))
    assert best_delta([[1, 0], [0, 1]]) == best_delta(np.eye(2))
    with pytest.raises(FormatError, match="packed must be True or False"):
        best_delta(np.eye(3), packed="packed")
    with pytest.raises(FormatError, match="value_bytes must be a non-negative integer"):
        best_delta(np.eye(3), value_bytes=-1)
    with pytest.raises(ValueError, match="non-negative"):
        GapHistogram.of(np.array([3, -1]))
