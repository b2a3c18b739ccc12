"""Training a sparse ``nn.Linear`` on the CPU: one autograd Function for ``F.linear`` with a TorchUST weight.

``F.linear(x, W, bias)`` with a 2-D TorchUST ``W`` on the CPU, when autograd
has something to record, runs :class:`LinearFn` instead of the general route
(``x @ Wᵀ`` through :class:`~ustc.torch.autograd.MatmulFn`):

* forward: ``W @ xᵀ`` through the weight's planned Matmul
  (:func:`ustc.torch.inference.planned_linear`), the bias added there;
* ``dx = g @ W``: ``(Wᵀ @ gᵀ)ᵀ`` with ``Wᵀ`` stored as CSR (:func:`transposed_rows`,
  index buffers built once per pattern, values gathered at every backward), so
  the product walks rows and runs the same row-parallel SpMM kernel as the
  forward. The general route multiplied by the transposed view (a CSC walk),
  whose generated kernel can only parallelise the loop over the batch: one
  parallel region per stored entry, 20-60x the dense model's backward;
* ``dW = gᵀ @ x`` at the pattern (:func:`weight_grad`): above
  ``autograd.SDDMM_MAX_DENSITY`` stored entries, a dense product (torch's GEMM)
  sampled at the pattern; below, the SDDMM that computes the stored entries
  only (:func:`ustc.torch.autograd.sddmm`). On the project's CPU torch's GEMM
  does a multiply-add about 25x faster than the generated SDDMM's inner
  product and 70x faster than the chunked gather, so the dense product wins
  from a few percent of stored entries up;
* ``dbias = Σ g``.

The weight's gradient is a TorchUST of its pattern (0 at frozen slots), as on
the general route, so optimizers keep the pruning mask.
"""

from __future__ import annotations

import torch

from .. import matmul as ustc_matmul
from .autograd import pattern_product
from .inference import planned_linear
from .rows import compute_dtype, transposed_rows
from .subclass import TorchUST, host, to_torch

_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


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
        return planned_linear(x, weight, bias)

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


def input_grad(weight: TorchUST, g2):
    """``g2 @ W`` (``g2``: (batch, rows)) as ``(Wᵀ @ g2ᵀ)ᵀ`` with ``Wᵀ`` row-major (:func:`transposed_rows`)."""
    dtype = torch.promote_types(compute_dtype(weight.dtype), compute_dtype(g2.dtype))
    wt = transposed_rows(weight, dtype)
    if g2.shape[0] == 1:  # one row: an SpMV
        out = to_torch(ustc_matmul(wt, host(g2.reshape(-1).to(dtype).contiguous())))
        return out.reshape(1, -1)
    right = host(g2.t().to(dtype).contiguous())
    return to_torch(ustc_matmul(wt, right)).t()


def weight_grad(weight: TorchUST, g2, x2) -> TorchUST:
    """``g2ᵀ @ x2`` at ``W``'s pattern, a TorchUST of it (:func:`ustc.torch.autograd.pattern_product`)."""
    return pattern_product(weight, g2.t(), x2)
