"""Element-wise sparse operations against SciPy, PyTorch and pydata ``sparse``: ``A + B``, ``A * B``.

    python benchmarks/bench_elementwise.py [--repeat N] [--write]

Two random CSR matrices with independent patterns (float64) of three sizes: 1,000² at 1%
(10k entries each: per-call overhead decides), 20,000² with 20 entries a row (400k each:
ustc's parallel kernels) and 200,000² with 10 a row (2M each). Every time is the one-shot
operator (``A + B`` on ``ustc.Tensor`` s: binding, kernel lookup, the kernel, assembly of the
result). Small sizes are means of back-to-back calls, larger ones medians; the competitors of
one size are timed in alternating rounds (``_common.interleaved_ms``). The table reports each
library's time and SciPy's time over it (higher is better).
"""

from __future__ import annotations

import argparse
import sys
import warnings

import numpy as np
import scipy.sparse as sp

from _common import interleaved_ms, machine, write_section

import ustc

SIZES = ((1_000, 10), (20_000, 20), (200_000, 10))  # (rows, entries a row)


def random_csr(n: int, per_row: int, seed: int) -> sp.csr_matrix:
    """``n`` x ``n`` with about ``per_row`` entries a row at uniform random columns."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n, dtype=np.int32), per_row)
    cols = rng.integers(0, n, rows.size, dtype=np.int32)
    m = sp.csr_matrix((rng.standard_normal(rows.size), (rows, cols)), shape=(n, n))
    m.sum_duplicates()
    return m


def competitors(S, T) -> dict:
    """``{(library, op): call}`` for the peers available here."""
    A, B = ustc.Tensor.from_package(S), ustc.Tensor.from_package(T)
    calls = {("SciPy", "+"): lambda: S + T, ("SciPy", "*"): lambda: S.multiply(T),
             ("ustc", "+"): lambda: A + B, ("ustc", "*"): lambda: A * B}
    try:
        import torch

        warnings.filterwarnings("ignore", message="Sparse (CSR tensor support|invariant checks)")
        ta, tb = (torch.sparse_csr_tensor(torch.from_numpy(m.indptr.astype(np.int64)),
                                          torch.from_numpy(m.indices.astype(np.int64)),
                                          torch.from_numpy(m.data), m.shape) for m in (S, T))
        calls[("PyTorch CSR", "+")] = lambda: ta + tb
        calls[("PyTorch CSR", "*")] = lambda: ta * tb
    except ImportError:
        pass
    try:
        import sparse

        pa, pb = sparse.COO.from_scipy_sparse(S), sparse.COO.from_scipy_sparse(T)
        calls[("pydata sparse COO", "+")] = lambda: pa + pb
        calls[("pydata sparse COO", "*")] = lambda: pa * pb
    except ImportError:
        pass
    return calls


def _working(calls: dict) -> dict:
    """The calls that run (a peer may not implement an op for this layout)."""
    out = {}
    for key, call in calls.items():
        try:
            call()
        except (RuntimeError, NotImplementedError, TypeError, ValueError) as exc:
            print(f"skipping {key}: {type(exc).__name__}: {str(exc)[:80]}", file=sys.stderr)
            continue
        out[key] = call
    return out


def check(S, T) -> None:
    A, B = ustc.Tensor.from_package(S), ustc.Tensor.from_package(T)
    for got, want in ((A + B, S + T), (A * B, S.multiply(T))):
        assert abs(got.to_package() - want).max() <= 1e-12, "ustc disagrees with SciPy"


def measure(repeat: int) -> list[tuple]:
    rows = []
    for n, per_row in SIZES:
        S, T = random_csr(n, per_row, 1), random_csr(n, per_row, 2)
        check(S, T)
        calls = _working(competitors(S, T))
        inner = 50 if n <= 1_000 else 1
        batched = {k: (lambda c=c: [c() for _ in range(inner)]) for k, c in calls.items()}
        ms = interleaved_ms(batched, rounds=max(3, repeat // 3), per_round=3)
        for (library, op), t in ms.items():
            rows.append((n, S.nnz, T.nnz, op, library, t / inner, ms[("SciPy", op)] / inner))
    return rows


def report(rows) -> str:
    lines = [f"Machine: {machine()}", "",
             "| size | entries (A, B) | op | library | ms | SciPy ms / this |", "|---|---|---|---|---|---|"]
    for n, nnz_a, nnz_b, op, library, ms, scipy_ms in rows:
        lines.append(f"| {n:,}² | {nnz_a:,}, {nnz_b:,} | `A {op} B` | {library} | {ms:.3f} | {scipy_ms / ms:.2f}× |")
    lines += ["", "One-shot operators on random CSR operands with independent patterns; every result is "
              "CSR (ustc keeps A's format), checked against SciPy before timing. ustc writes a small "
              "result in one serial pass into arrays sized by a bound on the output (nse(A) + nse(B) "
              "for `+`, the smaller for `*`), and a large one in two parallel passes (count, then fill)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--write", action="store_true", help="replace '## Element-wise operations' in docs/benchmarks.md")
    args = ap.parse_args(argv)
    text = report(measure(args.repeat))
    print(text)
    if args.write:
        write_section("Element-wise operations", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
