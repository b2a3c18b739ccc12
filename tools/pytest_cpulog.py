"""pytest plugin: CPU seconds of every test, to find where the suite's time goes.

    PYTHONPATH=tools python -m pytest -n auto -p pytest_cpulog
    python tools/pytest_cpulog.py [DIR]           # per-file and per-test summary

Each process (each xdist worker) appends ``nodeid<TAB>cpu<TAB>wall`` lines to
``$USTC_CPULOG_DIR/cpulog_<worker>.tsv`` (default: the current directory). CPU is user + system
time of the process, its threads (Numba's included) and the children it has reaped during the
test, so a subprocess's time lands on the test that waited for it; worker processes reaped
later (Dask's) land on whichever test reaps them, which shows as CPU far above wall.
"""

from __future__ import annotations

import collections
import glob
import os
import resource
import sys
import time

import pytest

_log = None


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _log
    if _log is None:
        folder = os.environ.get("USTC_CPULOG_DIR", ".")
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _log = open(os.path.join(folder, f"cpulog_{worker}.tsv"), "a", buffering=1)
    cpu, wall = _cpu(), time.perf_counter()
    yield
    _log.write(f"{item.nodeid}\t{_cpu() - cpu:.3f}\t{time.perf_counter() - wall:.3f}\n")


def summary(folder: str, top: int = 30) -> str:
    """Per-directory, per-file and per-test CPU seconds of the logs in ``folder``."""
    rows = []
    for path in glob.glob(os.path.join(folder, "cpulog_*.tsv")):
        with open(path) as f:
            rows += [(p[0], float(p[1]), float(p[2])) for p in (line.rstrip("\n").split("\t") for line in f) if len(p) == 3]
    files, dirs = collections.Counter(), collections.Counter()
    for nodeid, cpu, _ in rows:
        name = nodeid.split("::")[0]
        files[name] += cpu
        dirs[name.split("/")[1] if name.count("/") > 1 else "(top)"] += cpu
    out = [f"{len(rows)} tests, {sum(files.values()):.0f} CPU s",
           "by directory: " + ", ".join(f"{d} {c:.0f}" for d, c in dirs.most_common())]
    out += [f"{c:8.1f}  {name}" for name, c in files.most_common(top)]
    out += [""] + [f"{c:8.1f} {w:8.1f}  {t}" for t, c, w in sorted(rows, key=lambda r: -r[1])[:top]]
    return "\n".join(out)


if __name__ == "__main__":
    print(summary(sys.argv[1] if len(sys.argv) > 1 else "."))
