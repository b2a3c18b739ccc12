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
  :data:`SDDMM_MAX_DENSITY` stored entries, a dense product (torch's GEMM)
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

import weakref

import numpy as np
import torch

from .. import matmul as ustc_matmul
from ..formats import CSR
from ..format.ir import TensorFormat
from ..tensor.tensor import Tensor
from .autograd import sample, sddmm
from .inference import planned_linear
from .pattern import pattern_coords
from .subclass import TorchUST, host, to_torch

#: below this share of stored entries the weight gradient is an SDDMM, above a sampled dense product
SDDMM_MAX_DENSITY = 0.02
_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_NARROW = (torch.float16, torch.bfloat16)
_TRANSPOSED: "weakref.WeakKeyDictionary[Tensor, tuple]" = weakref.WeakKeyDictionary()  # ust -> (index, parts)


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


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in _NARROW else dtype


def input_grad(weight: TorchUST, g2):
    """``g2 @ W`` (``g2``: (batch, rows)) as ``(Wᵀ @ g2ᵀ)ᵀ`` with ``Wᵀ`` row-major (:func:`transposed_rows`)."""
    dtype = torch.promote_types(_compute_dtype(weight.dtype), _compute_dtype(g2.dtype))
    wt = transposed_rows(weight, dtype)
    if g2.shape[0] == 1:  # one row: an SpMV
        out = to_torch(ustc_matmul(wt, host(g2.reshape(-1).to(dtype).contiguous())))
        return out.reshape(1, -1)
    right = host(g2.t().to(dtype).contiguous())
    return to_torch(ustc_matmul(wt, right)).t()


def transposed_rows(weight: TorchUST, dtype: torch.dtype) -> Tensor:
    """``Wᵀ`` as a CSR ustc Tensor of ``dtype`` (a NumPy dtype's torch twin): the pattern's entries only.

    The index buffers and the slot permutation are built once per pattern (cached
    with the weight's storage); the values are gathered from ``W``'s at every call,
    so in-place updates of the weight are seen.
    """
    ust = weight.ust
    coords, index = pattern_coords(ust, "cpu")
    cached = _TRANSPOSED.get(ust)
    if cached is None or cached[0] is not index:
        cached = (index, _transposed_parts(ust.shape, coords, index))
        _TRANSPOSED[ust] = cached
    fmt, shape, buffers, slots = cached[1]
    values = weight._v.detach().reshape(-1).index_select(0, slots).to(dtype)
    return Tensor(fmt, shape, buffers, host(values))


def _transposed_parts(shape, coords, index) -> tuple:
    """``(format, shape, buffers, slots)`` of the CSR of ``Wᵀ``: entry ``p`` holds ``W``'s slot ``slots[p]``."""
    rows, cols = coords
    m, n = shape
    order = torch.argsort(cols * max(m, 1) + rows)
    counts = torch.bincount(cols, minlength=n)
    pos = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts.numpy(), out=pos[1:])
    narrow = m <= 1 << 16
    fmt = TensorFormat(CSR.dims, CSR.levels, 0, 16) if narrow else CSR
    index_dtype = np.int32 if len(order) < 2**31 and m < 2**31 else np.int64
    crd = rows[order].numpy().astype(np.uint16 if narrow else index_dtype)
    buffers = {(1, "pos"): pos.astype(index_dtype), (1, "crd"): crd}
    return fmt, (n, m), buffers, index[order]


def weight_grad(weight: TorchUST, g2, x2) -> TorchUST:
    """``g2ᵀ @ x2`` at ``W``'s pattern, a TorchUST of it (see the module docstring for the two ways)."""
    numel = weight.shape[0] * weight.shape[1]
    if weight.nse < SDDMM_MAX_DENSITY * numel:
        return sddmm(weight, g2.t(), x2)
    dtype = torch.promote_types(_compute_dtype(g2.dtype), _compute_dtype(x2.dtype))
    dense = g2.t().to(dtype) @ x2.to(dtype)
    return sample(weight.ust, dense.to(weight.dtype))
