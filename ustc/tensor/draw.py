"""Pictures of tensors as PNG files: contents, storage buffers, and binned structure.

    >>> t = ustc.Tensor.from_dense(a, "CSR")          # doctest: +SKIP
    >>> draw(t, "a.png"); draw_storage(t, "a_storage.png"); draw_raw(big, "big.png")  # doctest: +SKIP

``draw`` shows the contents of a tensor of rank 1 to 3 cell by cell,
``draw_storage`` shows every buffer of any tensor, ``draw_raw`` shows where
the nonzeros of a big matrix or 3-D tensor lie. All three write a PNG to
``path``, return ``path`` and never change the tensor. matplotlib (the
``viz`` extra) is imported on first use; figures are rendered with the Agg
canvas directly, so no pyplot state or GUI backend is touched.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np

from ..errors import UnsupportedOperation, require
from .storage import Layout, unpack

MAX_CELLS = 1 << 20      # draw: most cells of a picture (beyond: use draw_raw)
MAX_PANELS = 64          # draw: most slices of a 3-D tensor
MAX_TEXT_CELLS = 1024    # draw: panels with more cells show no values
STORED, UNSTORED = "#c8c8c8", "#ffffff"
BUFFER_COLOURS = {"pos": "#cfe2f3", "crd": "#d9ead3", "values": "#fff2cc"}
PADDING, UNUSED = "#f4a261", "#e06666"
NORMAL, PAD, OUT = 0, 1, 2   # position status: real entry, value-0 padding, not in the tensor


def _figure(width: float, height: float, layout: str | None = "constrained"):
    """A matplotlib Figure on an Agg canvas (no pyplot), size clamped to 2.5-24 x 1.5-24 inches."""
    require("matplotlib", "viz")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(min(max(width, 2.5), 24.0), min(max(height, 1.5), 24.0)), dpi=100, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path):
    fig.savefig(path, format="png", bbox_inches="tight", dpi=fig.dpi)
    return path


def _host(t):
    return t.to("cpu") if t.device != "cpu" else t


def _title(t) -> str:
    name = t.format.name or t.format.text
    text = f"{name}   shape {tuple(t.shape)}   nse {t.nse}   {t.dtype}"
    return "\n".join(textwrap.wrap(text, 90))


def _fmt(v) -> str:
    """Compact text of one value: integers as written, floats to 3 significant digits."""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (complex, np.complexfloating)):
        return f"{v.real:.2g}{v.imag:+.2g}j"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return f"{float(v):.3g}"


# -- draw: the contents -----------------------------------------------------------------------
def draw(t, path):
    """Write a picture of ``t``'s contents to the PNG ``path``; returns ``path``.

    Rank 2: a grid of cells, stored entries grey with their value written in
    the cell (duplicates summed), unstored cells white. Rank 1: one row.
    Rank 3: one such grid per slice of the first dimension. Values are
    written when a panel has at most MAX_TEXT_CELLS cells and a cell gets at
    least 0.3 inch (pictures are at most 22 inches a side). Raises
    UnsupportedOperation for rank > 3, more than MAX_PANELS slices or more
    than MAX_CELLS cells (use ``draw_raw`` for big tensors).
    """
    t = _host(t)
    if not 1 <= t.ndim <= 3:
        raise UnsupportedOperation(f"draw shows tensors of rank 1 to 3, this one has rank {t.ndim}; "
                                   f"use draw_storage for its buffers")
    if math.prod(t.shape) > MAX_CELLS:
        raise UnsupportedOperation(f"draw shows at most {MAX_CELLS} cells, shape {t.shape} has "
                                   f"{math.prod(t.shape)}; use draw_raw for big tensors")
    if t.ndim == 3 and t.shape[0] > MAX_PANELS:
        raise UnsupportedOperation(f"draw shows at most {MAX_PANELS} slices of a 3-D tensor, shape "
                                   f"{t.shape} has {t.shape[0]}; use draw_raw")
    dense = np.asarray(t.to_dense())
    stored = np.zeros(t.shape, dtype=bool)
    coords, _ = t.entries()
    stored[coords] = True
    if t.ndim < 3:                                  # one panel; a vector is a single row
        panel = (1, t.shape[0] if t.ndim == 2 else 1, t.shape[-1])
        dense, stored = dense.reshape(panel), stored.reshape(panel)
    panels, rows, cols = dense.shape
    ncols = max(1, min(panels, 4 if cols <= 16 else 2 if cols <= 32 else 1))
    nrows = max(1, -(-panels // ncols))
    cell = min(0.5, 22.0 / max(ncols * cols, 1), 22.0 / max(nrows * rows, 1))   # inches per cell
    height = max(cell, 0.4) if t.ndim == 1 else rows * cell
    fig = _figure(ncols * (cols * cell + 0.8), nrows * (height + 0.8) + 0.6)
    if not panels:
        _empty(fig.add_subplot(1, 1, 1), t.shape)
    for p in range(panels):
        ax = fig.add_subplot(nrows, ncols, p + 1)
        _grid(ax, dense[p], stored[p], cell, vector=t.ndim == 1)
        if t.ndim == 3:
            ax.set_title(f"[{p}, :, :]", fontsize=9)
    fig.suptitle(_title(t), fontsize=10)
    return _save(fig, path)


def _grid(ax, values: np.ndarray, stored: np.ndarray, cell: float, vector: bool) -> None:
    """One 2-D panel: grey stored cells with their values, white unstored cells, grid lines."""
    from matplotlib.colors import ListedColormap

    rows, cols = values.shape
    if not rows * cols:
        _empty(ax, values.shape)
        return
    ax.imshow(stored.astype(np.int8), cmap=ListedColormap([UNSTORED, STORED]), vmin=0, vmax=1,
              interpolation="nearest", aspect="auto" if vector else "equal")
    if rows * cols <= MAX_TEXT_CELLS and cell >= 0.3:
        texts = [_fmt(values[i, j]) for i, j in zip(*np.nonzero(stored))]
        longest = max((len(s) for s in texts), default=1)
        size = min(9.0, cell * 72 * 0.9 / (0.6 * longest))
        for (i, j), s in zip(zip(*np.nonzero(stored)), texts):
            ax.text(j, i, s, ha="center", va="center", fontsize=size)
    if cell >= 0.08:
        ax.set_xticks(np.arange(cols) if cols <= 64 else [])
        ax.set_yticks(np.arange(rows) if rows <= 64 else [])
        ax.set_xticks(np.arange(cols + 1) - 0.5, minor=True)
        ax.set_yticks(np.arange(rows + 1) - 0.5, minor=True)
        ax.grid(which="minor", color="#888888", linewidth=0.6)
        ax.tick_params(which="both", length=0, labelsize=7)
    if vector:
        ax.set_yticks([])
    ax.xaxis.tick_top()


# -- draw_storage: the buffers --------------------------------------------------------------
def draw_storage(t, path, *, max_cells: int = 32):
    """Write a picture of ``t``'s storage to the PNG ``path``; returns ``path``. Any rank.

    One labelled row of cells per buffer, level by level (``pos[k]`` then
    ``crd[k]``), then ``values``; rows longer than ``max_cells`` show both
    ends around an ellipsis. Coordinate and value cells of padding (a stored
    position whose value is 0: delta and structured padding, dense-level
    zeros) and of slots that are not part of the tensor (DIA diagonals
    outside the matrix, block overhang, unused capacity) get their own
    colours, explained in a legend; an upper-level position takes the status
    of its best descendant. Batched tensors are shown flattened (batch levels
    as dense levels). Bit-packed ``delta`` coordinates are shown as words and
    as decoded gaps.
    """
    t = _host(t)
    buffers, values = _flat_storage(t)
    layout = Layout.of(t.format, t.shape)
    status = _position_status(layout, buffers, values)
    rows = []
    for k, level in enumerate(t.format.levels):
        for name in level.type.buffers:
            buf = np.asarray(buffers[(k, name)]).reshape(-1)
            if name == "crd" and getattr(level.type, "packed", False):
                rows.append((f"crd[{k}] (words)", name, buf, np.zeros(len(buf), np.int8)))
                gaps = level.type.gaps(buf, len(status[k]))
                rows.append((f"crd[{k}] (gaps)", name, gaps, status[k]))
                continue
            cells = _cell_status(status[k], len(buf)) if name == "crd" else np.zeros(len(buf), np.int8)
            rows.append((f"{name}[{k}]", name, buf, cells))
    rows.append(("values", "values", np.asarray(values).reshape(-1), _cell_status(status[-1], len(values))))
    return _save(_storage_figure(t, layout, rows, max_cells), path)


def _flat_storage(t):
    """Buffers and values as one flat storage (batch levels acting as dense levels)."""
    if t.format.batch_levels and hasattr(t, "_flatten"):
        return t._flatten()
    return t._buffers, t._values


def _position_status(layout, buffers, values) -> list[np.ndarray]:
    """Per level, the status (NORMAL, PAD, OUT) of every position."""
    fmt, parents, chain = layout.fmt, 1, []
    for k, level in enumerate(fmt.levels):
        parent, _ = level.type.unpack(parents, layout.level_shape[k], layout.origins[k],
                                      layout.level_buffers(buffers, k))
        chain.append(np.asarray(parent, dtype=np.int64))
        parents = len(parent)
    last = np.full(parents, OUT, dtype=np.int8)
    _, index = unpack(layout, buffers, len(values))
    last[index] = np.where(np.asarray(values)[index] == 0, PAD, NORMAL)
    status = [last]
    for k in range(fmt.nlevels - 1, 0, -1):
        child, parent = status[0], chain[k]
        up = np.full(len(chain[k - 1]), 3, dtype=np.int8)
        ok = parent >= 0
        np.minimum.at(up, parent[ok], child[ok])
        up[up == 3] = NORMAL                           # positions without children
        up[chain[k - 1] < 0] = OUT                     # positions no parent owns
        status.insert(0, up)
    return status


def _cell_status(status: np.ndarray, length: int) -> np.ndarray:
    """Status of the first ``length`` buffer cells; cells past the level's positions are OUT."""
    cells = np.full(length, OUT, dtype=np.int8)
    n = min(length, len(status))
    cells[:n] = status[:n]
    return cells


