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
    """Cast int64 assembly buffers to the format's index dtypes (one for pos, one for crd).

    Buffers a level typed itself (delta gaps) are left alone.
    """
    pos = [b for (k, name), b in buffers.items() if name == "pos"]
    pos_hi = max((int(b[-1]) if len(b) else 0 for b in pos), default=0)
    crd_levels = [k for (k, name), b in buffers.items() if name == "crd" and b.dtype == np.int64]
    crd_lo = min((origins[k] for k in crd_levels), default=0)
    crd_hi = max((origins[k] + level_shape[k] for k in crd_levels), default=0)
    pos_dtype = index_dtype(fmt.pos_width, 0, max(pos_hi, 0), "pos")
    crd_dtype = index_dtype(fmt.crd_width, crd_lo, crd_hi - 1 if crd_hi else 0, "crd")
    out = {}
    for (k, name), b in buffers.items():
        if name == "pos":
            out[(k, name)] = b.astype(pos_dtype, copy=False)
        elif b.dtype == np.int64:
            out[(k, name)] = b.astype(crd_dtype, copy=False)
        else:
            out[(k, name)] = b
    return out
