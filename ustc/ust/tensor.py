"""``Tensor``: a :class:`ustc.Tensor` with nvmath-python's UST attributes and methods.

It is a subclass, so every ustc operation accepts it; the nvmath-python names sit
beside ustc's (``extents`` beside ``shape``, ``val`` beside ``values``,
``tensor_format`` beside ``format``). Where both libraries use one name
differently, the nvmath-python form is taken and the ustc form still works:
``convert(tensor_format=..., index_type=..., dtype=...)`` also takes ustc's
positional format, ``get_value([i, j])`` also takes ``get_value(i, j)``,
``to(0)`` also takes ``to("cuda")``, ``draw(name=None)`` returns a PIL image
(and saves it when given a name). ``pos(k)`` / ``crd(k)`` return None for a
level without that buffer, as in nvmath-python.

Kernels: ``set_kernel(fn, with_indices=...)`` and ``run_kernel()`` run ``fn``
through :meth:`ustc.Tensor.apply` (a Numba-compiled loop on the host), so ``fn``
must be a Python function Numba can compile; LTO-IR bytes are refused.
"""

from __future__ import annotations

import io
import math

import numpy as np

from ..errors import StorageError, UnsupportedOperation, require
from ..tensor import packages
from ..tensor.tensor import Tensor as _UstcTensor
from . import _printing
from .formats import TensorFormat, as_ustc_format

__all__ = ["Tensor"]

_STATE = {"_nv_format": None, "_nv_index_type": None, "_nv_kernel": None, "_nv_with_indices": False,
          "_nv_base": None, "_nv_converted": False}


def _adopt(t: _UstcTensor, like: "Tensor | None" = None, **state) -> "Tensor":
    """``t``'s storage as a compat Tensor (shared, not copied); state from ``like`` then ``state``."""
    new = object.__new__(Tensor)
    new.__dict__.update(t.__dict__)
    for key, default in _STATE.items():
        new.__dict__[key] = like.__dict__.get(key, default) if like is not None else default
    new.__dict__.update(state)
    return new


def _index_dtype(index_type) -> np.dtype:
    dtype = np.dtype(index_type)
    if dtype.kind not in "iu":
        raise TypeError(f"an index type must be an integer type, got {index_type!r}")
    return dtype


def _device_name(device_id) -> str:
    if device_id in ("cpu", "cuda"):
        return device_id
    if isinstance(device_id, int) and not isinstance(device_id, bool):
        return "cuda"
    raise ValueError(f"device_id must be 'cpu' or a CUDA device ordinal, got {device_id!r}")


