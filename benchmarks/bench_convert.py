"""Format conversion: ustc against SciPy (PyTorch for context): time with its spread, peak memory, bandwidth.

    python benchmarks/bench_convert.py [--quick] [--dense N] [--banded N] [--side N] [--random N]
                                       [--mm-side N] [--rounds R] [--per-round K] [--no-torch]
                                       [--only TEXT ...] [--no-products] [--write]

``--only "stencil 114³ CSR -> COO"`` (repeatable, a substring of the case's name) measures a subset.

Every conversion is measured as a user writes it: ``Tensor.from_package(x).convert(fmt)`` with ``x``
the SciPy / NumPy object (the zero-copy ``from_package`` inside the timing), against SciPy's own call on
the same ``x``. The peers of one case (ustc, SciPy and the context calls) are timed in alternating
rounds (``_common.interleaved_samples``); tables give the median and the interquartile range.

Inputs: an ``N x N`` float32 array with 90% zeros (``--dense``, default 8192); a banded ``N x N``
float32 array, 5 diagonals (``--banded``, default 4096, for dense -> DIA only: on the random array
every diagonal is occupied); the 3-D 7-point stencil of side ``--side`` (default 114: 1.48M rows, 10.3M
nonzeros, float64); a random ``N x N`` float64 CSR with ``10 N`` entries (``--random``, default 200000).

Cases, with their targets:

* dense -> CSR / CSC / COO / BSR(4, 4) (SciPy ``csr_array(x)`` ...), banded -> DIAJ (``dia_array(x)``);
  context: ustc ``Tensor.from_dense(x, fmt)`` and PyTorch ``to_sparse_*``;
* CSR <-> CSC <-> COO, all six ordered pairs, on the stencil and on the random matrix (SciPy
  ``tocsr()`` / ``tocsc()`` / ``tocoo()``); context: PyTorch on tensors sharing the buffers;
* stencil CSR -> BSR(2, 2), BSR(4, 4), COO -> BSR(4, 4) (``tobsr(blocksize=...)``), CSR -> DIAJ and
  DIAI (``todia()``; DIAJ is SciPy's layout);
* stencil ``ustc.einsum("ij->ij", A, out_format="CSC")`` (A the CSR) against SciPy ``tocsc()``;
  context: ``A.convert("CSC")``.
* stencil BSR(2, 2), DIAJ (SciPy's ``tobsr`` / ``todia`` of the CSR), DIAI and DCSR (ustc tensors made
  once) -> CSR against ``bsr.tocsr()``, ``dia.tocsr()`` (SciPy has no DCSR: ``coo.tocsr()``);
  CSR <-> COO context: ustc ``convert(fmt, copy=False)`` (shares column coordinates and values,
  as SciPy's ``tocoo()`` does by default) and SciPy ``tocoo(copy=True)``.
  Targets: ustc time <= 1.0x SciPy's; ustc extra peak memory <= 1.2x the output size; bytes in + out
  over time >= 40% of the one-thread triad bandwidth measured in the same run (sparse inputs).
* SpGEMM ``ustc.matmul(A, A)`` and SpMM ``ustc.matmul(A, X)`` (X dense, 64 float64 columns) with A
  the stencil of side ``--mm-side`` (default 80: 512k rows) in CSR, DCSR, DIAI, COO and BSR(2, 2)
  (converted once, untimed): each format's time <= 1.3x CSR's. SciPy ``A @ A``, ``A @ X`` for context.

Every ustc result is first checked equal to SciPy's (buffer for buffer where the formats match, else
entry for entry); a ustc call that raises or differs is reported as a FAIL row, not timed.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import scipy
import scipy.sparse as sp

import ustc
from ustc import Tensor
from ustc.tensor.interop import plain_format
from ustc.tensor.tensor import as_format

from _common import (extra_peak, interleaved_samples, machine, quartiles, stream_triad_gbs,
                     tracemalloc_sees_numba, write_section)

MB = 1e6
TIME_TARGET, MEMORY_TARGET, BANDWIDTH_TARGET, FORMAT_TARGET = 1.0, 1.2, 0.40, 1.3
SMALL = 2**22  # compare through to_dense up to this many matrix entries
USTC, SCIPY = "ustc", "SciPy"
FULL = dict(dense=8192, banded=4096, side=114, random=200_000, mm_side=80, rounds=5, per_round=3, bw_mb=200)
QUICK = dict(dense=1024, banded=512, side=20, random=20_000, mm_side=16, rounds=2, per_round=2, bw_mb=64)


# -- inputs ---------------------------------------------------------------------------


def dense_input(n: int, zeros: float = 0.9, seed: int = 0) -> np.ndarray:
    """``n x n`` float32, each entry zero with probability ``zeros`` (uniform), else a N(0, 1) draw."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, n), dtype=np.float32)
    x[rng.random((n, n), dtype=np.float32) < zeros] = 0
    x[x == 0] = 0  # (no -0.0)
    return x


