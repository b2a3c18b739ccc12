"""float16 and bfloat16 operands of a product on the CPU.

Numba has no CPU float16 arithmetic, so a product with a float16 operand runs
in float32: each float16 operand gets a float32 twin (a sparse one keeps its
index buffers and gets new values), refreshed from the operand at every
execute, so in-place changes between executes are seen; the result is stored
back in float16 (accumulation in float32, as the issue's users expect from a
mixed-precision product).

bfloat16 has no NumPy dtype, so it reaches ``ustc.matmul`` as torch.bfloat16
tensors (dense, torch sparse, or a :class:`ustc.torch.TorchUST`, whose ustc
Tensor holds the values' uint16 bits) or, where the optional ml_dtypes package
is installed, as NumPy arrays / ustc Tensors of ``ml_dtypes.bfloat16``.
:class:`Bfloat16Product` gives each one a float32 twin (refreshed before every
execute, index buffers shared), the product runs in float32, and the result is
rounded to nearest even back to bfloat16 in the operands' package: a torch
tensor (a TorchUST for a sparse result) or an ml_dtypes array. A bfloat16 ``c``
is updated in place and returned, a bfloat16 ``out`` is written; the result is
bfloat16 where the operands promote to it (bfloat16 with integers), float32 or
wider where one of them is (as torch promotes).
"""

from __future__ import annotations

import sys

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


# -- bfloat16 -------------------------------------------------------------------------------------
def bfloat16_kind(x) -> str | None:
    """``"torch"`` for a CPU torch.bfloat16 tensor (dense, sparse or TorchUST), ``"ml_dtypes"`` for a
    NumPy array or ustc Tensor of ml_dtypes.bfloat16, else None (CUDA tensors stay as they are)."""
    if x is None:
        return None
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return "torch" if x.dtype == torch.bfloat16 and x.device.type == "cpu" else None
    ml = sys.modules.get("ml_dtypes")   # not imported: no array can hold its bfloat16 (one-shot calls stay cheap)
    if ml is None or not (isinstance(x, np.ndarray) or (isinstance(x, Tensor) and x.device == "cpu")):
        return None
    return "ml_dtypes" if x.dtype == ml.bfloat16 else None


def bits_to_float32(bits: np.ndarray, out: np.ndarray) -> np.ndarray:
    """bfloat16 numbers given as their 16 bits (uint16 / int16) into the float32 array ``out``
    (exact: a bfloat16 is the upper half of a float32)."""
    np.left_shift(bits.view(np.uint16), np.uint32(16), out=out.view(np.uint32), dtype=np.uint32)
    return out


class _Twin:
    """A float32 twin of one bfloat16 operand: ``operand`` is what the product reads;
    ``refresh()`` copies the operand's current values into it."""

    def __init__(self, x, kind: str):
        if kind == "torch" and x.layout == _torch().strided and not _is_torch_ust(x):
            self.operand = _torch().empty(tuple(x.shape), dtype=_torch().float32)
            self._copy = lambda: self.operand.copy_(x)
        elif kind == "ml_dtypes" and isinstance(x, np.ndarray):
            self.operand = np.empty(x.shape, dtype=np.float32)
            self._copy = lambda: np.copyto(self.operand, x)
        else:
            view = _bits_view(x) if kind == "torch" else x
            values = packages.host_array(view.values)
            wide = np.empty(values.shape, dtype=np.float32)
            buffers = {key: packages.host_array(buf) for key, buf in view.buffers.items()}
            self.operand = Tensor(view.format, view.shape, buffers, wide, package=view.package)
            self._copy = (lambda: bits_to_float32(values, wide)) if kind == "torch" else (
                lambda: np.copyto(wide, values))

    def refresh(self) -> None:
        self._copy()


def _torch():
    import torch

    return torch


def _is_torch_ust(x) -> bool:
    """A TorchUST (checked without importing ustc.torch: none exists before it is imported)."""
    module = sys.modules.get("ustc.torch.subclass")
    return module is not None and isinstance(x, module.TorchUST)


