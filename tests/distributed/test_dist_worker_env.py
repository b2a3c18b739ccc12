"""A driver script that imports ustc (and so Numba) at the top: its spawned workers import it
before the Nanny sets NUMBA_NUM_THREADS=1. The runtime's worker plugin makes Numba take the
setting anyway, so the workers launch one thread and later compilations do not fail. The
workers of ustc's LocalCluster do not get Dask's MALLOC_TRIM_THRESHOLD_."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = '''
import os

import numba
import ustc
import ustc.distributed as ud


def probe():
    from numba.core import config
    launched = numba.get_num_threads()              # launches the thread pool
    add = numba.njit(lambda v: v + 1)               # a compilation after the launch re-reads the environment
    return config.NUMBA_NUM_THREADS, launched, int(add(1)), os.environ.get("MALLOC_TRIM_THRESHOLD_")


if __name__ == "__main__":
    rt = ud.Runtime(n_workers=1)
    try:
        print(list(rt.client.run(probe).values()))
    finally:
        rt.close()
'''


def test_script_importing_ustc_first(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(SCRIPT)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_TRIM_THRESHOLD_"}
    done = subprocess.run([sys.executable, str(script)], cwd=root, env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    # one Numba thread; no MALLOC_TRIM_THRESHOLD_ from Dask's nanny (glibc keeps its adaptive mmap threshold)
    assert done.stdout.strip().splitlines()[-1] == "[(1, 1, 2, None)]"
