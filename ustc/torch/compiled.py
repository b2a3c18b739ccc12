"""TorchUST under ``torch.compile``: the sparse products as ``torch.library`` custom ops.

A TorchUST is a traceable wrapper subclass (``__tensor_flatten__``: the values
and the pos / crd buffers as torch tensors, the format's canonical text as
metadata). While Dynamo traces, ``TorchUST.__torch_function__`` sends the
matmul family here, and each product becomes one call of

* ``ustc::linear(signature, shape, buffers, values, x, bias)``: ``F.linear``
  (``nn.Linear``) with the 2-D sparse weight described by the format text,
  shape, buffers and values; on the CPU through the weight's planned Matmul
  (``ustc.torch.inference``), the bias added in the same pass;
* ``ustc::sparse_mm(signature, shape, buffers, values, other, sparse_left)``:
  ``W @ other`` (``sparse_left``) or ``other @ W``, ``other`` 1-D or 2-D
  (``matmul``, ``@``, ``mm``, ``mv``, ``addmm``);
* ``ustc::sddmm(signature, shape, buffers, values, keep, left, right)``: the
  gradient of the values, ``left @ right`` at the stored pattern (0 at padding
  and at the slots ``keep`` leaves out).

Both are differentiable in ``other`` and ``values`` (``register_autograd``),
so a frozen sparse weight under trainable dense layers (adapters) compiles for
training too. Training the TorchUST weights themselves under compile is
refused with :class:`ustc.UnsupportedOperation` (:data:`REFUSED`), as is any
other op on a TorchUST: compile for inference (``torch.no_grad()``,
``torch.inference_mode()``, or frozen weights) and train them eagerly.

Each has a fake (meta) implementation giving the result's shape and dtype, so
a model of sparse ``nn.Linear`` layers compiles into one graph with no graph
break per layer (``torch.compile(model, fullgraph=True)``). At run time
``ustc::linear`` on the CPU finds the live TorchUST over the same tensors (the
model's parameter) and runs the eager layer's own plan through
``inference.planned_linear``; where there is none (and for the other ops) the
op rebuilds the ustc Tensor over the same buffers (cached per values tensor)
and runs the eager product.
"""

from __future__ import annotations

import functools
import operator
import weakref

import torch
import torch.nn.functional as F

from ..errors import ShapeError, UnsupportedOperation
from ..format.ir import TensorFormat
from ..tensor import packages
from ..tensor.tensor import Tensor
from . import inference
from .autograd import sddmm
from .matmul import matmul2d
from .pattern import _KEEP
from .subclass import COMPILED, OWNERS, TorchUST, holds_buffers, host

_WEIGHTS: dict = {}  # id(values) -> (weakref to values, signature, shape, buffers, data_ptr, shape, dtype, TorchUST)


def _weight(signature: str, shape, buffers, values, keep=None) -> TorchUST:
    """The TorchUST described by the op's arguments (zero-copy; cached while ``values`` lives).

    A hit needs the same buffer tensors (the cache holds them, so their ids are not reused), the same
    format text and shape, and ``values`` still at the same address with the same shape and dtype.
    Keyed by ``id(values)`` with a weak reference to check it: a ``WeakIdKeyDictionary`` lookup made
    a Python key object per call (~1 µs of a compiled batch-1 call)."""
    hit = _WEIGHTS.get(id(values))
    if hit is not None and hit[0]() is values and hit[1] == signature and hit[2] == shape and \
            hit[4] == values.data_ptr() and hit[6] is values.dtype and hit[5] == values.shape and \
            len(hit[3]) == len(buffers) and all(map(operator.is_, hit[3], buffers)):
        return hit[7]
    fmt = TensorFormat.parse(signature)
    arrays = {k: host(b) for k, b in zip(sorted(fmt.buffers), buffers)}
    device = "cuda" if values.device.type == "cuda" else "cpu"
    ust = Tensor(fmt, tuple(int(n) for n in shape), arrays, host(values), device=device, package=packages.TORCH)
    weight = TorchUST(ust, dtype=values.dtype)
    key = id(values)
    ref = weakref.ref(values, functools.partial(_forget, key))
    _WEIGHTS[key] = (ref, signature, list(shape), tuple(buffers), values.data_ptr(), values.shape, values.dtype,
                     weight)
    return weight


