"""ustc.distributed.map: results in order (empty input, one item, more workers than items,
chunks of every size), the shared operand unpickled once per worker, errors naming the item,
a failing item cancelling the chunks not started, a stalled worker's queued chunks taken by the
other, Dask's sampling paused on the workers during a map on a cluster ustc started (not on one
it attached to) and running again after it, no worker process left by a private runtime; the
chunk layout (:func:`ustc.distributed.batch.chunk_bounds`) as a pure function."""

from __future__ import annotations

import os
import time
import uuid

import numpy as np
import pytest
from dist_helpers import children, wait_gone

pytest.importorskip("distributed")

import ustc  # noqa: E402
import ustc.distributed as ud  # noqa: E402
from ustc.distributed.batch import chunk_bounds  # noqa: E402
from ustc.distributed.quiet import MAP_PAUSED  # noqa: E402


@pytest.mark.parametrize("count, workers, per", [(0, 2, 8), (1, 2, 8), (3, 5, 8), (400, 2, 8), (1000, 3, 1),
                                                 (17, 2, 100), (10_000, 64, 8)])
def test_chunk_bounds(count, workers, per):
    b = chunk_bounds(count, workers, per)
    sizes = np.diff(b)
    bulk = -(-count // (workers * per))
    assert b[0] == 0 and b[-1] == count and (sizes >= 1).all()
    assert (sizes <= bulk).all() and (np.diff(sizes) <= 0).all()        # never above the bulk, shrinking
    if count:
        assert sizes[-1] == 1 and sizes[-workers:].max() <= max(1, bulk // 2)   # the last ones are short
        assert len(sizes) <= workers * per + 2 * workers * (1 + np.log(max(bulk, 1))) + 1   # few tasks
    with pytest.raises(ustc.UstcError):
        chunk_bounds(count, 0, per)


def _plus_sum(item, shared):
    return float(shared.sum()) + item


def test_results_in_order(rt):
    shared = np.arange(5.0)
    assert ud.map(_plus_sum, range(50), shared=shared) == [10.0 + i for i in range(50)]
    assert ud.map(abs, [-3]) == [3]                                  # one item, fewer items than workers
    assert ud.map(abs, []) == [] and ud.map(abs, iter(())) == []
    items = list(range(-9, 9))
    for per in (1, 2, 100):                   # a chunk per worker in the bulk; more chunks than items
        assert ud.map(abs, items, chunks_per_worker=per) == [abs(i) for i in items]
    big = list(range(2_000))                  # many chunks: the order survives their completion order
    assert ud.map(divmod, big, shared=7) == [divmod(i, 7) for i in big]


def test_argument_errors(rt):
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ustc.UstcError, match="chunks_per_worker"):
            ud.map(abs, [1], chunks_per_worker=bad)
    with pytest.raises(ustc.UstcError, match="callable"):
        ud.map(3, [1])


def _inverse(item):
    return 1 / item


def test_error_names_the_item(rt):
    with pytest.raises(ZeroDivisionError) as err:
        ud.map(_inverse, [1, 2, 0, 3])
    assert any("item 2: 0" in note for note in getattr(err.value, "__notes__", ()))
    with pytest.raises(ZeroDivisionError) as err:
        ud.map(_inverse, [5] * 30 + [0])
    assert any("item 30: 0" in note for note in err.value.__notes__)
    assert ud.map(_inverse, [1, 2]) == [1.0, 0.5]                    # the runtime is still usable


class _Counted:
    """A shared operand that leaves a file named by the process each time it is unpickled."""

    def __init__(self, where, payload):
        self.where, self.payload = where, payload

    def __reduce__(self):
        return (_counted, (self.where, self.payload))


def _counted(where, payload):
    with open(os.path.join(where, f"{os.getpid()}-{uuid.uuid4().hex}"), "w"):
        pass
    return _Counted(where, payload)


def _payload_at(item, shared):
    return (os.getpid(), float(shared.payload[item % len(shared.payload)]))


def _amm_running(dask_scheduler):
    amm = dask_scheduler.extensions.get("amm")
    return amm is not None and amm.running


def test_scheduler_keeps_replicas(rt):
    """The scheduler ustc starts runs no active memory manager: its ReduceReplicas would drop the
    shared operand's broadcast replica on a worker whose tasks are still queued, which then loads
    it a second time (``runtime.SCHEDULER_CONFIG``)."""
    assert rt.client.run_on_scheduler(_amm_running) is False


def test_shared_operand_sent_once_per_worker(rt, tmp_path):
    pids = set(rt.client.run(os.getpid).values())
    payload = np.arange(100.0)
    out = ud.map(_payload_at, range(300), shared=_Counted(str(tmp_path), payload))
    assert [v for _, v in out] == [float(i % 100) for i in range(300)]
    unpickled = [int(name.split("-")[0]) for name in os.listdir(tmp_path)]
    on_workers = [p for p in unpickled if p in pids]
    assert sorted(on_workers) == sorted(pids)            # broadcast: each worker unpickled it once
    assert {p for p, _ in out} <= pids


def _logged(item, where):
    """Leaves a file per item run; item 0 fails at once, the others take 50 ms."""
    if item == 0:
        raise ValueError("item 0 fails")
    time.sleep(0.05)
    with open(os.path.join(where, str(item)), "w"):
        pass
    return item


def _settled(path, seconds=10.0) -> int:
    """The number of files in ``path`` once it stops growing (the chunks still running end)."""
    deadline, last = time.monotonic() + seconds, -1
    while time.monotonic() < deadline:
        now = len(os.listdir(path))
        if now == last:
            return now
        last = now
        time.sleep(0.5)
    return len(os.listdir(path))


def test_a_failing_item_cancels_the_rest(rt, tmp_path):
    with pytest.raises(ValueError, match="item 0 fails"):
        ud.map(_logged, range(200), shared=str(tmp_path))
    ran = _settled(tmp_path)
    # 16 bulk chunks of 13 items: the other worker finishes the chunks it holds (at most two),
    # none of the queued ones starts
    assert ran < 100, f"{ran} of 199 items ran after item 0 failed"
    assert ud.map(abs, [-1, -2]) == [1, 2]


def _stalls(item, where):
    """Item 0 waits (up to 20 s) until more than half of the items ran elsewhere; every item
    leaves a file. Returns whether the wait ended before the time-out (with chunks handed out
    up front, the stalled worker would hold half the items and the wait could not end)."""
    if item != 0:
        with open(os.path.join(where, str(item)), "w"):
            pass
        return True
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if len(os.listdir(where)) > 32:
            return True
        time.sleep(0.02)
    return False


def test_a_stalled_worker_is_evened_out(rt, tmp_path):
    out = ud.map(_stalls, range(64), shared=str(tmp_path))
    assert out == [True] * 64


def _pause_seen(item, names):
    """On a worker: waits (up to 5 s) until its callbacks ``names`` are stopped; then whether
    they are and whether its heartbeat and memory monitor run."""
    from distributed import get_worker

    pcs = get_worker().periodic_callbacks
    deadline = time.monotonic() + 5
    while any(pcs[n].is_running() for n in names if n in pcs) and time.monotonic() < deadline:
        time.sleep(0.01)
    return (not any(pcs[n].is_running() for n in names if n in pcs), pcs["heartbeat"].is_running(),
            pcs["memory_monitor"].is_running())


def _running(dask_worker, names):
    return all(dask_worker.periodic_callbacks[n].is_running() for n in names if n in dask_worker.periodic_callbacks)


def test_sampling_paused_during_a_map_only(rt):
    assert all(s == (True, True, True) for s in ud.map(_pause_seen, range(4), shared=MAP_PAUSED))
    deadline = time.monotonic() + 5
    while not all(rt.client.run(_running, names=MAP_PAUSED).values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(rt.client.run(_running, names=MAP_PAUSED).values())
    scheduler = rt.cluster.scheduler
    assert scheduler.periodic_callbacks["tick"].is_running() and scheduler.periodic_callbacks["stealing"].is_running()


def _profiling(item):
    """On a worker, after a moment: whether its profiler runs."""
    from distributed import get_worker

    time.sleep(0.2)
    return get_worker().periodic_callbacks["profile"].is_running()


def test_private_and_attached_runtimes(tmp_path):
    before = children()
    rt = ud.Runtime(n_workers=2)
    try:
        started = children() - before
        pids = set(rt.client.run(os.getpid).values())
        out = ud.map(_payload_at, range(60), shared=_Counted(str(tmp_path), np.arange(3.0)), runtime=rt)
        assert [v for _, v in out] == [float(i % 3) for i in range(60)]
        on_workers = [int(n.split("-")[0]) for n in os.listdir(tmp_path) if int(n.split("-")[0]) in pids]
        assert sorted(on_workers) == sorted(pids)
        attached = ud.Runtime(rt.client)                 # a cluster ustc did not start is left as it is
        assert ud.map(_profiling, range(2), chunks_per_worker=1, runtime=attached) == [True, True]
    finally:
        rt.close()
    assert not wait_gone(started), "worker processes left behind"
