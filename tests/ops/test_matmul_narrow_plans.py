"""``ustc.Matmul`` (the stateful plan) with float16 and bfloat16 operands on the CPU.

The product accumulates in float32 and the result keeps the operands' dtype; a dense ``c``
is updated in place and returned by every execute (each one accumulates again); in-place
changes to the operands between executes are seen, and ``reset_operands`` takes new ones
of the same kinds. bfloat16 comes as ml_dtypes.bfloat16 arrays / Tensors or as
torch.bfloat16 tensors. Oracle: the float32 product of the (exactly representable)
operand values, compared after one rounding to the narrow dtype.
"""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from op_helpers import FAMILIES_2D, NAMED_2D, named_params, rand_dense, subset_2d
from fitting import structured_fit

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
TOL = {np.dtype(np.float16): {"rtol": 2e-3, "atol": 2e-3},   # one float16 rounding (11 bits) of O(1) values
       BF16: {"rtol": 2 ** -7, "atol": 2 ** -7}}             # one bfloat16 rounding (8 bits)


def _sparse_in(fmt, dtype, shape=(6, 5), seed=0) -> tuple[ustc.Tensor, np.ndarray]:
    """A random Tensor in ``fmt`` with ``dtype`` values, and its dense contents in float32."""
    x = structured_fit(rand_dense(shape, np.float32, seed=seed), fmt).astype(dtype)
    wide = ustc.Tensor.from_dense(x.astype(np.float32), fmt)
    A = ustc.Tensor(wide.format, wide.shape, dict(wide.buffers), np.asarray(wide.values).astype(dtype))
    return A, A.to_dense().astype(np.float32)


def _dense(shape, dtype, seed) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32).astype(dtype)


def _close(got, want, dtype) -> None:
    """``got`` (of ``dtype``) is the float32 ``want`` rounded once to ``dtype``."""
    assert got.dtype == dtype
    np.testing.assert_allclose(np.asarray(got, dtype=np.float32), want.astype(dtype).astype(np.float32),
                               **TOL[np.dtype(dtype)])


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("fmt", named_params(NAMED_2D))
def test_in_place_c_accumulates_over_registry_formats(fmt, dtype):
    A, a = _sparse_in(fmt, dtype)
    b, c = _dense((5, 3), dtype, 1), _dense((6, 3), dtype, 2)
    with ustc.Matmul(A, b, c, alpha=2.0) as mm:                   # a float alpha keeps the narrow dtype
        mm.plan()
        for _ in range(2):                                        # c := 2 a @ b + c, again each time
            before = c.astype(np.float32)
            assert mm.execute() is c
            _close(c, 2 * a @ b.astype(np.float32) + before, dtype)
        b *= 2                                                    # a dense operand changed in place
        before = c.astype(np.float32)
        mm.execute()
        _close(c, 2 * a @ b.astype(np.float32) + before, dtype)
        A2, a2 = _sparse_in(fmt, dtype, seed=3)
        b2 = _dense((5, 3), dtype, 4)
        c2 = np.zeros((6, 3), dtype)
        mm.reset_operands(a=A2, b=b2, c=c2, beta=0.5)
        for _ in range(2):
            before = c2.astype(np.float32)
            assert mm.execute() is c2
            _close(c2, 2 * a2 @ b2.astype(np.float32) + 0.5 * before, dtype)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("fmt", subset_2d(*FAMILIES_2D))
def test_without_c_out_and_vectors(fmt, dtype):
    A, a = _sparse_in(fmt, dtype)
    b = _dense((5, 3), dtype, 1)
    mm = ustc.Matmul(A, b).plan()
    _close(mm.execute(), a @ b.astype(np.float32), dtype)
    b[...] = _dense((5, 3), dtype, 5)
    _close(mm.execute(), a @ b.astype(np.float32), dtype)
    out = np.full((6, 3), 7, dtype)
    assert mm.execute(out=out) is out
    _close(out, a @ b.astype(np.float32), dtype)
    x = _dense(5, dtype, 6)
    _close(ustc.Matmul(A, x).execute(), a @ x.astype(np.float32), dtype)     # SpMV


