"""Zero-copy views of PyTorch tensors: strided, sparse COO, CSR, CSC, BSR, BSC, hybrid.

CPU buffers are NumPy views of the torch storage (``Tensor.numpy()``), and go
back out through ``torch.from_numpy``, so ``data_ptr`` is preserved both ways.
Hybrid tensors (trailing dense dimensions in ``values``) get trailing dense
levels; batched compressed layouts get leading batch levels.
"""

from __future__ import annotations

import math

from ..errors import UnsupportedOperation
from ..format.ir import TensorFormat
from ..format.levels import Dense, LevelFormat
from . import packages
from .interop import _dims, _from_coords, from_numpy, plain_format
from .tensor import Tensor

C, D = LevelFormat.COMPRESSED, LevelFormat.DENSE


def from_torch(x) -> Tensor:
    import torch

    if x.device.type != "cpu":
        from .interop_cupy import from_torch_cuda

        return from_torch_cuda(x)
    x = x.detach()
    if x.layout == torch.strided:
        return from_numpy(packages.host_array(x), package=packages.TORCH)
    if x.layout == torch.sparse_coo:
        return _from_coo(x)
    if x.layout in (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc):
        return _from_compressed(x)
    raise UnsupportedOperation(f"torch layout {x.layout} has no ustc view")


def _from_coo(x) -> Tensor:
    indices, values = x._indices(), x._values()
    coords = tuple(packages.host_array(indices)[: x.sparse_dim()])
    origin = {"layout": "coo", "indices": indices}
    return _from_coords(coords, packages.host_array(values), tuple(x.shape), bool(x.is_coalesced()),
                        packages.TORCH, origin, dense_shape=tuple(x.shape[x.sparse_dim():]))


def _compressed_buffers(x):
    import torch

    if x.layout in (torch.sparse_csr, torch.sparse_bsr):
        return x.crow_indices(), x.col_indices(), "row"
    return x.ccol_indices(), x.row_indices(), "col"


