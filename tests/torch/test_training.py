"""The training path of a sparse nn.Linear (ustc.torch.training): forward, dx, dW and dbias against the
dense model with the gradient masked to the pattern, in every 2-D named format, and AdamW fine-tuning
loops (float64, float32, float16, bfloat16) against the dense masked model."""

from __future__ import annotations

import numpy as np
import pytest

from torch_helpers import FORMAT_IDS, FORMATS_2D, random_weight, torch_ust

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import ustc  # noqa: E402
import ustc.torch  # noqa: E402
from ustc.torch import TorchUST, autograd, training  # noqa: E402

TOL = {torch.float64: dict(rtol=1e-10, atol=1e-12), torch.float32: dict(rtol=1e-4, atol=1e-5),
       torch.float16: dict(rtol=1e-2, atol=1e-2), torch.bfloat16: dict(rtol=4e-2, atol=4e-2)}
SHAPES = [((6, 8), (5, 8)), ((6, 8), (8,)), ((6, 8), (1, 8)), ((6, 8), (2, 3, 8)), ((6, 8), (0, 8)),
          ((1, 8), (4, 8)), ((7, 1), (3, 1)), ((12, 20), (9, 20))]


def _pair(fmt, shape, dtype, seed=0, zero=False):
    """``(W, w)``: a trainable TorchUST in ``fmt`` (frozen zeros) and its dense twin as a leaf."""
    w = random_weight(shape, 0.5, seed) * (0 if zero else 1)
    W, dense = torch_ust(fmt, w)
    if dtype == torch.bfloat16:
        W = TorchUST.from_torch(dense.to(dtype), fmt)
    elif dtype != torch.float64:
        W = TorchUST(W.ust.astype(np.dtype(str(dtype).split(".")[1])))
    W.freeze_zeros_().requires_grad_()
    return W, dense.to(dtype).requires_grad_()


def _check_linear(W, w, x_shape, dtype, bias=True, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(x_shape, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    xd = x.detach().clone().requires_grad_()
    b = torch.randn(W.shape[0], generator=g, dtype=torch.float64).to(dtype).requires_grad_() if bias else None
    bd = b.detach().clone().requires_grad_() if bias else None
    x_before = x.detach().clone()
    y, yd = F.linear(x, W, b), F.linear(xd, w, bd)
    assert type(y.grad_fn).__name__ == "LinearFnBackward"  # the training path, not the general route
    grad = torch.randn(yd.shape, generator=g, dtype=torch.float64).to(dtype)
    y.backward(grad)
    yd.backward(grad)
    tol = TOL[dtype]
    torch.testing.assert_close(y, yd, **tol)
    torch.testing.assert_close(x.grad, xd.grad, **tol)
    assert isinstance(W.grad, TorchUST) and W.grad.dtype == dtype
    mask = W.pattern_mask()
    torch.testing.assert_close(W.grad.to_dense(), w.grad * mask, **tol)
    if bias:
        torch.testing.assert_close(b.grad, bd.grad, **tol)
    assert torch.equal(x.detach(), x_before)  # the input is not written


@pytest.mark.parametrize("fmt", FORMATS_2D, ids=FORMAT_IDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_linear_gradients_match_the_dense_masked_model(fmt, dtype):
    fmt = fmt.format()
    for weight_shape, x_shape in SHAPES:
        if any(lv.type.keyword == "structured" for lv in fmt.levels) and weight_shape[1] % 4:
            continue  # n:m blocks along rows of a multiple of m
        W, w = _pair(fmt, weight_shape, dtype)
        _check_linear(W, w, x_shape, dtype)
        W.grad = None
        _check_linear(W, w.detach().clone().requires_grad_(), x_shape, dtype, bias=False, seed=2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("fmt", ["CSR", "Structured(2, 4)", "BSR(2, 2)"])
def test_linear_gradients_narrow_dtypes(fmt, dtype):
    fmt = ustc.Tensor.from_dense(np.eye(4), fmt).format
    for weight_shape, x_shape in SHAPES:
        if weight_shape[0] % 2 or weight_shape[1] % 4:
            continue
        W, w = _pair(fmt, weight_shape, dtype)
        _check_linear(W, w, x_shape, dtype)


@pytest.mark.parametrize("fmt", ["CSR", "COO", "BSR(2, 2)"])
def test_all_zero_weight(fmt):
    fmt = ustc.Tensor.from_dense(np.eye(4), fmt).format
    W, w = _pair(fmt, (6, 8), torch.float64, zero=True)
    _check_linear(W, w, (5, 8), torch.float64)
    assert not W.grad.to_dense().any()


@pytest.mark.parametrize("limit", [0.0, 1.0], ids=["dense-product", "sddmm"])
def test_both_weight_gradient_routes(limit, monkeypatch):
    """Above SDDMM_MAX_DENSITY the weight gradient is a sampled dense product, below an SDDMM: same result."""
    monkeypatch.setattr(autograd, "SDDMM_MAX_DENSITY", limit)
    for fmt in ("CSR", "BSR(2, 2)", "Structured(2, 4)"):
        W, w = _pair(ustc.Tensor.from_dense(np.eye(4), fmt).format, (12, 20), torch.float64, seed=3)
        _check_linear(W, w, (9, 20), torch.float64)


def test_in_place_updates_and_new_patterns_are_seen():
    """dx reads the weight's current values (the transposed copy is refreshed) and a newly frozen slot."""
    W, w = _pair(ustc.formats.CSR, (6, 8), torch.float64)
    _check_linear(W, w, (5, 8), torch.float64)
    with torch.no_grad():
        W.mul_(3.0)
        w.mul_(3.0)
        first = W.pattern_mask().nonzero()[0]
        W.stored_values()[0] = 0  # slot 0 holds the first entry in row-major order
        w[tuple(first)] = 0
    W.freeze_zeros_()
    W.grad = w.grad = None
    _check_linear(W, w, (5, 8), torch.float64, seed=4)
    assert not bool(W.grad.to_dense()[tuple(first)])


def _mlp(dtype, seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 16))
    return model.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16],
                         ids=["f64", "f32", "f16", "bf16"])
@pytest.mark.parametrize("method,amount", [("magnitude", 0.9), ("magnitude", 0.7), ("2:4", 0.5)])
def test_adamw_fine_tuning_matches_the_dense_masked_model(method, amount, dtype):
    """A training loop (AdamW, weight decay, a new batch each step) on the reformatted model and on the
    dense model whose gradients are masked and whose mask is re-applied after each step. In float16 /
    bfloat16 both also run against a float64 run of the dense masked model from the same start: the
    sparse model must be about as close to it as the dense one (Adam divides by sqrt(v), so a gradient
    near 0 rounded differently moves its entry by up to lr: no elementwise tolerance fits)."""
    sparse = _mlp(dtype, 0)
    ustc.torch.prune_model(sparse, amount, method=method)
    dense, exact = _mlp(dtype, 1), _mlp(torch.float64, 1)
    dense.load_state_dict(sparse.state_dict())
    exact.load_state_dict({k: v.double() for k, v in sparse.state_dict().items()})
    masks = {i: sparse[i].weight.detach() != 0 for i in (0, 2)}
    ustc.torch.reformat_model(sparse)
    assert all(isinstance(sparse[i].weight, TorchUST) for i in masks)
    eps = 1e-8 if dtype in (torch.float64, torch.float32) else 1e-3  # 1e-8 is 0 in float16: 0 / 0
    models = (sparse, dense, exact)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1, eps=eps) for m in models]
    g = torch.Generator().manual_seed(5)
    for _ in range(5):
        x = torch.randn(24, 32, generator=g).to(dtype)
        target = torch.randn(24, 16, generator=g).to(dtype)
        for model, opt in zip(models, opts):
            opt.zero_grad()
            F.mse_loss(model(x.to(model[0].bias.dtype)).double(), target.double()).backward()
        for i, mask in masks.items():
            dense[i].weight.grad.mul_(mask)
            exact[i].weight.grad.mul_(mask)
        for opt in opts:
            opt.step()
        with torch.no_grad():
            for i, mask in masks.items():
                dense[i].weight.mul_(mask)
                exact[i].weight.mul_(mask)
    for i, mask in masks.items():
        got = sparse[i].weight.detach().to_dense()
        assert got.dtype == dtype and not got[~mask].any()
        if dtype in (torch.float64, torch.float32):
            tol = dict(rtol=1e-9, atol=1e-11) if dtype == torch.float64 else TOL[dtype]
            torch.testing.assert_close(got, dense[i].weight.detach(), **tol)
            torch.testing.assert_close(sparse[i].bias.detach(), dense[i].bias.detach(), **tol)
            continue
        for name in ("weight", "bias"):
            want = getattr(exact[i], name).detach()
            ours = got if name == "weight" else sparse[i].bias.detach()
            error, reference = _error(ours, want), _error(getattr(dense[i], name).detach(), want)
            assert error <= 2 * reference + 1e-3, (name, error, reference)


