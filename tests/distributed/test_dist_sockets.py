"""The direct TCP transport (SocketCommunicator): ranks in threads of this process, connected on
127.0.0.1. Messages of every kind arrive intact under their tags whatever the order; the
all-reduce is bitwise the same on every rank; a lost peer, an abort and a timeout fail a receive
with DistributedError naming the block; close stops every reader thread. Then the runtime's
transports: the actor transport still solves, a bad transport name is refused, and the
fused CSR product equals the planned-Matmul one."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from comm_helpers import close, group, spmd
from dist_helpers import poisson2d

pytest.importorskip("distributed")

import ustc  # noqa: E402
import ustc.distributed as ud  # noqa: E402
from ustc.distributed.comm import run_inline  # noqa: E402
from ustc.distributed.sockets import SocketCommunicator  # noqa: E402


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_messages_and_allreduce(size):
    comms = group(SocketCommunicator, size)
    try:
        rng = np.random.default_rng(size)
        payloads = [(np.arange(7.0) + r, (np.arange(4, dtype=np.int64), rng.standard_normal(3) + 1j),
                     np.zeros(0, np.float32), np.arange(12.0).reshape(3, 4)[:, 1], {"rank": r})
                    for r in range(size)]

        def step(comm):
            r = comm.rank
            tag = comm.next_tag("t")
            for dst in reversed(range(size)):           # sent in another order than received
                run_inline(comm.send(dst, tag, payloads[r]))
            got = [run_inline(comm.recv(src, tag)) for src in range(size)]
            total = run_inline(comm.allreduce(np.array([1.0 + r, 1e-17 * r, 3.0])))
            gathered = run_inline(comm.allgather(np.array([r])))
            return got, total, gathered

        out = spmd(comms, step)
        for r, (got, total, gathered) in enumerate(out):
            for src, data in enumerate(got):
                want = payloads[src]
                np.testing.assert_array_equal(data[0], want[0])
                np.testing.assert_array_equal(data[1][0], want[1][0])
                np.testing.assert_array_equal(data[1][1], want[1][1])
                assert data[2].dtype == np.float32 and data[2].size == 0
                np.testing.assert_array_equal(data[3], want[3])
                assert data[4] == want[4]
            assert total.tobytes() == out[0][1].tobytes()          # bitwise the same on every rank
            np.testing.assert_allclose(total, [size * (size + 1) / 2, 1e-17 * size * (size - 1) / 2, 3.0 * size])
            assert [int(g[0]) for g in gathered] == list(range(size))
        assert comms[0].syncs == 1 and comms[0].messages >= size
    finally:
        close(comms)                                   # asserts no reader thread is left


def test_received_arrays_are_writable():
    comms = group(SocketCommunicator, 2)
    try:
        def step(comm):
            tag = comm.next_tag("w")
            run_inline(comm.send(1 - comm.rank, tag, np.ones(5)))
            got = run_inline(comm.recv(1 - comm.rank, tag))
            got += 1
            return got

        assert all((g == 2).all() for g in spmd(comms, step))
    finally:
        close(comms)


def test_lost_peer_fails_a_receive_at_once():
    comms = group(SocketCommunicator, 3)
    try:
        comms[2].close()                               # block 2 goes away
        t0 = time.monotonic()
        with pytest.raises(ud.DistributedError) as err:
            run_inline(comms[0].recv(2, ("x", 1)))
        assert err.value.lost_blocks == (2,) and "block 2" in str(err.value)
        assert time.monotonic() - t0 < 5
        with pytest.raises(ud.DistributedError) as err:
            for _ in range(100):                       # the kernel may take a few writes to notice
                run_inline(comms[1].send(2, ("x", 2), np.ones(1 << 16)))
                time.sleep(0.01)
        assert err.value.lost_blocks == (2,)
    finally:
        close(comms)


def test_abort_and_timeout():
    comms = group(SocketCommunicator, 2, timeout=0.5)
    try:
        with pytest.raises(ud.DistributedError, match="waited 0.5 s for block 1") as err:
            run_inline(comms[0].recv(1, ("never", 0)))
        assert err.value.lost_blocks == (1,)
        failed = {}

        def wait():
            try:
                run_inline(comms[1].recv(0, ("never", 1)))
            except ud.DistributedError as exc:
                failed["error"] = exc

        comms[1].timeout = 30.0
        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.1)
        comms[1].abort("stopped by the test")
        thread.join(5)
        assert not thread.is_alive() and "stopped by the test" in str(failed["error"])
        with pytest.raises(ud.DistributedError, match="stopped by the test"):
            run_inline(comms[1].send(0, ("late", 0), np.ones(1)))
    finally:
        close(comms)


def test_bad_transport_name():
    with pytest.raises(ustc.UstcError, match="transport"):
        ud.Runtime(n_workers=1, transport="carrier pigeon")


def test_actor_transport_still_solves():
    a = ustc.Tensor.from_package(poisson2d(10))
    b = np.random.default_rng(1).standard_normal(100)
    x1, i1 = ustc.solve(a, b, "cg", rtol=1e-8, return_info=True)
    rt = ud.Runtime(n_workers=2, transport="actor")
    try:
        d = ud.DTensor.from_tensor(a, 2, runtime=rt)
        x, info = ud.solve(d, b, "cg", rtol=1e-8, return_info=True)
        assert info.iterations == i1.iterations and info.syncs == 3 * info.iterations + 4
        assert np.linalg.norm(x - x1) <= 1e-10 * np.linalg.norm(x1)
        np.testing.assert_allclose(d @ b, poisson2d(10) @ b, rtol=1e-13, atol=1e-13)
    finally:
        rt.close()


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("partition", [1, 3, [0, 40, 40, 100]], ids=str)
def test_fused_csr_product_equals_planned(rt, dtype, partition):
    """CSR blocks take the compiled halo product; DIAI blocks the planned ustc.Matmul: same
    product to rounding, and the same CG iterations."""
    m = poisson2d(10).astype(dtype)
    if np.dtype(dtype).kind == "c":
        m = (m + 0.25j * (m != 0)).tocsr()
    t = ustc.Tensor.from_package(m)
    x = np.random.default_rng(2).standard_normal(100).astype(dtype)
    fused = ud.DTensor.from_tensor(t, partition)
    planned = ud.DTensor.from_tensor(t, partition, block_format="DIAI")
    plans = ud.Matmul(fused, x).plan()["blocks_plans"], ud.Matmul(planned, x).plan()["blocks_plans"]
    assert all("compiled pass" in p or p == "empty block" for p in plans[0])
    assert not any("compiled pass" in p for p in plans[1])
    np.testing.assert_allclose(fused @ x, m @ x, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(planned @ x, m @ x, rtol=1e-13, atol=1e-13)
    if np.dtype(dtype).kind == "f":
        b = np.ones(100)
        _, i1 = ud.solve(fused, b, "cg", rtol=1e-8, return_info=True)
        _, i2 = ud.solve(planned, b, "cg", rtol=1e-8, return_info=True)
        assert i1.iterations == i2.iterations
    fused.free()
    planned.free()


def test_a_connection_without_the_key_is_dropped_unread():
    """A stranger reaching a rank's port (wrong key, or a rank it does not expect) is closed
    before anything it sends is unpickled; the real peer still connects and messages flow."""
    import pickle
    import socket

    class Boom:
        def __reduce__(self):
            return (pytest.fail, ("a stranger's pickle was loaded",))

    comms = [SocketCommunicator(r, 2, "127.0.0.1", 10) for r in range(2)]
    endpoints = [c.endpoint for c in comms]
    strangers = []
    for hello in (b"\0" * 16 + (1).to_bytes(8, "little"), endpoints[0][2] + (7).to_bytes(8, "little")):
        s = socket.create_connection(endpoints[0][:2], 5)
        s.sendall(hello + pickle.dumps(Boom()))
        strangers.append(s)
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda c: c.connect(endpoints, 10), comms))
        out = spmd(comms, lambda c: run_inline(_ping(c)))
        assert out == [1, 0]
    finally:
        for s in strangers:
            s.close()
        for c in comms:
            c.close()


async def _ping(comm):
    await comm.send(1 - comm.rank, "ping", comm.rank)
    return await comm.recv(1 - comm.rank, "ping")


def test_a_peer_that_never_connects_times_out_by_name():
    comms = [SocketCommunicator(r, 2, "127.0.0.1", 10) for r in range(2)]
    try:
        with pytest.raises(TimeoutError, match=r"blocks \[1\] did not connect"):
            comms[0].connect([c.endpoint for c in comms], 0.3)
    finally:
        for c in comms:
            c.close()
