"""Loading cached machine code without Numba's whole-target refresh.

Numba's ``Cache.load_overload`` runs ``target_context.refresh()`` before it reads a cached
overload. The refresh imports and installs every lowering and typing registry (array math,
``linalg`` with its SciPy BLAS probe, random, typed containers, datetime...) and scans the
``numba_extensions`` entry points; measured on the 2-core reference machine that is about 0.25 s,
more than the rest of a warm first call. Those registries are what *compiling* needs. Loading
machine code needs only what the library's object code links against:

* the Python C API, Numba's helper-library and exception symbols, and libm: installed when the
  CPU target context is created (before any load);
* the NRT symbols: ``rtsys.initialize``, called here;
* the threading layer of a ``parallel=True`` kernel: the library's ``reload_init`` hooks, which
  ``CompileResult._rebuild`` runs;
* the siphash secrets of ``numba.cpython.hashing`` (hash tables): imported here, it is cheap.

So :class:`LeanCache` loads with exactly those. Any error while loading falls back to Numba's
own path (full refresh, then load), so it never loads less safely than Numba does. A miss, and
anything compiled later in the process, still gets the full refresh: Numba's compiler pipeline
refreshes both contexts when it starts.

:func:`adopt_module` gives every CPU dispatcher of a generated kernel module this cache. Set
``USTC_NUMBA_LEAN_LOAD=0`` to keep Numba's default.
"""

from __future__ import annotations

import functools
import logging
import os
import types

log = logging.getLogger("ustc.cache")


def enabled() -> bool:
    """Whether dispatchers are given :class:`LeanCache` (``USTC_NUMBA_LEAN_LOAD``, default on)."""
    return os.environ.get("USTC_NUMBA_LEAN_LOAD", "1").strip().lower() not in ("0", "false", "no", "off")


@functools.lru_cache(maxsize=None)
def lean_cache_class() -> type:
    """The :class:`LeanCache` class, built on first use (it subclasses Numba's ``FunctionCache``)."""
    from numba.core.caching import FunctionCache

    class LeanCache(FunctionCache):
        """``FunctionCache`` whose hit path skips the registry refresh (see the module docstring)."""

        def load_overload(self, sig, target_context):
            try:
                _link_runtime(target_context)
                with self._guard_against_spurious_io_errors():
                    # a miss returns None: Numba then compiles, and its pipeline refreshes first
                    return self._load_overload(sig, target_context)
            except Exception as exc:  # never less safe than Numba: retry its own way
                log.debug("lean load of %s failed (%s: %s); loading after Numba's refresh",
                          getattr(self, "_name", "?"), type(exc).__name__, exc)
                return super().load_overload(sig, target_context)

    return LeanCache


def _link_runtime(target_context) -> None:
    """Install the symbols that cached object code links against (see the module docstring)."""
    import numba.cpython.hashing  # noqa: F401  (adds the siphash secrets to LLVM's symbol table)
    from numba.core.runtime import nrt

    nrt.rtsys.initialize(target_context)


def adopt(dispatcher) -> bool:
    """Give a Numba CPU ``dispatcher`` a :class:`LeanCache`; True when it now has one.

    Only a dispatcher that has no compiled overload yet and whose cache is exactly Numba's
    ``FunctionCache`` is changed (CUDA dispatchers and custom caches are left alone).
    """
    from numba.core.caching import FunctionCache

    cache = getattr(dispatcher, "_cache", None)
    if type(cache) is not FunctionCache or getattr(dispatcher, "overloads", None):
        return isinstance(cache, lean_cache_class())
    dispatcher._cache = lean_cache_class()(dispatcher.py_func)
    return True


def adopt_module(module: types.ModuleType) -> int:
    """:func:`adopt` every CPU dispatcher defined in ``module``; returns how many have one."""
    if not enabled():
        return 0
    from numba.core.registry import CPUDispatcher

    return sum(adopt(value) for value in vars(module).values() if isinstance(value, CPUDispatcher))


def njit_cached(**options):
    """``numba.njit(cache=True, **options)`` for ustc's hand-written kernels, loading through
    :class:`LeanCache` like generated ones."""
    from numba import njit

    def wrap(fn):
        dispatcher = njit(cache=True, **options)(fn)
        if enabled():
            adopt(dispatcher)
        return dispatcher

    return wrap