def _eager_weight(signature: str, shape, buffers, values):
    """The live TorchUST over these very tensors that eager calls use (``subclass.OWNERS``: a model's
    parameter), or None. The compiled ``ustc::linear`` then runs the eager layer's own plan (its bound call
    and kept result, ``ustc.torch.inference``: plans are kept per storage) instead of planning again for a
    rebuilt weight. OWNERS holds weak references only (the layer may die); every tensor is checked by identity.
    The shape is the ustc Tensor's (``weight.shape`` runs the subclass's ``__torch_function__``: with
    ``buffer_tensors`` 3 of the 4 µs this check took per layer call, 512 x 512, thread CPU time)."""
    weight = OWNERS.get(id(values))
    if weight is None or weight._v is not values or weight._ust is None or weight._sig != signature or \
            weight._ust.shape != tuple(shape) or not holds_buffers(weight, buffers):
        return None
    return weight


def _forget(key: int, ref) -> None:
    """Drop the cache entry of a values tensor that died (unless the id now names a newer one)."""
    hit = _WEIGHTS.get(key)
    if hit is not None and hit[0] is ref:
        del _WEIGHTS[key]


def _product_shape(shape, other, sparse_left: bool):
    m, n = shape
    if sparse_left:
        if other.shape[0] != n:
            raise ShapeError(f"ustc::sparse_mm: shapes {tuple(shape)} and {tuple(other.shape)} do not multiply")
        return (m,) if other.dim() == 1 else (m, other.shape[1])
    if other.shape[-1] != m:
        raise ShapeError(f"ustc::sparse_mm: shapes {tuple(other.shape)} and {tuple(shape)} do not multiply")
    return (n,) if other.dim() == 1 else (other.shape[0], n)


def _sparse_mm(signature: str, shape: list[int], buffers: list[torch.Tensor], values: torch.Tensor,
               other: torch.Tensor, sparse_left: bool) -> torch.Tensor:
    """``W @ other`` (``sparse_left``) or ``other @ W``; ``W`` the 2-D sparse matrix of the arguments."""
    weight = _weight(signature, shape, buffers, values)
    out = matmul2d(weight, other) if sparse_left else matmul2d(other, weight)
    return out.contiguous() if out._base is not None or not out.is_contiguous() else out


sparse_mm = torch.library.custom_op("ustc::sparse_mm", _sparse_mm, mutates_args=())


@sparse_mm.register_fake
def _sparse_mm_fake(signature, shape, buffers, values, other, sparse_left):
    return other.new_empty(_product_shape(shape, other, sparse_left),
                           dtype=torch.promote_types(values.dtype, other.dtype))


