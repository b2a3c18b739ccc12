"""The forward products of ``ustc.torch``: one call of ``ustc.matmul`` per product.

``matmul2d(a, b)`` multiplies two torch tensors (1-D or 2-D; each a TorchUST or
a dense tensor) by one ``ustc.matmul`` call, so every product goes through
ustc's Matmul plan cache: the second call with the same formats, dtypes and
shapes only executes. The sparse operand is always put on the left, where the
generated kernels walk it in its stored order:

* sparse ``A @ X``: ``ustc.matmul(A, X)`` (X made C-contiguous);
* dense ``X @ B``: ``(Bᵀ @ Xᵀ)ᵀ`` with ``Bᵀ`` a zero-copy view, so
  ``linear(x, W) = x @ W.t()`` runs ``W @ xᵀ`` over ``W`` as stored.

No autograd here (see ``ustc.torch.autograd``).
"""

from __future__ import annotations


import numpy as np
import torch

from .. import matmul as ustc_matmul
from ..errors import DeviceError, ShapeError, UnsupportedOperation
from ..tensor import packages
from ..tensor.tensor import Tensor
from .subclass import TorchUST, host, numpy_dtype, to_torch


def is_sparse(x) -> bool:
    return isinstance(x, TorchUST)


def _check(a, b, name: str) -> None:
    if a.device != b.device:
        raise DeviceError(f"ustc.torch.{name}: operands on {a.device} and {b.device}; move them to one device")
    if a.dim() not in (1, 2) or b.dim() not in (1, 2):
        raise ShapeError(f"ustc.torch.{name}: expected 1-D or 2-D operands, got shapes {tuple(a.shape)} "
                         f"and {tuple(b.shape)}")
    if a.shape[-1] != b.shape[0]:
        raise ShapeError(f"ustc.torch.{name}: shapes {tuple(a.shape)} and {tuple(b.shape)} do not multiply "
                         f"({a.shape[-1]} != {b.shape[0]})")


def _contiguous(x):
    array = host(x)
    if isinstance(array, np.ndarray):
        return np.ascontiguousarray(array)
    import cupy

    return cupy.ascontiguousarray(array)


def _transposed(array):
    """A C-contiguous copy of a 2-D array's transpose (a 1-D array as is)."""
    if array.ndim == 1:
        return array
    if isinstance(array, np.ndarray):
        return np.ascontiguousarray(array.T)
    import cupy

    return cupy.ascontiguousarray(array.T)


def operand(x) -> Tensor:
    """The ustc Tensor of a TorchUST as a NumPy-package alias (same buffers; a shallow copy).

    ``ustc.matmul`` sees host arrays whatever package the buffers came from.
    """
    ust = x.numeric_ust()
    if ust.package != packages.TORCH:
        return ust
    return ust.with_package(packages.NUMPY)


def _result(out, dtype: "torch.dtype"):
    result = TorchUST(out) if isinstance(out, Tensor) else to_torch(out)  # sparse @ sparse: a TorchUST
    return result if result.dtype == dtype else result.to(dtype)          # bfloat16 rounded back, both kinds


def matmul2d(a, b, name: str = "matmul"):
    """``a @ b`` for 1-D / 2-D operands, at least one a TorchUST (dense pairs go to torch).

    bfloat16 (no NumPy dtype) runs in float32: a TorchUST through its float32
    twin (:meth:`TorchUST.numeric_ust`), a dense operand converted; the result
    is rounded back to bfloat16. float16 runs in float32 inside ``ustc.matmul``.
    """
    _check(a, b, name)
    dtype = torch.promote_types(a.dtype, b.dtype)
    if not is_sparse(a) and not is_sparse(b):
        return torch.matmul(a, b)
    if dtype == torch.bfloat16:
        a, b = (x.float() if not is_sparse(x) and x.dtype == torch.bfloat16 else x for x in (a, b))
    if not is_sparse(a) and a.dim() == 2 and a.shape[0] == 1 and b.dim() == 2:  # one row: an SpMV
        return matmul2d(a.reshape(-1), b, name).reshape(1, -1)
    if not is_sparse(b) and b.dim() == 2 and b.shape[1] == 1 and a.dim() == 2:  # one column: an SpMV
        return matmul2d(a, b.reshape(-1), name).reshape(-1, 1)
    if is_sparse(a) and is_sparse(b):
        return _result(ustc_matmul(operand(a), operand(b)), dtype)
    if is_sparse(a):
        return _result(ustc_matmul(operand(a), _contiguous(b)), dtype)
    if b.dim() == 1 and a.dim() == 1:  # a dot product commutes: the sparse vector goes left
        return _result(ustc_matmul(operand(b), host(a)), dtype)
    if b.dim() == 1:  # dense matrix @ sparse vector: no sparse-right route; the vector is short
        return _result(ustc_matmul(host(a), np.asarray(b.ust.to_dense())), dtype)
    # dense @ sparse matrix: (Bᵀ @ aᵀ)ᵀ with Bᵀ a zero-copy view of the stored tensor
    out = ustc_matmul(operand(b).T, _transposed(host(a)))
    return _result(out.T if out.ndim == 2 else out, dtype)


def batch_slice(x, index: int):
    """The 2-D slice ``x[index]`` of a 3-D tensor; for a TorchUST with a leading batch level a zero-copy view."""
    if not is_sparse(x):
        return x[index]
    ust = x.ust
    fmt = ust.format
    if fmt.batch_levels != 1 or ust.ndim != 3:
        raise UnsupportedOperation(f"ustc.torch.bmm: a 3-D TorchUST needs one leading batch level "
                                   f"(e.g. BatchedCSR), got {fmt}")
    from ..tensor.interop_torch import _unbatched

    buffers = {(k - 1, name): buf[index] for (k, name), buf in ust.raw_buffers.items()}
    sliced = Tensor(_unbatched(fmt), ust.shape[1:], buffers, ust.raw_values[index], device=ust.device,
                    package=ust.package)
    return TorchUST(sliced, dtype=x.dtype)


def dtype_scalar(value, dtype: "torch.dtype"):
    """``value`` as a NumPy scalar of ``dtype`` (keeps ustc.matmul from promoting float32 to float64)."""
    return numpy_dtype(dtype).type(value)
