"""ustc against the fastest CPU sparse libraries: Intel MKL, SuiteSparse:GraphBLAS, PyTorch, SciPy, pydata sparse.

    python benchmarks/bench_peers.py [--quick] [--side N] [--graph N] [--spgemm-side N]
                                     [--spgemm-graph N] [--rounds R] [--only spmv,spgemm,ewise,oneshot]
                                     [--no-torch] [--write]

Peers come with the ``bench`` extra (``pip install -e '.[bench]'``): ``sparse_dot_mkl`` with the
``mkl`` wheel (``MKL_RT`` is pointed at the wheel's ``libmkl_rt.so.*`` before the import),
``python-graphblas`` (SuiteSparse:GraphBLAS) and pydata ``sparse``; PyTorch is used when installed.
A peer that is missing is reported as "not installed" in its rows.

Measured in one run, every operation's calls timed in alternating rounds (the order reversed every
other round, a pause before each call so that the previous library's OpenMP threads stop spinning):

* SpMV ``y = A x`` (float64) on the 3-D 7-point stencil of side ``--side`` (114: 1,481,544 rows) and
  on a power-law graph of ``--graph`` rows (1,048,576; see :func:`power_law_csr`): ustc
  ``Matmul(A, x)`` planned once, ``execute()`` timed, A in CSR and (stencil) DIAI; GB/s from the
  bytes the kernel must move and % of a STREAM triad measured in the same run.
  Targets: CSR >= 1.1x the fastest of MKL, GraphBLAS and PyTorch CSR (int32); DIAI >= 75% of the triad.
* SpGEMM ``A @ A`` on the stencil of side ``--spgemm-side`` and on a power-law graph of
  ``--spgemm-graph`` rows: ustc ``Matmul(A, A)`` planned once, A in CSR, DCSR, COO and BSR(2, 2).
  Target: each format >= 1.2x the fastest of SciPy, MKL and GraphBLAS; BSR(2, 2) on the power-law
  graph (no block structure: its product stores 4.9x the CSR product's bytes) >= 2x SciPy's
  ``bsr_array`` product instead.
* ``A + B`` and ``A * B`` (one-shot operators on ustc Tensors in CSR) at 200,000² with 2,000,000
  entries each and at 1,000² at 1%. Targets: >= 1.0x GraphBLAS at 200k², >= 1.0x SciPy at 1000².
* One-shot ``ustc.matmul(A, x)`` on the stencil of side 16 (4,096 rows) against SciPy ``A @ x``,
  each sample the mean of back-to-back calls. Target: >= 1.0x SciPy.

Every result (ustc's and the peers') is checked against SciPy's before timing; a call that raises or
differs is a FAILED row and is not timed. ``--write`` replaces the section
"Against MKL and GraphBLAS (CPU)" of docs/benchmarks.md (it needs every operation; ``--only`` measures
some of them and only prints).
"""

from __future__ import annotations

import argparse
import datetime
import glob
import importlib.metadata
import os
import re
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import scipy
import scipy.sparse as sp

from _common import machine, median_ms, quartiles, stream_triad_gbs, write_section
from bench_convert import attempt, entries_coo, markdown, ms_cell, random_csr, scipy_view, stencil_csr

import ustc

TITLE = "Against MKL and GraphBLAS (CPU)"
INSTALL = "pip install -e '.[bench]'  (or: pip install 'ustc[bench]')"
SPMV_TARGET, DIAI_TARGET, SPGEMM_TARGET, EWISE_TARGET, ONESHOT_TARGET = 1.1, 0.75, 1.2, 1.0, 1.0
# BSR(2, 2) SpGEMM on the power-law graph: A has 1.48M blocks for 1.49M entries (a quarter of each block
# used), A @ A in 2 x 2 blocks stores 4.9x the bytes of the CSR product (85% stored zeros) and does 13.8x
# its multiply-adds, so the scalar peers' time is out of reach by construction; it is judged against
# SciPy's bsr_array product, the one peer computing the same blocked result
BSR_GRAPH_TARGET = 2.0
SPGEMM_FORMATS = ("CSR", "DCSR", "COO", "BSR(2, 2)")
FULL = dict(side=114, graph=1 << 20, degree=16, spgemm_side=114, spgemm_graph=200_000, spgemm_degree=8,
            ew_n=200_000, ew_per_row=10, small_n=1_000, oneshot_side=16, rounds=5, settle=0.25, bw_mb=200)
QUICK = dict(side=20, graph=20_000, degree=16, spgemm_side=12, spgemm_graph=5_000, spgemm_degree=8,
             ew_n=20_000, ew_per_row=10, small_n=1_000, oneshot_side=16, rounds=2, settle=0.02, bw_mb=64)
OPERATIONS = ("spmv", "spgemm", "ewise", "oneshot")
# (timed samples per round, back-to-back calls per sample) of each kind of call
PER_ROUND = dict(spmv=(5, 1), spgemm=(2, 1), ewise=(3, 1), small=(5, 50), oneshot=(5, 200))


# -- peers ------------------------------------------------------------------------------


def mkl_rt_path() -> str | None:
    """``MKL_RT`` if set, else the ``libmkl_rt.so.*`` of the ``mkl`` wheel (from its installed file
    list, else under ``<prefix>/lib``), else None."""
    if os.environ.get("MKL_RT"):
        return os.environ["MKL_RT"]
    try:
        files = importlib.metadata.files("mkl") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if f.name.startswith("libmkl_rt.so"):
            path = Path(f.locate()).resolve()
            if path.exists():
                return str(path)
    found = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so.*")))
    return found[-1] if found else None


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


