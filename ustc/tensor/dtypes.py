"""Index dtypes: posWidth / crdWidth, else the narrowest of int32 / int64 that fits."""

from __future__ import annotations

import numpy as np

from ..errors import StorageError
from ..format.ir import TensorFormat

_I32 = np.iinfo(np.int32)


def index_dtype(width: int, lo: int, hi: int, what: str) -> np.dtype:
    """The dtype for indices in ``[lo, hi]``: ``width`` bits if given (unsigned for 8/16 bits
    unless negative values occur), else int32 when it fits, else int64."""
    if width:
        dtype = np.dtype(f"{'u' if width < 32 and lo >= 0 else ''}int{width}")
        info = np.iinfo(dtype)
        if lo < info.min or hi > info.max:
            raise StorageError(f"{what} values in [{lo}, {hi}] do not fit {width}-bit indices ({dtype})")
        return dtype
    return np.dtype(np.int32 if _I32.min <= lo and hi <= _I32.max else np.int64)


def narrow(fmt: TensorFormat, buffers: dict, level_shape, origins) -> dict:
    """Cast assembly buffers to the format's index dtypes (one for pos, one for crd).

    Buffers whose level fixes its own dtype (delta gaps: ``crd_dtype``) are left
    alone; a cast to the dtype a buffer already has is free.
    """
    def typed(k: int) -> bool:
        return getattr(fmt.levels[k].type, "crd_dtype", None) is not None

    pos_hi = max((int(b[-1]) for (k, name), b in buffers.items() if name == "pos" and len(b)), default=0)
    crd_levels = [k for (k, name) in buffers if name == "crd" and not typed(k)]
    crd_lo = min((origins[k] for k in crd_levels), default=0)
    crd_hi = max((origins[k] + level_shape[k] - 1 for k in crd_levels), default=0)
    pos_dtype = index_dtype(fmt.pos_width, 0, pos_hi, "pos")
    crd_dtype = index_dtype(fmt.crd_width, min(crd_lo, 0), max(crd_hi, 0), "crd")
    out = {}
    for (k, name), b in buffers.items():
        if name == "crd" and typed(k):
            out[(k, name)] = b
        else:
            out[(k, name)] = b.astype(pos_dtype if name == "pos" else crd_dtype, copy=False)
    return out
