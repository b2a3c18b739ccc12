"""Format conversion: ustc against SciPy (and PyTorch for context), time and peak memory.

    python benchmarks/bench_convert.py [--repeat N] [--side N] [--dense N] [--write]

Cases (all measured in one run, warm):

* **dense -> CSR**: an ``N x N`` float32 array (default 8192) with 90% zeros at
  uniform random positions. ustc ``Tensor.from_dense(x, "CSR")`` against
  SciPy ``csr_array(x)`` (target <= 1.5x) and against ustc's own
  ``Tensor.from_dense(x, "COO")`` (target <= 1.2x). PyTorch ``to_sparse_csr()``
  and ``to_sparse()`` of ``torch.from_numpy(x)`` for context.
* **COO -> CSR** and **CSR -> CSC** on the 3-D 7-point stencil of side ``n``
  (default 114: 1.48M rows, 10.29M nonzeros, float64, like SuiteSparse
  atmosmodl). ustc ``Tensor.from_package(coo).convert("CSR")`` and
  ``Tensor.from_package(csr).convert("CSC")`` against SciPy ``coo.tocsr()`` and
  ``csr.tocsc()`` (target <= 1.5x). The SciPy COO is ``csr.tocoo()``: canonical,
  ``has_canonical_format`` True. PyTorch for context: ``coalesce()`` of the
  COO with the coalesced flag unset (it sorts), ``to_sparse_csr()`` of the
  COO built coalesced, ``to_sparse_csc()`` of the CSR (int32 indices).
* **Extra peak memory** of every ustc and SciPy conversion: tracemalloc's peak
  during the call minus what was held before, over the output size
  (``Tensor.nbytes``; for SciPy the output's data + index arrays). Target for
  ustc: <= 1.2x.

Times are medians of ``--repeat`` calls after one full-size warm-up call; Numba
kernels are compiled (or loaded from the cache) before that by a call on a
small input of the same dtype. Memory is measured in separate calls, with
tracemalloc on only for those.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
import warnings

import numpy as np
import scipy
import scipy.sparse as sp

import ustc
from ustc import Tensor

from _common import extra_peak, machine, median_ms, tracemalloc_sees_numba, write_section

# design §6: measured memory bandwidth of the project machine.
BW_ONE_THREAD, BW_TWO_THREADS = 26.0, 45.0
MB = 1e6


# -- inputs ---------------------------------------------------------------------------


def dense_input(n: int, zeros: float = 0.9, seed: int = 0) -> np.ndarray:
    """``n x n`` float32, each entry zero with probability ``zeros`` (uniform), else a N(0, 1) draw."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, n), dtype=np.float32)
    x[rng.random((n, n), dtype=np.float32) < zeros] = 0
    x[x == 0] = 0  # (no -0.0)
    return x


def stencil_csr(n: int) -> sp.csr_array:
    """The 7-point Laplacian of an ``n x n x n`` grid as a canonical float64 CSR, built with whole-array
    NumPy operations (one per stencil offset, none per entry). Diagonal 6, neighbours -1."""
    N = n ** 3
    idx = np.arange(N, dtype=np.int64)
    i, rem = np.divmod(idx, n * n)
    j, k = np.divmod(rem, n)
    del rem
    offsets = [(-n * n, i > 0), (-n, j > 0), (-1, k > 0), (0, None), (1, k < n - 1), (n, j < n - 1),
               (n * n, i < n - 1)]  # increasing column offsets -> each row's columns come out sorted
    valid = np.empty((N, 7), dtype=bool)
    cols = np.empty((N, 7), dtype=np.int32)
    for c, (off, ok) in enumerate(offsets):
        valid[:, c] = True if ok is None else ok
        cols[:, c] = idx + off  # wrap-around values are masked out by `valid`
    del i, j, k, idx
    vals = np.full((N, 7), -1.0)
    vals[:, 3] = 6.0
    indptr = np.zeros(N + 1, dtype=np.int32)
    np.cumsum(valid.sum(axis=1), out=indptr[1:])
    csr = sp.csr_array((vals[valid], cols[valid], indptr), shape=(N, N))
    assert csr.has_canonical_format
    return csr