@dataclass
class Peers:
    """The peer modules that imported (None where not installed), their version lines and why not."""

    threads: int
    mkl: object = None
    gb: object = None
    torch: object = None
    pydata: object = None
    versions: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    def absent(self, name: str) -> str:
        """The status of a peer's rows when it is not used: 'not installed' or 'left out'."""
        return NOT_INSTALLED if name in self.missing else "left out"


def load_peers(threads: int, use_torch: bool = True) -> Peers:
    """Import the peers, each on ``threads`` threads; a missing one is reported once, not raised."""
    peers = Peers(threads)
    path = mkl_rt_path()
    if path is not None:
        os.environ["MKL_RT"] = path          # sparse_dot_mkl reads it at import
    try:
        import sparse_dot_mkl

        sparse_dot_mkl.mkl_set_num_threads(threads)
        peers.mkl = sparse_dot_mkl
        peers.versions["MKL"] = (f"sparse_dot_mkl {_version('sparse_dot_mkl')} on "
                                 f"{sparse_dot_mkl.mkl_get_version_string().split(' for ')[0]} "
                                 f"(mkl wheel {_version('mkl')}, {sparse_dot_mkl.mkl_get_max_threads()} threads)")
    except Exception as exc:  # noqa: BLE001  (ImportError, or MKL's library not found)
        peers.missing["MKL"] = f"{type(exc).__name__}: {exc}"
    try:
        import graphblas as gb

        gb.ss.config["nthreads"] = threads
        peers.gb = gb
        lib = ".".join(map(str, gb.ss.about["library_version"]))
        peers.versions["GraphBLAS"] = (f"python-graphblas {gb.__version__} on SuiteSparse:GraphBLAS {lib} "
                                       f"({gb.ss.config['nthreads']} threads)")
    except Exception as exc:  # noqa: BLE001
        peers.missing["GraphBLAS"] = f"{type(exc).__name__}: {exc}"
    if use_torch:
        try:
            import torch

            torch.set_num_threads(threads)
            peers.torch = torch
            peers.versions["PyTorch"] = f"PyTorch {torch.__version__} ({torch.get_num_threads()} threads)"
            warnings.filterwarnings("ignore", message="Sparse ((CSR|CSC|BSR) tensor support|invariant checks)")
        except ImportError as exc:
            peers.missing["PyTorch"] = f"{type(exc).__name__}: {exc}"
    else:
        peers.versions["PyTorch"] = "PyTorch left out (--no-torch)"
    try:
        import sparse

        peers.pydata = sparse
        peers.versions["pydata sparse"] = f"sparse {sparse.__version__}"
    except ImportError as exc:
        peers.missing["pydata sparse"] = f"{type(exc).__name__}: {exc}"
    for name, why in peers.missing.items():
        print(f"{name} not installed ({why}); its rows say 'not installed'. Install the peers with: {INSTALL}",
              file=sys.stderr)
    return peers


NOT_INSTALLED = "not installed"


# -- inputs ---------------------------------------------------------------------------------


def power_law_csr(n: int, avg_degree: int = 16, exponent: float = 2.2, seed: int = 0) -> sp.csr_array:
    """A directed Chung-Lu graph as a canonical ``n x n`` float64 CSR with int32 indices: about
    ``avg_degree * n`` edges whose sources and targets are drawn independently with probability
    proportional to ``rank ** (-1 / (exponent - 1))`` (a Zipf degree sequence, exponent ``exponent``),
    the ranks given to node labels by two independent random permutations (so row hubs are not column
    hubs and hubs are spread over the rows); repeated edges are kept once. Values uniform in [0.5, 1.5).
    Seeded; whole-array NumPy only."""
    rng = np.random.default_rng(seed)
    w = np.arange(1, n + 1, dtype=np.float64) ** (-1.0 / (exponent - 1.0))
    cdf = np.cumsum(w / w.sum())
    cdf[-1] = 1.0
    m = int(avg_degree * n)

    def ranks() -> np.ndarray:   # searching sorted uniforms is cache-friendly; the pairing is shuffled below
        return np.searchsorted(cdf, np.sort(rng.random(m)), side="right")

    rows = rng.permutation(n)[ranks()]
    cols = rng.permutation(n)[ranks()[rng.permutation(m)]]
    flat = np.sort(rows.astype(np.int64) * n + cols)
    flat = flat[np.concatenate(([True], flat[1:] != flat[:-1]))]
    r, c = np.divmod(flat, n)
    indptr = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(r, minlength=n), out=indptr[1:])
    csr = sp.csr_array((rng.random(len(flat)) + 0.5, c.astype(np.int32), indptr), shape=(n, n))
    assert csr.has_canonical_format
    return csr


def describe(csr) -> str:
    lengths = np.diff(csr.indptr)
    return (f"{csr.shape[0]:,} rows, {csr.nnz:,} nonzeros (row lengths: median {int(np.median(lengths))}, "
            f"max {lengths.max():,})")


# -- checks ------------------------------------------------------------------------------------


def as_scipy(result):
    """A SciPy sparse matrix holding ``result`` (a ustc Tensor, SciPy, GraphBLAS, torch or pydata object)."""
    if sp.issparse(result):
        return result
    if isinstance(result, ustc.Tensor):
        view = scipy_view(result)
        return entries_coo(result) if view is None else view
    kind = type(result).__module__
    if kind.startswith("graphblas"):
        from graphblas import io

        return io.to_scipy_sparse(result, format="csr")
    if kind.startswith("torch"):
        import torch

        if result.layout != torch.sparse_csr:
            result = result.to_sparse_csr()
        return sp.csr_array((result.values().numpy(), result.col_indices().numpy(), result.crow_indices().numpy()),
                            shape=tuple(result.shape))
    if kind.startswith("sparse"):
        return result.to_scipy_sparse()
    raise TypeError(f"cannot compare a {type(result).__name__}")


