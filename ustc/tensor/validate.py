"""The full storage check: every buffer against what its level promises.

Each level checks its own buffers (``LevelType.check_buffers``: lengths,
monotone positions, coordinates in range, order and uniqueness within a
segment, structured blocks of exactly n). A singleton's segment is the run of
positions sharing every coordinate above it up to the compressed level that
starts the COO region, so ``(i, j)`` pairs of a COO tensor are checked for
lexicographic order and uniqueness as a whole.
"""

from __future__ import annotations

import numpy as np

from ..errors import StorageError
from ..format.levels.base import check_segments


def validate(t) -> None:
    """Raise StorageError naming level, buffer and first bad index; return None if all is well."""
    layout, (buffers, flat_values) = t._layout, t._flatten()
    fmt = layout.fmt
    parents = 1
    chain = []
    for k, level in enumerate(fmt.levels):
        own = layout.level_buffers(buffers, k)
        extent, lo = layout.level_shape[k], layout.origins[k]
        try:
            level.type.check_buffers(parents, extent, lo, own)
            parent, crd = level.type.unpack(parents, extent, lo, own)
        except StorageError as exc:
            raise StorageError(f"level {k} ({level}): {exc}") from None
        chain.append((parent, crd))
        if level.type.keyword == "singleton":
            _check_coo_run(fmt, chain, k)
        parents = len(crd)
    if parents > len(flat_values):
        raise StorageError(f"values: holds {len(flat_values)} entries, the last level has {parents} positions")


def _check_coo_run(fmt, chain, k: int) -> None:
    """Order/uniqueness of singleton level k within runs of equal coordinates above it."""
    start = k
    while fmt.levels[start].type.keyword == "singleton":
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
        raise StorageError(f"level {k} ({fmt.levels[k]}): {exc}") from None