# -- one case ---------------------------------------------------------------------------


def buffers_nbytes(*arrays) -> int:
    return sum(a.nbytes for a in arrays)


def scipy_nbytes(m) -> int:
    if m.format == "coo":
        return buffers_nbytes(m.data, *m.coords)
    return buffers_nbytes(m.data, m.indices, m.indptr)


class Runner:
    def __init__(self, repeat: int):
        self.repeat = repeat
        self.times: dict[str, float] = {}
        self.peaks: dict[str, tuple[int, int]] = {}  # name -> (extra peak, output bytes)

    def time(self, name: str, fn) -> float:
        ms, samples = median_ms(fn, self.repeat, warmup=1)
        self.times[name] = ms
        print(f"  {name:<34} {ms:9.2f} ms   (samples {', '.join(f'{s:.1f}' for s in samples)})", flush=True)
        return ms

    def memory(self, name: str, fn, size) -> None:
        result, extra = extra_peak(fn)
        out = size(result)
        del result
        self.peaks[name] = (extra, out)
        print(f"  {name:<34} extra peak {extra / MB:8.1f} MB, output {out / MB:8.1f} MB, "
              f"ratio {extra / out:5.2f}", flush=True)


def check_same_csr(t: Tensor, m) -> None:
    """ustc's compressed buffers equal SciPy's (values, indices, pointers)."""
    assert np.array_equal(t.pos(1), m.indptr) and np.array_equal(t.crd(1), m.indices) \
        and np.array_equal(t.values, m.data), "ustc and SciPy results differ"


def warm_up() -> None:
    """Compile / load every Numba kernel on the measured paths on small inputs of the same dtypes."""
    small = dense_input(64)
    Tensor.from_dense(small, "CSR")
    Tensor.from_dense(small, "COO")
    csr = stencil_csr(4)
    Tensor.from_package(csr.tocoo()).convert("CSR")
    Tensor.from_package(csr).convert("CSC")


def run_dense(r: Runner, n: int, torch) -> dict:
    print(f"dense {n}x{n} float32, 90% zeros:", flush=True)
    x = dense_input(n)
    nnz = int(np.count_nonzero(x))
    t_csr = Tensor.from_dense(x, "CSR")
    check_same_csr(t_csr, sp.csr_array(x))
    out_bytes = t_csr.nbytes
    del t_csr
    r.time("ustc dense->CSR", lambda: Tensor.from_dense(x, "CSR"))
    r.time("ustc dense->COO", lambda: Tensor.from_dense(x, "COO"))
    r.time("scipy csr_array(dense)", lambda: sp.csr_array(x))
    if torch is not None:
        xt = torch.from_numpy(x)
        xt[:8, :8].to_sparse_csr(), xt[:8, :8].to_sparse()
        r.time("torch dense.to_sparse_csr()", lambda: xt.to_sparse_csr())
        r.time("torch dense.to_sparse() (COO)", lambda: xt.to_sparse())
        del xt
    r.memory("ustc dense->CSR", lambda: Tensor.from_dense(x, "CSR"), lambda t: t.nbytes)
    r.memory("ustc dense->COO", lambda: Tensor.from_dense(x, "COO"), lambda t: t.nbytes)
    r.memory("scipy csr_array(dense)", lambda: sp.csr_array(x), scipy_nbytes)
    return {"nnz": nnz, "in_bytes": x.nbytes, "out_bytes": out_bytes}


