"""Source twins: two keys whose generated modules differ only in their header comment.

Keys describe what the compiler was asked for; some of what they hold does not change the code
(a level's nonunique or nonordered property, an index width the kernel never names). The
loader then hands the second key the first key's module, so Numba compiles (or loads from its
own cache) one module for both, in this process and in later ones.

Contract:

* :func:`body_hash` is the sha256 hex of a source without its leading block of ``#`` lines
  (the header, which names the key and the operands' formats; a source without a header is
  hashed whole) together with the versions the key holds (ustc, numba, compiler fingerprint):
  an entry written by another compiler is never a twin, since its module may call helpers
  that have changed since and Numba's cache would not notice.
* :func:`note` records, in the kernel directory, which key's entry holds a body
  (``ustc_s_<hash[:32]>.key``, the key as text; written atomically, the last writer wins).
  :func:`find` returns that key only while its entry is valid (record readable and of that
  key, source present and matching its recorded hash) and holds the same body, else None: the
  index is a hint, never trusted.
* :func:`same_body` is the validity check :func:`find` uses, for a record's ``same_source``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ._key import versions as current_versions
from ._location import kernels_dir
from ._store import atomic_write, files, read_record

PREFIX = "ustc_s_"
HASH_CHARS = 32


VERSION_FIELDS = ("ustc", "numba", "compiler")


def body_hash(text: str, versions: dict | None = None) -> str:
    """sha256 hex of ``text`` after its leading ``#`` lines and of ``versions`` (a record's, or
    this process's :func:`ustc.cache._key.versions` when None)."""
    versions = current_versions() if versions is None else versions
    lines = text.split("\n")
    start = 0
    while start < len(lines) and lines[start].startswith("#"):
        start += 1
    stamp = "\0".join(str(versions.get(name)) for name in VERSION_FIELDS)
    code = "\n".join(lines[start:])
    return hashlib.sha256(f"{stamp}\0{code}".encode("utf-8")).hexdigest()


def index_file(body: str, kernels: Path | None = None) -> Path:
    """The index file naming the entry that holds ``body``."""
    return (kernels_dir() if kernels is None else kernels) / f"{PREFIX}{body[:HASH_CHARS]}.key"


def same_body(key: str, body: str) -> bool:
    """Whether ``key``'s entry is valid and its source has the body hash ``body``."""
    py, js = files(key)
    try:
        record = read_record(js)
        source = py.read_bytes()
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    if record["key"] != key or hashlib.sha256(source).hexdigest() != record["sha256"]:
        return False
    try:
        return body_hash(source.decode("utf-8"), record) == body
    except UnicodeDecodeError:
        return False


def find(body: str) -> str | None:
    """The key of a valid entry whose source has the body hash ``body``, or None."""
    try:
        key = index_file(body).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
        return None
    return key if same_body(key, body) else None


def note(body: str, key: str) -> None:
    """Record that ``key``'s entry holds ``body`` (best effort: a failed write is ignored)."""
    try:
        atomic_write(index_file(body, kernels_dir(create=True)), key.encode("ascii"), durable=False)
    except OSError:
        pass
