"""GPU kernels: generated CUDA SpMV against CuPy (cuSPARSE), torch.mv and dense GEMV.

    python benchmarks/bench_gpu.py [--side N] [--n N] [--repeat N] [--write]

Needs an NVIDIA GPU, CuPy (``pip install -e ".[cuda,gpu]"``) and optionally torch with
CUDA; without a device it prints why and exits 0 (nothing is written).

* 7-point stencil, side 114 (1.48M rows, f64): ustc COO / CSR / DIAI vs CuPy CSR
  (cuSPARSE) and torch.mv on a CUDA CSR tensor.
* 8192² random matrices, f16 and f32, 0 / 95 / 99% zeros: ustc ``DELTA(4, packed)`` and CSR vs
  dense GEMV (cuBLAS through CuPy) and CuPy CSR (cuSPARSE).
* Issue 19's targets, each with its baseline in the same run and a verdict: the stencil
  (CSR f64 against 55 µs and cuSPARSE, DIAI f64 / f32 against 38 / 19 µs), fp16 delta
  with b chosen per matrix (``formats.best_delta``) against cuBLAS GEMV and cuSPARSE CSR
  at 50 / 70 / 90% zeros, SpMM at batch 16 (CSR, 50 / 80% zeros) and 2:4 at batch 1 and
  16 (the registered CUDA n:m kernels) against dense cuBLAS, ustc's own dense GEMV
  against cuBLAS (:func:`verdicts`).

Times are CUDA events around each call, median of ``--repeat`` after two warm-ups, with
the L2 cache flushed (a 256 MiB write, outside the events) before each timed call;
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


#: bytes written between timed calls to evict the L2 cache (H100: 50 MB)
L2_FLUSH_BYTES = 256 << 20
_FLUSH: list = []     # the flush of the current device, set by main


def event_ms(fn, repeat: int) -> float:
    """Median milliseconds of ``fn()`` between CUDA events on the current stream, the L2
    flushed before each (queued ahead of the start event, so the host's launch overhead
    overlaps the flush instead of the timed call)."""
    import cupy

    for _ in range(2):
        fn()
    times = []
    for _ in range(repeat):
        for flush in _FLUSH:
            flush()
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


def launcher(t_device, x, y, schedule=None, program=SPMV, names=("A", "x", "y")):
    """The generated launch wrapper bound to its device arguments: a pure kernel call."""
    run = runtime.prepare(program, dict(zip(names, (t_device, x, y))), "cuda", schedule)
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
        x32, y32 = x.astype(cupy.float32), y.astype(cupy.float32)
        dia32 = ustc.Tensor.from_package(csr.astype(np.float32)).convert(tensor_format=F.DIAI)
        rows.append(ustc_row("ustc DIAI (f32)", dia32, x32, y32, repeat))
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


def random_rows(cupy, n: int, repeat: int, zeros=(0.0, 0.95, 0.99)) -> list[tuple]:   # 50-90%: targets
    import cupyx.scipy.sparse as csp
    import scipy.sparse as sp

    rows = []
    rng = np.random.default_rng(0)
    for dtype in (np.float16, np.float32):
        for z in zeros:
            density = 1.0 - z
            host = sp.random(n, n, density=density, format="csr", dtype=np.float32, random_state=rng)
            x, y = cupy.asarray(rng.random(n).astype(dtype)), cupy.zeros(n, dtype)
            label = f"{np.dtype(dtype).name} {int(z * 100)}% zeros"
            dense = cupy.asarray(host.toarray().astype(dtype))   # SciPy has no float16 matrices
            ms = event_ms(lambda: dense @ x, repeat)
            rows.append((f"{label}: dense GEMV", ms, (dense.nbytes + 2 * x.nbytes) / ms / 1e6, ""))
            if dtype == np.float32:
                gpu = csp.csr_matrix(host)
                ms = event_ms(lambda: gpu @ x, repeat)
                rows.append((f"{label}: CuPy CSR", ms, (gpu.data.nbytes + gpu.indices.nbytes + gpu.indptr.nbytes
                                                        + 3 * x.nbytes) / ms / 1e6, ""))
            t = ustc.Tensor.from_package(host).astype(dtype)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rows.append(ustc_row(f"{label}: ustc CSR", t, x, y, repeat))
                rows.append(ustc_row(f"{label}: ustc DELTA(4, packed)",
                                     t.convert(tensor_format=F.DELTA(4, True)), x, y, repeat))
    return rows


SPMM = nt.Program((nt.Statement(nt.Access("C", ("i", "k")),
                                nt.Mul(nt.Access("A", ("i", "j")), nt.Access("B", ("j", "k"))), True),))
#: 2 nonzeros of each group of 4: the six patterns
PATTERNS_24 = np.array([[1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 0, 1], [0, 1, 1, 0], [0, 1, 0, 1], [0, 0, 1, 1]], bool)


def random_sparse(rng, n: int, zeros: float):
    """An n x n float32 SciPy CSR matrix (SciPy has no float16 ones) with ``zeros`` of its entries
    zero at uniform places, values in [0.5, 1.5)."""
    import scipy.sparse as sp

    return sp.random(n, n, density=1.0 - zeros, format="csr", dtype=np.float32, random_state=rng,
                     data_rvs=lambda k: rng.random(k, dtype=np.float32) + 0.5)


def two_four(rng, n: int, dtype) -> np.ndarray:
    """An n x n dense matrix (n a multiple of 4) with 2 nonzeros in each group of 4 of a row."""
    mask = PATTERNS_24[rng.integers(0, 6, (n, n // 4))].reshape(n, n)
    return ((rng.random((n, n), dtype=np.float32) + 0.5) * mask).astype(dtype)


def delta_rows(cupy, n: int, repeat: int, rng) -> list[tuple]:
    """fp16 SpMV at 50 / 70 / 90% zeros: ustc delta with b chosen per matrix against cuBLAS GEMV
    and cuSPARSE CSR (f32 values: the CuPy CSR fp16 kernel is not cuSPARSE's generic one)."""
    import cupyx.scipy.sparse as csp

    x, y = cupy.asarray(rng.random(n).astype(np.float16)), cupy.zeros(n, np.float16)
    x32 = x.astype(cupy.float32)
    rows = []
    for z in (0.5, 0.7, 0.9):
        host = random_sparse(rng, n, z)
        label = f"f16 {int(z * 100)}% zeros"
        dense = cupy.asarray(host.toarray().astype(np.float16))
        ms = event_ms(lambda: dense @ x, repeat)
        rows.append((f"{label}: cuBLAS GEMV", ms, (dense.nbytes + 2 * x.nbytes) / ms / 1e6, ""))
        del dense
        gpu = csp.csr_matrix(host)
        ms = event_ms(lambda: gpu @ x32, repeat)
        rows.append((f"{label}: cuSPARSE CSR (f32)", ms, (gpu.data.nbytes + gpu.indices.nbytes + gpu.indptr.nbytes
                                                           + 3 * x32.nbytes) / ms / 1e6, ""))
        t = ustc.Tensor.from_package(host).astype(np.float16)
        fmt = F.best_delta(t)
        name, ms, gbs, chosen = ustc_row(f"{label}: ustc best delta", t.convert(tensor_format=fmt), x, y, repeat)
        rows.append((name, ms, gbs, f"{fmt.levels[1].type.params_text()}; {chosen}"))
    return rows


def spmm_rows(cupy, n: int, repeat: int, rng) -> list[tuple]:
    """fp16 SpMM at batch 16: ustc CSR (generated) against dense cuBLAS GEMM, 50 and 80% zeros."""
    b, c = cupy.asarray(rng.random((n, 16)).astype(np.float16)), cupy.zeros((n, 16), np.float16)
    rows = []
    for z in (0.5, 0.8):
        host = random_sparse(rng, n, z)
        label = f"SpMM batch 16, f16 {int(z * 100)}% zeros"
        dense = cupy.asarray(host.toarray().astype(np.float16))
        ms = event_ms(lambda: dense @ b, repeat)
        rows.append((f"{label}: cuBLAS GEMM", ms, (dense.nbytes + b.nbytes + c.nbytes) / ms / 1e6, ""))
        del dense
        t = ustc.Tensor.from_package(host).astype(np.float16).to("cuda")
        fn, chosen = launcher(t, b, c, None, SPMM, ("A", "B", "C"))
        ms = event_ms(fn, repeat)
        rows.append((f"{label}: ustc CSR", ms, (spmv_bytes(t, b, c)) / ms / 1e6, chosen))
    return rows


def nm_rows(cupy, n: int, repeat: int, rng) -> list[tuple]:
    """2:4 fp16 at batch 1 and 16: the registered CUDA n:m kernels against dense cuBLAS; and
    ustc's generated dense GEMV against cuBLAS on the same dense matrix."""
    from ustc.kernels import _structured_cuda as nm

    host = two_four(rng, n, np.float16)
    a = ustc.Tensor.from_dense(host, F.Structured(2, 4)).to("cuda")
    crd, vals = a._buffers[(2, "crd")], a._values
    dense = cupy.asarray(host)
    x, y = cupy.asarray(rng.random(n).astype(np.float16)), cupy.zeros(n, np.float16)
    b, c = cupy.asarray(rng.random((n, 16)).astype(np.float16)), cupy.zeros((n, 16), np.float16)
    stored = int(crd.nbytes) + int(vals.nbytes)
    rows = []
    for batch, rhs, out, run in ((1, x, y, lambda: nm.gemv(crd, vals, x, y, 1.0, 2, 4, n)),
                                 (16, b, c, lambda: nm.spmm(crd, vals, b, c, 1.0, 2, 4, n))):
        ms = event_ms(lambda rhs=rhs: dense @ rhs, repeat)
        rows.append((f"2:4 f16 batch {batch}: cuBLAS", ms, (dense.nbytes + rhs.nbytes + out.nbytes) / ms / 1e6, ""))
        ms = event_ms(run, repeat)
        rows.append((f"2:4 f16 batch {batch}: ustc", ms, (stored + rhs.nbytes + 2 * out.nbytes) / ms / 1e6,
                     "registered CUDA n:m kernel"))
    full = (rng.random((n, n), dtype=np.float32) + 0.5).astype(np.float16)
    dense = cupy.asarray(full)
    ms = event_ms(lambda: dense @ x, repeat)
    rows.append(("dense f16: cuBLAS GEMV", ms, (dense.nbytes + 2 * x.nbytes) / ms / 1e6, ""))
    del dense
    rows.append(ustc_row("dense f16: ustc GEMV", ustc.Tensor.from_dense(full, F.Dense), x, y, repeat))
    return rows


def verdicts(ms: dict) -> list[str]:
    """Issue 19's targets as table lines (target, measured, PASS / FAIL) from ``ms`` (row name ->
    median ms, every table of the run); a target whose rows are missing is left out."""
    out = []

    def add(target, value, ok):
        out.append(f"| {target} | {value} | {'PASS' if ok else 'FAIL'} |")

    def within(target, key, us):
        if key in ms:
            add(target, f"{ms[key] * 1e3:.1f} µs", ms[key] * 1e3 <= us)

    def faster(target, ours, theirs, need):
        if ours in ms and theirs in ms:
            ratio = ms[theirs] / ms[ours]
            add(target, f"{ratio:.2f}x", ratio >= need)

    within("stencil SpMV, CSR f64 <= 55 µs", "ustc CSR", 55)
    faster("stencil SpMV, CSR f64 >= 1.0x cuSPARSE", "ustc CSR", "CuPy CSR (cuSPARSE)", 1.0)
    within("stencil SpMV, DIA f64 <= 38 µs", "ustc DIAI", 38)
    within("stencil SpMV, DIA f32 <= 19 µs", "ustc DIAI (f32)", 19)
    for z, need in ((50, 1.35), (70, 2.2), (90, 4.8)):
        ours = f"f16 {z}% zeros: ustc best delta"
        faster(f"delta f16 SpMV, {z}% zeros >= {need}x cuBLAS GEMV", ours, f"f16 {z}% zeros: cuBLAS GEMV", need)
        faster(f"delta f16 SpMV, {z}% zeros >= 2.6x cuSPARSE CSR", ours, f"f16 {z}% zeros: cuSPARSE CSR (f32)", 2.6)
    for z, need in ((50, 1.3), (80, 1.8)):
        label = f"SpMM batch 16, f16 {z}% zeros"
        faster(f"SpMM batch 16, {z}% zeros >= {need}x dense", f"{label}: ustc CSR", f"{label}: cuBLAS GEMM", need)
    for batch in (1, 16):
        faster(f"2:4 batch {batch} >= 1.5x dense", f"2:4 f16 batch {batch}: ustc", f"2:4 f16 batch {batch}: cuBLAS",
               1.5)
    faster("ustc dense GEMV >= 0.9x cuBLAS", "dense f16: ustc GEMV", "dense f16: cuBLAS GEMV", 0.9)
    return ["| target (issue 19, H100) | measured | verdict |", "|---|---:|---|", *out]


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
    scratch = cupy.empty(L2_FLUSH_BYTES // 4, cupy.float32)
    _FLUSH[:] = [lambda: scratch.fill(0)]
    rng = np.random.default_rng(19)
    stencil = stencil_rows(cupy, args.side, args.repeat)
    targets = delta_rows(cupy, args.n, args.repeat, rng) + spmm_rows(cupy, args.n, args.repeat, rng) + \
        nm_rows(cupy, args.n, args.repeat, rng)
    lines = [f"Device: {props['name'].decode()}; host: {machine()}.",
             f"Device-to-device copy: {copy:.0f} GB/s (read + write). CUDA events, median of {args.repeat}, "
             "L2 flushed before each timed call.", "",
             f"7-point stencil, side {args.side} (f64 SpMV; DIAI f32 too):", "", *table(stencil),
             "", f"Issue 19 targets ({args.n}² matrices, fp16):", "", *table(targets),
             "", *verdicts({name: ms for name, ms, *_ in stencil + targets}),
             "", f"{args.n}² random matrices (SpMV):", "", *table(random_rows(cupy, args.n, args.repeat)),
             "", "Skewed rows (SpMV, f64):", "", *table(skewed_rows(cupy, 1 << 18, args.repeat))]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        write_section("GPU kernels", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
