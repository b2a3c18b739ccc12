"""Ops on TorchUSTs whose results are dense: reductions, indexing, and element-wise ops with a dense operand.

    >>> import torch, ustc.torch
    >>> W = ustc.torch.TorchUST.from_torch(torch.tensor([[1.0, 0.0], [0.0, -2.0]]), "CSR")
    >>> W.sum().item(), W.abs().mean().item(), W[1].tolist(), W[:, 0].tolist()
    (-1.0, 0.75, [0.0, -2.0], [1.0, 0.0])
    >>> (W + torch.ones(2, 2)).tolist()    # a LoRA-style merge: dense
    [[2.0, 1.0], [1.0, -1.0]]

These run at the aten level (below autograd), so torch's own backward formulas
apply; the gradient a TorchUST weight receives from them is dense and is
sampled at its pattern by the hook every TorchUST leaf carries
(``ustc.torch.subclass.install_grad_hook``): ``W.grad`` is then what the
dense model with the pruning mask applied to its gradient gets, stored in
``W``'s format. The rules:

* **reductions** (``sum``, ``mean``, ``amax``, ``max``, ``argmax``, ``std``,
  ``var``, ``prod``, ``any``, ``count_nonzero``, ``equal``, ``allclose``, ...
  with or without ``dim``; :data:`REDUCTIONS`): the
  dense result of the dense tensor the TorchUST stands for (0 outside its
  pattern); a whole ``sum`` / ``mean`` adds the values in the pattern only.
  Norms are ``ustc.torch.pointwise``'s;
* **indexing** (``W[i]``, ``W[:, j]``, ``W[a:b]``, ``select``, ``slice``,
  ``index_select``, ``W[index_tensor]``, ``diagonal``, ``gather``, ...;
  :data:`INDEXING`): a
  dense tensor (a new one, not a view); ``select`` and ``slice`` read only the
  rows or columns asked for (ustc's indexing);
* **element-wise ops whose result is dense** (``W + dense``, ``dense - W``,
  ``W * dense``, ``torch.where(mask, W, dense)``, ``W + 1``, ``exp(W)``): the
  dense result, computed on the densified TorchUST (``ustc.torch.pointwise``,
  where element-wise ops between TorchUSTs of one pattern and numbers keep
  giving TorchUSTs when the result fits the pattern);
* **reshapes** (``view``, ``reshape``, ``flatten``; :data:`RESHAPES`): to the
  TorchUST's own shape, the TorchUST itself (an alias, as ``detach``); to any
  other shape, the dense tensor reshaped, a new tensor as for indexing (writes
  to it do not reach the TorchUST). ``W.grad.view(-1)`` is then the dense
  masked model's flat gradient, which is what ``torch.optim.LBFGS`` gathers
  (its flat update comes back through ``view_as(W)`` and an in-place ``add_``,
  which ``ustc.torch.pointwise`` projects onto the pattern).
"""

from __future__ import annotations

import numbers

import torch
from torch.utils._pytree import tree_map

from ..errors import UstcError
from .pattern import pattern_coords
from .subclass import HANDLERS, TorchUST, dense_of, to_torch

aten = torch.ops.aten

REDUCTIONS = {aten.sum, aten.mean, aten.nansum, aten.nanmean, aten.prod, aten.amax, aten.amin, aten.max, aten.min,
              aten.aminmax, aten.argmax, aten.argmin, aten.std, aten.var, aten.std_mean, aten.var_mean,
              aten.all, aten.any, aten.count_nonzero, aten.logsumexp, aten.norm, aten.frobenius_norm,
              aten.trace, aten.equal, aten.allclose, aten.isclose, aten.nonzero}
INDEXING = {aten.select, aten.slice, aten.index, aten.index_select, aten.narrow, aten.diagonal, aten.gather,
            aten.take, aten.masked_select, aten.unbind, aten.split, aten.split_with_sizes, aten.chunk}
RESHAPES = {aten.view, aten._unsafe_view, aten.reshape, aten._reshape_alias}
DENSE_RESULT = REDUCTIONS | INDEXING | RESHAPES


def _dense_tree(tree):
    return tree_map(lambda a: dense_of(a) if isinstance(a, TorchUST) else a, tree)


def _whole(args, kwargs) -> bool:
    """A reduction over every dimension, no keepdim, no dtype change."""
    dim = args[1] if len(args) > 1 and not isinstance(args[1], torch.dtype) else kwargs.get("dim")
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    return dim in (None, []) and not keepdim and kwargs.get("dtype") is None and \
        not any(isinstance(a, torch.dtype) for a in args[1:])


def _pattern_values(x: TorchUST):
    _, index = pattern_coords(x.ust, x.device)
    return x.stored_values().reshape(-1)[index]


def _reduce(func, args, kwargs):
    x = args[0]
    packet = func.overloadpacket
    if packet in (aten.sum, aten.mean) and isinstance(x, TorchUST) and _whole(args, kwargs) and \
            x.dtype.is_floating_point:
        total = _pattern_values(x).sum()
        return total if packet is aten.sum else total / x.numel()
    return func(*_dense_tree(args), **_dense_tree(kwargs))


def _rows(func, args, kwargs):
    """``select`` / ``slice`` of a 2-D TorchUST through ustc's indexing (only the part asked for is read)."""
    x = args[0]
    if not isinstance(x, TorchUST) or x.dim() != 2 or kwargs:
        return None
    dim = args[1] if len(args) > 1 else 0
    dim = dim % 2
    if func.overloadpacket is aten.select:
        index = args[2]
        if not isinstance(index, numbers.Integral):
            return None
        key = index if dim == 0 else (slice(None), index)
    else:
        start, end, step = (list(args[2:5]) + [None, None, 1])[:3]
        if step != 1:
            return None
        part = slice(start, min(end, x.shape[dim]) if end is not None else None)
        key = part if dim == 0 else (slice(None), part)
    try:
        result = x.numeric_ust()[key]
    except (UstcError, IndexError, TypeError, ValueError, NotImplementedError):
        return None
    dense = result.to_dense() if hasattr(result, "to_dense") else result
    out = to_torch(dense)
    out = out.clone() if not out.is_contiguous() or dense is getattr(result, "_values", None) else out
    return out.to(x.dtype) if out.dtype != x.dtype else out


def _index(func, args, kwargs):
    if func.overloadpacket in (aten.select, aten.slice):
        out = _rows(func, args, kwargs)
        if out is not None:
            return out
    return func(*_dense_tree(args), **_dense_tree(kwargs))


def _reshape(func, args, kwargs):
    """``view`` / ``reshape`` of a TorchUST (the module docstring's rule); ``view(dtype)`` is not a reshape."""
    x = args[0]
    if func._overloadname == "dtype" or not isinstance(x, TorchUST):
        return NotImplemented
    shape = torch.empty(tuple(x.shape), device="meta").reshape(args[1]).shape  # -1 resolved, sizes checked
    if shape == x.shape:
        return TorchUST(x)
    return dense_of(x).reshape(shape)


def dense_result(func, args, kwargs):
    """The dispatch handler for reductions and indexing on TorchUSTs (the module docstring's rules)."""
    packet = func.overloadpacket
    if packet in REDUCTIONS:
        return _reduce(func, args, kwargs)
    if packet in INDEXING or packet in RESHAPES:
        with torch.inference_mode(False):  # torch gives a view op's result its base's version counter,
            impl = _index if packet in INDEXING else _reshape  # which an inference tensor cannot take
            return impl(func, args, kwargs)
    return NotImplemented


HANDLERS.insert(0, dense_result)
