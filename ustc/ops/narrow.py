"""float16 operands of a product on the CPU.

Numba has no CPU float16 arithmetic, so a product with a float16 operand runs
in float32: each float16 operand gets a float32 twin (a sparse one keeps its
index buffers and gets new values), refreshed from the operand at every
execute, so in-place changes between executes are seen; the result is stored
back in float16 (accumulation in float32, as the issue's users expect from a
mixed-precision product).
"""

from __future__ import annotations

import numpy as np

from ..tensor import packages
from ..tensor.tensor import Tensor

def is_narrow(x) -> bool:
    """A float16 operand (NumPy array, CPU torch tensor or ustc Tensor)."""
    return x is not None and np.dtype(str(x.dtype).replace("torch.", "")) == np.float16


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a product of result ``dtype`` is computed in on the CPU."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def widen(x):
    """``(twin, (source, destination))`` for a float16 operand, ``(x, None)`` otherwise; the
    pair is what :func:`refresh` copies before each execute."""
    if not is_narrow(x):
        return x, None
    if isinstance(x, Tensor):
        values = packages.host_array(x.values)
        wide = np.empty(values.shape, dtype=np.float32)
        buffers = {key: packages.host_array(buf) for key, buf in x.buffers.items()}
        return Tensor(x.format, x.shape, buffers, wide, package=x.package), (values, wide)
    source = packages.host_array(x)
    wide = np.empty(source.shape, dtype=np.float32)
    return wide, (source, wide)


def refresh(pairs) -> None:
    """Copy each float16 source into its float32 twin (``pairs`` from :func:`widen`)."""
    for source, wide in pairs:
        np.copyto(wide, source)


def narrowed(result, dtype: np.dtype):
    """A float32 result stored as ``dtype`` (a new array, or a Tensor with the same index buffers)."""
    if isinstance(result, Tensor):
        buffers = {key: packages.host_array(buf) for key, buf in result.buffers.items()}
        values = packages.host_array(result.values).astype(dtype)
        return Tensor(result.format, result.shape, buffers, values, package=result.package)
    return result.astype(dtype)
