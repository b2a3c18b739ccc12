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
