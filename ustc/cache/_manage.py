"""Housekeeping of the kernel directory: listing, lookup by key prefix, clearing, pruning and
trimming to a size bound (:func:`trim`, also run after new entries by :func:`after_write`).

Contract: every function here reads records without trusting them. Unreadable records are
skipped by :func:`entries` (and so by :func:`find` / :func:`source`); :func:`clear` and
:func:`prune` still remove such entries' files (``prune`` then uses the newest file time as
last use). Files vanishing under these functions (another process clearing) are tolerated.
Removing an entry also removes Numba's and Python's cache files for it
(``__pycache__/<module name>.*``) and drops it from this process's memory layer. :func:`clear`
also removes the source-twin index (``ustc.cache._twins``), :func:`prune` its files whose entry
is gone; an entry naming a removed twin as ``same_source`` runs its own file.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import KernelError
from . import _state
from ._key import MODULE_PREFIX, module_name
from ._location import kernels_dir
from ._store import read_record
from ._twins import PREFIX as TWIN_PREFIX


@dataclass(frozen=True)
class Entry:
    """One cached kernel, as described by its record.

    ``formats`` and ``dtypes`` come from :func:`describe`; ``size`` is the bytes of source;
    ``hits`` counts disk hits across processes; times are unix seconds; ``compile_seconds`` is
    None until a fresh Numba compile was noted; ``path`` is the generated ``.py`` file.
    """

    key: str
    op: str
    formats: tuple
    target: str
    dtypes: tuple
    size: int
    hits: int
    created: float
    last_used: float
    compile_seconds: float | None
    path: Path


def _strings(value) -> tuple[str, ...]:
    if value is None:
        return ()
    return tuple(map(str, value)) if isinstance(value, (list, tuple)) else (str(value),)


def describe(fields: dict) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(formats, dtypes)`` of a kernel's fields.

    Taken from ``fields["formats"]`` / ``fields["dtypes"]`` when present, else gathered from
    ``fields["operands"]`` (name -> {"format", "dtype", "index"}): each operand's format in name
    order, and the distinct value then index dtypes in order of appearance.
    """
    formats, dtypes = _strings(fields.get("formats")), _strings(fields.get("dtypes"))
    operands = fields.get("operands")
    if isinstance(operands, dict):
        described = [o for _, o in sorted(operands.items()) if isinstance(o, dict)]
        if not formats:
            formats = tuple(str(o["format"]) for o in described if "format" in o)
        if not dtypes:
            seen = [str(o["dtype"]) for o in described if "dtype" in o]
            seen += [str(t) for o in described for t in _strings(o.get("index"))]
            dtypes = tuple(dict.fromkeys(seen))
    return formats, dtypes


def _entry(record: dict, py: Path) -> Entry:
    fields = record["fields"]
    formats, dtypes = describe(fields)
    compile_seconds = record.get("compile_seconds")
    return Entry(key=record["key"], op=str(fields.get("op", "")), formats=formats,
                 target=str(fields.get("target", "")), dtypes=dtypes,
                 size=record["size"], hits=record["hits"], created=float(record["created"]),
                 last_used=float(record["last_used"]),
                 compile_seconds=float(compile_seconds) if isinstance(compile_seconds, (int, float)) else None,
                 path=py)


def entries() -> list[Entry]:
    """Every readable entry, most recently used first."""
    kernels = kernels_dir()
    found = []
    for js in kernels.glob(f"{MODULE_PREFIX}*.json"):
        py = js.with_suffix(".py")
        try:
            record = read_record(js)
            if module_name(record["key"]) != js.stem or not py.exists():
                continue
            found.append(_entry(record, py))
        except (OSError, UnicodeDecodeError, ValueError, TypeError):
            continue
    found.sort(key=lambda e: e.last_used, reverse=True)
    return found


