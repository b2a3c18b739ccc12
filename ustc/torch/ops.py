"""The ops TorchUST intercepts: the matmul family, views, copies and ``*_like`` (element-wise ops: ``pointwise``).

Every product is composed from one 2-D core: :class:`~ustc.torch.autograd.MatmulFn`
at the torch-function level (differentiable) or ``matmul2d`` at the aten level
(below autograd). Batched and broadcast forms reshape their dense operands
around it, so their gradients follow from torch's own view ops.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import ShapeError, UnsupportedOperation
from ..tensor.tensor import Tensor
from . import pointwise  # noqa: F401  (registers the element-wise handlers)
from . import dense_results  # noqa: F401  (reductions and indexing: dense results)
from . import inference, training
from .autograd import MatmulFn
from .matmul import batch_slice, is_sparse, matmul2d
from .pattern import same_pattern, share
from .subclass import DISPATCH, FUNCTIONS, TorchUST, torch_parts, with_values

aten = torch.ops.aten


def _mm_ad(a, b):
    return MatmulFn.apply(a, b)


def _densified(x):
    return x.to_dense() if is_sparse(x) else x


def _dense_operand(x):
    """``x``, or its dense tensor when it is a TorchUST whose levels are all dense (such a tensor
    is a dense operand: a batched product of it runs as torch's)."""
    return x.to_dense() if is_sparse(x) and x.ust.format.all_dense else x


# -- the matmul family, parameterised by the 2-D core --------------------------------------
def matmul_nd(a, b, mm):
    """``torch.matmul`` semantics: vectors, matrices, a batched dense side, or batched TorchUSTs (of
    more than 2 dimensions, an all-dense TorchUST is a dense operand)."""
    if a.dim() <= 2 and b.dim() <= 2:
        if a.dim() == 0 or b.dim() == 0:
            raise ShapeError("ustc.torch.matmul: both operands need at least one dimension")
        return mm(a, b)
    a, b = _dense_operand(a), _dense_operand(b)
    if not is_sparse(a) and not is_sparse(b):
        return torch.matmul(a, b)
    if is_sparse(b) and b.dim() == 2 and not is_sparse(a):  # (..., n, k) @ (k, m)
        out = mm(a.reshape(-1, a.shape[-1]), b)
        return out.reshape(*a.shape[:-1], b.shape[-1])
    if is_sparse(a) and a.dim() == 2 and not is_sparse(b):  # (m, k) @ (..., k, n)
        k, n = b.shape[-2], b.shape[-1]
        columns = b.movedim(-2, 0).reshape(k, -1)
        out = mm(a, columns).reshape(a.shape[0], *b.shape[:-2], n)
        return out.movedim(0, -2)
    if a.dim() == 3 and b.dim() == 3:
        return bmm(a, b, mm)
    raise UnsupportedOperation(f"ustc.torch.matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} with "
                               f"{'a sparse' if is_sparse(a) else 'a dense'} left operand are not supported; "
                               f"use 2-D TorchUSTs, 3-D ones with a batch level, or .to_dense()")


def bmm(a, b, mm):
    """Batched product of 3-D operands, one 2-D product per batch (the plan cache serves all but the first);
    a TorchUST whose levels are all dense is a dense operand."""
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0]:
        raise ShapeError(f"ustc.torch.bmm: expected 3-D operands with one batch size, got {tuple(a.shape)} "
                         f"and {tuple(b.shape)}")
    a, b = _dense_operand(a), _dense_operand(b)
    if not is_sparse(a) and not is_sparse(b):
        return torch.bmm(a, b)
    for x in (a, b):
        if is_sparse(x) and x.requires_grad and torch.is_grad_enabled():
            raise UnsupportedOperation("ustc.torch.bmm: gradients w.r.t. a batched TorchUST are not supported; "
                                       "use 2-D TorchUSTs (mm / linear) for trainable weights")
    return torch.stack([mm(batch_slice(a, k), batch_slice(b, k)) for k in range(a.shape[0])])


def _scaled(out, alpha):
    return out if alpha == 1 else out * alpha


def addmm(input, a, b, mm, *, beta=1, alpha=1):
    """``beta * input + alpha * (a @ b)`` (``input`` ignored when beta is 0, as in torch)."""
    out = _scaled(mm(a, b), alpha)
    if beta == 0:
        return out
    term = _densified(input)
    return out + (term if beta == 1 else beta * term)


