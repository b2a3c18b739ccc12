"""The on-disk layer: entry files, records and atomic writes.

An entry for ``key`` is two files in ``kernels_dir()`` named after ``module_name(key)``:
``<name>.py`` (the generated source, UTF-8) and ``<name>.json`` (its record). Numba's own cache
files and Python's bytecode for it live in ``__pycache__/<name>.*``.

Record fields: ``key``, ``fields`` (canonical JSON form), ``created`` and ``last_used`` (unix
seconds), ``hits`` (disk hits so far), ``size`` (bytes of source), ``sha256`` (of the source
bytes), ``generate_seconds``, ``compile_seconds`` (None until a fresh Numba compile is noted),
``ustc``, ``numba`` and ``layout``; ``same_source`` (optional) is the key of another entry whose
source differs from this one only in its header (``ustc.cache._twins``): the loader runs that
entry's module while it stays valid, this entry's own file otherwise.

Contract:

* :func:`atomic_write` never leaves a partial file under the final name: it writes a temp file in
  the same directory (``tempfile.mkstemp``), flushes, fsyncs (when ``durable``) and
  ``os.replace``-s it. Concurrent writers of one entry write identical sources, so the last
  replace wins harmlessly.
* :func:`inspect` judges an entry without trusting it: valid only when both files exist, the
  record parses, its key and fields match and the source hash matches.
* :func:`update_record` is a best-effort read-modify-write; a concurrent update may be lost,
  the record is never left partial.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Callable

from ._key import module_name
from ._location import kernels_dir

_REQUIRED = {"key": str, "fields": dict, "sha256": str, "size": int, "hits": int,
             "created": (int, float), "last_used": (int, float)}


def files(key: str, kernels: Path | None = None) -> tuple[Path, Path]:
    """The ``(.py, .json)`` paths of ``key``'s entry."""
    kernels = kernels_dir() if kernels is None else kernels
    name = module_name(key)
    return kernels / f"{name}.py", kernels / f"{name}.json"


def atomic_write(target: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``target`` with ``data`` atomically (temp file in the same directory + os.replace)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable and hasattr(os, "O_DIRECTORY"):
        try:
            dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return
        try:
            os.fsync(dir_fd)
        except OSError:
            pass
        finally:
            os.close(dir_fd)


def _encode(record: dict) -> bytes:
    return (json.dumps(record, sort_keys=True, indent=1) + "\n").encode("utf-8")


def read_record(json_path: Path) -> dict:
    """The record in ``json_path``; ValueError when it is not a well-formed record."""
    record = json.loads(json_path.read_bytes().decode("utf-8"))
    if not isinstance(record, dict):
        raise ValueError("record is not a JSON object")
    for name, kind in _REQUIRED.items():
        value = record.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"record field {name!r} is missing or malformed")
    return record


def inspect(key: str, fields: dict) -> tuple[dict | None, str | None]:
    """``(record, None)`` for a valid entry, ``(None, None)`` when absent, ``(None, problem)`` else.

    ``fields`` must be in canonical form. ``problem`` says in words what is wrong.
    """
    py, js = files(key)
    has_py, has_js = py.exists(), js.exists()
    if not has_py and not has_js:
        return None, None
    if not has_js:
        return None, f"record {js.name} is missing"
    if not has_py:
        return None, f"source {py.name} is missing"
    try:
        record = read_record(js)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return None, f"record {js.name} is unreadable ({exc})"
    if record["key"] != key:
        return None, f"record {js.name} belongs to another key ({record['key'][:12]})"
    if record["fields"] != fields:
        return None, f"record {js.name} describes different kernel fields"
    try:
        source = py.read_bytes()
    except OSError as exc:
        return None, f"source {py.name} is unreadable ({exc})"
    if hashlib.sha256(source).hexdigest() != record["sha256"]:
        return None, (f"source {py.name} does not match its recorded hash "
                      f"({len(source)} bytes, {record['size']} recorded; truncated or modified)")
    return record, None


def write_entry(key: str, fields: dict, source: str, generate_seconds: float,
                same_source: str | None = None) -> dict:
    """Write ``source`` then its record (with ``same_source`` when given), both atomically;
    returns the record."""
    from ._key import CACHE_LAYOUT, versions

    py, js = files(key, kernels_dir(create=True))
    data = source.encode("utf-8")
    now = time.time()
    record = {"key": key, "fields": fields, "created": now, "last_used": now, "hits": 0,
              "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
              "generate_seconds": generate_seconds, "compile_seconds": None,
              "layout": CACHE_LAYOUT, **versions()}
    if same_source is not None:
        record["same_source"] = same_source
    atomic_write(py, data)
    atomic_write(js, _encode(record))
    return record


def update_record(key: str, change: Callable[[dict], bool]) -> dict | None:
    """Read ``key``'s record, apply ``change`` (returns whether it changed) and rewrite it.

    Best effort: a missing or unreadable record, or a failed write, returns None. Concurrent
    updates may lose one another's changes (the last writer wins), never corrupt the record.
    """
    _, js = files(key)
    try:
        record = read_record(js)
        if record["key"] != key:
            return None
        if change(record):
            atomic_write(js, _encode(record), durable=False)
        return record
    except (OSError, UnicodeDecodeError, ValueError):
        return None
