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
:func:`bfloat16_product` gives each one a float32 twin (refreshed before every
execute, index buffers shared), the product runs in float32, and the result is
rounded to nearest even back to bfloat16 in the operands' package: a torch
tensor (a TorchUST for a sparse result) or an ml_dtypes array. A bfloat16 ``c``
is updated in place and returned, a bfloat16 ``out`` is written; the result is
bfloat16 where the operands promote to it (bfloat16 with integers), float32 or
wider where one of them is (as torch promotes).

:func:`computed_in` uses the same twins to compute a product in a wider dtype
than its operands' (nvmath-python's ``compute_type``), the result cast back.
"""

from __future__ import annotations

import sys

import numpy as np

from ..errors import UnsupportedOperation
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


def require_bfloat16() -> None:
    """Make NumPy know the ``"bfloat16"`` dtype (ml_dtypes'); UnsupportedOperation without ml_dtypes."""
    try:
        import ml_dtypes  # noqa: F401 - registers the dtype name
    except ImportError:
        raise UnsupportedOperation("bfloat16 operands that are not CPU torch tensors need the ml_dtypes package "
                                   "(pip install ml_dtypes): ustc names their dtype through it") from None


def bits_to_float32(bits: np.ndarray, out: np.ndarray) -> np.ndarray:
    """bfloat16 numbers given as their 16 bits (uint16 / int16) into the float32 array ``out``
    (exact: a bfloat16 is the upper half of a float32)."""
    np.left_shift(bits.view(np.uint16), np.uint32(16), out=out.view(np.uint32), dtype=np.uint32)
    return out


class _Twin:
    """A twin of one operand in the dtype ``dtype``: ``operand`` is what the product reads;
    ``refresh()`` copies the operand's current values into it. ``kind``: ``"torch"`` or
    ``"ml_dtypes"`` for a bfloat16 operand (see :func:`bfloat16_kind`), ``"cast"`` for any other
    (a NumPy / torch array, a SciPy / torch sparse object or a ustc Tensor)."""

    def __init__(self, x, kind: str, dtype=np.float32):
        dtype = np.dtype(dtype)
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(x, torch.Tensor) and x.layout == torch.strided and not _is_torch_ust(x):
            self.operand = torch.empty(tuple(x.shape), dtype=torch.from_numpy(np.empty(0, dtype)).dtype)
            self._copy = lambda: self.operand.copy_(x)
        elif isinstance(x, np.ndarray):
            self.operand = np.empty(x.shape, dtype=dtype)
            self._copy = lambda: np.copyto(self.operand, x, casting="unsafe")
        else:
            view = _bits_view(x) if kind == "torch" else _sparse_view(x)
            values = packages.host_array(view.values)
            wide = np.empty(values.shape, dtype=dtype)
            buffers = {key: packages.host_array(buf) for key, buf in view.buffers.items()}
            self.operand = Tensor(view.format, view.shape, buffers, wide, package=view.package)
            self._copy = (lambda: bits_to_float32(values, wide)) if kind == "torch" else (
                lambda: np.copyto(wide, values, casting="unsafe"))

    def refresh(self) -> None:
        self._copy()


def _torch():
    import torch

    return torch


def _is_torch_ust(x) -> bool:
    """A TorchUST (checked without importing ustc.torch: none exists before it is imported)."""
    module = sys.modules.get("ustc.torch.subclass")
    return module is not None and isinstance(x, module.TorchUST)


def _sparse_view(x) -> Tensor:
    """A sparse operand as a ustc Tensor (zero-copy): itself, a TorchUST's, or a package's view."""
    if isinstance(x, Tensor):
        return x
    return x.ust if _is_torch_ust(x) else Tensor.from_package(x)


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


class TwinnedProduct:
    """``a @ b`` (with ``c``, ``out``) computed through twins of some operands.

    ``kinds`` names, per operand of ``(a, b, c, out)``, the kind of twin it gets (None: it
    is used as it is); ``dtype`` is the twins' dtype; ``result`` how a result that is neither
    ``c`` nor ``out`` is returned: ``"bfloat16-torch"`` / ``"bfloat16-ml_dtypes"``, a NumPy dtype
    to cast to, or None (as computed). ``operands`` is ``(a, b, c, out)`` with the twins in
    place; call :meth:`refresh` before each execute (the constructor refreshes once) and pass
    what the product returns to :meth:`finish`: ``out`` itself where given (written),
    ``c`` itself where ``c`` is dense and twinned (updated in place), else the result."""

    def __init__(self, a, b, c, out, kinds, dtype, result):
        self.raw, self.result = (a, b, c, out), result
        self.twins = [_Twin(x, k, dtype) if k else None for x, k in zip(self.raw, kinds)]
        self.operands = tuple(t.operand if t else x for x, t in zip(self.raw, self.twins))
        self.c_in_place = self.twins[2] is not None and not isinstance(self.operands[2], Tensor)
        self.refresh()

    def refresh(self) -> None:
        for twin in self.twins[:3]:   # out is only written
            if twin is not None:
                twin.refresh()

    def finish(self, result):
        """The result as the caller's types (see the class docstring)."""
        out, c = self.raw[3], self.raw[2]
        if self.twins[3] is not None:
            _store(out, self.operands[3])
            return out
        if out is None and self.c_in_place:
            _store(c, self.operands[2])
            return c
        return result if self.result is None else _converted(result, self.result)


def bfloat16_product(a, b, c=None, out=None, target: str | None = None) -> TwinnedProduct | None:
    """When any of the operands is a CPU bfloat16 one: float32 twins of the bfloat16 operands,
    the result rounded back to bfloat16 where the operands promote to it (module docstring).
    None for the ``"cuda"`` target when the bfloat16 operands are ml_dtypes ones: its generated
    kernels read and store bfloat16 themselves (``codegen.cuda_bfloat16``); CPU torch.bfloat16
    tensors, which ustc reads only through twins, keep them there."""
    kinds = [bfloat16_kind(x) for x in (a, b, c, out)]
    if not any(kinds) or (target == "cuda" and "torch" not in kinds):
        return None
    narrow = all(_promotes_to_bfloat16(x) for x in (a, b, c))
    kind = next(k for k in kinds if k is not None)
    return TwinnedProduct(a, b, c, out, kinds, np.float32, f"bfloat16-{kind}" if narrow else None)


def wide_out(out, dtype=np.float32):
    """``(buffer, store)`` for a dense ``out`` of a narrow dtype (NumPy or torch): ``buffer`` is a
    new array of ``out``'s shape and package in ``dtype`` to compute into, ``store()`` rounds it
    into ``out`` (nearest even)."""
    twin = _Twin(out, "cast", dtype)
    return twin.operand, lambda: _store(out, twin.operand)


def computed_in(a, b, c, out, dtype) -> TwinnedProduct | None:
    """A product computed in the wider ``dtype`` (nvmath-python's ``compute_type``) with results
    of the operands' own type: twins in ``dtype`` of every operand of another dtype, the result
    cast back (``c`` updated in place, ``out`` written). None when no operand needs a twin."""
    dtype = np.dtype(dtype)
    kinds = [None if x is None or _dtype(x) == dtype else "cast" for x in (a, b, c, out)]
    if not any(kinds):
        return None
    natural = np.result_type(*[_dtype(x) for x in (a, b, c) if x is not None])
    return TwinnedProduct(a, b, c, out, kinds, dtype, natural)


def _dtype(x) -> np.dtype:
    return np.dtype(str(x.dtype).replace("torch.", ""))


def _store(target, wide) -> None:
    """Round the float32 ``wide`` into the bfloat16 dense ``target`` (nearest even)."""
    if packages.is_torch(target):
        target.copy_(wide if packages.is_torch(wide) else _torch().from_numpy(np.asarray(wide)))
    else:
        np.copyto(target, packages.host_array(wide), casting="unsafe")


def _converted(result, to):
    """A result (dense array or ustc Tensor) as ``to``: ``"bfloat16-torch"`` (rounded to nearest
    even; a bfloat16 TorchUST for a sparse result), ``"bfloat16-ml_dtypes"``, or a NumPy dtype,
    in the result's package."""
    if to == "bfloat16-torch":
        return _to_torch_bfloat16(result)
    dtype = _ml_bfloat16() if to == "bfloat16-ml_dtypes" else np.dtype(to)
    if isinstance(result, Tensor):
        buffers = {key: packages.host_array(buf) for key, buf in result.buffers.items()}
        values = packages.host_array(result.values).astype(dtype)
        return Tensor(result.format, result.shape, buffers, values, package=result.package)
    if packages.is_torch(result):
        return result.to(_torch().from_numpy(np.empty(0, dtype)).dtype)
    return packages.host_array(result).astype(dtype)


def _to_torch_bfloat16(result):
    """A float32 result as torch.bfloat16 (a TorchUST of the values' bits for a sparse one)."""
    torch = _torch()
    if isinstance(result, Tensor):
        values = packages.host_array(result.values)
        buffers = {key: packages.host_array(buf) for key, buf in result.buffers.items()}
        bits = torch.from_numpy(np.ascontiguousarray(values)).to(torch.bfloat16).view(torch.uint16).numpy()
        from ..torch.subclass import TorchUST

        return TorchUST(Tensor(result.format, result.shape, buffers, bits, package=packages.TORCH),
                        dtype=torch.bfloat16)
    if packages.is_torch(result):
        return result.to(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(packages.host_array(result))).to(torch.bfloat16)


def _ml_bfloat16() -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)
