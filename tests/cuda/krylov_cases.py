"""Device-resident Krylov solves (:mod:`ustc.ops.cuda_vectors`), run as a script in a process of its own.

    python tests/cuda/krylov_cases.py sim    # NUMBA_ENABLE_CUDASIM=1: kernels and solves vs the host / SciPy
    python tests/cuda/krylov_cases.py ptx    # no simulator: PTX for sm_90 + nvJitLink cubin per kernel
    python tests/cuda/krylov_cases.py gpu    # a real GPU: the sim cases with CuPy vectors and 'cuda' tensors

Prints one JSON object per case (``{"case", "ok", ...}``), like ``trisolve_cases.py``.
In the simulator NumPy arrays play device arrays: ``ustc.solve(..., target="cuda")`` on
host operands runs with the device backend swapped in for the host one (``_vectors``),
so every kernel, the Jacobi diagonal, x0, SolveError and SolveInfo go through the path
a tensor on 'cuda' takes; only CuPy allocation and the zero-copy views need a GPU.
"""

from __future__ import annotations

import json
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ustc
import _cases
from _cases import ptx_records, report
from ustc import formats
from ustc.ops import cuda_vectors, plan_cache, vectors
from ustc.ops import solve as solve_module

MODE = sys.argv[1] if __name__ == "__main__" and len(sys.argv) > 1 else "sim"
DTYPES = (np.float32, np.complex64, np.complex128)    # float64: every solve case below
TOL = {np.float32: 2e-4, np.complex64: 2e-4, np.float64: 1e-11, np.complex128: 1e-11}


class Counting(cuda_vectors.DeviceVectors):
    """The device backend, counting its kernel launches (proof that it ran the solve)."""

    launches = 0

    def _launch(self, kernel, n, *args):
        Counting.launches += 1
        super()._launch(kernel, n, *args)


def xp():
    return Counting().xp


def host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def stack(arrays):
    return np.stack([host(a) for a in arrays])


def rand(n, dtype, seed):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(n)
    if np.dtype(dtype).kind == "c":
        v = v + 1j * rng.standard_normal(n)
    return v.astype(dtype)


def close(a, b, dtype, scale=1.0) -> bool:
    t = TOL[np.dtype(dtype).type] * max(scale, 1.0)
    return bool(np.allclose(host(a), host(b), rtol=t, atol=t))


# -- every operation of the backend against the host backend ------------------------------

def ops_case(dtype, n=37):
    """Each DeviceVectors operation against HostVectors on the same inputs."""
    def run():
        dev, cpu, x = Counting(), vectors.HOST, xp()
        v = [rand(n, dtype, s) for s in range(6)]
        d = [x.array(a) for a in v]
        bad = []

        def check(name, got, want, scale=1.0):
            if not close(got, want, dtype, scale):
                bad.append(name)

        check("dot", dev.dot(d[0], d[1]), cpu.dot(v[0], v[1]), n)
        check("norm2", dev.norm2(d[0]), cpu.norm2(v[0]), n)
        alpha, beta = np.dtype(dtype).type(0.7 - (0.2j if np.dtype(dtype).kind == "c" else 0)), 1.3
        for jacobi in (False, True):
            h = [a.copy() for a in v]
            g = [x.array(a) for a in h]
            dinv = (h[5] if jacobi else np.ones(1, dtype))
            got = dev.cg_step(*g[:5], x.array(dinv), alpha, jacobi)
            want = cpu.cg_step(*h[:5], dinv, alpha, jacobi)
            check(f"cg_step(jacobi={jacobi}) scalars", np.array(got), np.array(want), n)
            check(f"cg_step(jacobi={jacobi}) vectors", stack(g[:3]), stack(h[:3]))
        for name, args in [("xpby", (0, beta, 1)), ("scale_into", (2, 0, 1)), ("bicg_p", (0, 1, beta, alpha, 2)),
                           ("bicg_x", (0, alpha, 1, beta, 2)), ("axpy", (0, alpha, 1)), ("copy", (0, 1))]:
            h = [a.copy() for a in v]
            g = [x.array(a) for a in h]
            pick = [(g[a], h[a]) if isinstance(a, int) else (a, a) for a in args]
            getattr(dev, name)(*[p[0] for p in pick])
            getattr(cpu, name)(*[p[1] for p in pick])
            check(name, stack(g), stack(h))
        for name in ("residual", "axpy_norm"):
            h = [a.copy() for a in v]
            g = [x.array(a) for a in h]
            extra = () if name == "residual" else (alpha,)
            got = getattr(dev, name)(g[0], g[1], *extra, g[2])
            want = getattr(cpu, name)(h[0], h[1], *extra, h[2])
            check(name, np.array([got]), np.array([want]), n)
            check(name + " vector", g[0], h[0])
        bad += gmres_ops(dev, cpu, x, v, dtype)
        bad += empty_ops(dev, x, dtype)
        return {"ok": not bad, "failed": bad, "launches": Counting.launches}
    return f"ops_{np.dtype(dtype).name}", run


