"""Pruning: n:m structured (2:4 is NVIDIA's sparse tensor-core pattern) and unstructured.

    >>> import numpy as np, ustc
    >>> w = np.array([[1., -4, 2, 3, 0.5, 0, -1, 2]])
    >>> pruned, metrics = ustc.prune.prune_24_magnitude(w)
    >>> ustc.prune.decompress(pruned).tolist()
    [[0.0, -4.0, 0.0, 3.0, 0.0, 0.0, -1.0, 2.0]]
    >>> str(pruned.format) == str(ustc.formats.Structured(2, 4)), metrics.pruned_count
    (True, 4)

Every function takes a NumPy array or a CPU torch tensor (torch is never
imported here), leaves it untouched, and returns a :class:`PruneResult`
``(tensor, metrics)``: the pruned weights as a :class:`ustc.Tensor` (in
``Structured(n, m)`` for n:m pruning, or the format asked for) in the input's
package, and :class:`PruneMetrics`. n:m blocks run along the last dimension
(the input features of an ``nn.Linear`` weight); a last block shorter than m
keeps ``min(n, its length)`` entries. Ties are broken towards the lower index.
The pruned tensor multiplies like any other: ``ustc.matmul(pruned, x)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .errors import ShapeError
from .tensor import packages
from .tensor.tensor import Tensor, as_format

__all__ = ["PruneMetrics", "PruneResult", "compute_metrics", "decompress", "global_magnitude_masks", "magnitude_mask",
           "nm_mask", "prune_24_gradient", "prune_24_magnitude", "prune_magnitude", "prune_nm"]


@dataclass(frozen=True)
class PruneMetrics:
    """What pruning removed.

    ``pruned_count`` entries of ``total_count`` were set to zero;
    ``approximation_error`` is ``||w - pruned||_F / ||w||_F`` (0 for an all-zero
    ``w``); the magnitude means are the mean ``|w|`` over the kept and the
    pruned entries (0 when there are none).
    """

    pruned_count: int
    total_count: int
    approximation_error: float
    kept_magnitude_mean: float
    pruned_magnitude_mean: float

    @property
    def sparsity(self) -> float:
        """Share of the entries that were pruned."""
        return self.pruned_count / self.total_count if self.total_count else 0.0


class PruneResult(NamedTuple):
    """``(tensor, metrics)``: the pruned ustc Tensor and its :class:`PruneMetrics`."""

    tensor: Tensor
    metrics: PruneMetrics


def _array(w, name: str = "w") -> np.ndarray:
    array = packages.host_array(w)
    if array.ndim == 0:
        raise ShapeError(f"{name} must have at least one dimension, got a scalar")
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise TypeError(f"{name} must hold numbers, got dtype {array.dtype}")
    return array


def compute_metrics(original, mask) -> PruneMetrics:
    """:class:`PruneMetrics` of keeping ``original`` where the boolean ``mask`` holds."""
    w = _array(original)
    keep = np.asarray(packages.host_array(mask), dtype=bool)
    if keep.shape != w.shape:
        raise ShapeError(f"mask has shape {keep.shape}, the weights have shape {w.shape}")
    mag = np.abs(w).astype(np.float64)
    total = float(np.sqrt(np.sum(mag * mag)))
    removed = float(np.sqrt(np.sum(mag[~keep] ** 2)))
    kept, pruned = mag[keep], mag[~keep]
    return PruneMetrics(pruned_count=int(pruned.size), total_count=int(w.size),
                        approximation_error=removed / total if total else 0.0,
                        kept_magnitude_mean=float(kept.mean()) if kept.size else 0.0,
                        pruned_magnitude_mean=float(pruned.mean()) if pruned.size else 0.0)


def _scores(w: np.ndarray, by) -> np.ndarray:
    """The criterion per entry: 'magnitude' (|w|), an array of w's shape, or ``by(w)``."""
    if isinstance(by, str):
        if by != "magnitude":
            raise ValueError(f"by must be 'magnitude', an array of scores or a callable, got {by!r}")
        return np.abs(w)
    scores = packages.host_array(by(w) if callable(by) else by)
    if scores.shape != w.shape:
        raise ShapeError(f"scores have shape {scores.shape}, the weights have shape {w.shape}")
    if np.iscomplexobj(scores):
        scores = np.abs(scores)
    return scores


