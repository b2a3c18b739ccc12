"""Paying the first-call compile ahead of time: ``ustc.warm_cache`` and ``ustc cache warm``.

A first call of an operation on new formats or dtypes generates and compiles its kernels
(seconds); later processes load them from the kernel cache (``ustc.cache``) and Numba's
machine-code cache. Warming runs chosen operations once, through the public API, on small
random operands in worker processes, so exactly the kernels a user's call takes are compiled
and stored: each at two sizes, below and above the serial-twin thresholds
(``runtime.SERIAL_WORK`` entries, ``_vector.SERIAL_LENGTH`` rows), because small and large
inputs run different kernel variants.

A spec is ``OP:FORMATS:DTYPE`` (``spmv:CSR:float64``, ``add:CSR,COO:float32``,
``convert:CSR,CSC:float64``; one format stands for both operands). Operations: see
:data:`OPERATIONS`. To ship a warmed cache, warm with ``USTC_CACHE_DIR`` (and
``NUMBA_CACHE_DIR``) pointing into the application or image and keep those directories.
"""

from __future__ import annotations

import concurrent.futures as futures
import multiprocessing
import os
import time
import warnings
from dataclasses import dataclass

import numpy as np

from ..errors import ConversionWarning, UstcError
from ..tensor.construct import random
from ..tensor.tensor import Tensor
from .matmul import matmul
from ._vector import SERIAL_LENGTH
from .runtime import SERIAL_WORK
from .solve import solve

OPERATIONS = ("spmv", "spmm", "spgemm", "add", "sub", "mul", "transpose", "sum", "convert", "cg", "bicgstab",
              "gmres")
DEFAULT_SPECS = tuple(f"{op}:CSR:{dtype}" for dtype in ("float64", "float32")
                      for op in ("spmv", "spmm", "spgemm", "add", "mul", "sum", "cg", "bicgstab", "gmres")) \
    + ("transpose:CSR,CSC:float64", "transpose:CSR,CSC:float32")
# (rows, random entries per row): one below both thresholds (the kernels' and the Krylov vectors'
# one-thread twins), one above both (their parallel versions)
_SIZES = ((64, 12), (max(SERIAL_LENGTH, SERIAL_WORK // 4) + 64, 2))


@dataclass(frozen=True)
class WarmSpec:
    """One operation to warm: ``op`` on operands in ``formats`` with values of ``dtype``."""

    op: str
    formats: tuple[str, str]
    dtype: str

    def __post_init__(self):
        if self.op not in OPERATIONS:
            raise UstcError(f"warm: unknown operation {self.op!r} (operations: {', '.join(OPERATIONS)})")
        try:
            np.dtype(self.dtype)
        except TypeError:
            raise UstcError(f"warm: unknown dtype {self.dtype!r}") from None

    @classmethod
    def parse(cls, text: str) -> "WarmSpec":
        """``OP:FORMATS:DTYPE``; FORMATS are one or two format names or DSL texts separated by a
        comma outside parentheses (``BSR(2, 2)`` and ``(i, j) -> (i : dense, j : compressed)``
        are single formats)."""
        op, sep, rest = text.partition(":")
        fmts, sep2, dtype = rest.rpartition(":")
        if not (sep and sep2):
            raise UstcError(f"warm: spec {text!r} is not OP:FORMATS:DTYPE (e.g. spmv:CSR:float64)")
        names = [f.strip() for f in _top_level_split(fmts) if f.strip()]
        if not 1 <= len(names) <= 2:
            raise UstcError(f"warm: spec {text!r} names {len(names)} formats; give one or two")
        return cls(op.strip(), (names[0], names[-1]), dtype.strip())

    def __str__(self) -> str:
        return f"{self.op}:{','.join(dict.fromkeys(self.formats))}:{self.dtype}"


def _top_level_split(text: str) -> list[str]:
    """``text`` split at commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    return parts + [text[start:]]


@dataclass(frozen=True)
class WarmResult:
    spec: str
    seconds: float
    error: str | None = None


def _operands(spec: WarmSpec, n: int, per_row: int):
    """``a`` symmetric and diagonally dominant (CG converges), ``b`` random, in the spec's
    formats; ``x`` and ``X`` dense."""
    rng = np.random.default_rng(n)
    density = min(1.0, per_row / n)
    (r, c), v = random(n, n, density, rng=rng, dtype=spec.dtype).entries()
    d = np.arange(n)
    a = Tensor.from_coo((np.concatenate([r, c, d]), np.concatenate([c, r, d])),
                        np.concatenate([v, v, np.full(n, 30, dtype=spec.dtype)]), (n, n), spec.formats[0])
    b = random(n, n, density, rng=rng, dtype=spec.dtype, tensor_format=spec.formats[1])
    return a, b, rng.standard_normal(n).astype(spec.dtype), rng.standard_normal((n, 4)).astype(spec.dtype)


def _run(spec: WarmSpec, n: int, per_row: int) -> None:
    a, b, x, X = _operands(spec, n, per_row)
    actions = {"spmv": lambda: matmul(a, x), "spmm": lambda: matmul(a, X), "spgemm": lambda: matmul(a, b),
               "add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "sum": lambda: a.sum(1),
               "transpose": lambda: a.transpose(tensor_format=spec.formats[1]),
               "convert": lambda: a.convert(spec.formats[1])}
    if spec.op in ("cg", "bicgstab", "gmres"):
        solve(a, x, spec.op, rtol=1e-6, check=False)
    else:
        actions[spec.op]()


def warm_one(text: str) -> WarmResult:
    """Warm one spec in this process (both sizes); errors are reported, not raised."""
    t0 = time.perf_counter()
    try:
        spec = WarmSpec.parse(text)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConversionWarning)   # the user's own call warns, not the warming
            for n, per_row in _SIZES:
                _run(spec, n, per_row)
    except Exception as exc:  # noqa: BLE001 - a report line per spec
        return WarmResult(text, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}")
    return WarmResult(text, time.perf_counter() - t0)


def warm_cache(specs=None, *, processes: int | None = None) -> list[WarmResult]:
    """Compile and cache the kernels of ``specs`` (default :data:`DEFAULT_SPECS`) in
    ``processes`` worker processes (default: the CPU count, at most the number of specs);
    returns one :class:`WarmResult` per spec, in order. Specs are checked before any work."""
    texts = [str(WarmSpec.parse(s)) if isinstance(s, str) else str(s) for s in (specs or DEFAULT_SPECS)]
    workers = max(1, min(processes or os.cpu_count() or 1, len(texts)))
    if workers == 1:
        return [warm_one(t) for t in texts]
    context = multiprocessing.get_context("spawn")   # no fork after Numba's threads started
    with futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        return list(pool.map(warm_one, texts))
