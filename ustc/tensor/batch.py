"""Batched storage: buffers below batch levels carry leading batch axes.

A format with ``nb`` leading batch levels over extents ``(B1, ..., Bnb)``
stores every later buffer as an array of shape ``(B1, ..., Bnb, n)`` whose
positions restart at 0 in each batch (PyTorch's batched CSR layout);
``values`` has shape ``(B1, ..., Bnb, nse)``. Batches may use fewer entries
than ``n``: the tail of a row is unused padding.

The algorithms work on one flat storage in which the batch levels behave as
dense levels. ``flatten`` and ``split`` convert between the two; batches are
walked one by one (a loop over batches, never over entries).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import StorageError
from ..format.ir import TensorFormat


def batch_shape(fmt: TensorFormat, level_shape) -> tuple[int, ...]:
    return tuple(level_shape[:fmt.batch_levels])


def flatten(fmt: TensorFormat, level_shape, buffers: dict, values: np.ndarray) -> tuple[dict, np.ndarray]:
    """Batched buffers -> one flat storage (positions offset per batch)."""
    nb, shape = fmt.batch_levels, batch_shape(fmt, level_shape)
    nbatch = math.prod(shape)
    if nbatch == 0:
        return _empty(fmt, buffers), np.zeros(0, dtype=values.dtype)
    rows = {key: np.asarray(b).reshape(nbatch, -1) for key, b in buffers.items()}
    vals = np.asarray(values).reshape(nbatch, -1)
    parts: dict = {key: [] for key in buffers}
    value_parts, offsets = [], [0] * fmt.nlevels
    for b in range(nbatch):
        parents = 1
        for k in range(nb, fmt.nlevels):
            level = fmt.levels[k].type
            own = level.used_entries({name: rows[(k, name)][b] for name in level.buffers}, parents)
            try:
                count = level.positions(parents, level_shape[k], own)
            except StorageError as exc:
                raise StorageError(f"batch {b}, level {k} ({fmt.levels[k]}): {exc}") from None
            for name, buf in own.items():
                parts[(k, name)].append(_shifted(buf, name, level, count, offsets[k], b == nbatch - 1))
            offsets[k] += count
            parents = count
        if parents > vals.shape[1]:
            raise StorageError(f"batch {b}: values holds {vals.shape[1]} entries, needs {parents}")
        value_parts.append(vals[b, :parents])
    flat = {key: _join(fmt.levels[key[0]].type, key[1], chunks) for key, chunks in parts.items()}
    return flat, (np.concatenate(value_parts) if value_parts else vals.reshape(-1))


def _empty(fmt: TensorFormat, buffers: dict) -> dict:
    """Flat buffers of a tensor with no batches: every level has no parents."""
    def empty(k: int, name: str, b) -> np.ndarray:
        length = fmt.levels[k].type.empty_pos_length() if name == "pos" else 0
        return np.zeros(length, dtype=np.asarray(b).dtype)

    return {(k, name): empty(k, name, b) for (k, name), b in buffers.items()}


def _shifted(buf, name, level, count, offset, last):
    """One batch's part of the flat buffer: positions shifted, unused tails dropped, coordinates
    one per entry (bit-packed levels unpack while batches are joined)."""
    if name == "pos":
        return level.shift_pos(buf, offset, last)
    return level.decode_crd(buf, count)  # used_entries() already cut most rows; singleton rows still carry padding


def _join(level, name, chunks):
    if not chunks:
        return np.zeros(0, dtype=np.int64)
    joined = np.concatenate(chunks)
    return level.encode_crd(joined) if name == "crd" else joined


def split(fmt: TensorFormat, level_shape, flat: dict, values: np.ndarray) -> tuple[dict, np.ndarray]:
    """One flat storage -> batched buffers (rebased per batch, tails padded with zeros)."""
    nb, shape = fmt.batch_levels, batch_shape(fmt, level_shape)
    nbatch = math.prod(shape)
    starts = np.arange(nbatch + 1, dtype=np.int64)  # positions of the last batch level, per batch
    pieces: dict = {key: [] for key in flat}
    for k in range(nb, fmt.nlevels):
        level = fmt.levels[k].type
        child = level.child_starts(level_shape[k], flat.get((k, "pos")), starts)
        crd = level.decode_crd(flat[(k, "crd")], int(child[-1])) if (k, "crd") in flat else None
        for b in range(nbatch):
            if (k, "pos") in flat:
                pieces[(k, "pos")].append(level.batch_pos(flat[(k, "pos")], starts, b, child[b]))
            if crd is not None:
                pieces[(k, "crd")].append(level.encode_crd(crd[child[b]:child[b + 1]]))
        starts = child
    out = {key: _stack(chunks, shape, flat[key].dtype) for key, chunks in pieces.items()}
    return out, _stack([values[starts[b]:starts[b + 1]] for b in range(nbatch)], shape, values.dtype)


def _stack(chunks, shape, dtype) -> np.ndarray:
    width = max((len(c) for c in chunks), default=0)
    out = np.zeros((len(chunks), width), dtype=dtype)
    for b, c in enumerate(chunks):
        out[b, :len(c)] = c
    return out.reshape(*shape, width)
