"""The backward kernels of sparse fine-tuning (ustc.kernels._sddmm) against NumPy, and the training path's
kernel and dense-GEMM routes (ustc.torch.rows.kernel_wins forced either way) against the dense masked model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_helpers import random_weight, torch_ust

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import ustc  # noqa: E402
from ustc.kernels._narrow_spmv import row_chunks  # noqa: E402
from ustc.kernels._sddmm import column_chunks, csr_sddmm, csr_spmm, csr_spmm_t  # noqa: E402
from ustc.torch import TorchUST, rows, training  # noqa: E402


def _csr(mask: np.ndarray):
    """CSR pointers (int32) and uint16 columns of ``mask``'s nonzeros, row-major."""
    r, c = np.nonzero(mask)
    pos = np.zeros(mask.shape[0] + 1, dtype=np.int32)
    np.cumsum(np.bincount(r, minlength=mask.shape[0]), out=pos[1:])
    return pos, c.astype(np.uint16)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(0, 9), n=st.integers(0, 9), r=st.integers(0, 21), density=st.sampled_from([0.0, 0.3, 0.8, 1.0]),
       chunks=st.integers(1, 3), wide=st.booleans(), seed=st.integers(0, 2**16))
def test_kernels_equal_numpy(m, n, r, density, chunks, wide, seed):
    """Rows of 0..9 entries (the four-entry body and its remainder), 0..21 tokens, 1-3 chunks, float32 / float64."""
    dtype = np.float64 if wide else np.float32
    rng = np.random.default_rng(seed)
    mask = rng.random((m, n)) < density
    pos, crd = _csr(mask)
    vals = rng.standard_normal(len(crd)).astype(dtype)
    a = np.zeros((m, n), dtype)
    a[mask] = vals
    left, right = rng.standard_normal((m, r)).astype(dtype), rng.standard_normal((n, r)).astype(dtype)
    inputs = [x.copy() for x in (pos, crd, vals, left, right)]
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)

    slot = rng.permutation(len(crd)).astype(np.int64)  # entry p goes to value slot slot[p]
    out = np.full(len(crd) + 2, 7.0, dtype)  # two slots no entry maps to: never written
    csr_sddmm(pos, crd, slot, left, right, row_chunks(pos, chunks), out)
    want = np.full(len(crd) + 2, 7.0, dtype)
    want[slot] = (left @ right.T)[mask]
    np.testing.assert_allclose(out, want, **tol)

    gathered = np.full((m, r), 7.0, dtype)  # every entry written (empty rows: 0)
    csr_spmm(pos, crd, vals, right, row_chunks(pos, chunks), gathered)
    np.testing.assert_allclose(gathered, a @ right, **tol)

    scattered = np.full((n, r), 7.0, dtype)
    csr_spmm_t(pos, crd, vals, left, column_chunks(r, chunks), scattered)
    np.testing.assert_allclose(scattered, a.T @ left, **tol)
    for before, after in zip(inputs, (pos, crd, vals, left, right)):
        assert np.array_equal(before, after)  # inputs never written


def test_column_chunks_cover_the_columns_once():
    for width in (0, 1, 15, 16, 17, 100, 512):
        for threads in (1, 2, 3, 8):
            bounds = column_chunks(width, threads)
            assert bounds[0] == 0 and bounds[-1] == width and np.all(np.diff(bounds) >= 0)
            assert 1 <= len(bounds) - 1 <= max(1, min(width, threads))


@pytest.mark.parametrize("route", ["kernel", "dense"])
@pytest.mark.parametrize("fmt,dtype", [("CSR", torch.float64), ("BSR(2, 2)", torch.float32),
                                       ("Structured(2, 4)", torch.float64), ("CSR", torch.bfloat16)],
                         ids=["csr-f64", "bsr-f32", "2:4-f64", "csr-bf16"])