def sparse_mismatch(result, ref, rtol: float = 1e-12) -> str | None:
    """None when ``result`` holds ``ref``'s matrix (entries equal within ``rtol`` of ref's largest
    magnitude; explicitly stored zeros, as block formats keep, are allowed), else what differs."""
    try:
        got = as_scipy(result)
    except Exception as exc:  # noqa: BLE001
        return f"result not readable: {type(exc).__name__}: {exc}"
    if tuple(got.shape) != tuple(ref.shape):
        return f"shape {got.shape}, expected {ref.shape}"
    if got.dtype != ref.dtype:
        return f"dtype {got.dtype}, expected {ref.dtype}"
    diff = abs(sp.csr_array(got) - sp.csr_array(ref))
    worst = diff.max() if diff.nnz else 0.0
    scale = abs(ref).max() if ref.nnz else 1.0
    return None if worst <= rtol * scale else f"entries differ from SciPy's (max |diff| {worst:.3g})"


def dense_mismatch(result, ref: np.ndarray, rtol: float = 1e-12) -> str | None:
    if type(result).__module__.startswith("graphblas"):
        result = result.to_dense(fill_value=0.0)
    elif type(result).__module__.startswith("torch"):
        result = result.numpy()
    y = np.asarray(result)
    if y.shape != ref.shape:
        return f"shape {y.shape}, expected {ref.shape}"
    worst = np.abs(y - ref).max() if y.size else 0.0
    if worst <= rtol * max(np.abs(ref).max(), 1.0):
        return None
    return f"values differ from SciPy's (max |diff| {worst:.3g})"


# -- timing ---------------------------------------------------------------------------------------