def gmres_ops(dev, cpu, x, v, dtype):
    """set_row, orthogonalize (classical Gram-Schmidt twice vs modified twice), combine."""
    bad, n = [], v[0].size
    Vd, Vh = dev.basis(5, n, dtype), cpu.basis(5, n, dtype)
    norm = float(np.linalg.norm(v[0]))
    dev.set_row(Vd, 0, x.array(v[0]), norm)
    cpu.set_row(Vh, 0, v[0], norm)
    for k1 in (1, 2, 3, 4):
        wd, wh = x.array(v[k1]), v[k1].copy()
        hd, nd = dev.orthogonalize(Vd, k1, wd)
        hh, nh = cpu.orthogonalize(Vh, k1, wh)
        if not (close(hd, hh, dtype, n) and close(np.array([nd]), np.array([nh]), dtype, n) and close(wd, wh, dtype)):
            bad.append(f"orthogonalize(k1={k1})")
        if hd.shape != (k1,) or hd.dtype != np.dtype(dtype):
            bad.append(f"orthogonalize(k1={k1}) shape/dtype {hd.shape} {hd.dtype}")
        dev.set_row(Vd, k1, wd, nd)
        cpu.set_row(Vh, k1, wh, nh)
    if not close(Vd.data, Vh.data, dtype):
        bad.append("set_row")
    gram = host(Vd.data) @ host(Vd.data).conj().T
    if not np.allclose(gram, np.eye(5), atol=TOL[np.dtype(dtype).type] * 10):
        bad.append("orthonormal basis")
    for y in (np.array([], dtype), rand(3, dtype, 9)):
        od, oh = x.array(v[5]), v[5].copy()
        dev.combine(od, Vd, y)
        cpu.combine(oh, Vh, y)
        if not close(od, oh, dtype):
            bad.append(f"combine(k={y.size})")
    return bad


def empty_ops(dev, x, dtype):
    """Zero-length vectors: reductions give 0, updates do nothing."""
    e = x.zeros(0, dtype)
    ok = dev.dot(e, e) == 0 and dev.residual(x.zeros(0, dtype), e, e) == 0.0
    return [] if ok else ["zero-length"]


def diagonal_case():
    """The Jacobi diagonal summed on the device from CSR rows (int32 and int64 indices, COO input)."""
    def run():
        m = (sp.random(30, 30, density=0.2, random_state=4) + sp.diags(np.arange(1.0, 31))).tocsr()
        m[3, 3] = 0
        m.eliminate_zeros()                     # row 3 has no stored diagonal
        want = m.diagonal()
        got = []
        for t in (ustc.Tensor.from_package(m), ustc.Tensor.from_package(m.astype(np.float32)).convert("COO"),
                  ustc.Tensor.from_dense(m.toarray(), "CSR")):     # int32, COO (via CSR), int64 indices
            for dtype in (np.float64, np.complex128):
                got.append((dtype, Counting().diagonal(device_tensor(t), 30, dtype)))
        ok = all(np.allclose(g, want) and g.dtype == np.dtype(d) for d, g in got)
        return {"ok": bool(ok), "got": None if ok else [g.real.tolist()[:5] for _, g in got]}
    return "jacobi_diagonal_on_the_device", run


