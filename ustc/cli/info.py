"""``ustc info``: versions, targets, cache directory."""

from __future__ import annotations

import importlib.metadata as md
import platform


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "not installed"


def cache_dir() -> str:
    """``$USTC_CACHE_DIR``, else the platform's user cache directory for ustc."""
    from ..cache import path

    return str(path())


def cuda_target() -> str:
    """'cuda: <device>' with a GPU, 'cuda: no device, PTX only' with the compiler only."""
    try:
        from numba import cuda
    except Exception as exc:  # pragma: no cover - depends on the environment
        return f"cuda: unavailable ({type(exc).__name__}: {exc})"
    try:
        if cuda.is_available():
            name = cuda.get_current_device().name
            return f"cuda: {name.decode() if isinstance(name, bytes) else name}"
    except Exception:  # noqa: BLE001 - a broken driver means "no device"
        pass
    try:
        from numba.cuda.cudadrv import nvvm

        ptx = nvvm.is_available()
    except Exception:  # noqa: BLE001 - missing or broken NVVM wheels
        ptx = False
    return "cuda: no device, PTX only" if ptx else "cuda: no device and no NVVM (pip install 'ustc[cuda]')"


def run(args=None) -> int:
    from .. import __version__
    from .table import render

    rows = [("ustc", __version__), ("python", platform.python_version())]
    rows += [(dist, _version(dist)) for dist in ("numpy", "scipy", "numba", "llvmlite", "numba-cuda", "lark",
                                                  "networkx", "platformdirs", "torch", "cupy-cuda13x",
                                                  "matplotlib")]
    print(render(("package", "version"), rows))
    print()
    print("targets  : cpu, " + cuda_target())
    print(f"cache    : {cache_dir()}")
    return 0
