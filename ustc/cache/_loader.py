"""Loading kernels through the cache, and the process-wide statistics.

Contract of :func:`load` (``fields`` as for :func:`ustc.cache.kernel_key`):

1. memory: a module already loaded for the key in this process is returned (a memory hit);
2. disk: a valid entry (see :func:`ustc.cache._store.inspect`) is imported (a disk hit) and its
   record's ``hits`` / ``last_used`` are bumped (best effort);
3. otherwise ``generate()`` is called (timed) and its source is written atomically, the ``.py``
   first and then the ``.json``, and imported; the directory is then kept within its size bound
   (:func:`ustc.cache._manage.after_write`, least recently used entries removed first). An
   entry that was present but invalid (missing half, unreadable record, other key or fields,
   hash mismatch) is never trusted: a warning on the ``"ustc.cache"`` logger says what was
   wrong, and it is rebuilt.
4. source twins (``ustc.cache._twins``): on a miss whose source differs only in its header from
   a valid entry's (the index names it), the entry is still written, its record naming that key
   as ``same_source``, and that key's module is returned (already loaded, or imported under its
   own name, so Numba compiles or loads one module for both keys); a disk hit of such an entry
   returns the twin's module while the twin stays valid with the same body, else its own file.

The module is imported under ``module_name(key)`` with ``spec_from_file_location`` and is put
in ``sys.modules`` *before* ``exec_module``: Numba's ``@njit(cache=True)`` keys its on-disk cache
(in ``__pycache__`` next to the file) by the source file and resolves the module by name when it
loads cached code, which is what lets a second process skip compilation. A module that fails to
execute is taken out of ``sys.modules`` and reported as :class:`ustc.errors.KernelError` naming
its file (the file is kept for inspection). Its CPU dispatchers get :class:`ustc.cache._lean.LeanCache`,
which loads their cached machine code without Numba's whole-target refresh.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import time
import types
from typing import Callable

from ..errors import KernelError
from . import _lean, _manage, _state, _store, _twins
from ._key import canonical_fields, kernel_key, module_name

log = logging.getLogger("ustc.cache")
# key -> its own source file where this process last loaded it from disk or wrote it: a memory hit
# after the cache moved (USTC_CACHE_DIR changed) still names the file its module came with
_OWN_SOURCE: dict = {}


def _import(key: str, py) -> types.ModuleType:
    name = module_name(key)
    spec = importlib.util.spec_from_file_location(name, py)
    if spec is None or spec.loader is None:  # pragma: no cover - only for odd file names
        raise KernelError(f"cannot import generated kernel {py}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        if sys.modules.get(name) is module:
            del sys.modules[name]
        if not isinstance(exc, Exception):
            raise
        raise KernelError(f"generated kernel {py} failed to import: {type(exc).__name__}: {exc}") from exc
    _lean.adopt_module(module)  # cached machine code then loads without Numba's registry refresh
    return module


def _module(key: str) -> types.ModuleType:
    """``key``'s module: held in memory, still in ``sys.modules``, or imported from its file."""
    module = _state.remembered(key) or sys.modules.get(module_name(key))
    if module is None:
        module = _import(key, _store.files(key)[0])
    _state.remember(key, module)
    return module


