"""Process-wide state of the kernel cache: the in-memory layer and the counters.

Contract:

* :data:`LOCK` (re-entrant) guards everything here and serialises :func:`ustc.cache.load`
  within a process, so one module is executed once per key even under threads.
* The memory layer maps key -> module, least recently used first, holding at most
  :data:`MEMORY_CAPACITY` modules. Evicting a module drops only this reference: the module stays
  in ``sys.modules`` because Numba resolves a cached function's module by name when it loads
  code from its own cache (measured: removing it makes such a load raise ModuleNotFoundError),
  and dispatchers handed out earlier may still compile new signatures.
* Counters are per process; :func:`reset` zeroes them (tests).
"""

from __future__ import annotations

import threading
import types
from collections import OrderedDict

MEMORY_CAPACITY = 256

LOCK = threading.RLock()

_memory: "OrderedDict[str, types.ModuleType]" = OrderedDict()

COUNTER_NAMES = ("hits", "memory_hits", "disk_hits", "misses", "generated", "rebuilt",
                 "compiled", "loaded", "twins")
SECOND_NAMES = ("compile_seconds", "compile_seconds_saved")

_counters: dict[str, float] = {}


def reset() -> None:
    """Zero every counter."""
    with LOCK:
        _counters.clear()
        _counters.update({name: 0 for name in COUNTER_NAMES})
        _counters.update({name: 0.0 for name in SECOND_NAMES})


reset()


def bump(name: str, amount: float = 1) -> None:
    with LOCK:
        _counters[name] += amount


def counters() -> dict[str, float]:
    """A copy of the counters."""
    with LOCK:
        return dict(_counters)


def remembered(key: str) -> types.ModuleType | None:
    """The module for ``key`` from the memory layer (marking it recently used), or None."""
    with LOCK:
        module = _memory.get(key)
        if module is not None:
            _memory.move_to_end(key)
        return module


def in_use(key: str) -> bool:
    """Whether this process holds the module for ``key`` (without marking it used)."""
    with LOCK:
        return key in _memory


def remember(key: str, module: types.ModuleType) -> None:
    """Put ``module`` in the memory layer, evicting the least recently used beyond capacity."""
    with LOCK:
        _memory[key] = module
        _memory.move_to_end(key)
        while len(_memory) > MEMORY_CAPACITY:
            _memory.popitem(last=False)


def forget(keys=None) -> None:
    """Drop ``keys`` (all when None) from the memory layer; ``sys.modules`` is left alone."""
    with LOCK:
        if keys is None:
            _memory.clear()
        else:
            for key in keys:
                _memory.pop(key, None)
