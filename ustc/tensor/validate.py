"""The full storage check: every buffer against what its level promises.

Each level checks its own buffers (``LevelType.check_buffers``: lengths,
monotone positions, coordinates in range, order and uniqueness within a
segment, structured blocks of exactly n). A singleton's segment is the run of
positions sharing every coordinate above it up to the compressed level that
starts the COO region, so ``(i, j)`` pairs of a COO tensor are checked for
lexicographic order and uniqueness as a whole.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import StorageError
from ..format.levels.base import check_segments


def validate(t) -> None:
    """Raise StorageError naming level, buffer and first bad index; return None if all is well.

    Batched storage is checked batch by batch, so indices refer to the user's own rows.
    """
    fmt, layout = t.format, t._layout
    if not fmt.batch_levels:
        _check(layout, lambda k: layout.level_buffers(t._buffers, k), 0, len(t._values), "")
        return
    nbatch = math.prod(layout.level_shape[:fmt.batch_levels])
    if nbatch == 0:
        return  # no batch, nothing stored
    rows = {key: b.reshape(nbatch, -1) for key, b in t._buffers.items()}
    values = t._values.reshape(nbatch, -1)
    for b in range(nbatch):
        own = lambda k, b=b: {name: rows[(k, name)][b] for name in fmt.levels[k].type.buffers}  # noqa: E731
        _check(layout, own, fmt.batch_levels, values.shape[1], f"batch {b}, ")


def _check(layout, level_buffers, start: int, nvalues: int, where: str) -> None:
    """Check levels ``start..`` (the levels below the batch levels), one parent to begin with."""
    fmt = layout.fmt
    parents = 1
    chain = [None] * start
    for k in range(start, fmt.nlevels):
        level = fmt.levels[k]
        own = level.type.used_entries(level_buffers(k), parents) if start else level_buffers(k)
        extent, lo = layout.level_shape[k], layout.origins[k]
        try:
            level.type.check_buffers(parents, extent, lo, own)
            parent, crd = level.type.unpack(parents, extent, lo, own)
        except StorageError as exc:
            raise StorageError(f"{where}level {k} ({level}): {exc}") from None
        chain.append((parent, crd))
        if level.type.one_child:
            _check_coo_run(fmt, chain, k, where)
        parents = len(crd)
    if parents > nvalues:
        raise StorageError(f"{where}values: holds {nvalues} entries, the last level has {parents} positions")


def _check_coo_run(fmt, chain, k: int, where: str = "") -> None:
    """Order/uniqueness of singleton level k within runs of equal coordinates above it."""
    start = k
    while fmt.levels[start].type.one_child:
        start -= 1
    parent = chain[start][0]
    group = np.zeros(len(parent), dtype=bool)
    if len(parent) > 1:
        group[1:] = parent[1:] != parent[:-1]
        for level in range(start, k):
            crd = chain[level][1][:len(parent)]
            group[1:] |= crd[1:] != crd[:-1]
    run = np.cumsum(group)
    level_type = fmt.levels[k].type
    try:
        check_segments(chain[k][1], run, level_type.ordered, level_type.unique)
    except StorageError as exc:
        raise StorageError(f"{where}level {k} ({fmt.levels[k]}): {exc}") from None
