"""A 2-D TorchUST's pattern as CSR, for products that must walk it by rows.

A product ``A @ X`` runs a row-parallel kernel when ``A`` is stored by rows.
Backward passes need the transpose of the forward's operand (``dx = g @ W`` is
``Wᵀ @ gᵀ`` transposed), and a transposed view of a row-major format is
stored by columns: its generated kernel can only parallelise the loop over
``X``'s columns, one parallel region per stored entry (20-60x slower than the
dense product). :func:`transposed_rows` stores ``Wᵀ`` (or ``W``) as CSR
instead: index buffers and slot permutation built once per pattern, values
gathered at every call (so optimizer steps are seen).
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from torch.utils.weak import WeakIdKeyDictionary

from .. import matmul as ustc_matmul
from ..formats import CSR
from ..format.ir import TensorFormat
from ..kernels._narrow_spmv import row_chunks
from ..kernels._sddmm import column_chunks, csr_sddmm, csr_spmm, csr_spmm_t
from ..tensor.tensor import Tensor
from .pattern import pattern_coords, slot_count
from .subclass import TorchUST, host, to_torch

_NARROW = (torch.float16, torch.bfloat16)
_ROWS = WeakIdKeyDictionary()  # row coordinates -> (column coordinates, slot index, CSR parts)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a product of ``dtype`` operands runs in on the CPU (float16 / bfloat16: float32)."""
    return torch.float32 if dtype in _NARROW else dtype


def transposed_rows(weight: TorchUST, dtype: torch.dtype, *, transpose: bool = True) -> Tensor:
    """``Wᵀ`` (``W`` when not ``transpose``) as a CSR ustc Tensor of ``dtype`` (a torch dtype with a
    NumPy twin): the pattern's entries only.

    The index buffers and the slot permutation are built once per pattern (cached
    with its coordinates, which live as long as the weight's storage and which a
    transposed view shares); the values are gathered from ``W``'s at every call,
    so in-place updates of the weight are seen.
    """
    fmt, shape, buffers, slots = pattern_csr(weight.ust, transpose=transpose)
    values = weight._v.detach().reshape(-1).index_select(0, slots).to(dtype)
    return Tensor(fmt, shape, buffers, host(values))


def pattern_csr(ust: Tensor, *, transpose: bool) -> tuple:
    """``(format, shape, buffers, slots)``: the 2-D pattern ``ust`` (its transpose with ``transpose``)
    as CSR index buffers whose entry ``q`` is ``ust``'s value slot ``slots[q]`` (a torch int64
    tensor); built once per pattern and cached with its coordinates (see :func:`transposed_rows`)."""
    coords, index = pattern_coords(ust, "cpu")
    major, minor = coords[::-1] if transpose else coords
    # keyed by the coordinate tensors: a transposed view shares them swapped (pattern.share), so W.t()
    # stored by rows finds what W stored by columns built
    cached = _ROWS.get(major)
    if cached is None or cached[0] is not minor or cached[1] is not index:
        shape = ust.shape[::-1] if transpose else ust.shape
        cached = (minor, index, _csr_parts(shape, major, minor, index))
        _ROWS[major] = cached
    return cached[2]


def column_major(x: TorchUST) -> bool:
    """Whether ``x`` (2-D) is stored column by column (a transposed view of a row-major format): a
    product walking it as stored can only parallelise the loop over the other operand's columns."""
    fmt = x.ust.format
    return x.dim() == 2 and fmt.levels[0].expr == fmt.dims[1]


def row_product(x: TorchUST, other, *, transpose: bool = False):
    """``x @ other`` (``xᵀ @ other`` with ``transpose``; ``other`` a dense 2-D torch tensor) over that
    matrix stored as CSR (:func:`transposed_rows`); the result in the promoted dtype, narrow dtypes
    computed in float32."""
    dtype = torch.promote_types(compute_dtype(x.dtype), compute_dtype(other.dtype))
    rows = transposed_rows(x, dtype, transpose=transpose)
    return to_torch(ustc_matmul(rows, host(other.to(dtype).contiguous())))


def _csr_parts(shape, rows, cols, index) -> tuple:
    """``(format, shape, buffers, slots)`` of the CSR of the ``shape`` matrix with an entry at each
    ``(rows[p], cols[p])``, whose entry ``q`` holds the source's value slot ``slots[q]``."""
    m, n = shape
    order = torch.argsort(rows * max(n, 1) + cols)
    counts = torch.bincount(rows, minlength=m)
    pos = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(counts.numpy(), out=pos[1:])
    narrow = n <= 1 << 16
    fmt = TensorFormat(CSR.dims, CSR.levels, 0, 16) if narrow else CSR
    index_dtype = np.int32 if len(order) < 2**31 and n < 2**31 else np.int64
    crd = cols[order].numpy().astype(np.uint16 if narrow else index_dtype)
    buffers = {(1, "pos"): pos.astype(index_dtype), (1, "crd"): crd}
    return fmt, (m, n), buffers, index[order]


