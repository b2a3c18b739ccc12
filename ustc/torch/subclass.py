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
  accumulation, clipping and every ``torch.optim`` step keep the pattern),
  reductions, indexing and reshapes with dense results (``ustc.torch.dense_results``),
  and the matmul family again without autograd.

Anything else raises :class:`ustc.UnsupportedOperation` naming the op, unless
dense fallback is on (``set_dense_fallback(True)`` or ``with dense_fallback():``):
then the op runs on dense copies, with one warning per op.

A TorchUST is also a traceable wrapper subclass (``__tensor_flatten__``): under
torch.compile / torch.export its products are ``ustc::`` custom ops
(``ustc.torch.compiled``). It pickles as its storage (``ustc.torch.checkpoint``),
and every TorchUST leaf that requires grad samples the gradients reaching it at
its pattern (:func:`install_grad_hook`).
"""

from __future__ import annotations

import contextlib
import functools
import operator
import warnings
import weakref

import numpy as np
import torch
from torch._subclasses.fake_tensor import is_fake
from torch.utils._pytree import tree_map

from ..errors import UnsupportedOperation
from ..tensor import packages
from ..tensor.tensor import Tensor

aten = torch.ops.aten
FUNCTIONS: dict = {}  # torch-level function -> implementation (filled by ustc.torch.ops)
DISPATCH: dict = {}  # aten overload packet -> implementation(func, args, kwargs)
HANDLERS: list = []  # handler(func, args, kwargs) -> result or NotImplemented, tried after DISPATCH
COMPILED: dict = {}  # "torch_function": the matmul family while Dynamo traces (filled by ustc.torch.compiled)
_FALLBACK = {"on": False, "warned": set()}
_FAKE = torch._C._TorchDispatchModeKey.FAKE


_TORCH_DTYPES: dict = {}
_NUMPY_DTYPES: dict = {}


def torch_dtype(dtype) -> "torch.dtype":
    """The torch dtype of a NumPy dtype (TypeError where torch has none)."""
    dtype = np.dtype(dtype)
    found = _TORCH_DTYPES.get(dtype)
    if found is None:
        try:
            found = _TORCH_DTYPES[dtype] = torch.from_numpy(np.empty(0, dtype=dtype)).dtype
        except TypeError:
            raise TypeError(f"torch has no dtype for NumPy {dtype}") from None
    return found


def numpy_dtype(dtype: "torch.dtype") -> np.dtype:
    """The NumPy dtype of a torch dtype; bfloat16 (which NumPy lacks) is stored as its uint16 bits."""
    found = _NUMPY_DTYPES.get(dtype)
    if found is None:
        found = _NUMPY_DTYPES[dtype] = np.dtype(np.uint16) if dtype == torch.bfloat16 else \
            torch.empty(0, dtype=dtype).numpy().dtype
    return found


def host(x):
    """A dense torch tensor as the array ustc computes on (NumPy view on the CPU, CuPy on CUDA).

    bfloat16 has no NumPy dtype: its array is the uint16 bit pattern (see :func:`bits`).
    """
    if x.dtype == torch.bfloat16:
        x = x.view(torch.uint16) if x.device.type == "cpu" else x
    if x.device.type == "cpu":
        return packages.host_array(x)
    import cupy

    return cupy.from_dlpack(x.detach())


def to_torch(a, device=None):
    """A NumPy / CuPy result as a torch tensor sharing its memory (torch tensors pass through)."""
    if isinstance(a, torch.Tensor):
        return a
    if isinstance(a, np.ndarray):
        if not a.flags.writeable:  # read-only views: torch warns and shares anyway
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                return torch.from_numpy(a)
        return torch.from_numpy(a)
    if np.isscalar(a):
        return torch.from_numpy(np.asarray(a))
    return torch.from_dlpack(a)


_PARTS: "weakref.WeakKeyDictionary[Tensor, tuple]" = weakref.WeakKeyDictionary()


# id(values tensor) -> a live TorchUST holding it: the first made, or the last that requires_grad_ was called
# on (nn.Parameter does), not later detached views. torch.compile's ustc::linear finds the eager layer's
# weight by it, so both run the same plans (compiled.py)
OWNERS: "weakref.WeakValueDictionary[int, TorchUST]" = weakref.WeakValueDictionary()


def torch_parts(ust: Tensor, dtype: "torch.dtype") -> tuple:
    """``(values, ((key, buffer), ...))``: ``ust``'s buffers as torch tensors sharing their memory.

    Cached per ustc Tensor, so every TorchUST of one storage (``detach``, tied
    weights, a state_dict) hands torch the same tensors: ``torch.save`` writes
    shared storage once. bfloat16 values are the uint16 buffer viewed as bfloat16.
    """
    cached = _PARTS.get(ust)
    if cached is None or cached[0].dtype != dtype:
        values = to_torch(ust.raw_values)
        if dtype == torch.bfloat16:
            values = values.view(torch.bfloat16)
        cached = (values, tuple((key, to_torch(buf)) for key, buf in sorted(ust.raw_buffers.items())))
        _PARTS[ust] = cached
    return cached


_INNER = 32  # buffers a TorchUST can expose to torch.compile / torch.export by name


def _inner(k: int) -> str:
    """The attribute holding buffer ``k`` (in ``(level, name)`` order); fixed names, declared on the class,
    since torch.export learns a subclass's inner-tensor attributes from its first instance."""
    return f"_i{k}"


