"""The element-wise merge kernels of two CSR-family matrices (``fastpaths.merge``) against dense
NumPy: every operator, dtype and path (one thread appending, rows merged one or two at a time,
one parallel pass with in-place or gathered compaction, count-then-fill when the
over-allocation does not fit the budget)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ustc
from ustc.tensor import fastpaths, kernels
from ustc.tensor.storage import Layout

OPS = {"+": (kernels.ADD, np.add), "-": (kernels.SUB, np.subtract), "*": (kernels.MUL, np.multiply)}
DTYPES = (np.float32, np.float64, np.int64, np.complex128)
SHAPES = ((0, 0), (0, 5), (5, 0), (1, 9), (9, 1), (7, 13), (40, 30))


def _dense(rng, shape, dtype, density):
    x = rng.integers(-3, 4, shape) * (rng.random(shape) < density)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.integers(-2, 3, shape) * (x != 0)
    return x.astype(dtype)


def _merged(op, A, B):
    spec = fastpaths.Merge.of(OPS[op][0], Layout.of(A.format, A.shape), np.result_type(A.dtype, B.dtype))
    return fastpaths.merge(spec, A, B, A.package)


def _check(C, expected, fmt):
    assert C.format == ustc.Tensor.from_dense(np.zeros((1, 1)), fmt).format
    np.testing.assert_array_equal(C.to_dense(), expected)
    assert C.dtype == expected.dtype
    coords, values = C.entries()
    assert np.all(values != 0), "a zero result was stored"
    assert len(values) == np.count_nonzero(expected)
    pos, crd = C._buffers[(1, "pos")], C._buffers[(1, "crd")]
    for r in range(len(pos) - 1):                           # each row sorted, unique
        assert np.all(np.diff(crd[pos[r]:pos[r + 1]]) > 0)
    assert C.nse == len(values)
    C.validate()


def _paths(monkeypatch, path):
    if path in ("serial", "unpaired", "all-paired"):
        monkeypatch.setattr(fastpaths, "PAIRED_ROW_ENTRIES", {"serial": 32, "unpaired": 0, "all-paired": 10**9}[path])
        return
    monkeypatch.setattr(fastpaths, "MERGE_SERIAL_WORK", 0)
    if path == "gather":
        monkeypatch.setattr(kernels, "threads", lambda: 3)
    if path == "two-pass":
        monkeypatch.setenv("USTC_MEMORY_BUDGET", "1")
        monkeypatch.setattr(fastpaths, "_two_pass", _no_fit_allowed(fastpaths._two_pass))


def _no_fit_allowed(two_pass):
    def run(kernels_, operands, rows, spec, entry):   # the exact result must fit: give it room
        import os

        os.environ["USTC_MEMORY_BUDGET"] = str(10**12)
        try:
            return two_pass(kernels_, operands, rows, spec, entry)
        finally:
            os.environ["USTC_MEMORY_BUDGET"] = "1"
    return run


# The parallel paths run the one-thread path's row merge (kernels._merge_row) on row chunks and
# move its results without looking at them (close_gaps, gather_chunks; the two-pass count and
# fill call the same row merge): every dtype on the one-thread paths, the parallel ones on
# float64, whose kernels test_cancellations_store_nothing and the property test compile too.
ONE_THREAD = ["serial", "unpaired", "all-paired"]
PARALLEL = ["in-place", "gather", "two-pass"]
PATHS = [(dtype, path) for dtype in DTYPES for path in ONE_THREAD] + [(np.float64, path) for path in PARALLEL]


@pytest.mark.parametrize("fmt", ["CSR", "CSC"])
@pytest.mark.parametrize("dtype, path", PATHS, ids=lambda v: v if isinstance(v, str) else np.dtype(v).name)
def test_every_op_shape_and_path_matches_numpy(monkeypatch, path, fmt, dtype):
    _paths(monkeypatch, path)
    rng = np.random.default_rng(7)
    for shape in SHAPES:
        for density in (0.0, 0.3, 0.9):
            a, b = _dense(rng, shape, dtype, density), _dense(rng, shape, dtype, 0.4)
            A, B = ustc.Tensor.from_dense(a, fmt), ustc.Tensor.from_dense(b, fmt)
            for op, (_, f) in OPS.items():
                _check(_merged(op, A, B), f(a, b), fmt)


@pytest.mark.parametrize("path", ["serial", "in-place", "gather", "two-pass"])
def test_cancellations_store_nothing(monkeypatch, path):
    _paths(monkeypatch, path)
    a = _dense(np.random.default_rng(1), (30, 20), np.float64, 0.5)
    A, negA = ustc.Tensor.from_dense(a, "CSR"), ustc.Tensor.from_dense(-a, "CSR")
    assert _merged("+", A, negA).nse == 0
    assert _merged("-", A, A).nse == 0
    half = ustc.Tensor.from_dense(np.where(np.arange(20) % 2, -a, a), "CSR")   # every other column cancels
    _check(_merged("+", A, half), a + np.where(np.arange(20) % 2, -a, a), "CSR")


def test_mixed_dtypes_and_index_dtypes():
    rng = np.random.default_rng(3)
    a, b = _dense(rng, (12, 9), np.float32, 0.4), _dense(rng, (12, 9), np.int64, 0.4)
    A, B = ustc.Tensor.from_dense(a, "CSR"), ustc.Tensor.from_dense(b, "CSR")
    B._buffers = {k: v.astype(np.int64) for k, v in B._buffers.items()}   # int64 indices on one side
    for op, (_, f) in OPS.items():
        _check(_merged(op, A, B), f(a, b), "CSR")


def test_explicit_zeros_in_operands_are_not_kept():
    A = ustc.Tensor(ustc.Tensor.from_dense(np.eye(3), "CSR").format, (3, 3),
                    {(1, "pos"): np.array([0, 1, 2, 3], np.int32), (1, "crd"): np.array([0, 1, 2], np.int32)},
                    np.array([1.0, 0.0, 2.0]))
    B = ustc.Tensor.from_dense(np.zeros((3, 3)), "CSR")
    C = _merged("+", A, B)
    assert C.nse == 2 and C.to_dense().tolist() == [[1, 0, 0], [0, 0, 0], [0, 0, 2]]


def test_nan_and_inf_follow_numpy():
    a = np.array([[np.inf, 0, 1.0], [0, np.nan, 0]])
    b = np.array([[-np.inf, 2.0, 0], [0, 1.0, 3.0]])
    A, B = ustc.Tensor.from_dense(a, "CSR"), ustc.Tensor.from_dense(b, "CSR")
    with np.errstate(invalid="ignore"):
        for op, (_, f) in OPS.items():
            got, want = _merged(op, A, B).to_dense(), f(a, b)
            want = np.where(np.isin(np.arange(3), []) | ((a == 0) & (b == 0)), 0, want)
            if op == "*":
                want = np.where((a == 0) | (b == 0), 0, a * b)
            np.testing.assert_array_equal(got, want)


def test_over_allocation_refused_before_allocating_falls_back_to_two_passes(monkeypatch):
    monkeypatch.setattr(fastpaths, "MERGE_SERIAL_WORK", 0)
    calls = []
    real = fastpaths._two_pass
    monkeypatch.setattr(fastpaths, "_two_pass", lambda *args: calls.append(1) or real(*args))
    a = _dense(np.random.default_rng(5), (50, 50), np.float64, 0.5)
    A = ustc.Tensor.from_dense(a, "CSR")
    B = ustc.Tensor.from_dense(a.T.copy(), "CSR")
    bound_bytes = (A.nse + B.nse) * (4 + 8)
    monkeypatch.setenv("USTC_MEMORY_BUDGET", str(bound_bytes - 1))   # the bound does not fit, the result does
    _check(_merged("+", A, B), a + a.T, "CSR")
    assert calls == [1]
    monkeypatch.setenv("USTC_MEMORY_BUDGET", "10")                   # nor does the result
    with pytest.raises(ustc.StorageError, match="memory budget"):
        _merged("+", A, B)


def test_trusted_tensor_has_the_constructors_attributes():
    A = ustc.Tensor.from_dense(np.eye(4), "CSR")
    C = _merged("+", A, A)
    D = ustc.Tensor(C.format, C.shape, C._buffers, C._values)
    assert set(C.__dict__) == set(D.__dict__)
    assert C._counts == D._counts and C._layout == D._layout


def test_merge_spec_is_validated():
    layout = Layout.of(ustc.Tensor.from_dense(np.eye(2), "CSR").format, (2, 2))
    with pytest.raises(ValueError):
        fastpaths.Merge.of(kernels.ADD, Layout.of(ustc.Tensor.from_dense(np.eye(2), "COO").format, (2, 2)), np.float64)
    with pytest.raises(ValueError):
        fastpaths.Merge.of(7, layout, np.float64)
    with pytest.raises(ValueError):
        fastpaths.Merge.of(kernels.ADD, layout, np.float16)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 12), st.integers(0, 12), st.floats(0, 1), st.floats(0, 1), st.integers(0, 2**16),
       st.sampled_from(sorted(OPS)), st.booleans())
def test_property_merge_is_the_dense_operator(rows, cols, da, db, seed, op, parallel):
    rng = np.random.default_rng(seed)
    a, b = _dense(rng, (rows, cols), np.float64, da), _dense(rng, (rows, cols), np.float64, db)
    A, B = ustc.Tensor.from_dense(a, "CSR"), ustc.Tensor.from_dense(b, "CSR")
    old = fastpaths.MERGE_SERIAL_WORK
    fastpaths.MERGE_SERIAL_WORK = 0 if parallel else old
    try:
        _check(_merged(op, A, B), OPS[op][1](a, b), "CSR")
    finally:
        fastpaths.MERGE_SERIAL_WORK = old
    np.testing.assert_array_equal(A.to_dense(), a)                # operands untouched
    np.testing.assert_array_equal(B.to_dense(), b)