def shared_lock_case():
    """The simulator's shared-array race (``_cases.lock_simulator_shared_arrays``), widened.

    Each allocation sleeps 1 ms, which without the lock hands most blocks' threads
    different arrays (21 of 160 block folds wrong in a trial); with it every fold is right."""
    def run():
        slow = lambda shape, dtype: (time.sleep(1e-3), np.empty(shape, dtype))[1]   # noqa: E731
        _cases.ALLOCATE, fast = slow, _cases.ALLOCATE
        try:
            dev, x, want = Counting(), xp(), []
            got = []
            for seed in range(4):
                a, b = rand(64, np.float64, seed), rand(64, np.float64, seed + 10)
                got.append(dev.dot(x.array(a), x.array(b)))
                want.append(float(a @ b))
        finally:
            _cases.ALLOCATE = fast
        return {"ok": bool(np.allclose(got, want, rtol=1e-12, atol=1e-12)), "got": None}
    return "simulator_shared_arrays_locked", run


# -- whole solves ------------------------------------------------------------------------

def device_tensor(t):
    return t.to("cuda") if MODE == "gpu" else t


def device_vector(b):
    return xp().array(b) if MODE == "gpu" and b is not None else b


def spd(n, dtype=np.float64, seed=0):
    """Hermitian, diagonally dominant, so positive definite (short rows: the simulator is slow)."""
    m = sp.random(n, n, density=0.05, random_state=seed)
    m = m + 1j * sp.random(n, n, density=0.03, random_state=seed + 1) if np.dtype(dtype).kind == "c" else m
    m = m + m.T.conj()
    return (m + sp.diags(1 + np.asarray(abs(m).sum(axis=1)).ravel())).astype(dtype).tocsr()


def nonsymmetric(n, dtype=np.float64, seed=1):
    """Diagonally dominant by rows, not symmetric."""
    m = sp.random(n, n, density=0.1, random_state=seed)
    m = m + 1j * sp.random(n, n, density=0.03, random_state=seed + 1) if np.dtype(dtype).kind == "c" else m
    return (m + sp.diags(np.linspace(1, 3, n) + np.asarray(abs(m).sum(axis=1)).ravel())).astype(dtype).tocsr()


def solve(s, b, fmt="CSR", **kw):
    """``ustc.solve`` through the device backend; ``(x on the host, info, plans, launches)``."""
    plans = []
    original = ustc.Matmul.plan

    def counting(self):
        plans.append(self)
        return original(self)

    ustc.Matmul.plan = counting
    plan_cache.clear()                      # each case plans its own product (not an earlier case's)
    before = Counting.launches
    try:
        A = device_tensor(ustc.Tensor.from_package(s).convert(fmt))
        if MODE != "gpu":
            kw["target"] = "cuda"
        x, info = ustc.solve(A, device_vector(b), return_info=True, **dict(kw, x0=device_vector(kw.get("x0"))))
    finally:
        ustc.Matmul.plan = original
    if MODE == "gpu" and type(x).__module__.split(".")[0] != "cupy":
        raise AssertionError(f"x came back as {type(x)}, not a CuPy array")
    return host(x), info, len(plans), Counting.launches - before


