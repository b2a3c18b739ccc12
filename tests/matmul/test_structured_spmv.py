"""The registered n:m structured SpMV (ustc.kernels._structured) against NumPy: every named format whose
levels end in a structured level, other n:m, widths not a multiple of m, empty and all-zero matrices."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ustc import formats
from ustc.format.levels.structured import Structured as StructuredLevel
from ustc.kernels.builtin import _nm

NAMED = [nf.format() for nf in formats.NAMED if _nm(nf.format()) is not None]
OTHERS = [formats.Structured(n, m) for n, m in ((1, 4), (2, 8), (3, 3), (1, 2))]
SHAPES = [(6, 8), (5, 10), (1, 7), (7, 1), (0, 8), (4, 0), (33, 64)]


def test_named_structured_formats_are_matched():
    assert NAMED, "the registry names a Structured format"
    assert all(isinstance(f.levels[-1].type, StructuredLevel) for f in NAMED)
    assert _nm(formats.CSR) is None and _nm(formats.BSR(2, 2)) is None


@pytest.mark.parametrize("fmt", NAMED + OTHERS, ids=[str(f.name or f) for f in NAMED + OTHERS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_structured_spmv_matches_numpy(fmt, dtype):
    n, m = _nm(fmt)
    rng = np.random.default_rng(0)
    for shape in SHAPES:
        for zero in (False, True):
            w = rng.standard_normal(shape).astype(dtype) * (0 if zero else 1)
            if shape[1]:
                w = ustc.prune.decompress(ustc.prune.prune_nm(w, n, m))
            A = ustc.Tensor.from_dense(w, fmt)
            x = rng.standard_normal(shape[1]).astype(dtype)
            x_before, values_before = x.copy(), A._values.copy()
            mm = ustc.Matmul(A, x, options={"route": "registered"}).plan()  # the built-in kernel (test_linear_nm: the default)
            if shape[0] and shape[1]:
                assert "structured_spmv" in mm.plan_info
            tol = 1e-5 if dtype == np.float32 else 1e-12
            np.testing.assert_allclose(mm.execute(), w @ x, rtol=tol, atol=tol)
            c = rng.standard_normal(shape[0]).astype(dtype)
            got = ustc.matmul(A, x, c.copy(), alpha=2, beta=3)
            np.testing.assert_allclose(got, 2 * (w @ x) + 3 * c, rtol=tol, atol=tol)
            assert np.array_equal(x, x_before) and np.array_equal(A._values, values_before)
