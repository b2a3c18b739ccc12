"""``W[mask] = value`` on a TorchUST (``aten.index_put_`` with one boolean mask of ``W``'s shape and a 0-dim
or one-element value: what ``torch.optim.Rprop`` runs on its sign and gradient tensors).

As for every in-place op on a TorchUST (``ustc.torch.pointwise``), the write is projected onto the pattern:
the values at the pattern's positions where the mask is true become ``value``; entries outside the pattern
stay 0. The mask may be dense or a TorchUST (read at the pattern's positions either way). Other index_put_
forms (integer indices, a mask of fewer dimensions, a value tensor per entry) keep the clear refusal.
"""

from __future__ import annotations

import torch

from .pattern import pattern_flat, pattern_slots, same_pattern
from .subclass import HANDLERS, TorchUST, dense_of

aten = torch.ops.aten


def index_put(func, args, kwargs):
    """The dispatch handler (module docstring); NotImplemented for every other case."""
    if func.overloadpacket is not aten.index_put_ or not isinstance(args[0], TorchUST):
        return NotImplemented
    target, indices, value = args[0], args[1], args[2]
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    if accumulate or len(indices) != 1 or not isinstance(value, torch.Tensor) or value.numel() != 1:
        return NotImplemented
    mask = indices[0]
    if mask is None or mask.dtype != torch.bool or tuple(mask.shape) != tuple(target.shape):
        return NotImplemented
    ust = target.ust
    _, index, full = pattern_slots(ust, target.device)
    if isinstance(mask, TorchUST):
        picked = mask.stored_values().reshape(-1) if same_pattern(mask.ust, ust) else None
        if picked is not None and not full:
            picked = picked[index]
        if picked is None:
            mask = dense_of(mask)
    if not isinstance(mask, TorchUST):
        picked = mask.reshape(-1).index_select(0, pattern_flat(ust, target.device))
    flat = target.stored_values().view(-1)
    fill = value.reshape(()).to(flat.dtype)
    if full:
        flat.masked_fill_(picked, fill)
    else:
        flat[index[picked]] = fill
    return target


HANDLERS.append(index_put)