def band_offsets(n: int) -> tuple[int, ...]:
    """The diagonals of :func:`banded_input`: 0, +-1 and +-floor(sqrt(n)) (a 2-D 5-point pattern)."""
    w = max(2, math.isqrt(n))
    return (-w, -1, 0, 1, w)


def banded_input(n: int, seed: int = 0) -> np.ndarray:
    """``n x n`` float32, N(0, 1) draws (never zero) on the diagonals :func:`band_offsets`, zero elsewhere."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, n), dtype=np.float32)
    rows = np.arange(n)
    for off in band_offsets(n):
        r = rows[max(0, -off):n - max(0, off)]
        v = rng.standard_normal(len(r), dtype=np.float32)
        x[r, r + off] = np.where(v == 0, 1, v)
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


def random_csr(n: int, per_row: int = 10, seed: int = 0) -> sp.csr_array:
    """``n x n`` canonical float64 CSR with exactly ``per_row * n`` entries at distinct uniform random
    positions (int32 indices, N(0, 1) values), built with NumPy: sorted linear positions give the
    entries in row-major order directly."""
    rng = np.random.default_rng(seed)
    flat = np.sort(rng.choice(n * n, size=per_row * n, replace=False, shuffle=False))
    rows, cols = np.divmod(flat, n)
    indptr = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    values = rng.standard_normal(len(flat))
    values[values == 0] = 1
    csr = sp.csr_array((values, cols.astype(np.int32), indptr), shape=(n, n))
    assert csr.has_canonical_format
    return csr


# -- checking results -------------------------------------------------------------------


def package_nbytes(x) -> int:
    """Bytes of a NumPy array, a ustc Tensor, or a SciPy sparse array's data and index arrays."""
    if isinstance(x, (np.ndarray, Tensor)):
        return x.nbytes
    if x.format == "coo":
        arrays = (x.data, *x.coords)
    elif x.format == "dia":
        arrays = (x.data, x.offsets)
    else:
        arrays = (x.data, x.indices, x.indptr)
    return sum(a.nbytes for a in arrays)


def scipy_buffers(m) -> list[np.ndarray]:
    if m.format == "coo":
        return [*m.coords, m.data]
    if m.format == "dia":
        return [m.offsets, m.data]
    return [m.indptr, m.indices, m.data]


def scipy_view(t: Tensor):
    """``t.to_package()`` when that is a SciPy sparse array (CSR, CSC, COO, BSR, DIAJ), else None."""
    try:
        view = t.to_package()
    except ustc.errors.UnsupportedOperation:
        return None
    return view if sp.issparse(view) else None


def entries_coo(t: Tensor) -> sp.coo_array:
    """A SciPy COO of ``t``'s stored entries (``Tensor.entries``: formats SciPy has no class for)."""
    coords, values = t.entries()
    return sp.coo_array((values, coords), shape=t.shape)


def mismatch(t, ref) -> str | None:
    """None when ustc's ``t`` holds the same matrix as SciPy's ``ref``, else what differs. Small
    matrices are compared dense; large ones buffer for buffer when ``t``'s SciPy view has ``ref``'s
    format (and layout), else entry for entry (``(a != b).nnz == 0``)."""
    if not isinstance(t, Tensor):
        return f"returned {type(t).__name__}, not a Tensor"
    if tuple(t.shape) != tuple(ref.shape) or t.dtype != ref.dtype:
        return f"got {t.shape} {t.dtype}, expected {ref.shape} {ref.dtype}"
    if math.prod(t.shape) <= SMALL:
        return None if np.array_equal(t.to_dense(), ref.toarray()) else "values differ (to_dense)"
    mine = scipy_view(t)
    if mine is not None and mine.format == ref.format and all(
            np.array_equal(a, b) for a, b in zip(scipy_buffers(mine), scipy_buffers(ref))):
        return None
    mine = entries_coo(t) if mine is None else mine
    return None if (mine != ref).nnz == 0 else "entries differ from SciPy's"


def wrong_format(t, fmt: str | None) -> str | None:
    """None when ``t`` is a Tensor in ``fmt`` (level properties and index widths aside), else what it is."""
    if fmt is None or not isinstance(t, Tensor) or plain_format(t.format) == plain_format(as_format(fmt)):
        return None
    return f"returned format {t.format}, not {fmt}"


def dense_mismatch(y, ref: np.ndarray) -> str | None:
    y = np.asarray(y)
    return None if y.shape == ref.shape and np.allclose(y, ref) else "values differ from SciPy's"


def attempt(fn: Callable) -> tuple[object, str | None]:
    """``(fn(), None)``, or ``(None, 'Error: message')`` when it raises."""
    try:
        return fn(), None
    except Exception as exc:  # noqa: BLE001  (a failing library call is a result to report)
        text = " ".join(f"{type(exc).__name__}: {exc}".split())
        return None, text[:150] + ("..." if len(text) > 150 else "")


