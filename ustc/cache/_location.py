"""Where the kernel cache lives on disk.

Contract:

* :func:`path` is the cache root: ``$USTC_CACHE_DIR`` when set and non-empty (read at every
  call, so tests and users can change it at run time), else ``platformdirs.user_cache_dir("ustc")``.
  It never touches the file system.
* :func:`kernels_dir` is ``path() / "kernels"``; with ``create=True`` it (and the root, when
  missing) is created with mode ``0o700`` and chmod-ed again afterwards so a permissive umask
  cannot widen it. Generated kernels are executed as Python code, so the directory that holds
  them must be private to the user. A root that already exists is left as it is (it may be a
  directory the user chose and shares); the ``kernels`` directory is always made ``0o700``.
  A directory that cannot be created or restricted raises :class:`ustc.errors.KernelError`.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import KernelError

ENV_VAR = "USTC_CACHE_DIR"
DIR_MODE = 0o700


def path() -> Path:
    """The cache root directory (not created)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("ustc"))


def _make_private(directory: Path, *, force_mode: bool) -> None:
    existed = directory.is_dir()
    os.makedirs(directory, mode=DIR_MODE, exist_ok=True)
    if force_mode or not existed:
        os.chmod(directory, DIR_MODE)


def kernels_dir(create: bool = False) -> Path:
    """``path() / "kernels"``, created private (``0o700``) when ``create`` is true."""
    kernels = path() / "kernels"
    if create:
        try:
            _make_private(kernels.parent, force_mode=False)
            _make_private(kernels, force_mode=True)
        except OSError as exc:
            raise KernelError(
                f"cannot use the kernel cache directory {kernels}: {exc.strerror or exc}; "
                f"set {ENV_VAR} to a writable directory") from exc
    return kernels
