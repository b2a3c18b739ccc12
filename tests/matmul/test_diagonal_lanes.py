"""The diagonal-mask SpMV's vector kernel (``kernels._diagonal_spmv.diagonal_spmv_lanes``: runs of 8
full rows in one vector) against the one-row-at-a-time kernel and SciPy: runs of full rows shorter
than, equal to and longer than a vector, broken by partial and empty rows, chunks whose borders fall
inside runs, a run ending at the matrix's last row, alpha with y stored or accumulated, float64 and
float32 with uint8 masks, 12 diagonals with uint16 masks; where it is chosen. One compile per
(number of diagonals, dtype), the ones test_diagonal_spmv compiles too."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from ustc.kernels import _diagonal_spmv
from ustc.kernels._diagonal_spmv import diagonal_spmv, diagonal_spmv_lanes, lanes_fit
from matmul_helpers import tol

pytestmark = pytest.mark.skipif(not _diagonal_spmv.HAS_AVX512, reason="the vector kernel runs on AVX-512 hosts only")

SEVEN = (-25, -5, -1, 0, 1, 5, 25)
TWELVE = (-40, -31, -17, -8, -2, 0, 3, 7, 11, 19, 30, 44)
RUNS = [7, 8, 9, 16, 17, 1, 0, 24, 3, 8]   # full rows in a row, each run followed by one partial row


def _masks(rng, n_rows, k, runs):
    """uint8 / uint16 masks: the runs of full rows, then random partial masks (some empty), and the last
    rows full up to the end."""
    full = (1 << k) - 1
    masks = rng.integers(0, full, n_rows)          # partial (never full), 0 included
    at = 2
    for run in runs:
        masks[at:at + run] = full
        at += run + 1
    masks[-11:] = full
    return masks


def _csr(rng, masks, offsets, n_cols, dtype):
    """The CSR matrix of ``masks`` over ``offsets`` (bits whose column falls outside dropped)."""
    rows, cols = [], []
    for i, m in enumerate(masks):
        for d, o in enumerate(offsets):
            if (m >> d) & 1 and 0 <= i + o < n_cols:
                rows.append(i)
                cols.append(i + o)
    vals = rng.standard_normal(len(rows)).astype(dtype)
    a = sp.csr_array((vals, (np.array(rows, np.int64), np.array(cols, np.int64))), shape=(len(masks), n_cols))
    a.sort_indices()
    return a


def _masks_of(a, offsets):
    """The masks the matrix really has (bits outside it cleared), in the dtype ``Diagonals`` keeps."""
    masks = np.zeros(a.shape[0], np.uint8 if len(offsets) <= 8 else np.uint16)
    index = {o: d for d, o in enumerate(offsets)}
    for i in range(a.shape[0]):
        for c in a.indices[a.indptr[i]:a.indptr[i + 1]]:
            masks[i] |= 1 << index[int(c) - i]
    return masks


@pytest.mark.parametrize("offsets,dtype", [(SEVEN, np.float64), (SEVEN, np.float32), (TWELVE, np.float64)])
def test_runs_and_chunk_borders_match_the_row_kernel(offsets, dtype, rng):
    k = len(offsets)
    n = 160
    a = _csr(rng, _masks(rng, n, k, RUNS), offsets, n + 30, dtype)
    masks = _masks_of(a, offsets)
    x = rng.standard_normal(a.shape[1]).astype(dtype)
    keep = [b.copy() for b in (masks, a.data, x)]
    for bounds in ([0, n], [0, 5, 13, 77, n], [0, 1, 2, 90, 91, n]):   # borders inside runs, one-row chunks
        bounds = np.array(bounds, np.int64)
        starts = a.indptr[bounds].astype(np.int64)
        for alpha, accumulate in ((1.0, False), (-0.75, True)):
            y0 = rng.standard_normal(n).astype(dtype)
            y, ref = y0.copy(), y0.copy()
            assert lanes_fit(y, a.data, x, alpha)
            diagonal_spmv_lanes(y, masks, starts, offsets, a.data, x, bounds, dtype(alpha), accumulate)
            diagonal_spmv(ref, masks, starts, offsets, a.data, x, bounds, alpha, accumulate)
            expect = (y0 if accumulate else 0) + alpha * (a @ x)
            np.testing.assert_allclose(y, expect, **tol(dtype))
            np.testing.assert_allclose(y, ref, **tol(dtype))
    for k_, b in zip(keep, (masks, a.data, x)):
        np.testing.assert_array_equal(k_, b)


def test_chosen_only_where_it_fits(rng):
    """Strided y, another dtype of x, complex values or a complex alpha keep the row kernel."""
    y, vals, x = np.zeros(16), np.ones(8), np.ones(16)
    assert lanes_fit(y, vals, x, 2.0)
    assert not lanes_fit(np.zeros(32)[::2], vals, x, 2.0)
    assert not lanes_fit(y, vals, x.astype(np.float32), 2.0)
    assert not lanes_fit(y.astype(complex), vals.astype(complex), x.astype(complex), 2.0)
    assert not lanes_fit(y, vals, x, 1 + 2j)
