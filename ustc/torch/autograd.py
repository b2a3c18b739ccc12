"""Autograd for TorchUST: products, ``to_dense`` and ``with_values``.

For ``y = a @ b`` (1-D / 2-D, one operand a TorchUST):

* the gradient of the dense operand is the product with the transposed sparse
  one (``gᵀ``-side products run through ``ustc.matmul`` and its plan cache, the
  sparse operand as a zero-copy transposed view);
* the gradient of the sparse operand is restricted to its stored pattern: an
  SDDMM (:func:`sddmm`) that evaluates ``(left @ right)[i, j]`` only at the
  stored coordinates, returned as a TorchUST sharing the operand's index
  buffers. Value slots outside the pattern (``ustc.torch.pattern``: DIA and
  block padding outside the matrix, slots frozen by ``freeze_zeros_``) get 0.

So pruned fine-tuning keeps the pattern: ``W.grad`` has ``W``'s format and
index buffers, and optimizer steps (``ustc.torch.pointwise``) update the
values in the pattern only.
"""

from __future__ import annotations

import torch

from ..errors import UnsupportedOperation
from ..tensor.tensor import Tensor
from .matmul import is_sparse, matmul2d
from .pattern import pattern_coords, pattern_flat, pattern_slots, slot_count
from .rows import column_major, compute_dtype, kernel_wins, pattern_sddmm, row_product
from .subclass import TorchUST, dense_of, wrap_like

_CHUNK = 1 << 22  # gathered elements per SDDMM chunk


