"""Checkpoints and resume: a worker killed with SIGKILL mid-CG, the group repaired (lost blocks
rebuilt from their recipes: scattered data or a loader, row or grid blocks), the solve resumed from the driver's
checkpoint and converged to the single-process solution; no worker process left behind."""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
import pytest
from dist_helpers import children, poisson2d, random_sparse, wait_gone, worker_pid

import ustc
import ustc.distributed as ud
from ustc.distributed.checkpoint import Checkpoint, Watch

KILL_SIDE = 400     # ~1,900 iterations: seconds over direct sockets (at side 50, ~250 iterations, the solve
#                    could end before the first 0.25 s checkpoint pull, so the kill came after it)


def _rel(x, y):
    return np.linalg.norm(x - y) / np.linalg.norm(y)


def _solve_killed(rt, d, b, rank, after, **options):
    """Run ud.solve in a thread, SIGKILL the worker of block ``rank`` once a checkpoint at or past
    ``after`` iterations arrived; ``(result or exception, checkpoints seen)``."""
    pid = worker_pid(rt, d.group, rank)
    reached, seen, out = threading.Event(), [], {}

    def note(ckpt):
        seen.append(ckpt.iterations)
        if ckpt.iterations >= after:
            reached.set()

    def run():
        try:
            out["result"] = ud.solve(d, b, "cg", on_checkpoint=note, return_info=True, **options)
        except BaseException as exc:  # noqa: BLE001
            out["result"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    assert reached.wait(60), seen
    os.kill(pid, signal.SIGKILL)
    thread.join(120)
    assert not thread.is_alive()
    return out["result"], seen


@pytest.fixture
def private():
    """A private 2-worker runtime (a worker is killed); its processes are checked gone at the end."""
    before = children()
    rt = ud.Runtime(n_workers=2)
    yield rt
    started = children() - before
    rt.close()
    assert not wait_gone(started), "worker processes left behind"


def test_resume_after_sigkill_mid_cg(private):
    rt = private
    a = poisson2d(KILL_SIDE)
    b = np.random.default_rng(0).standard_normal(KILL_SIDE * KILL_SIDE)
    x1, i1 = ustc.solve(ustc.Tensor.from_package(a), b, "cg", rtol=1e-10, return_info=True)
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), 2, runtime=rt)
    err, seen = _solve_killed(rt, d, b, 1, 20, rtol=1e-10, checkpoint_every=5)
    assert isinstance(err, ud.DistributedError) and err.lost_blocks == (1,)
    ckpt = err.checkpoint
    assert isinstance(ckpt, Checkpoint) and ckpt.iterations >= 20 and ckpt.iterations % 5 == 0
    assert ckpt.iterations == seen[-1]
    assert ckpt.exact and sorted(ckpt.state) == ["p", "r", "rr", "rz"]
    x, info = ud.solve(d, b, "cg", rtol=1e-10, resume=ckpt, return_info=True)
    assert d.group.generation == 1 and d.group.workers[1] in rt.workers
    assert info.converged and info.resumed_from == ckpt.iterations and info.iterations > ckpt.iterations
    assert info.iterations == i1.iterations               # the resume continued CG's own iterations
    assert _rel(x, x1) < 1e-10
    np.testing.assert_allclose(d @ x, a @ x, rtol=1e-12, atol=1e-12)      # the rebuilt block is A's


