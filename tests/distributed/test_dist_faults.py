"""A worker killed mid-solve gives ustc.errors.DistributedError naming the lost blocks within 10 s;
the runtime, once closed, leaves no worker or nanny process behind (the restarted worker
included; a private runtime, so the check holds in any order and under pytest-xdist)."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import scipy.sparse as sp
from dist_helpers import children, wait_gone

import ustc
import ustc.distributed as ud


def test_lost_worker_raises_distributed_error():
    before = children()
    rt = ud.Runtime(n_workers=2)
    assert len(children() - before) >= 2             # the two workers (and their nannies) are ours
    try:
        n = 20
        conv = sp.diags([-1.3, 2.6, -0.7], [-1, 0, 1], shape=(n, n))
        a = (sp.kron(conv, sp.eye(n)) + sp.kron(sp.eye(n), conv)).tocsr()
        d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), 2, runtime=rt)
        group = d.group
        victim = group.workers[1]
        pid = rt.client.run(os.getpid, workers=[victim])[victim]
        b = ud.DVector.from_array(np.ones(n * n), d.rows, runtime=rt)
        outcome = {}

        def run():
            try:       # rtol 0: runs until stopped
                ud.solve(d, b, "gmres", rtol=0.0, maxiter=10**9, restart=5, check=False)
            except BaseException as exc:  # noqa: BLE001
                outcome["error"] = exc
            outcome["at"] = time.monotonic()

        thread = threading.Thread(target=run)
        thread.start()
        time.sleep(1.0)
        assert thread.is_alive()
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        thread.join(30)
        assert not thread.is_alive()
        err = outcome.get("error")
        assert isinstance(err, ud.DistributedError), repr(err)
        assert err.lost_blocks == (1,) and "blocks [1]" in str(err)
        assert outcome["at"] - killed < 10
    finally:
        started = children() - before                # the nanny's restarted worker too
        rt.close()
    assert not wait_gone(started), "worker processes left behind"
