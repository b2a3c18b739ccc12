"""Shared helpers of the operation tests: formats from the registry, random data, oracles.

Every operation test compares a generated kernel against a dense NumPy oracle computed
from the *stored* contents of the operands (``t.to_dense()``), on random data that is
never only zeros unless the case is explicitly the all-zero one.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from ustc import Tensor, TensorFormat
from ustc import formats as F
from fitting import structured_fit  # noqa: F401  (re-exported to the op tests)

# --------------------------------------------------------------------------- formats

NAMED = {nf.name: nf.format() for nf in F.NAMED}
NAMED_2D = {name: fmt for name, fmt in NAMED.items() if fmt.ndim == 2}
NAMED_3D = {name: fmt for name, fmt in NAMED.items() if fmt.ndim == 3}


def named_params(table: dict) -> list:
    """``pytest.param(format, id=name)`` for every entry of ``table``."""
    return [pytest.param(fmt, id=name) for name, fmt in table.items()]


def subset_2d(*names: str) -> list:
    """A few 2-D registry formats (for the costlier dtype matrix), looked up by name."""
    return [pytest.param(NAMED_2D[n], id=n) for n in names]


# One representative per family of 2-D storage (plain compressed, coordinate, doubly
# compressed, diagonal, block, delta, n:m): the subset used for extra dtypes.
FAMILIES_2D = ("CSR", "COO", "DCSC", "DIAI", "BSR", "DELTA", "Structured")

# The value dtypes other than float64 (every format runs float64 in the registry-wide tests).
OTHER_DTYPES = (np.float32, np.int64, np.complex128)


def rotated_dtypes(names=FAMILIES_2D, dtypes=OTHER_DTYPES, offset: int = 0) -> list:
    """``pytest.param(format, dtype)``: format k of ``names`` with dtype ``(k + offset) % len(dtypes)``.

    Each (format, dtype) pair compiles kernels of its own, so a test of extra dtypes takes one
    per format instead of the full product: every format and every dtype (each on two or more
    formats) still appear, and tests of one operation take different offsets so that together
    they cover other pairs."""
    params = []
    for k, name in enumerate(names):
        dtype = dtypes[(k + offset) % len(dtypes)]
        params.append(pytest.param(NAMED_2D[name], dtype, id=f"{name}-{np.dtype(dtype).name}"))
    return params


SHAPES_2D = [(5, 7), (6, 4), (1, 7), (7, 1), (0, 5), (5, 0)]
SHAPE_IDS = ["5x7", "6x4", "1x7", "7x1", "0x5", "5x0"]

# --------------------------------------------------------------------------- data


def seed_of(*parts) -> int:
    """A stable seed from the test's parameters (so failures reproduce)."""
    return zlib.crc32(repr(parts).encode())


def rand_dense(shape, dtype=np.float64, density=0.4, seed=0) -> np.ndarray:
    """Random array with about ``density`` nonzeros, at least one when it has room."""
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < density
    if mask.size and not mask.any():
        mask.flat[rng.integers(mask.size)] = True
    return np.where(mask, rand_values(shape, dtype, rng), 0).astype(dtype)


def rand_values(shape, dtype=np.float64, rng=None) -> np.ndarray:
    """Nonzero random values of ``dtype`` (small integers for integer dtypes)."""
    rng = rng if rng is not None else np.random.default_rng(0)
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return (rng.integers(1, 9, shape) * rng.choice([-1, 1], shape) + 1j * rng.integers(-5, 6, shape)).astype(dtype)
    if dtype.kind == "f":
        vals = rng.standard_normal(shape)
        vals[vals == 0] = 0.5
        return vals.astype(dtype)
    return (rng.integers(1, 10, shape) * rng.choice([-1, 1], shape)).astype(dtype)


def representable(x: np.ndarray, fmt: TensorFormat) -> bool:
    """Whether ``fmt`` can hold the nonzeros of ``x``: a unique level heading a COO region
    (followed by singleton levels) must not repeat a coordinate among the region's tuples."""
    coords = np.nonzero(x)
    if not len(coords[0]):
        return True
    level_coords = [np.broadcast_to(np.asarray(c, dtype=np.int64), coords[0].shape)
                    for c in fmt.level_coordinates(coords)]
    levels = fmt.levels
    for k, lv in enumerate(levels[:-1]):
        end = k
        while end + 1 < len(levels) and levels[end + 1].type.keyword == "singleton":
            end += 1
        if not lv.type.unique or end == k:
            continue
        tuples = np.unique(np.stack(level_coords[:end + 1], axis=1), axis=0)
        if len(np.unique(tuples[:, :k + 1], axis=0)) < len(tuples):
            return False
    return True


def sparse(fmt: TensorFormat, shape, dtype=np.float64, density=0.4, seed=0, zero=False) -> Tensor:
    """A random tensor of ``shape`` stored in ``fmt`` (n:m formats get data that fits)."""
    x = np.zeros(shape, dtype) if zero else rand_dense(shape, dtype, density, seed)
    return Tensor.from_dense(structured_fit(x, fmt), fmt)


def dense_of(t) -> np.ndarray:
    """The dense contents of an operation's result (Tensor or array)."""
    return t.to_dense() if isinstance(t, Tensor) else np.asarray(t)


def snapshot(*operands) -> list:
    """Copies of the operands' storage, to check later that an operation left them alone."""
    out = []
    for op in operands:
        if isinstance(op, Tensor):
            out.append((op.format, op.shape, {k: b.copy() for k, b in op.buffers.items()}, op.values.copy()))
        else:
            out.append(np.array(op, copy=True))
    return out


def assert_unchanged(operands, before) -> None:
    for op, old in zip(operands, before):
        if isinstance(op, Tensor):
            fmt, shape, buffers, values = old
            assert op.format == fmt and op.shape == shape
            assert set(op.buffers) == set(buffers)
            for k, b in buffers.items():
                np.testing.assert_array_equal(op.buffers[k], b)
            np.testing.assert_array_equal(op.values, values)
        else:
            np.testing.assert_array_equal(op, old)

# --------------------------------------------------------------------------- comparison


def tolerance(dtype) -> dict:
    dtype = np.dtype(dtype)
    if dtype.kind in "biu":
        return {"rtol": 0, "atol": 0}
    if dtype in (np.float32, np.complex64):
        return {"rtol": 2e-5, "atol": 2e-5}
    return {"rtol": 1e-12, "atol": 1e-12}


def assert_matches(got, expected, dtype=None) -> None:
    """``got`` (array, scalar or Tensor) equals the oracle ``expected`` within ``dtype``'s tolerance."""
    got = dense_of(got)
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    np.testing.assert_allclose(got, expected, **tolerance(dtype or expected.dtype))
