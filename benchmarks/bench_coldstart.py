"""First-call cost of a short scipy-style workflow: cold, after ``ustc cache warm``, and warm.

The workflow (10,000 rows, a 2-D 5-point Poisson matrix, float64), each step through the
public API as a user writes it: build (``Tensor.from_package`` of a SciPy CSR), SpMV, SpMM
(8 columns), A + B, SpGEMM, transpose into CSC, CG, GMRES, write ``.mtx``. Each scenario runs
in fresh processes with its own ``USTC_CACHE_DIR`` (generated kernels, and Numba's machine code
for them, live there):

* **cold**: empty caches (every kernel generated and compiled);
* **warmed**: empty caches, then ``ustc cache warm`` for the workflow's operations (its time
  reported separately), then the workflow in a new process;
* **warm**: the workflow again in a new process over the caches the cold run filled.

SciPy runs the same steps in the same process kind. The hand-written kernels that ship with
ustc (``cache=True`` next to their source) and the Python bytecode of every module (in a
``PYTHONPYCACHEPREFIX`` of the benchmark's own, ``PYTHONDONTWRITEBYTECODE`` dropped) are
compiled once outside the measurement, as an installed package would have them: without
bytecode, ``import ustc`` compiled its ~90 modules from source every time (0.1 s of its
0.3 s). Usage: ``python benchmarks/bench_coldstart.py [--write]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from _common import machine, write_section

STEPS = ("build", "spmv", "spmm", "add", "spgemm", "transpose", "cg", "gmres", "write")
WARM_SPECS = ("spmv:CSR:float64", "spmm:CSR:float64", "add:CSR:float64", "spgemm:CSR:float64",
              "transpose:CSR,CSC:float64", "cg:CSR:float64", "gmres:CSR:float64")

WORKFLOW = r'''
import json, sys, time, tempfile, os
t0 = time.perf_counter()
import numpy as np, scipy.sparse as sp
lib = sys.argv[1]
n = 100
T = sp.diags_array([-1.0, -1.0, 4.0, -1.0, -1.0], offsets=[-n, -1, 0, 1, n], shape=(n * n, n * n), format="csr")
x, X = np.ones(n * n), np.ones((n * n, 8))
times = {}
def step(name, fn):
    t = time.perf_counter(); out = fn(); times[name] = time.perf_counter() - t; return out
if lib == "ustc":
    import ustc
    times["import"] = time.perf_counter() - t0
    A = step("build", lambda: ustc.Tensor.from_package(T))
    step("spmv", lambda: ustc.matmul(A, x))
    step("spmm", lambda: ustc.matmul(A, X))
    step("add", lambda: A + A)
    step("spgemm", lambda: ustc.matmul(A, A))
    step("transpose", lambda: A.transpose(tensor_format="CSC"))
    step("cg", lambda: ustc.solve(A, x, "cg"))
    step("gmres", lambda: ustc.solve(A, x, "gmres"))
    step("write", lambda: ustc.to_file(A, os.path.join(tempfile.mkdtemp(), "a.mtx")))
else:
    import scipy.io as sio, scipy.sparse.linalg as sla
    times["import"] = time.perf_counter() - t0
    A = step("build", lambda: sp.csr_array(T))
    step("spmv", lambda: A @ x)
    step("spmm", lambda: A @ X)
    step("add", lambda: A + A)
    step("spgemm", lambda: A @ A)
    step("transpose", lambda: A.tocsc())
    step("cg", lambda: sla.cg(A, x, rtol=1e-8))
    step("gmres", lambda: sla.gmres(A, x, rtol=1e-8, restart=30))
    step("write", lambda: sio.mmwrite(os.path.join(tempfile.mkdtemp(), "a.mtx"), A))
print(json.dumps(times))
'''


def _run(lib: str, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", WORKFLOW, lib], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _bytecode(env: dict, prefix: str) -> dict:
    """``env`` with Python's bytecode written to and read from ``prefix``."""
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = prefix
    return env


def _env(root: str, prefix: str) -> dict:
    env = _bytecode(dict(os.environ), prefix)
    env["USTC_CACHE_DIR"] = os.path.join(root, "ustc")
    env["PYTHONWARNINGS"] = "ignore"
    return env


def measure() -> dict:
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as prefix, tempfile.TemporaryDirectory() as cold_root, \
            tempfile.TemporaryDirectory() as warmed_root:
        for lib in ("ustc", "scipy"):       # shipped kernels and bytecode, outside the measurement
            subprocess.run([sys.executable, "-c", WORKFLOW, lib], env=_bytecode(dict(os.environ), prefix),
                           capture_output=True, check=True)
        cold = _run("ustc", _env(cold_root, prefix))
        warm = _run("ustc", _env(cold_root, prefix))
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "ustc.cli.main", "cache", "warm", *WARM_SPECS],
                       env=_env(warmed_root, prefix), capture_output=True, check=True)
        warm_command = time.perf_counter() - t
        warmed = _run("ustc", _env(warmed_root, prefix))
        scipy = _run("scipy", _bytecode(dict(os.environ), prefix))
    return {"cold": cold, "warmed": warmed, "warm": warm, "scipy": scipy, "warm_command": warm_command,
            "load": load}


def table(r: dict) -> str:
    rows = ["| step | ustc cold (s) | ustc after `ustc cache warm` (s) | ustc warm (s) | SciPy (s) |",
            "|---|---|---|---|---|"]
    for name in ("import",) + STEPS:
        rows.append(f"| {name} | " + " | ".join(f"{r[k][name]:.3f}" for k in ("cold", "warmed", "warm", "scipy"))
                    + " |")
    total = {k: sum(r[k][s] for s in STEPS) for k in ("cold", "warmed", "warm", "scipy")}
    rows.append("| **9 steps** | " + " | ".join(f"**{total[k]:.2f}**" for k in ("cold", "warmed", "warm", "scipy"))
                + " |")
    return "\n".join(rows) + f"\n\n`ustc cache warm` of the workflow's {len(WARM_SPECS)} specs took " \
        f"{r['warm_command']:.1f} s ({os.cpu_count()} CPUs). Python bytecode and the kernels shipped " \
        f"with ustc are compiled before the measurement, as in an installed package. Load average " \
        f"before the run: {' '.join(f'{x:.2f}' for x in r['load'])}.\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record the table in docs/benchmarks.md")
    args = parser.parse_args()
    text = table(measure())
    print(text)
    if args.write:
        write_section("First calls: cold, warmed and warm",
                      f"Measured on {machine()}.\n\n" + __doc__.split("\n\n")[1] + "\n\n" + text)


if __name__ == "__main__":
    main()