_FLAT = tuple(("_v", *(_inner(k) for k in range(count))) for count in range(_INNER + 1))  # by buffer count


def _buffer_getter(count: int):
    get = operator.attrgetter(*(_inner(k) for k in range(count))) if count else None
    return (lambda t: ()) if count == 0 else get if count > 1 else (lambda t: (get(t),))


_BUFFERS = tuple(_buffer_getter(count) for count in range(_INNER + 1))  # by buffer count: a tuple of them


def holds_buffers(weight: "TorchUST", buffers) -> bool:
    """Whether ``buffers`` are ``weight``'s pos / crd tensors themselves, in order (identity). The compiled
    op's per-call check: 0.3 µs against 1.2 through ``buffer_tensors`` (run eagerly, never traced)."""
    count = len(weight._keys)
    if count != len(buffers):
        return False
    held = _BUFFERS[count](weight) if count <= _INNER else weight.buffer_tensors
    return all(map(operator.is_, held, buffers))


class TorchUST(torch.Tensor):
    """A torch tensor stored as a ustc Tensor (any format); see the module docstring.

    ``TorchUST(t)`` wraps a ``ustc.Tensor`` ``t`` without copying;
    ``TorchUST.from_torch(x)`` views a dense or sparse torch tensor. Gradients
    of a TorchUST that requires grad are TorchUSTs with the same stored pattern.
    ``dtype=torch.bfloat16`` wraps a ustc Tensor whose values are the uint16
    bits of bfloat16 numbers (NumPy has no bfloat16; see ``docs/torch.md``).
    """

    @staticmethod
    def __new__(cls, tensor, *, requires_grad: bool = False, dtype=None):
        if isinstance(tensor, TorchUST):
            dtype = tensor.dtype if dtype is None else dtype
            tensor = tensor.ust
        if not isinstance(tensor, Tensor):
            raise TypeError(f"TorchUST wraps a ustc.Tensor, got {type(tensor).__name__}; "
                            f"use TorchUST.from_torch for torch tensors")
        dtype = torch_dtype(tensor.dtype) if dtype is None else dtype
        if dtype == torch.bfloat16 and tensor.dtype != np.uint16:
            raise TypeError(f"a bfloat16 TorchUST holds the uint16 bits of its values, got {tensor.dtype} values")
        device = torch.device("cuda" if tensor.device == "cuda" else "cpu")
        self = torch.Tensor._make_wrapper_subclass(cls, tensor.shape, dtype=dtype, device=device,
                                                   requires_grad=requires_grad)
        self._set_ust(tensor, dtype)
        if requires_grad:
            install_grad_hook(self)
        return self

    def __init__(self, tensor, *, requires_grad: bool = False, dtype=None):
        super().__init__()

    def _set_ust(self, tensor: Tensor, dtype=None) -> None:
        """Hold ``tensor`` (same shape and dtype); its buffers become the torch attributes torch.compile sees."""
        self._ust = tensor
        with torch._C.DisableTorchFunctionSubclass():
            dtype = self.dtype if dtype is None else dtype
        values, buffers = torch_parts(tensor, dtype)
        self._v = values
        owner = OWNERS.get(id(values))
        if owner is None or owner._v is not values:  # the first live TorchUST over them (a model's parameter)
            OWNERS[id(values)] = self
        self._keys = tuple(key for key, _ in buffers)
        for k, (_, buf) in enumerate(buffers):
            setattr(self, _inner(k), buf)
        self._sig = tensor.format.signature
        self._numeric = None

    # -- torch.compile / AOTAutograd: a traceable wrapper subclass over its buffers --------
    def __tensor_flatten__(self):  # called by every compiled call's guards and AOT's wrappers: names precomputed
        count = len(self._keys)
        names = _FLAT[count] if count <= _INNER else ("_v", *(_inner(k) for k in range(count)))
        return list(names), (self.signature, self._keys)

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        signature, keys = meta
        values = inner["_v"]
        self = torch.Tensor._make_wrapper_subclass(TorchUST, outer_size, dtype=values.dtype,
                                                   device=values.device, requires_grad=False)
        self._ust, self._v, self._keys, self._sig, self._numeric = None, values, keys, signature, None
        for k in range(len(keys)):
            setattr(self, _inner(k), inner[_inner(k)])
        return self

    def _stable_hash_for_caching(self) -> str:
        """What AOTAutograd's cache keys a TorchUST by: format, keys, shape, dtype, device and buffer metadata."""
        import hashlib

        with torch._C.DisableTorchFunctionSubclass():
            inner = [(tuple(t.shape), str(t.dtype)) for t in (self._v, *self.buffer_tensors)]
            text = repr(("TorchUST", _code_version(), self._sig, self._keys, tuple(self.shape), str(self.dtype),
                         str(self.device), inner))
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()

    @property
    def signature(self) -> str:
        """The canonical text of the format (what checkpoints and compiled graphs record)."""
        if self._sig is None:
            self._sig = self.ust.format.signature
        return self._sig

    @property
    def buffer_tensors(self) -> tuple:
        """The pos / crd buffers as torch tensors, in ``(level, name)`` order (shared memory)."""
        return tuple(getattr(self, _inner(k)) for k in range(len(self._keys)))

    @classmethod
    def from_torch(cls, x, tensor_format=None) -> "TorchUST":
        """View a dense or sparse (COO, CSR, CSC, BSR, BSC) torch tensor; convert when ``tensor_format`` is given.

        Without ``tensor_format`` the buffers are the torch buffers (zero-copy).
        The result is a new leaf: it does not track ``x``'s gradient. float16
        and bfloat16 values stay narrow (bfloat16 as its uint16 bits).
        """
        if isinstance(x, TorchUST):
            return x if tensor_format is None else cls(convert(x, tensor_format), dtype=x.dtype)
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"from_torch takes a torch.Tensor, got {type(x).__name__}")
        x = x.detach()
        if x.dtype == torch.bfloat16:
            view = cls(Tensor.from_package(_bits(x)), dtype=torch.bfloat16)
            return view if tensor_format is None else cls(convert(view, tensor_format), dtype=torch.bfloat16)
        ust = Tensor.from_package(x)
        if tensor_format is not None:
            ust = ust.convert(tensor_format)
        return cls(ust)

    # -- the stored tensor -----------------------------------------------------------
    @property
    def ust(self) -> Tensor:
        """The ustc Tensor holding the data (bfloat16 values as their uint16 bits)."""
        if self._ust is None:  # made by __tensor_unflatten__: build it from the torch buffers
            from ..format.ir import TensorFormat

            buffers = {key: host(getattr(self, _inner(k))) for k, key in enumerate(self._keys)}
            device = "cuda" if self._v.device.type == "cuda" else "cpu"
            self._ust = Tensor(TensorFormat.parse(self._sig), tuple(self.shape), buffers, host(self._v),
                               device=device, package=packages.TORCH)
        return self._ust

    def numeric_ust(self) -> Tensor:
        """The ustc Tensor to compute with: ``ust``, or for bfloat16 a float32 twin (same index buffers,
        values widened now; ustc's NumPy side has no bfloat16)."""
        if self.dtype != torch.bfloat16:
            return self.ust
        ust = self.ust
        wide = host(self._v.float())
        return Tensor(ust.format, ust.shape, ust.raw_buffers, wide, device=ust.device, package=ust.package)

    @property
    def tensor_format(self):
        return self.ust.format

    @property
    def nse(self) -> int:
        return self.ust.nse

    @property
    def storage_bytes(self) -> int:
        """Bytes of the index buffers and stored values."""
        return self.ust.nbytes

    def stored_values(self):
        """The values buffer as a torch tensor (shares memory; padding entries included)."""
        return self._v

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

        freeze_zeros(self.ust, self._v)
        return self

    def pattern_mask(self):
        """A dense bool tensor of this shape: True where an entry is in the pattern (stored, not frozen)."""
        from .pattern import dense_mask

        return dense_mask(self.ust, self.device)

    def with_values(self, values) -> "TorchUST":
        """A TorchUST with this pattern and ``values`` (1-D, one per stored position; differentiable)."""
        from .autograd import WithValues

        return WithValues.apply(self, values)

    def requires_grad_(self, requires_grad: bool = True):
        out = super().requires_grad_(requires_grad)
        if self._ust is not None:  # nn.Parameter(t) calls this on its detached t: the parameter owns the values
            OWNERS[id(self._v)] = self
        if requires_grad:
            install_grad_hook(self)
        return out

    def __reduce_ex__(self, protocol):
        from .checkpoint import reduce_torch_ust

        return reduce_torch_ust(self)

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        from .pattern import share

        copied = TorchUST(share(self.ust, self.ust.copy()), dtype=self.dtype)
        if getattr(self, "_is_param", False):
            copied = torch.nn.Parameter(copied, requires_grad=self.requires_grad)
        elif self.requires_grad:
            copied.requires_grad_()
        memo[id(self)] = copied
        return copied

    def __repr__(self, *, tensor_contents=None) -> str:
        with torch._C.DisableTorchFunctionSubclass():
            head = f"TorchUST(shape={tuple(self.shape)}, dtype={self.dtype}, device={self.device}, "
            grad = ", requires_grad=True" if self.requires_grad else ""
        if self._ust is None or _is_fake(self._v):  # traced by torch.compile: no storage to look at
            from ..format.ir import TensorFormat

            return f"{head}format={format_label(TensorFormat.parse(self._sig))}{grad})"
        return f"{head}format={format_label(self._ust.format)}, nse={self._ust.nse}{grad})"

    # -- interception ------------------------------------------------------------------
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if torch.compiler.is_compiling() or torch._C._get_dispatch_mode(_FAKE) is not None:
            return COMPILED["torch_function"](func, args, kwargs or {})  # Dynamo, torch.export, fake tensors
        if torch._C._get_tracing_state() is not None:
            jit_trace_refused(func)
        impl = FUNCTIONS.get(func)
        if impl is not None:
            return impl(*args, **(kwargs or {}))
        with torch._C.DisableTorchFunctionSubclass():
            for a in args:
                if type(a) is TorchUST and "_grad_hook" not in a.__dict__ and a.requires_grad:
                    install_grad_hook(a)
            return func(*args, **(kwargs or {}))

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for a in args:
            if type(a) is TorchUST and (a._ust is None or _is_fake(a._v)):
                return _traced(func, args, kwargs)
        impl = DISPATCH.get(func.overloadpacket)
        for handler in ([impl] if impl is not None else []) + HANDLERS:
            result = handler(func, args, kwargs)
            if result is not NotImplemented:
                return result
        return fallback(func, args, kwargs)