@torch.library.custom_op("ustc::sddmm", mutates_args=())
def sddmm_values(signature: str, shape: list[int], buffers: list[torch.Tensor], values: torch.Tensor,
                 keep: torch.Tensor | None, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``left @ right`` at the pattern of the sparse matrix of the arguments, as its values (0 off the pattern)."""
    weight = _weight(signature, shape, buffers, values)
    if keep is not None:
        weight = TorchUST(Tensor(weight.ust.format, weight.ust.shape, weight.ust.raw_buffers, weight.ust.raw_values,
                                 device=weight.ust.device, package=weight.ust.package), dtype=weight.dtype)
        _KEEP[weight.ust] = keep.cpu().numpy().reshape(-1)
    return sddmm(weight, left, right).stored_values().to(values.dtype).reshape(values.shape).clone()


@sddmm_values.register_fake
def _sddmm_fake(signature, shape, buffers, values, keep, left, right):
    return torch.empty_like(values)


def _sparse_linear(signature: str, shape: list[int], buffers: list[torch.Tensor], values: torch.Tensor,
                   x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, W, bias)`` for the 2-D sparse ``W`` of the arguments and ``x`` of any leading shape:
    the weight's planned Matmul on the CPU (``ustc.torch.inference``), the bias added in the same pass."""
    if x.is_cpu and x.dim() > 0:
        weight = _eager_weight(signature, shape, buffers, values)
        if weight is None:
            weight = _weight(signature, shape, buffers, values)
        return inference.planned_linear(x, weight, bias, contiguous=True, kept=not torch.is_grad_enabled())
    weight = _weight(signature, shape, buffers, values)
    flat = x.reshape(-1, x.shape[-1])
    out = matmul2d(weight, flat.t()).t().reshape(*x.shape[:-1], shape[0])
    return (out if bias is None else out + bias).contiguous()


sparse_linear = torch.library.custom_op("ustc::linear", _sparse_linear, mutates_args=())

# The CPU kernels of the two products, registered with the dispatcher itself: through custom_op's own
# kernel (its Python device lookup, the _disable_dynamo wrapper, the output aliasing check) a call at
# batch 1 costs ~10 µs more, half a 512 x 512 product at 90% zeros. Both return new tensors (never an
# input or a view of one), which is what that check verifies; opcheck (tests/torch/test_compile.py)
# checks schema, fake and autograd registrations through this kernel. CUDA keeps custom_op's.
_CPU_KERNELS = torch.library.Library("ustc", "IMPL")
_CPU_KERNELS.impl("linear", _sparse_linear, "CPU")
_CPU_KERNELS.impl("sparse_mm", _sparse_mm, "CPU")


@sparse_linear.register_fake
def _sparse_linear_fake(signature, shape, buffers, values, x, bias):
    if x.shape[-1] != shape[1]:
        raise ShapeError(f"ustc::linear: input of shape {tuple(x.shape)} and weight of shape {tuple(shape)}")
    return x.new_empty((*x.shape[:-1], shape[0]), dtype=torch.promote_types(values.dtype, x.dtype))


def _sparse_linear_setup(ctx, inputs, output):
    signature, shape, buffers, values, x, bias = inputs
    ctx.spec = (signature, shape, bias is not None)
    ctx.save_for_backward(values, x, *buffers)


def _sparse_linear_backward(ctx, grad):
    signature, shape, has_bias = ctx.spec
    values, x, *buffers = ctx.saved_tensors
    g2 = grad.reshape(-1, shape[0])
    x2 = x.reshape(-1, shape[1])
    grad_x = grad_values = grad_bias = None
    if ctx.needs_input_grad[4]:  # dx = g W
        grad_x = sparse_mm(signature, shape, buffers, values, g2, False).reshape(x.shape).to(x.dtype)
    if ctx.needs_input_grad[3]:  # dW = gᵀ x at the pattern
        grad_values = sddmm_values(signature, shape, buffers, values, None, g2.t(), x2)
    if has_bias and ctx.needs_input_grad[5]:
        grad_bias = g2.sum(0)
    return None, None, [None] * len(buffers), grad_values, grad_x, grad_bias


sparse_linear.register_autograd(_sparse_linear_backward, setup_context=_sparse_linear_setup)


def _sparse_mm_setup(ctx, inputs, output):
    signature, shape, buffers, values, other, sparse_left = inputs
    ctx.spec = (signature, shape, sparse_left)
    ctx.save_for_backward(values, other, *buffers)


def _sparse_mm_backward(ctx, grad):
    signature, shape, sparse_left = ctx.spec
    values, other, *buffers = ctx.saved_tensors
    g2 = grad if grad.dim() == 2 else (grad.unsqueeze(1) if sparse_left else grad.unsqueeze(0))
    o2 = other if other.dim() == 2 else (other.unsqueeze(1) if sparse_left else other.unsqueeze(0))
    grad_other = grad_values = None
    if ctx.needs_input_grad[4]:
        # W @ X: dX = Wᵀ g = (gᵀ W)ᵀ;  X @ W: dX = g Wᵀ = (W gᵀ)ᵀ
        grad_other = sparse_mm(signature, shape, buffers, values, g2.t(), not sparse_left).t()
        grad_other = grad_other.reshape(other.shape).to(other.dtype)
    if ctx.needs_input_grad[3]:
        left, right = (g2, o2.t()) if sparse_left else (o2.t(), g2)
        grad_values = sddmm_values(signature, shape, buffers, values, None, left, right)
    return None, None, [None] * len(buffers), grad_values, grad_other, None


sparse_mm.register_autograd(_sparse_mm_backward, setup_context=_sparse_mm_setup)


# -- the matmul family while Dynamo traces --------------------------------------------------
def _mm(a, b):
    """``a @ b`` (1-D / 2-D), one of them a TorchUST: one ``ustc::sparse_mm`` call."""
    if isinstance(a, TorchUST) and isinstance(b, TorchUST):
        raise UnsupportedOperation("ustc.torch: a product of two TorchUSTs is not supported under torch.compile; "
                                   "call .to_dense() on one of them")
    sparse_left = isinstance(a, TorchUST)
    weight, other = (a, b) if sparse_left else (b, a)
    if weight.dim() != 2:
        raise UnsupportedOperation(f"ustc.torch: under torch.compile the sparse operand of a product must be "
                                   f"2-D, got shape {tuple(weight.shape)}")
    return sparse_mm(weight.signature, list(weight.shape), list(weight.buffer_tensors), weight._v, other,
                     sparse_left)


def _matmul(a, b):
    if a.dim() <= 2 and b.dim() <= 2:
        return _mm(a, b)
    if isinstance(b, TorchUST) and not isinstance(a, TorchUST):  # (..., n, k) @ (k, m)
        return _mm(a.reshape(-1, a.shape[-1]), b).reshape(*a.shape[:-1], b.shape[-1])
    if isinstance(a, TorchUST) and not isinstance(b, TorchUST):  # (m, k) @ (..., k, n)
        k, n = b.shape[-2], b.shape[-1]
        out = _mm(a, b.movedim(-2, 0).reshape(k, -1)).reshape(a.shape[0], *b.shape[:-2], n)
        return out.movedim(0, -2)
    raise UnsupportedOperation(f"ustc.torch: matmul of shapes {tuple(a.shape)} and {tuple(b.shape)} with a TorchUST "
                               f"is not supported under torch.compile")


def _linear(x, weight, bias=None):
    if isinstance(x, TorchUST) or not isinstance(weight, TorchUST) or isinstance(bias, TorchUST):
        raise UnsupportedOperation("ustc.torch: under torch.compile, linear takes a dense input and bias and a "
                                   "TorchUST weight")
    if weight.dim() != 2:
        raise UnsupportedOperation(f"ustc.torch: the weight of linear must be 2-D, got shape {tuple(weight.shape)}")
    return sparse_linear(weight.signature, list(weight.shape), list(weight.buffer_tensors), weight._v, x, bias)


def _addmm(inp, a, b, *, beta=1, alpha=1):
    out = _mm(a, b)
    out = out if alpha == 1 else out * alpha
    return out if beta == 0 else out + (inp if beta == 1 else beta * inp)


REFUSED = ("ustc.torch: {op} on a TorchUST cannot be compiled. Under torch.compile, products with TorchUST "
           "weights (F.linear / nn.Linear, matmul, @, mm, mv, addmm) compile for inference: run the compiled "
           "model under torch.no_grad() or torch.inference_mode(), or freeze the TorchUST weights "
           "(requires_grad_(False); dense layers around them may train). Train TorchUST weights eagerly, "
           "and call other ops eagerly or on .to_dense()")

_TABLE = {
    F.linear: _linear,
    torch.matmul: _matmul, torch.Tensor.matmul: _matmul, torch.Tensor.__matmul__: _matmul,
    torch.Tensor.__rmatmul__: lambda b, a: _matmul(a, b),
    torch.mm: _mm, torch.Tensor.mm: _mm, torch.mv: _mm, torch.Tensor.mv: _mm,
    torch.addmm: _addmm, torch.Tensor.addmm: _addmm, torch.addmv: _addmm, torch.Tensor.addmv: _addmm,
}


def torch_function(func, args, kwargs):
    """``TorchUST.__torch_function__`` while Dynamo traces: products become custom ops; every other op
    runs as usual (and reaches ``__torch_dispatch__`` with fake tensors, where it is refused: :data:`REFUSED`)."""
    impl = _TABLE.get(func)
    if impl is not None:
        if torch.is_grad_enabled() and not torch.compiler.is_exporting() and \
                any(isinstance(a, TorchUST) and a.requires_grad for a in args):
            raise UnsupportedOperation(REFUSED.format(op=getattr(func, "__name__", func)))
        return impl(*args, **kwargs)
    with torch._C.DisableTorchFunctionSubclass():
        return func(*args, **kwargs)


COMPILED["torch_function"] = torch_function
COMPILED["refused"] = REFUSED
