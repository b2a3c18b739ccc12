"""``Matmul.bind_call``: a planned product run on a ``b`` and an ``out`` given at each call.

A caller that runs one plan many times on new dense operands (``ustc.torch``'s batch-1
``nn.Linear``: each call brings its own ``x`` and wants a result it may keep) would otherwise
copy ``b`` into the plan's operand, execute into the plan's output and copy the result out.
:class:`PlannedCall` binds once to the shape, dtype and strides of a ``b`` and an ``out``; every
call with arrays of that layout then runs the planned route on them:

* where the route's kernel takes per-call arrays (``Route.bind_call``: the hand-written kernels
  of ``routes.KernelFirstRoute``, a generated CPU kernel's arguments with ``b`` and ``out``
  replaced), it reads ``b`` in place and writes ``out``, plus ``add`` where given (a bias: copied
  into ``out`` first and the kernel's row write adds to it, or added after a kernel that stores
  every element);
* any other route keeps arguments bound to the plan's own ``b`` and output (a generated kernel's
  flattened buffers): ``b`` is copied into the plan's operand, the route runs into the plan's
  output, which is copied (or added) into ``out``.

Either way the plan's own operand ``b`` may be overwritten by a call (it is scratch to this
caller). A call checks the arrays' layout against the bound one (a few attribute reads) and
raises :class:`ustc.ShapeError` on any other, or where ``out`` overlaps ``b``, so no kernel reads
or writes outside a buffer or reads what it has written.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError


@dataclass(frozen=True)
class ArrayLayout:
    """The shape, dtype and strides a bound call takes for one array (validated at construction)."""

    shape: tuple
    dtype: np.dtype
    strides: tuple

    def __post_init__(self):
        if len(self.shape) != len(self.strides) or any(n < 0 for n in self.shape):
            raise ShapeError(f"bind_call: layout {self.shape} / {self.strides} is not an array's")

    @classmethod
    def of(cls, array: np.ndarray) -> "ArrayLayout":
        return cls(tuple(array.shape), array.dtype, tuple(array.strides))

    def matches(self, array) -> bool:
        return type(array) is np.ndarray and array.shape == self.shape and array.strides == self.strides \
            and (array.dtype is self.dtype or array.dtype == self.dtype)


class PlannedCall:
    """``out (+)= alpha * a @ b`` by one plan's route for ``b`` / ``out`` of the bound layouts (module
    docstring). Calls take the plan's lock; the call is stale after the plan's ``reset_operands`` or
    ``release`` (ask ``bind_call`` again)."""

    def __init__(self, lock, b: ArrayLayout, out: ArrayLayout, direct, staged, kind: str = "", at_address=None):
        """``direct``: ``f(b, out, add)`` running the kernel on the given arrays, or None;
        ``staged``: ``(plan_b, runner)``, the plan's operand and its runner returning the output;
        ``kind``: the route's (``Route.kind``: ``"registered kernel"``, ``"generated"``, ...);
        ``at_address``: ``f(address, out, add)``, ``direct`` reading ``b`` at a host address, or None."""
        if (direct is None) == (staged is None):
            raise ValueError("PlannedCall: exactly one of direct and staged")
        self._lock, self.b, self.out, self.kind = lock, b, out, kind
        self._direct, self._staged = direct, staged
        self.direct = direct is not None  # whether b is read in place and out written by the kernel
        #: ``f(b, out, add)``, the direct kernel without this call's checks or the plan's lock (None where
        #: not direct): for a caller that guarantees arrays of the bound layouts, ``out`` apart from ``b``
        #: and ``add``, and one call at a time (``ustc.torch``'s batch-1 ``nn.Linear``: ~1.5 µs a call)
        self.unchecked = direct
        #: ``f(address, out, add)``: :attr:`unchecked` reading ``b`` from ``address`` (C-contiguous, the bound
        #: shape and dtype, alive for the call: the caller guarantees it), or None where the route has none
        self.at_address = at_address if direct is not None else None

    def __call__(self, b: np.ndarray, out: np.ndarray, add: np.ndarray | None = None) -> np.ndarray:
        """``out := alpha * a @ b (+ add)``; returns ``out``. ``add``: an array of ``out``'s layout (a bias)."""
        if not (self.b.matches(b) and self.out.matches(out) and out.flags.writeable) \
                or not (add is None or self.out.matches(add)):
            raise ShapeError(f"bind_call: b {_describe(b)}, out {_describe(out)}, add {_describe(add)}; this call "
                             f"was bound to b {self.b} and out {self.out}")
        if np.may_share_memory(b, out):  # a kernel would read entries of b it has overwritten
            raise ShapeError("bind_call: out overlaps b in memory; pass separate arrays")
        with self._lock:
            if self._direct is not None:
                self._direct(b, out, add)
                return out
            plan_b, runner = self._staged
            if plan_b is not b:
                np.copyto(plan_b, b)
            result = runner()
            if add is None:
                np.copyto(out, result)
            else:
                np.add(result, add, out=out)
            return out


def _describe(x) -> str:
    if x is None:
        return "None"
    if not isinstance(x, np.ndarray):
        return f"of type {type(x).__name__}"
    return f"{x.shape} {x.dtype} strides {x.strides}" + ("" if x.flags.writeable else " read-only")