def method_case(method, pre, dtype=np.float64, n=16, fmt="CSR", restart=30):
    """A solve of n rows: n = 16 is two grid strides of the simulator's 8 threads (SIM_THREADS x SIM_BLOCKS)."""
    def run():
        s = spd(n, dtype) if method in ("cg", None) else nonsymmetric(n, dtype)
        b = rand(n, dtype, 5)
        rtol = 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-9
        x, info, plans, launches = solve(s, b, fmt, method=method, preconditioner=pre, rtol=rtol, restart=restart)
        exact = spla.spsolve(s.tocsc().astype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64), b)
        res = np.linalg.norm(s @ x - b) / np.linalg.norm(b)
        ok = (info.converged and info.iterations > 0 and plans == 1 and launches > info.iterations
              and x.dtype == np.dtype(dtype) and res <= rtol * 1.01 and info.method == (method or "cg")
              and np.allclose(x, exact, rtol=100 * rtol, atol=100 * rtol)
              and abs(info.relative_residual - res) <= max(rtol, 1e-12) * 10)
        return {"ok": bool(ok), "iterations": info.iterations, "plans": plans, "launches": launches,
                "relative_residual": float(res), "plan_info": info.plan_info}
    name = f"{method}_{pre}_{np.dtype(dtype).name}_{fmt}" + (f"_restart{restart}" if restart != 30 else "")
    return name, run


def semantics_cases():
    """x0, SolveError on non-convergence, check=False, a zero diagonal with Jacobi."""
    def x0():
        s, b = spd(20), rand(20, np.float64, 3)
        exact = spla.spsolve(s.tocsc(), b)
        x, info, plans, _ = solve(s, b, method="cg", x0=exact)
        return {"ok": bool(info.iterations == 0 and info.converged and np.allclose(x, exact) and plans == 1)}

    def not_converged():
        s, b = nonsymmetric(30), rand(30, np.float64, 2)
        try:
            solve(s, b, method="gmres", maxiter=2)
            return {"ok": False, "error": "no SolveError"}
        except ustc.SolveError as exc:
            message = str(exc)
        x, info, _, _ = solve(s, b, method="gmres", maxiter=2, check=False)
        true = np.linalg.norm(b - s @ x)
        ok = ("gmres did not converge in 2 iterations" in message and not info.converged
              and info.iterations == 2 and abs(info.residual_norm - true) <= 1e-8 * true)
        return {"ok": bool(ok), "error": message}

    def zero_diagonal():
        s = sp.csr_array(np.ones((4, 4)) - np.eye(4))
        try:
            solve(s, np.ones(4), method="bicgstab", preconditioner="jacobi")
        except ustc.SolveError as exc:
            return {"ok": "entry (0, 0) is zero" in str(exc), "error": str(exc)}
        return {"ok": False, "error": "no SolveError"}

    return [("x0_exact_no_iterations", x0), ("gmres_not_converged_raises", not_converged),
            ("jacobi_zero_diagonal_raises", zero_diagonal)]


def format_cases():
    """BiCGSTAB with Jacobi through every named 2-D format of the registry (but n:m ones)."""
    out = []
    for nf in formats.NAMED:
        fmt = nf.format()
        if fmt.ndim != 2 or any(lv.type.keyword == "structured" for lv in fmt.levels):
            continue
        out.append(method_case("bicgstab", "jacobi", fmt=fmt))
        out[-1] = (f"format_{nf.name}_bicgstab_jacobi", out[-1][1])
    return out


def cases():
    out = [ops_case(dtype) for dtype in DTYPES] + [diagonal_case()]
    if MODE == "sim":
        out.append(shared_lock_case())
    for method in ("cg", "bicgstab", "gmres", None):
        for pre in (None, "jacobi"):
            out.append(method_case(method, pre))
    out += [method_case("cg", "jacobi", np.float32), method_case("gmres", None, np.float32),
            method_case("bicgstab", None, np.complex128), method_case("gmres", "jacobi", np.complex128),
            method_case("cg", None, np.complex128), method_case("gmres", None, restart=4)]
    return out + semantics_cases() + format_cases()


def run_ptx():
    return ptx_records(cuda_vectors.compile_kernels())


def main(mode: str) -> int:
    warnings.simplefilter("ignore")
    sys.setswitchinterval(1e-5)   # the simulator's threads wait at every barrier: switch often
    if mode == "ptx":
        for record in run_ptx():
            print(json.dumps(record), flush=True)
        return 0
    solve_module._vectors = lambda a: Counting()   # the device backend, counting (sim: for host operands)
    return report(cases())


if __name__ == "__main__":
    sys.exit(main(MODE))
