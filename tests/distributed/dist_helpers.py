"""Matrices shared by the ustc.distributed tests."""

from __future__ import annotations

import numpy as np


def poisson2d(n: int, dtype=np.float64):
    import scipy.sparse as sp

    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    return (sp.kron(t, sp.eye(n)) + sp.kron(sp.eye(n), t)).tocsr().astype(dtype)


def random_sparse(m: int, n: int, density=0.2, seed=0, dtype=np.float64):
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    a = sp.random(m, n, density=density, format="csr", random_state=rng)
    if np.dtype(dtype).kind == "c":
        b = sp.random(m, n, density=density, format="csr", random_state=rng)
        a = a + 1j * b
    return a.astype(dtype).tocsr()


def children() -> set[int]:
    """This process's descendants (pytest-xdist's and multiprocessing's helpers excluded)."""
    import psutil

    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if "resource_tracker" not in " ".join(p.cmdline()):
                out.add(p.pid)
        except psutil.Error:
            continue
    return out


def wait_gone(pids: set[int], seconds: float = 10.0) -> set[int]:
    """The processes of ``pids`` still alive after up to ``seconds``."""
    import time

    deadline = time.monotonic() + seconds
    while children() & pids and time.monotonic() < deadline:
        time.sleep(0.2)
    return children() & pids


def worker_pid(rt, group, rank: int) -> int:
    """The process id of the Dask worker holding ``rank`` of ``group``."""
    import os

    where = group.workers[rank]
    return rt.client.run(os.getpid, workers=[where])[where]