class Tensor(_UstcTensor):
    """A ustc Tensor seen through nvmath-python's UST interface (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        if len(args) == 1 and not {"shape", "buffers", "values"} & kwargs.keys():
            self._init_empty(*args, **kwargs)
        else:
            super().__init__(*args, **kwargs)
        for key, default in _STATE.items():
            self.__dict__.setdefault(key, default)

    def _init_empty(self, extents, *, tensor_format=None, index_type="int32", dtype="float32", package=None,
                    options=None, stream=None):
        """nvmath-python's constructor: a tensor of ``extents`` with no stored entries."""
        if tensor_format is None:
            raise TypeError("Tensor(extents, tensor_format=...): a tensor format is required")
        if isinstance(tensor_format, str) or not hasattr(tensor_format, "num_dimensions"):
            raise TypeError(f"tensor_format must be a TensorFormat, got {tensor_format!r}")
        fmt = as_ustc_format(tensor_format)
        extents = tuple(int(n) for n in extents)
        if len(extents) != fmt.ndim:
            raise TypeError(f"{len(extents)} extents given for a {fmt.ndim}-dimensional format")
        if math.prod(extents) <= 0:
            raise TypeError(f"extents {extents} hold no elements")
        coords = [np.zeros(0, dtype=np.int64)] * len(extents)
        empty = _UstcTensor.from_coo(coords, np.zeros(0, dtype=np.dtype(dtype)), extents, fmt)
        self.__dict__.update(empty.__dict__)
        if package is not None and getattr(package, "__name__", package) == "torch":
            self._package = packages.TORCH
        self._nv_format = tensor_format if isinstance(tensor_format, TensorFormat) else None
        self._nv_index_type = _index_dtype(index_type)
        self._cast_indices(self._nv_index_type)

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_package(cls, tensor, stream=None, *, validate: bool = False) -> "Tensor":
        """A zero-copy view of a NumPy, SciPy, PyTorch or CuPy tensor (``stream`` is accepted
        and unused: host work is synchronous)."""
        return _adopt(_UstcTensor.from_package(tensor, validate=validate), _nv_base=tensor)

    @classmethod
    def from_file(cls, filename, stream=None) -> "Tensor":
        """The tensor in a Matrix Market (``.mtx``) or FROSTT (``.tns``) file, in COO format."""
        from ..formats import COO
        from ..tensor.io import from_file

        t = from_file(filename)
        if t.ndim >= 2 and t.format != COO(t.ndim):
            t = t.convert(COO(t.ndim))
        return _adopt(t)

    def to_package(self, options=None, stream=None):
        """The tensor as its package's type, sharing memory."""
        return super().to_package()

    # -- nvmath-python's attributes --------------------------------------------------------------
    @property
    def extents(self) -> list[int]:
        return list(self.shape)

    @property
    def levels(self) -> list[int]:
        """The extent of each level."""
        return list(self.level_shape)

    @property
    def size(self) -> int:
        """The number of elements of the dense envelope (product of the extents)."""
        return math.prod(self.shape)

    @property
    def num_dimensions(self) -> int:
        return self.ndim

    @property
    def num_levels(self) -> int:
        return self.format.nlevels

    @property
    def tensor_format(self) -> TensorFormat:
        """The format as an nvmath-style :class:`ustc.ust.TensorFormat`."""
        fmt = self._nv_format
        if fmt is None or fmt.ustc != self.format:
            from .named import known_name

            fmt = TensorFormat.from_ustc(self.format, known_name(self.format))
            self._nv_format = fmt
        return fmt

    @property
    def index_type(self) -> np.dtype:
        """The dtype of the positions and coordinates (an int32 / int64 choice when there are none)."""
        if self._nv_index_type is not None:
            return self._nv_index_type
        dtypes = [b.dtype for (k, name), b in self._buffers.items() if not self._typed(k, name)]
        if dtypes:
            return max(dtypes, key=lambda d: (d.itemsize, d.kind == "i"))
        fits = max(self.shape, default=0) <= np.iinfo(np.int32).max
        return np.dtype(np.int32 if fits else np.int64)

    @property
    def val(self):
        """The stored values (a flat array of the tensor's package)."""
        return self.values

    @property
    def device_id(self):
        """``"cpu"`` or the CUDA device ordinal."""
        if self.device == "cpu":
            return "cpu"
        return int(getattr(getattr(self._values, "device", None), "id", 0))

    @property
    def base(self):
        """The package tensor this one views (``from_package``), else None."""
        return self._nv_base

    def pos(self, level: int):
        """The positions of ``level``, or None when the level has none."""
        try:
            return super().pos(level)
        except (StorageError, IndexError):
            return None

    def crd(self, level: int):
        """The coordinates of ``level``, or None when the level has none."""
        try:
            return super().crd(level)
        except (StorageError, IndexError):
            return None

    def get_value(self, *indices, stream=None):
        """The value stored at ``indices`` (``get_value([i, j])`` or ``get_value(i, j)``), else None."""
        if len(indices) == 1 and isinstance(indices[0], (list, tuple, np.ndarray)):
            indices = tuple(indices[0])
        return super().get_value(*(int(c) for c in indices))

    # -- conversion and copies -----------------------------------------------------------------------
    def convert(self, tensor_format=None, *, index_type=None, dtype=None, copy=None, stream=None,
                prune: bool = False) -> "Tensor":
        """A new tensor holding this one in another format, index type and/or value dtype (each
        defaults to this tensor's). As in nvmath-python the result is always a new tensor: when
        nothing changes it is :meth:`clone` (own buffers, a set kernel shared). ``copy=False``
        (ustc's own choice) returns this tensor itself in that case instead."""
        fmt = self.format if tensor_format is None else as_ustc_format(tensor_format)
        index = self.index_type if index_type is None else _index_dtype(index_type)
        values_dtype = self.dtype if dtype is None else np.dtype(dtype)
        if fmt == self.format and index == self.index_type and values_dtype == self.dtype:
            if copy is False:
                return self
            nv_format = tensor_format if isinstance(tensor_format, TensorFormat) else self._nv_format
            return _adopt(self.clone(), self, _nv_base=None, _nv_format=nv_format, _nv_index_type=index,
                          _nv_converted=True)
        t = super().convert(fmt, prune=prune) if fmt != self.format else self.copy()
        nv_format = tensor_format if isinstance(tensor_format, TensorFormat) else (
            self._nv_format if tensor_format is None else None)
        out = _adopt(t, _nv_format=nv_format, _nv_index_type=index, _nv_converted=True)
        out._cast_indices(index)
        if values_dtype != out.dtype:
            out._values = out._values.astype(values_dtype)
        return out

    def _typed(self, k: int, name: str) -> bool:
        """A buffer whose level fixes its own dtype (packed delta words)."""
        lv_type = self.format.levels[k].type
        return name == "crd" and getattr(lv_type, "packed", False)

    def _cast_indices(self, index: np.dtype) -> None:
        cast = {}
        for (k, name), b in self._buffers.items():
            if b.dtype == index or self._typed(k, name):
                cast[(k, name)] = b
                continue
            info = np.iinfo(index)
            if b.size and (int(b.min()) < info.min or int(b.max()) > info.max):
                raise StorageError(f"{name}[{k}] holds values in [{int(b.min())}, {int(b.max())}], "
                                   f"outside the index type {index}")
            cast[(k, name)] = b.astype(index)
        self._buffers = cast

    def clone(self, stream=None) -> "Tensor":
        """A deep copy (own positions, coordinates and values) that views no package tensor;
        a kernel set on this tensor is shared."""
        return _adopt(self.copy(), self, _nv_base=None)

    def copy_(self, src, stream=None) -> None:
        """Copy ``src``'s positions, coordinates and values into this tensor's buffers (in place).
        ``src`` must have the same format, extents, index type, dtype and stored structure."""
        for what, mine, theirs in (("format", self.format, src.format), ("extents", self.extents, src.extents),
                                   ("index type", self.index_type, src.index_type),
                                   ("dtype", self.dtype, src.dtype)):
            if mine != theirs:
                raise ValueError(f"copy_: the source's {what} ({theirs}) differs from this tensor's ({mine})")
        if {k: b.shape for k, b in self._buffers.items()} != {k: b.shape for k, b in src._buffers.items()} or (
                self._values.shape != src._values.shape):
            raise ValueError("copy_: the source stores a different number of entries")
        for key, b in self._buffers.items():
            b[...] = src._buffers[key]
        self._values[...] = src._values
        self._nv_kernel, self._nv_with_indices = None, False

    def to(self, device_id, stream=None) -> "Tensor":
        """This tensor on ``device_id`` (``"cpu"``, a CUDA ordinal, or ``"cuda"``); itself when there."""
        t = super().to(_device_name(device_id))
        return t if t is self else _adopt(t, self, _nv_kernel=None, _nv_base=None)

    # -- element-wise kernels ---------------------------------------------------------------------------
    def set_kernel(self, user_code, *, with_indices=True, arch=None) -> None:
        """Set ``user_code(v)`` or, with ``with_indices``, ``user_code(v, i, j, ...)`` as the function
        :meth:`run_kernel` maps over the stored values (compiled with Numba on the host)."""
        if isinstance(user_code, (bytes, bytearray)):
            raise UnsupportedOperation("set_kernel with compiled LTO-IR code: ustc runs kernels on the host and "
                                       "needs the Python function (Numba-compilable) instead")
        if not callable(user_code):
            raise TypeError(f"set_kernel needs a function, got {type(user_code).__name__}")
        self._nv_kernel, self._nv_with_indices = user_code, bool(with_indices)

    def run_kernel(self, stream=None) -> None:
        """Apply the function set by :meth:`set_kernel` to every stored value, in place."""
        if self._nv_kernel is None:
            raise ValueError("no kernel set: call set_kernel first")
        self.apply(self._nv_kernel)

    # -- pictures --------------------------------------------------------------------------------------
    def draw(self, name=None, stream=None, **options):
        """The contents (rank 1 to 3) as a PIL image; also saved to ``name`` when given."""
        return self._picture(super().draw, name, **options)

    def draw_storage(self, name=None, stream=None, **options):
        """Every buffer and the values as a PIL image; also saved to ``name`` when given."""
        return self._picture(super().draw_storage, name, **options)

    def draw_raw(self, name=None, stream=None, **options):
        """The binned nonzero structure as a PIL image; also saved to ``name`` when given."""
        return self._picture(super().draw_raw, name, **options)

    def animate(self, name=None, stream=None):
        raise UnsupportedOperation("Tensor.animate: ustc draws pictures (draw, draw_storage, draw_raw) but "
                                   "does not animate them")

    @staticmethod
    def _picture(render, name, **options):
        require("PIL", "viz")
        from PIL import Image

        buffer = io.BytesIO()
        render(buffer, **options)
        buffer.seek(0)
        image = Image.open(buffer)
        image.load()
        if name is not None:
            image.save(name)
        return image

    def __repr__(self) -> str:
        return _printing.describe(self)

