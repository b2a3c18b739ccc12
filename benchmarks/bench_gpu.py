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
from ustc.codegen.plans import plans_of

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
    plan = plans_of(module)[0]
    views = {n: b.value for n, b in run.tensors.items()}
    launch = run._launcher(module, plan.function)
    args = run._arguments(plan, views, {})
    return lambda: launch(*args), module.SCHEDULES[plan.function]


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
    import scipy.sparse as sp

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
    x_bytes = 3 * x.nbytes
    for name, gpu in (("CuPy CSR (cuSPARSE)", csp.csr_matrix(csr)), ("CuPy COO", csp.coo_matrix(csr.tocoo())),
                      ("CuPy DIA", csp.dia_matrix(sp.dia_matrix(csr)))):
        ms = event_ms(lambda gpu=gpu: gpu @ x, repeat)
        stored = sum(int(getattr(gpu, a).nbytes) for a in ("data", "indices", "indptr", "row", "col", "offsets")
                     if hasattr(gpu, a))
        rows.append((name, ms, (stored + x_bytes) / ms / 1e6, ""))
    rows += torch_rows(csr, x, repeat)
    return rows


def torch_rows(csr, x, repeat: int) -> list[tuple]:
    """torch.mv with CSR and COO tensors on the device (none without a CUDA torch)."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    xt = torch.as_tensor(x, device="cuda")
    coo = csr.tocoo()
    tensors = {
        "torch.mv (CSR)": torch.sparse_csr_tensor(torch.as_tensor(csr.indptr, device="cuda"),
                                                  torch.as_tensor(csr.indices, device="cuda"),
                                                  torch.as_tensor(csr.data, device="cuda"), size=csr.shape),
        "torch.mv (COO)": torch.sparse_coo_tensor(torch.as_tensor(np.vstack([coo.row, coo.col]), device="cuda"),
                                                  torch.as_tensor(coo.data, device="cuda"), size=csr.shape).coalesce(),
    }
    rows = []
    for name, a in tensors.items():
        ms = event_ms(lambda a=a: torch.mv(a, xt), repeat)
        rows.append((name, ms, (csr.data.nbytes + csr.indices.nbytes * 2 + 3 * x.nbytes) / ms / 1e6, ""))
    return rows


def power_law_csr(n: int, rng):
    """An n×n CSR matrix whose row lengths follow a Pareto law (duplicates summed)."""
    import scipy.sparse as sp

    lengths = np.minimum((rng.pareto(1.2, n) * 4).astype(np.int64) + 1, n)
    rows = np.repeat(np.arange(n), lengths)
    cols = rng.integers(0, n, len(rows))
    return sp.coo_array((rng.random(len(rows)), (rows, cols)), shape=(n, n)).tocsr()


def skewed_rows(cupy, n: int, repeat: int) -> list[tuple]:
    """Power-law row lengths (a few rows hold most entries): merge path against a warp per
    row and cuSPARSE."""
    import cupyx.scipy.sparse as csp

    rng = np.random.default_rng(1)
    host = power_law_csr(n, rng)
    lengths = np.diff(host.indptr)
    x, y = cupy.asarray(rng.random(n)), cupy.zeros(n)
    t = ustc.Tensor.from_package(host)
    label = f"power-law rows (longest {lengths.max()}, mean {lengths.mean():.1f})"
    rows = [ustc_row(f"{label}: ustc CSR (chosen)", t, x, y, repeat),
            ustc_row(f"{label}: ustc CSR warp_per_row", t, x, y, repeat, "warp_per_row"),
            ustc_row(f"{label}: ustc CSR thread_per_row", t, x, y, repeat, "thread_per_row")]
    gpu = csp.csr_matrix(host)
    ms = event_ms(lambda: gpu @ x, repeat)
    rows.append((f"{label}: CuPy CSR (cuSPARSE)", ms,
                 (gpu.data.nbytes + gpu.indices.nbytes + gpu.indptr.nbytes + 3 * x.nbytes) / ms / 1e6, ""))
    return rows


def random_rows(cupy, n: int, repeat: int, zeros=(0.0, 0.5, 0.7, 0.9, 0.95, 0.99)) -> list[tuple]:
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
             "", f"{args.n}² random matrices (SpMV):", "", *table(random_rows(cupy, args.n, args.repeat)),
             "", "Skewed rows (SpMV, f64):", "", *table(skewed_rows(cupy, 1 << 18, args.repeat))]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        write_section("GPU kernels", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
