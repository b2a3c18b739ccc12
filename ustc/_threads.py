"""Idle OpenMP workers sleep instead of spinning (``OMP_WAIT_POLICY=PASSIVE`` unless the user set it).

Numba's ``parallel=True`` kernels run on its OpenMP threading layer (GNU libgomp here). By
default idle workers spin for a while after each parallel region, which is fast on an idle
machine and collapses on a shared one: a spinning worker holds the core that the thread with
the remaining work needs. Measured on the 2-core project machine with one CPU-hog process
beside it, 10,000-row 2-D Poisson GMRES(30) (2,653 iterations): 1.06 s median with spinning
workers, 0.49 s with passive ones (SciPy 0.42 s); under the load of four other jobs the
spinning runs' worst case was 9.5 s against a 0.37 s median. A passive wake-up costs ~45 µs
per parallel region, so the solvers' vector kernels stay on one thread below
``ustc.ops._vector.SERIAL_LENGTH`` elements (measured crossover for a dot product between
131k and 524k elements with passive workers).

The variable is read when the OpenMP runtime starts, so this module must run before the first
parallel kernel: ``ustc`` imports it first. Set ``OMP_WAIT_POLICY=ACTIVE`` yourself to keep
spinning workers (a dedicated machine); the setting applies to every OpenMP runtime of the
process (torch's included).
"""

from __future__ import annotations

import contextlib
import os

POLICY_VAR = "OMP_WAIT_POLICY"
DEFAULT_POLICY = "PASSIVE"
#: Set to 1 to let large host solves run on :func:`free_cores` threads (off by default, see there).
ADAPTIVE_VAR = "USTC_ADAPTIVE_THREADS"

os.environ.setdefault(POLICY_VAR, DEFAULT_POLICY)


def adaptive() -> bool:
    """Whether host solves pick their thread count from :func:`free_cores` (``USTC_ADAPTIVE_THREADS=1``).
    Off by default: ``/proc/loadavg`` counts the runnable threads of the whole host, other
    containers' included, so on a shared host it reports one free core where two threads still
    ran faster (2-core machine at load 3: a 1.48M-row stencil SpMV 9.3 ms on 2 threads against
    14.4 ms on one, while the count said one core was free)."""
    return os.environ.get(ADAPTIVE_VAR, "").strip() not in ("", "0")


def free_cores() -> int:
    """Cores no other runnable thread wants right now: the CPUs this process may use less the
    runnable threads beside the caller (``/proc/loadavg``'s fourth field counts the runnable
    ones, the caller included: an instantaneous count, unlike the load averages). A CPU hog on a
    2-core machine leaves 1. Where the count cannot be read, every usable CPU."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        with open("/proc/loadavg", "rb") as f:
            running = int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return cpus
    return max(1, min(cpus, cpus - (running - 1)))


@contextlib.contextmanager
def limited(threads: int):
    """Numba's parallel kernels launched from this thread run on at most ``threads`` threads
    inside the block (``numba.set_num_threads``, which is per calling thread); the previous
    count is restored after it."""
    import numba

    before = numba.get_num_threads()
    wanted = max(1, min(int(threads), before))
    if wanted == before:
        yield before
        return
    numba.set_num_threads(wanted)
    try:
        yield wanted
    finally:
        numba.set_num_threads(before)
