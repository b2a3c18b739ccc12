"""Element-wise aten ops on TorchUSTs (what optimizers, gradient clipping and accumulation run).

A TorchUST reads as a dense tensor that is 0 outside its pattern (see
``ustc.torch.pattern``); the pattern never changes. The rules, for every aten
op tagged ``pointwise`` (plus ``copy_``, ``zero_``, ``fill_``):

* **in place on a TorchUST** (``p.addcdiv_(exp_avg, denom)``): the op runs on
  the values in the pattern; every other tensor operand is read at those
  positions (a TorchUST of the same pattern: its values; a dense tensor,
  broadcast to ``p``'s shape: gathered; a 0-dim tensor or a number: as is).
  Entries outside the pattern stay 0 even where the dense op would make them
  nonzero (``p.add_(1)`` adds 1 to the stored entries): the op is projected
  onto the pattern, which is what pattern-keeping training needs;
* **in place on a dense tensor** or with a dense ``out=`` (``exp_avg.lerp_(grad, 0.1)``):
  TorchUST operands are densified; the result is exactly the dense one;
* **out of place**, all tensor operands TorchUSTs of one pattern or 0-dim:
  computed on the stored values, returned as a TorchUST of that pattern, when
  ``f(0, ...) == 0`` for the given scalars (``abs``, ``sqrt``, ``mul``,
  ``add`` of two TorchUSTs);
* **out of place otherwise** (``W + 1``, ``exp(W)``, ``W + dense``,
  ``W * dense``, TorchUSTs of different patterns): the result is dense, and it
  is computed densely and returned as a dense tensor (as torch's backward
  formulas need: ``var``'s gradient computes ``W - W.mean()``).

``_foreach_*`` ops are run as one element-wise op per list entry, and
``linalg_vector_norm`` of a whole TorchUST (``ord >= 0``) is the norm of its
values (along dimensions: dense), so every ``torch.optim`` optimizer (``foreach`` or not) and
``clip_grad_norm_`` work unchanged on TorchUST parameters.
"""

from __future__ import annotations

import math
import numbers
import threading

import torch
from torch.utils._pytree import tree_flatten, tree_map

from .pattern import pattern_coords, pattern_flat, pattern_slots, same_pattern
from .subclass import HANDLERS, TorchUST, dense_of, wrap_like

aten = torch.ops.aten
_ALSO = {aten.copy_, aten.zero_, aten.fill_}
_VALUE_KWARG = {"addcmul", "addcdiv"}  # foreach: the 4th positional argument is the base op's ``value=``


def _sparse(x) -> bool:
    return isinstance(x, TorchUST)


def _densified(tree, scratch: bool = False):
    """``tree`` with each TorchUST dense (one dense tensor per TorchUST object). ``scratch``: the
    dense tensors are read by the op and dropped (an in-place op on a dense tensor, a dense ``out=``),
    so they may be this thread's reused buffers (:func:`_scratch`)."""
    made: dict = {}

    def dense(a):
        if not _sparse(a):
            return a
        if id(a) not in made:
            made[id(a)] = _dense(a, len(made) if scratch else None)
        return made[id(a)]

    return tree_map(dense, tree)


def _dense(x: TorchUST, slot=None):
    """``x`` as a dense tensor; where every value slot is in the pattern (CSR and COO after
    ``reformat_model``), one scatter of the values at their flat positions, into scratch buffer
    ``slot`` when given (else a new tensor)."""
    _, index, full = pattern_slots(x.ust, x.device)
    if not full:
        return dense_of(x)
    if slot is None:
        out = torch.zeros(x.shape, dtype=x.dtype, device=x.device)
    else:
        out = _scratch(x.shape, x.dtype, x.device, slot).zero_()
    out.view(-1).index_copy_(0, pattern_flat(x.ust, x.device), x.stored_values().reshape(-1))
    return out


_SCRATCH = threading.local()
_SCRATCH_KEPT = 8  # buffers kept per thread


def _scratch(shape, dtype, device, slot: int):
    """A dense buffer of this thread, reused by every op densifying a TorchUST of this shape and dtype:
    a fresh multi-MB tensor costs its page faults at every optimizer step (10 ms for 4 MB on the
    project machine, more than the op itself)."""
    buffers = _SCRATCH.__dict__.setdefault("buffers", {})
    key = (tuple(shape), dtype, device, slot)
    buf = buffers.get(key)
    if buf is None:
        if len(buffers) >= _SCRATCH_KEPT:
            buffers.clear()
        buf = buffers[key] = torch.empty(shape, dtype=dtype, device=device)
    return buf


def _is_pointwise(func) -> bool:
    """Tagged pointwise (an in-place op whose out-of-place twin is: ``abs_`` is not tagged), not random."""
    tags = func.tags
    if torch.Tag.nondeterministic_seeded in tags:
        return False
    if func.overloadpacket in _ALSO or torch.Tag.pointwise in tags:
        return True
    name = func.overloadpacket.__name__
    twin = getattr(aten, name[:-1], None) if name.endswith("_") else None
    overload = getattr(twin, func._overloadname, None) if twin is not None else None
    return overload is not None and torch.Tag.pointwise in overload.tags


def _writes_self(func) -> bool:
    arguments = func._schema.arguments
    return bool(arguments) and arguments[0].alias_info is not None and arguments[0].alias_info.is_write


