"""Cache keys: what identifies a generated kernel.

Contract:

* :func:`canonical_fields` is the JSON normal form of the compiler's ``fields`` (tuples become
  lists, mapping keys must be strings, floats must be finite). Records store this form and
  compare against it, so ``("a", "b")`` and ``["a", "b"]`` describe the same kernel.
* :func:`kernel_key` is the sha256 hex digest of the canonical JSON (sorted keys, no
  whitespace) of ``{"fields", "ustc", "numba", "compiler", "layout"}``. Versions are read at
  every call, so a different ustc or numba version (or a new :data:`CACHE_LAYOUT`) gives a
  different key: a miss, never a stale hit. ``compiler`` is :func:`compiler_fingerprint`, a
  hash of the sources that decide generated code, computed once per process: while the
  version string stays put during development, an edited code generator, level type or batch
  layout is a miss too.
* :func:`module_name` is the importable name of a key's module, ``"ustc_k_" + key[:24]``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

#: Bumped whenever the on-disk layout of entries (file names, record fields) changes.
CACHE_LAYOUT = 1

#: what decides generated code: the code generator, the level types (their read and write hooks
#: write kernel code), the batched layout the host flattens for kernels, and the host modules
#: that generate and bind kernels; a package stands for every ``.py`` file in its folder
COMPILER_SOURCES = ("ustc.codegen", "ustc.format.levels", "ustc.tensor.batch", "ustc.ops.runtime",
                    "ustc.ops.cuda_host")

MODULE_PREFIX = "ustc_k_"
KEY_CHARS_IN_NAME = 24


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _fields_text(fields: dict) -> str:
    """The sorted-key JSON text of ``fields``; TypeError when it is not a JSON-able mapping."""
    if not isinstance(fields, dict):
        raise TypeError(f"kernel fields must be a dict, got {type(fields).__name__}")
    try:
        text = json.dumps(fields, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"kernel fields must be JSON-serializable: {exc}") from exc
    if any(not isinstance(k, str) for k in fields):
        raise TypeError("kernel fields must have string keys")
    return text


def canonical_fields(fields: dict) -> dict:
    """``fields`` as it reads back from JSON; TypeError when it is not a JSON-able mapping."""
    return json.loads(_fields_text(fields))


def versions() -> dict[str, str]:
    """The versions that take part in every key: ``{"ustc": ..., "numba": ..., "compiler": ...}``."""
    import numba

    from .. import _version

    return {"ustc": str(_version.__version__), "numba": str(numba.__version__), "compiler": compiler_fingerprint()}


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """The first 16 hex digits of a sha256 over the files of :data:`COMPILER_SOURCES` (names and
    bytes, in a fixed order), read once per process without importing them (~1 ms)."""
    digest = hashlib.sha256()
    for path in _source_files():
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _source_files() -> list[Path]:
    files: list[Path] = []
    for name in COMPILER_SOURCES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:  # pragma: no cover - a broken install
            raise ImportError(f"cannot find {name}, a source of the kernel cache key")
        origin = Path(spec.origin)
        files += sorted(origin.parent.glob("*.py")) if spec.submodule_search_locations is not None else [origin]
    return files


def kernel_key(fields: dict) -> str:
    """sha256 hex of the canonical JSON of ``fields`` plus the versions (ustc, numba, compiler
    fingerprint) and the layout."""
    return _key(_fields_text(fields), tuple(sorted(versions().items())))


@functools.lru_cache(maxsize=4096)   # every execute names its kernel: hash each distinct text once
def _key(text: str, version_items: tuple) -> str:
    payload = {"fields": json.loads(text), "layout": CACHE_LAYOUT, **dict(version_items)}
    return hashlib.sha256(_dumps(payload).encode("utf-8")).hexdigest()


def module_name(key: str) -> str:
    """The module name (and file stem) of the entry for ``key``."""
    return MODULE_PREFIX + key[:KEY_CHARS_IN_NAME]