def _is_fake(t) -> bool:
    return is_fake(t)


def _traced(func, args, kwargs):
    """An aten op on a TorchUST of fake tensors (torch.compile tracing): views that only share the
    storage (``detach``, ``alias``) are made; everything else is refused with a clear error."""
    x = args[0]
    if func.overloadpacket in (aten.detach, aten.alias) and type(x) is TorchUST:
        inner, meta = x.__tensor_flatten__()
        return TorchUST.__tensor_unflatten__({name: getattr(x, name) for name in inner}, meta, x.shape, None)
    name = f"aten.{func.overloadpacket.__name__}"
    raise UnsupportedOperation(COMPILED["refused"].format(op=name))


@functools.lru_cache(maxsize=1)
def _code_version() -> str:
    """ustc's version and a digest of the code torch.compile traces (``__torch_function__``'s compiled
    path): AOTAutograd's on-disk cache keys TorchUST inputs by it, so a changed ustc retraces."""
    import hashlib
    from pathlib import Path

    from .. import __version__

    here = Path(__file__).resolve().parent
    digest = hashlib.blake2b(digest_size=8)
    for name in ("subclass.py", "compiled.py", "inference.py", "linear.py"):
        digest.update((here / name).read_bytes())
    return f"{__version__}-{digest.hexdigest()}"


