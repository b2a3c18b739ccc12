"""``TorchUST``: a ``torch.Tensor`` wrapper subclass holding a ustc Tensor in any format.

    >>> import torch, ustc.torch
    >>> W = ustc.torch.TorchUST.from_torch(torch.eye(3).to_sparse_csr())
    >>> (W @ torch.ones(3)).tolist()
    [1.0, 1.0, 1.0]

PyTorch sees a tensor of the right shape, dtype and device; its storage is the
ustc Tensor (``W.ust``), whose buffers are the torch buffers it came from
(zero-copy on the CPU). Calls reach ustc in two places:

* ``__torch_function__`` (above autograd): the matmul family (``dot``, ``mv``,
  ``addmv``, ``mm``, ``addmm``, ``matmul`` / ``@``, ``linear``, ``bmm``,
  ``baddbmm``), run by ``ustc.matmul`` through its plan cache, differentiable
  (``ustc.torch.autograd``);
* ``__torch_dispatch__`` (aten ops, below autograd): views and copies (``t``,
  ``transpose``, ``permute`` of 2-D, ``detach``, ``clone``, ``to`` / ``cpu`` /
  ``cuda``), ``*_like`` and ``new_*`` (dense tensors), element-wise ops and
  ``_foreach_*`` ops on the stored values (``ustc.torch.pointwise``: gradient
  accumulation, clipping and every ``torch.optim`` step keep the pattern), and
  the matmul family again without autograd.

Anything else raises :class:`ustc.UnsupportedOperation` naming the op, unless
dense fallback is on (``set_dense_fallback(True)`` or ``with dense_fallback():``):
then the op runs on dense copies, with one warning per op.
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import numpy as np
import torch
from torch.utils._pytree import tree_map

from ..errors import UnsupportedOperation
from ..tensor import packages
from ..tensor.tensor import Tensor

aten = torch.ops.aten
FUNCTIONS: dict = {}  # torch-level function -> implementation (filled by ustc.torch.ops)
DISPATCH: dict = {}  # aten overload packet -> implementation(func, args, kwargs)
HANDLERS: list = []  # handler(func, args, kwargs) -> result or NotImplemented, tried after DISPATCH
_FALLBACK = {"on": False, "warned": set()}


def torch_dtype(dtype) -> "torch.dtype":
    """The torch dtype of a NumPy dtype (TypeError where torch has none)."""
    try:
        return torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    except TypeError:
        raise TypeError(f"torch has no dtype for NumPy {np.dtype(dtype)}") from None


def numpy_dtype(dtype: "torch.dtype") -> np.dtype:
    return torch.empty(0, dtype=dtype).numpy().dtype


def host(x):
    """A dense torch tensor as the array ustc computes on (NumPy view on the CPU, CuPy on CUDA)."""
    if x.device.type == "cpu":
        return packages.host_array(x)
    import cupy

    return cupy.from_dlpack(x.detach())


def to_torch(a, device=None):
    """A NumPy / CuPy result as a torch tensor sharing its memory (torch tensors pass through)."""
    if isinstance(a, torch.Tensor):
        return a
    if isinstance(a, np.ndarray) or np.isscalar(a):
        return torch.from_numpy(np.asarray(a))
    return torch.from_dlpack(a)


class TorchUST(torch.Tensor):
    """A torch tensor stored as a ustc Tensor (any format); see the module docstring.

    ``TorchUST(t)`` wraps a ``ustc.Tensor`` ``t`` without copying;
    ``TorchUST.from_torch(x)`` views a dense or sparse torch tensor. Gradients
    of a TorchUST that requires grad are TorchUSTs with the same stored pattern.
    """

    @staticmethod
    def __new__(cls, tensor, *, requires_grad: bool = False):
        if isinstance(tensor, TorchUST):
            tensor = tensor.ust
        if not isinstance(tensor, Tensor):
            raise TypeError(f"TorchUST wraps a ustc.Tensor, got {type(tensor).__name__}; "
                            f"use TorchUST.from_torch for torch tensors")
        device = torch.device("cuda" if tensor.device == "cuda" else "cpu")
        self = torch.Tensor._make_wrapper_subclass(cls, tensor.shape, dtype=torch_dtype(tensor.dtype),
                                                   device=device, requires_grad=requires_grad)
        self._ust = tensor
        return self

    def __init__(self, tensor, *, requires_grad: bool = False):
        super().__init__()

    @classmethod
    def from_torch(cls, x, tensor_format=None) -> "TorchUST":
        """View a dense or sparse (COO, CSR, CSC, BSR, BSC) torch tensor; convert when ``tensor_format`` is given.

        Without ``tensor_format`` the buffers are the torch buffers (zero-copy).
        The result is a new leaf: it does not track ``x``'s gradient.
        """
        if isinstance(x, TorchUST):
            return x if tensor_format is None else cls(x.ust.convert(tensor_format))
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"from_torch takes a torch.Tensor, got {type(x).__name__}")
        ust = Tensor.from_package(x.detach())
        if tensor_format is not None:
            ust = ust.convert(tensor_format)
        return cls(ust)

    # -- the stored tensor -----------------------------------------------------------
    @property
    def ust(self) -> Tensor:
        """The ustc Tensor holding the data."""
        return self._ust

    @property
    def tensor_format(self):
        return self._ust.format

    @property
    def nse(self) -> int:
        return self._ust.nse

    @property
    def storage_bytes(self) -> int:
        """Bytes of the index buffers and stored values."""
        return self._ust.nbytes

    def stored_values(self):
        """The values buffer as a torch tensor (shares memory; padding entries included)."""
        values = self._ust._values
        return to_torch(values) if not isinstance(values, torch.Tensor) else values

    def to_dense(self, dtype=None, *, masked_grad=None):
        """The dense torch tensor (differentiable: the gradient keeps this tensor's pattern)."""
        from .autograd import ToDense

        out = ToDense.apply(self)
        return out if dtype is None else out.to(dtype)

    def freeze_zeros_(self) -> "TorchUST":
        """Take the stored entries that are 0 now out of the pattern; returns self.

        Their gradient is 0 from then on and in-place ops (optimizer steps) never
        write them, so they stay 0: a pruned weight stored in a block or n:m
        format keeps its pruning mask. ``reformat_model`` calls this.
        """
        from .pattern import freeze_zeros

        freeze_zeros(self._ust)
        return self

    def pattern_mask(self):
        """A dense bool tensor of this shape: True where an entry is in the pattern (stored, not frozen)."""
        from .pattern import dense_mask

        return dense_mask(self._ust, self.device)

    def with_values(self, values) -> "TorchUST":
        """A TorchUST with this pattern and ``values`` (1-D, one per stored position; differentiable)."""
        from .autograd import WithValues

        return WithValues.apply(self, values)

    def __repr__(self, *, tensor_contents=None) -> str:
        grad = ", requires_grad=True" if self.requires_grad else ""
        return (f"TorchUST(shape={tuple(self.shape)}, dtype={self.dtype}, device={self.device}, "
                f"format={format_label(self._ust.format)}, nse={self._ust.nse}{grad})")

    # -- interception ------------------------------------------------------------------
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        impl = FUNCTIONS.get(func)
        if impl is not None:
            return impl(*args, **(kwargs or {}))
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        impl = DISPATCH.get(func.overloadpacket)
        for handler in ([impl] if impl is not None else []) + HANDLERS:
            result = handler(func, args, kwargs)
            if result is not NotImplemented:
                return result
        return fallback(func, args, kwargs)



def wrap_like(pattern: Tensor, values, *, requires_grad: bool = False) -> TorchUST:
    """A TorchUST with ``pattern``'s format and index buffers and the given values (a torch tensor)."""
    from .pattern import share

    flat = values.detach().reshape(pattern._values.shape)
    array = host(flat)
    ust = Tensor(pattern.format, pattern.shape, pattern._buffers, array, device=pattern.device,
                 package=pattern.package)
    return TorchUST(share(pattern, ust), requires_grad=requires_grad)


# -- dense fallback ------------------------------------------------------------------------
def set_dense_fallback(enabled: bool = True) -> bool:
    """Let unsupported ops run on dense copies (one warning per op); returns the previous setting."""
    previous, _FALLBACK["on"] = _FALLBACK["on"], bool(enabled)
    return previous


@contextlib.contextmanager
def dense_fallback(enabled: bool = True):
    """``with dense_fallback():`` — :func:`set_dense_fallback` for a block."""
    previous = set_dense_fallback(enabled)
    try:
        yield
    finally:
        set_dense_fallback(previous)


def format_label(fmt) -> str:
    """A format's name (``CSR``, ``BSR(2, 2)``, ...) when it is a named one, else its DSL text."""
    if fmt.name:
        return fmt.name
    from ..tensor.interop import plain_format

    plain = plain_format(fmt)
    for label, candidate in _named_2d():
        if plain == plain_format(candidate):
            return label
    return str(fmt)


@functools.lru_cache(maxsize=1)
def _named_2d():
    from .. import formats

    named = [(nf.name, nf.format()) for nf in formats.NAMED if nf.name not in ("BSR", "BSC", "Structured", "DELTA")]
    sizes = (1, 2, 3, 4, 8, 16)
    named += [(f"{k}({b}, {c})", getattr(formats, k)(b, c)) for k in ("BSR", "BSC") for b in sizes for c in sizes]
    named += [(f"Structured({n}, {m})", formats.Structured(n, m)) for m in (2, 4, 8, 16) for n in range(m + 1)]
    named += [(f"DELTA({b})", formats.DELTA(b)) for b in (1, 2, 4, 8, 16, 32)]
    return named + [(f"DELTA({b}, packed)", formats.DELTA(b, True)) for b in (1, 2, 4, 8)]


def _describe(args) -> str:
    fmts = [format_label(a._ust.format) for a in _flat(args) if isinstance(a, TorchUST)]
    return ", ".join(dict.fromkeys(fmts))


def _flat(args):
    out = []
    tree_map(lambda a: out.append(a), args)
    return out


def fallback(func, args, kwargs, why: str = ""):
    """The end of dispatch for an op TorchUST does not implement: raise UnsupportedOperation naming it
    (``why`` says what is missing), or, under dense fallback, run it on dense copies with one warning per op."""
    name = str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket") else str(func)
    mutates = getattr(func, "_schema", None) is not None and func._schema.is_mutable
    if not _FALLBACK["on"] or mutates:
        reasons = [why] if why else []
        reasons += ["in-place ops on TorchUST are not supported"] if mutates and _FALLBACK["on"] else []
        why = f" ({'; '.join(reasons)})" if reasons else ""
        raise UnsupportedOperation(
            f"ustc.torch: aten.{name} is not supported on TorchUST tensors (format {_describe(args)}){why}; "
            f"call .to_dense() first, or allow dense fallback with ustc.torch.set_dense_fallback(True)")
    if name not in _FALLBACK["warned"]:
        _FALLBACK["warned"].add(name)
        warnings.warn(f"ustc.torch: aten.{name} has no TorchUST implementation; computing it on dense "
                      f"copies (dense fallback is on)", UserWarning, stacklevel=3)
    dense = lambda a: to_torch(a._ust.to_dense()) if isinstance(a, TorchUST) else a  # noqa: E731
    return func(*tree_map(dense, args), **tree_map(dense, kwargs))
