"""Preconditioned Krylov solves: ustc (ILU(0), IC(0), pyamg) against SciPy (spilu, pyamg).

Problems: the 3-D Poisson matrix (7-point stencil, side ``--side``, 64 by default: 262,144
rows) and a 2-D convection-diffusion matrix (``-Laplace(u) + beta du/dx``, central
differences on a ``--grid`` x ``--grid`` grid, 512 by default, cell Peclet number 0.49), float64,
``b`` = ones, ``rtol=1e-8``, ``x0 = 0``.

Measured, each competitor timed once per round, rounds alternating (``--rounds``, 3 by
default) after one untimed warm-up call each; median and [min - max] in ms:

* factor: ``ustc.ops.precond.ilu0(A)`` / ``ic0(A)`` against ``scipy.sparse.linalg.spilu`` with
  ``drop_tol=0, fill_factor=1`` (SuperLU's ILU with no dropping threshold and a budget of
  nnz(A): the closest SciPy has to ILU(0); it is not ILU(0)) and with SciPy's defaults
  (``drop_tol=1e-4, fill_factor=10``);
* solve: ``ustc.solve(A, b, method, preconditioner=M)`` with the factored object against
  SciPy's ``bicgstab`` / ``gmres(restart=30)`` with ``M = spilu(...).solve`` (as a
  LinearOperator); time to solution = factor + solve. IC(0)-CG against SciPy's ``cg`` without a
  preconditioner and with ustc's IC(0) object as ``M`` (SciPy has no incomplete Cholesky, and its
  CG does not converge with spilu's unsymmetric factors: checked once, 300 iterations);
* pyamg: ``smoothed_aggregation_solver(A).aspreconditioner()`` built once, then ustc CG and
  SciPy CG with that same preconditioner (only the solves timed);
* GMRES(30) without preconditioner, ustc against SciPy, on the convection-diffusion matrix of
  a ``--gmres-grid`` grid (128 by default).

The iteration counts and the true final relative residual ``||b - A x|| / ||b||`` (recomputed
here in float64) are printed beside the times. ustc runs with ``check=False``: where rounding
lets the recursive residual of BiCGSTAB drift from the true one, ustc reports the solve as not
converged (and would raise) while SciPy returns ``info = 0``; the table shows the true residual
of both. ``OPENBLAS_NUM_THREADS=1`` is set before NumPy
loads (SciPy's solvers run their vector updates through OpenBLAS, whose spinning threads fight
Numba's on a small machine; see docs/ops.md).

Usage: ``python benchmarks/bench_solve.py [--side 64] [--grid 512] [--rounds 3] [--write]``;
``--write`` replaces the "Preconditioned solves" section of docs/benchmarks.md.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as sla  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import machine, write_section  # noqa: E402

TITLE = "Preconditioned solves"
RTOL = 1e-8


def poisson_3d(side: int) -> sp.csr_array:
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(side, side))
    e = sp.eye_array(side)
    return (sp.kron(sp.kron(t, e), e) + sp.kron(sp.kron(e, t), e) + sp.kron(sp.kron(e, e), t)).tocsr()


def convection_diffusion(grid: int, peclet: float = 0.49) -> sp.csr_array:
    """-Laplace(u) + beta du/dx, central differences, cell Peclet number beta h / 2 = ``peclet``."""
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(grid, grid))
    c = sp.diags_array([-1.0, 1.0], offsets=[-1, 1], shape=(grid, grid)) * peclet
    e = sp.eye_array(grid)
    return (sp.kron(e, t + c) + sp.kron(t, e)).tocsr()


def load() -> str:
    return "%.2f" % os.getloadavg()[0]


def alternating(fns: dict, rounds: int) -> dict:
    """``{name: (samples_ms, last_result)}``: one untimed call each, then ``rounds`` rounds timing
    every function once, in alternating order (the order reversed every other round)."""
    names = list(fns)
    last = {}
    for name in names:
        last[name] = fns[name]()
    samples = {name: [] for name in names}
    for k in range(rounds):
        for name in (names if k % 2 == 0 else names[::-1]):
            gc.collect()
            start = time.perf_counter()
            last[name] = fns[name]()
            samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: (samples[name], last[name]) for name in names}


def fmt_ms(samples) -> str:
    med = statistics.median(samples)
    return f"{med:,.0f} [{min(samples):,.0f} - {max(samples):,.0f}]"


def relres(a, b, x) -> float:
    return float(np.linalg.norm(b - a @ x) / np.linalg.norm(b))


class Counter:
    """A SciPy callback counting iterations (``callback_type='legacy'`` for GMRES: one per
    inner iteration)."""

    def __init__(self):
        self.n = 0

    def __call__(self, *_):
        self.n += 1


def scipy_solve(method: str, a, b, m):
    counter = Counter()
    if method == "gmres":
        x, code = sla.gmres(a, b, rtol=RTOL, restart=30, maxiter=10_000, M=m, callback=counter,
                            callback_type="legacy")
    else:
        fn = {"cg": sla.cg, "bicgstab": sla.bicgstab}[method]
        x, code = fn(a, b, rtol=RTOL, maxiter=100_000, M=m, callback=counter)
    return x, counter.n, code


def main():
    import ustc
    from ustc.ops import precond

    ap = argparse.ArgumentParser()
    ap.add_argument("--side", type=int, default=64)
    ap.add_argument("--grid", type=int, default=512)
    ap.add_argument("--gmres-grid", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-default-spilu", action="store_true",
                    help="leave out spilu with SciPy's default drop_tol / fill_factor (slow to factor)")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    out: list[str] = []

    def say(text=""):
        print(text, flush=True)
        out.append(text)

    problems = {
        f"Poisson 3-D, side {args.side}": poisson_3d(args.side),
        f"convection-diffusion 2-D, {args.grid} x {args.grid}": convection_diffusion(args.grid),
    }
    say(f"Machine: {machine()}")
    say()
    say(f"float64, b = ones, x0 = 0, rtol = {RTOL:g}; OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}; "
        f"{args.rounds} alternating rounds after a warm-up call each; times in ms as median [min - max]; "
        f"1-minute load average printed per table (other jobs share the 2 cores).")
    say()
    for title, s in problems.items():
        say(f"{title}: {s.shape[0]:,} rows, {s.nnz:,} nonzeros.")
    say()

    spilus = {"spilu(drop_tol=0, fill_factor=1)": dict(drop_tol=0, fill_factor=1)}
    if not args.skip_default_spilu:
        spilus["spilu() defaults"] = {}

    # -- factorisations -------------------------------------------------------------------------
    factors = {}
    say("### Factorisation")
    say()
    say("| problem | factor | ms | entries in the factors |")
    say("|---|---|---:|---:|")
    for title, s in problems.items():
        A = ustc.Tensor.from_package(s)
        csc = s.tocsc()
        fns = {"ustc ilu0": lambda A=A: precond.ilu0(A)}
        if title.startswith("Poisson"):
            fns["ustc ic0"] = lambda A=A: precond.ic0(A)
        for name, kw in spilus.items():
            fns[name] = lambda kw=kw, csc=csc: sla.spilu(csc, **kw)
        res = alternating(fns, args.rounds)
        for name, (samples, obj) in res.items():
            entries = obj.nnz if name.startswith("ustc") else obj.L.nnz + obj.U.nnz - s.shape[0]
            say(f"| {title} | {name} | {fmt_ms(samples)} | {entries:,} |")
            factors[(title, name)] = (statistics.median(samples), obj)
    say()
    say(f"(load {load()})")
    say()

    # -- preconditioned solves ------------------------------------------------------------------
    say("### Time to solution")
    say()
    say("solve ms as median [min - max]; factor + solve: the two medians added; iterations: ustc's "
        "`SolveInfo.iterations` and SciPy's callback count, both one per CG / BiCGSTAB iteration (two "
        "preconditioner applications and products for BiCGSTAB) and one per GMRES inner step.")
    say()
    say("| problem | method | solver | iterations | solve ms | factor + solve ms | final relative residual |"
        " time / ustc's |")
    say("|---|---|---|---:|---:|---:|---:|---:|")
    for title, s in problems.items():
        A = ustc.Tensor.from_package(s)
        b = np.ones(s.shape[0])
        cases = [("bicgstab", "ilu0"), ("gmres", "ilu0")]
        if title.startswith("Poisson"):
            cases.append(("cg", "ic0"))
        for method, kind in cases:
            fns = {}
            M = factors[(title, f"ustc {kind}")][1]
            fns[f"ustc {method} + {kind}"] = lambda M=M, method=method, A=A, b=b: ustc.solve(
                A, b, method, preconditioner=M, rtol=RTOL, maxiter=100_000, return_info=True, check=False)
            if method == "cg":
                # spilu's factors are not symmetric, and SciPy's CG does not converge with them (checked
                # below); SciPy's own CG, and SciPy's CG with ustc's IC(0) object as M, instead
                fns["ustc cg (no preconditioner)"] = lambda A=A, b=b: ustc.solve(A, b, "cg", rtol=RTOL,
                                                                                 return_info=True, check=False)
                fns["SciPy cg (no preconditioner)"] = lambda s=s, b=b: scipy_solve("cg", s, b, None)
                fns["SciPy cg + ustc ic0 object"] = lambda M=M, s=s, b=b: scipy_solve("cg", s, b,
                                                                                     sla.aslinearoperator(M))
            else:
                for name in spilus:
                    lu = factors[(title, name)][1]
                    op = sla.LinearOperator(s.shape, matvec=lu.solve, dtype=np.float64)
                    fns[f"SciPy {method} + {name}"] = lambda op=op, method=method, s=s, b=b: scipy_solve(
                        method, s, b, op)
            res = alternating(fns, args.rounds)
            ours = None
            for name, (samples, result) in res.items():
                if name.startswith("ustc"):
                    x, info = result
                    iters = info.iterations
                    fac = factors[(title, f"ustc {kind}")][0] if " + " in name else 0.0
                else:
                    x, iters, code = result
                    pre = name.split(" + ", 1)[1] if " + " in name else None
                    fac = (factors[(title, pre)][0] if pre in spilus else
                           factors[(title, "ustc ic0")][0] if pre == "ustc ic0 object" else 0.0)
                total = fac + statistics.median(samples)
                ours = total if ours is None else ours
                speed = f"{total / ours:.2f}x"
                say(f"| {title} | {method} | {name} | {iters} | {fmt_ms(samples)} | {total:,.0f} | "
                    f"{relres(s, b, x):.1e} | {speed} |")
        say()
    say("(time / ustc's: the row's factor + solve over that of the first (ustc, preconditioned) row of its "
        "method: above 1 is slower than ustc; load %s)" % load())
    say()
    title = next(iter(problems))
    s = problems[title]
    name = next(iter(spilus))
    lu = factors[(title, name)][1]
    b = np.ones(s.shape[0])
    x, code = sla.cg(s, b, rtol=RTOL, maxiter=300, M=sla.LinearOperator(s.shape, matvec=lu.solve, dtype=np.float64))
    say(f"SciPy `cg` with `M = {name}.solve` on the {title} matrix: info {code} after 300 iterations, relative "
        f"residual {relres(s, b, x):.1e} (spilu's L U is not symmetric; CG needs a symmetric M).")
    say()

    # -- pyamg -----------------------------------------------------------------------------------
    try:
        import pyamg
    except ImportError:
        pyamg = None
    if pyamg is not None:
        title = next(iter(problems))
        s = problems[title]
        A = ustc.Tensor.from_package(s)
        b = np.ones(s.shape[0])
        start = time.perf_counter()
        ml = pyamg.smoothed_aggregation_solver(s)
        M = ml.aspreconditioner()
        setup = (time.perf_counter() - start) * 1e3
        say("### CG with pyamg's smoothed aggregation")
        say()
        say(f"{title}; `pyamg.smoothed_aggregation_solver(A).aspreconditioner()` built once in {setup:,.0f} ms "
            f"(pyamg {pyamg.__version__}, {len(ml.levels)} levels), the same object passed to both; solves only:")
        say()
        res = alternating({
            "ustc `solve(A, b, 'cg', preconditioner=M)`": lambda: ustc.solve(A, b, "cg", preconditioner=M,
                                                                              rtol=RTOL, return_info=True),
            "SciPy `cg(A, b, M=M)`": lambda: scipy_solve("cg", s, b, M),
        }, args.rounds)
        say("| solver | iterations | solve ms | final relative residual |")
        say("|---|---:|---:|---:|")
        for name, (samples, result) in res.items():
            if name.startswith("ustc"):
                x, info = result
                iters = info.iterations
            else:
                x, iters, _ = result
            say(f"| {name} | {iters} | {fmt_ms(samples)} | {relres(s, b, x):.1e} |")
        say()
        say(f"(load {load()})")
        say()

    # -- plain GMRES(30) -------------------------------------------------------------------------
    s = convection_diffusion(args.gmres_grid)
    A = ustc.Tensor.from_package(s)
    b = np.ones(s.shape[0])
    say("### GMRES(30) without a preconditioner")
    say()
    say(f"convection-diffusion 2-D, {args.gmres_grid} x {args.gmres_grid} ({s.shape[0]:,} rows):")
    say()
    res = alternating({
        "ustc `solve(A, b, 'gmres', restart=30)`": lambda: ustc.solve(A, b, "gmres", restart=30, rtol=RTOL,
                                                                      maxiter=100_000, return_info=True),
        "SciPy `gmres(A, b, restart=30)`": lambda: scipy_solve("gmres", s, b, None),
    }, args.rounds)
    say("| solver | inner iterations | ms | final relative residual |")
    say("|---|---:|---:|---:|")
    for name, (samples, result) in res.items():
        if name.startswith("ustc"):
            x, info = result
            iters = info.iterations
        else:
            x, iters, _ = result
        say(f"| {name} | {iters} | {fmt_ms(samples)} | {relres(s, b, x):.1e} |")
    say()
    say(f"(load {load()})")

    if args.write:
        path = write_section(TITLE, "\n".join(out))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
