"""Demo sections for generated kernels: @ustc.jit, einsum, operators and the kernel cache."""

from __future__ import annotations

import numpy as np


def jit_kernel() -> list[str]:
    """An index-notation SpMV on a DIA matrix: the generated Numba source and the result."""
    import ustc

    @ustc.jit
    def spmv(y, A, x):
        y[i] += A[i, j] * x[j]  # noqa: F821 - i, j are index variables

    dense = np.diag(np.full(5, 2.0)) + np.diag(np.full(4, -1.0), 1) + np.diag(np.full(4, -1.0), -1)
    A = ustc.Tensor.from_dense(dense, "DIAI")
    x = np.arange(5.0)
    y = spmv(np.zeros(5), A, x)
    source = spmv.inspect_source(np.zeros(5), A, x)
    body = source[source.index("@njit"):source.index("PLAN =")].rstrip()
    return [f"@ustc.jit\ndef spmv(y, A, x):\n    y[i] += A[i, j] * x[j]\n\nA in {A.format}:",
            "generated kernel (ustc.jit.inspect_source):\n" + body,
            f"spmv(y, A, x) = {y.tolist()}\nNumPy A @ x    = {(dense @ x).tolist()}"]


def operations() -> list[str]:
    """einsum, operators and reductions on mixed formats, checked against NumPy."""
    import ustc

    rng = np.random.default_rng(7)
    a = rng.integers(-3, 4, (4, 6)) * (rng.random((4, 6)) < 0.5)
    b = rng.integers(-3, 4, (4, 6)) * (rng.random((4, 6)) < 0.5)
    A, B = ustc.Tensor.from_dense(a.astype(float), "CSR"), ustc.Tensor.from_dense(b.astype(float), "COO")
    rows = [("A + B (CSR + COO -> CSR)", (A + B).to_dense(), a + b),
            ("A * B", (A * B).to_dense(), a * b),
            ("A.sum(axis=0)", A.sum(0), a.sum(0)),
            ("einsum('ij,kj->ik', A, B)", ustc.einsum("ij,kj->ik", A, B), a @ b.T)]
    return [f"{label}: matches NumPy: {np.allclose(got, want)}\n{np.asarray(got).astype(int)}"
            for label, got, want in rows]


def kernel_cache() -> list[str]:
    """What this process did with the kernel cache."""
    import ustc

    s = ustc.cache.stats()
    return [f"cache directory: {ustc.cache.path()}\n"
            f"this process: {s['generated']} kernels generated, {s['compiled']} compiled, "
            f"{s['loaded']} loaded from Numba's cache, {s['hits']} hits, {s['misses']} misses\n"
            f"on disk: {s['entries']} kernels, {s['bytes'] / 1e6:.1f} MB (see `ustc cache list`)"]
