"""Shared helpers for the benchmark scripts: timing, peak memory, machine line, docs sections.

* :func:`median_ms` -- median wall time of ``N`` calls after warm-up calls.
* :func:`interleaved_ms` -- the same for several competitors, measured in alternating rounds.
  :func:`interleaved_samples` returns every sample instead, :func:`quartiles` their spread.
* :func:`stream_triad_gbs` -- memory bandwidth of a STREAM triad on a chosen number of threads.
* :func:`extra_peak` -- peak bytes a call allocates on top of what was held
  before it, seen by ``tracemalloc`` (NumPy data buffers are reported to
  tracemalloc, and so are arrays Numba's runtime allocates: check with
  :func:`tracemalloc_sees_numba`).
* :func:`rss_peak_subprocess` -- the fallback when tracemalloc cannot see an
  allocator: ``ru_maxrss`` of a fresh Python process running a snippet.
* :func:`machine`, :func:`write_section` -- the machine line and the
  ``## <name>`` section writer of ``docs/benchmarks.md`` (from ``_report``,
  which ``bench_parse.py`` uses too, so every script writes the file the same way).
"""

from __future__ import annotations

import functools
import gc
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Callable

from _report import DOC, HEADER, cpu_model, write_section  # noqa: F401  (re-exported)
from _report import machine as _machine_line


def memory_total_gib() -> float | None:
    """MemTotal from /proc/meminfo in GiB (None where there is no /proc)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def machine() -> str:
    """One line: CPU model (/proc/cpuinfo), cores (nproc), RAM, OS and Python version."""
    line = _machine_line()
    mem = memory_total_gib()
    if mem is None:
        return line
    cpu, rest = line.split(", ", 1)
    cores, rest = rest.split(", ", 1)
    return f"{cpu}, {cores}, {mem:.0f} GiB RAM, {rest}"


def median_ms(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> tuple[float, list[float]]:
    """``(median, samples)`` in ms of ``repeat`` timed calls of ``fn()`` after ``warmup`` untimed ones.

    The garbage collector runs before each call (outside the timing) so that
    one call's leftovers are not freed inside the next one's measurement.
    """
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        result = fn()
        samples.append((time.perf_counter() - start) * 1e3)
        del result
    return statistics.median(samples), samples


def interleaved_ms(fns: dict[str, Callable[[], object]], rounds: int = 5, per_round: int = 3) -> dict[str, float]:
    """Median ms per name of ``fns``, measured in ``rounds`` rounds; each round gives every function
    one untimed call and then ``per_round`` timed ones (as :func:`median_ms`).

    Competitors timed one after the other see different moments of a shared machine; alternating
    rounds spread that drift over all of them. The untimed call lets the previous competitor's
    thread pool go quiet first (OpenMP and OpenBLAS threads spin for a while after a parallel
    region and slow the next library's threads on the same cores).
    """
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name] += median_ms(fn, per_round, warmup=1)[1]
    return {name: statistics.median(values) for name, values in samples.items()}


def per_call_ms(fn: Callable[[], object], repeat: int, inner: int) -> float:
    """Median over ``repeat`` samples of the mean time of ``inner`` back-to-back calls. For calls
    of well under a millisecond: one call after :func:`median_ms`'s garbage collection measures
    cold caches, not the call (a 0.016 ms SpMV read 0.07-0.15 ms, a 0.2 ms layer ~1 ms)."""
    def batch():
        for _ in range(inner):
            fn()
    return median_ms(batch, repeat)[0] / inner


def extra_peak(fn: Callable[[], object]) -> tuple[object, int]:
    """``(fn(), bytes)``: tracemalloc's peak during the call minus the memory held just before it.

    The result is kept alive until the peak is read, so its own size is part
    of the extra peak (compare it with the output size).
    """
    gc.collect()
    started = tracemalloc.is_tracing()
    if not started:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        if not started:
            tracemalloc.stop()
    return result, peak - before


def tracemalloc_sees_numba(n: int = 10**7) -> tuple[bool, float]:
    """Whether an array Numba allocates (``np.empty(n)`` inside an ``njit`` function) shows up in
    tracemalloc; returns ``(seen, MB seen)`` where ``8 n`` bytes are expected."""
    import numpy as np
    from numba import njit

    @njit
    def empty(k):
        return np.empty(k)

    empty(1)  # compile outside the measurement
    _, extra = extra_peak(lambda: empty(n))
    return extra >= 0.9 * 8 * n, extra / 1e6


def rss_peak_subprocess(code: str, cwd: str | None = None) -> int:
    """``ru_maxrss`` in bytes of a fresh Python running ``code`` (Linux reports KiB).

    The fallback for allocations tracemalloc cannot see: run setup + the
    operation in one process and setup alone in another, and subtract.
    """
    snippet = (code + "\nimport resource; "
               "print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, check=True, cwd=cwd)
    line = [s for s in out.stdout.splitlines() if s.startswith("RSS ")][-1]
    return int(line.split()[1]) * 1024


def interleaved_samples(fns: dict[str, Callable[[], object]], rounds: int = 5,
                        per_round: int = 3) -> dict[str, list[float]]:
    """As :func:`interleaved_ms`, but every timed sample (ms) per name, in the order taken, so that
    a report can give the spread next to the median (see :func:`quartiles`)."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name] += median_ms(fn, per_round, warmup=1)[1]
    return samples


def quartiles(samples: list[float]) -> tuple[float, float, float]:
    """``(q1, median, q3)`` of ``samples`` (inclusive method; one sample gives it three times)."""
    if len(samples) < 2:
        return samples[0], samples[0], samples[0]
    q1, q2, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q1, q2, q3


def stream_triad_gbs(threads: int, mb: float = 200, repeat: int = 7) -> float:
    """Memory bandwidth in GB/s of the STREAM triad ``a[i] = b[i] + 1.5 c[i]`` on float64 arrays of
    ``mb`` MB each, a parallel Numba loop run on ``threads`` threads (3 arrays x 8 bytes per element
    counted once each, as STREAM does). The median of ``repeat`` calls after two warm-up calls."""
    import numba
    import numpy as np

    n = int(mb * 1e6) // 8
    a, b, c = np.zeros(n), np.ones(n), np.ones(n)
    triad = _triad_kernel()
    before = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        ms, _ = median_ms(lambda: triad(a, b, c), repeat=repeat, warmup=2)
    finally:
        numba.set_num_threads(before)
    return 3 * 8 * n / ms / 1e6


@functools.cache
def _triad_kernel():
    """The triad loop, compiled on first use (a fraction of a second)."""
    from numba import njit, prange

    @njit(parallel=True, cache=False)
    def triad(a, b, c):
        for i in prange(a.size):
            a[i] = b[i] + 1.5 * c[i]

    return triad