def working(fns: dict[str, Callable]) -> dict[str, Callable]:
    """The context calls that run (one untimed call each); the others are reported and dropped."""
    kept = {}
    for name, fn in fns.items():
        _, error = attempt(fn)
        if error is None:
            kept[name] = fn
        else:
            print(f"    (context {name} skipped: {error})")
    return kept


# -- conversion cases -------------------------------------------------------------------


@dataclass
class Case:
    """One conversion: the ustc call against SciPy's on the same input ``source``."""

    input: str
    conversion: str
    ustc: Callable
    peer_call: str
    peer: Callable
    source: object
    context: dict[str, Callable] = field(default_factory=dict)
    fmt: str | None = None  # the ustc format asked for
    samples: dict[str, list[float]] = field(default_factory=dict)
    in_bytes: int = 0  # the source's buffers (the source itself is dropped once measured)
    sparse_input: bool = True
    error: str | None = None
    peer_error: str | None = None
    out_bytes: int = 0
    extra: int = 0
    peer_memory: tuple[int, int] | None = None  # SciPy's (extra peak, output bytes)

    @property
    def name(self) -> str:
        return f"{self.input} {self.conversion}"

    def ms(self, who: str) -> float:
        return quartiles(self.samples[who])[1]


def convert_case(input_label, conversion, x, fmt, peer_call, peer, context=None) -> Case:
    return Case(input_label, conversion, lambda: Tensor.from_package(x).convert(fmt), peer_call, peer, x,
                context or {}, fmt)


def measure(case: Case, timing: tuple[int, int]) -> None:
    """Check ustc's result against SciPy's, time the working calls in alternating rounds, then
    measure extra peak memory (separate calls); the case's input and callables are dropped afterwards."""
    ref, case.peer_error = attempt(case.peer)
    result, case.error = attempt(case.ustc)
    if case.error is None and ref is not None:
        case.error = wrong_format(result, case.fmt) or mismatch(result, ref)
    case.out_bytes = result.nbytes if case.error is None else 0
    del ref, result
    fns = {USTC: case.ustc} if case.error is None else {}
    fns.update({SCIPY: case.peer} if case.peer_error is None else {})
    fns.update(working(case.context))
    case.samples = interleaved_samples(fns, *timing)
    if case.error is None:
        case.extra = extra_peak(case.ustc)[1]
    if case.peer_error is None:
        out, extra = extra_peak(case.peer)
        case.peer_memory = (extra, package_nbytes(out))
        del out
    case.in_bytes, case.sparse_input = package_nbytes(case.source), not isinstance(case.source, np.ndarray)
    case.ustc = case.peer = case.source = None
    case.context = {}
    print_case(case)


def print_case(case: Case) -> None:
    parts = [f"{who} {ms_cell(s)} ms" for who, s in case.samples.items()]
    if case.error is not None:
        parts.insert(0, f"ustc FAILED: {case.error}")
    if case.peer_error is not None:
        parts.append(f"SciPy FAILED: {case.peer_error}")
    if case.error is None:
        parts.append(f"extra peak / output {case.extra / case.out_bytes:.2f}")
    print(f"  {case.name}: " + "; ".join(parts), flush=True)


# -- PyTorch context ----------------------------------------------------------------------

TORCH_CALLS = {"CSR": ("to_sparse_csr()", lambda t: t.to_sparse_csr()),
               "CSC": ("to_sparse_csc()", lambda t: t.to_sparse_csc()),
               "COO": ("to_sparse()", lambda t: t.to_sparse()),
               "BSR(4, 4)": ("to_sparse_bsr((4, 4))", lambda t: t.to_sparse_bsr((4, 4)))}


def torch_of(torch, x):
    """A torch tensor sharing ``x``'s buffers (COO: int64 indices, as torch requires, so a copy)."""
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    t = torch.from_numpy
    if x.format == "coo":
        idx = t(np.stack([c.astype(np.int64) for c in x.coords]))
        return torch.sparse_coo_tensor(idx, t(x.data), x.shape, is_coalesced=True)
    make = torch.sparse_csr_tensor if x.format == "csr" else torch.sparse_csc_tensor
    return make(t(x.indptr), t(x.indices), t(x.data), x.shape)


def torch_context(tx, fmt: str) -> dict[str, Callable]:
    """``{'torch <call>': fn}`` converting the torch tensor ``tx`` to ``fmt`` ({} without torch)."""
    if tx is None or fmt not in TORCH_CALLS:
        return {}
    call, fn = TORCH_CALLS[fmt]
    return {f"torch `{call}`": functools.partial(fn, tx)}


# -- building the cases ------------------------------------------------------------------

