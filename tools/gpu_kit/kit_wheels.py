"""The kit folder: wheels (some xz-packed), their manifest and the 64 MiB budget.

A kit folder holds ``*.whl`` files, ``*.whl.xz`` files and ``manifest.json``. The device
machine receives the project's working tree and the kit together, at most
:data:`BUDGET` bytes, so the manifest records the project's size next to the wheels'.

An xz-packed wheel is the wheel re-zipped *stored* (no deflate) and then xz-compressed:
xz cannot shrink deflated data, but the stored zip of llvmlite (60 MB as published,
180 MB stored) packs to about 40 MB. :func:`unpack_xz` gives back the stored wheel, a
valid wheel with the same files (its RECORD hashes the files, not the zip).
"""

from __future__ import annotations

import hashlib
import json
import lzma
import re
import shutil
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

BUDGET = 64 * 2**20
MANIFEST = "manifest.json"
XZ = ".xz"


@dataclass(frozen=True)
class Entry:
    """One wheel of the kit. ``file``: the kit's file (``.whl`` or ``.whl.xz``); ``sha256``
    and ``size`` of that file; ``wheel`` and ``wheel_sha256``: the wheel it stands for
    (after :func:`unpack_xz` for an xz file; the file itself otherwise)."""

    name: str
    version: str
    file: str
    sha256: str
    size: int
    wheel: str
    wheel_sha256: str
    spec: str = ""


@dataclass(frozen=True)
class Manifest:
    """The kit's wheels, the project's bytes and the budget they share."""

    entries: tuple[Entry, ...]
    project_bytes: int = 0
    budget: int = BUDGET

    @property
    def wheel_bytes(self) -> int:
        return sum(e.size for e in self.entries)

    @property
    def total(self) -> int:
        return self.wheel_bytes + self.project_bytes

    @property
    def fits(self) -> bool:
        return self.total <= self.budget

    def summary(self) -> str:
        mib = 2**20
        verdict = "fits" if self.fits else "DOES NOT FIT"
        return (f"kit {self.wheel_bytes / mib:.1f} MiB in {len(self.entries)} files + project "
                f"{self.project_bytes / mib:.1f} MiB = {self.total / mib:.1f} MiB of {self.budget / mib:.0f} MiB: "
                f"{verdict}")


def wheel_name_version(filename: str) -> tuple[str, str]:
    """``("numba-cuda", "0.30.4")`` from ``numba_cuda-0.30.4-cp312-...whl`` (or ``.whl.xz``)."""
    base = filename[:-len(XZ)] if filename.endswith(XZ) else filename
    match = re.fullmatch(r"([^-]+)-([^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl", base)
    if match is None:
        raise ValueError(f"not a wheel file name: {filename!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower(), match.group(2)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def stored_copy(wheel: Path, dest: Path) -> Path:
    """``wheel`` re-zipped with every member stored (uncompressed), written to ``dest``."""
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(dest, "w", zipfile.ZIP_STORED) as out:
        for info in src.infolist():
            data = src.read(info)
            info.compress_type = zipfile.ZIP_STORED
            out.writestr(info, data)
    return dest


def pack_xz(wheel: Path, folder: Path, preset: int = 9) -> tuple[Path, str]:
    """Write ``folder/<wheel>.xz`` (the stored copy, xz-compressed); returns it and the
    sha256 of the stored wheel that :func:`unpack_xz` restores. ``wheel`` is left alone."""
    folder.mkdir(parents=True, exist_ok=True)
    stored = stored_copy(wheel, folder / (wheel.name + ".stored"))
    try:
        digest = sha256(stored)
        target = folder / (wheel.name + XZ)
        with open(stored, "rb") as src, lzma.open(target, "wb", preset=preset) as out:
            shutil.copyfileobj(src, out, 1 << 20)
    finally:
        stored.unlink()
    return target, digest


def unpack_xz(packed: Path, folder: Path) -> Path:
    """Decompress ``packed`` (``NAME.whl.xz``) to ``folder/NAME.whl``."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / packed.name[:-len(XZ)]
    with lzma.open(packed, "rb") as src, open(target, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    return target


def entry(path: Path, spec: str = "", wheel_sha256: str | None = None) -> Entry:
    """The manifest entry of a kit file (``wheel_sha256`` given for xz files, else computed)."""
    name, version = wheel_name_version(path.name)
    digest = sha256(path)
    wheel = path.name[:-len(XZ)] if path.name.endswith(XZ) else path.name
    return Entry(name, version, path.name, digest, path.stat().st_size, wheel, wheel_sha256 or digest, spec)


def write(folder: Path, manifest: Manifest) -> Path:
    data = {"budget": manifest.budget, "project_bytes": manifest.project_bytes, "total": manifest.total,
            "fits": manifest.fits, "entries": [asdict(e) for e in manifest.entries]}
    path = folder / MANIFEST
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def read(folder: Path) -> Manifest:
    data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    entries = tuple(Entry(**e) for e in data["entries"])
    return Manifest(entries, data.get("project_bytes", 0), data.get("budget", BUDGET))


def verify(folder: Path, manifest: Manifest) -> list[str]:
    """Problems with the kit's files against ``manifest`` (missing, size or sha256 mismatch)."""
    problems = []
    for e in manifest.entries:
        path = folder / e.file
        if not path.is_file():
            problems.append(f"{e.file}: missing")
        elif path.stat().st_size != e.size or sha256(path) != e.sha256:
            problems.append(f"{e.file}: size or sha256 differs from the manifest")
    return problems