def nm_mask(scores, n: int, m: int) -> np.ndarray:
    """Boolean mask keeping the ``n`` highest ``scores`` of every block of ``m`` along the last axis.

    Ties go to the lower index; a last block shorter than ``m`` keeps ``min(n, len)``.
    NaN scores count as the lowest.
    """
    s = np.asarray(scores)
    if isinstance(n, bool) or isinstance(m, bool) or not (isinstance(n, (int, np.integer))
                                                         and isinstance(m, (int, np.integer))):
        raise TypeError(f"n and m must be integers, got {n!r} and {m!r}")
    if not 0 <= n <= m or m < 1:
        raise ValueError(f"n:m pruning needs 0 <= n <= m and m >= 1, got n={n}, m={m}")
    cols = s.shape[-1]
    blocks = -(-cols // m)
    padded = np.full(s.shape[:-1] + (blocks * m,), -np.inf)
    padded[..., :cols] = np.where(np.isnan(s), -np.inf, s) if s.dtype.kind in "fc" else s
    grouped = padded.reshape(s.shape[:-1] + (blocks, m))
    order = np.argsort(-grouped, axis=-1, kind="stable")[..., :n]
    keep = np.zeros(grouped.shape, dtype=bool)
    np.put_along_axis(keep, order, True, axis=-1)
    return keep.reshape(padded.shape)[..., :cols].copy()


def _result(w, array: np.ndarray, keep: np.ndarray, tensor_format) -> PruneResult:
    pruned = np.where(keep, array, np.zeros((), dtype=array.dtype))
    source = packages.wrap(pruned, packages.TORCH) if packages.is_torch(w) else pruned
    tensor = Tensor.from_dense(source, tensor_format)
    return PruneResult(tensor, compute_metrics(array, keep))


def prune_nm(w, n: int, m: int, by="magnitude", tensor_format=None) -> PruneResult:
    """Keep the ``n`` largest entries by ``by`` of every ``m`` consecutive ones along the last axis.

    ``by``: ``"magnitude"`` (``|w|``), an array of scores shaped like ``w``, or a
    callable ``by(w) -> scores``. The result is stored in ``Structured(n, m)``
    (2-D ``w``) unless ``tensor_format`` names another format; other ranks need
    ``tensor_format``.
    """
    from .formats import Structured

    array = _array(w)
    keep = nm_mask(_scores(array, by), n, m)
    if tensor_format is None:
        if array.ndim != 2:
            raise ShapeError(f"Structured({n}, {m}) holds matrices; w has shape {array.shape}: "
                             f"pass tensor_format=")
        tensor_format = Structured(n, m)
    return _result(w, array, keep, as_format(tensor_format))


def prune_24_magnitude(w, tensor_format=None) -> PruneResult:
    """2:4 pruning by magnitude (NVIDIA's default): the two largest ``|w|`` of each 4 stay."""
    return prune_nm(w, 2, 4, tensor_format=tensor_format)


def prune_24_gradient(w, grad, tensor_format=None) -> PruneResult:
    """2:4 pruning for training: the two largest ``|w * grad|`` of each 4 stay."""
    array, g = _array(w), _array(grad, "grad")
    if g.shape != array.shape:
        raise ShapeError(f"grad has shape {g.shape}, w has shape {array.shape}")
    return prune_nm(w, 2, 4, by=np.abs(array * g), tensor_format=tensor_format)


def magnitude_mask(w, amount: float) -> np.ndarray:
    """Mask keeping all but the ``round(amount * size)`` smallest ``|w|`` (ties: lower index pruned first)."""
    return global_magnitude_masks([w], amount)[0]


def global_magnitude_masks(ws, amount: float) -> list:
    """Masks for several arrays ranked together: all but the ``round(amount * total size)`` smallest ``|w|``.

    One threshold for all of them (global magnitude pruning), so an array of
    small weights loses more than ``amount`` of its entries and one of large
    weights less. Ties go to the lower index, the arrays taken in order; NaN
    counts as the largest. Returns one boolean mask per array, in its shape.
    """
    arrays = [_array(w) for w in ws]
    if not 0.0 <= amount <= 1.0:
        raise ValueError(f"amount must be in [0, 1], got {amount!r}")
    if not arrays:
        return []
    flat = np.concatenate([np.abs(a).reshape(-1) for a in arrays])
    order = np.argsort(flat, kind="stable")[:int(round(amount * flat.size))]
    keep = np.ones(flat.size, dtype=bool)
    keep[order] = False
    ends = np.cumsum([a.size for a in arrays])[:-1]
    return [part.reshape(a.shape) for part, a in zip(np.split(keep, ends), arrays)]


def prune_magnitude(w, amount: float, tensor_format=None) -> PruneResult:
    """Unstructured pruning: zero the ``amount`` share (0..1) of entries with the smallest ``|w|``.

    Stored in CSR (2-D), a compressed vector (1-D) or COO (other ranks) unless
    ``tensor_format`` is given.
    """
    from .formats import COO, CSR

    array = _array(w)
    keep = magnitude_mask(array, amount)
    if tensor_format is None:
        tensor_format = {1: "(i) -> (i : compressed)", 2: CSR}.get(array.ndim) or COO(array.ndim)
    return _result(w, array, keep, as_format(tensor_format))


def decompress(pruned):
    """The dense array of a pruned tensor (a :class:`PruneResult` or a ustc Tensor), in its package."""
    tensor = pruned.tensor if isinstance(pruned, PruneResult) else pruned
    if not isinstance(tensor, Tensor):
        raise TypeError(f"decompress takes a PruneResult or a ustc.Tensor, got {type(pruned).__name__}")
    return tensor.to_dense()

