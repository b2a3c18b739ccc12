"""The stored pattern of a TorchUST: which value slots are matrix entries that may change.

A value slot of a ustc Tensor is *in the pattern* when it is stored, lies
inside the tensor (DIA diagonals and edge blocks have padding slots outside
it) and is not frozen. :func:`freeze_zeros` freezes the slots that hold 0 at
that moment (the explicit zeros inside BSR blocks, n:m and delta padding):
gradients are 0 there and in-place updates never write them, so a pruned
weight keeps its pruning mask whatever an optimizer does.

The frozen mask belongs to the ustc Tensor (a ``WeakKeyDictionary`` keyed by
it); every TorchUST made from one (``detach``, gradients, ``with_values``,
``clone``, views, ``to``) passes it on through :func:`share`.
"""

from __future__ import annotations

import weakref

import numpy as np
import torch

from ..tensor import storage
from ..tensor.tensor import Tensor

_KEEP: "weakref.WeakKeyDictionary[Tensor, np.ndarray]" = weakref.WeakKeyDictionary()
_COORDS: "weakref.WeakKeyDictionary[Tensor, dict]" = weakref.WeakKeyDictionary()


def slot_count(ust: Tensor) -> int:
    """Number of value slots (all batches, padding included)."""
    return int(np.prod(ust.raw_values.shape, dtype=np.int64))


def keep_mask(ust: Tensor):
    """The host bool array over the (flattened) value slots that are not frozen, or None when none is."""
    return _KEEP.get(ust)


def freeze_zeros(ust: Tensor, values=None) -> None:
    """Freeze the slots of ``ust`` that hold 0 now: they leave the pattern (see the module docstring).

    ``values``: ``ust``'s values as a torch tensor (needed for bfloat16, whose
    uint16 bits hold -0.0 as a nonzero pattern).
    """
    if values is not None and not ust.format.batch_levels:
        keep = (values.detach().reshape(-1) != 0).cpu().numpy()
    else:
        host_ust = ust if ust.device == "cpu" else ust.to("cpu")
        keep = np.asarray(host_ust._flatten()[1]).reshape(-1) != 0
    previous = _KEEP.get(ust)
    _KEEP[ust] = keep if previous is None else keep & previous
    _COORDS.pop(ust, None)


def share(source: Tensor, target: Tensor, *, same_coords: bool = True, transposed: bool = False) -> Tensor:
    """Give ``target`` (same value slots as ``source``) ``source``'s frozen mask; returns ``target``.

    ``same_coords``: the two have the same coordinates too, so cached coordinates
    are shared as well; ``transposed`` (with ``same_coords=False``): ``target`` is
    the 2-D transposed view of ``source``, so they are shared swapped (a backward
    pass through ``W.t()`` then needs no new walk of the storage).
    """
    if target is source:
        return target
    keep = _KEEP.get(source)
    if keep is not None:
        _KEEP[target] = keep
    if same_coords and source in _COORDS:
        _COORDS[target] = _COORDS[source]
    elif transposed and source in _COORDS:  # the same slots at swapped coordinates
        # device keys only: ("flat", device) holds row-major positions, which swapping does not give
        _COORDS[target] = {key: ((entry[0][1], entry[0][0]), entry[1], entry[2])
                           for key, entry in _COORDS[source].items()
                           if isinstance(key, torch.device) and len(entry[0]) == 2}
    return target


def pattern_coords(ust: Tensor, device) -> tuple:
    """``(coords, index)``: coordinates of each slot in the pattern and its slot number, as torch int64.

    Cached per ustc Tensor and device (a TorchUST never changes its pattern).
    """
    coords, index, _ = pattern_slots(ust, device)
    return coords, index


def pattern_slots(ust: Tensor, device) -> tuple:
    """``(coords, index, full)``; ``full`` when the pattern is every slot in order (no gather needed)."""
    device = torch.device(device)
    cache = _COORDS.setdefault(ust, {})
    cached = cache.get(device)
    if cached is None:
        host_ust = ust if ust.device == "cpu" else ust.to("cpu")
        buffers, values = host_ust._flatten()
        coords, index = storage.unpack(host_ust.layout, buffers, len(values))
        keep = _KEEP.get(ust)
        if keep is not None:
            chosen = keep[index]
            coords, index = tuple(c[chosen] for c in coords), index[chosen]
        full = len(index) == slot_count(ust) and bool((index == np.arange(len(index))).all())
        cached = (tuple(torch.tensor(c, dtype=torch.int64, device=device) for c in coords),
                  torch.tensor(index, dtype=torch.int64, device=device), full)
        cache[device] = cached
    return cached


def pattern_flat(ust: Tensor, device) -> "torch.Tensor":
    """The row-major flat position of each slot in the pattern (``pattern_coords`` raveled), torch int64.

    One ``index_select`` / ``index_put_`` with it replaces an advanced-indexing gather or scatter
    by the coordinate tuple (several times slower in torch). Cached with the coordinates.
    """
    device = torch.device(device)
    cache = _COORDS.setdefault(ust, {})
    flat = cache.get(("flat", device))
    if flat is None:
        coords, _ = pattern_coords(ust, device)
        flat = torch.zeros_like(coords[0]) if coords else torch.zeros(0, dtype=torch.int64, device=device)
        for c, n in zip(coords, ust.shape):
            flat = flat * n + c
        cache[("flat", device)] = flat
    return flat


def same_pattern(a: Tensor, b: Tensor) -> bool:
    """Whether ``a`` and ``b`` have the same value slots in the same places and the same frozen mask."""
    if a is b:
        return True
    if a.format != b.format or a.shape != b.shape or a.raw_values.shape != b.raw_values.shape:
        return False
    keep_a, keep_b = _KEEP.get(a), _KEEP.get(b)
    if keep_a is not keep_b and (keep_a is None or keep_b is None or not np.array_equal(keep_a, keep_b)):
        return False
    for key, buf in a.raw_buffers.items():
        other = b.raw_buffers[key]
        if buf is not other and not (buf.shape == other.shape and bool((buf == other).all())):
            return False
    return True


def dense_mask(ust: Tensor, device="cpu") -> "torch.Tensor":
    """A bool tensor of ``ust``'s shape: True at the positions in the pattern."""
    coords, _ = pattern_coords(ust, device)
    mask = torch.zeros(tuple(ust.shape), dtype=torch.bool, device=device)
    mask[coords] = True
    return mask
