"""``Tensor.apply(fn)``: a compiled map over the stored values, in place.

``fn(v)`` or ``fn(v, i, j, ...)`` (one coordinate per dimension) must be
Numba-compilable; it is compiled once per (function, dtype) and run by a
compiled loop, never a Python loop over entries. With coordinates, every
stored in-bounds entry is visited (padding included: its value is 0).
"""

from __future__ import annotations

import inspect

import numpy as np
from numba import njit
from numba.core.registry import CPUDispatcher

from ..errors import UnsupportedOperation


@njit
def _map0(f, values, index):
    for e in range(len(index)):
        q = index[e]
        values[q] = f(values[q])


@njit
def _map1(f, values, index, c0):
    for e in range(len(index)):
        q = index[e]
        values[q] = f(values[q], c0[e])


@njit
def _map2(f, values, index, c0, c1):
    for e in range(len(index)):
        q = index[e]
        values[q] = f(values[q], c0[e], c1[e])


@njit
def _map3(f, values, index, c0, c1, c2):
    for e in range(len(index)):
        q = index[e]
        values[q] = f(values[q], c0[e], c1[e], c2[e])


@njit
def _map4(f, values, index, c0, c1, c2, c3):
    for e in range(len(index)):
        q = index[e]
        values[q] = f(values[q], c0[e], c1[e], c2[e], c3[e])


_MAPS = (_map0, _map1, _map2, _map3, _map4)


def _arity(fn) -> int:
    py = fn.py_func if isinstance(fn, CPUDispatcher) else fn
    params = inspect.signature(py).parameters.values()
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def apply(t, fn) -> None:
    """Run ``fn`` over ``t``'s stored values in place (see the module docstring)."""
    nargs = _arity(fn)
    kernel = fn if isinstance(fn, CPUDispatcher) else njit(fn)
    if nargs == 1:
        # batched storage: every batch row in place (unused tails are harmless)
        values = t._values.reshape(-1) if t.format.batch_levels else t._values
        _map0(kernel, values, np.arange(len(values) if t.format.batch_levels else t.nse, dtype=np.int64))
        return
    if t.format.batch_levels:
        raise UnsupportedOperation("apply(fn(v, i, ...)) on batched storage: use fn(v), or convert "
                                   "to an unbatched format first")
    if nargs - 1 != t.ndim:
        raise TypeError(f"fn takes {nargs} arguments; expected fn(v) or fn(v, {', '.join('ijklmn'[:t.ndim])})")
    if t.ndim > 4:
        raise UnsupportedOperation("apply with coordinates supports tensors up to rank 4")
    from . import storage

    coords, index = storage.unpack(t._layout, t._buffers, len(t._values))
    _MAPS[t.ndim](kernel, t._values, index, *coords)
