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
    pos_hi = max((int(b[-1]) for (k, name), b in buffers.items() if name == "pos" and len(b)), default=0)
    dtypes = buffer_dtypes(fmt, level_shape, origins, pos_hi)
    return {(k, name): b if name == "crd" and _typed(fmt, k) else b.astype(dtypes[(k, name)], copy=False)
            for (k, name), b in buffers.items()}


def buffer_dtypes(fmt: TensorFormat, level_shape, origins, pos_hi: int) -> dict:
    """The dtype of every buffer of ``fmt``: a level's own (delta gaps: ``crd_dtype``), else the
    index policy (``posWidth`` / ``crdWidth``, else int32 when it fits) for positions up to
    ``pos_hi`` and the coordinates of the levels' extents."""
    plain = [k for k, lv in enumerate(fmt.levels) if "crd" in lv.type.buffers and not _typed(fmt, k)]
    crd_lo = min((origins[k] for k in plain), default=0)
    crd_hi = max((origins[k] + level_shape[k] - 1 for k in plain), default=0)
    pos = index_dtype(fmt.pos_width, 0, pos_hi, "pos")
    crd = index_dtype(fmt.crd_width, min(crd_lo, 0), max(crd_hi, 0), "crd")
    return {(k, name): np.dtype(lv.type.crd_dtype) if name == "crd" and _typed(fmt, k) else
            (pos if name == "pos" else crd) for k, lv in enumerate(fmt.levels) for name in lv.type.buffers}


def _typed(fmt: TensorFormat, k: int) -> bool:
    return getattr(fmt.levels[k].type, "crd_dtype", None) is not None