for _k in range(_INNER):
    setattr(TorchUST, _inner(_k), None)


def jit_trace_refused(func):
    name = getattr(func, "__name__", str(func))
    raise UnsupportedOperation(
        f"ustc.torch: torch.jit.trace cannot record {name} on a TorchUST: the sparse products run in ustc "
        f"(NumPy / Numba), which a trace would freeze into constants. Use torch.compile or torch.export, "
        f"torch.jit.script (inference and training), or trace the dense model (TorchUST.to_dense())")


def install_grad_hook(t: TorchUST) -> None:
    """On a leaf TorchUST that requires grad: gradients reaching it from any route (dense ones from
    torch's own backward formulas: ``W.sum()``, ``W[i]``, a TorchScript module) are sampled at its
    pattern before they accumulate, so ``t.grad`` is always a TorchUST of ``t``'s pattern."""
    with torch._C.DisableTorchFunctionSubclass():
        if t.__dict__.get("_grad_hook") or not t.is_leaf or not t.requires_grad:
            return
    t._grad_hook = True
    ref = weakref.ref(t)

    def restrict(grad):
        owner = ref()
        if owner is None or grad is None:
            return None
        from .pattern import same_pattern

        if isinstance(grad, TorchUST) and same_pattern(grad.ust, owner.ust) and grad.dtype == owner.dtype:
            return None
        from .autograd import sample

        dense = dense_of(grad) if isinstance(grad, TorchUST) else grad
        return sample(owner.ust, dense.to(owner.dtype))

    with torch._C.DisableTorchFunctionSubclass():
        t.register_hook(restrict)