def _twin_of(record: dict, py) -> types.ModuleType | None:
    """The module of the entry ``record`` names as ``same_source`` while it is valid and holds
    the same body as ``py``, else None."""
    twin = record.get("same_source")
    if not isinstance(twin, str) or twin == record["key"]:
        return None
    try:
        body = _twins.body_hash(py.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None
    return _module(twin) if _twins.same_body(twin, body) else None


def _bump_hits(record: dict) -> bool:
    record["hits"] = int(record.get("hits", 0)) + 1
    record["last_used"] = time.time()
    return True


def load(fields: dict, generate: Callable[[], str]) -> tuple[types.ModuleType, str]:
    """The kernel module for ``fields`` and its key, generating and caching it on a miss.

    ``generate()`` returns the module's Python source; it is called only on a miss. Exceptions
    from ``generate`` propagate unchanged and leave nothing on disk.
    """
    key = kernel_key(fields)
    with _state.LOCK:
        module = _state.remembered(key)
        if module is not None:
            _state.bump("hits")
            _state.bump("memory_hits")
            return module, key

        canonical = canonical_fields(fields)
        record, problem = _store.inspect(key, canonical)
        py, _ = _store.files(key)
        _OWN_SOURCE[key] = py
        if record is not None:
            module = _twin_of(record, py) or _import(key, py)
            _store.update_record(key, _bump_hits)
            _state.bump("hits")
            _state.bump("disk_hits")
            _state.remember(key, module)
            return module, key

        _state.bump("misses")
        if problem is not None:
            log.warning("kernel cache entry %s is invalid: %s; rebuilding it", py, problem)
        started = time.perf_counter()
        text = generate()
        seconds = time.perf_counter() - started
        if not isinstance(text, str):
            raise KernelError(f"kernel generator returned {type(text).__name__}, expected the source as str")
        _state.bump("generated")
        body = _twins.body_hash(text)
        twin = _twins.find(body)
        twin = None if twin == key else twin
        _store.write_entry(key, canonical, text, seconds, same_source=twin)
        if problem is not None:
            _state.bump("rebuilt")
        if twin is None:
            _twins.note(body, key)
            module = _import(key, py)
        else:
            _state.bump("twins")
            module = _module(twin)
        _state.remember(key, module)
        _manage.after_write()
        return module, key


def source_file(key: str):
    """The generated source file of ``key``'s entry: its own, also when a twin's module runs; the
    one this process loaded or wrote while it still exists (the cache may have moved since), else
    the one at the cache's current location."""
    own = _OWN_SOURCE.get(key)
    return own if own is not None and own.exists() else _store.files(key)[0]


def _signatures(counter) -> int:
    try:
        return int(sum(counter.values()))
    except (AttributeError, TypeError):
        return 0


def note_first_call(key: str, dispatcher, seconds: float) -> None:
    """Record how the first call of ``key``'s Numba ``dispatcher`` in this process went.

    ``seconds`` is the wall time of that first call. Numba's ``dispatcher.stats`` tells which
    happened: ``cache_misses`` counts signatures compiled fresh, ``cache_hits`` those loaded from
    Numba's on-disk cache (numba 0.68 and numba-cuda both keep these Counters). A fresh compile
    counts as ``compiled``, adds ``seconds`` to ``compile_seconds`` and stores it in the record when
    none is stored yet; a cache load counts as ``loaded`` and adds what it saved against the
    recorded compile time to ``compile_seconds_saved``. A dispatcher without stats, or whose
    first call compiled nothing, changes nothing.
    """
    stats = getattr(dispatcher, "stats", None)
    misses = _signatures(getattr(stats, "cache_misses", None))
    hits = _signatures(getattr(stats, "cache_hits", None))
    seconds = max(0.0, float(seconds))
    if misses:
        _state.bump("compiled")
        _state.bump("compile_seconds", seconds)

        def store(record: dict) -> bool:
            if isinstance(record.get("compile_seconds"), (int, float)):
                return False
            record["compile_seconds"] = seconds
            return True

        _store.update_record(key, store)
    elif hits:
        _state.bump("loaded")
        try:
            record = _store.read_record(_store.files(key)[1])
        except (OSError, UnicodeDecodeError, ValueError):
            return
        recorded = record.get("compile_seconds")
        if isinstance(recorded, (int, float)) and not isinstance(recorded, bool):
            _state.bump("compile_seconds_saved", max(0.0, float(recorded) - seconds))


def stats() -> dict:
    """This process's counters plus ``entries`` and ``bytes`` (all files) on disk now."""
    result = _state.counters()
    result["entries"] = len(_manage.entries())
    result["bytes"] = _manage.disk_bytes()
    return result


def reset_stats() -> None:
    """Zero this process's counters (the disk is untouched)."""
    _state.reset()


def _forget() -> None:
    """Drop the in-memory layer, so the next :func:`load` goes to disk (tests)."""
    _state.forget()
