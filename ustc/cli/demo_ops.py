"""Demo sections for planned operations: Matmul in three formats (three routes) and a CG solve."""

from __future__ import annotations

import numpy as np


def _laplacian(n: int) -> np.ndarray:
    """The 1-D Laplacian (2 on the diagonal, -1 beside it) as a dense n x n array."""
    return 2 * np.eye(n) - np.eye(n, k=1) - np.eye(n, k=-1)


def planned_spmv() -> list[str]:
    """One SpMV planned in CSR, DIAI and DELTA(4, packed): the route each took, executed twice."""
    import ustc

    dense = _laplacian(8)
    x = np.arange(8.0) ** 2
    blocks = []
    for fmt in ("CSR", "DIAI", "DELTA(4, packed)"):
        A = ustc.Tensor.from_dense(dense, fmt)
        with ustc.Matmul(A, x) as mm:
            mm.plan()
            first = mm.execute().copy()
            x[:] *= 2                           # change the operand in place: execute only
            second = mm.execute().copy()
            x[:] /= 2
            info = mm.plan_info.split(" [why: ")
            blocks.append(f"{fmt}:\n  plan_info : {info[0]}\n  why       : {info[1].rstrip(']')}\n"
                          f"  execute() : {first.tolist()}\n  after x *= 2, execute() again: {second.tolist()}")
    return blocks + [f"NumPy A @ x: {(dense @ x).tolist()}"]


def cg_solve() -> list[str]:
    """CG on a 2-D Poisson matrix in DIAI, one planned Matmul for the whole solve."""
    import ustc

    n = 12
    t = _laplacian(n)
    dense = np.kron(t, np.eye(n)) + np.kron(np.eye(n), t)
    A = ustc.Tensor.from_dense(dense, "DIAI")
    b = np.ones(n * n)
    x, info = ustc.solve(A, b, return_info=True)
    residual = np.linalg.norm(b - dense @ x) / np.linalg.norm(b)
    return [f"A: 2-D Poisson, {n * n} x {n * n}, {A.nse} stored values in DIAI ({len(A.crd(0))} diagonals)\n"
            f"ustc.solve(A, b) chose method '{info.method}' (A is symmetric)\n"
            f"converged: {info.converged} in {info.iterations} iterations, "
            f"relative residual {info.relative_residual:.1e} (checked with NumPy: {residual:.1e})\n"
            f"the product it planned once: {info.plan_info.split(' [')[0]}"]
