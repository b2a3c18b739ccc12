"""Training a sparse ``nn.Linear`` on the CPU: one autograd Function for ``F.linear`` with a TorchUST weight.

``F.linear(x, W, bias)`` with a 2-D TorchUST ``W`` on the CPU, when autograd
has something to record, runs :class:`LinearFn` instead of the general route
(``x @ Wᵀ`` through :class:`~ustc.torch.autograd.MatmulFn`). Each of its three
products runs either a kernel over the pattern (``ustc.kernels._sddmm``, the
parallel loop outermost, one parallel region a call) or torch's GEMM on the
dense twin of ``W`` (:func:`dense_weight`), whichever
:func:`ustc.torch.rows.kernel_wins` expects faster from the share of stored
entries (a kernel does a multiply-add 4-10x slower than the GEMM, so it runs
below about 10-25% stored entries):

* forward ``y = x @ Wᵀ``: ``(W @ xᵀ)ᵀ`` by the weight's planned Matmul, the product the
  inference path runs (:func:`ustc.torch.inference.planned_linear`), bias added;
* ``dx = g @ W``: ``(Wᵀ @ gᵀ)ᵀ`` by the same SpMM over ``Wᵀ`` (index buffers and
  the slot permutation built once per pattern; values gathered at every call,
  so optimizer steps are seen);
* ``dW = gᵀ @ x`` at the pattern (:func:`weight_grad`): the SDDMM kernel, else
  the GEMM sampled at the pattern (:func:`ustc.torch.autograd.pattern_product`);
* ``dbias = Σ g``.

The weight's gradient is a TorchUST of its pattern (0 at frozen slots), as on
the general route, so optimizers keep the pruning mask.
"""

from __future__ import annotations

import weakref

import torch

from ..tensor.tensor import Tensor
from .autograd import pattern_product
from .inference import planned_linear
from .pattern import pattern_flat, pattern_slots
from .rows import compute_dtype, kernel_wins, pattern_matmul, product_kind
from .subclass import TorchUST

_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
#: inputs of fewer rows than this take the planned product in the forward whatever the density: the GEMM
#: route rewrites the dense twin's pattern entries at every call, which at batch 1 costs 6-8x the planned
#: product (2048 x 2048 2:4: 4.7 ms against 0.55; bench_torch's general-route column at ebda9de)
GEMM_MIN_BATCH = 32


def applies(x, weight, bias) -> bool:
    """Whether :func:`linear` takes ``F.linear(x, weight, bias)``: a dense CPU input of a floating
    dtype with at least one dimension, a 2-D TorchUST weight on the CPU, a dense bias or None."""
    if type(x) is not torch.Tensor and not isinstance(x, torch.nn.Parameter):
        return False
    if x.device.type != "cpu" or x.dim() == 0 or x.dtype not in _DTYPES or weight._ust is None:
        return False
    if weight.dim() != 2 or weight.ust.format.batch_levels or weight.device.type != "cpu" or \
            weight.dtype not in _DTYPES or x.shape[-1] != weight.shape[1]:
        return False
    return bias is None or (type(bias) in (torch.Tensor, torch.nn.Parameter) and bias.device.type == "cpu")


def linear(x, weight: TorchUST, bias):
    """``F.linear(x, weight, bias)`` with autograd (see the module docstring); check :func:`applies` first."""
    return LinearFn.apply(x, weight, bias)


class LinearFn(torch.autograd.Function):
    """``x @ Wᵀ + bias`` for a 2-D TorchUST ``W``; gradients to ``x``, ``W`` (at its pattern) and ``bias``."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return forward_product(x, weight, bias)

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        rows, cols = weight.shape
        g2, x2 = g.reshape(-1, rows), x.reshape(-1, cols)
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = input_grad(weight, g2).reshape(x.shape).to(x.dtype)
        if ctx.needs_input_grad[1]:
            grad_w = weight_grad(weight, g2, x2)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g2.sum(0)
        return grad_x, grad_w, grad_b


def forward_product(x, weight: TorchUST, bias):
    """``F.linear(x, weight, bias)``: the weight's planned product (:func:`ustc.torch.inference.planned_linear`)
    where a kernel over ``W`` beats torch's GEMM (:func:`ustc.torch.rows.kernel_wins`), else ``x @`` the dense twin of
    ``W`` (:func:`dense_weight`); computed in float32 / float64, returned in the promoted dtype."""
    ust = weight.ust
    rows, cols = ust.shape
    x2 = x.detach().reshape(-1, cols)
    dtype = torch.promote_types(compute_dtype(weight.dtype), compute_dtype(x.dtype))
    bias = bias.detach().to(dtype) if bias is not None else None
    if x2.shape[0] < GEMM_MIN_BATCH or kernel_wins(ust, product_kind(ust, transpose=False)):
        # the weight's planned Matmul, as inference runs it: its route's kernel (a CSR row walk vectorised
        # over the batch, n:m selects, ...) and a plan kept per input shape; at batch 1 a tenth of the
        # pattern kernel's per-call work (512 x 512 at 90%: ~33 against ~330 µs a call)
        y = planned_linear(x2, weight, bias)
    else:
        y = x2.to(dtype) @ dense_weight(weight).to(dtype).t()
        if bias is not None:
            y.add_(bias)
    return y.reshape(*x.shape[:-1], rows).to(torch.promote_types(x.dtype, weight.dtype))


def input_grad(weight: TorchUST, g2):
    """``g2 @ W`` (``g2``: (batch, rows)): the SpMM kernel over ``Wᵀ``
    (:func:`ustc.torch.rows.pattern_matmul`, a transposed view of its row-major result) where it beats
    torch's GEMM (:func:`ustc.torch.rows.kernel_wins`), else ``g2 @`` the dense twin of ``W``
    (:func:`dense_weight`). Float32 / float64, narrow dtypes computed in float32."""
    ust = weight.ust
    if kernel_wins(ust, product_kind(ust, transpose=True)):
        return pattern_matmul(ust, weight._v, g2.t(), transpose=True).t()
    dtype = torch.promote_types(compute_dtype(weight.dtype), compute_dtype(g2.dtype))
    return g2.to(dtype) @ dense_weight(weight).to(dtype)


def weight_grad(weight: TorchUST, g2, x2) -> TorchUST:
    """``g2ᵀ @ x2`` at ``W``'s pattern, a TorchUST of it (:func:`ustc.torch.autograd.pattern_product`)."""
    return pattern_product(weight, g2.t(), x2)


_DENSE: "weakref.WeakKeyDictionary[Tensor, tuple]" = weakref.WeakKeyDictionary()


def dense_weight(weight: TorchUST):
    """``W`` as a dense tensor (float32 for narrow dtypes), kept with ``W``'s storage and refreshed at
    every call: the values in the pattern are written, every other entry is 0 from the start and
    never written (so a refresh never shows a half-written matrix, and costs what the pattern
    costs); a new pattern (``freeze_zeros_``) gets a new tensor. A dense model holds such a tensor
    per weight too."""
    ust = weight.ust
    flat = pattern_flat(ust, "cpu")
    cached = _DENSE.get(ust)
    if cached is None or cached[0] is not flat:  # new, or a pattern changed by freeze_zeros_
        cached = _DENSE[ust] = (flat, torch.zeros(ust.shape, dtype=compute_dtype(weight.dtype)))
    dense = cached[1]
    _, index, full = pattern_slots(ust, "cpu")
    values = weight._v.detach().reshape(-1)
    values = (values if full else values.index_select(0, index)).to(dense.dtype)
    dense.view(-1).index_copy_(0, flat, values)
    return dense
