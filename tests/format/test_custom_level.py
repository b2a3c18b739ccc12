"""A level type defined in a test file (``tests/ell_level.py``: ELLPACK rows) plus one registry
line runs through parsing, conversion (NumPy oracle and generated writer), SpMV and A + B.
The CUDA simulator and sm_90 links of the same kernels: ``tests/cuda/test_custom_level_cuda.py``."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ell_level import ELL
from ustc import Tensor
from ustc.errors import FormatSyntaxError, StorageError
from ustc.format import levels
from ustc.ops import convert as generated

TEXT = "(i, j) -> (i : dense, j : ell(3))"


@pytest.fixture(autouse=True)
def ell():
    levels.register(ELL)  # the one registry line
    yield ELL
    levels.unregister(ELL)


def rows_of_at_most(k: int, shape=(9, 11), seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.zeros(shape)
    for r in range(shape[0]):
        cols = rng.choice(shape[1], size=rng.integers(0, k + 1), replace=False)
        x[r, cols] = rng.integers(1, 9, len(cols))
    return x


def test_the_format_parses_prints_and_names_its_level():
    fmt = ustc.TensorFormat.parse(TEXT)
    assert fmt.levels[1].type == ELL(K=3) and str(fmt) == "(d0, d1) -> (d0 : dense, d1 : ell(3))"
    assert ustc.TensorFormat.parse(str(fmt)) == fmt
    assert ustc.LevelFormat("ell") is ustc.LevelFormat.ELL and ELL(K=3).format is ustc.LevelFormat.ELL


def test_unregistered_it_is_an_unknown_level_type():
    levels.unregister(ELL)
    try:
        with pytest.raises(FormatSyntaxError, match="unknown level type 'ell'"):
            ustc.TensorFormat.parse(TEXT)
    finally:
        levels.register(ELL)
    with pytest.raises(ustc.FormatError, match="already registered"):
        levels.register(ELL)


@pytest.mark.parametrize("source", ["CSR", "COO", "DCSR", "Dense(2)", "CSC"])
def test_conversions_both_ways_equal_the_oracle(source):
    x = rows_of_at_most(3)
    a = Tensor.from_dense(x, source)
    e = a.convert(TEXT)
    np.testing.assert_array_equal(e.to_dense(), x)
    assert e.pos(1).tolist() == np.count_nonzero(x, axis=1).tolist()
    e.validate()
    oracle = Tensor.from_dense(x, TEXT)  # the level's pack hook
    for key, buf in oracle.buffers.items():
        np.testing.assert_array_equal(e.buffers[key], buf)
    np.testing.assert_array_equal(e.values, oracle.values)
    np.testing.assert_array_equal(e.convert(source).to_dense(), x)


def test_the_generated_writer_fills_it():
    x = rows_of_at_most(3, seed=4)
    got = generated.written(Tensor.from_dense(x, "CSR"), ustc.TensorFormat.parse(TEXT))
    assert got is not None
    np.testing.assert_array_equal(got.to_dense(), x)
    np.testing.assert_array_equal(got.crd(1), Tensor.from_dense(x, TEXT).crd(1))


def test_a_row_too_long_is_refused_by_the_oracle_and_the_writer():
    x = rows_of_at_most(5, seed=1)
    x[2, :5] = 1.0
    with pytest.raises(StorageError, match="more than ell"):
        Tensor.from_dense(x, TEXT)
    with pytest.raises(StorageError, match="more than ell"):
        generated.written(Tensor.from_dense(x, "CSR"), ustc.TensorFormat.parse(TEXT))


def test_spmv_and_sums_read_it_through_its_segment_hook():
    x = rows_of_at_most(3, seed=2)
    a = Tensor.from_dense(x, TEXT)
    v = np.arange(11.0)
    np.testing.assert_allclose(a @ v, x @ v)
    np.testing.assert_allclose(np.asarray(a.sum(axis=0)), x.sum(axis=0))
    np.testing.assert_allclose(np.asarray(a.sum(axis=1)), x.sum(axis=1))


@pytest.mark.parametrize("other", [TEXT, "CSR", "COO"])
def test_a_plus_b_and_a_times_b(other):
    x, y = rows_of_at_most(3, seed=5), rows_of_at_most(3, seed=6)
    a, b = Tensor.from_dense(x, TEXT), Tensor.from_dense(y, other)
    np.testing.assert_array_equal((a + b).to_dense(), x + y)
    np.testing.assert_array_equal((a * b).to_dense(), x * y)
    np.testing.assert_array_equal((b - a).to_dense(), y - x)


def test_kernel_keys_cover_the_registered_level_types_source(monkeypatch):
    """A changed hook of a registered level type writes other kernel code: it is another key."""
    from ustc.format.levels import extension_sources

    fmt = ustc.TensorFormat.parse(TEXT)
    before = extension_sources(lv.type for lv in fmt.levels)
    assert set(before) == {"ell"}
    assert extension_sources(lv.type for lv in ustc.formats.CSR.levels) == {}
    from pathlib import Path
    from ustc.format.levels import registry

    read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read(self) + (b"#" if self.name == "ell_level.py" else b""))
    assert extension_sources(lv.type for lv in fmt.levels) == before   # read once per process
    registry._source_hash.cache_clear()                                  # as in the next process
    try:
        assert extension_sources(lv.type for lv in fmt.levels) != before
    finally:
        registry._source_hash.cache_clear()