def alternate(fns: dict[str, Callable], rounds: int, per_round: int, inner: int,
              settle: float) -> dict[str, list[float]]:
    """Milliseconds per call for each name: ``rounds`` rounds, the order reversed every other round;
    in each round every call gets ``settle`` seconds of quiet (OpenMP runtimes spin their threads for
    up to ~200 ms after a parallel region, which would slow the next library on the same cores), one
    untimed call, then ``per_round`` timed samples (``_common.median_ms``, garbage collected before
    each), every sample the mean of ``inner`` back-to-back calls."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            fn = fns[name]
            call = fn if inner == 1 else _batch(fn, inner)
            time.sleep(settle)
            samples[name] += [ms / inner for ms in median_ms(call, per_round, warmup=1)[1]]
    return samples


def _batch(fn: Callable, inner: int) -> Callable:
    def batch():
        for _ in range(inner):
            fn()
    return batch


@dataclass
class Entry:
    """One competitor of an operation: ``setup()`` returns the call to time (and may raise), or
    ``status`` says why there is none ('not installed', 'no such operation in ...')."""

    library: str
    call: str
    setup: Callable[[], Callable] | None = None
    status: str | None = None
    ustc: bool = False
    bytes: int = 0                 # bytes the kernel must move (SpMV rows), 0 where not counted
    route: str = ""
    checked: bool = True           # its result is compared with SciPy's (not the triad's)
    samples: list[float] = field(default_factory=list)

    @property
    def ms(self) -> float:
        return quartiles(self.samples)[1]


def run_operation(label: str, entries: list[Entry], check: Callable, kind: str, args) -> list[Entry]:
    """Set up and check every entry (a failure becomes its status), then time the working ones
    together in alternating rounds; prints one line per entry."""
    fns = {}
    for i, e in enumerate(entries):
        if e.status is not None:
            continue
        fn, error = attempt(e.setup)
        if error is None:
            if isinstance(fn, tuple):
                fn, e.route = fn
            result, error = attempt(fn)
            error = error or (check(result) if e.checked else None)
            del result
        if error is not None:
            e.status = f"FAILED: {error}"
        else:
            fns[i] = fn
    per_round, inner = PER_ROUND[kind]
    samples = alternate(fns, args.rounds, per_round, inner, args.settle)
    for i, s in samples.items():
        entries[i].samples = s
    for e in entries:
        cell = e.status or f"{ms_cell(e.samples)} ms"
        print(f"  {label} | {e.library} {e.call}: {cell}", flush=True)
    return entries


def planned(a, b, options: dict | None = None) -> tuple[Callable, str]:
    """``ustc.Matmul(a, b, options=options)`` planned once: (its execute, the route it chose)."""
    mm = ustc.Matmul(a, b, options=options).plan()
    return mm.execute, re.sub(r", key [0-9a-f]+…", "", mm.plan_info.split(" [why")[0])


# -- operations ------------------------------------------------------------------------------------


def spmv_entries(csr, x, peers: Peers, diai: bool, bw_mb: float = 200) -> list[Entry]:
    """SpMV competitors on ``csr`` (int32 CSR) and the dense ``x``."""
    n, m = csr.shape
    vector_bytes = 8 * (n + m)                       # x read once, y written once
    csr_bytes = csr.data.nbytes + csr.indices.nbytes + csr.indptr.nbytes + vector_bytes
    A = ustc.Tensor.from_package(csr)
    entries = [Entry("SciPy", "`A @ x`", lambda: lambda: csr @ x, bytes=csr_bytes)]
    if peers.mkl is not None:
        dot = peers.mkl.dot_product_mkl
        entries.append(Entry("MKL", "`dot_product_mkl(A, x)`", lambda: lambda: dot(csr, x), bytes=csr_bytes))
    else:
        entries.append(Entry("MKL", "`dot_product_mkl(A, x)`", status=NOT_INSTALLED))
    if peers.gb is not None:
        gb = peers.gb

        def graphblas():
            G, v = gb.io.from_scipy_sparse(csr), gb.Vector.from_dense(x)
            return lambda: G.mxv(v, gb.semiring.plus_times).new()
        entries.append(Entry("GraphBLAS", "`A.mxv(v, plus_times).new()`", graphblas, bytes=csr_bytes))
    else:
        entries.append(Entry("GraphBLAS", "`A.mxv(v, plus_times).new()`", status=NOT_INSTALLED))
    if peers.torch is not None:
        torch = peers.torch

        def torch_csr():
            t = torch.from_numpy
            ta = torch.sparse_csr_tensor(t(csr.indptr), t(csr.indices), t(csr.data), csr.shape)
            assert ta.crow_indices().dtype == torch.int32
            tx = t(x)
            return lambda: ta @ tx
        entries.append(Entry("PyTorch CSR (int32)", "`A @ x`", torch_csr, bytes=csr_bytes))
    else:
        entries.append(Entry("PyTorch CSR (int32)", "`A @ x`", status=peers.absent("PyTorch")))
    if peers.pydata is not None:
        pydata = peers.pydata

        def coo():
            p = pydata.COO.from_scipy_sparse(csr)
            return lambda: p @ x
        entries.append(Entry("pydata sparse COO", "`A @ x`", coo, bytes=csr_bytes))
    else:
        entries.append(Entry("pydata sparse COO", "`A @ x`", status=NOT_INSTALLED))
    entries.append(Entry("ustc CSR", "`Matmul(A, x)` planned, `execute()`", lambda: planned(A, x), ustc=True,
                         bytes=csr_bytes))
    # context, not judged: the generated kernel (route forced), beside the default route, which reads
    # 16-bit column indices where they fit and else gathers x in vectors from the operand's own indices
    entries.append(Entry("ustc CSR, generated kernel", "`Matmul(A, x, options={'route': 'generated'})`",
                         lambda: planned(A, x, {"route": "generated"}), bytes=csr_bytes))
    if diai:
        D = A.convert("DIAI")
        entries.append(Entry("ustc DIAI", "`Matmul(A, x)` planned, `execute()`", lambda: planned(D, x), ustc=True,
                             bytes=D.nbytes + vector_bytes))
        entries.append(triad_entry(bw_mb))
    return entries


TRIAD = "STREAM triad, same rounds"


def triad_entry(mb: float) -> Entry:
    """The STREAM triad ``a[i] = b[i] + 1.5 c[i]`` on float64 arrays of ``mb`` MB each (3 x 8 bytes an
    element counted), timed in the same alternating rounds as the SpMV calls, so that the DIAI
    verdict compares two medians taken under the same load (a triad measured once at the start
    moved 38.8 -> 48.6 GB/s between two runs where DIAI itself ran 3.3 and 3.0 ms)."""
    from _common import _triad_kernel

    n = int(mb * 1e6) // 8

    def setup():
        a, b, c = np.zeros(n), np.ones(n), np.ones(n)
        triad = _triad_kernel()
        return lambda: triad(a, b, c)
    return Entry(TRIAD, "`a[i] = b[i] + 1.5 c[i]`", setup, bytes=3 * 8 * n, checked=False)


def spgemm_entries(csr, peers: Peers) -> list[Entry]:
    """``A @ A`` competitors; ustc's operands converted once per format, outside the timing."""
    A = ustc.Tensor.from_package(csr)
    entries = [Entry("SciPy", "`A @ A`", lambda: lambda: csr @ csr)]

    def scipy_bsr():
        bsr = sp.bsr_array(csr, blocksize=(2, 2)) if csr.shape[0] % 2 == 0 else None
        if bsr is None:
            raise ValueError("an odd number of rows has no 2 x 2 blocks")
        return lambda: bsr @ bsr
    # context for ustc BSR(2, 2), not a peer the target is judged against (its blocks store zeros)
    entries.append(Entry("SciPy BSR(2, 2)", "`A @ A`, A a `bsr_array` of 2 x 2 blocks", scipy_bsr))
    if peers.mkl is not None:
        dot = peers.mkl.dot_product_mkl
        entries.append(Entry("MKL", "`dot_product_mkl(A, A)`", lambda: lambda: dot(csr, csr)))
    else:
        entries.append(Entry("MKL", "`dot_product_mkl(A, A)`", status=NOT_INSTALLED))
    if peers.gb is not None:
        gb = peers.gb

        def graphblas():
            G = gb.io.from_scipy_sparse(csr)
            return lambda: G.mxm(G, gb.semiring.plus_times).new()
        entries.append(Entry("GraphBLAS", "`A.mxm(A, plus_times).new()`", graphblas))
    else:
        entries.append(Entry("GraphBLAS", "`A.mxm(A, plus_times).new()`", status=NOT_INSTALLED))
    if peers.torch is not None:
        torch = peers.torch

        def torch_csr():
            t = torch.from_numpy
            ta = torch.sparse_csr_tensor(t(csr.indptr), t(csr.indices), t(csr.data), csr.shape)
            return lambda: ta @ ta
        entries.append(Entry("PyTorch CSR (int32)", "`A @ A`", torch_csr))
    else:
        entries.append(Entry("PyTorch CSR (int32)", "`A @ A`", status=peers.absent("PyTorch")))
    for fmt in SPGEMM_FORMATS:
        def setup(fmt=fmt):
            a = A if fmt == "CSR" else A.convert(fmt)
            return planned(a, a)
        entries.append(Entry(f"ustc {fmt}", "`Matmul(A, A)` planned, `execute()`", setup, ustc=True))
    # judged too: the whole product at every call (a one-shot call keeps no output structure), which
    # is what the peers compute at every call
    entries.append(Entry("ustc CSR, one-shot", "`ustc.matmul(A, A)`", lambda: lambda: ustc.matmul(A, A),
                         ustc=True))
    return entries


