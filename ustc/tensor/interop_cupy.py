"""CuPy (and torch CUDA through DLPack) views: device-resident tensors.

The buffers stay CuPy arrays on the device; ``device`` is ``"cuda"``.
Conversion of device tensors currently runs on the host (``Tensor.to``);
the CUDA target issue moves it to the device.
"""

from __future__ import annotations

from ..errors import UnsupportedOperation
from ..format.ir import TensorFormat
from ..format.levels import LevelFormat
from . import packages
from .interop import _dims, _root, _spec, memory_order
from .tensor import Tensor

C, D = LevelFormat.COMPRESSED, LevelFormat.DENSE


def from_cupy(x, package: str = packages.CUPY) -> Tensor:  # pragma: no cover - needs a GPU
    import cupyx.scipy.sparse as csp

    if not csp.issparse(x):
        order = memory_order(x)
        moved = x.transpose(order)
        if not moved.flags.c_contiguous:
            order, moved = list(range(x.ndim)), x.copy(order="C")
        dims = _dims(x.ndim)
        return Tensor(TensorFormat(dims, {dims[d]: D for d in order}), x.shape, {}, moved.reshape(-1),
                      device="cuda", package=package)
    i, j = _dims(2)
    if x.format in ("csr", "csc"):
        unique = bool(x.has_canonical_format)
        ordered = unique or bool(x.has_sorted_indices)
        outer, inner = (i, j) if x.format == "csr" else (j, i)
        fmt = TensorFormat([i, j], {outer: D, inner: _spec(C, ordered, unique)})
        return Tensor(fmt, x.shape, {(1, "pos"): x.indptr, (1, "crd"): x.indices}, x.data,
                      device="cuda", package=package, origin={"class": type(x)})
    if x.format == "coo":
        canonical = bool(x.has_canonical_format)
        fmt = TensorFormat([i, j], {i: _spec(C, canonical, False), j: _spec(LevelFormat.SINGLETON, canonical,
                                                                             canonical)})
        buffers = {(0, "pos"): _device_root(x.nnz, x.row), (0, "crd"): x.row, (1, "crd"): x.col}
        return Tensor(fmt, x.shape, buffers, x.data, device="cuda", package=package, origin={"class": type(x)})
    if x.format == "dia":
        fmt = TensorFormat([i, j], {j - i: C, j: LevelFormat.RANGE})
        buffers = {(0, "pos"): _device_root(len(x.offsets), x.offsets), (0, "crd"): x.offsets}
        return Tensor(fmt, x.shape, buffers, x.data.reshape(-1), device="cuda", package=package,
                      origin={"class": type(x)})
    raise UnsupportedOperation(f"CuPy '{x.format}' matrices have no zero-copy ustc view")


def _device_root(nnz: int, like):  # pragma: no cover - needs a GPU
    import cupy

    return cupy.asarray(_root(nnz, like.get()[:0]))


def from_torch_cuda(x) -> Tensor:  # pragma: no cover - needs a GPU
    import cupy
    import torch

    if x.layout != torch.strided:
        raise UnsupportedOperation("sparse torch CUDA tensors are viewed through CuPy once the CUDA target lands")
    return from_cupy(cupy.from_dlpack(x.detach()), package=packages.TORCH)


def to_cupy(t: Tensor):  # pragma: no cover - needs a GPU
    from .tensor import _dense_permutation

    if _dense_permutation(t.format) is not None:
        return t.to_dense()
    import cupyx.scipy.sparse as csp

    b, v = t._buffers, t._values
    cls = t._origin.get("class")
    if cls is csp.coo_matrix:
        return cls((v, (b[(0, "crd")], b[(1, "crd")])), shape=t.shape)
    if cls is csp.dia_matrix:
        return cls((v.reshape(-1, t.shape[1]), b[(0, "crd")]), shape=t.shape)
    if cls in (csp.csr_matrix, csp.csc_matrix):
        return cls((v, b[(1, "crd")], b[(1, "pos")]), shape=t.shape)
    raise UnsupportedOperation(f"no CuPy class holds format {t.format}")
