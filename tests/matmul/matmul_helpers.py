"""Helpers of the Matmul / solve tests: random matrices and formats from the registry."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ustc import formats


def named_2d() -> list:
    """Every named format of rank 2 (its example parameters), from the registry."""
    out = []
    for nf in formats.NAMED:
        fmt = nf.format()
        if fmt.ndim == 2:
            out.append(pytest.param(fmt, id=nf.name))
    return out


def random_dense(rng, shape, density=0.3, dtype=np.float64):
    a = rng.standard_normal(shape) * (rng.random(shape) < density)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape) * (a != 0)
    return a.astype(dtype)


def random_vector(rng, n, dtype=np.float64):
    """N(0, 1) entries (complex parts too for a complex ``dtype``; integers: rounded from 10 x)."""
    x = rng.standard_normal(n)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(n)
    return (np.round(x * 10) if np.dtype(dtype).kind in "iu" else x).astype(dtype)


def sparse(a: np.ndarray, fmt) -> ustc.Tensor:
    """``a`` stored in ``fmt`` (n:m formats keep the largest entries of each block)."""
    prune = any(lv.type.keyword == "structured" for lv in ustc.TensorFormat.parse(str(fmt)).levels) \
        if not isinstance(fmt, ustc.TensorFormat) else any(lv.type.keyword == "structured" for lv in fmt.levels)
    return ustc.Tensor.from_dense(a, fmt, prune=prune)


def tol(dtype) -> dict:
    return {"rtol": 1e-4, "atol": 1e-4} if np.dtype(dtype) in (np.float32, np.complex64) else \
        {"rtol": 1e-10, "atol": 1e-10}


