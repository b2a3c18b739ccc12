"""The built-in registered kernels of the cuda target: n:m structured GEMV and small-batch SpMM.

They run :mod:`ustc.kernels._structured_cuda` (imported on the first call: registering
costs nothing and imports no ``numba.cuda``) on the tensor's buffers as they are: CuPy
arrays on a GPU (launched on the operands' stream), NumPy arrays in Numba's CUDA
simulator or for host operands (which Numba copies over and back). Each declines, so
that the generated route runs instead, what it does not cover: values other than
float64 / float32 / float16 of one dtype, batched values, an SpMM batch over
:data:`SMALL_BATCH` (the tensor-core path's range, not built).
"""

from __future__ import annotations

import numpy as np

from .builtin import _nm
from .registry import register

#: the widest SpMM batch the CUDA-core kernel takes (larger ones go to generated code)
SMALL_BATCH = 16
DTYPES = frozenset({np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16)})


def _is_nm(fmt) -> bool:
    return _nm(fmt) is not None


def _supports(a, b) -> bool:
    n, m = _nm(a.format)
    dtype = np.dtype(a.dtype)
    return (dtype in DTYPES and np.dtype(b.dtype) == dtype and a.raw_values.ndim == 1
            and a.nse == a.shape[0] * -(-a.shape[1] // m) * n)


@register("spmv", _is_nm, "cuda", name="structured_spmv_cuda", builtin=True)
def structured_spmv_cuda(a, b, out, alpha):
    """``out += alpha * a @ b`` for ``Structured(n, m)`` on the cuda target: lanes of a warp per
    row over its groups, shuffled together (``ustc.kernels._structured_cuda.gemv``)."""
    from ._structured_cuda import gemv

    n, m = _nm(a.format)
    gemv(a.raw_buffers[(2, "crd")], a.raw_values, b, out, alpha, n, m, a.shape[1])


structured_spmv_cuda.supports = _supports


@register("spmm", _is_nm, "cuda", name="structured_spmm_cuda", builtin=True)
def structured_spmm_cuda(a, b, out, alpha):
    """``out += alpha * a @ b`` (``b`` 2-D, at most :data:`SMALL_BATCH` columns) for
    ``Structured(n, m)`` on the cuda target: a lane per column of ``b``
    (``ustc.kernels._structured_cuda.spmm``)."""
    from ._structured_cuda import spmm

    n, m = _nm(a.format)
    spmm(a.raw_buffers[(2, "crd")], a.raw_values, b, out, alpha, n, m, a.shape[1])


structured_spmm_cuda.supports = lambda a, b: _supports(a, b) and b.ndim == 2 and b.shape[1] <= SMALL_BATCH