def sddmm(pattern, left, right) -> TorchUST:
    """``(left @ right)`` sampled at ``pattern``'s stored coordinates, as a TorchUST of that pattern.

    ``pattern``: a 2-D TorchUST (m, n); ``left`` (m, r) and ``right`` (r, n)
    dense torch tensors. Only the stored entries are computed (``nse * r``
    multiply-adds), in chunks. Value slots outside the pattern get 0.
    """
    ust = pattern.ust if isinstance(pattern, TorchUST) else pattern
    if ust.ndim != 2 or left.dim() != 2 or right.dim() != 2:
        raise UnsupportedOperation(f"sddmm: expected a 2-D pattern and 2-D factors, got {ust.shape}, "
                                   f"{tuple(left.shape)} and {tuple(right.shape)}")
    (rows, cols), index = pattern_coords(ust, left.device)
    dtype = torch.promote_types(left.dtype, right.dtype)
    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype  # accumulate narrow in float32
    lhs, rhs = left.to(wide).contiguous(), right.t().to(wide).contiguous()  # rows of both factors contiguous
    values = torch.zeros(slot_count(ust), dtype=wide, device=left.device)
    step = max(1, _CHUNK // max(1, lhs.shape[1]))
    for start in range(0, len(index), step):
        r, c = rows[start:start + step], cols[start:start + step]
        values[index[start:start + step]] = (lhs[r] * rhs[c]).sum(1)
    return wrap_like(ust, values.to(dtype))


#: below this share of stored entries :func:`pattern_product` is the torch SDDMM (:func:`sddmm`) where
#: the SDDMM kernel does not apply (not the CPU, not a float dtype), else a sampled dense product
SDDMM_MAX_DENSITY = 0.02


def pattern_product(pattern, left, right) -> TorchUST:
    """``left @ right`` at ``pattern``'s pattern, as :func:`sddmm` gives it, by the fastest way.

    On the CPU, float dtypes: the SDDMM kernel (:func:`ustc.torch.rows.pattern_sddmm`) where it
    beats torch's GEMM over the whole matrix (:func:`ustc.torch.rows.kernel_wins`: below about 25%
    stored entries), else the GEMM sampled at the pattern. Elsewhere: above
    :data:`SDDMM_MAX_DENSITY` stored entries the sampled GEMM (it costs one dense temporary), below
    :func:`sddmm`."""
    ust = pattern.ust if isinstance(pattern, TorchUST) else pattern
    if ust.ndim != 2 or left.dim() != 2 or right.dim() != 2:
        return sddmm(pattern, left, right)
    rows, cols = ust.shape
    dtype = torch.promote_types(left.dtype, right.dtype)
    out_dtype = pattern.dtype if isinstance(pattern, TorchUST) else dtype
    wide = compute_dtype(dtype)
    if left.device.type == "cpu" and right.device.type == "cpu" and wide in (torch.float32, torch.float64) \
            and kernel_wins(ust, "sddmm"):
        return wrap_like(ust, pattern_sddmm(ust, left, right, wide).to(out_dtype))
    if ust.nse < SDDMM_MAX_DENSITY * rows * cols:
        return sddmm(pattern, left, right)
    dense = left.to(wide) @ right.to(wide)
    return sample(ust, dense.to(out_dtype))


def sample(pattern: Tensor, dense) -> TorchUST:
    """``dense`` (any rank) read at ``pattern``'s coordinates, as a TorchUST of that pattern (0 outside it)."""
    _, index, full = pattern_slots(pattern, dense.device)
    picked = dense.reshape(-1).index_select(0, pattern_flat(pattern, dense.device))  # flat: faster than coords
    if full:
        return wrap_like(pattern, picked)
    values = torch.zeros(slot_count(pattern), dtype=dense.dtype, device=dense.device)
    values.index_copy_(0, index, picked)
    return wrap_like(pattern, values)


def _dense(x):
    return dense_of(x) if is_sparse(x) else x


class MatmulFn(torch.autograd.Function):
    """``a @ b`` for 1-D / 2-D operands; a product of two TorchUSTs is differentiable in neither."""

    @staticmethod
    def forward(ctx, a, b):
        if is_sparse(a) and is_sparse(b) and (a.requires_grad or b.requires_grad):
            raise UnsupportedOperation("ustc.torch: gradients of a product of two TorchUST tensors are not "
                                       "supported; detach one or call .to_dense() on it")
        ctx.save_for_backward(a, b)
        return matmul2d(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        g2 = g.reshape(a.shape[0] if a.dim() == 2 else 1, b.shape[1] if b.dim() == 2 else 1)
        ga = _grad_left(a, b, g2) if ctx.needs_input_grad[0] else None
        gb = _grad_right(a, b, g2) if ctx.needs_input_grad[1] else None
        return ga, gb


def _grad_left(a, b, g2):
    """dL/da = g2 @ b2ᵀ in ``a``'s shape (at ``a``'s pattern when ``a`` is sparse)."""
    if is_sparse(a):
        b2 = b if b.dim() == 2 else b.unsqueeze(1)
        if a.dim() == 2:
            return pattern_product(a, g2, b2.t())
        return sample(a.ust, (g2 @ b2.t()).reshape(-1))
    if is_sparse(b) and b.dim() == 2:  # g2 @ bᵀ = (b @ g2ᵀ)ᵀ, b walked by rows
        if _by_rows(b, g2):
            return row_product(b, g2.t()).t().reshape(a.shape).to(torch.promote_types(a.dtype, b.dtype))
        return matmul2d(b, g2.t()).t().reshape(a.shape)
    b2 = _dense(b).reshape(b.shape[0], -1)
    return (g2 @ b2.t()).reshape(a.shape)


def _by_rows(x, g2, *, transposed: bool = False) -> bool:
    """Whether the product with ``x`` (``xᵀ`` when ``transposed``) takes :func:`row_product`: on the
    CPU, a matrix right side, and ``x`` stored so that walking it as stored would go by columns."""
    if x.device.type != "cpu" or g2.dim() != 2 or g2.numel() == 0:
        return False
    return column_major(x) != transposed and x.dtype.is_floating_point and not x.ust.format.batch_levels


def _grad_right(a, b, g2):
    """dL/db = a2ᵀ @ g2 in ``b``'s shape (at ``b``'s pattern when ``b`` is sparse)."""
    if is_sparse(b):
        a2 = a if a.dim() == 2 else a.unsqueeze(0)
        if b.dim() == 2:
            return pattern_product(b, a2.t(), g2)
        return sample(b.ust, (a2.t() @ g2).reshape(-1))
    if is_sparse(a) and a.dim() == 2:  # aᵀ @ g2 through the transposed view, or aᵀ stored by rows
        if _by_rows(a, g2, transposed=True):
            dtype = torch.promote_types(a.dtype, b.dtype)
            return row_product(a, g2.reshape(a.shape[0], -1), transpose=True).reshape(b.shape).to(dtype)
        return matmul2d(a.t(), g2).reshape(b.shape)
    a2 = _dense(a).reshape(-1, a.shape[-1])
    return (a2.t() @ g2).reshape(b.shape)


class ToDense(torch.autograd.Function):
    """``TorchUST -> dense``; the gradient is the incoming one sampled at the stored pattern."""

    @staticmethod
    def forward(ctx, x):
        ctx.pattern = x.ust
        return dense_of(x)

    @staticmethod
    def backward(ctx, g):
        return sample(ctx.pattern, g)


class WithValues(torch.autograd.Function):
    """``(pattern, values) -> TorchUST``: the gradient of ``values`` is the stored values of the incoming one."""

    @staticmethod
    def forward(ctx, pattern, values):
        if values.dim() != 1 or values.shape[0] != slot_count(pattern.ust):
            raise UnsupportedOperation(f"with_values: expected a 1-D tensor of {slot_count(pattern.ust)} values, "
                                       f"got shape {tuple(values.shape)}")
        ctx.pattern = pattern.ust
        return wrap_like(pattern.ust, values)

    @staticmethod
    def backward(ctx, g):
        if not is_sparse(g):
            g = sample(ctx.pattern, g)
        return None, g.stored_values().reshape(-1)