def _from_compressed(x) -> Tensor:
    import torch

    outer, inner, major = _compressed_buffers(x)
    nb = outer.ndim - 1  # leading batch dimensions
    values = x.values()
    blocked = x.layout in (torch.sparse_bsr, torch.sparse_bsc)
    block = tuple(values.shape[nb + 1:nb + 3]) if blocked else ()
    dense_shape = tuple(values.shape[nb + 1 + len(block):])
    dims = _dims(nb + 2 + len(dense_shape))
    i, j = dims[nb:nb + 2]
    if blocked:
        bm, bn = block
        first, second = (i // bm, j // bn) if major == "row" else (j // bn, i // bm)
        levels = {first: D, second: C, i % bm: D, j % bn: D}
    else:
        levels = {i: D, j: C} if major == "row" else {j: D, i: C}
    levels = {**{d: LevelFormat.BATCH for d in dims[:nb]}, **levels, **{d: D for d in dims[nb + 2:]}}
    buffers = {(nb + 1, "pos"): packages.host_array(outer), (nb + 1, "crd"): packages.host_array(inner)}
    flat = packages.host_array(values).reshape(*values.shape[:nb], -1)
    return Tensor(TensorFormat(dims, levels), tuple(x.shape), buffers, flat, package=packages.TORCH,
                  origin={"layout": x.layout})


def to_torch(t: Tensor):
    """A torch tensor sharing ``t``'s buffers (dense, COO, CSR, CSC, BSR, BSC, hybrid)."""
    import torch

    from .tensor import _dense_permutation

    if _dense_permutation(t.format) is not None:
        return t.to_dense()
    nb = t.format.batch_levels
    kind, nsparse = _torch_kind(_unbatched(t.format))
    wrap = lambda a: packages.wrap(a, packages.TORCH)  # noqa: E731
    b, shape = t._buffers, t.shape
    dense_shape = shape[nb + nsparse:]
    if nb and kind == "coo":
        raise UnsupportedOperation("torch has no batched COO layout; use a batched CSR/CSC/BSR/BSC format")
    if kind == "coo":
        indices = t._origin.get("indices")
        if indices is None or indices.data_ptr() != wrap(b[(0, "crd")]).data_ptr():
            indices = torch.stack([wrap(b[(k, "crd")]).to(torch.int64) for k in range(nsparse)])
        values = wrap(t._values[: t.nse * math.prod(dense_shape)]).reshape(-1, *dense_shape)
        # coalesced: the coordinate tuples are sorted and unique as a whole (the last sparse level unique)
        coalesced = all(t.format.level_is_ordered(k) for k in range(nsparse)) and t.format.level_is_unique(nsparse - 1)
        return torch.sparse_coo_tensor(indices, values, shape, is_coalesced=coalesced)
    pos, crd = wrap(b[(nb + 1, "pos")]), wrap(b[(nb + 1, "crd")])
    block = tuple(t.level_shape[nb + 2:nb + 4]) if kind in ("bsr", "bsc") else ()
    if block and (shape[nb] % block[0] or shape[nb + 1] % block[1]):
        raise UnsupportedOperation(f"torch {kind.upper()} needs the matrix shape {shape[nb:nb + 2]} to be a "
                                   f"multiple of the block {block}; convert to CSR or pad the matrix")
    ends = pos[..., -1].reshape(-1)
    if len(ends) and not bool((ends == ends[0]).all()):
        raise UnsupportedOperation("torch needs the same number of entries in every batch")
    nvalues = int(ends[0]) if len(ends) else 0
    per = nvalues * math.prod(block + dense_shape)
    values = wrap(t._values[..., :per]).reshape(*t._values.shape[:-1], nvalues, *block, *dense_shape)
    crd = crd[..., :nvalues]
    layout = {"csr": torch.sparse_csr, "csc": torch.sparse_csc, "bsr": torch.sparse_bsr, "bsc": torch.sparse_bsc}
    return torch.sparse_compressed_tensor(pos, crd, values, shape, layout=layout[kind])


def _unbatched(fmt: TensorFormat) -> TensorFormat:
    """``fmt`` without its leading batch levels (and their dimensions)."""
    nb = fmt.batch_levels
    return TensorFormat(fmt.dims[nb:], [(lv.expr, lv.type) for lv in fmt.levels[nb:]]) if nb else fmt


def _torch_kind(fmt: TensorFormat) -> tuple[str, int]:
    """('coo' | 'csr' | 'csc' | 'bsr' | 'bsc', number of sparse dims) for torch-representable formats."""
    from .. import formats

    levels = fmt.levels
    dense_tail = 0
    while dense_tail < fmt.ndim - 1 and levels[-1 - dense_tail].type == Dense() \
            and levels[-1 - dense_tail].expr == fmt.dims[-1 - dense_tail]:
        dense_tail += 1
    nsparse = fmt.ndim - dense_tail
    head = TensorFormat(fmt.dims[:nsparse], [(lv.expr, lv.type) for lv in levels[: len(levels) - dense_tail]])
    plain = plain_format(head)
    if nsparse >= 1 and plain == plain_format(formats.COO(nsparse) if nsparse > 1 else
                                              TensorFormat.parse("(i) -> (i : compressed)")):
        return "coo", nsparse
    for kind, ref in (("csr", formats.CSR), ("csc", formats.CSC)):
        if plain == ref:
            return kind, 2
    if len(head.levels) == 4 and all(hasattr(lv.expr, "constant") for lv in head.levels):
        bm, bn = head.levels[2].expr.constant, head.levels[3].expr.constant
        for kind, ref in (("bsr", formats.BSR(bm, bn)), ("bsc", formats.BSC(bm, bn))):
            if plain == ref:
                return kind, 2
    raise UnsupportedOperation(f"no torch layout holds format {fmt}; use to_dense() or convert() to "
                               f"COO, CSR, CSC, BSR or BSC")