def run_stencil(r: Runner, n: int, torch) -> dict:
    csr = stencil_csr(n)
    coo = csr.tocoo()
    assert coo.has_canonical_format
    N, nnz = csr.shape[0], csr.nnz
    print(f"7-point stencil n={n}: {N} rows, {nnz} nonzeros, float64, "
          f"indices {csr.indices.dtype}:", flush=True)
    ref_csr = coo.tocsr()
    ref_csc = csr.tocsc()
    t = Tensor.from_package(coo).convert("CSR")
    check_same_csr(t, ref_csr)
    t = Tensor.from_package(csr).convert("CSC")
    check_same_csr(t, ref_csc)
    csr_bytes = t.nbytes
    del t, ref_csr, ref_csc
    r.time("ustc COO->CSR", lambda: Tensor.from_package(coo).convert("CSR"))
    r.time("scipy coo.tocsr()", lambda: coo.tocsr())
    r.time("ustc CSR->CSC", lambda: Tensor.from_package(csr).convert("CSC"))
    r.time("scipy csr.tocsc()", lambda: csr.tocsc())
    if torch is not None:
        idx = torch.from_numpy(np.stack([c.astype(np.int64) for c in coo.coords]))
        vals = torch.from_numpy(coo.data)
        coo_t = torch.sparse_coo_tensor(idx, vals, csr.shape, is_coalesced=True)
        coo_u = torch.sparse_coo_tensor(idx, vals, csr.shape, is_coalesced=False)
        csr_t = torch.sparse_csr_tensor(torch.from_numpy(csr.indptr), torch.from_numpy(csr.indices),
                                        torch.from_numpy(csr.data), csr.shape)
        r.time("torch COO.coalesce() (unflagged)", lambda: coo_u.coalesce())
        r.time("torch COO.to_sparse_csr()", lambda: coo_t.to_sparse_csr())
        r.time("torch CSR.to_sparse_csc()", lambda: csr_t.to_sparse_csc())
        del idx, vals, coo_t, coo_u, csr_t
    r.memory("ustc COO->CSR", lambda: Tensor.from_package(coo).convert("CSR"), lambda t: t.nbytes)
    r.memory("scipy coo.tocsr()", lambda: coo.tocsr(), scipy_nbytes)
    r.memory("ustc CSR->CSC", lambda: Tensor.from_package(csr).convert("CSC"), lambda t: t.nbytes)
    r.memory("scipy csr.tocsc()", lambda: csr.tocsc(), scipy_nbytes)
    return {"N": N, "nnz": nnz, "coo_bytes": scipy_nbytes(coo), "csr_bytes": scipy_nbytes(csr),
            "out_bytes": csr_bytes}


# -- report -----------------------------------------------------------------------------


def verdict(value: float, target: float) -> str:
    return "PASS" if value <= target else "FAIL"