def ewise_entries(S, T, op: str, peers: Peers) -> list[Entry]:
    """``S + T`` or ``S * T`` (element-wise) competitors."""
    add = op == "+"
    A, B = ustc.Tensor.from_package(S), ustc.Tensor.from_package(T)
    entries = [Entry("SciPy", "`A + B`" if add else "`A.multiply(B)`",
                     (lambda: lambda: S + T) if add else (lambda: lambda: S.multiply(T)))]
    if peers.gb is not None:
        gb = peers.gb

        def graphblas():
            Ga, Gb = gb.io.from_scipy_sparse(S), gb.io.from_scipy_sparse(T)
            if add:
                return lambda: Ga.ewise_add(Gb, gb.binary.plus).new()
            return lambda: Ga.ewise_mult(Gb, gb.binary.times).new()
        entries.append(Entry("GraphBLAS", "`A.ewise_add(B, plus).new()`" if add else "`A.ewise_mult(B, times).new()`",
                             graphblas))
    else:
        entries.append(Entry("GraphBLAS", "`ewise_add` / `ewise_mult`", status=NOT_INSTALLED))
    entries.append(Entry("MKL", "—", status="no element-wise add or multiply in sparse_dot_mkl"))
    if peers.pydata is not None:
        pydata = peers.pydata

        def coo():
            pa, pb = pydata.COO.from_scipy_sparse(S), pydata.COO.from_scipy_sparse(T)
            return (lambda: pa + pb) if add else (lambda: pa * pb)
        entries.append(Entry("pydata sparse COO", f"`A {op} B`", coo))
    else:
        entries.append(Entry("pydata sparse COO", f"`A {op} B`", status=NOT_INSTALLED))
    entries.append(Entry("ustc CSR", f"`A {op} B`", (lambda: lambda: A + B) if add else (lambda: lambda: A * B),
                         ustc=True))
    return entries


# -- verdicts --------------------------------------------------------------------------------------


def fastest(entries: list[Entry], names: tuple[str, ...]) -> Entry | None:
    timed = [e for e in entries if e.library in names and e.samples]
    return min(timed, key=lambda e: e.ms) if timed else None


def judge(e: Entry, base: Entry | None, target: float, failures: list[str], what: str) -> tuple[str, str]:
    """(``base / e`` speed-up cell, verdict) for a ustc entry against ``base``; a FAILED ustc call fails."""
    if e.status is not None:
        failures.append(f"{what}: {e.status}")
        return "—", "FAIL"
    if base is None:
        return "—", "— (no peer timed)"
    ratio = base.ms / e.ms
    verdict = "PASS" if ratio >= target else "FAIL"
    if verdict == "FAIL":
        failures.append(f"{what}: {ratio:.2f}× {base.library} (target ≥ {target}×)")
    return f"{ratio:.2f}×", verdict


def time_cell(e: Entry) -> str:
    return e.status if e.status is not None else ms_cell(e.samples)


def small_cell(e: Entry) -> str:
    if e.status is not None:
        return e.status
    q1, q2, q3 = (1e3 * q for q in quartiles(e.samples))
    return f"{q2:.1f} ({q1:.1f}–{q3:.1f})"


# -- report -----------------------------------------------------------------------------------------


def spmv_table(results, triad: float, failures: list[str]) -> list[str]:
    rows = []
    peers = ("MKL", "GraphBLAS", "PyTorch CSR (int32)")
    start = triad
    for label, entries in results:
        best = fastest(entries, peers)
        same = next((e for e in entries if e.library == TRIAD and e.samples), None)
        triad = same.bytes / same.ms / 1e6 if same is not None else start   # else: the run's first triad
        for e in entries:
            gbs = e.bytes / e.ms / 1e6 if e.samples and e.bytes else None
            speed, target, verdict = "—", "—", "—"
            if e.library == "ustc CSR":
                target = f"≥ {SPMV_TARGET}× fastest of MKL, GraphBLAS, PyTorch"
                speed, verdict = judge(e, best, SPMV_TARGET, failures, f"SpMV {label} ustc CSR")
            elif e.library == "ustc DIAI":
                target = f"≥ {DIAI_TARGET:.0%} of triad"
                if e.status is not None:
                    failures.append(f"SpMV {label} ustc DIAI: {e.status}")
                    verdict = "FAIL"
                else:
                    verdict = "PASS" if gbs >= DIAI_TARGET * triad else "FAIL"
                    if verdict == "FAIL":
                        failures.append(f"SpMV {label} ustc DIAI: {gbs / triad:.0%} of the triad (target ≥ 75%)")
                    speed = f"{best.ms / e.ms:.2f}×" if best else "—"
            elif e.samples and best is not None and e.library != TRIAD:
                speed = f"{best.ms / e.ms:.2f}×"
            library = e.library + (f" ({e.route})" if e.route else "")
            moved = f"{e.bytes / 1e6:.0f}" if e.bytes else "—"
            rows.append([label, library, e.call, time_cell(e), moved, f"{gbs:.1f}" if gbs else "—",
                         f"{gbs / triad:.0%}" if gbs else "—", speed, target, verdict])
    return markdown(["matrix", "library", "call", ">ms, median (IQR)", ">MB moved", ">GB/s", ">% of triad",
                     ">fastest peer / this", "target", "verdict"], rows)


