"""Moving tensors between the host and a CUDA device (CuPy arrays on the device)."""

from __future__ import annotations

from ..errors import DeviceError
from . import packages


def _cupy():
    try:
        import cupy
    except ImportError:
        raise DeviceError("moving a tensor to 'cuda' needs CuPy: pip install 'ustc[gpu]'") from None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise DeviceError("no CUDA device is available")
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise DeviceError(f"no CUDA device is available ({exc})") from None
    return cupy


def to_device(t, device: str):
    """``t`` with every buffer on ``device``; a copy unless it is already there."""
    from .tensor import Tensor

    if device not in ("cpu", "cuda"):
        raise DeviceError(f"unknown device {device!r}: use 'cpu' or 'cuda'")
    if device == t.device:
        return t
    if device == "cuda":
        cupy = _cupy()
        move, package = cupy.asarray, packages.CUPY
    else:
        import cupy

        move, package = cupy.asnumpy, packages.NUMPY
    buffers = {key: move(b) for key, b in t._buffers.items()}
    return Tensor(t.format, t.shape, buffers, move(t._values), device=device, package=package)
