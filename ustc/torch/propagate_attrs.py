"""Sparsity attributes of a model's tensors (SparTA's "tensor with sparsity attribute", TeSA).

Three frozen, hashable records, validated at construction:

* :class:`NMPattern` / :class:`BlockPattern`: the structure of a weight's
  nonzeros (n of every m along a row; whole ``rows x cols`` tiles kept or gone);
* :class:`WeightSparsity`: a 2-D weight (``out x in``): its nonzero mask
  (bit-packed), the structure found in it, its all-zero rows and columns, and
  where the mask came from;
* :class:`FeatureSparsity`: an activation along its last (feature) dimension:
  the features with one known value for every input (``constant``; value 0:
  *dead*), the features no consumer reads (``unused``), and the share of
  nonzeros measured on the example inputs (a statistic, never used to drop
  anything).

    >>> from ustc.torch.propagate_attrs import FeatureSparsity, NMPattern
    >>> a = FeatureSparsity(4, constant=((1, 0.0), (3, 0.5)), unused=(2,))
    >>> a.dead, a.needed
    ((1,), (0,))
    >>> hash(a) == hash(FeatureSparsity(4, constant=((1, 0.0), (3, 0.5)), unused=(2,)))
    True
    >>> NMPattern(2, 4)
    NMPattern(n=2, m=4)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ShapeError


def _indices(name: str, values, size: int) -> None:
    """Check that ``values`` are strictly increasing ints in ``[0, size)``."""
    previous = -1
    for v in values:
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise TypeError(f"{name} holds {v!r}; expected feature indices (ints)")
        if not previous < v < size:
            raise ValueError(f"{name} must be strictly increasing indices in [0, {size}), got {tuple(values)}")
        previous = v


@dataclass(frozen=True)
class NMPattern:
    """At most ``n`` nonzeros in every ``m`` consecutive entries of a row (2:4: ``NMPattern(2, 4)``)."""

    n: int
    m: int

    def __post_init__(self):
        if not 0 < self.n < self.m:
            raise ValueError(f"n:m needs 0 < n < m, got {self.n}:{self.m}")

    def __str__(self) -> str:
        return f"{self.n}:{self.m}"


@dataclass(frozen=True)
class BlockPattern:
    """Nonzeros in whole ``rows x cols`` tiles: a tile is kept or gone as a unit."""

    rows: int
    cols: int

    def __post_init__(self):
        if self.rows < 1 or self.cols < 1:
            raise ValueError(f"block sides must be positive, got {self.rows}x{self.cols}")

    def __str__(self) -> str:
        return f"block {self.rows}x{self.cols}"


@dataclass(frozen=True)
class FeatureSparsity:
    """The TeSA of an activation along its last dimension of ``size`` features.

    ``constant``: ``(feature, value)`` pairs, increasing in feature: that
    feature has that value for every input (value 0: the feature is *dead*);
    found by propagation from the weights, so it holds for all inputs (finite
    ones: ``0 * inf`` is not 0). ``unused``: increasing features that no
    consumer of the tensor reads (found backward from the consumers).
    ``density``: the share of nonzeros measured on the example inputs, or None.
    """

    size: int
    constant: tuple = ()
    unused: tuple = ()
    density: float | None = None

    def __post_init__(self):
        if self.size < 0:
            raise ValueError(f"size must be >= 0, got {self.size}")
        if any(len(pair) != 2 for pair in self.constant):
            raise ValueError("constant holds (feature, value) pairs")
        _indices("constant", [f for f, _ in self.constant], self.size)
        _indices("unused", self.unused, self.size)
        if self.density is not None and not 0.0 <= self.density <= 1.0:
            raise ValueError(f"density must lie in [0, 1], got {self.density}")

    @property
    def dead(self) -> tuple:
        """Features that are 0 for every input."""
        return tuple(f for f, v in self.constant if v == 0)

    @property
    def needed(self) -> tuple:
        """Features that must be computed: neither constant nor unused."""
        skip = {f for f, _ in self.constant} | set(self.unused)
        return tuple(f for f in range(self.size) if f not in skip)

    def summary(self) -> str:
        """A short cell: ``512 (460 dead, 3 const, 12 unused, 8% nz)``."""
        parts = []
        dead = len(self.dead)
        if dead:
            parts.append(f"{dead} dead")
        if len(self.constant) > dead:
            parts.append(f"{len(self.constant) - dead} const")
        if self.unused:
            parts.append(f"{len(self.unused)} unused")
        if self.density is not None:
            parts.append(f"{self.density:.0%} nz")
        return f"{self.size}" + (f" ({', '.join(parts)})" if parts else "")


@dataclass(frozen=True)
class WeightSparsity:
    """The TeSA of a 2-D weight ``(out, in)``.

    ``mask_bits``: the nonzero mask, row-major, bit-packed (``np.packbits``);
    :meth:`mask` unpacks it. ``pattern``: an :class:`NMPattern`, a
    :class:`BlockPattern` or None (unstructured or dense). ``dead_rows`` /
    ``dead_cols``: the all-zero rows and columns. ``source``: where the mask
    came from (``"zeros"``, ``"torch.nn.utils.prune"``, ``"TorchUST CSR"``, ...).
    Build one from a weight with :meth:`of`.
    """

    shape: tuple
    mask_bits: bytes
    pattern: NMPattern | BlockPattern | None = None
    dead_rows: tuple = ()
    dead_cols: tuple = ()
    source: str = "zeros"

    def __post_init__(self):
        if len(self.shape) != 2 or min(self.shape) < 0:
            raise ShapeError(f"a weight sparsity needs a 2-D shape, got {self.shape}")
        if len(self.mask_bits) != (self.shape[0] * self.shape[1] + 7) // 8:
            raise ValueError(f"mask_bits holds {len(self.mask_bits)} bytes; shape {self.shape} needs "
                             f"{(self.shape[0] * self.shape[1] + 7) // 8}")
        _indices("dead_rows", self.dead_rows, self.shape[0])
        _indices("dead_cols", self.dead_cols, self.shape[1])

    @classmethod
    def of(cls, mask, source: str = "zeros") -> "WeightSparsity":
        """The attribute of a 2-D boolean ``mask`` (True: nonzero), its structure detected."""
        m = torch.as_tensor(mask).detach().cpu().bool()
        if m.dim() != 2:
            raise ShapeError(f"a weight mask must be 2-D, got shape {tuple(m.shape)}")
        bits = np.packbits(m.numpy().reshape(-1)).tobytes()
        rows = tuple(int(i) for i in torch.nonzero(~m.any(1)).flatten())
        cols = tuple(int(i) for i in torch.nonzero(~m.any(0)).flatten())
        return cls(tuple(m.shape), bits, detect_pattern(m), rows, cols, source)

    def mask(self) -> torch.Tensor:
        """The nonzero mask as a dense bool tensor."""
        count = self.shape[0] * self.shape[1]
        flat = np.unpackbits(np.frombuffer(self.mask_bits, dtype=np.uint8), count=count)
        return torch.from_numpy(flat.astype(bool)).reshape(self.shape)

    @property
    def density(self) -> float:
        """The share of nonzero entries."""
        count = self.shape[0] * self.shape[1]
        ones = int(np.unpackbits(np.frombuffer(self.mask_bits, dtype=np.uint8), count=count).sum())
        return ones / max(1, count)

    def summary(self) -> str:
        """A short cell: ``2:4, 50% nz`` or ``12 dead rows, 9% nz``."""
        parts = [str(self.pattern)] if self.pattern else []
        if self.dead_rows:
            parts.append(f"{len(self.dead_rows)} dead rows")
        if self.dead_cols:
            parts.append(f"{len(self.dead_cols)} dead cols")
        parts.append(f"{self.density:.0%} nz")
        return ", ".join(parts)


_NM_CANDIDATES = ((1, 4), (2, 4), (4, 8))  # tightest first: the first that fits is reported
_BLOCK_SIDES = (32, 16, 8, 4)


def detect_pattern(mask: torch.Tensor):
    """The structure of a 2-D bool mask: an n:m pattern it fits, else square blocks, else None.

    An all-zero or all-nonzero mask has no pattern worth naming (None), nor has one whose
    nonzero rows and columns cross in a dense block (its dead rows and columns describe it). n:m
    counts along rows; a block pattern needs at least a quarter of the tiles
    empty and every nonempty tile nearly full (9 in 10 entries), since a
    pruned tile's kept weights may themselves be 0 now and then.
    """
    rows, cols = mask.shape
    nonzero = int(mask.sum())
    if nonzero == 0 or nonzero == mask.numel():
        return None
    for n, m in _NM_CANDIDATES:
        if cols % m == 0 and bool((mask.reshape(rows, cols // m, m).sum(-1) <= n).all()):
            return NMPattern(n, m)
    if bool(mask[mask.any(1)][:, mask.any(0)].all()):
        return None  # whole rows and columns gone, the rest dense: dead_rows / dead_cols say it all
    for side in _BLOCK_SIDES:
        if rows % side or cols % side or (rows == side and cols == side):
            continue
        tiles = mask.reshape(rows // side, side, cols // side, side).sum((1, 3))
        kept = tiles > 0
        if float((~kept).float().mean()) >= 0.25 and bool((tiles[kept] >= 0.9 * side * side).all()):
            return BlockPattern(side, side)
    return None
