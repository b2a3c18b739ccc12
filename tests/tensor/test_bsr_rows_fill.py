"""kernels.bsr_row_fill writes rows without a branch per value: it never writes past its chunk."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from ustc.tensor import kernels

SENTINEL = -7


def _bsr_with_empty_tail(r: int, c: int, dtype):
    """A BSR(r, c) matrix of 6 block rows whose block rows 1-2 and 5 are empty and whose stored
    blocks end in zeros: a branch-free row would store those zeros at its row's end."""
    rng = np.random.default_rng(0)
    x = np.zeros((6 * r, 5 * c), dtype=dtype)
    for b in (0, 3, 4):
        x[b * r:(b + 1) * r, : 3 * c] = rng.integers(1, 9, size=(r, 3 * c))
        x[b * r:(b + 1) * r, 3 * c - 1] = 0  # the last stored column of each row: zero
    x[0, 0] = 0
    return sp.bsr_array(x, blocksize=(r, c)), x


@pytest.mark.parametrize("r, c, dtype", [(2, 2, np.float64), (3, 2, np.float64)])  # one compile
def test_a_chunk_writes_only_its_own_rows(r, c, dtype):
    bsr, x = _bsr_with_empty_tail(r, c, dtype)
    bsr.sort_indices()
    pos, crd, values = bsr.indptr, bsr.indices, bsr.data.reshape(-1)
    nrows, ncols = x.shape
    counts = np.zeros(nrows + 1, dtype=np.int32)  # the production dtypes
    kernels.bsr_row_counts(pos, crd, values, r, c, nrows, ncols, counts)
    pos_out = np.cumsum(counts, dtype=np.int32)
    assert np.array_equal(np.diff(pos_out), np.count_nonzero(x, axis=1))
    total = int(pos_out[-1])
    for bounds in ([0, 3], [3, 6], [0, 3, 6], [0, 6]):   # chunk alone, the last alone, both, one
        crd_out = np.full(total + 4, SENTINEL, np.int32)
        values_out = np.full(total + 4, SENTINEL, dtype)
        kernels.bsr_row_fill(pos, crd, values, r, c, nrows, ncols, np.array(bounds, np.int64), 0, pos_out,
                             crd_out, values_out)
        lo, hi = pos_out[bounds[0] * r], pos_out[min(bounds[-1] * r, nrows)]
        assert (crd_out[:lo] == SENTINEL).all() and (crd_out[hi:] == SENTINEL).all()
        assert (values_out[:lo] == SENTINEL).all() and (values_out[hi:] == SENTINEL).all()
        ref = sp.csr_array(x)
        assert np.array_equal(crd_out[lo:hi], ref.indices[lo:hi])
        assert np.array_equal(values_out[lo:hi], ref.data[lo:hi])
