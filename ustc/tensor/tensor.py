"""``Tensor``: a format, extents, per-level buffers and values (design §3).

    >>> import numpy as np, ustc
    >>> t = ustc.Tensor.from_dense(np.array([[1, 0, 2], [0, 0, 3]]), "CSR")
    >>> t.pos(1), t.crd(1), t.values
    (array([0, 2, 3], dtype=int32), array([0, 2, 2], dtype=int32), array([1, 2, 3]))
    >>> t.convert(tensor_format="CSC").to_dense().tolist()
    [[1, 0, 2], [0, 0, 3]]

Buffers are referenced, not copied: a tensor made by ``from_package`` shares
memory with its source, and ``to_package`` hands the same memory back.
"""

from __future__ import annotations

import copy as _copy
from types import MappingProxyType
from typing import Mapping

import numpy as np

from ..errors import DeviceError, FormatError, StorageError
from ..format.ir import TensorFormat
from . import batch, fastpaths, fastpaths_rows, packages, safety, storage
from .dtypes import narrow
from .storage import Layout


def as_format(tensor_format) -> TensorFormat:
    if isinstance(tensor_format, TensorFormat):
        return tensor_format
    if isinstance(tensor_format, str):
        return TensorFormat.parse(tensor_format)
    raise FormatError(f"expected a TensorFormat or format text, got {type(tensor_format).__name__}")