def spgemm_table(results, failures: list[str]) -> list[str]:
    rows = []
    peers = ("SciPy", "MKL", "GraphBLAS")
    for label, entries in results:
        best = fastest(entries, peers)
        for e in entries:
            speed, target, verdict = "—", "—", "—"
            if e.ustc and label.startswith("power-law") and e.library == "ustc BSR(2, 2)":
                # no block structure: judged against the one peer computing the same blocked product
                base = next((x for x in entries if x.library == "SciPy BSR(2, 2)" and x.samples), None)
                target = f"≥ {BSR_GRAPH_TARGET}× SciPy BSR(2, 2)"
                speed, verdict = judge(e, base, BSR_GRAPH_TARGET, failures, f"SpGEMM {label} {e.library}")
            elif e.ustc:
                target = f"≥ {SPGEMM_TARGET}× fastest of SciPy, MKL, GraphBLAS"
                speed, verdict = judge(e, best, SPGEMM_TARGET, failures, f"SpGEMM {label} {e.library}")
            elif e.samples and best is not None:
                speed = f"{best.ms / e.ms:.2f}×"
            library = e.library + (f" ({e.route})" if e.route else "")
            rows.append([label, library, e.call, time_cell(e), speed, target, verdict])
    return markdown(["matrix", "library", "call", ">ms, median (IQR)", ">fastest peer / this", "target", "verdict"],
                    rows)


def ewise_table(results, failures: list[str]) -> list[str]:
    rows = []
    for label, op, small, entries in results:
        base_name = "SciPy" if small else "GraphBLAS"
        base = fastest(entries, (base_name,))
        for e in entries:
            speed, target, verdict = "—", "—", "—"
            if e.ustc:
                target = f"≥ {EWISE_TARGET}× {base_name}"
                speed, verdict = judge(e, base, EWISE_TARGET, failures, f"A {op} B {label} ustc")
            elif e.samples and base is not None:
                speed = f"{base.ms / e.ms:.2f}×"
            cell = small_cell(e) if small else time_cell(e)
            unit = "" if e.status is not None else " µs" if small else " ms"
            rows.append([label, f"`A {op} B`", e.library, e.call, cell + unit, speed, target, verdict])
    return markdown(["operands", "op", "library", "call", ">time, median (IQR)", ">reference / this", "target",
                     "verdict"], rows)


def oneshot_table(label: str, entries: list[Entry], failures: list[str]) -> list[str]:
    base = fastest(entries, ("SciPy",))
    rows = []
    for e in entries:
        speed, target, verdict = "—", "—", "—"
        if e.ustc:
            target = f"≥ {ONESHOT_TARGET}× SciPy"
            speed, verdict = judge(e, base, ONESHOT_TARGET, failures, f"one-shot SpMV {label}")
        rows.append([label, e.library, e.call, small_cell(e), speed, target, verdict])
    return markdown(["matrix", "library", "call", ">µs per call, median (IQR)", ">SciPy / this", "target", "verdict"],
                    rows)


