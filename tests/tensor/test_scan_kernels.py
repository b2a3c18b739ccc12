"""The compiled checks behind assembly: lexicographic order and zero counts, serial and split
across threads (both paths, against NumPy)."""

from __future__ import annotations

import numpy as np
import pytest

from ustc.tensor import kernels


def _sorted_pairs(n: int, seed: int):
    rng = np.random.default_rng(seed)
    major = rng.integers(0, max(n // 8, 1), n).astype(np.int32)
    minor = rng.integers(0, 50_000, n).astype(np.uint16 if n < 100 else np.int32)
    pairs = np.unique(np.stack([major, minor.astype(np.int64)]), axis=1)
    return pairs[0].astype(np.int32), pairs[1].astype(minor.dtype)


@pytest.mark.parametrize("n", [0, 1, 2, 77, kernels.PARALLEL_SCAN + 3])
def test_strictly_increasing_agrees_with_numpy(n):
    major, minor = _sorted_pairs(n, seed=n)
    assert kernels.strictly_increasing(major, minor)
    if major.size < 2:
        return
    for k in (1, major.size // 2, major.size - 1):  # a repeat, then a descent, at the start/middle/end
        tied = minor.copy()
        tied[k] = tied[k - 1]
        same_row = major[k] == major[k - 1]
        assert kernels.strictly_increasing(major, tied) == (not same_row)
        down = major.copy()
        down[k] = down[k - 1] - 1
        assert not kernels.strictly_increasing(down, minor)


@pytest.mark.parametrize("n", [0, 5, kernels.PARALLEL_SCAN + 5])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.complex128])
def test_count_zeros_agrees_with_numpy(n, dtype):
    values = np.random.default_rng(n).integers(-2, 3, n).astype(dtype)
    assert kernels.count_zeros(values) == int(np.count_nonzero(values == 0))
