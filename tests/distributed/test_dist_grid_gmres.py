"""GMRES on a Grid2D in one synchronisation per product (GridGMRESVectors): the same iterations
as single-process ustc.solve, x within 1e-10, and exactly 3 synchronisations per inner step (the
product's partial rows, the Gram-Schmidt coefficients, the new norm carrying w's x entries), plus
3 per restart (A x with the full exchange, the residual) and ||b||; a second Gram-Schmidt pass
adds one, counted from the same solve on row blocks (2 per inner step + the pass)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from dist_helpers import poisson2d

import ustc
import ustc.distributed as ud


def _rel(x, y):
    return np.linalg.norm(x - y) / np.linalg.norm(y)


def _cycles(iterations, restart):
    """Restart cycles run: each ends with a product of x and a residual, one more to stop."""
    return math.ceil(iterations / restart) + 1


@pytest.mark.parametrize("rows, cols, pre, cplx", [
    (1, 2, None, False),
    (2, 2, "jacobi", False),
    ([0, 0, 144], [0, 50, 50, 144], None, True),      # 2 x 3 with an empty row block and column block
], ids=["1x2", "2x2-jacobi", "uneven-empty-complex"])
def test_grid_gmres_one_sync_per_product(rt, rows, cols, pre, cplx):
    a = poisson2d(12) + sp.eye(144) + sp.diags(np.linspace(0.0, 0.5, 144), 1, shape=(144, 144))  # nonsymmetric
    rng = np.random.default_rng(1)
    b = rng.standard_normal(144)
    if cplx:
        a = (a + 0.2j * sp.eye(144)).tocsr()
        b = b + 0.3j * rng.standard_normal(144)
    t = ustc.Tensor.from_package(sp.csr_matrix(a))
    restart = 7
    x1, i1 = ustc.solve(t, b, "gmres", rtol=1e-8, restart=restart, preconditioner=pre, return_info=True)
    g = ud.GridTensor.from_tensor(t, ud.Grid2D(144, 144, rows, cols))
    x, info = ud.solve(g, b, "gmres", rtol=1e-8, restart=restart, preconditioner=pre, return_info=True)
    assert info.converged and info.iterations == i1.iterations
    assert _rel(x, x1) < 1e-10
    assert info.scheduler_transitions == 0
    d = ud.DTensor.from_tensor(t, 2)
    xr, rinfo = ud.solve(d, b, "gmres", rtol=1e-8, restart=restart, preconditioner=pre, return_info=True)
    assert rinfo.iterations == info.iterations
    c, it = _cycles(info.iterations, restart), info.iterations
    second_passes = rinfo.syncs - (1 + 2 * c + 3 * it)          # row blocks: ||b||, (A x, r) a cycle, 3 a step
    assert second_passes >= 0
    assert info.syncs == 1 + 3 * c + 3 * it + second_passes     # the full exchange would take 1 + 4 c + 4 it
    g.free()
    d.free()
