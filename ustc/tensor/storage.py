"""Format-independent storage drivers over the level hooks.

``unpack`` walks the levels top-down with ``LevelType.unpack`` and follows
parent links bottom-up to give every stored value its dimension coordinates.
``assemble`` maps dimension coordinates to level coordinates, sorts them in
level order, sums duplicates, drops zeros, and lets each level ``pack`` its
buffers; the values land at the positions of the last level (padding and
dense holes stay 0).

Buffers travel as a dict ``{(level, "pos" | "crd"): array}``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import StorageError
from ..format.expr import Mul
from ..format.ir import TensorFormat
from ..format.levels.base import Segments
from . import sort as _sort

Buffers = dict[tuple[int, str], np.ndarray]


@dataclass(frozen=True)
class Layout:
    """What a format is for one shape: level extents, origins, position counts."""

    fmt: TensorFormat
    shape: tuple[int, ...]
    level_shape: tuple[int, ...]
    origins: tuple[int, ...]

    @classmethod
    def of(cls, fmt: TensorFormat, shape) -> "Layout":
        shape = tuple(int(n) for n in shape)
        if any(n < 0 for n in shape):
            raise StorageError(f"negative extent in shape {shape}")
        return cls(fmt, shape, fmt.level_shape(shape), fmt.level_origins(shape))

    def level_buffers(self, buffers: Buffers, k: int) -> dict:
        return {name: buffers[(k, name)] for name in self.fmt.levels[k].type.buffers}

    def positions(self, buffers: Buffers) -> list[int]:
        """Position count of every level: the O(levels) structural check."""
        counts, parents = [], 1
        for k, level in enumerate(self.fmt.levels):
            try:
                parents = level.type.positions(parents, self.level_shape[k], self.level_buffers(buffers, k))
            except StorageError as exc:
                raise StorageError(f"level {k} ({level}): {exc}") from None
            counts.append(parents)
        return counts


def unpack(layout: Layout, buffers: Buffers, nvalues: int) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """Dimension coordinates and value indices of every stored, reachable, in-bounds position.

    Returns ``(coords, index)``: ``coords[d][e]`` is entry e's coordinate in
    dimension d and ``values[index[e]]`` its value. Positions that belong to no
    parent (loose gaps) and coordinates outside the tensor (DIA and block
    padding) are left out; explicit zeros are kept.
    """
    fmt = layout.fmt
    chain, parents = [], 1
    for k, level in enumerate(fmt.levels):
        parent, crd = level.type.unpack(parents, layout.level_shape[k], layout.origins[k],
                                        layout.level_buffers(buffers, k))
        chain.append((parent, crd))
        parents = len(crd)
    if parents > nvalues:
        raise StorageError(f"values holds {nvalues} entries, the last level has {parents} positions")
    q = np.arange(parents, dtype=np.int64)
    keep = np.ones(parents, dtype=bool)
    level_coords: list = [None] * fmt.nlevels
    for k in range(fmt.nlevels - 1, -1, -1):
        parent, crd = chain[k]
        level_coords[k] = crd if k == fmt.nlevels - 1 else crd[q]
        if k:
            q = parent if k == fmt.nlevels - 1 else parent[q]
            keep &= q >= 0
            q = np.where(q >= 0, q, 0)
    for k, level in enumerate(fmt.levels):  # c * d levels: only multiples of c are coordinates
        if isinstance(level.expr, Mul):
            keep &= level_coords[k] % level.expr.factor == 0
    coords = fmt.dim_coordinates(level_coords)
    coords = tuple(np.broadcast_to(np.asarray(c, dtype=np.int64), (parents,)) for c in coords)
    for c, n in zip(coords, layout.shape):
        keep &= (c >= 0) & (c < n)
    index = np.arange(parents, dtype=np.int64)
    if not keep.all():
        coords, index = tuple(c[keep] for c in coords), index[keep]
    return coords, index


@dataclass
class Assembled:
    buffers: Buffers
    values: np.ndarray


def assemble(layout: Layout, coords, values: np.ndarray, *, prune: bool = False) -> Assembled:
    """Buffers of ``layout.fmt`` holding ``values`` at dimension coordinates ``coords``.

    Coordinates are checked against the shape; duplicates are summed and zeros
    dropped (the levels that store zeros, dense and padding, put them back).
    """
    fmt = layout.fmt
    coords = tuple(np.asarray(c, dtype=np.int64) for c in coords)
    _check_coords(coords, layout.shape)
    level_coords = [np.asarray(c, dtype=np.int64) for c in fmt.level_coordinates(coords)] if coords else []
    level_coords = [np.broadcast_to(c, values.shape) for c in level_coords]
    level_coords, values = _sort.sort_entries(level_coords, values, layout.origins, layout.level_shape)
    if len(values):
        nonzero = values != 0
        if not nonzero.all():
            level_coords, values = [c[nonzero] for c in level_coords], values[nonzero]
    buffers: Buffers = {}
    parent, parents = np.zeros(len(values), dtype=np.int64), 1
    prefix: list | None = None
    for k, level in enumerate(fmt.levels):
        end = k
        while end + 1 < fmt.nlevels and fmt.levels[end + 1].type.one_child:
            end += 1
        singleton = level.type.one_child
        if not singleton:  # a COO region starts here (or none does); singletons extend it
            prefix = [parent] if end > k else None
        seg = Segments(parent, level_coords[k], parents, layout.level_shape[k], layout.origins[k],
                       group=level_coords[k:end + 1], prefix=list(prefix) if singleton else None,
                       values=values, prune=prune, where=f"level {k} ({level})")
        if prefix is not None:
            prefix.append(level_coords[k])
        packed = level.type.pack(seg)
        if packed.keep is not None:
            level_coords, values = [c[packed.keep] for c in level_coords], values[packed.keep]
        buffers.update({(k, name): buf for name, buf in packed.buffers.items()})
        parent, parents = packed.position, packed.count
    out = np.zeros(parents, dtype=values.dtype)
    out[parent] = values
    return Assembled(buffers, out)


def _check_coords(coords, shape) -> None:
    for d, (c, n) in enumerate(zip(coords, shape)):
        if len(c) and (c.min() < 0 or c.max() >= n):
            bad = int(np.argmax((c < 0) | (c >= n)))
            raise StorageError(f"coordinate {c[bad]} of entry {bad} is outside dimension {d} of extent {n}")