def find(key_prefix: str) -> Entry:
    """The one entry whose key starts with ``key_prefix`` (a module name is accepted too)."""
    prefix = key_prefix.strip().lower()
    if prefix.startswith(MODULE_PREFIX):
        prefix = prefix[len(MODULE_PREFIX):]
    if not prefix or any(c not in "0123456789abcdef" for c in prefix):
        raise KernelError(f"{key_prefix!r} is not a kernel key (expected hexadecimal digits)")
    matches = [e for e in entries() if e.key.startswith(prefix)]
    if not matches:
        raise KernelError(f"no cached kernel has a key starting with {prefix!r} (in {kernels_dir()})")
    if len(matches) > 1:
        shown = ", ".join(e.key[:12] for e in matches[:5]) + (", ..." if len(matches) > 5 else "")
        raise KernelError(f"key prefix {prefix!r} is ambiguous: it matches {len(matches)} kernels "
                          f"({shown}); give more digits")
    return matches[0]


def source(key_prefix: str) -> str:
    """The generated source of the one entry whose key starts with ``key_prefix``."""
    entry = find(key_prefix)
    try:
        return entry.path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KernelError(f"cannot read cached kernel {entry.path}: {exc}") from exc


def _stems(kernels: Path) -> set[str]:
    return {p.stem for pattern in (f"{MODULE_PREFIX}*.py", f"{MODULE_PREFIX}*.json")
            for p in kernels.glob(pattern)}


def _remove_entry(kernels: Path, stem: str) -> None:
    doomed = [kernels / f"{stem}.py", kernels / f"{stem}.json"]
    doomed += (kernels / "__pycache__").glob(f"{stem}.*")
    for item in doomed:
        item.unlink(missing_ok=True)


def _remove_twin_index(kernels: Path, keep: set[str]) -> None:
    """Remove the source-twin index files, except those naming an entry whose stem is in ``keep``."""
    for item in kernels.glob(f"{TWIN_PREFIX}*.key"):
        try:
            if module_name(item.read_text(encoding="ascii").strip()) not in keep:
                item.unlink(missing_ok=True)
        except (OSError, UnicodeDecodeError):
            item.unlink(missing_ok=True)


def _remove_temp_files(kernels: Path, older_than: float | None) -> None:
    temps = [*kernels.glob(f".{MODULE_PREFIX}*.tmp"), *kernels.glob(f".{TWIN_PREFIX}*.tmp")]
    for tmp in temps:
        try:
            if older_than is None or tmp.stat().st_mtime < older_than:
                tmp.unlink(missing_ok=True)
        except FileNotFoundError:
            pass


def _last_used(kernels: Path, stem: str) -> tuple[str | None, float]:
    """``(key, last_used)`` of an entry; the newest file time when the record is unreadable."""
    try:
        record = read_record(kernels / f"{stem}.json")
        return record["key"], float(record["last_used"])
    except (OSError, UnicodeDecodeError, ValueError):
        times = []
        for item in (kernels / f"{stem}.py", kernels / f"{stem}.json"):
            try:
                times.append(item.stat().st_mtime)
            except OSError:
                pass
        return None, max(times, default=0.0)


def clear() -> int:
    """Remove every entry (sources, records, Numba/Python cache files) and the memory layer."""
    _state.forget()
    kernels = kernels_dir()
    if not kernels.is_dir():
        return 0
    stems = _stems(kernels)
    for stem in stems:
        _remove_entry(kernels, stem)
    pycache = kernels / "__pycache__"
    for item in pycache.glob(f"{MODULE_PREFIX}*"):
        item.unlink(missing_ok=True)
    try:
        pycache.rmdir()
    except OSError:  # absent, or holds something that is not ours
        pass
    _remove_twin_index(kernels, set())
    _remove_temp_files(kernels, None)
    (kernels / CHECKED).unlink(missing_ok=True)
    return len(stems)


def prune(older_than_days: float) -> int:
    """Remove entries last used more than ``older_than_days`` days ago; returns how many."""
    if not isinstance(older_than_days, (int, float)) or isinstance(older_than_days, bool) \
            or not older_than_days >= 0:
        raise ValueError(f"older_than_days must be a non-negative number, got {older_than_days!r}")
    kernels = kernels_dir()
    if not kernels.is_dir():
        return 0
    cutoff = time.time() - older_than_days * 86400.0
    removed = 0
    for stem in _stems(kernels):
        key, last_used = _last_used(kernels, stem)
        if last_used < cutoff:
            _remove_entry(kernels, stem)
            if key is not None:
                _state.forget([key])
            removed += 1
    _remove_twin_index(kernels, _stems(kernels))
    _remove_temp_files(kernels, cutoff)
    return removed


