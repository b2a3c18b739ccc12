"""One 2-worker LocalCluster on 127.0.0.1, shared by consecutive tests of this directory.

The cluster is shut down as soon as the next test of this process lies outside the
directory: an idle cluster costs about 0.15 of a core (Dask's heartbeats and profiler in the
scheduler and the two workers), which over the rest of a test run was ~10% of the suite's CPU.
A later test of the directory starts it again.

CPU logs (tools/pytest_cpulog.py count the children a test reaps) put the CPU of the cluster's
worker processes, i.e. of every distributed test this xdist worker ran, on the test whose
teardown shuts the cluster down: the directory's last, test_dist_worker_env (69.5 CPU s for
4.2 s wall in a cold CI run; alone it takes 5.5 CPU s, its own driver script and 1-worker cluster).
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("distributed")

import ustc.distributed as ud  # noqa: E402  (after the importorskip)

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def rt():
    return ud.runtime(n_workers=2)


def pytest_runtest_teardown(item, nextitem):
    if nextitem is None or not str(nextitem.path).startswith(HERE + os.sep):
        ud.shutdown()
