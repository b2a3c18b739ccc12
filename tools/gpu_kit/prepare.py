"""Prepare the GPU validation kit on a machine with network access.

    python tools/gpu_kit/prepare.py DEST [--project .] [--preset 9] [--dry-run]

Downloads into DEST a wheel for Python 3.12 / linux x86_64 of every
:data:`kit_needs.REQUIREMENTS` entry (no dependencies: the list names them), packs
llvmlite with xz (:func:`kit_wheels.pack_xz`), and writes ``manifest.json`` (name,
version, sha256, size of each file, the project's size and the budget). Optional
wheels (the CUDA Python bindings the GPU image normally has) are kept only while the
kit plus the project's working tree stay within 64 MiB. Exits 1 when even the
required wheels do not fit, 2 when a download fails.

DEST inside the repository must be ignored by git (``echo /.gpu_kit/ >> .git/info/exclude``)
and named in the device call's ``carry``; then ``validate.py`` runs there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kit_needs  # noqa: E402
import kit_wheels  # noqa: E402

PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
MARGIN = 2**20   # room left for what else travels (a few result files, untracked notes)


def download_command(req: kit_needs.Requirement, folder: Path, python: str = sys.executable) -> list[str]:
    """The ``pip download`` of one wheel for CPython 3.12 on linux x86_64, no dependencies."""
    argv = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", PYTHON,
            "--implementation", "cp", "--abi", "cp" + PYTHON.replace(".", "")]
    for platform in PLATFORMS:
        argv += ["--platform", platform]
    return argv + ["--dest", str(folder), "--quiet", req.pip]


def project_bytes(root: Path, exclude: Path | None = None) -> int:
    """Bytes of the working tree the device call sends: tracked files and untracked files git
    does not ignore (``git ls-files -co --exclude-standard``), without ``exclude``."""
    done = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                          capture_output=True, check=True)
    skip = exclude.resolve() if exclude is not None else None
    total = 0
    for name in done.stdout.decode().split("\0"):
        path = (root / name)
        if not name or not path.is_file() or path.is_symlink():
            continue
        if skip is not None and skip in path.resolve().parents:
            continue
        total += path.stat().st_size
    return total


def _downloaded(folder: Path, req: kit_needs.Requirement) -> Path:
    found = [p for p in folder.glob("*.whl") if kit_wheels.wheel_name_version(p.name)[0] == kit_needs.normalise(req.name)]
    if len(found) != 1:
        raise RuntimeError(f"expected one wheel of {req.name} in {folder}, found {[p.name for p in found]}")
    return found[0]


def fetch(req: kit_needs.Requirement, dest: Path, scratch: Path, old: dict, preset: int) -> kit_wheels.Entry:
    """Download ``req`` into ``scratch`` and place it in ``dest`` (xz-packed where asked);
    an xz file already in ``dest`` for the same wheel (``old`` manifest entries) is reused."""
    subprocess.run(download_command(req, scratch), check=True)
    wheel = _downloaded(scratch, req)
    if not req.xz:
        shutil.copy2(wheel, dest / wheel.name)
        return kit_wheels.entry(dest / wheel.name, req.spec)
    packed = dest / (wheel.name + kit_wheels.XZ)
    previous = old.get(packed.name)
    if previous is not None and packed.is_file() and kit_wheels.sha256(packed) == previous.sha256:
        return kit_wheels.entry(packed, req.spec, previous.wheel_sha256)
    print(f"packing {wheel.name} with xz -{preset} (minutes) ...", flush=True)
    packed, digest = kit_wheels.pack_xz(wheel, dest, preset)
    return kit_wheels.entry(packed, req.spec, digest)


def within(entries, project: int, budget: int, margin: int = MARGIN) -> bool:
    return sum(e.size for e in entries) + project + margin <= budget


def select(entries: list, optional: set, project: int, budget: int) -> tuple[list, list]:
    """(kept, dropped): required entries always, optional ones in order while they fit."""
    kept = [e for e in entries if e.name not in optional]
    dropped = []
    for e in entries:
        if e.name in optional:
            (kept if within(kept + [e], project, budget) else dropped).append(e)
    return kept, dropped


def prepare(dest: Path, project: Path | None, preset: int, budget: int) -> kit_wheels.Manifest:
    dest.mkdir(parents=True, exist_ok=True)
    scratch = dest / ".download"
    old = {}
    if (dest / kit_wheels.MANIFEST).is_file():
        old = {e.file: e for e in kit_wheels.read(dest).entries}
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir()
    try:
        entries = [fetch(req, dest, scratch, old, preset) for req in kit_needs.REQUIREMENTS]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    size = project_bytes(project, exclude=dest) if project is not None else 0
    optional = {kit_needs.normalise(r.name) for r in kit_needs.REQUIREMENTS if r.optional}
    kept, dropped = select(entries, optional, size, budget)
    for e in dropped:
        print(f"dropped optional {e.file} ({e.size / 2**20:.1f} MiB): over the budget", flush=True)
        (dest / e.file).unlink()
    names = {e.file for e in kept} | {kit_wheels.MANIFEST}
    for stale in dest.iterdir():
        if stale.is_file() and stale.name not in names:
            stale.unlink()
    manifest = kit_wheels.Manifest(tuple(kept), size, budget)
    kit_wheels.write(dest, manifest)
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dest", type=Path, help="the kit folder to fill")
    ap.add_argument("--project", type=Path, default=Path(__file__).resolve().parents[2],
                    help="the repository whose working tree travels with the kit (default: this one)")
    ap.add_argument("--no-project", action="store_true", help="do not count a project's size")
    ap.add_argument("--preset", type=int, default=9, help="xz preset 0-9 (default 9)")
    ap.add_argument("--budget-mib", type=float, default=kit_wheels.BUDGET / 2**20)
    ap.add_argument("--dry-run", action="store_true", help="print the downloads, fetch nothing")
    args = ap.parse_args(argv)
    if args.dry_run:
        for req in kit_needs.REQUIREMENTS:
            print(" ".join(download_command(req, args.dest / ".download")) + ("   # then xz" if req.xz else ""))
        return 0
    try:
        manifest = prepare(args.dest, None if args.no_project else args.project, args.preset,
                           int(args.budget_mib * 2**20))
    except subprocess.CalledProcessError as exc:
        print(f"prepare: download failed: {' '.join(exc.cmd)}", file=sys.stderr)
        return 2
    for e in manifest.entries:
        print(f"{e.file:<90} {e.size / 2**20:7.2f} MiB  {e.sha256[:12]}")
    print(manifest.summary())
    return 0 if manifest.fits else 1


if __name__ == "__main__":
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    sys.exit(main())