def test_bfloat16_out_is_written_and_c_only_read():
    A, a = _sparse_in(NAMED_2D["CSR"], BF16)
    b, c = _dense((5, 3), BF16, 1), _dense((6, 3), BF16, 2)
    before = c.copy()
    mm = ustc.Matmul(A, b, c)
    out = np.empty((6, 3), BF16)
    assert mm.execute(out=out) is out
    _close(out, a @ b.astype(np.float32) + c.astype(np.float32), BF16)
    np.testing.assert_array_equal(c, before)
    with pytest.raises(ustc.ShapeError, match="bfloat16"):
        mm.execute(out=np.empty((6, 3), np.float32))


def test_bfloat16_sparse_times_sparse_is_a_bfloat16_tensor():
    A, a = _sparse_in(NAMED_2D["CSR"], BF16)
    B, bd = _sparse_in(NAMED_2D["COO"], BF16, shape=(5, 4), seed=1)
    S = ustc.Matmul(A, B).execute()
    assert isinstance(S, ustc.Tensor) and S.dtype == BF16
    _close(S.to_dense(), a @ bd, BF16)


def test_reset_operands_keeps_the_narrow_kinds():
    A, _ = _sparse_in(NAMED_2D["CSR"], BF16)
    b = _dense((5, 3), BF16, 1)
    mm = ustc.Matmul(A, b).plan()
    with pytest.raises(ustc.UstcError, match="differ from the planned"):
        mm.reset_operands(b=b.astype(np.float32))                 # float32 twins would match: refused
    mm32 = ustc.Matmul(_sparse_in(NAMED_2D["CSR"], np.float32)[0], b.astype(np.float32))
    with pytest.raises(ustc.UstcError, match="differ from the planned"):
        mm32.reset_operands(b=b)
    mm.release_operands()
    with pytest.raises(ustc.UstcError, match="released"):
        mm.execute()
    mm.reset_operands(a=A, b=b)
    assert mm.execute().dtype == BF16


def test_torch_bfloat16_operands():
    torch = pytest.importorskip("torch")
    from ustc.torch import TorchUST

    A, a = _sparse_in(NAMED_2D["BSR"], BF16)
    bits = np.asarray(A.values).view(np.uint16)
    W = TorchUST(ustc.Tensor(A.format, A.shape, dict(A.buffers), bits, package="torch"), dtype=torch.bfloat16)
    dense_a = torch.from_numpy(a).to(torch.bfloat16)
    b = torch.from_numpy(_dense((5, 3), np.float32, 1)).to(torch.bfloat16)
    c = torch.from_numpy(_dense((6, 3), np.float32, 2)).to(torch.bfloat16)
    for left in (W, dense_a.to_sparse_csr()):
        cc = c.clone()
        with ustc.Matmul(left, b, cc, alpha=2.0) as mm:
            for _ in range(2):
                before = cc.float()
                assert mm.execute() is cc
                assert cc.dtype == torch.bfloat16
                torch.testing.assert_close(cc.float(), (2 * dense_a.float() @ b.float() + before)
                                           .to(torch.bfloat16).float(), rtol=2 ** -7, atol=2 ** -7)
            mm.reset_operands(b=2 * b)
            before = cc.float()
            mm.execute()
            torch.testing.assert_close(cc.float(), (4 * dense_a.float() @ b.float() + before)
                                       .to(torch.bfloat16).float(), rtol=2 ** -7, atol=2 ** -7)
    y = ustc.Matmul(W, b.float()).execute()                       # bfloat16 with float32: float32, as torch
    assert y.dtype == torch.float32
    V, v = _sparse_in(NAMED_2D["CSR"], BF16, shape=(5, 4), seed=1)
    V = TorchUST(ustc.Tensor(V.format, V.shape, dict(V.buffers), np.asarray(V.values).view(np.uint16),
                             package="torch"), dtype=torch.bfloat16)
    S = ustc.Matmul(W, V).execute()                               # sparse x sparse: a bfloat16 TorchUST
    assert isinstance(S, TorchUST) and S.dtype == torch.bfloat16
    torch.testing.assert_close(S.to_dense().float(), torch.from_numpy(a @ v).to(torch.bfloat16).float(),
                               rtol=2 ** -7, atol=2 ** -7)