def _shown(n: int, max_cells: int) -> list[int | None]:
    """Indices of the cells drawn for a buffer of ``n`` (None marks the ellipsis)."""
    if n <= max_cells:
        return list(range(n))
    half = max_cells // 2
    return list(range(half)) + [None] + list(range(n - half, n))


def _storage_figure(t, layout, rows, max_cells: int):
    """The figure of ``draw_storage``: one unit per cell, 0.42 inch per unit."""
    from matplotlib.patches import Patch

    width = max([len(_shown(len(buf), max_cells)) for _, _, buf, _ in rows] + [10])
    levels = [f"level {k}: {lv.expr} : {lv.type.text()}   (extent {layout.level_shape[k]}"
              f"{', origin ' + str(layout.origins[k]) if layout.origins[k] else ''})"
              for k, lv in enumerate(t.format.levels)]
    if t.format.batch_levels:
        levels.append("batch levels shown flattened: each batch's entries follow the previous batch's")
    top = 1.2 + 0.7 * len(levels)
    height = top + 1.7 * len(rows) + 1.2
    fig = _figure((width + 5.0) * 0.42, height * 0.42, layout=None)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(-4.5, width + 0.5)
    ax.set_ylim(height, 0)
    ax.axis("off")
    ax.text(-4.3, 0.2, _title(t), fontsize=10, va="top", weight="bold")
    for k, text in enumerate(levels):
        ax.text(-4.3, 1.1 + 0.7 * k, text, fontsize=8, va="top", family="monospace")
    for r, row in enumerate(rows):
        _storage_row(ax, top + 1.7 * r, row, max_cells)
    legend = [Patch(facecolor=c, edgecolor="#555555", label=n) for n, c in
              (("pos", BUFFER_COLOURS["pos"]), ("crd", BUFFER_COLOURS["crd"]), ("values", BUFFER_COLOURS["values"]),
               ("padding / stored zero", PADDING), ("not in the tensor / unused", UNUSED))]
    ax.legend(handles=legend, loc="lower left", bbox_to_anchor=(0.0, 0.0), fontsize=7, ncol=5,
              frameon=False, handlelength=1.5)
    return fig


