"""Putting entries in level order: linearised keys, a sortedness check, duplicate sums.

Entries are sorted lexicographically by level coordinates. When the product
of the level extents fits in int64 (always, in practice) the coordinates are
linearised into one key, so "already sorted?" is a single O(n) pass and the
sort, when needed, is a counting sort on the first level's coordinate followed
by a parallel sort of each bucket on the rest of the key (Numba; O(n) for
bounded rows, where NumPy's argsort of the key is O(n log n): 7M entries of a
300k-row matrix, 0.97 s → see docs/benchmarks.md), or NumPy's stable argsort
for small inputs and first-level extents far beyond the entry count.
"""

from __future__ import annotations

import numpy as np

_LIMIT = 1 << 62


def linear_key(level_coords, origins, extents) -> np.ndarray | None:
    """Row-major linear index of the level coordinates, or None if it would overflow int64."""
    total = 1
    for n in extents:
        total *= max(int(n), 1)
    if total >= _LIMIT:
        return None
    key = np.zeros(len(level_coords[0]) if level_coords else 0, dtype=np.int64)
    for c, lo, n in zip(level_coords, origins, extents):
        key *= max(int(n), 1)
        key += c - lo if lo else c
    return key


def is_sorted(key: np.ndarray) -> bool:
    return bool(len(key) < 2 or (key[1:] >= key[:-1]).all())


BUCKET_MIN = 1 << 15     # entries from which the counting sort beats NumPy's argsort


def _order(key: np.ndarray, first: np.ndarray, origin: int, extents) -> np.ndarray:
    """The stable permutation that sorts ``key`` (the linearised coordinates; ``first`` is the
    first level's coordinate, the key's most significant digit)."""
    n_first = max(int(extents[0]), 1)
    if len(key) < BUCKET_MIN or n_first > 4 * len(key) + (1 << 20):
        return np.argsort(key, kind="stable")
    from . import kernels     # Numba, imported on first use (formats-only users never need it)

    tail = 1
    for n in extents[1:]:
        tail *= max(int(n), 1)
    return kernels.lexicographic_order(first - origin if origin else first, key % tail, n_first)


def sort_entries(level_coords, values, origins, extents):
    """``(level_coords, values)`` in level order, entries with equal coordinates summed."""
    if not level_coords or len(values) == 0:
        return list(level_coords), values
    key = linear_key(level_coords, origins, extents)
    if key is None:
        order = np.lexsort(tuple(reversed(level_coords)))
        level_coords, values = [c[order] for c in level_coords], values[order]
        same = np.logical_and.reduce([c[1:] == c[:-1] for c in level_coords])
    else:
        if not is_sorted(key):
            order = _order(key, level_coords[0], origins[0], extents)
            key, values = key[order], values[order]
            level_coords = [c[order] for c in level_coords]
        same = key[1:] == key[:-1]
    if same.any():
        starts = np.flatnonzero(np.concatenate([[True], ~same]))
        values = np.add.reduceat(values, starts)
        level_coords = [c[starts] for c in level_coords]
    return list(level_coords), values
