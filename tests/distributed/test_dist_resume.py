"""Exact resume: a solve resumed from a ``checkpoint_every=`` checkpoint continues to the same
iterate as the uninterrupted solve, bit for bit (CG, Jacobi-CG on a Grid2D, BiCGSTAB with
Jacobi, BiCGSTAB on a Grid2D (its restored vectors send their entries ahead), GMRES at its
restarts), in the same number of iterations; the kept loops take the iterations of
single-process ustc.solve; a checkpoint taken with one preconditioner refuses
the other."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from dist_helpers import poisson2d

import ustc
import ustc.distributed as ud
from ustc.distributed.checkpoint import Checkpoint

SIDE = 40           # ~150-250 iterations at rtol 1e-10: long enough for the driver's 0.25 s pulls


def _convection(side):
    conv = sp.diags([-1.3, 2.6, -0.7], [-1, 0, 1], shape=(side, side))
    lap = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(side, side))
    a = sp.kron(conv, sp.eye(side)) + sp.kron(sp.eye(side), lap)
    return (a @ sp.diags(np.linspace(1, 3, side * side))).tocsr()


CASES = [("cg", None, "rows", poisson2d), ("cg", "jacobi", "grid", poisson2d),
         ("bicgstab", "jacobi", "rows", _convection), ("bicgstab", None, "grid", _convection),
         ("gmres", None, "rows", _convection)]


def _matrix(t, kind):
    n = t.shape[0]
    if kind == "grid":
        return ud.GridTensor.from_tensor(t, ud.Grid2D(n, n, 2, [0, n // 3, n]))
    return ud.DTensor.from_tensor(t, [0, n // 3, n // 3, n])


@pytest.mark.parametrize("method, pre, kind, make", CASES, ids=lambda c: getattr(c, "__name__", str(c)))
def test_resume_is_exact(rt, method, pre, kind, make):
    a = make(SIDE)
    t = ustc.Tensor.from_package(a)
    b = np.random.default_rng(3).standard_normal(a.shape[0])
    options = dict(rtol=1e-10, preconditioner=pre, restart=10, return_info=True)
    _, i1 = ustc.solve(t, b, method, **options)
    d = _matrix(t, kind)
    seen = []
    x, info = ud.solve(d, b, method, checkpoint_every=3, on_checkpoint=seen.append, **options)
    assert info.converged and info.iterations == i1.iterations
    assert info.checkpoints == len(seen) >= 1           # the last copies arrive with the result at the latest
    for ckpt in (seen[0], seen[-1]):
        assert ckpt.method == method and ckpt.exact and 0 < ckpt.iterations <= info.iterations
        if method == "gmres":
            assert ckpt.iterations % 10 == 0 and not ckpt.state         # at a restart: x is the state
        else:
            assert ckpt.iterations % 3 == 0 and ckpt.state
        kept = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in ckpt.state.items()}
        xr, ir = ud.solve(d, b, method, resume=ckpt, **options)
        assert ir.iterations == info.iterations and ir.resumed_from == ckpt.iterations
        np.testing.assert_array_equal(xr, x)                              # bit for bit
        assert ir.residual_norm == info.residual_norm
        for k, v in kept.items():                                         # the checkpoint is not mutated
            np.testing.assert_array_equal(ckpt.state[k], v)


def test_resume_with_checkpoints_again(rt):
    """A resumed solve takes checkpoints numbered from where it started, and resuming from one
    of those still lands on the uninterrupted iterate."""
    t = ustc.Tensor.from_package(poisson2d(SIDE))
    b = np.random.default_rng(4).standard_normal(SIDE * SIDE)
    d = ud.DTensor.from_tensor(t, 2)
    first = []
    x, info = ud.solve(d, b, "cg", rtol=1e-10, checkpoint_every=2, on_checkpoint=first.append, return_info=True)
    assert first
    second = []
    xr, ir = ud.solve(d, b, "cg", rtol=1e-10, resume=first[0], checkpoint_every=2, on_checkpoint=second.append,
                      return_info=True)
    np.testing.assert_array_equal(xr, x)
    assert all(c.iterations > first[0].iterations and c.iterations % 2 == first[0].iterations % 2 for c in second)
    if second:
        np.testing.assert_array_equal(ud.solve(d, b, "cg", rtol=1e-10, resume=second[-1]), x)


def test_preconditioner_mismatch_and_hand_made(rt):
    t = ustc.Tensor.from_package(poisson2d(SIDE))
    b = np.ones(SIDE * SIDE)
    d = ud.DTensor.from_tensor(t, 2)
    seen = []
    ud.solve(d, b, "cg", rtol=1e-10, preconditioner="jacobi", checkpoint_every=2, on_checkpoint=seen.append)
    assert seen and "z" in seen[0].state
    with pytest.raises(ustc.UstcError, match="another preconditioner"):
        ud.solve(d, b, "cg", rtol=1e-10, resume=seen[0])
    with pytest.raises(ustc.UstcError, match="another preconditioner"):
        ud.solve(d, b, "cg", rtol=1e-10, preconditioner="jacobi", resume=Checkpoint("cg", 4, seen[0].x,
                                                                                  {"r": seen[0].x}))
    hand = Checkpoint("cg", 4, np.zeros(SIDE * SIDE))                   # x only: CG restarts from it
    assert not hand.exact
    x, info = ud.solve(d, b, "cg", rtol=1e-10, resume=hand, return_info=True)
    assert info.converged and info.resumed_from == 4
    with pytest.raises(ustc.UstcError, match="resume"):
        ud.solve(d, b, "cg", resume=Checkpoint("cg", 4, np.zeros(SIDE * SIDE), {"r": np.zeros(3)}))
