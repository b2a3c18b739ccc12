"""Run under ``mpiexec -n 2``: the MPI transport's SpMV and solves against single-process
ustc and SciPy; rank 0 writes the results as JSON to ``sys.argv[1]``."""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp

import ustc
from ustc.distributed import Labels
from ustc.distributed.mpiblocks import MPIMatrix


def _line(n, lo, mid, hi):
    return sp.diags([lo, mid, hi], [-1, 0, 1], shape=(n, n))


def poisson2d(n):
    t = _line(n, -1.0, 2.0, -1.0)
    return (sp.kron(t, sp.eye(n)) + sp.kron(sp.eye(n), t)).tocsr()


def convection(n):
    return (sp.kron(_line(n, -1.3, 2.6, -0.7), sp.eye(n)) + sp.kron(sp.eye(n), _line(n, -1.0, 2.0, -1.0))).tocsr()


def gather(comm, rows, part):
    """The whole vector from every rank's ``part`` (its global ``rows``)."""
    out = np.empty(sum(len(r) for r in comm.allgather(rows)), dtype=part.dtype)
    for r, p in comm.allgather((rows, part)):
        out[r] = p
    return out


def main():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    out = {"size": comm.Get_size(), "cases": []}
    rng = np.random.default_rng(0)
    cases = [(poisson2d(12), "cg", None, None, "CSR"), (poisson2d(12), "cg", "jacobi", [0, 50, 144], "DIAI"),
             (convection(10), "bicgstab", "jacobi", None, "COO"), (convection(10), "gmres", None, [0, 0, 100], "CSR"),
             (convection(10), "bicgstab", None, Labels((np.arange(100) // 7) % 2), "CSR")]     # interleaved parts
    for a, method, pre, partition, fmt in cases:
        n = a.shape[0]
        b = rng.standard_normal(n)
        x1, i1 = ustc.solve(ustc.Tensor.from_package(a), b, method, rtol=1e-8, preconditioner=pre, restart=7,
                            return_info=True)
        def load(*rows, a=a):                   # (start, stop), or a labelled part's global rows
            return a[rows[0]:rows[1]] if len(rows) == 2 else a[rows[0]]

        with MPIMatrix.from_loader(load, a.shape, partition, block_format=fmt) as m:
            mine = m.members
            assert np.array_equal(mine, m.col_members)
            y = gather(comm, mine, m.matvec(b[mine]))
            x, info = m.solve(b[mine], method, rtol=1e-8, preconditioner=pre, restart=7)
            x = gather(comm, mine, x)
            out["cases"].append({"method": method, "spmv_error": float(np.abs(y - a @ b).max()),
                                 "iterations": info["iterations"], "single_iterations": i1.iterations,
                                 "x_rel": float(np.linalg.norm(x - x1) / np.linalg.norm(x1)),
                                 "converged": bool(info["converged"]), "messages": info["messages"],
                                 "halo": int(m.halo_counts.sum())})
    if comm.Get_rank() == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
