"""The shared-memory transport (ShmCommunicator, ``transport="shm"``): ranks in threads of this
process, on x86-64 Linux. Messages of every kind arrive intact through the rings (and over TCP
when a frame does not fit); the all-reduce is bitwise the same on every rank; a sleeping receiver
is woken by the doorbell; a lost peer and an abort fail a receive naming the block; no segment is
left in /dev/shm once connected, no reader thread after close; a peer of another host keeps TCP;
a runtime with the shm transport solves like ustc.solve."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp
from comm_helpers import close, group, spmd
from dist_helpers import poisson2d

pytest.importorskip("distributed")

import ustc  # noqa: E402
import ustc.distributed as ud  # noqa: E402
from ustc.distributed import shm  # noqa: E402
from ustc.distributed.comm import run_inline  # noqa: E402

pytestmark = pytest.mark.skipif(not shm.shm_capable(), reason="shared-memory rings need x86-64 and /dev/shm")


def _segments():
    return {n for n in os.listdir(shm.SHM_DIR) if n.startswith("ustc_")}


def _group(size, timeout=30.0, foreign=()):
    """``size`` connected ranks; the ranks in ``foreign`` claim another host."""
    def claim(endpoints):
        for r in foreign:
            host, port, key, (_, rings) = endpoints[r]
            endpoints[r] = (host, port, key, ("elsewhere/0", rings))
        return endpoints
    return group(shm.ShmCommunicator, size, timeout, claim)


@pytest.mark.parametrize("size", [2, 3])
def test_messages_allreduce_and_no_segments_left(size, monkeypatch):
    before = _segments()
    monkeypatch.setattr(shm, "RING_BYTES", 1 << 16)       # the 80 KB payload goes over TCP
    comms = _group(size)
    assert _segments() == before                          # unlinked once every rank attached
    assert all(c.shared_peers == tuple(p for p in range(size) if p != c.rank) for c in comms)
    try:
        rng = np.random.default_rng(size)
        payloads = [(np.arange(7.0) + r, (np.arange(4, dtype=np.int64), rng.standard_normal(3) + 1j),
                     np.zeros(0, np.float32), np.arange(12.0).reshape(3, 4)[:, 1], {"rank": r},
                     np.full(10_000, r, np.float64)) for r in range(size)]

        def step(comm):
            r = comm.rank
            got = []
            for i in range(40):                            # the ring wraps round
                tag = comm.next_tag("t")
                for dst in reversed(range(size)):
                    run_inline(comm.send(dst, tag, payloads[r] if i % 13 == 0 else (i, np.ones(300) * r)))
                got.append([run_inline(comm.recv(src, tag)) for src in range(size)])
            total = run_inline(comm.allreduce(np.array([1.0 + r, 1e-17 * r, 3.0])))
            return got, total

        out = spmd(comms, step)
        for got, total in out:
            for i, msgs in enumerate(got):
                for src, data in enumerate(msgs):
                    if i % 13:
                        assert data[0] == i and (data[1] == src).all()
                        continue
                    want = payloads[src]
                    np.testing.assert_array_equal(data[0], want[0])
                    np.testing.assert_array_equal(data[1][1], want[1][1])
                    assert data[2].dtype == np.float32 and data[2].size == 0
                    np.testing.assert_array_equal(data[3], want[3])
                    assert data[4] == want[4] and (data[5] == src).all()
                    assert data[5].flags.writeable         # like the socket path's arrays
            assert total.tobytes() == out[0][1].tobytes()
        np.testing.assert_allclose(out[0][1], [size * (size + 1) / 2, 1e-17 * size * (size - 1) / 2, 3.0 * size])
    finally:
        close(comms)
    assert _segments() == before


def test_sleeping_receiver_is_woken():
    comms = _group(2)
    try:
        got = {}

        def wait():
            got["data"] = run_inline(comms[1].recv(0, ("late", 0)))

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.3)                                    # long past any spin: asleep, flag raised
        t0 = time.monotonic()
        run_inline(comms[0].send(1, ("late", 0), np.arange(3.0)))
        thread.join(5)
        assert not thread.is_alive() and (got["data"] == np.arange(3.0)).all()
        assert time.monotonic() - t0 < 2
    finally:
        close(comms)


def test_lost_peer_abort_and_foreign_host():
    comms = _group(3, foreign=(2,))
    try:
        assert comms[0].shared_peers == (1,) and comms[2].shared_peers == ()
        tag = ("x", 0)
        run_inline(comms[2].send(0, tag, np.ones(4)))      # over TCP
        assert (run_inline(comms[0].recv(2, tag)) == 1).all()
        comms[1].close()                                   # block 1 goes away
        t0 = time.monotonic()
        with pytest.raises(ud.DistributedError) as err:
            run_inline(comms[0].recv(1, ("x", 1)))
        assert err.value.lost_blocks == (1,) and "block 1" in str(err.value) and time.monotonic() - t0 < 5
        with pytest.raises(ud.DistributedError) as err:
            run_inline(comms[0].send(1, ("x", 2), np.ones(3)))
        assert err.value.lost_blocks == (1,)
        comms[2].abort("stopped by the test")
        with pytest.raises(ud.DistributedError, match="stopped by the test"):
            run_inline(comms[2].recv(0, ("x", 3)))
    finally:
        close(comms)


def test_runtime_with_the_shm_transport_solves():
    a = sp.csr_matrix(poisson2d(12))
    b = np.random.default_rng(0).standard_normal(a.shape[0])
    rt = ud.Runtime(n_workers=2, transport="shm")
    try:
        d = ud.DTensor.from_tensor(ustc.Tensor.from_package(a), 2, runtime=rt)
        x, info = ud.solve(d, b, "cg", rtol=1e-8, return_info=True)
        x1, info1 = ustc.solve(ustc.Tensor.from_package(a), b, "cg", rtol=1e-8, return_info=True)
        assert info.iterations == info1.iterations and info.syncs == 3 * info.iterations + 4
        assert np.linalg.norm(x - x1) <= 1e-10 * np.linalg.norm(x1)
    finally:
        rt.close()
    assert not _segments()
