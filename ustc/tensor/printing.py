"""``repr(tensor)`` in the layout of design §3 (nvmath-python's UST layout)."""

from __future__ import annotations

import math

import numpy as np

EDGE = 10  # entries shown at each end of an elided buffer


def _items(a: np.ndarray) -> str:
    def text(x) -> str:
        return str(x.item() if hasattr(x, "item") else x)

    if len(a) <= 2 * EDGE + 1:
        return "[" + ", ".join(text(x) for x in a) + "]"
    return "[" + ", ".join(text(x) for x in a[:EDGE]) + ", ..., " + ", ".join(text(x) for x in a[-EDGE:]) + "]"


def _size(a: np.ndarray) -> str:
    return str(len(a)) if a.ndim == 1 else "x".join(map(str, a.shape))


def _row(label: str, text: str) -> str:
    return f"{label:<9}: {text}"


def describe(t) -> str:
    """The multi-line storage description of tensor ``t``."""
    buffers = t._buffers
    values = t._values if t.format.batch_levels else t._values[:t.nse]
    pos, crd = t.pos_dtype, t.crd_dtype
    header = (f"---- Sparse Tensor<VAL={values.dtype},POS={pos or 'none'},CRD={crd or 'none'},"
              f"DIM={t.ndim},LVL={t.format.nlevels}>")
    lines = [header,
             _row("format", repr(t.format)),
             _row("device", t.device),
             _row("dim", str(list(t.shape))),
             _row("lvl", str(list(t.level_shape))),
             _row("nse", str(t.nse))]
    for (k, name) in sorted(buffers, key=lambda key: (key[0], key[1] != "pos")):
        b = buffers[(k, name)]
        lines.append(_row(f"{name}[{k}]", f"{_items(b.reshape(-1))} #{_size(b)}"))
    lines.append(_row("values", f"{_items(values.reshape(-1))} #{_size(values)}"))
    lines.append(_row("data", f"{t.nbytes} bytes"))
    size = math.prod(t.shape)
    # block padding can store more than the dense extent: the share not stored is then 0
    lines.append(_row("sparsity", f"{100 * max(0.0, 1 - t.nse / size):.2f}%" if size else "n/a"))
    lines.append("----")
    return "\n".join(lines)
