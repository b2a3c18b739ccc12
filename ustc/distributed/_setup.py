"""The worker plugin of the LocalCluster ustc starts (needs ``distributed``, imported here).

A spawned worker imports the driver's ``__main__`` (and with it Numba, when the driver's
script imports ustc at the top) before the Nanny sets ``runtime.WORKER_ENV``, so Numba's
thread count is still the machine's. A parallel kernel run before the next compilation
launches that many threads, and every later compilation, which re-reads the environment,
then fails ("Cannot set NUMBA_NUM_THREADS to a different value once the threads have been
launched"). :class:`WorkerSetup` re-reads Numba's settings first thing on every worker,
restarted ones included.
"""

from __future__ import annotations

import sys

from distributed.diagnostics.plugin import WorkerPlugin


def numba_config() -> None:
    """Numba's settings re-read from the environment (a no-op before Numba is imported); while
    its threads are not launched yet, the pool size they will be launched with follows
    (``numba.np.ufunc.parallel`` copies it when imported)."""
    if "numba" not in sys.modules:
        return
    from numba.core import config
    from numba.np.ufunc import parallel

    config.reload_config()
    if not parallel._is_initialized:
        parallel.NUM_THREADS = config.NUMBA_NUM_THREADS


class WorkerSetup(WorkerPlugin):
    """Runs :func:`numba_config` on every worker as it joins."""

    name = "ustc-worker-setup"

    def setup(self, worker) -> None:
        numba_config()