@pytest.mark.parametrize("shape", [(12, 20), (20, 12)], ids=["wide", "tall"])
def test_linear_routes_match_the_dense_masked_model(route, fmt, dtype, shape, monkeypatch):
    """Forward, dx, dW and dbias of F.linear through the kernels (both orientations: gather and
    scatter SpMM, SDDMM over W or Wᵀ) and through the dense GEMM, against the dense masked model;
    BSR's explicit zeros inside blocks get no gradient."""
    monkeypatch.setattr(rows, "SLOWDOWN", {k: (0.0 if route == "kernel" else 1e9) for k in rows.SLOWDOWN})
    monkeypatch.setattr(training, "GEMM_MIN_BATCH", 0)  # 21 rows of x: the forward's GEMM too
    w = random_weight(shape, 0.4, seed=5)
    W, dense = torch_ust(ustc.Tensor.from_dense(np.eye(4), fmt).format, w)
    W = TorchUST.from_torch(dense.to(dtype), W.ust.format) if dtype != torch.float64 else W
    W.freeze_zeros_().requires_grad_()
    wd = dense.to(dtype).clone().requires_grad_()
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 7, shape[1], generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    xd = x.detach().clone().requires_grad_()
    b = torch.randn(shape[0], generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    bd = b.detach().clone().requires_grad_()
    x_before, w_before = x.detach().clone(), W.stored_values().detach().clone()
    y, yd = F.linear(x, W, b), F.linear(xd, wd, bd)
    grad = torch.randn(yd.shape, generator=g, dtype=torch.float64).to(dtype)
    y.backward(grad)
    yd.backward(grad)
    tol = {torch.float64: dict(rtol=1e-10, atol=1e-12), torch.float32: dict(rtol=1e-4, atol=1e-4),
           torch.bfloat16: dict(rtol=4e-2, atol=4e-2)}[dtype]
    assert y.dtype == dtype and x.grad.dtype == dtype
    torch.testing.assert_close(y, yd, **tol)
    torch.testing.assert_close(x.grad, xd.grad, **tol)
    torch.testing.assert_close(b.grad, bd.grad, **tol)
    assert isinstance(W.grad, TorchUST) and W.grad.dtype == dtype
    torch.testing.assert_close(W.grad.to_dense(), wd.grad * W.pattern_mask(), **tol)
    assert torch.equal(x.detach(), x_before) and torch.equal(W.stored_values().detach(), w_before)


@pytest.mark.parametrize("route", ["kernel", "dense"])
def test_edge_shapes_and_empty_patterns(route, monkeypatch):
    """No tokens, one token, a 1 x n and an n x 1 weight, an all-zero weight: both routes."""
    monkeypatch.setattr(rows, "SLOWDOWN", {k: (0.0 if route == "kernel" else 1e9) for k in rows.SLOWDOWN})
    for shape, x_shape, zero in [((6, 8), (0, 8), False), ((6, 8), (1, 8), False), ((6, 8), (8,), False),
                                 ((1, 9), (4, 9), False), ((9, 1), (4, 1), False), ((6, 8), (5, 8), True)]:
        w = random_weight(shape, 0.5, seed=1) * (0 if zero else 1)
        W, dense = torch_ust(ustc.formats.CSR, w)
        W.freeze_zeros_().requires_grad_()
        wd = dense.clone().requires_grad_()
        x = torch.randn(x_shape, dtype=torch.float64, requires_grad=True)
        xd = x.detach().clone().requires_grad_()
        y, yd = F.linear(x, W), F.linear(xd, wd)
        torch.testing.assert_close(y, yd)
        y.sum().backward()
        yd.sum().backward()
        torch.testing.assert_close(x.grad, xd.grad)
        torch.testing.assert_close(W.grad.to_dense(), wd.grad * W.pattern_mask())


def test_dense_reads_of_gradients_through_the_scratch_buffer():
    """In-place ops on dense optimizer state read TorchUST operands through this thread's reused scratch
    buffer: a new pattern of the same shape leaves nothing of the old one, and in-place changes of the
    values (through torch, which bumps no version counter below autograd, or the NumPy view) are seen."""
    A, a = torch_ust(ustc.formats.CSR, random_weight((7, 9), 0.5, seed=1))
    B, b = torch_ust(ustc.formats.CSR, random_weight((7, 9), 0.3, seed=2))
    state = torch.zeros(7, 9, dtype=torch.float64)
    want = torch.zeros(7, 9, dtype=torch.float64)
    for T, t in [(A, a), (B, b), (A, a), (A, a)]:
        state.lerp_(T, 0.5)
        want.lerp_(t, 0.5)
        torch.testing.assert_close(state, want, rtol=0, atol=0)
    A.mul_(2.0)  # same values tensor, changed in place
    a = a * 2.0
    state.addcmul_(A, A, value=0.25)
    want.addcmul_(a, a, value=0.25)
    torch.testing.assert_close(state, want, rtol=0, atol=0)
    A.requires_grad_()
    with torch.no_grad():
        A.stored_values().numpy()[:] += 1.0  # through NumPy
        a[a != 0] += 1.0
    state.add_(A)
    want.add_(a)
    torch.testing.assert_close(state, want, rtol=0, atol=0)


def test_small_batches_forward_through_the_planned_product(monkeypatch):
    """Below ``training.GEMM_MIN_BATCH`` rows the forward runs the planned product even where the GEMM
    would win (no dense twin refreshed per call); the result and gradients are the dense masked model's."""
    monkeypatch.setattr(rows, "SLOWDOWN", {k: 1e9 for k in rows.SLOWDOWN})
    twins = []
    original = training.dense_weight
    monkeypatch.setattr(training, "dense_weight", lambda w: twins.append(w) or original(w))
    W, dense = torch_ust(ustc.Tensor.from_dense(np.eye(4), "CSR").format, random_weight((9, 6), 0.5, seed=1))
    W.requires_grad_()
    wd = dense.clone().requires_grad_()
    x = torch.randn(1, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y = F.linear(x, W)
    assert not twins  # the forward took no GEMM
    torch.testing.assert_close(y, F.linear(x, wd), rtol=1e-12, atol=1e-12)
    y.sum().backward()
    F.linear(x, wd).sum().backward()
    torch.testing.assert_close(W.grad.to_dense(), wd.grad * W.pattern_mask(), rtol=1e-12, atol=1e-12)