DENSE_PEERS = {"CSR": ("`csr_array(x)`", sp.csr_array), "CSC": ("`csc_array(x)`", sp.csc_array),
               "COO": ("`coo_array(x)`", sp.coo_array),
               "BSR(4, 4)": ("`bsr_array(x, blocksize=(4, 4))`", functools.partial(sp.bsr_array, blocksize=(4, 4)))}
METHODS = {"CSR": "tocsr", "CSC": "tocsc", "COO": "tocoo"}


def dense_cases(x: np.ndarray, banded: np.ndarray, torch) -> list[Case]:
    label = f"dense {len(x)}² f32"
    tx = torch_of(torch, x) if torch is not None else None
    cases = [convert_case(label, f"dense -> {fmt}", x, fmt, call, functools.partial(cls, x),
                          {f"ustc `from_dense(x, \"{fmt}\")`": functools.partial(Tensor.from_dense, x, fmt),
                           **torch_context(tx, fmt)})
             for fmt, (call, cls) in DENSE_PEERS.items()]
    cases.append(convert_case(f"banded {len(banded)}² f32", "dense -> DIAJ", banded, "DIAJ", "`dia_array(x)`",
                              functools.partial(sp.dia_array, banded)))
    return cases


def compressed_sources(csr) -> dict[str, object]:
    coo = csr.tocoo()
    assert coo.has_canonical_format
    return {"CSR": csr, "CSC": csr.tocsc(), "COO": coo}


def family_cases(label: str, sources: dict, torch) -> list[Case]:
    """The six ordered pairs among CSR, CSC and canonical COO."""
    cases = []
    for s, x in sources.items():
        tx = torch_of(torch, x) if torch is not None else None
        for d in sources:
            if d != s:
                method = METHODS[d]
                context = torch_context(tx, d)
                if {s, d} == {"CSR", "COO"}:  # SciPy's tocoo() shares indices and data; ustc on request
                    context[f"ustc `convert(\"{d}\", copy=False)`"] = \
                        functools.partial(lambda x, d: Tensor.from_package(x).convert(d, copy=False), x, d)
                    if d == "COO":
                        context["SciPy `csr.tocoo(copy=True)`"] = functools.partial(x.tocoo, copy=True)
                cases.append(convert_case(label, f"{s} -> {d}", x, d, f"`{s.lower()}.{method}()`",
                                          getattr(x, method), context))
    return cases


def into_csr_cases(label: str, sources: dict) -> list[Case]:
    """BSR(2, 2), DIAJ, DIAI and DCSR into CSR (SciPy has no DCSR: its peer is ``coo.tocsr()``, the
    nearest source SciPy has whose rows are sorted)."""
    csr, coo = sources["CSR"], sources["COO"]
    bsr, dia = csr.tobsr(blocksize=(2, 2)), csr.todia()
    diai, dcsr = Tensor.from_package(csr).convert("DIAI"), Tensor.from_package(csr).convert("DCSR")
    return [convert_case(label, "BSR(2, 2) -> CSR", bsr, "CSR", "`bsr.tocsr()`", bsr.tocsr),
            convert_case(label, "DIAJ -> CSR", dia, "CSR", "`dia.tocsr()`", dia.tocsr),
            Case(label, "DIAI -> CSR", lambda: diai.convert("CSR"), "`dia.tocsr()`", dia.tocsr, diai, {}, "CSR"),
            Case(label, "DCSR -> CSR", lambda: dcsr.convert("CSR"), "`coo.tocsr()` (no DCSR in SciPy)", coo.tocsr,
                 dcsr, {}, "CSR")]


def stencil_extra_cases(label: str, sources: dict) -> list[Case]:
    """Block and diagonal targets of the stencil, and the einsum copy into CSC."""
    csr, coo = sources["CSR"], sources["COO"]

    def bsr(name, x, b):
        return convert_case(label, f"{name} -> BSR({b}, {b})", x, f"BSR({b}, {b})",
                            f"`{name.lower()}.tobsr(blocksize=({b}, {b}))`",
                            functools.partial(x.tobsr, blocksize=(b, b)))

    a = Tensor.from_package(csr)
    einsum = Case(label, "CSR -> CSC by `einsum(\"ij->ij\")`", lambda: ustc.einsum("ij->ij", a, out_format="CSC"),
                  "`csr.tocsc()`", csr.tocsc, csr, {"ustc `A.convert(\"CSC\")`": lambda: a.convert("CSC")}, "CSC")
    return [bsr("CSR", csr, 2), bsr("CSR", csr, 4), bsr("COO", coo, 4),
            convert_case(label, "CSR -> DIAJ", csr, "DIAJ", "`csr.todia()`", csr.todia),
            convert_case(label, "CSR -> DIAI", csr, "DIAI", "`csr.todia()`", csr.todia), einsum]


