"""The NumPy pack hooks as the oracle of generated writers: a tensor re-assembled through
``storage.assemble`` and a buffer-for-buffer comparison of two tensors' storage."""

from __future__ import annotations

import numpy as np

from ustc import Tensor
from ustc.tensor.tensor import as_format


def oracle(t: Tensor, fmt, prune: bool = False) -> Tensor:
    """The NumPy pipeline: unpack to coordinates, sort, pack (``storage.assemble``)."""
    coords, values = t.entries()
    return Tensor._assembled(as_format(fmt), t.shape, coords, values, t.package, prune=prune)


def assert_same_storage(got: Tensor, want: Tensor) -> None:
    """Same format, shape, buffers (dtype and contents) and values."""
    assert got.format == want.format and got.shape == want.shape
    assert set(got.buffers) == set(want.buffers)
    for key, buf in want.buffers.items():
        assert got.buffers[key].dtype == buf.dtype, key
        np.testing.assert_array_equal(got.buffers[key], buf, err_msg=str(key))
    assert got.values.dtype == want.values.dtype
    np.testing.assert_array_equal(got.values, want.values)