def _bits_view(x) -> Tensor:
    """A ustc Tensor viewing a sparse torch.bfloat16 tensor's indices, its values as 16-bit
    integers (the bfloat16 bits), sharing memory. A TorchUST already holds one."""
    if _is_torch_ust(x):
        return x.ust
    torch = _torch()
    if x.layout == torch.sparse_coo:
        x = x if x.is_coalesced() else x.coalesce()   # ustc views coalesced COO; a copy otherwise
        bits = torch.sparse_coo_tensor(x._indices(), x._values().view(torch.int16), x.shape, is_coalesced=True,
                                       check_invariants=False)   # x's own indices, checked by ustc as any
    else:
        compressed, plain = ((x.crow_indices(), x.col_indices()) if x.layout in (torch.sparse_csr, torch.sparse_bsr)
                             else (x.ccol_indices(), x.row_indices()))
        bits = torch.sparse_compressed_tensor(compressed, plain, x.values().view(torch.int16), x.shape,
                                              layout=x.layout, check_invariants=False)
    return Tensor.from_package(bits)


def _promotes_to_bfloat16(x) -> bool:
    """Whether ``x`` leaves a bfloat16 product bfloat16 (bfloat16 itself, integers, booleans)."""
    if x is None or bfloat16_kind(x) is not None:
        return True
    name = str(x.dtype).replace("torch.", "")
    return name == "bool" or name.startswith(("int", "uint"))


class Bfloat16Product:
    """``a @ b`` (with ``c``, ``out``) where some operand is bfloat16: see the module docstring.

    ``operands`` is ``(a, b, c, out)`` with float32 twins in place of the bfloat16 ones;
    call :meth:`refresh` before each execute (the constructor refreshes once) and pass what
    the float32 product returns to :meth:`finish`, which returns the bfloat16 result
    (``c`` itself where ``c`` was updated in place, ``out`` itself where given)."""

    def __init__(self, a, b, c=None, out=None):
        self.kinds = [bfloat16_kind(x) for x in (a, b, c, out)]
        self.kind = next(k for k in self.kinds if k is not None)
        self.twins = [_Twin(x, k) if k else None for x, k in zip((a, b, c, out), self.kinds)]
        self.raw = (a, b, c, out)
        self.operands = tuple(t.operand if t else x for x, t in zip(self.raw, self.twins))
        self.c_in_place = self.twins[2] is not None and not isinstance(self.operands[2], Tensor)
        self.narrow = all(_promotes_to_bfloat16(x) for x in (a, b, c))
        self.refresh()

    def refresh(self) -> None:
        for twin in self.twins[:3]:   # out is only written
            if twin is not None:
                twin.refresh()

    def finish(self, result):
        """The float32 ``result`` as bfloat16 (see the class docstring)."""
        out, c = self.raw[3], self.raw[2]
        if self.twins[3] is not None:
            _store(out, self.operands[3])
            return out
        if out is None and self.c_in_place:
            _store(c, self.operands[2])
            return c
        return _narrowed(result, self.kind) if self.narrow else result


def bfloat16_product(a, b, c=None, out=None) -> Bfloat16Product | None:
    """A :class:`Bfloat16Product` when any of the operands is a CPU bfloat16 one, else None."""
    if not any(bfloat16_kind(x) for x in (a, b, c, out)):
        return None
    return Bfloat16Product(a, b, c, out)


def _store(target, wide) -> None:
    """Round the float32 ``wide`` into the bfloat16 dense ``target`` (nearest even)."""
    if packages.is_torch(target):
        target.copy_(wide if packages.is_torch(wide) else _torch().from_numpy(np.asarray(wide)))
    else:
        np.copyto(target, packages.host_array(wide), casting="unsafe")


def _narrowed(result, kind: str):
    """A float32 result (dense array or ustc Tensor) rounded to bfloat16 in ``kind``'s package."""
    torch = _torch() if kind == "torch" else None
    if isinstance(result, Tensor):
        values = packages.host_array(result.values)
        buffers = {key: packages.host_array(buf) for key, buf in result.buffers.items()}
        if kind == "ml_dtypes":
            return Tensor(result.format, result.shape, buffers, values.astype(_ml_bfloat16()),
                          package=result.package)
        bits = torch.from_numpy(np.ascontiguousarray(values)).to(torch.bfloat16).view(torch.uint16).numpy()
        from ..torch.subclass import TorchUST

        return TorchUST(Tensor(result.format, result.shape, buffers, bits, package=packages.TORCH),
                        dtype=torch.bfloat16)
    if packages.is_torch(result):
        return result.to(_torch().bfloat16)
    array = packages.host_array(result)
    if kind == "ml_dtypes":
        return array.astype(_ml_bfloat16())
    return torch.from_numpy(np.ascontiguousarray(array)).to(torch.bfloat16)


def _ml_bfloat16() -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)