def linear(x, weight, bias, mm):
    """``x @ weightᵀ + bias`` for any leading shape of ``x`` (inference: ``ustc.torch.inference``)."""
    if type(weight) is TorchUST:
        out = inference.linear(x, weight, bias)
        if out is not None:
            return out
        if training.applies(x, weight, bias):
            return training.linear(x, weight, bias)
    if x.dim() == 0:
        raise ShapeError("ustc.torch.linear: the input needs at least one dimension")
    if weight.dim() != 2:
        raise ShapeError(f"ustc.torch.linear: the weight must be 2-D, got shape {tuple(weight.shape)}")
    if x.dim() > 2 and not is_sparse(x):
        out = mm(x.reshape(-1, x.shape[-1]), _transposed_weight(weight)).reshape(*x.shape[:-1], weight.shape[0])
    else:
        out = mm(x, _transposed_weight(weight))
    return out if bias is None else out + _densified(bias)


def _transposed_weight(weight):
    """``weight.t()``; for a TorchUST that autograd need not track, the zero-copy view made directly."""
    if is_sparse(weight) and not (weight.requires_grad and torch.is_grad_enabled()):
        return TorchUST(share(weight.ust, weight.ust.T, same_coords=False, transposed=True), dtype=weight.dtype)
    return weight.t()


def _register_functions():
    ad = _mm_ad
    table = {
        "mm": lambda a, b, **kw: matmul_nd(a, b, ad) if a.dim() == 2 and b.dim() == 2 else _bad("mm", a, b),
        "mv": lambda a, b, **kw: ad(a, b) if a.dim() == 2 and b.dim() == 1 else _bad("mv", a, b),
        "dot": lambda a, b, **kw: ad(a, b) if a.dim() == 1 and b.dim() == 1 else _bad("dot", a, b),
        "matmul": lambda a, b, **kw: matmul_nd(a, b, ad),
        "bmm": lambda a, b, **kw: bmm(a, b, ad),
        "addmm": lambda i, a, b, **kw: addmm(i, a, b, ad, beta=kw.get("beta", 1), alpha=kw.get("alpha", 1)),
        "addmv": lambda i, a, b, **kw: addmm(i, a, b, ad, beta=kw.get("beta", 1), alpha=kw.get("alpha", 1)),
        "baddbmm": lambda i, a, b, **kw: addmm(i, a, b, lambda x, y: bmm(x, y, ad),
                                               beta=kw.get("beta", 1), alpha=kw.get("alpha", 1)),
    }
    for name, impl in table.items():
        for owner in (torch, torch.Tensor):
            FUNCTIONS[getattr(owner, name)] = autocast(name, impl)
    FUNCTIONS[torch.Tensor.__matmul__] = autocast("matmul", table["matmul"])
    FUNCTIONS[torch.Tensor.__rmatmul__] = autocast("matmul", lambda b, a: matmul_nd(a, b, ad))
    FUNCTIONS[F.linear] = autocast("linear", lambda x, w, bias=None: linear(x, w, bias, ad))


# the products torch's autocast runs in the lower precision (CPU; CUDA adds mv, dot, addmv)
_AUTOCAST = {"cpu": {"mm", "matmul", "addmm", "linear", "bmm", "baddbmm"}}
_AUTOCAST["cuda"] = _AUTOCAST["cpu"] | {"mv", "dot", "addmv"}


def autocast(name: str, impl):
    """``impl`` under ``torch.autocast``: floating operands (TorchUSTs included, through ``.to``, which
    autograd records) cast to the autocast dtype, as torch's autocast does for the dense op, and the
    product run with autocast off. TorchUST products are taken before torch's autocast would see them
    (``__torch_function__``), so without this they would stay in the weights' dtype."""
    def run(*args, **kwargs):
        if not torch._C._is_any_autocast_enabled():
            return impl(*args, **kwargs)
        device = next((a.device.type for a in args if isinstance(a, torch.Tensor)), "cpu")
        if device not in _AUTOCAST or name not in _AUTOCAST[device] or not torch.is_autocast_enabled(device):
            return impl(*args, **kwargs)
        dtype = torch.get_autocast_dtype(device)
        cast = lambda a: a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() and \
            a.dtype != dtype else a  # noqa: E731
        args, kwargs = tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}
        with torch.autocast(device, enabled=False):
            return impl(*args, **kwargs)
    return run


def _bad(name, a, b):
    raise ShapeError(f"ustc.torch.{name}: unexpected operand shapes {tuple(a.shape)} and {tuple(b.shape)}")


