"""The gap width ``b`` of a ``delta`` level, chosen per matrix from the histogram of its gaps.

A ``delta(b)`` level stores, for every nonzero, the coordinates it skips since
the previous one of its row (its gap, :func:`~.delta.row_gaps`); a gap ``g``
wider than ``2**b - 1`` costs ``g >> b`` padding entries, each a gap and a
stored zero value. So for ``n`` nonzeros with gaps ``g`` and ``v`` bytes a value,
width ``b`` stores ``n + sum(g >> b)`` entries in ``crd`` bytes (bit-packed words
or one unsigned word an entry) plus ``v`` bytes each. Narrow widths save gap
bits and pay padding; the best width depends on the matrix (fp16 values and
random zeros: 2-3 bits at 50% zeros, 4 at 70%, 5 at 90%).

:func:`gap_histogram` counts the distinct gaps once; :func:`width_costs` prices
every candidate width from it exactly (Python integers: nothing is allocated
per entry, however much padding a width would need); :func:`choose_width`
takes the cheapest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .delta import PACKABLE_BITS, Delta, row_gaps

PLAIN_BITS = tuple(range(1, 33))
#: a dense count table is used up to this many bins beyond the entry count (else sorting)
_DENSE_BINS = 1 << 16


@dataclass(frozen=True)
class GapHistogram:
    """How many entries skip each distinct number of coordinates: ``counts[k]`` entries
    have gap ``gaps[k]`` (``gaps`` ascending, int64)."""

    gaps: np.ndarray
    counts: np.ndarray

    @property
    def nonzeros(self) -> int:
        return int(self.counts.sum())

    @property
    def widest(self) -> int:
        return int(self.gaps[-1]) if len(self.gaps) else 0

    def padding(self, bits: int) -> int:
        """Padding entries a ``delta(bits)`` level stores: ``sum(gap >> bits)``, exactly."""
        steps = self.gaps >> bits
        if self.widest >> bits < (1 << 62) // max(1, self.nonzeros):  # the int64 dot cannot overflow
            return int(np.dot(self.counts, steps))
        return sum(int(c) * int(s) for c, s in zip(self.counts, steps))

    @classmethod
    def of(cls, gap: np.ndarray) -> "GapHistogram":
        """The histogram of the int64 gaps ``gap`` (:func:`~.delta.row_gaps`)."""
        gap = np.asarray(gap, dtype=np.int64)
        if not len(gap):
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int64))
        if int(gap.min()) < 0:
            raise ValueError("gaps must be non-negative (coordinates sorted and unique within each row)")
        if int(gap.max()) <= len(gap) + _DENSE_BINS:
            table = np.bincount(gap)
            present = np.flatnonzero(table)
            return cls(present.astype(np.int64), table[present].astype(np.int64))
        values, counts = np.unique(gap, return_counts=True)
        return cls(values.astype(np.int64), counts.astype(np.int64))


def gap_histogram(parent: np.ndarray, crd: np.ndarray, lo: int = 0) -> GapHistogram:
    """The gap histogram of entries at ``(parent, crd)``, sorted by (parent, crd) and unique,
    coordinates counted from ``lo``."""
    return GapHistogram.of(row_gaps(np.asarray(parent), np.asarray(crd, dtype=np.int64), lo))


@dataclass(frozen=True)
class WidthCost:
    """What ``level`` would store for a histogram: ``entries`` (nonzeros plus ``padding``)
    in ``bytes`` of crd and values (``pos`` is the same for every width and not counted)."""

    level: Delta
    entries: int
    padding: int
    bytes: int

    @property
    def bits(self) -> int:
        return self.level.bits


def width_costs(hist: GapHistogram, value_bytes: int, packed: bool = True) -> list[WidthCost]:
    """The cost of every candidate width: :data:`~.delta.PACKABLE_BITS` when ``packed``,
    else 1..32 unpacked."""
    if isinstance(value_bytes, bool) or not isinstance(value_bytes, (int, np.integer)) or value_bytes < 0:
        raise ValueError(f"value_bytes must be a non-negative integer, got {value_bytes!r}")
    out = []
    for bits in PACKABLE_BITS if packed else PLAIN_BITS:
        level = Delta(bits=bits, packed=packed)
        padding = hist.padding(bits)
        entries = hist.nonzeros + padding
        out.append(WidthCost(level, entries, padding, level.storage_bytes(entries, int(value_bytes))))
    return out


def choose_width(hist: GapHistogram, value_bytes: int, packed: bool = True) -> WidthCost:
    """The candidate of :func:`width_costs` storing the fewest bytes; ties go to fewer
    entries (less padding to walk), then to the narrower width (an empty matrix: b = 1)."""
    return min(width_costs(hist, value_bytes, packed), key=lambda c: (c.bytes, c.entries, c.bits))