def run_conversions(args, torch, timing) -> tuple[list[Case], dict]:
    """Build each input, measure its cases, and free it before the next one."""
    cases, info = [], {}

    def run(group):
        for case in group:
            if args.only and not any(text in case.name for text in args.only):
                continue
            measure(case, timing)
            cases.append(case)

    print(f"dense {args.dense}² float32 (90% zeros) and banded {args.banded}² float32:", flush=True)
    x = dense_input(args.dense)
    info["dense_nnz"] = int(np.count_nonzero(x))
    run(dense_cases(x, banded_input(args.banded), torch))
    del x
    csr = stencil_csr(args.side)
    info["stencil"] = (csr.shape[0], csr.nnz)
    print(f"7-point stencil side {args.side}: {csr.shape[0]:,} rows, {csr.nnz:,} nonzeros:", flush=True)
    sources = compressed_sources(csr)
    run(family_cases(f"stencil {args.side}³", sources, torch) + stencil_extra_cases(f"stencil {args.side}³", sources)
        + into_csr_cases(f"stencil {args.side}³", sources))
    del csr, sources
    csr = random_csr(args.random)
    info["random"] = (csr.shape[0], csr.nnz)
    print(f"random {args.random:,}²: {csr.nnz:,} nonzeros:", flush=True)
    run(family_cases(f"random {args.random:,}²", compressed_sources(csr), torch))
    return cases, info


# -- products across formats -------------------------------------------------------------

MM_FORMATS = ("CSR", "DCSR", "DIAI", "COO", "BSR(2, 2)")


@dataclass
class Product:
    """One ustc operation over A in each format of ``MM_FORMATS`` (SciPy for context)."""

    name: str
    peer_call: str
    samples: dict[str, list[float]]
    errors: dict[str, str]


def measure_product(name, peer_call, operands, op, peer, check, timing) -> Product:
    """Check ``op(A)`` for every format of A against SciPy's ``peer()``, then time the working ones
    and SciPy in alternating rounds."""
    ref = peer()
    fns, errors = {}, {}
    for fmt, a in operands.items():
        got, error = (None, a) if isinstance(a, str) else attempt(functools.partial(op, a))
        error = error or check(got, ref)
        if error is None:
            fns[fmt] = functools.partial(op, a)
        else:
            errors[fmt] = error
    del ref, got
    fns[SCIPY] = peer
    product = Product(name, peer_call, interleaved_samples(fns, *timing), errors)
    for fmt in MM_FORMATS:
        cell = ms_cell(product.samples[fmt]) if fmt in product.samples else f"FAILED: {errors[fmt]}"
        print(f"  {name} {fmt}: {cell}", flush=True)
    return product


def run_products(side: int, timing) -> tuple[list[Product], tuple[int, int]]:
    csr = stencil_csr(side)
    print(f"products, 7-point stencil side {side}: {csr.shape[0]:,} rows, {csr.nnz:,} nonzeros:", flush=True)
    a = Tensor.from_package(csr)
    operands = {}
    for fmt in MM_FORMATS:
        t, error = attempt(functools.partial(a.convert, fmt))
        operands[fmt] = error or t
    x = np.random.default_rng(0).standard_normal((csr.shape[0], 64))
    products = [measure_product("SpGEMM A @ A", "`csr @ csr`", operands, lambda t: ustc.matmul(t, t),
                                lambda: csr @ csr, mismatch, timing),
                measure_product("SpMM A @ X", "`csr @ X`", operands, lambda t: ustc.matmul(t, x),
                                lambda: csr @ x, dense_mismatch, timing)]
    return products, (csr.shape[0], csr.nnz)


# -- report -----------------------------------------------------------------------------


