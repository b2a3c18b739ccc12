"""The plan cache: planned :class:`~ustc.ops.plan.Matmul` objects keyed by their problem.

One-shot ``ustc.matmul`` calls (and the PyTorch layer) look here first, so a
repeated call with operands of the same formats, shapes, dtypes, index dtypes,
device, transposes and alpha/beta kinds pays only ``execute()``. The cache is
a bounded LRU (``maxsize`` plans, default 64); a cached plan keeps no operand
or output alive between calls.

    >>> from ustc.ops import plan_cache
    >>> sorted(plan_cache.stats())
    ['hits', 'maxsize', 'misses', 'size']
"""

from __future__ import annotations

import threading
from collections import OrderedDict

_LOCK = threading.Lock()
_PLANS: "OrderedDict[object, object]" = OrderedDict()
_COUNTS = {"hits": 0, "misses": 0}
_MAXSIZE = [64]


def get(key):
    """The plan stored under ``key`` (counted as a hit), or None (a miss)."""
    with _LOCK:
        plan = _PLANS.get(key)
        if plan is None:
            _COUNTS["misses"] += 1
            return None
        _PLANS.move_to_end(key)
        _COUNTS["hits"] += 1
        return plan


def take(key):
    """Remove and return the plan stored under ``key`` (a hit), or None (a miss): for a caller
    that holds the plan a long time (an iterative solve) and gives it back with :func:`put`;
    meanwhile the same problem elsewhere plans its own instead of waiting for it."""
    with _LOCK:
        plan = _PLANS.pop(key, None)
        _COUNTS["misses" if plan is None else "hits"] += 1
        return plan


def put(key, plan) -> None:
    """Store ``plan``; the least recently used plan goes when the cache is full."""
    with _LOCK:
        _PLANS[key] = plan
        _PLANS.move_to_end(key)
        while len(_PLANS) > _MAXSIZE[0]:
            _, old = _PLANS.popitem(last=False)
            old.release()


def stats() -> dict:
    """``hits``, ``misses`` (since the last :func:`clear`), ``size`` and ``maxsize``."""
    with _LOCK:
        return dict(_COUNTS, size=len(_PLANS), maxsize=_MAXSIZE[0])


def clear() -> None:
    """Release every cached plan and zero the counters."""
    with _LOCK:
        for plan in _PLANS.values():
            plan.release()
        _PLANS.clear()
        _COUNTS.update(hits=0, misses=0)


def set_maxsize(n: int) -> None:
    """Bound the cache to ``n`` plans (0 disables caching)."""
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"maxsize must be a non-negative integer, got {n!r}")
    with _LOCK:
        _MAXSIZE[0] = n
        while len(_PLANS) > n:
            _, old = _PLANS.popitem(last=False)
            old.release()
