"""The element-wise merge plan remembered by the operands' layouts (``elementwise._MERGED``): a
repeated ``A + B`` / ``A - B`` / ``A * B`` of CSR-family tensors skips building the plan key, counts
a plan cache hit, sees changed values, and falls back to the keyed lookup (then the right plan) on
another dtype, index dtype or package, after the cache is cleared or disabled, for the registry's
CSR-family formats."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc import formats as F
from ustc.ops import elementwise, plan_cache
from ustc.ops.plan_cache import ELEMENTWISE

MERGEABLE = [pytest.param(nf.format(), id=nf.name) for nf in F.NAMED if nf.name in ("CSR", "CSC")]


def pair(fmt, shape=(30, 20), seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    a = (rng.random(shape) < 0.2) * rng.uniform(-2, 2, shape)
    b = (rng.random(shape) < 0.2) * rng.uniform(-2, 2, shape)
    return (ustc.Tensor.from_dense(a.astype(dtype), fmt), ustc.Tensor.from_dense(b.astype(dtype), fmt),
            a.astype(dtype), b.astype(dtype))


@pytest.mark.parametrize("op", ["+", "-", "*"])
@pytest.mark.parametrize("fmt", MERGEABLE)
def test_repeats_hit_the_memo_and_see_new_values(fmt, op):
    A, B, a, b = pair(fmt)
    f = {"+": np.add, "-": np.subtract, "*": np.multiply}[op]
    run = {"+": lambda: A + B, "-": lambda: A - B, "*": lambda: A * B}[op]
    np.testing.assert_allclose(run().to_dense(), f(a, b))
    np.testing.assert_allclose(run().to_dense(), f(a, b))
    assert (op, False, id(A._layout), id(B._layout)) in elementwise._MERGED
    hits = ELEMENTWISE.stats()["hits"]
    A.values[...] *= 3
    np.testing.assert_allclose(run().to_dense(), f(3 * a, b))
    assert ELEMENTWISE.stats()["hits"] == hits + 1


def test_other_kinds_miss_the_memo():
    A, B, a, b = pair(F.CSR, seed=1)
    for _ in range(2):
        A + B
    A32, B32, a32, b32 = pair(F.CSR, seed=1, dtype=np.float32)
    C = A32 + B32
    assert C.dtype == np.float32
    np.testing.assert_allclose(C.to_dense(), a32 + b32, rtol=1e-6)
    mixed = A + B32                                       # float64 + float32: float64
    assert mixed.dtype == np.float64
    np.testing.assert_allclose(mixed.to_dense(), a + b32.astype(np.float64))
    S = sp.csr_array(a)
    S.indices = S.indices.astype(np.int64)
    S.indptr = S.indptr.astype(np.int64)
    W = ustc.Tensor.from_package(S)                       # int64 indices, SciPy package
    R = W + B
    np.testing.assert_allclose(R.to_dense(), a + b)
    assert isinstance(R.to_package(), sp.sparray)


def test_cleared_or_disabled_cache_drops_the_memo():
    A, B, a, b = pair(F.CSR, seed=2)
    A + B
    A + B
    plan_cache.clear()
    misses = ELEMENTWISE.stats()["misses"]
    np.testing.assert_allclose((A + B).to_dense(), a + b)
    assert ELEMENTWISE.stats()["misses"] == misses + 1    # planned again, not served by the memo
    try:
        plan_cache.set_maxsize(0)
        np.testing.assert_allclose((A + B).to_dense(), a + b)
        np.testing.assert_allclose((A + B).to_dense(), a + b)
        assert ELEMENTWISE.stats()["size"] == 0
    finally:
        plan_cache.set_maxsize(64)


def test_checks_still_run_on_a_memo_hit():
    """A new index buffer with an out-of-range column is refused on the memo's path too."""
    A, B, a, b = pair(F.CSR, seed=3)
    A + B
    A + B
    bad = A._buffers[(1, "crd")].copy()
    bad[0] = 10 ** 6
    A._buffers[(1, "crd")] = bad
    with pytest.raises(ustc.StorageError):
        A + B