def ms_cell(samples: list[float]) -> str:
    """``median (q1–q3)`` in ms."""
    q1, q2, q3 = quartiles(samples)
    return f"{q2:.1f} ({q1:.1f}–{q3:.1f})"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def markdown(columns: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table; columns whose name starts with '>' are right-aligned."""
    names = [c.removeprefix(">") for c in columns]
    aligns = ["---:" if c.startswith(">") else "---" for c in columns]
    lines = [names, aligns] + [[cell.replace("|", "\\|") for cell in row] for row in rows]
    return ["| " + " | ".join(line) + " |" for line in lines]


class Verdicts(list):
    def add(self, what: str, ok: bool) -> str:
        v = verdict(ok)
        self.append(f"{what}: {v}")
        return v


def time_rows(cases: list[Case], verdicts: Verdicts) -> list[list[str]]:
    rows = []
    for c in cases:
        peer = f"FAILED: {c.peer_error}" if c.peer_error else ms_cell(c.samples[SCIPY])
        if c.error is not None:
            ustc_cell, ratio, v = f"FAILED: {c.error}", "—", verdicts.add(f"{c.name} time", False)
        elif c.peer_error is not None:
            ustc_cell, ratio, v = ms_cell(c.samples[USTC]), "—", "—"
        else:
            r = c.ms(USTC) / c.ms(SCIPY)
            ustc_cell, ratio, v = ms_cell(c.samples[USTC]), f"{r:.2f}x", verdicts.add(f"{c.name} time",
                                                                                       r <= TIME_TARGET)
        rows.append([c.input, c.conversion, ustc_cell, c.peer_call, peer, ratio, v])
    return rows


def memory_rows(cases: list[Case], bandwidth: dict[int, float], verdicts: Verdicts) -> list[list[str]]:
    one, most = bandwidth[1], bandwidth[max(bandwidth)]
    rows = []
    for c in cases:
        if c.error is not None:
            rows.append([c.input, c.conversion, "—", "—", "—", "FAIL", "—", "—", "—", "—", "—"])
            continue
        ratio = c.extra / c.out_bytes
        mem_v = verdicts.add(f"{c.name} extra peak", ratio <= MEMORY_TARGET)
        peer = f"{c.peer_memory[0] / c.peer_memory[1]:.2f}" if c.peer_memory else "—"
        gbs = (c.in_bytes + c.out_bytes) / c.ms(USTC) / 1e6
        bw_v = verdicts.add(f"{c.name} bandwidth", gbs >= BANDWIDTH_TARGET * one) if c.sparse_input \
            else "— (dense input)"
        rows.append([c.input, c.conversion, f"{c.out_bytes / MB:.1f}", f"{c.extra / MB:.1f}", f"{ratio:.2f}",
                     mem_v, peer, f"{gbs:.1f}", f"{gbs / one:.0%}", f"{gbs / most:.0%}", bw_v])
    return rows


def context_rows(cases: list[Case]) -> list[list[str]]:
    rows = []
    for c in cases:
        extra = [f"{who}: {ms_cell(s)}" for who, s in c.samples.items() if who not in (USTC, SCIPY)]
        if extra:
            mine = ms_cell(c.samples[USTC]) if USTC in c.samples else "FAILED"
            rows.append([c.input, c.conversion, mine, "; ".join(extra)])
    return rows


def product_rows(products: list[Product], verdicts: Verdicts) -> list[list[str]]:
    rows = []
    for p in products:
        base = quartiles(p.samples["CSR"])[1] if "CSR" in p.samples else None
        for fmt in MM_FORMATS:
            if fmt not in p.samples:
                rows.append([p.name, fmt, f"FAILED: {p.errors[fmt]}", "—", verdicts.add(f"{p.name} {fmt}", False)])
                continue
            ratio = quartiles(p.samples[fmt])[1] / base if base else None
            v = verdicts.add(f"{p.name} {fmt} / CSR", ratio <= FORMAT_TARGET) if ratio else "—"
            rows.append([p.name, fmt, ms_cell(p.samples[fmt]), f"{ratio:.2f}x" if ratio else "—", v])
        scipy_ratio = f"{quartiles(p.samples[SCIPY])[1] / base:.2f}x" if base else "—"
        rows.append([p.name, f"SciPy {p.peer_call} (context)", ms_cell(p.samples[SCIPY]), scipy_ratio, "—"])
    return rows


def dense_ratio_line(cases: list[Case], verdicts: Verdicts) -> list[str]:
    """The earlier ustc-internal target: dense -> CSR within 1.2x of dense -> COO."""
    by = {c.conversion: c for c in cases if c.input.startswith("dense") and c.error is None}
    if "dense -> CSR" not in by or "dense -> COO" not in by:
        return []
    r = by["dense -> CSR"].ms(USTC) / by["dense -> COO"].ms(USTC)
    v = verdicts.add("ustc dense -> CSR / dense -> COO", r <= 1.2)
    return ["", f"ustc dense → CSR over ustc dense → COO (same call, other format): {r:.2f}× "
                f"(target ≤ 1.2×) {v}."]


def bandwidth_text(bandwidth: dict[int, float]) -> str:
    return ", ".join(f"{v:.1f} GB/s on {k} thread{'s' if k > 1 else ''}" for k, v in bandwidth.items())


def versions(torch) -> str:
    import numba

    torch_v = f"torch {torch.__version__} ({torch.get_num_threads()} threads)" if torch else "torch not used"
    return (f"ustc {ustc.__version__}, NumPy {np.__version__}, SciPy {scipy.__version__}, "
            f"Numba {numba.__version__} ({numba.config.NUMBA_NUM_THREADS} threads), {torch_v}")


def build_report(cases, products, info, args, run) -> tuple[str, Verdicts]:
    verdicts = Verdicts()
    bw = run["bandwidth"]
    t1 = markdown(["input", "conversion", ">ustc ms (IQR)", "SciPy call", ">SciPy ms (IQR)", ">ustc / SciPy",
                   f"≤ {TIME_TARGET}×"], time_rows(cases, verdicts))
    t2 = markdown(["input", "conversion", ">output MB", ">extra peak MB", ">extra / output", f"≤ {MEMORY_TARGET}×",
                   ">SciPy extra / output", ">GB/s", ">% of 1-thread triad", f">% of {max(bw)}-thread triad",
                   f"≥ {BANDWIDTH_TARGET:.0%} (1 thread)"], memory_rows(cases, bw, verdicts))
    t3 = markdown(["input", "conversion", ">ustc ms (IQR)", "other calls, ms (IQR)"], context_rows(cases))
    t4 = markdown(["operation", "A's format", ">ms (IQR)", ">/ CSR", f"≤ {FORMAT_TARGET}×"],
                  product_rows(products, verdicts))
    body = "\n".join([
        f"Measured {datetime.date.today().isoformat()} on {machine()}; {versions(run['torch'])}. "
        f"1-minute load average {run['load'][0]:.2f} at the start of the run, {run['load'][1]:.2f} at the end "
        f"(this process included). Triad bandwidth, same run: {bandwidth_text(bw)}.",
        "", f"Time, ustc against SciPy (target ≤ {TIME_TARGET}× SciPy's time):", "", *t1,
        *dense_ratio_line(cases, verdicts),
        "", f"Extra peak memory of the ustc call (target ≤ {MEMORY_TARGET}× its output) and bandwidth "
            f"(target ≥ {BANDWIDTH_TARGET:.0%} of the one-thread triad, sparse inputs):", "", *t2,
        "", "Context, timed in the same rounds:", "", *t3,
        "", f"Products over A in other formats (target ≤ {FORMAT_TARGET}× the CSR time):", "", *t4,
        "", methods(args, info, run),
    ])
    return body, verdicts


def methods(args, info, run) -> str:
    (sn, snnz), (rn, rnnz), (mn, mnnz) = info["stencil"], info["random"], info["mm"]
    seen, seen_mb = run["numba_seen"]
    d, b = args.dense, args.banded
    calls = args.rounds * args.per_round
    return (
        f"Inputs: a {d}×{d} float32 array, each entry zero with probability 0.9 (uniform; "
        f"{info['dense_nnz']:,} nonzeros); for dense → DIA a {b}×{b} float32 array with N(0, 1) values on the "
        f"diagonals {', '.join(map(str, band_offsets(b)))} — on the random array every one of the {2 * d - 1:,} "
        f"diagonals holds a nonzero, so DIA would store {(2 * d - 1) * d * 4 / 1e9:.2f} GB, twice the array, "
        f"and SciPy's `dia_array(x)` warns that a DIA matrix with that many diagonals is inefficient: no "
        f"sensible use of DIA; the 3-D 7-point stencil of side {args.side} ({sn:,} rows, {snnz:,} nonzeros, float64, int32 "
        f"indices) and a {rn:,}×{rn:,} float64 matrix with {rnnz:,} entries at distinct uniform random "
        f"positions (int32 indices, seed 0), both built as canonical SciPy CSR with whole-array NumPy "
        f"operations; their CSC is `csr.tocsc()` and COO `csr.tocoo()` (`has_canonical_format` True). ustc's "
        f"COO results are canonical (row-major); SciPy's `csc.tocoo()` keeps the column-major order and does "
        f"not sort, and its `csr.tocoo()` shares `indices` and `data` with the CSR (one new array). "
        f"ustc calls are written as a user writes them: `Tensor.from_package(x).convert(fmt)` with x the "
        f"SciPy or NumPy object, the zero-copy `from_package` inside the timing; DIAJ is SciPy's DIA layout "
        f"(values indexed by column), DIAI the row-indexed one; `einsum(\"ij->ij\", A, out_format=\"CSC\")` "
        f"and `A.convert(\"CSC\")` take A = `Tensor.from_package(csr)`, made once. Every ustc result was "
        f"first checked equal to SciPy's, and its format checked to be the one asked for: through `to_dense` "
        f"up to {SMALL:,} matrix entries, else buffer for buffer when "
        f"`to_package()` gives the SciPy format of SciPy's result, else entry for entry (`(a != b).nnz == 0`, "
        f"with `Tensor.entries()` for formats SciPy has no class for); a call that raised or differed is a "
        f"FAILED row and is not timed. Times: the calls of one case (ustc, SciPy and the context calls) are "
        f"timed in {args.rounds} alternating rounds; each round gives every call one untimed call, then "
        f"{args.per_round} timed ones with `gc.collect()` before each (outside the timing): {calls} samples "
        f"per call, reported as median (interquartile range). The checking call, outside the rounds, "
        f"compiles or loads ustc's kernels, so no compile time is included. Context calls: ustc "
        f"`Tensor.from_dense(x, fmt)` (the direct dense path) and `A.convert(\"CSC\")`; PyTorch on tensors "
        f"sharing the same buffers (`torch.from_numpy`; COO with int64 indices, as torch requires), thread "
        f"count left at its default. Memory: separate calls with `tracemalloc` on; extra peak = "
        f"tracemalloc's peak during the call minus the memory traced just before, with the result still "
        f"alive, so it includes the output; output = `Tensor.nbytes` (index buffers + values) for ustc, data "
        f"+ index arrays for SciPy. NumPy reports its data buffers to tracemalloc, and so does Numba's "
        f"runtime: a sanity check allocating `np.empty(10**7)` inside an `njit` function registered "
        f"{seen_mb:.1f} MB (80 MB expected){'' if seen else ' — NOT seen'}. GB/s = (input buffers + output "
        f"buffers) / median time: the minimum traffic, each byte counted once; compared with a STREAM triad "
        f"(`a[i] = b[i] + 1.5 c[i]`, a parallel Numba loop on {args.bw_mb} MB float64 arrays, 3 × 8 bytes "
        f"per element) measured at the start of the same run on 1 and on all Numba threads; the target is "
        f"judged against the one-thread figure for sparse inputs only (a dense input's time is O(n²)). "
        f"Products: A the 7-point stencil of side {args.mm_side} ({mn:,} rows, {mnnz:,} nonzeros) converted "
        f"once per format outside the timing, X a C-ordered {mn:,}×64 float64 N(0, 1) array; "
        f"`ustc.matmul(A, A)` checked entry for entry against SciPy's `csr @ csr`, `ustc.matmul(A, X)` with "
        f"`np.allclose` against `csr @ X`; all formats and SciPy timed in the same alternating rounds.")


# -- main -----------------------------------------------------------------------------------


def parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"small sizes for a smoke run: {QUICK}")
    ap.add_argument("--dense", type=int, help=f"side of the 90%%-zero dense array ({FULL['dense']})")
    ap.add_argument("--banded", type=int, help=f"side of the banded dense array for DIA ({FULL['banded']})")
    ap.add_argument("--side", type=int, help=f"grid side of the conversion stencil ({FULL['side']})")
    ap.add_argument("--random", type=int, help=f"rows of the random matrix, 10 entries a row ({FULL['random']})")
    ap.add_argument("--mm-side", type=int, help=f"grid side of the stencil of the products ({FULL['mm_side']})")
    ap.add_argument("--rounds", type=int, help=f"alternating rounds per case ({FULL['rounds']})")
    ap.add_argument("--per-round", type=int, help=f"timed calls per round ({FULL['per_round']})")
    ap.add_argument("--bw-mb", type=int, help=f"MB per triad array ({FULL['bw_mb']})")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch context timings")
    ap.add_argument("--only", action="append", metavar="TEXT",
                    help="measure only the conversions whose name (input and conversion) contains TEXT "
                         "(repeatable; implies --no-products; does not --write)")
    ap.add_argument("--no-products", action="store_true", help="skip the SpGEMM / SpMM products")
    ap.add_argument("--write", action="store_true", help="replace the '## Conversion' section of docs/benchmarks.md")
    args = ap.parse_args(argv)
    if args.quick and args.write:
        ap.error("--quick is a smoke run; it does not --write")
    if (args.only or args.no_products) and args.write:
        ap.error("--only / --no-products measure a subset; they do not --write")
    args.no_products = args.no_products or bool(args.only)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def import_torch(skip: bool):
    if skip:
        return None
    try:
        import torch
    except ImportError:
        return None
    return torch


def main(argv=None) -> int:
    args = parse(argv)
    torch = import_torch(args.no_torch)
    warnings.filterwarnings("ignore", message="Sparse ((CSR|CSC|BSR) tensor support|invariant checks)")
    import numba

    run = {"torch": torch, "load": [os.getloadavg()[0]]}
    print(machine())
    print(f"load average (1 min) at start: {run['load'][0]:.2f}")
    run["numba_seen"] = tracemalloc_sees_numba()
    print(f"tracemalloc sees Numba allocations: {run['numba_seen'][0]} ({run['numba_seen'][1]:.1f} MB of 80 MB)")
    threads = sorted({1, numba.config.NUMBA_NUM_THREADS})
    run["bandwidth"] = {k: stream_triad_gbs(k, args.bw_mb) for k in threads}
    print("triad bandwidth: " + bandwidth_text(run["bandwidth"]))
    start = time.perf_counter()
    timing = (args.rounds, args.per_round)
    cases, info = run_conversions(args, torch, timing)
    products, info["mm"] = ([], (0, 0)) if args.no_products else run_products(args.mm_side, timing)
    run["load"].append(os.getloadavg()[0])
    body, verdicts = build_report(cases, products, info, args, run)
    print(f"\nmeasured in {time.perf_counter() - start:.0f} s\n")
    print(body)
    failed = [v for v in verdicts if v.endswith("FAIL")]
    print(f"\n{len(verdicts) - len(failed)} PASS, {len(failed)} FAIL" + "".join(f"\n  {v}" for v in failed))
    if args.write:
        print(f"wrote {write_section('Conversion', body)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