def _storage_row(ax, y: float, row, max_cells: int) -> None:
    """One buffer: label, cells (coloured by status), position indices below."""
    from matplotlib.patches import Rectangle

    label, kind, buf, cells = row
    ax.text(-0.3, y + 0.5, f"{label}  #{len(buf)}", ha="right", va="center", fontsize=8, family="monospace")
    shown = _shown(len(buf), max_cells)
    texts = [_fmt(buf[q]) if q is not None else "…" for q in shown]
    size = min(8.0, 0.42 * 72 * 0.9 / (0.6 * max([len(s) for s in texts] + [1])))
    colours = {PAD: PADDING, OUT: UNUSED}
    for x, (q, s) in enumerate(zip(shown, texts)):
        face = "#ffffff" if q is None else colours.get(int(cells[q]), BUFFER_COLOURS[kind])
        ax.add_patch(Rectangle((x, y), 1, 1, facecolor=face, edgecolor="#555555", linewidth=0.6))
        ax.text(x + 0.5, y + 0.5, s, ha="center", va="center", fontsize=size)
        if q is not None:
            ax.text(x + 0.5, y + 1.25, str(q), ha="center", va="center", fontsize=5, color="#777777")


# -- draw_raw: binned structure -------------------------------------------------------------
def draw_raw(t, path, bins: int = 512):
    """Write the binned nonzero structure of ``t`` to the PNG ``path``; returns ``path``.

    The stored nonzero entries (padding and explicit zeros left out) are
    counted in at most ``bins`` bins along the longer dimension, bins about
    square in index space (``max(1, longer extent / bins)`` indices a side,
    so a small matrix gets one bin per index), and shown as an image with a log colour scale; empty bins stay white.
    Rank 1 is drawn as a 1 x n matrix. Rank 3 is drawn as three panels, the
    projections onto the (d0, d1), (d0, d2) and (d1, d2) planes (an entry is
    counted in each). Raises UnsupportedOperation for rank > 3.
    """
    t = _host(t)
    if not 1 <= t.ndim <= 3 or bins < 1:
        raise UnsupportedOperation(f"draw_raw shows tensors of rank 1 to 3 with bins >= 1 "
                                   f"(rank {t.ndim}, bins {bins})")
    coords, values = t.entries()
    keep = values != 0
    coords = tuple(np.asarray(c)[keep] for c in coords)
    shape = tuple(t.shape)
    if t.ndim == 1:
        coords, shape = (np.zeros_like(coords[0]),) + coords, (1,) + shape
    planes = [(0, 1)] if len(shape) == 2 else [(0, 1), (0, 2), (1, 2)]
    aspect = min(max(shape[planes[0][0]] / max(shape[planes[0][1]], 1), 0.25), 1.5)
    fig = _figure(5.5 * len(planes), 4.2 * aspect + 1.0)
    for p, (a, b) in enumerate(planes):
        ax = fig.add_subplot(1, len(planes), p + 1)
        _binned(fig, ax, coords[a], coords[b], shape[a], shape[b], bins)
        if len(planes) > 1:
            ax.set_title(f"d{a} × d{b} (projection)", fontsize=9)
        ax.set_ylabel(f"d{a}")
        ax.set_xlabel(f"d{b}")
    fig.suptitle(_title(t) + f"   nonzeros {int(keep.sum())}", fontsize=10)
    return _save(fig, path)


