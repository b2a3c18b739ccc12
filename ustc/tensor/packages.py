"""Arrays of NumPy, PyTorch and CuPy, seen as NumPy without copying.

ustc keeps CPU buffers as NumPy arrays internally; a buffer that came from
torch is a NumPy view of the same memory (``Tensor.numpy()``), and goes back
out as ``torch.from_numpy`` of that view, so data pointers are preserved both
ways. CUDA buffers are CuPy arrays (torch CUDA tensors are viewed through
DLPack).
"""

from __future__ import annotations

import sys

import numpy as np

from ..errors import DeviceError

NUMPY, SCIPY, TORCH, CUPY = "numpy", "scipy", "torch", "cupy"


def is_torch(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def is_cupy(x) -> bool:
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(x, cupy.ndarray)


def host_array(x) -> np.ndarray:
    """A NumPy view of ``x`` (NumPy array, CPU torch tensor, or anything array-like)."""
    if isinstance(x, np.ndarray):
        return x
    if is_torch(x):
        if x.device.type != "cpu":
            raise DeviceError(f"expected a CPU tensor, got one on {x.device}")
        return x.detach().resolve_conj().resolve_neg().numpy()
    if is_cupy(x):
        raise DeviceError("expected a CPU array, got a CuPy (cuda) array")
    return np.asarray(x)


def wrap(a, package: str):
    """``a`` as an array of ``package`` sharing its memory (NumPy for numpy/scipy)."""
    if package == TORCH and isinstance(a, np.ndarray):
        import warnings

        import torch

        with warnings.catch_warnings():  # read-only NumPy views: torch warns, shares anyway
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(a)
    return a


def device_of(x) -> str:
    if is_torch(x):
        return "cuda" if x.device.type == "cuda" else "cpu"
    if is_cupy(x):
        return "cuda"
    return "cpu"
