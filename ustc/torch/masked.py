"""``W[mask] = value`` on a TorchUST (``aten.index_put_`` with one boolean mask of ``W``'s shape and a 0-dim
or one-element value: what ``torch.optim.Rprop`` runs on its sign and gradient tensors).

As for every in-place op on a TorchUST (``ustc.torch.pointwise``), the write is projected onto the pattern:
the values at the pattern's positions where the mask is true become ``value``; entries outside the pattern
stay 0. The mask may be dense or a TorchUST (read at the pattern's positions either way). Other index_put_
forms (integer indices, a mask of fewer dimensions, a value tensor per entry) keep the clear refusal.
"""

from __future__ import annotations

import torch

from .pointwise import update_values
from .subclass import HANDLERS, TorchUST

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
    # the mask read at the pattern's positions, the value written into the stored values (pointwise's rule)
    rest = (indices, value.reshape(()).to(target.dtype), *args[3:])
    return update_values(func, target, rest, kwargs)


HANDLERS.append(index_put)