def ustc_version() -> str:
    """ustc's version and the commit of this checkout (noting uncommitted changes to the kernels)."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "ustc", "codegen"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"ustc {ustc.__version__}"
    return f"ustc {ustc.__version__} (commit {commit}{' + uncommitted changes in ustc/ or codegen/' if dirty else ''})"


def versions_line(peers: Peers) -> str:
    import numba

    parts = [ustc_version(), f"Numba {numba.__version__} ({numba.config.NUMBA_NUM_THREADS} threads, "
             f"{numba.threading_layer()} layer)", f"NumPy {np.__version__}", f"SciPy {scipy.__version__} (serial)"]
    for name in ("MKL", "GraphBLAS", "PyTorch", "pydata sparse"):
        parts.append(peers.versions.get(name, f"{name} {NOT_INSTALLED}"))
    return "; ".join(parts)


def build_report(run: dict, args) -> tuple[str, list[str]]:
    """The Markdown section (the method paragraph only when every operation ran) and the failures."""
    failures: list[str] = []
    parts = {
        "spmv": ("SpMV `y = A x`, float64 (speed-up over the fastest of MKL, GraphBLAS and PyTorch CSR):",
                 lambda: spmv_table(run["spmv"], run["triad"], failures)),
        "spgemm": ("SpGEMM `A @ A` (speed-up over the fastest of SciPy, MKL and GraphBLAS):",
                   lambda: spgemm_table(run["spgemm"], failures)),
        "ewise": ("Element-wise `A + B` and `A * B`, one-shot (large: ms; 1000²: µs per call; reference: "
                  "GraphBLAS at the large size, SciPy at 1000²):", lambda: ewise_table(run["ewise"], failures)),
        "oneshot": ("One-shot SpMV `ustc.matmul(A, x)` on a small stencil:",
                    lambda: oneshot_table(*run["oneshot"], failures)),
    }
    tables = []
    for name in OPERATIONS:
        if name in run:
            caption, table = parts[name]
            tables += ["", caption, "", *table()]
    verdicts = sum(line.count("| PASS |") + line.count("| FAIL |") for line in tables)
    body = [
        f"Measured {datetime.date.today().isoformat()} on {machine()}; {run.get('versions') or versions_line(run['peers'])}. "
        f"1-minute load average {run['load'][0]:.2f} at the start, {run['load'][1]:.2f} at the end (this "
        f"process included). STREAM triad, same run, {run['threads']} threads: {run['triad']:.1f} GB/s.",
        "", f"**Verdicts: {verdicts - len(failures)} PASS, {len(failures)} FAIL.**", *tables,
    ]
    if all(name in run for name in OPERATIONS):
        body += ["", method(run, args)]
    return "\n".join(body) + "\n", failures


def method(run: dict, args) -> str:
    i = run["inputs"]
    sp_r, sp_k = PER_ROUND["spmv"], PER_ROUND["spgemm"]
    return (
        f"Method. Inputs: the 3-D 7-point stencil (diagonal 6, neighbours -1, float64, int32 indices) of "
        f"side {args.side} ({i['stencil']}) for SpMV and of side {args.spgemm_side} ({i['spgemm_stencil']}) "
        f"for SpGEMM; power-law graphs built by `power_law_csr` (a directed Chung-Lu draw: sources and targets "
        f"drawn independently with probability ∝ rank^(-1/1.2), Zipf degree exponent 2.2, ranks assigned to "
        f"nodes by independent random permutations, repeated edges kept once, values uniform in [0.5, 1.5), "
        f"seed 0) of {args.graph:,} rows with {args.degree} draws a row ({i['graph']}) for SpMV and of "
        f"{args.spgemm_graph:,} rows with {args.spgemm_degree} a row ({i['spgemm_graph']}) for SpGEMM; "
        f"x uniform in [0, 1) (seed 0); for `A + B` and `A * B` two {args.ew_n:,}² matrices with "
        f"{args.ew_n * args.ew_per_row:,} entries each at distinct uniform random positions (seeds 1 and 2, "
        f"N(0, 1) values, independent patterns) and two {args.small_n:,}² at 1% ({args.small_n ** 2 // 100:,} "
        f"entries each, same construction). Calls are written as users write them: ustc operands are "
        f"`ustc.Tensor.from_package(scipy_csr)` (zero-copy), converted once to DIAI, DCSR, COO or BSR(2, 2) "
        f"outside the timing; planned rows are `ustc.Matmul(A, b).plan()` once and `execute()` timed (a planned "
        f"SpGEMM executed again keeps its output structure and runs only the numeric pass while the operands' "
        f"structure, compared with a copy at every execute, is unchanged; the row `ustc CSR, one-shot` "
        f"`ustc.matmul(A, A)` computes the whole product at every call, as the peers do, and is judged too); "
        f"element-wise rows are the operators `A + B`, `A * B` on ustc Tensors (binding, kernel lookup and "
        f"result assembly included) and the one-shot row is `ustc.matmul(A, x)`. Peers' operands are made "
        f"once outside the timing (GraphBLAS matrices by `graphblas.io.from_scipy_sparse`, which stores int64 "
        f"indices; PyTorch CSR tensors sharing the SciPy int32 buffers; pydata `COO.from_scipy_sparse`); "
        f"`dot_product_mkl` is timed as called, handle creation included. sparse_dot_mkl has no element-wise "
        f"add or multiply, so MKL has no row there; pydata sparse is not timed on SpGEMM (seconds per call at "
        f"these sizes, ~20× SciPy at side 60). Checks: every call's result (ustc's and the peers') was first "
        f"compared with SciPy's — dense results within 1e-12 of the largest |entry|, sparse ones entry for "
        f"entry (explicitly stored zeros allowed), the route ustc chose shown beside its name; a call that "
        f"raised or differed is a FAILED row and is not timed (for ustc, a FAIL verdict). Timing: the calls "
        f"of one operation are timed together in {args.rounds} rounds, the order reversed every other round; "
        f"in each round every call gets a {args.settle:g} s pause (so the previous library's OpenMP threads "
        f"stop spinning), one untimed call, then timed samples with `gc.collect()` before each: "
        f"{sp_r[0]} a round for SpMV and element-wise ({PER_ROUND['ewise'][0]}), {sp_k[0]} for SpGEMM; at 1000² "
        f"and in the one-shot row each sample is the mean of {PER_ROUND['small'][1]} (resp. "
        f"{PER_ROUND['oneshot'][1]}) back-to-back calls. Tables give the median and interquartile range of "
        f"the samples; ratios are of medians. Results are each library's own: SciPy's, MKL's and GraphBLAS's "
        f"SpGEMM may leave columns unsorted, ustc's CSR is sorted. Threads: every library on "
        f"{run['threads']} threads (Numba's count: `mkl_set_num_threads`, GraphBLAS `nthreads`, "
        f"`torch.set_num_threads`); SciPy is serial. Bytes moved (SpMV): values + column indices + row "
        f"pointers of the CSR with int32 indices + x read once + y written once, each byte counted once, "
        f"for every CSR or COO peer (the least any of them must move; GraphBLAS reads int64 indices, so it "
        f"moves more); DIAI: `Tensor.nbytes` of the DIAI tensor (padded diagonals and offsets) + x + y. "
        f"GB/s = bytes / median time; % of the STREAM triad `a[i] = b[i] + 1.5 c[i]` (a parallel Numba loop "
        f"on {args.bw_mb} MB float64 arrays, 3 × 8 bytes an element) timed in the same alternating rounds "
        f"as the stencil's SpMV calls (its row `{TRIAD}`; the triad in the first line was measured once at "
        f"the start of the run and is the reference of the power-law rows).")


# -- main -------------------------------------------------------------------------------------------


def parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"small sizes, a smoke run: {QUICK}")
    ap.add_argument("--side", type=int, help=f"stencil side for SpMV ({FULL['side']})")
    ap.add_argument("--graph", type=int, help=f"rows of the power-law graph for SpMV ({FULL['graph']})")
    ap.add_argument("--spgemm-side", type=int, help=f"stencil side for SpGEMM ({FULL['spgemm_side']})")
    ap.add_argument("--spgemm-graph", type=int, help=f"rows of the power-law graph for SpGEMM ({FULL['spgemm_graph']})")
    ap.add_argument("--rounds", type=int, help=f"alternating rounds per operation ({FULL['rounds']})")
    ap.add_argument("--only", default=",".join(OPERATIONS), metavar="OPS",
                    help=f"comma-separated operations to measure, of {','.join(OPERATIONS)} (all)")
    ap.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    ap.add_argument("--write", action="store_true", help=f"replace the '{TITLE}' section of docs/benchmarks.md")
    args = ap.parse_args(argv)
    if args.quick and args.write:
        ap.error("--quick is a smoke run; it does not --write")
    args.only = {name.strip() for name in args.only.split(",") if name.strip()}
    if args.only - set(OPERATIONS):
        ap.error(f"--only takes {', '.join(OPERATIONS)}; not {', '.join(sorted(args.only - set(OPERATIONS)))}")
    if args.write and args.only != set(OPERATIONS):
        ap.error("--write replaces the whole section; measure every operation (no --only)")
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    return args


def measure_spmv(run: dict, peers: Peers, args) -> None:
    x_rng = np.random.default_rng(0)
    run["spmv"] = []
    for label, make, diai in ((f"stencil {args.side}³", lambda: stencil_csr(args.side), True),
                              (f"power-law {args.graph:,}", lambda: power_law_csr(args.graph, args.degree), False)):
        csr = make()
        run["inputs"]["stencil" if diai else "graph"] = describe(csr)
        print(f"SpMV, {label}: {describe(csr)}", flush=True)
        x = x_rng.random(csr.shape[1])
        ref = csr @ x
        run["spmv"].append((label, run_operation(label, spmv_entries(csr, x, peers, diai, args.bw_mb),
                                                 lambda y: dense_mismatch(y, ref), "spmv", args)))
        del csr, x, ref


def measure_spgemm(run: dict, peers: Peers, args) -> None:
    run["spgemm"] = []
    for label, make, key in ((f"stencil {args.spgemm_side}³", lambda: stencil_csr(args.spgemm_side), "spgemm_stencil"),
                             (f"power-law {args.spgemm_graph:,}",
                              lambda: power_law_csr(args.spgemm_graph, args.spgemm_degree, seed=1), "spgemm_graph")):
        csr = make()
        ref = csr @ csr
        run["inputs"][key] = f"{describe(csr)}; A @ A has {ref.nnz:,} nonzeros"
        print(f"SpGEMM, {label}: {run['inputs'][key]}", flush=True)
        run["spgemm"].append((label, run_operation(label, spgemm_entries(csr, peers),
                                                   lambda c: sparse_mismatch(c, ref, 1e-12), "spgemm", args)))
        del csr, ref


def measure_ewise(run: dict, peers: Peers, args) -> None:
    run["ewise"] = []
    for n, per_row, small in ((args.ew_n, args.ew_per_row, False), (args.small_n, args.small_n // 100, True)):
        S, T = random_csr(n, per_row, 1), random_csr(n, per_row, 2)
        label = f"{n:,}², {S.nnz:,} + {T.nnz:,} entries"
        print(f"element-wise, {label}", flush=True)
        for op in ("+", "*"):
            ref = S + T if op == "+" else S.multiply(T)
            entries = run_operation(f"{label} A {op} B", ewise_entries(S, T, op, peers),
                                    lambda c: sparse_mismatch(c, ref, 0.0), "small" if small else "ewise", args)
            run["ewise"].append((label, op, small, entries))
        del S, T, ref


def measure_oneshot(run: dict, peers: Peers, args) -> None:
    csr = stencil_csr(args.oneshot_side)
    x = np.random.default_rng(0).random(csr.shape[1])
    ref = csr @ x
    A = ustc.Tensor.from_package(csr)
    label = f"stencil {args.oneshot_side}³ ({csr.shape[0]:,} rows)"
    print(f"one-shot SpMV, {label}", flush=True)
    run["oneshot"] = (label, run_operation(label, [Entry("SciPy", "`A @ x`", lambda: lambda: csr @ x),
                                                   Entry("ustc CSR", "`ustc.matmul(A, x)`",
                                                         lambda: lambda: ustc.matmul(A, x), ustc=True)],
                                           lambda y: dense_mismatch(y, ref), "oneshot", args))


MEASURE = {"spmv": measure_spmv, "spgemm": measure_spgemm, "ewise": measure_ewise, "oneshot": measure_oneshot}


def main(argv=None) -> int:
    args = parse(argv)
    import numba

    threads = numba.config.NUMBA_NUM_THREADS
    started = time.perf_counter()
    run = {"load": [os.getloadavg()[0]], "threads": threads, "inputs": {}}
    run["peers"] = peers = load_peers(threads, use_torch=not args.no_torch)
    print(machine())
    print(f"load average (1 min) at start: {run['load'][0]:.2f}")
    run["triad"] = stream_triad_gbs(threads, args.bw_mb)
    print(f"STREAM triad on {threads} threads: {run['triad']:.1f} GB/s")
    run["versions"] = versions_line(peers)   # the code measured: read before the run, not when writing
    print(run["versions"])
    for name in OPERATIONS:
        if name in args.only:
            MEASURE[name](run, peers, args)

    run["load"].append(os.getloadavg()[0])
    body, failures = build_report(run, args)
    print(f"\nmeasured in {time.perf_counter() - started:.0f} s\n")
    print(body)
    print(f"{len(failures)} FAIL" + "".join(f"\n  {f}" for f in failures))
    if args.write:
        print(f"wrote {write_section(TITLE, body)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