def build_report(r: Runner, dense: dict, sten: dict, args, numba_seen, load) -> tuple[str, list[str]]:
    T, P = r.times, r.peaks

    def peak_ratio(name):
        extra, out = P[name]
        return extra / out

    rows, verdicts = [], []

    def target_row(case, ustc_name, peer_label, peer_name, target, peak_name):
        ratio = T[ustc_name] / T[peer_name]
        v = verdict(ratio, target)
        verdicts.append(f"{case} vs {peer_label}: {v}")
        rows.append(f"| {case} | {T[ustc_name]:.1f} | {peer_label} | {T[peer_name]:.1f} | {ratio:.2f}x | "
                    f"<= {target}x | {v} | {peak_ratio(peak_name):.2f} |")

    d = args.dense
    target_row(f"dense {d}² f32 -> CSR", "ustc dense->CSR", "SciPy `csr_array(x)`", "scipy csr_array(dense)",
               1.5, "ustc dense->CSR")
    target_row(f"dense {d}² f32 -> CSR", "ustc dense->CSR", "ustc `from_dense(x, \"COO\")`", "ustc dense->COO",
               1.2, "ustc dense->CSR")
    target_row("stencil COO -> CSR", "ustc COO->CSR", "SciPy `coo.tocsr()`", "scipy coo.tocsr()", 1.5,
               "ustc COO->CSR")
    target_row("stencil CSR -> CSC", "ustc CSR->CSC", "SciPy `csr.tocsc()`", "scipy csr.tocsc()", 1.5,
               "ustc CSR->CSC")
    t1 = ["| case | ustc (ms) | peer | peer (ms) | ratio | target | result | ustc extra peak / output |",
          "|---|---:|---|---:|---:|---|---|---:|", *rows]

    mem_rows = []
    for label, u, s in (("dense -> CSR", "ustc dense->CSR", "scipy csr_array(dense)"),
                        ("dense -> COO", "ustc dense->COO", None),
                        ("stencil COO -> CSR", "ustc COO->CSR", "scipy coo.tocsr()"),
                        ("stencil CSR -> CSC", "ustc CSR->CSC", "scipy csr.tocsc()")):
        extra, out = P[u]
        v = verdict(extra / out, 1.2)
        verdicts.append(f"{label} extra peak: {v}")
        scipy_cols = "— | —"
        if s is not None:
            se, so = P[s]
            scipy_cols = f"{se / MB:.1f} | {se / so:.2f}"
        mem_rows.append(f"| {label} | {out / MB:.1f} | {extra / MB:.1f} | {extra / out:.2f} | <= 1.2 | {v} | "
                        f"{scipy_cols} |")
    t2 = ["| conversion | ustc output (MB) | ustc extra peak (MB) | ratio | target | result | "
          "SciPy extra peak (MB) | SciPy ratio |", "|---|---:|---:|---:|---|---|---:|---:|", *mem_rows]

    bw_rows = []
    for label, name, moved, threads, ctx in (
            ("dense -> CSR", "ustc dense->CSR", dense["in_bytes"] + dense["out_bytes"], 2,
             ["torch dense.to_sparse_csr()", "torch dense.to_sparse() (COO)"]),
            ("stencil COO -> CSR", "ustc COO->CSR", sten["coo_bytes"] + sten["out_bytes"], 1,
             ["torch COO.coalesce() (unflagged)", "torch COO.to_sparse_csr()"]),
            ("stencil CSR -> CSC", "ustc CSR->CSC", sten["csr_bytes"] + sten["out_bytes"], 1,
             ["torch CSR.to_sparse_csc()"])):
        gbs = moved / (T[name] / 1e3) / 1e9
        ref = BW_TWO_THREADS if threads == 2 else BW_ONE_THREAD
        torch_txt = "; ".join(f"{c.removeprefix('torch ')}: {T[c]:.1f}" for c in ctx if c in T) or "—"
        bw_rows.append(f"| {label} | {moved / MB:.0f} | {T[name]:.1f} | {gbs:.1f} | "
                       f"{gbs / ref:.0%} of {ref:.0f} ({threads} thread{'s' if threads > 1 else ''}) | "
                       f"{torch_txt} |")
    t3 = ["| conversion (ustc) | bytes in + out (MB) | ms | GB/s | of design §6 bandwidth | PyTorch (ms) |",
          "|---|---:|---:|---:|---|---|", *bw_rows]

    import numba

    try:
        import torch
        torch_v = f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
    except ImportError:
        torch_v = "torch not installed"
    versions = (f"ustc {ustc.__version__}, NumPy {np.__version__}, SciPy {scipy.__version__}, "
                f"Numba {numba.__version__} ({numba.config.NUMBA_NUM_THREADS} threads), {torch_v}")
    seen, seen_mb = numba_seen
    method = (
        f"Inputs: a {d}×{d} float32 array, each entry zero with probability 0.9 (uniform; "
        f"{dense['nnz']:,} nonzeros), and the 3-D 7-point stencil of side {args.side} ({sten['N']:,} rows, "
        f"{sten['nnz']:,} nonzeros, float64, int32 indices) built as a canonical SciPy CSR with whole-array "
        f"NumPy operations; its COO is `csr.tocoo()` (`has_canonical_format` True). ustc calls: "
        f"`Tensor.from_dense(x, \"CSR\" | \"COO\")`, `Tensor.from_package(coo).convert(\"CSR\")`, "
        f"`Tensor.from_package(csr).convert(\"CSC\")` (the zero-copy `from_package` is inside the timing). "
        f"Every ustc result was first checked equal, buffer for buffer, to SciPy's. Times: median of "
        f"{args.repeat} calls after one untimed full-size call, with `gc.collect()` before each call (outside "
        f"the timing); Numba kernels were compiled or loaded from the cache beforehand by the same calls on "
        f"small inputs of the same dtypes, so no compile time is included. PyTorch runs on tensors sharing "
        f"the same data (`torch.from_numpy`; the COO with int64 indices, as torch requires, and the CSR with "
        f"SciPy's int32 ones), thread count left at its default. Memory: separate calls with `tracemalloc` "
        f"on; extra peak = tracemalloc's peak during the call minus the memory traced just before, with the "
        f"result still alive, so it includes the output; output = `Tensor.nbytes` (all index buffers + "
        f"values) for ustc, data + index arrays for SciPy. NumPy reports its data buffers to tracemalloc, "
        f"and so does Numba's runtime: a sanity check allocating `np.empty(10**7)` inside an `njit` "
        f"function registered {seen_mb:.1f} MB (80 MB expected){'' if seen else ' — NOT seen'}. "
        f"Allocations inside SciPy's C++ or PyTorch are only seen where they go through NumPy. "
        f"GB/s = (input buffers + output buffers) / time: the minimum traffic, each byte counted once even "
        f"where the code path reads it more than once; compared with design §6's ≈ {BW_ONE_THREAD:.0f} GB/s "
        f"one-thread / ≈ {BW_TWO_THREADS:.0f} GB/s two-thread figures (two threads for the parallel "
        f"dense → CSR kernels, one for the serial COO → CSR and CSR → CSC kernels).")
    body = "\n".join([
        f"Measured {datetime.date.today().isoformat()} on {machine()}; {versions}. "
        f"1-minute load average {load[0]:.2f} at the start of the run, {load[1]:.2f} at the end "
        f"(this process included; other work on the 2 cores slows the parallel kernels most).",
        "", "Time targets:", "", *t1,
        "", "Extra peak memory (target ≤ 1.2× the output size):", "", *t2,
        "", "Achieved bandwidth and PyTorch for context:", "", *t3,
        "", method,
    ])
    return body, verdicts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="timed calls per case (median reported)")
    ap.add_argument("--dense", type=int, default=8192, help="side of the dense square array")
    ap.add_argument("--side", type=int, default=114, help="grid side of the 3-D 7-point stencil")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch context timings")
    ap.add_argument("--write", action="store_true", help="replace the '## Conversion' section of docs/benchmarks.md")
    args = ap.parse_args(argv)

    torch = None
    if not args.no_torch:
        try:
            import torch
        except ImportError:
            torch = None
    warnings.filterwarnings("ignore", message="Sparse (CSR tensor support|invariant checks)")
    load_before = os.getloadavg()[0]
    print(machine())
    print(f"load average (1 min) at start: {load_before:.2f}")
    numba_seen = tracemalloc_sees_numba()
    print(f"tracemalloc sees Numba allocations: {numba_seen[0]} ({numba_seen[1]:.1f} MB of 80 MB)")
    if not numba_seen[0]:
        print("WARNING: Numba's allocations are invisible to tracemalloc; ustc extra-peak numbers are low. "
              "Measure RSS high-water marks per case in fresh processes (_common.rss_peak_subprocess).")
    start = time.perf_counter()
    warm_up()
    print(f"warm-up (Numba compile / cache load): {time.perf_counter() - start:.2f} s")

    r = Runner(args.repeat)
    dense = run_dense(r, args.dense, torch)
    sten = run_stencil(r, args.side, torch)
    load = (load_before, os.getloadavg()[0])
    body, verdicts = build_report(r, dense, sten, args, numba_seen, load)
    print()
    print(body)
    print()
    print("\n".join(verdicts))
    if args.write:
        print(f"wrote {write_section('Conversion', body)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
