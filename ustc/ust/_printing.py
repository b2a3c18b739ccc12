"""``repr`` of a compat Tensor: ustc's storage description, with the format, index type and
buffer listing as nvmath-python prints a UST (all positions, then all coordinates). A tensor
made by ``convert`` lists every level's positions and coordinates, empty where the level has
none, as nvmath-python prints its converted tensors."""

from __future__ import annotations

import math

import numpy as np

EDGE = 32  # values shown at each end of a long buffer


def _items(a) -> str:
    flat = [str(x.item() if hasattr(x, "item") else x) for x in a.reshape(-1)[:EDGE]]
    if a.size > EDGE:
        flat.append("...")
    if a.size > 2 * EDGE:
        flat += [str(x.item() if hasattr(x, "item") else x) for x in a.reshape(-1)[-EDGE:]]
    return "[" + ", ".join(flat) + "]"


def describe(t) -> str:
    index = t.index_type
    values = t.raw_values if t.format.batch_levels else t.raw_values[:t.nse]
    buffers = dict(t.raw_buffers)
    if t._nv_converted:
        empty = np.zeros(0, dtype=index)
        buffers = {(k, name): buffers.get((k, name), empty) for k in range(t.num_levels) for name in ("pos", "crd")}
    buffers = sorted(buffers.items(), key=lambda item: (item[0][1] != "pos", item[0][0]))
    lines = [f"---- Sparse Tensor<VAL={values.dtype},POS={index},CRD={index},DIM={t.ndim},LVL={t.num_levels}>",
             f"format   : {t.tensor_format!r}",
             f"device   : {t.device}",
             f"dim      : {t.extents}",
             f"lvl      : {t.levels}",
             f"nse      : {values.size}"]
    data = 0
    for (k, name), b in buffers:
        lines.append(f"{name}[{k}]".ljust(9) + f": {_items(b)} #{b.size}")
        data += b.nbytes
    if values.size:
        lines.append(f"values   : {_items(values)} #{values.size}")
        data += values.nbytes
    lines.append(f"data     : {data} bytes")
    size = math.prod(t.shape)
    lines.append(f"sparsity : {100.0 - 100.0 * values.size / size:.2f}%" if size else "sparsity : n/a")
    lines.append("----")
    return "\n".join(lines)
