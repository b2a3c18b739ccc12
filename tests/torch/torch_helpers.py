"""Shared by the PyTorch layer tests: random weights in every 2-D named format (imported as
``torch_helpers``; a module of its own, since ``from conftest import`` resolves to whichever
conftest.py comes first on sys.path when several test directories run together)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ustc  # noqa: E402
import ustc.torch  # noqa: E402,F401
from ustc import formats  # noqa: E402

FORMATS_2D = [nf for nf in formats.NAMED if nf.format().ndim == 2]
FORMAT_IDS = [nf.name for nf in FORMATS_2D]


def random_weight(shape=(6, 8), density=0.5, seed=0, dtype=np.float64) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(dtype)
    w[rng.random(shape) >= density] = 0
    return w


def torch_ust(fmt, w: np.ndarray):
    """``(TorchUST, dense torch tensor it holds)``; n:m formats get ``w`` pruned to fit."""
    if any(lv.type.keyword == "structured" for lv in fmt.levels):
        n, m = next((lv.type.n, lv.type.m) for lv in fmt.levels if lv.type.keyword == "structured")
        w = ustc.prune.decompress(ustc.prune.prune_nm(w, n, m))
    t = ustc.Tensor.from_dense(torch.from_numpy(np.ascontiguousarray(w)), fmt)
    return ustc.torch.TorchUST(t), torch.from_numpy(np.asarray(t.to_dense())).clone()
