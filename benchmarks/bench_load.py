"""Solvers on a busy machine: slowdown under a CPU hog, ustc against SciPy.

The 2-D 5-point Poisson matrix of side 100 (10,000 rows), right-hand side of ones, rtol 1e-8:
ustc ``solve`` with CG, BiCGSTAB and GMRES(30) against SciPy's ``cg``, ``bicgstab`` and
``gmres(restart=30)``. Each solver runs 10 times idle and 10 times beside a CPU hog (one
background process spinning on one core, a bounded busy loop), in alternating rounds of 2 runs
per condition after one untimed run: the hog is started 0.3 s before each hog round and killed
after it, so a change in the other jobs' load between the two conditions weighs on both alike.
Reported per solver: median and worst of the 10 runs in each condition, the slowdown (hog
median / idle median), and the worst-to-median ratio under the hog. The machine is shared with
other jobs, so the load average before and after is printed with the table; ustc runs with its
defaults (``OMP_WAIT_POLICY=PASSIVE`` set by ``import ustc``, see ``ustc/_threads.py``; at
10,000 rows every kernel of these solves runs on one thread). Usage:
``python benchmarks/bench_load.py [--write] [--runs N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla

from _common import machine, write_section

import ustc

HOG = "import time\nt = time.time()\nwhile time.time() - t < 600: pass\n"


def _problem(side: int = 100):
    one = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(side, side))
    a = (sp.kron(sp.eye_array(side), one) + sp.kron(one, sp.eye_array(side))).tocsr()
    return a, np.ones(a.shape[0])


def _solvers(a, b) -> dict:
    A = ustc.Tensor.from_package(a)
    return {
        "CG": (lambda: ustc.solve(A, b, "cg"), lambda: sla.cg(a, b, rtol=1e-8)),
        "BiCGSTAB": (lambda: ustc.solve(A, b, "bicgstab"), lambda: sla.bicgstab(a, b, rtol=1e-8)),
        "GMRES(30)": (lambda: ustc.solve(A, b, "gmres", restart=30), lambda: sla.gmres(a, b, rtol=1e-8, restart=30)),
    }


ROUND = 2  # timed runs per condition and round


def _round(solvers: dict, samples: dict, state: str) -> None:
    """One round of every solver (an untimed run, then :data:`ROUND` timed ones) into ``samples``."""
    for name, fns in solvers.items():
        for k, lib in enumerate(("ustc", "SciPy")):
            fns[k]()
            for _ in range(ROUND):
                t = time.perf_counter()
                fns[k]()
                samples.setdefault((name, lib, state), []).append(time.perf_counter() - t)


def measure(runs: int) -> tuple[list[list[str]], str]:
    a, b = _problem()
    solvers = _solvers(a, b)
    before = os.getloadavg()
    samples: dict = {}
    for _ in range(max(1, -(-runs // ROUND))):
        _round(solvers, samples, "idle")
        hog = subprocess.Popen([sys.executable, "-c", HOG])
        try:
            time.sleep(0.3)
            _round(solvers, samples, "hog")
        finally:
            hog.kill()
            hog.wait()
    after = os.getloadavg()
    rows = []
    for name in solvers:
        for lib in ("ustc", "SciPy"):
            idle, busy = samples[(name, lib, "idle")], samples[(name, lib, "hog")]
            i_med, b_med = statistics.median(idle), statistics.median(busy)
            rows.append([name, lib, f"{i_med * 1e3:,.1f}", f"{max(idle) * 1e3:,.1f}", f"{b_med * 1e3:,.1f}",
                         f"{max(busy) * 1e3:,.1f}", f"{b_med / i_med:.2f}×", f"{max(busy) / b_med:.2f}×"])
    load = "load average before the run: " + " ".join(f"{x:.2f}" for x in before) + ", after: " \
        + " ".join(f"{x:.2f}" for x in after)
    return rows, load


def table(rows) -> str:
    head = ("| solver | library | idle median (ms) | idle worst (ms) | hog median (ms) | hog worst (ms) | "
            "slowdown | worst / median |\n|---|---|---|---|---|---|---|---|\n")
    return head + "\n".join("| " + " | ".join(r) + " |" for r in rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record the table in docs/benchmarks.md")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    rows, load = measure(args.runs)
    text = table(rows) + f"\n{load}; {os.cpu_count()} CPUs.\n"
    print(text)
    if args.write:
        write_section("Solvers beside a CPU hog", f"Measured on {machine()}.\n\n" + __doc__.split("\n\n")[1]
                      + "\n\n" + text)


if __name__ == "__main__":
    main()
