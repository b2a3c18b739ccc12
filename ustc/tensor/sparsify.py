"""Fused sparsification: a sparse tensor from a dense one in one pass.

``sparsify(x, fmt, where=mask)`` stores ``x`` where ``mask`` holds (and ``x``
is nonzero); ``sparse_relu(x, fmt)`` stores ``relu(x)``. Neither builds the
filtered dense array: a parallel count pass and a fill pass read ``x`` (and the
mask) and write only the sparse result.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from . import fastpaths, packages
from .tensor import Tensor, as_format


def sparsify(x, tensor_format="CSR", where=None) -> Tensor:
    """Sparse tensor of ``x``'s nonzeros, restricted to ``where`` when given.

    ``where``: None, a boolean array of ``x``'s shape, or a callable mapping the
    dense array to such a boolean array (e.g. ``lambda a: abs(a) > 1e-3``).
    """
    package = packages.TORCH if packages.is_torch(x) else packages.NUMPY
    array = packages.host_array(x)
    if callable(where):
        where = where(array)
    if where is None:
        return fastpaths.from_dense(array, as_format(tensor_format), package)
    mask = packages.host_array(where)
    if mask.shape != array.shape:
        raise ShapeError(f"where has shape {mask.shape}, x has shape {array.shape}")
    return fastpaths.from_dense(array, as_format(tensor_format), package, fastpaths.MASKED, mask)


def sparse_relu(x, tensor_format="CSR") -> Tensor:
    """Sparse ``max(x, 0)`` in ``tensor_format`` without the dense intermediate."""
    package = packages.TORCH if packages.is_torch(x) else packages.NUMPY
    array = packages.host_array(x)
    if np.iscomplexobj(array):
        raise TypeError("relu is not defined for complex values")
    return fastpaths.from_dense(array, as_format(tensor_format), package, fastpaths.POSITIVE)