# -- the backward kernels (ustc.kernels._sddmm) over the pattern's CSR --------------------------
#: a kernel's time per multiply-add over torch's GEMM's, float32, 512 tokens, one thread on the
#: project machine (kernel vs GEMM ms at 10% / 30% stored entries, 2048 x 512 and 512 x 2048):
#: the SDDMM 5.0 vs 12.5 and 12.5 vs 10.7, the gather SpMM 5.3 vs 11.4 and 10.5 vs 9.6, the
#: scatter SpMM 7.6 vs 10.6 and 22.0 vs 10.4. The kernel runs where ``density * slowdown < 1``.
SLOWDOWN = {"sddmm": 4.0, "gather": 4.0, "scatter": 10.0}


def kernel_wins(ust: Tensor, kind: str) -> bool:
    """Whether the backward kernel ``kind`` (a key of :data:`SLOWDOWN`) beats torch's dense product on
    the 2-D pattern ``ust`` (the dense product's cost: every position; the kernel's: stored ones)."""
    rows, cols = ust.shape
    return len(pattern_coords(ust, "cpu")[1]) * SLOWDOWN[kind] < rows * cols


def product_kind(ust: Tensor, *, transpose: bool) -> str:
    """The kernel :func:`pattern_matmul` runs for ``A @ B`` with ``A = ustᵀ`` (``ust`` when not
    ``transpose``): the gather SpMM when ``B`` has no more rows than ``A`` (its rows stay in cache),
    else the scatter SpMM (the output's rows do)."""
    rows, cols = ust.shape[::-1] if transpose else ust.shape
    return "gather" if cols <= rows else "scatter"


def pattern_matmul(ust: Tensor, values, b, *, transpose: bool):
    """``A @ b`` with ``A = ustᵀ`` (``ust`` when not ``transpose``) holding ``values`` (its flat value
    slots, a CPU torch tensor) and ``b`` a dense 2-D CPU tensor; float32 / float64 (narrow dtypes:
    float32), the result ``(A's rows, b's columns)`` C-contiguous."""
    dtype = torch.promote_types(compute_dtype(values.dtype), compute_dtype(b.dtype))
    rows, cols = ust.shape[::-1] if transpose else ust.shape
    if tuple(b.shape[:1]) != (cols,) or b.dim() != 2:
        raise ValueError(f"pattern_matmul: a ({rows}, {cols}) matrix times a {tuple(b.shape)} one")
    dense = b.detach().to(dtype).contiguous()
    out = torch.empty(rows, dense.shape[1], dtype=dtype)
    gather = product_kind(ust, transpose=transpose) == "gather"
    _, _, buffers, slots = pattern_csr(ust, transpose=transpose if gather else not transpose)
    pos, crd = buffers[(1, "pos")], buffers[(1, "crd")]
    vals = values.detach().reshape(-1).index_select(0, slots).to(dtype).numpy()
    threads = numba.get_num_threads()
    if gather:
        csr_spmm(pos, crd, vals, dense.numpy(), row_chunks(pos, threads), out.numpy())
    else:
        csr_spmm_t(pos, crd, vals, dense.numpy(), column_chunks(dense.shape[1], threads), out.numpy())
    return out


def pattern_sddmm(ust: Tensor, left, right, dtype: torch.dtype):
    """``(left @ right)`` at the 2-D pattern ``ust``'s stored slots: a flat tensor of its value slots
    (0 outside the pattern) in ``dtype`` (float32 / float64). ``left`` (m, r) and ``right`` (r, n)
    dense CPU tensors. The kernel walks the pattern (or its transpose) so that the factor it reads
    once per stored entry is the one with fewer rows (it stays in cache)."""
    rows, cols = ust.shape
    if left.shape[0] != rows or right.shape[1] != cols or left.shape[1] != right.shape[0]:
        raise ValueError(f"pattern_sddmm: {tuple(left.shape)} @ {tuple(right.shape)} at a {ust.shape} pattern")
    a = left.detach().to(dtype).contiguous()
    b = right.detach().t().to(dtype).contiguous()
    transpose = rows < cols  # walk Wᵀ by rows and stream gᵀ (rows x r), else walk W and stream xᵀ
    if transpose:
        a, b = b, a
    _, _, buffers, slots = pattern_csr(ust, transpose=transpose)
    pos, crd = buffers[(1, "pos")], buffers[(1, "crd")]
    values = torch.zeros(slot_count(ust), dtype=dtype)
    csr_sddmm(pos, crd, slots.numpy(), a.numpy(), b.numpy(), row_chunks(pos, numba.get_num_threads()),
              values.numpy())
    return values