# -- aten level: products without autograd, views, copies ----------------------------------
def _aten_products():
    mm = matmul2d
    DISPATCH[aten.mm] = lambda f, args, kw: matmul_nd(args[0], args[1], mm)
    DISPATCH[aten.mv] = lambda f, args, kw: mm(args[0], args[1])
    DISPATCH[aten.dot] = lambda f, args, kw: mm(args[0], args[1])
    DISPATCH[aten.bmm] = lambda f, args, kw: bmm(args[0], args[1], mm)
    for op in (aten.addmm, aten.addmv):
        DISPATCH[op] = lambda f, args, kw: addmm(*args[:3], mm, beta=kw.get("beta", 1), alpha=kw.get("alpha", 1))
    DISPATCH[aten.baddbmm] = lambda f, args, kw: addmm(*args[:3], lambda x, y: bmm(x, y, mm),
                                                      beta=kw.get("beta", 1), alpha=kw.get("alpha", 1))


def _transpose_2d(x, perm, name):
    if x.dim() < 2 and name == "t":   # as torch: t() of a 0-D or 1-D tensor is the tensor
        return TorchUST(x.ust, dtype=x.dtype)
    if x.dim() != 2:
        raise UnsupportedOperation(f"ustc.torch: aten.{name} of a {x.dim()}-D TorchUST is not supported "
                                   f"(2-D only); call .to_dense() first")
    perm = tuple(p % 2 for p in perm)
    if perm != (1, 0):
        return TorchUST(x.ust, dtype=x.dtype)
    return TorchUST(share(x.ust, x.ust.T, same_coords=False, transposed=True), dtype=x.dtype)


def _to_copy(x, dtype=None, device=None, **_):
    ust = x.ust
    if device is not None and torch.device(device).type != x.device.type:
        ust = ust.to(torch.device(device).type)
    if dtype is not None and dtype != x.dtype:
        values = torch_parts(ust, x.dtype)[0] if ust is not x.ust else x.stored_values()
        ust = with_values(ust, values.to(dtype))
    elif ust is x.ust:
        ust = ust.copy()
    return TorchUST(share(x.ust, ust), dtype=dtype if dtype is not None else x.dtype)


def _dense_like(func, args, kwargs):
    """``zeros_like(W)``, ``new_zeros(W, size)``, ...: dense strided tensors, as for any strided tensor.

    The op runs on a meta-device stand-in of ``W``'s shape and dtype, on ``W``'s
    device unless ``device=`` says otherwise (so every keyword keeps its meaning).
    """
    x = args[0]
    proxy = torch.empty(tuple(x.shape), dtype=x.dtype, device="meta")
    kwargs = dict(kwargs)
    if kwargs.get("device") is None:
        kwargs["device"] = x.device
    return func(proxy, *args[1:], **kwargs)


def _view(impl):
    """A view op's result made outside inference mode: torch gives views their base's version
    counter, which an inference tensor cannot take."""
    def run(func, args, kwargs):
        with torch.inference_mode(False):
            return impl(func, args, kwargs)
    return run


def _aten_views():
    DISPATCH[aten.t] = _view(lambda f, args, kw: _transpose_2d(args[0], (1, 0), "t"))
    DISPATCH[aten.transpose] = _view(lambda f, args, kw: _transpose_2d(
        args[0], (1, 0) if args[1] % 2 != args[2] % 2 else (0, 1), "transpose"))
    DISPATCH[aten.permute] = _view(lambda f, args, kw: _transpose_2d(args[0], tuple(args[1]), "permute"))
    DISPATCH[aten.detach] = _view(lambda f, args, kw: TorchUST(args[0]))
    DISPATCH[aten.alias] = _view(lambda f, args, kw: TorchUST(args[0]))
    DISPATCH[aten.clone] = lambda f, args, kw: TorchUST(share(args[0].ust, args[0].ust.copy()), dtype=args[0].dtype)
    DISPATCH[aten._to_copy] = lambda f, args, kw: _to_copy(args[0], **kw)
    DISPATCH[aten.to] = lambda f, args, kw: f.decompose(*args, **kw)  # reached unexpanded under autocast
    for name in ("empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like",
                 "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full"):
        DISPATCH[getattr(aten, name)] = _dense_like


_register_functions()
_aten_products()
_aten_views()
__all__ = ["matmul_nd", "bmm", "addmm", "linear", "same_pattern"]
