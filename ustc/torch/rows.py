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

import numpy as np
import torch
from torch.utils.weak import WeakIdKeyDictionary

from .. import matmul as ustc_matmul
from ..formats import CSR
from ..format.ir import TensorFormat
from ..tensor.tensor import Tensor
from .pattern import pattern_coords
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
    ust = weight.ust
    coords, index = pattern_coords(ust, "cpu")
    major, minor = coords[::-1] if transpose else coords
    # keyed by the coordinate tensors: a transposed view shares them swapped (pattern.share), so W.t()
    # stored by rows finds what W stored by columns built
    cached = _ROWS.get(major)
    if cached is None or cached[0] is not minor or cached[1] is not index:
        shape = ust.shape[::-1] if transpose else ust.shape
        cached = (minor, index, _csr_parts(shape, major, minor, index))
        _ROWS[major] = cached
    fmt, shape, buffers, slots = cached[2]
    values = weight._v.detach().reshape(-1).index_select(0, slots).to(dtype)
    return Tensor(fmt, shape, buffers, host(values))


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
