"""``_spgemm.shift_chunks``: the one pass into bounds moves each chunk's packed rows down from its
first row's bound to its first row's position; gaps from none to several segments (SEGMENT) long,
chunks longer and shorter than their gap, empty chunks."""

import numpy as np
import pytest

from ustc.kernels import _spgemm

S = _spgemm.SEGMENT


@pytest.mark.parametrize("sizes, gaps", [
    ([5, 7, 0, 3], [0, 2, 0, 1]),                              # small gaps: the serial copy
    ([3 * S + 17, 5 * S + 3, 2 * S, 11], [S + 5, 2 * S, 0, S]),  # segments: chunks longer than the gap
    ([S // 2, 100, 4 * S + 1], [3 * S, 0, 2 * S + 7]),          # a gap longer than its chunk
], ids=["serial", "segmented", "long gaps"])
def test_chunks_land_packed_and_in_order(sizes, gaps, rng):
    """``sizes[c]`` entries in chunk ``c``, which the one pass left ``gaps[c]`` entries past the end
    of the chunk before (its bound); after the move every chunk follows the one before."""
    rows_per_chunk = 3
    bounds = np.arange(len(sizes) + 1, dtype=np.int64) * rows_per_chunk
    pos = np.zeros(bounds[-1] + 1, dtype=np.int64)
    work = np.zeros_like(pos)
    for c, (n, g) in enumerate(zip(sizes, gaps)):
        lo = bounds[c]
        split = np.sort(rng.integers(0, n + 1, rows_per_chunk - 1))
        row_sizes = np.diff(np.r_[0, split, n])
        pos[lo + 1:lo + rows_per_chunk + 1] = pos[lo] + np.cumsum(row_sizes)
        # the bound of a chunk's first row: the chunks before it plus their gaps
        work[lo] = pos[lo] + sum(gaps[:c + 1])
        work[lo + 1:lo + rows_per_chunk + 1] = work[lo] + np.cumsum(row_sizes)
    total = int(work[-1]) + 5
    crd = np.full(total, -1, dtype=np.int32)
    vals = np.full(total, np.nan)
    want_crd = rng.integers(0, 2**31 - 1, int(pos[-1])).astype(np.int32)
    want_vals = rng.standard_normal(int(pos[-1]))
    for c in range(len(sizes)):
        lo, hi = bounds[c], bounds[c + 1]
        n = pos[hi] - pos[lo]
        crd[work[lo]:work[lo] + n] = want_crd[pos[lo]:pos[hi]]
        vals[work[lo]:work[lo] + n] = want_vals[pos[lo]:pos[hi]]
    work[0] = 0   # the first chunk is written in place
    crd[:sizes[0]], vals[:sizes[0]] = want_crd[:sizes[0]], want_vals[:sizes[0]]
    _spgemm.shift_chunks(work, pos, bounds, crd, vals)
    np.testing.assert_array_equal(crd[:pos[-1]], want_crd)
    np.testing.assert_array_equal(vals[:pos[-1]], want_vals)
