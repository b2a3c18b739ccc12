"""Element-wise, ``_foreach_*``, norm and ``*_like`` ops on TorchUST against dense torch on random data."""

from __future__ import annotations

import warnings

import pytest
import torch

import ustc
from ustc import formats
from ustc.torch import TorchUST
from ustc.torch.pattern import pattern_coords

from torch_helpers import random_weight, torch_ust

TOL = dict(rtol=1e-12, atol=1e-14)
PATTERN_FORMATS = [formats.CSR, formats.BSR(4, 4), formats.Structured(2, 4), formats.DIAI, formats.COO()]


def _frozen(fmt, seed=0):
    """A TorchUST whose zeros are frozen, its dense tensor and its mask (BSR(4, 4) stores zeros in blocks)."""
    T, W = torch_ust(fmt, random_weight((8, 12), density=0.4, seed=seed))
    T.freeze_zeros_()
    return T, W, W != 0


def _dense(shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_like_ops_are_dense_strided_tensors():
    T, W = torch_ust(formats.CSR, random_weight(seed=3))
    for got, want in [(torch.zeros_like(T), torch.zeros_like(W)), (torch.ones_like(T), torch.ones_like(W)),
                      (torch.full_like(T, 2.5), torch.full_like(W, 2.5)),
                      (torch.zeros_like(T, memory_format=torch.preserve_format), torch.zeros_like(W)),
                      (T.new_zeros((2, 3)), W.new_zeros((2, 3))), (T.new_ones(4), W.new_ones(4)),
                      (T.new_full((2,), 7.0), W.new_full((2,), 7.0))]:
        assert type(got) is torch.Tensor and got.layout == torch.strided and got.is_contiguous()
        assert got.device == want.device
        torch.testing.assert_close(got, want)
    for got in (torch.empty_like(T), torch.rand_like(T), torch.randn_like(T), T.new_empty((6, 8))):
        assert type(got) is torch.Tensor and got.shape == T.shape and got.dtype == T.dtype
    assert torch.zeros_like(T, dtype=torch.float32).dtype == torch.float32
    assert torch.empty_like(T, dtype=torch.int32).dtype == torch.int32


@pytest.mark.parametrize("fmt", PATTERN_FORMATS, ids=str)
def test_out_of_place_ops_keep_the_pattern(fmt):
    T, W = torch_ust(fmt, random_weight((8, 12), density=0.4, seed=4))
    U = T.with_values(torch.randn_like(T.stored_values()))  # same pattern, other values
    V = U.to_dense()
    cases = [(T * T, W * W), (T * 3, W * 3), (T / 2, W / 2), (T + U, W + V), (T - U, W - V), (-T, -W),
             (torch.sqrt(T.abs()), torch.sqrt(W.abs())), (torch.addcmul(T, U, T, value=0.5),
                                                         torch.addcmul(W, V, W, value=0.5)),
             (torch.maximum(T, U), torch.maximum(W, V)), (torch.lerp(T, U, 0.3), torch.lerp(W, V, 0.3)),
             (T * torch.tensor(2.0, dtype=torch.float64), W * 2), (torch.sin(T), torch.sin(W)),
             (T.clamp(-0.5, 0.5), W.clamp(-0.5, 0.5))]
    for got, want in cases:
        assert isinstance(got, TorchUST) and got.ust.format == T.ust.format
        torch.testing.assert_close(got.to_dense(), want, **TOL)


def test_out_of_place_ops_that_leave_the_pattern_give_dense_results():
    T, W = torch_ust(formats.CSR, random_weight(seed=5))
    other, V = torch_ust(formats.CSR, random_weight(seed=6))
    D = torch.linspace(-1, 1, 48, dtype=torch.float64).reshape(6, 8)
    cases = [(T + 1, W + 1), (torch.exp(T), torch.exp(W)), (T / T, W / W), (T.pow(0), W.pow(0)),
             (T * other, W * V), (T * D, W * D), (D - T, D - W), (torch.cosh(T), torch.cosh(W))]
    for got, want in cases:
        assert type(got) is torch.Tensor  # not stored in T's pattern: dense
        torch.testing.assert_close(got, want, **TOL, equal_nan=True)


@pytest.mark.parametrize("fmt", PATTERN_FORMATS, ids=str)
def test_in_place_ops_on_a_torchust_write_the_pattern_only(fmt):
    T, W, mask = _frozen(fmt, seed=7)
    D, E = _dense(T.shape, 8), _dense(T.shape, 9)
    U = T.with_values(torch.randn_like(T.stored_values()))
    V = U.to_dense()
    values_before = T.stored_values().clone()
    ref = W.clone()

    def check(update, dense_update):
        update(T)
        dense_update(ref)
        ref.mul_(mask)  # the projection: entries outside the pattern stay 0
        torch.testing.assert_close(T.to_dense(), ref, **TOL)

    check(lambda t: t.addcdiv_(D, E.abs() + 1, value=-0.1), lambda r: r.addcdiv_(D, E.abs() + 1, value=-0.1))
    check(lambda t: t.addcmul_(U, D, value=2), lambda r: r.addcmul_(V, D, value=2))
    check(lambda t: t.lerp_(D, 0.25), lambda r: r.lerp_(D, 0.25))
    check(lambda t: t.mul_(torch.tensor(0.5, dtype=torch.float64)), lambda r: r.mul_(0.5))
    check(lambda t: t.add_(1.5), lambda r: r.add_(1.5))  # dense would fill everything; the pattern keeps its 0s
    check(lambda t: t.sub_(D[0]), lambda r: r.sub_(D[0]))  # broadcast
    check(lambda t: t.copy_(E), lambda r: r.copy_(E))
    check(lambda t: t.copy_(U), lambda r: r.copy_(V))
    check(lambda t: t.clamp_(max=0.1), lambda r: r.clamp_(max=0.1))
    check(lambda t: torch.maximum(t, U, out=t), lambda r: torch.maximum(r, V, out=r))
    check(lambda t: t.abs_(), lambda r: r.abs_())
    check(lambda t: t.zero_(), lambda r: r.zero_())
    outside = torch.ones(values_before.numel(), dtype=torch.bool)
    outside[pattern_coords(T.ust, "cpu")[1]] = False
    assert torch.equal(T.stored_values().reshape(-1)[outside], values_before.reshape(-1)[outside])  # never written


def test_in_place_ops_on_a_dense_tensor_read_torchusts_as_dense():
    T, W = torch_ust(formats.BSR(2, 2), random_weight((8, 12), seed=10))
    D = _dense(T.shape, 11)
    for op in (lambda d, t: d.lerp_(t, 0.1), lambda d, t: d.addcmul_(t, t, value=0.5),
               lambda d, t: d.addcdiv_(t, d.abs() + 1), lambda d, t: d.copy_(t), lambda d, t: d.mul_(t)):
        got, want = D.clone(), D.clone()
        op(got, T)
        op(want, W)
        assert type(got) is torch.Tensor
        torch.testing.assert_close(got, want, **TOL)
    out = D.clone()
    torch.maximum(D, T.abs(), out=out)
    torch.testing.assert_close(out, torch.maximum(D, W.abs()), **TOL)


def test_foreach_ops_with_torchusts():
    T, W, mask = _frozen(formats.BSR(4, 4), seed=12)
    U = T.with_values(torch.randn_like(T.stored_values()))
    V = U.to_dense()
    D, E = _dense(T.shape, 13), _dense((3,), 14)
    sparse, dense = [T, E.clone()], [W.clone(), E.clone()]
    others_sparse, others_dense = [U, E.clone() * 2], [V, E * 2]
    for s, d in [(lambda: torch._foreach_add_(sparse, others_sparse, alpha=0.5),
                  lambda: torch._foreach_add_(dense, others_dense, alpha=0.5)),
                 (lambda: torch._foreach_mul_(sparse, 0.9), lambda: torch._foreach_mul_(dense, 0.9)),
                 (lambda: torch._foreach_addcdiv_(sparse, others_sparse, [D.abs() + 1, E.abs() + 1], [0.1, 0.2]),
                  lambda: torch._foreach_addcdiv_(dense, others_dense, [D.abs() + 1, E.abs() + 1], [0.1, 0.2])),
                 (lambda: torch._foreach_addcmul_(sparse, others_sparse, others_sparse,
                                                  torch.tensor([0.3, 0.4], dtype=torch.float64)),
                  lambda: torch._foreach_addcmul_(dense, others_dense, others_dense,
                                                  torch.tensor([0.3, 0.4], dtype=torch.float64))),
                 (lambda: torch._foreach_lerp_(sparse, others_sparse, 0.2),
                  lambda: torch._foreach_lerp_(dense, others_dense, 0.2))]:
        s()
        d()
        dense[0].mul_(mask)
        torch.testing.assert_close(sparse[0].to_dense(), dense[0], **TOL)
        torch.testing.assert_close(sparse[1], dense[1], **TOL)
    roots = torch._foreach_sqrt([T.abs(), E.abs()])
    assert isinstance(roots[0], TorchUST)
    torch.testing.assert_close(roots[0].to_dense(), T.to_dense().abs().sqrt(), **TOL)
    states = [D.clone(), E.clone()]
    torch._foreach_maximum_(states, [T.abs(), E.abs()])
    torch.testing.assert_close(states[0], torch.maximum(D, T.to_dense().abs()), **TOL)


@pytest.mark.parametrize("ord_", [2, 1, 3.5, 0, float("inf")])
def test_vector_norm_of_the_stored_values(ord_):
    T, W, _ = _frozen(formats.BSR(4, 4), seed=15)
    torch.testing.assert_close(torch.linalg.vector_norm(T, ord_), torch.linalg.vector_norm(W, ord_), **TOL)
    norms = torch._foreach_norm([T, W], ord_)
    torch.testing.assert_close(norms[0], norms[1], **TOL)
    torch.testing.assert_close(torch.linalg.vector_norm(T, 2, dim=0), torch.linalg.vector_norm(W, 2, dim=0), **TOL)


def test_freeze_zeros_and_pattern_mask():
    T, W = torch_ust(formats.BSR(4, 4), random_weight((8, 12), density=0.4, seed=16))
    stored = T.pattern_mask()
    assert stored.sum() > (W != 0).sum()  # the blocks store explicit zeros
    assert torch.equal(T.freeze_zeros_().pattern_mask(), W != 0)
    assert torch.equal(T.detach().pattern_mask(), W != 0) and torch.equal(T.t().pattern_mask(), (W != 0).t())
    assert torch.equal(T.clone().pattern_mask(), W != 0) and torch.equal(torch.abs(T).pattern_mask(), W != 0)
    P = torch.nn.Parameter(T)
    x, gy = _dense((5, 12), 17), _dense((5, 8), 18)
    torch.nn.functional.linear(x, P).backward(gy)
    torch.testing.assert_close(P.grad.to_dense(), (gy.t() @ x) * (W != 0), **TOL)  # 0 at the frozen zeros
    assert torch.equal(P.grad.pattern_mask(), W != 0)
    assert all(P.grad.ust._buffers[key] is buf for key, buf in T.ust._buffers.items())  # shared, not copied
