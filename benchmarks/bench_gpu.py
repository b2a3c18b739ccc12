"""GPU kernels: generated CUDA SpMV against CuPy (cuSPARSE), torch.mv and dense GEMV.

    python benchmarks/bench_gpu.py [--side N] [--n N] [--repeat N] [--write]

Needs an NVIDIA GPU, CuPy (``pip install -e ".[cuda,gpu]"``) and optionally torch with
CUDA; without a device it prints why and exits 0 (nothing is written).

* 7-point stencil, side 114 (1.48M rows, f64): ustc COO / CSR / DIAI vs CuPy CSR
  (cuSPARSE) and torch.mv on a CUDA CSR tensor.
* 8192² random matrices, f16 and f32, 0..99% zeros: ustc ``DELTA(4, packed)`` and CSR vs
  dense GEMV (cuBLAS through CuPy) and CuPy CSR (cuSPARSE).

Times are CUDA events around each call, median of ``--repeat`` after two warm-ups;
achieved bandwidth = bytes the kernel must read and write (index buffers, values, x
once, y) / time, next to a device-to-device copy of 256 MiB (read + write). With
``--write`` the table replaces the ``## GPU kernels`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings

import numpy as np

from _common import machine, write_section
from bench_convert import stencil_csr

import ustc
from ustc import cache
from ustc.codegen import notation as nt
from ustc.ops import runtime

SPMV = nt.Program((nt.Statement(nt.Access("y", ("i",)),
                                nt.Mul(nt.Access("A", ("i", "j")), nt.Access("x", ("j",))), True),))
F = ustc.formats


def device_or_reason():
    try:
        import cupy
        from numba import cuda
    except ImportError as exc:
        return None, f"needs CuPy and numba-cuda ({exc})"
    if not cuda.is_available():
        return None, "no CUDA device"
    return cupy, None


def event_ms(fn, repeat: int) -> float:
    """Median milliseconds of ``fn()`` between CUDA events on the current stream."""
    import cupy

    for _ in range(2):
        fn()
    times = []
    for _ in range(repeat):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def copy_gbs(cupy, repeat: int) -> float:
    a = cupy.ones(2**25, cupy.float64)
    b = cupy.empty_like(a)
    ms = event_ms(lambda: b.__setitem__(Ellipsis, a), repeat)
    return 2 * a.nbytes / ms / 1e6


def launcher(t_device, x, y, schedule=None):
    """The generated launch wrapper bound to its device arguments: a pure kernel call."""
    run = runtime.prepare(SPMV, {"y": y, "A": t_device, "x": x}, "cuda", schedule)
    module, _ = cache.load(run.fields, run.generate)
    plan = module.PLAN[0]
    views = {n: b.value for n, b in run.tensors.items()}
    launch = run._launcher(module, plan)
    args = run._arguments(plan, views, {})
    return lambda: launch(*args), module.SCHEDULES[plan["function"]]


def spmv_bytes(t, x, y) -> int:
    index = sum(int(b.nbytes) for b in t._buffers.values())
    return index + int(t.values.nbytes) + int(x.nbytes) + 2 * int(y.nbytes)


def ustc_row(name, host_tensor, x, y, repeat, schedule=None):
    t = host_tensor.to("cuda")
    fn, chosen = launcher(t, x, y, schedule)
    ms = event_ms(fn, repeat)
    return (name, ms, spmv_bytes(t, x, y) / ms / 1e6, chosen)


def stencil_rows(cupy, side: int, repeat: int) -> list[tuple]:
    import cupyx.scipy.sparse as csp

    csr = stencil_csr(side)
    n = csr.shape[0]
    x = cupy.random.random(n)
    y = cupy.zeros(n)
    host = ustc.Tensor.from_package(csr)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, fmt in (("ustc CSR", F.CSR), ("ustc COO", F.COO(2)), ("ustc DIAI", F.DIAI)):
            rows.append(ustc_row(name, host.convert(tensor_format=fmt), x, y, repeat))
    gpu = csp.csr_matrix(csr)
    ms = event_ms(lambda: gpu @ x, repeat)
    rows.append(("CuPy CSR (cuSPARSE)", ms, (gpu.data.nbytes + gpu.indices.nbytes + gpu.indptr.nbytes
                                             + 3 * x.nbytes) / ms / 1e6, ""))
    try:
        import torch

        if torch.cuda.is_available():
            a = torch.sparse_csr_tensor(torch.as_tensor(csr.indptr, device="cuda"),
                                        torch.as_tensor(csr.indices, device="cuda"),
                                        torch.as_tensor(csr.data, device="cuda"), size=csr.shape)
            xt = torch.as_tensor(x, device="cuda")
            ms = event_ms(lambda: torch.mv(a, xt), repeat)
            rows.append(("torch.mv (CSR)", ms, (csr.data.nbytes + csr.indices.nbytes * 2 + 3 * x.nbytes) / ms / 1e6,
                         ""))
    except ImportError:
        pass
    return rows


def random_rows(cupy, n: int, repeat: int, zeros=(0.0, 0.5, 0.9, 0.99)) -> list[tuple]:
    import cupyx.scipy.sparse as csp
    import scipy.sparse as sp

    rows = []
    rng = np.random.default_rng(0)
    for dtype in (np.float16, np.float32):
        for z in zeros:
            density = 1.0 - z
            host = sp.random(n, n, density=density, format="csr", dtype=np.float32, random_state=rng)
            host = host.astype(dtype)
            x, y = cupy.asarray(rng.random(n).astype(dtype)), cupy.zeros(n, dtype)
            label = f"{np.dtype(dtype).name} {int(z * 100)}% zeros"
            dense = cupy.asarray(host.toarray())
            ms = event_ms(lambda: dense @ x, repeat)
            rows.append((f"{label}: dense GEMV", ms, (dense.nbytes + 2 * x.nbytes) / ms / 1e6, ""))
            if dtype == np.float32:
                gpu = csp.csr_matrix(host)
                ms = event_ms(lambda: gpu @ x, repeat)
                rows.append((f"{label}: CuPy CSR", ms, (gpu.data.nbytes + gpu.indices.nbytes + gpu.indptr.nbytes
                                                        + 3 * x.nbytes) / ms / 1e6, ""))
            t = ustc.Tensor.from_package(host)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rows.append(ustc_row(f"{label}: ustc CSR", t, x, y, repeat))
                rows.append(ustc_row(f"{label}: ustc DELTA(4, packed)",
                                     t.convert(tensor_format=F.DELTA(4, True)), x, y, repeat))
    return rows


def table(rows) -> list[str]:
    out = ["| kernel | median ms | achieved GB/s | schedule |", "|---|---:|---:|---|"]
    out += [f"| {name} | {ms:.3f} | {gbs:.0f} | {sched} |" for name, ms, gbs, sched in rows]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--side", type=int, default=114)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--write", action="store_true", help="replace '## GPU kernels' in docs/benchmarks.md")
    args = ap.parse_args(argv)
    cupy, reason = device_or_reason()
    if cupy is None:
        print(f"bench_gpu: skipped: {reason}")
        return 0
    props = cupy.cuda.runtime.getDeviceProperties(0)
    copy = copy_gbs(cupy, args.repeat)
    lines = [f"Device: {props['name'].decode()}; host: {machine()}.",
             f"Device-to-device copy: {copy:.0f} GB/s (read + write). CUDA events, median of {args.repeat}.", "",
             f"7-point stencil, side {args.side} (f64 SpMV):", "", *table(stencil_rows(cupy, args.side, args.repeat)),
             "", f"{args.n}² random matrices (SpMV):", "", *table(random_rows(cupy, args.n, args.repeat))]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        write_section("GPU kernels", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
