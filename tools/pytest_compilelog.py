"""pytest plugin: which Numba kernels each test compiles, with which signature, at what CPU cost.

    PYTHONPATH=tools python -m pytest -n 0 -p pytest_compilelog ...     (USTC_COMPILELOG_DIR=D)
    python tools/pytest_compilelog.py [DIR]        # kernels by compile CPU, variants, tests

The suite is compile-bound (each case that meets a new kernel or a new signature of one pays
~1 s); ``pytest_cpulog`` says which tests cost, this says which kernels and signatures. Each
process appends ``nodeid<TAB>kernel<TAB>signature<TAB>cpu`` lines to
``$USTC_COMPILELOG_DIR/compiles_<worker>.tsv`` (default: the current directory), one line per
outermost compile (Numba's ``numba:compile`` event; a callee compiled for its caller counts in
the caller's time). Run with empty ``USTC_CACHE_DIR`` and ``NUMBA_CACHE_DIR`` to see every
compile, and with ``-n 0`` for the first test that needs a kernel to be the one that pays.
"""

from __future__ import annotations

import collections
import glob
import os
import sys
import time

import pytest
from numba.core import event as numba_event

_state: dict = {"test": None, "rows": []}


class _Compiles(numba_event.Listener):
    """A ``numba.core.event`` listener timing outermost compiles in process CPU time."""

    def __init__(self):
        self.depth, self.started, self.what = 0, 0.0, ("?", "?")

    def on_start(self, event) -> None:
        if self.depth == 0:
            self.started = time.process_time()
            fn = getattr(event.data.get("dispatcher"), "py_func", None)
            name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"
            self.what = (name, " ".join(str(event.data.get("args")).split()))
        self.depth += 1

    def on_end(self, event) -> None:
        self.depth -= 1
        if self.depth == 0:
            _state["rows"].append((_state["test"], *self.what, time.process_time() - self.started))


def pytest_configure(config) -> None:
    numba_event.register("numba:compile", _Compiles())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _state["test"] = item.nodeid
    yield
    if not _state["rows"]:
        return
    folder = os.environ.get("USTC_COMPILELOG_DIR", ".")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(folder, f"compiles_{worker}.tsv"), "a") as log:
        for test, kernel, signature, cpu in _state["rows"]:
            log.write(f"{test}\t{kernel}\t{signature}\t{cpu:.3f}\n")
    _state["rows"].clear()


def summary(folder: str, top: int = 40) -> str:
    """Kernels by compile CPU (variants, tests that compiled one), then the costliest compiles."""
    rows = []
    for path in glob.glob(os.path.join(folder, "compiles_*.tsv")):
        with open(path) as f:
            rows += [(p[0], p[1], p[2], float(p[3])) for p in (line.rstrip("\n").split("\t") for line in f)
                     if len(p) == 4]
    cpu, variants, tests = collections.Counter(), collections.defaultdict(set), collections.defaultdict(set)
    for test, kernel, signature, seconds in rows:
        cpu[kernel] += seconds
        variants[kernel].add(signature)
        tests[kernel].add(test.split("[")[0])
    out = [f"{len(rows)} compiles, {sum(cpu.values()):.0f} CPU s, {len(cpu)} kernels",
           "   CPU s  variants  tests  kernel"]
    out += [f"{c:8.1f}  {len(variants[k]):8d}  {len(tests[k]):5d}  {k}" for k, c in cpu.most_common(top)]
    out += [""] + [f"{s:8.2f}  {k}  {t}" for t, k, _, s in sorted(rows, key=lambda r: -r[3])[:top]]
    return "\n".join(out)


if __name__ == "__main__":
    print(summary(sys.argv[1] if len(sys.argv) > 1 else "."))