class Tensor:
    """A tensor stored in a ``TensorFormat`` (see the module docstring)."""

    def __init__(self, tensor_format, shape, buffers: Mapping, values, *, device: str = "cpu",
                 package: str = packages.NUMPY, origin: dict | None = None, validate: bool = False):
        self._layout = Layout.of(as_format(tensor_format), shape)
        self._buffers = self._checked_buffers(buffers)
        self._values = values
        self._device = device
        self._package = package
        self._origin = origin or {}
        flat_buffers, flat_values = self._flatten() if device == "cpu" else (self._buffers, self._values)
        self._counts = self._layout.positions(flat_buffers)
        if self._counts and self._counts[-1] > len(flat_values):
            raise StorageError(f"values holds {len(flat_values)} entries, the last level has "
                               f"{self._counts[-1]} positions")

    def _checked_buffers(self, buffers: Mapping) -> dict:
        fmt = self._layout.fmt
        wanted = set(fmt.buffers)
        given = {(int(k), str(name)): b for (k, name), b in buffers.items()}
        missing, extra = wanted - set(given), set(given) - wanted
        if missing or extra:
            raise StorageError(f"format {fmt} needs buffers {sorted(wanted)}; missing {sorted(missing)}, "
                               f"unexpected {sorted(extra)}")
        lead = batch.batch_shape(fmt, self._layout.level_shape)
        for key, b in given.items():
            if tuple(b.shape[:-1]) != lead or not np.issubdtype(b.dtype, np.integer):
                raise StorageError(f"{key[1]}[{key[0]}] must be an integer array of shape {lead + ('n',)}, "
                                   f"got {b.dtype} {tuple(b.shape)}")
        return given

    def _require_host(self) -> None:
        if self._device != "cpu":
            raise DeviceError(f"this operation runs on the host for now; the tensor is on '{self._device}': "
                              f"call t.to('cpu') first (device kernels arrive with the CUDA target)")

    def _flatten(self):
        """The storage with batch levels acting as dense levels (the originals when unbatched)."""
        self._require_host()
        fmt = self._layout.fmt
        if not fmt.batch_levels:
            if self._values.ndim != 1:
                raise StorageError(f"values must be 1-D, got shape {self._values.shape}")
            return self._buffers, self._values
        lead = batch.batch_shape(fmt, self._layout.level_shape)
        if tuple(self._values.shape[:-1]) != lead:
            raise StorageError(f"values must have shape {lead + ('nse',)}, got {self._values.shape}")
        return batch.flatten(fmt, self._layout.level_shape, self._buffers, self._values)

    # -- construction -----------------------------------------------------------
    @classmethod
    def from_dense(cls, x, tensor_format=None, *, prune: bool = False) -> "Tensor":
        """A tensor of ``x`` (NumPy or CPU torch) in ``tensor_format`` (default: dense).

        Zeros are not stored except where the format stores them (dense levels,
        block interiors, padding). A dense target in a level order that matches
        the array's memory order shares memory with ``x``.
        """
        package = packages.TORCH if packages.is_torch(x) else packages.NUMPY
        array = packages.host_array(x)
        fmt = as_format(tensor_format) if tensor_format is not None else _dense_format(array.ndim)
        if fmt.ndim != array.ndim:
            raise FormatError(f"format {fmt} has {fmt.ndim} dimensions, the array has {array.ndim}")
        perm = _dense_permutation(fmt)
        if perm is not None:
            values = np.ascontiguousarray(array.transpose(perm)).reshape(-1)
            return cls(fmt, array.shape, {}, values, package=package)
        family = fastpaths.family(fmt)
        if family is not None and family.kind == "csr" and not fastpaths.csr_like(fmt) \
                and not fastpaths.compiled_dtype(array.dtype):  # CSC of float16: CSR, transposed
            return cls.from_dense(x, _csr_of(fmt)).convert(fmt)
        return fastpaths.from_dense(array, fmt, package, prune=prune)

    @classmethod
    def from_coo(cls, coords, values, shape, tensor_format=None, *, prune: bool = False) -> "Tensor":
        """A tensor holding ``values[e]`` at ``coords[d][e]`` (duplicates summed, zeros dropped).

        ``coords`` is a sequence of one integer array per dimension; the default
        format is COO of that rank (a compressed vector for rank 1). Out-of-range coordinates raise StorageError.
        """
        package = packages.TORCH if packages.is_torch(values) else packages.NUMPY
        values = packages.host_array(values)
        coords = tuple(packages.host_array(c) for c in coords)
        shape = tuple(int(n) for n in shape)
        if len(coords) != len(shape) or any(len(c) != len(values) for c in coords):
            raise StorageError(f"need {len(shape)} coordinate arrays of length {len(values)}, "
                               f"got lengths {[len(c) for c in coords]}")
        if tensor_format is None:
            from ..formats import COO

            tensor_format = COO(len(shape)) if len(shape) >= 2 else "(i) -> (i : compressed)"
        fmt = as_format(tensor_format)
        if fmt.ndim != len(shape):
            raise FormatError(f"format {fmt} has {fmt.ndim} dimensions, the shape has {len(shape)}")
        fast = None if prune or not len(values) else fastpaths.from_coo(coords, values, shape, fmt, package)
        return fast if fast is not None else cls._assembled(fmt, shape, coords, values, package, prune=prune)

    @classmethod
    def _assembled(cls, fmt, shape, coords, values, package, **options) -> "Tensor":
        layout = Layout.of(fmt, shape)
        built = storage.assemble(layout, coords, np.asarray(values), **options)
        buffers, values = narrow(fmt, built.buffers, layout.level_shape, layout.origins), built.values
        if fmt.batch_levels:
            buffers, values = batch.split(fmt, layout.level_shape, buffers, values)
        return cls(fmt, shape, buffers, values, package=package)

    @classmethod
    def from_package(cls, x, *, validate: bool = False) -> "Tensor":
        """Zero-copy view of a NumPy/SciPy/PyTorch/CuPy tensor (see ``ustc.tensor.interop``)."""
        from .interop import from_package

        return from_package(x, validate=validate)

    def to_package(self):
        """The tensor as its originating package's type, sharing memory."""
        from .interop import to_package

        return to_package(self)

    # -- accessors --------------------------------------------------------------
    @property
    def format(self) -> TensorFormat:
        return self._layout.fmt

    @property
    def shape(self) -> tuple[int, ...]:
        return self._layout.shape

    @property
    def level_shape(self) -> tuple[int, ...]:
        return self._layout.level_shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def device(self) -> str:
        return self._device

    @property
    def package(self) -> str:
        return self._package

    @property
    def dtype(self) -> np.dtype:
        return self._values.dtype

    @property
    def nse(self) -> int:
        """Number of stored entries: positions of the last level (padding and explicit zeros included)."""
        return self._counts[-1] if self._counts else 1

    def _buffer(self, level: int, name: str):
        if not -self.format.nlevels <= level < self.format.nlevels:
            raise IndexError(f"level {level} out of range for a {self.format.nlevels}-level format")
        level %= self.format.nlevels
        if (level, name) not in self._buffers:
            raise StorageError(f"level {level} ({self.format.levels[level]}) has no {name} buffer")
        return packages.wrap(self._buffers[(level, name)], self._package)

    def pos(self, level: int):
        """The positions buffer of ``level``."""
        return self._buffer(level, "pos")

    def crd(self, level: int):
        """The coordinates buffer of ``level``."""
        return self._buffer(level, "crd")

    @property
    def values(self):
        return packages.wrap(self._values, self._package)

    @property
    def pos_dtype(self):
        return next((b.dtype for (k, n), b in self._buffers.items() if n == "pos"), None)

    @property
    def crd_dtype(self):
        return next((b.dtype for (k, n), b in self._buffers.items() if n == "crd"), None)

    @property
    def buffers(self) -> dict:
        """``{(level, "pos" | "crd"): array}`` in the tensor's package."""
        return {key: packages.wrap(b, self._package) for key, b in self._buffers.items()}

    # -- raw storage, for kernels and routes ------------------------------------------
    @property
    def raw_values(self):
        """The values array as stored: NumPy on the host, CuPy on a device, never wrapped into the
        tensor's package (``values`` wraps). Shares memory; writing into it changes the tensor."""
        return self._values

    @property
    def raw_buffers(self) -> Mapping:
        """``{(level, "pos" | "crd"): array}`` as stored (not wrapped), read-only mapping."""
        return MappingProxyType(self._buffers)

    def raw_buffer(self, level: int, name: str):
        """Buffer ``name`` ("pos" or "crd") of ``level`` as stored; KeyError when the level has none."""
        return self._buffers[(level, name)]

    def flat_storage(self) -> tuple[Mapping, object]:
        """``(buffers, values)`` as stored, batch levels acting as dense levels (the stored arrays
        themselves when the format has no batch levels); host tensors only."""
        return self._flatten()

    @property
    def layout(self) -> Layout:
        """The format bound to the extents: level shape, origins, positions (``storage.Layout``)."""
        return self._layout

    def with_package(self, package: str | None) -> "Tensor":
        """The same tensor (storage shared, nothing copied) handed back as ``package``'s type."""
        out = _copy.copy(self)
        out._package = package
        return out

    def assign(self, other: "Tensor") -> "Tensor":
        """Make this tensor hold ``other``'s storage, format and device (shared, not copied), keeping
        its own package: the contract of an ``out=`` tensor that an operation replaces. Returns self."""
        if not isinstance(other, Tensor):
            raise TypeError(f"assign takes a ustc Tensor, got {type(other).__name__}")
        package = self._package
        self.__dict__.update(other.__dict__)
        self._package = package
        return self

    @property
    def nbytes(self) -> int:
        """Bytes of all buffers and the stored values."""
        values = self._values if self.format.batch_levels else self._values[:self.nse]
        return sum(b.nbytes for b in self._buffers.values()) + values.nbytes

    # -- contents ---------------------------------------------------------------
    def entries(self) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """``(coords, values)`` of every stored in-bounds entry (NumPy; zeros and duplicates kept)."""
        buffers, values = self._flatten()
        coords, index = storage.unpack(self._layout, buffers, len(values))
        return coords, values[index]

    def to_dense(self):
        """The dense array (in the tensor's package); duplicates are summed."""
        perm = _dense_permutation(self.format)
        if perm is not None:
            dense = self._values[:self.nse].reshape(self.level_shape).transpose(np.argsort(perm))
            return packages.wrap(dense, self._package)
        out = np.zeros(self.shape, dtype=self.dtype)
        coords, values = self.entries()
        if all(lv.type.unique for lv in self.format.levels):
            out[coords] = values
        else:
            np.add.at(out, coords, values)
        return packages.wrap(out, self._package)

    def convert(self, tensor_format=None, *, prune: bool = False, copy: bool = True) -> "Tensor":
        """The same tensor in another format (any to any); duplicates summed, zeros dropped
        except where the target stores them. ``prune``: structured targets keep the n
        largest magnitudes of an over-full block instead of raising. ``copy=False`` (as
        SciPy's ``tocoo(copy=False)``): where both formats store the same array (CSR <-> COO
        and DCSR: the column coordinates and the values) the result shares it, so a write to
        either tensor's values is seen by the other; elsewhere the result is a copy as usual.
        On 'cuda' the generated conversion kernel runs on the device (``ustc.ops.convert.on_device``;
        always a copy); a pair it cannot write raises DeviceError."""
        fmt = as_format(tensor_format)
        if fmt.ndim != self.ndim:
            raise FormatError(f"cannot convert a {self.ndim}-D tensor to the {fmt.ndim}-D format {fmt}")
        if self._device != "cpu":
            from ..ops.convert import on_device

            return on_device(self, fmt)
        safety.ensure_safe(self)       # the conversion kernels index through the buffers
        if not copy:
            from .fastpaths_rows import shared

            result = shared(self, fmt)
            if result is not None:
                return result
        perm = _dense_permutation(fmt)
        if perm is not None:
            return Tensor.from_dense(packages.wrap(self.to_dense(), self._package), fmt)
        fast = fastpaths.convert(self, fmt)
        if fast is not None:
            return fast
        if self.format.all_dense and (fastpaths.coo_like(fmt) or fastpaths.family(fmt) is not None
                                      or (self.ndim == 2 and not prune and fastpaths_rows.dia_target(fmt))):
            return Tensor.from_dense(self.to_dense(), fmt)  # the parallel count and fill kernels
        from ..ops.convert import staged_rows, worth_compiling, written

        source, compile_it = self, worth_compiling(self) and not prune  # pruning: over-full n:m blocks expected
        stage = staged_rows(self.format, self.shape, fmt) if self.format.all_dense and self.ndim == 2 and compile_it \
            else None
        if stage is not None:
            source = Tensor.from_dense(self.to_dense(), stage)  # parallel selection: the writer walks nonzeros only
        try:
            compiled = written(source, fmt) if compile_it else None
        except StorageError:
            if not any(lv.type.pads for lv in fmt.levels):
                raise
            compiled = None  # the pack hook refuses too, before allocating, naming a width that fits
        if compiled is not None:
            compiled._package = self._package
            return compiled
        if self.format.all_dense:  # select the nonzeros with the parallel kernels, then assemble only them
            return Tensor.from_dense(self.to_dense(), fmt, prune=prune)
        coords, values = self.entries()
        return Tensor._assembled(fmt, self.shape, coords, values, self._package, prune=prune)

    def get_value(self, *coords):
        """The stored value at ``coords`` (summed over duplicates), or None if nothing is stored there."""
        if len(coords) != self.ndim:
            raise IndexError(f"expected {self.ndim} coordinates, got {len(coords)}")
        for d, (c, n) in enumerate(zip(coords, self.shape)):
            if not 0 <= c < n:
                raise IndexError(f"coordinate {c} is outside dimension {d} of extent {n}")
        found, values = self.entries()
        mask = np.logical_and.reduce([f == c for f, c in zip(found, coords)]) if self.ndim else np.ones(1, bool)
        if not mask.any():
            return None
        return values[mask].sum().item() if mask.sum() > 1 else values[mask][0].item()

    def validate(self) -> "Tensor":
        """The full check of every buffer against its level's promise; returns self."""
        from .validate import validate

        self._require_host()
        validate(self)
        return self

    def apply(self, fn) -> "Tensor":
        """Map a Numba-compilable ``fn(v)`` or ``fn(v, i, j, ...)`` over the stored values in place.

        Only values change (the sparsity structure does not); returns self.
        """
        from .apply import apply

        self._require_host()
        apply(self, fn)
        return self

    def to(self, device: str) -> "Tensor":
        """The tensor on ``device`` ('cpu' or 'cuda'); the same object when already there."""
        from .devices import to_device

        return to_device(self, device)

    def copy(self) -> "Tensor":
        """A deep copy (same package and device)."""
        buffers = {key: b.copy() for key, b in self._buffers.items()}
        return Tensor(self.format, self.shape, buffers, self._values.copy(), device=self._device,
                      package=self._package, origin=dict(self._origin))

    # -- files and pictures (ustc.tensor.io / ustc.tensor.draw) ----------------------
    def to_file(self, path) -> None:
        """Write ``.mtx`` (2-D) or ``.tns`` (any rank); see ``ustc.to_file``."""
        from .io import to_file

        to_file(self, path)

    def draw(self, path):
        """PNG of the contents (up to 3-D), stored entries shaded; returns ``path``."""
        from .draw import draw

        return draw(self, path)

    def draw_storage(self, path, **options):
        """PNG of every level's buffers and the values, padding in its own colour; returns ``path``."""
        from .draw import draw_storage

        return draw_storage(self, path, **options)

    def draw_raw(self, path, **options):
        """PNG of the binned nonzero structure of a large 2-D/3-D tensor; returns ``path``."""
        from .draw import draw_raw

        return draw_raw(self, path, **options)

    # -- arithmetic (generated kernels; see ustc.ops.elementwise) ---------------------
    # NumPy ufuncs (``np.abs(A)``, and operators with an ndarray on the left: ``x @ A``,
    # ``x * A``, ``x < A``) come to ustc.ops.ufuncs, never to a 0-d object array.
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from ..ops.ufuncs import array_ufunc

        return array_ufunc(self, ufunc, method, inputs, kwargs)

    def __add__(self, other):
        from ..ops.elementwise import binary

        return binary(self, other, "+")

    def __radd__(self, other):
        from ..ops.elementwise import binary

        return binary(self, other, "+", reflected=True)

    def __sub__(self, other):
        from ..ops.elementwise import binary

        return binary(self, other, "-")

    def __rsub__(self, other):
        from ..ops.elementwise import binary

        return binary(self, other, "-", reflected=True)

    def __mul__(self, other):
        from ..ops.elementwise import binary

        return binary(self, other, "*")

    def __rmul__(self, other):
        from ..ops.elementwise import binary

        return binary(self, other, "*", reflected=True)

    def __neg__(self):
        from ..ops.elementwise import negative

        return negative(self)

    def __matmul__(self, other):
        from ..ops.matmul import matmul

        return matmul(self, other)

    def __rmatmul__(self, other):
        from ..ops.matmul import matmul

        return matmul(other, self)

    # -- the everyday sparse-array surface (ustc.tensor.indexing, ustc.ops.methods, ustc.ops.ufuncs) --
    def __getitem__(self, key):
        from .indexing import getitem

        return getitem(self, key)

    def __setitem__(self, key, value):
        from .indexing import setitem

        setitem(self, key, value)

    def __len__(self):
        from ..ops.methods import length

        return length(self)

    def __bool__(self):
        from ..ops.methods import truth

        return truth(self)

    def __array__(self, dtype=None, copy=None):
        from ..ops.methods import no_array

        return no_array(self)

    def __truediv__(self, other):
        from ..ops.ufuncs import binary

        return binary(np.true_divide, self, other)

    def __rtruediv__(self, other):
        from ..ops.ufuncs import binary

        return binary(np.true_divide, other, self)

    def __pow__(self, p):
        from ..ops.methods import power

        return power(self, p)

    def __rpow__(self, other):
        from ..ops.ufuncs import binary

        return binary(np.power, other, self)

    def __abs__(self):
        from ..ops.ufuncs import unary

        return unary(np.absolute, self)

    def __pos__(self):
        return self.copy()

    def __lt__(self, other):
        from ..ops.ufuncs import compare

        return compare(np.less, self, other)

    def __le__(self, other):
        from ..ops.ufuncs import compare

        return compare(np.less_equal, self, other)

    def __gt__(self, other):
        from ..ops.ufuncs import compare

        return compare(np.greater, self, other)

    def __ge__(self, other):
        from ..ops.ufuncs import compare

        return compare(np.greater_equal, self, other)

    def __eq__(self, other):
        from ..ops.ufuncs import compare

        return compare(np.equal, self, other)

    def __ne__(self, other):
        from ..ops.ufuncs import compare

        return compare(np.not_equal, self, other)

    __hash__ = object.__hash__          # identity, as before __eq__ became element-wise

    @property
    def nnz(self) -> int:
        """Stored entries within the shape, explicit zeros and duplicates included (SciPy's nnz)."""
        from ..ops.methods import nnz

        return nnz(self)

    def count_nonzero(self, axis=None):
        """Nonzero values (duplicates summed), in total or along ``axis``."""
        from ..ops.methods import count_nonzero

        return count_nonzero(self, axis)

    def diagonal(self, k: int = 0):
        """Diagonal ``k`` as a NumPy array."""
        from ..ops.methods import diagonal

        return diagonal(self, k)

    def setdiag(self, values, k: int = 0) -> None:
        """Set diagonal ``k`` in place (a scalar, or its first ``len(values)`` entries)."""
        from ..ops.methods import setdiag

        setdiag(self, values, k)

    def eliminate_zeros(self) -> None:
        """Remove stored zeros in place (those the format must store stay)."""
        from ..ops.methods import eliminate_zeros

        eliminate_zeros(self)

    def sum_duplicates(self) -> None:
        """Sum repeated coordinates in place (sorted; explicit zeros dropped)."""
        from ..ops.methods import sum_duplicates

        sum_duplicates(self)

    def astype(self, dtype, copy: bool = True) -> "Tensor":
        """The tensor with its values cast to ``dtype``."""
        from ..ops.methods import astype

        return astype(self, dtype, copy)

    def max(self, axis=None, out=None):
        """Maximum over ``axis``; unstored zeros count (SciPy's rule)."""
        from ..ops.methods import extreme

        return extreme(self, axis, np.maximum)

    def min(self, axis=None, out=None):
        """Minimum over ``axis``; unstored zeros count (SciPy's rule)."""
        from ..ops.methods import extreme

        return extreme(self, axis, np.minimum)

    def mean(self, axis=None, dtype=None, out=None):
        """Mean over ``axis`` (zeros included), NumPy's result dtype."""
        from ..ops.methods import mean

        return mean(self, axis)

    def power(self, p) -> "Tensor":
        """Element-wise ``self ** p`` (``p > 0``: zero-preserving)."""
        from ..ops.methods import power

        return power(self, p)

    def abs(self) -> "Tensor":
        return abs(self)

    def conj(self) -> "Tensor":
        from ..ops.methods import conj

        return conj(self)

    conjugate = conj

    @property
    def real(self) -> "Tensor":
        from ..ops.methods import real

        return real(self)

    @property
    def imag(self) -> "Tensor":
        from ..ops.methods import imag

        return imag(self)

    def toarray(self):
        """The dense NumPy array."""
        from ..ops.methods import toarray

        return toarray(self)

    def todense(self):
        """The dense array, in the tensor's package (``to_dense``)."""
        return self.to_dense()

    def tocsr(self, copy: bool = False) -> "Tensor":
        from ..ops.methods import tocsr

        return tocsr(self, copy)

    def tocsc(self, copy: bool = False) -> "Tensor":
        from ..ops.methods import tocsc

        return tocsc(self, copy)

    def tocoo(self, copy: bool = False) -> "Tensor":
        from ..ops.methods import tocoo

        return tocoo(self, copy)

    def sum(self, axis=None):
        """Sum over ``axis`` (None: everything) as a NumPy array or scalar."""
        from ..ops.elementwise import reduce_sum

        return reduce_sum(self, axis)

    @property
    def T(self) -> "Tensor":
        """Zero-copy transpose: the same buffers under a format with its dimensions reversed."""
        return self.transpose()

    def transpose(self, axes=None, tensor_format=None) -> "Tensor":
        """Transpose; a zero-copy view, or stored in ``tensor_format`` by a generated kernel."""
        from ..ops.elementwise import transpose

        return transpose(self, axes, tensor_format)

    # -- scipy.sparse.linalg (ustc.ops.linop): SciPy's aslinearoperator takes any object with
    # shape, dtype, matvec, rmatvec and rmatmat, so cg(A, b), eigsh(A), svds(A) accept a Tensor --
    def aslinearoperator(self):
        """A ``scipy.sparse.linalg.LinearOperator`` over planned Matmuls (``ustc.aslinearoperator``)."""
        from ..ops.linop import aslinearoperator

        return aslinearoperator(self)

    def matvec(self, x):
        """``self @ x`` for ``x`` of shape (n,) or (n, 1): a new array (``ustc.ops.linop.matvec``)."""
        from ..ops.linop import matvec

        return matvec(self, x)

    def rmatvec(self, x):
        """``self^H @ x`` for ``x`` of shape (m,) or (m, 1): a new array (``ustc.ops.linop.rmatvec``)."""
        from ..ops.linop import rmatvec

        return rmatvec(self, x)

    def rmatmat(self, X):
        """``self^H @ X`` for ``X`` of shape (m, k): a new array (``ustc.ops.linop.rmatmat``)."""
        from ..ops.linop import rmatmat

        return rmatmat(self, X)

    def __repr__(self) -> str:
        from .printing import describe

        return describe(self)


def _csr_of(fmt: TensorFormat) -> TensorFormat:
    """CSR over ``fmt``'s dimensions (same index widths)."""
    from ..formats import CSR

    return TensorFormat(fmt.dims, [(d, lv.type) for d, lv in zip(fmt.dims, CSR.levels)], fmt.pos_width, fmt.crd_width)


def _dense_format(rank: int) -> TensorFormat:
    from ..formats import Dense

    return Dense(rank)


def _dense_permutation(fmt: TensorFormat) -> tuple[int, ...] | None:
    """The dimension order of an all-dense format whose levels permute the dimensions, else None."""
    if not fmt.all_dense:
        return None
    names = [d.name for d in fmt.dims]
    return tuple(names.index(lv.expr.name) for lv in fmt.levels)
