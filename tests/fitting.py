"""Test data that a format can hold: shared by the tensor and the operation suites."""

from __future__ import annotations

import numpy as np

from ustc import TensorFormat


def structured_fit(x: np.ndarray, fmt: TensorFormat) -> np.ndarray:
    """``x`` with the nonzeros beyond the first n of every n:m block zeroed (so ``fmt`` holds it)."""
    last = fmt.levels[-1]
    if last.type.keyword != "structured":
        return x
    n, m = last.type.n, last.type.m
    w = [d.name for d in fmt.dims].index(last.expr.operand.name)
    moved = np.moveaxis(x, w, -1)
    width = moved.shape[-1]
    pad = (-width) % m
    padded = np.concatenate([moved, np.zeros(moved.shape[:-1] + (pad,), dtype=x.dtype)], axis=-1)
    blocks = padded.reshape(padded.shape[:-1] + (padded.shape[-1] // m, m))
    blocks = np.where(np.cumsum(blocks != 0, axis=-1) <= n, blocks, 0)
    return np.moveaxis(blocks.reshape(padded.shape)[..., :width], -1, w).copy()