def disk_bytes() -> int:
    """Bytes of every file in the kernels directory, Numba's cached object code included."""
    kernels = kernels_dir()
    total = 0
    for item in kernels.rglob("*") if kernels.is_dir() else ():
        try:
            if item.is_file():
                total += item.stat().st_size
        except OSError:
            pass
    return total


# -- the size bound ----------------------------------------------------------------------------
MAX_BYTES_VAR = "USTC_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 2 << 30  # as ccache: a bound large enough that a project's kernels all stay
TRIM_EVERY = 32              # new entries a process writes between two checks of the bound
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes of a size such as ``"500M"``, ``"2G"``, ``"1.5GiB"`` or ``"123456"`` (0: no bound).
    Raises ValueError naming the text."""
    t = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    try:
        value = float(t[:-1] if unit else t)
    except ValueError:
        value = -1.0
    if not value >= 0 or value != value:
        raise ValueError(f"{text!r} is not a size (expected bytes, or a number with K, M, G or T)")
    return int(value * _UNITS[unit])


def max_bytes() -> int:
    """The bound on the kernel directory: ``$USTC_CACHE_MAX_BYTES`` (read at each call; ``0`` turns
    it off), else :data:`DEFAULT_MAX_BYTES`. A malformed value raises KernelError naming it."""
    env = os.environ.get(MAX_BYTES_VAR, "").strip()
    if not env:
        return DEFAULT_MAX_BYTES
    try:
        return parse_size(env)
    except ValueError as exc:
        raise KernelError(f"{MAX_BYTES_VAR}: {exc}") from None


def _sizes(kernels: Path) -> dict[str, int]:
    """Bytes per entry stem: its source, record and Numba / Python cache files (one scan each)."""
    sizes: dict[str, int] = {}
    for directory in (kernels, kernels / "__pycache__"):
        try:
            scan = list(os.scandir(directory))
        except OSError:
            continue
        for item in scan:
            if not item.name.startswith(MODULE_PREFIX):
                continue
            try:
                size = item.stat().st_size
            except OSError:
                continue
            stem = item.name.split(".", 1)[0]
            sizes[stem] = sizes.get(stem, 0) + size
    return sizes


def trim(limit: int) -> int:
    """Remove the least recently used entries until the kernel directory holds at most ``limit``
    bytes (``limit`` 0: nothing is removed); returns how many. Entries this process has loaded
    are kept, so the bound can be exceeded by what is in use."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise ValueError(f"limit must be a non-negative number of bytes, got {limit!r}")
    kernels = kernels_dir()
    if limit == 0 or not kernels.is_dir():
        return 0
    sizes = _sizes(kernels)
    total = sum(sizes.values())
    if total <= limit:
        return 0
    aged = sorted((_last_used(kernels, stem) + (stem,) for stem in sizes), key=lambda e: e[1])
    removed = 0
    for key, _, stem in aged:
        if total <= limit:
            break
        if key is not None and _state.in_use(key):
            continue
        _remove_entry(kernels, stem)
        if key is not None:
            _state.forget([key])
        total -= sizes[stem]
        removed += 1
    return removed


_written = 0
CHECKED = ".size-checked"  # touched at each check: a process's first write skips the scan within a day
CHECK_AGE = 86400.0


def after_write() -> None:
    """Called by the loader after each new entry: every :data:`TRIM_EVERY`-th one, and the first
    one of a process when no check ran in the last day (the scan costs ~0.16 s over 6,000
    entries), trim the directory to 90% of :func:`max_bytes` once it is above the bound."""
    global _written
    _written += 1
    if (_written - 1) % TRIM_EVERY:
        return
    limit = max_bytes()
    kernels = kernels_dir()
    marker = kernels / CHECKED
    if _written == 1 and limit:
        try:
            if time.time() - marker.stat().st_mtime < CHECK_AGE:
                return
        except OSError:
            pass
    if limit and sum(_sizes(kernels).values()) > limit:
        trim(limit * 9 // 10)   # below the bound, so the next check does not trim again at once
    try:
        marker.touch()
    except OSError:
        pass
