"""The fused optimizer kernels (``torch.optim.Adam(..., fused=True)``: ``aten._fused_adam_``, ``_fused_adamw_``,
``_fused_sgd_``, ``_fused_adagrad_``) with TorchUST parameters.

Each list entry whose parameter is a TorchUST runs the same fused op on one-entry lists of the values in the
parameter's pattern: the parameter's values, the gradient's and each per-element state's (a TorchUST of the
same pattern: its values; a dense tensor of the parameter's shape: gathered at the pattern's positions), 0-dim
entries (steps) as they are. What the op wrote is put back: copies of values into their slots (a pattern that
is not every slot: frozen zeros, padding), gathered dense state into its positions. So, as with the
element-wise rules (``ustc.torch.pointwise``), the parameter keeps its pattern and its values equal the fused
optimizer's on the dense masked model. Entries with dense parameters go to the op together, as they are.
"""

from __future__ import annotations

import torch

from ..errors import ShapeError
from .pattern import pattern_flat, pattern_slots, same_pattern
from .subclass import HANDLERS, TorchUST

aten = torch.ops.aten
_FUSED = ("_fused_adam_", "_fused_adamw_", "_fused_sgd_", "_fused_adagrad_")


def fused(func, args, kwargs):
    """The dispatch handler: the op per TorchUST entry on values (module docstring)."""
    if func.overloadpacket.__name__ not in _FUSED:
        return NotImplemented
    params = args[0]
    count = len(params)
    lists = [i for i, a in enumerate(args) if isinstance(a, (list, tuple)) and len(a) == count]
    dense = [i for i in range(count) if not isinstance(params[i], TorchUST)]
    if dense:
        func(*[[a[i] for i in dense] if k in lists else a for k, a in enumerate(args)], **kwargs)
    for i in range(count):
        if isinstance(params[i], TorchUST):
            _entry(func, args, kwargs, lists, i)
    return None


def _entry(func, args, kwargs, lists, i: int) -> None:
    param = args[0][i]
    ust = param.ust
    _, index, full = pattern_slots(ust, param.device)
    writes = []  # (target, the one-entry tensor the op wrote) to put back after the op

    def part(a):
        if not isinstance(a, torch.Tensor) or a.dim() == 0:
            return a
        if isinstance(a, TorchUST):
            if not same_pattern(a.ust, ust):
                raise ShapeError(f"{func}: a TorchUST operand of another pattern than its parameter's")
            flat = a.stored_values().view(-1)
            if full:
                return flat
            picked = flat[index]
            writes.append((flat, picked, index, False))
            return picked
        if a.shape != param.shape:
            raise ShapeError(f"{func}: an operand of shape {tuple(a.shape)} for a parameter of shape "
                             f"{tuple(param.shape)}")
        positions = pattern_flat(ust, param.device)
        picked = a.reshape(-1).index_select(0, positions)
        writes.append((a, picked, positions, True))
        return picked

    entry = [[part(a[i])] if k in lists else a for k, a in enumerate(args)]
    func(*entry, **kwargs)
    for target, picked, where, is_dense in writes:
        if not is_dense:
            target[where] = picked
        elif target.is_contiguous():
            target.view(-1).index_copy_(0, where, picked)
        else:  # (reshape would copy: written back whole)
            target.copy_(target.reshape(-1).index_copy(0, where, picked).view(target.shape))


HANDLERS.append(fused)