def pointwise(func, args, kwargs):
    """The dispatch handler for element-wise ops (the rules in the module docstring)."""
    if not _is_pointwise(func):
        return NotImplemented
    out = kwargs.get("out")
    if out is not None:
        if not isinstance(out, torch.Tensor):
            return NotImplemented
        rest = {k: v for k, v in kwargs.items() if k != "out"}
        if not _sparse(out):
            dense_args, dense_rest = _densified((args, rest), scratch=True)
            return func(*dense_args, **dense_rest, out=out)
        result = func.overloadpacket(*args, **rest)  # the out-of-place rule, then copied into the pattern
        return update_values(aten.copy_.default, out, (result,), {})
    if _writes_self(func):
        target = args[0]
        if _sparse(target):
            return update_values(func, target, args[1:], kwargs)
        rest, dense_kwargs = _densified((args[1:], kwargs), scratch=True)
        return func(target, *rest, **dense_kwargs)
    return _out_of_place(func, args, kwargs)


def update_values(func, target: TorchUST, rest, kwargs) -> TorchUST:
    """Run the in-place ``func(target, *rest, **kwargs)`` on ``target``'s values in its pattern."""
    ust = target.ust
    coords, index, full = pattern_slots(ust, target.device)
    flat = target.stored_values().view(-1)
    part = flat if full else flat[index]

    def operand(a):
        if not isinstance(a, torch.Tensor):
            return a
        if _sparse(a):
            if same_pattern(a.ust, ust):
                values = a.stored_values().reshape(-1)
                return values if full else values[index]
            a = _densified(a)
        if a.dim() == 0:
            return a
        if a.shape == target.shape:  # a flat gather (the optimizer state): faster than by coordinates
            return a.reshape(-1).index_select(0, pattern_flat(ust, target.device))
        return a.expand(target.shape)[coords]

    func(part, *tree_map(operand, tuple(rest)), **tree_map(operand, kwargs))
    if not full:
        flat[index] = part
    return target


def _out_of_place(func, args, kwargs):
    tensors = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
    pattern = next(a for a in tensors if _sparse(a)).ust
    dense = lambda: func(*_densified(args), **_densified(kwargs))  # noqa: E731  (the result is dense)
    for a in tensors:
        if (_sparse(a) and not same_pattern(a.ust, pattern)) or (not _sparse(a) and a.dim() > 0):
            return dense()  # TorchUSTs of other patterns, or a dense operand
    probe = func(*tree_map(_zero, args), **tree_map(_zero, kwargs))
    if not isinstance(probe, torch.Tensor) or probe.dim() != 0 or bool(probe != 0):
        return dense()  # nonzero outside the pattern: W + 1, exp(W)
    values = lambda a: a.stored_values() if _sparse(a) else a  # noqa: E731
    return wrap_like(pattern, func(*tree_map(values, args), **tree_map(values, kwargs)))


def _zero(a):
    return torch.zeros((), dtype=a.dtype, device=a.device) if _sparse(a) else a


# -- _foreach_* ops: one element-wise op per list entry ---------------------------------------
def foreach(func, args, kwargs):
    """``torch._foreach_<op>`` with TorchUSTs in its lists, as ``<op>`` entry by entry."""
    name = func.overloadpacket.__name__
    if not name.startswith("_foreach_"):
        return NotImplemented
    base = name[len("_foreach_"):]
    count = next(len(a) for a in args if isinstance(a, (list, tuple)))
    per_entry = func._overloadname == "Tensor" and base.rstrip("_") in _VALUE_KWARG
    results = []
    for i in range(count):
        pick = lambda a: a[i] if isinstance(a, (list, tuple)) and len(a) == count else a  # noqa: E731
        entry_args, entry_kwargs = [pick(a) for a in args], {k: pick(v) for k, v in kwargs.items()}
        if base.rstrip("_") in _VALUE_KWARG and len(entry_args) > 3:
            value = entry_args.pop(3)
            entry_kwargs["value"] = value[i].item() if per_entry else value
        results.append(_entry(base, entry_args, entry_kwargs))
    return None if base.endswith("_") else results


def _entry(base: str, args, kwargs):
    if base == "norm":
        ord_ = args[1] if len(args) > 1 else kwargs.get("ord", 2)
        dtype = args[2] if len(args) > 2 else kwargs.get("dtype")
        return aten.linalg_vector_norm(args[0], ord_, dtype=dtype)
    op = getattr(aten, base, None)
    if op is not None:
        return op(*args, **kwargs)
    if base.endswith("_") and hasattr(aten, base[:-1]):  # no in-place variant (maximum_): out= self
        return getattr(aten, base[:-1])(*args, **kwargs, out=args[0])
    raise NotImplementedError(f"aten._foreach_{base}")


# -- norms ------------------------------------------------------------------------------------
def vector_norm(func, args, kwargs):
    """``linalg_vector_norm`` of a whole TorchUST for ``ord >= 0``: the norm of its values in the pattern."""
    if func.overloadpacket is not aten.linalg_vector_norm or not _sparse(args[0]):
        return NotImplemented
    x, ord_ = args[0], (args[1] if len(args) > 1 else kwargs.get("ord", 2))
    dim = args[2] if len(args) > 2 else kwargs.get("dim")
    keepdim = args[3] if len(args) > 3 else kwargs.get("keepdim", False)
    if dim not in (None, []) or keepdim or not isinstance(ord_, numbers.Real) or ord_ < 0 or math.isnan(ord_):
        return func(*_densified(args), **_densified(kwargs))  # along dimensions, or ord < 0: dense
    _, index = pattern_coords(x.ust, x.device)
    values = x.stored_values().reshape(-1)[index]
    if values.numel() == 0:
        values = values.new_zeros(1)
    return torch.linalg.vector_norm(values, ord_, dtype=kwargs.get("dtype"))


HANDLERS.extend([pointwise, foreach, vector_norm])
