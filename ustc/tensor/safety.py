"""Index buffers checked once before a kernel reads them.

Zero-copy views (``Tensor.from_package`` of a SciPy matrix, say) take the
caller's index buffers without the full check (``validate=True``), and SciPy
itself accepts a CSR holding an out-of-range column. A kernel walking such a
buffer would read outside ``x`` or ``values``. So every kernel entry point
(Matmul operands, ``einsum`` / ``@jit`` / operator bindings, conversions)
calls :func:`ensure_safe` first: each level's ``check_safe`` hook — positions
that do not decrease and stay within the next buffer, coordinates within the
level's extent, no sorting or unpacking — and the values buffer's length.

The verdict is cached per buffer: the same arrays (the same objects, at the
same address) are not checked again, so a planned ``Matmul`` pays nothing per execute and repeated
one-shot calls on one SciPy matrix check it once. A NumPy array changed in
place after its first use is not seen: call ``Tensor.validate()`` after
writing index buffers by hand.
"""

from __future__ import annotations

import threading
import weakref

from ..errors import StorageError

_CHECKED: dict[tuple, tuple] = {}   # buffer key -> weak references keeping the key's ids honest
_LOCK = threading.Lock()
_LIMIT = 4096


def _key(t) -> tuple:
    buffers = t._buffers                                  # the host arrays themselves (stable objects)
    arrays = [buffers[k] for k in sorted(buffers)]
    parts = [t.format.signature, tuple(t.shape), len(t._values)]
    for a in arrays:
        parts.append((id(a), a.__array_interface__["data"][0], a.shape, a.dtype.str))
    return tuple(parts), arrays


def ensure_safe(t) -> None:
    """Raise StorageError (level, buffer, index) where a kernel could read outside a buffer of
    ``t``; checks a given set of buffers once (see the module docstring)."""
    if t.device != "cpu" or not t._buffers:
        return                                            # dense storage: nothing to index through
    key, arrays = _key(t)
    with _LOCK:
        refs = _CHECKED.get(key)
        if refs is not None and all(r() is a for r, a in zip(refs, arrays)):
            return
    _check(t)
    try:
        refs = tuple(weakref.ref(a) for a in arrays)
    except TypeError:
        return                                            # not weak-referenceable: check every time
    with _LOCK:
        if len(_CHECKED) >= _LIMIT:
            _CHECKED.clear()
        _CHECKED[key] = refs


def _check(t) -> None:
    fmt, layout = t.format, t._layout
    if fmt.batch_levels:
        t.validate()                                      # batched storage: the full check, per batch
        return
    buffers = t._buffers
    parents = 1
    counts = layout.positions(buffers)
    for k, level in enumerate(fmt.levels):
        try:
            level.type.check_safe(parents, layout.level_shape[k], layout.origins[k],
                                  layout.level_buffers(buffers, k))
        except StorageError as exc:
            raise StorageError(f"level {k} ({level}): {exc}") from None
        parents = counts[k]
    if parents > len(t._values):
        raise StorageError(f"values: holds {len(t._values)} entries, the last level has {parents} positions")