def _error(got, want) -> float:
    return float((got.double() - want).norm() / want.norm())


def test_general_route_where_the_training_path_does_not_apply():
    """A sparse input or a TorchUST bias keeps the general route (MatmulFn)."""
    W, _ = _pair(ustc.formats.CSR, (6, 8), torch.float64)
    x = TorchUST.from_torch(torch.eye(8, dtype=torch.float64)[:3].contiguous(), "CSR")
    assert not training.applies(x, W, None)
    assert not training.applies(torch.zeros((), dtype=torch.float64), W, None)
    assert training.applies(torch.zeros(3, 8, dtype=torch.float64), W, None)
    assert not training.applies(torch.zeros(3, 8, dtype=torch.complex128), W, None)


@pytest.mark.parametrize("fmt", ["CSR", "COO", "BSR(2, 2)", "Structured(2, 4)", "DIAI"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=["f64", "f32", "bf16"])
def test_general_route_products_by_rows(fmt, dtype):
    """``x @ W.t()``, ``W @ x`` and ``x @ W`` outside F.linear (MatmulFn): the backward products that would
    walk W by columns run over W stored by rows; gradients equal the dense masked ones."""
    W, w = _pair(ustc.Tensor.from_dense(np.eye(4), fmt).format, (12, 20), dtype)
    g = torch.Generator().manual_seed(7)
    tol = TOL[dtype]
    for make, side in ((lambda m, x: x @ m.t(), (9, 20)), (lambda m, x: m @ x, (20, 5)),
                       (lambda m, x: x @ m, (9, 12)), (lambda m, x: m @ x, (20,))):
        x = torch.randn(side, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
        xd = x.detach().clone().requires_grad_()
        y, yd = make(W, x), make(w, xd)
        grad = torch.randn(yd.shape, generator=g, dtype=torch.float64).to(dtype)
        y.backward(grad)
        yd.backward(grad)
        torch.testing.assert_close(y, yd, **tol)
        torch.testing.assert_close(x.grad, xd.grad, **tol)
        torch.testing.assert_close(W.grad.to_dense(), w.grad * W.pattern_mask(), **tol)
        W.grad = w.grad = None