def test_automatic_retry_rebuilds_loader_blocks(private):
    rt = private
    a = poisson2d(KILL_SIDE)                         # long enough that the kill lands mid-solve
    n = KILL_SIDE * KILL_SIDE
    b = np.random.default_rng(1).standard_normal(n)
    x1 = ustc.solve(ustc.Tensor.from_package(a), b, "cg", rtol=1e-10)
    d = ud.DTensor.from_loader(lambda r0, r1: a[r0:r1], a.shape, [0, 9 * n // 25, 9 * n // 25, n], runtime=rt,
                               block_format="DIAI")
    small = random_sparse(9, 9, seed=2)
    s = ud.DTensor.from_tensor(ustc.Tensor.from_package(small), 3, runtime=rt)
    v = ud.DVector.from_array(np.arange(9.0), 3, runtime=rt)
    g = ud.GridTensor.from_tensor(ustc.Tensor.from_package(small), ud.Grid2D(9, 9, 3, 1), runtime=rt)
    lab = ud.Labels([2, 0, 1, 0, 2, 1, 1, 0, 2], 3)               # labelled: rebuilt in label order
    sl = ud.DTensor.from_tensor(ustc.Tensor.from_package(small), lab, runtime=rt)
    ll = ud.DTensor.from_loader(lambda rows: small[rows], (9, 9), lab, runtime=rt, block_format="COO")
    vl = ud.DVector.from_array(np.arange(9.0) * 2, lab, runtime=rt)
    product = s @ s                                  # no recipe: lost with its worker
    result, _ = _solve_killed(rt, d, b, 0, 10, rtol=1e-10, checkpoint_every=10, retries=1)
    x, info = result
    assert info.converged and info.restarts == 1 and info.resumed_from >= 10
    assert _rel(x, x1) < 1e-7
    assert d.group.generation == 1                   # blocks 0 and 2 shared the killed worker
    assert d.plan_info()["formats"][0] == str(ustc.Tensor.from_dense(np.eye(2), "DIAI").format)
    np.testing.assert_allclose(s @ np.ones(9), small @ np.ones(9), rtol=1e-13)    # rebuilt from scattered data
    np.testing.assert_array_equal(v.gather(), np.arange(9.0))                     # from the driver's array
    np.testing.assert_allclose(g @ np.ones(9), small @ np.ones(9), rtol=1e-13)    # grid blocks too
    for m in (sl, ll):
        np.testing.assert_allclose(m @ np.arange(9.0), small @ np.arange(9.0), rtol=1e-13)
    np.testing.assert_array_equal(vl.gather(), np.arange(9.0) * 2)
    with pytest.raises(ud.DistributedError, match="no recipe"):
        product.gather()


def test_watch_counts_iterations():
    x = np.zeros(3)
    w = Watch(x, "bicgstab", every=2, offset=7)
    w.product(x)                         # the residual product of a (re)start: not an iteration
    for it in range(1, 6):
        w.product(np.ones(3))
        w.product(np.ones(3))
        x += 1
        w.updated(x)
        w.updated(np.ones(3))            # another vector: ignored
    assert [i for i, _ in w.versions] == [7 + 2, 7 + 4]           # every 2 iterations, 7 done before (a resume)
    assert [float(v["x"][0]) for _, v in w.versions] == [2.0, 4.0]    # copies, not views of x
    assert w.since(9) == [w.versions[1]]


def test_watch_gmres_copies_at_restarts():
    x, z = np.zeros(2), np.ones(2)
    w = Watch(x, "gmres", every=2)
    for _ in range(3):                    # GMRES(3): a residual product of x, three inner steps
        w.product(x)
        for _ in range(3):
            w.product(z)
            w.updated(z)
        x += 1
        w.updated(x)                      # x changes at the restart only
    assert [i for i, _ in w.versions] == [6, 9] and w.since(0)[0][1]["x"][0] == 2.0


def test_argument_errors(rt):
    d = ud.DTensor.from_tensor(ustc.Tensor.from_package(poisson2d(4)), 2)
    b = np.ones(16)
    with pytest.raises(ustc.UstcError, match="checkpoint_every"):
        ud.solve(d, b, "cg", checkpoint_every=0)
    with pytest.raises(ustc.UstcError, match="resume"):
        ud.solve(d, b, "gmres", resume=Checkpoint("cg", 3, np.zeros(16)))
    with pytest.raises(ustc.UstcError, match="resume"):
        ud.solve(d, b, "cg", resume=Checkpoint("cg", 3, np.zeros(15)))
    x, info = ud.solve(d, b, "cg", resume=Checkpoint("cg", 3, np.zeros(16)), return_info=True, rtol=1e-10)
    assert info.converged and info.resumed_from == 3
    np.testing.assert_allclose(x, ustc.solve(ustc.Tensor.from_package(poisson2d(4)), b, "cg", rtol=1e-12),
                               rtol=1e-8)