def dense_of(x: TorchUST):
    """The dense torch tensor of a TorchUST (a fresh tensor; no autograd)."""
    ust = x.numeric_ust()
    dense = ust.to_dense()
    out = to_torch(dense).clone() if dense is ust.raw_values else to_torch(dense)
    return out if out.dtype == x.dtype else out.to(x.dtype)


def convert(x: TorchUST, tensor_format) -> Tensor:
    """``x``'s storage converted to ``tensor_format`` (bfloat16: converted in float32, stored as bits)."""
    if x.dtype != torch.bfloat16:
        return x.ust.convert(tensor_format)
    wide = x.numeric_ust().convert(tensor_format)
    return with_values(wide, to_torch(wide.raw_values).to(torch.bfloat16))


def with_values(pattern: Tensor, values) -> Tensor:
    """A ustc Tensor with ``pattern``'s format and index buffers and ``values`` (torch, any dtype)."""
    flat = values.detach().reshape(pattern.raw_values.shape)
    return Tensor(pattern.format, pattern.shape, pattern.raw_buffers, host(flat), device=pattern.device,
                  package=pattern.package)


def _bits(x):
    """A bfloat16 torch tensor (strided or sparse) with its values viewed as uint16 (same memory)."""
    if x.layout == torch.strided:
        return x.view(torch.uint16)
    if x.layout == torch.sparse_coo:
        x = x if x.is_coalesced() else x.coalesce()
        return torch.sparse_coo_tensor(x._indices(), x._values().view(torch.uint16), x.shape,
                                       is_coalesced=True, check_invariants=False)
    compressed = {torch.sparse_csr: ("crow_indices", "col_indices"), torch.sparse_bsr: ("crow_indices", "col_indices"),
                  torch.sparse_csc: ("ccol_indices", "row_indices"), torch.sparse_bsc: ("ccol_indices", "row_indices")}
    outer, inner = (getattr(x, name)() for name in compressed[x.layout])
    return torch.sparse_compressed_tensor(outer, inner, x.values().view(torch.uint16), x.shape, layout=x.layout,
                                          check_invariants=False)


def wrap_like(pattern: Tensor, values, *, requires_grad: bool = False) -> TorchUST:
    """A TorchUST with ``pattern``'s format and index buffers and the given values (a torch tensor)."""
    from .pattern import share

    return TorchUST(share(pattern, with_values(pattern, values)), requires_grad=requires_grad, dtype=values.dtype)


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
    fmts = [format_label(a.ust.format) for a in _flat(args) if isinstance(a, TorchUST)]
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
    dense = lambda a: dense_of(a) if isinstance(a, TorchUST) else a  # noqa: E731
    return func(*tree_map(dense, args), **tree_map(dense, kwargs))