def _binned(fig, ax, rows: np.ndarray, cols: np.ndarray, nrows: int, ncols: int, bins: int) -> None:
    """One image of entry counts per bin of the (rows, cols) coordinates."""
    from matplotlib.colors import LogNorm

    if not nrows * ncols:
        _empty(ax, (nrows, ncols))
        return
    step = max(1.0, max(nrows, ncols) / bins)          # indices per bin, the same in both directions
    br, bc = max(1, math.ceil(nrows / step)), max(1, math.ceil(ncols / step))
    r = (rows.astype(np.int64) * br) // max(nrows, 1)
    c = (cols.astype(np.int64) * bc) // max(ncols, 1)
    counts = np.bincount(r * bc + c, minlength=br * bc).reshape(br, bc)
    image = np.ma.masked_equal(counts, 0)
    cmap = _colormap()
    norm = LogNorm(vmin=1, vmax=max(2, int(counts.max()))) if counts.any() else None
    ratio = (ncols / nrows) if nrows else 1.0
    im = ax.imshow(image, cmap=cmap, norm=norm, interpolation="nearest", extent=(0, ncols, nrows, 0),
                   aspect="equal" if 1 / 20 <= ratio <= 20 else "auto")
    ax.set_facecolor("white")
    if counts.any():
        size = f"{nrows / br:.3g} × {ncols / bc:.3g}"
        fig.colorbar(im, ax=ax, shrink=0.8, label=f"nonzeros per bin ({size} indices)")


def _empty(ax, shape) -> None:
    ax.text(0.5, 0.5, f"empty extent {tuple(shape)}", ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _colormap():
    from matplotlib import colormaps

    return colormaps["viridis"].with_extremes(bad="white")
