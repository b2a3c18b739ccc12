"""Conversions the generated kernel writes in the target's own format (``codegen.writer``),
checked buffer for buffer against the NumPy pack/unpack oracle, and the sizes-before-memory
refusal of a result that cannot fit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, reject, settings
from hypothesis import strategies as st

import ustc
from fitting import structured_fit
from storage_oracle import assert_same_storage, oracle
from strategies import examples, formats
from ustc import Tensor
from ustc import formats as F
from ustc.errors import StorageError
from ustc.ops import convert as generated
from ustc.ops import runtime
from ustc.tensor import storage

from test_convert import rand_dense

# every 2-D registry format the kernel can write in order, and every other one (they fall back)
REGISTRY_2D = {nf.name: nf.format() for nf in F.NAMED if nf.format().ndim == 2}
WRITABLE = [pytest.param(fmt, id=name) for name, fmt in REGISTRY_2D.items() if generated.writable(fmt)]


@settings(max_examples=examples(60), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(src=formats(max_rank=3, allow_structured=False), dst=formats(max_rank=3, allow_structured=False),
       data=st.data())
def test_generated_conversion_equals_the_oracle_buffer_for_buffer(src, dst, data):
    assume(src.ndim == dst.ndim and generated.writable(dst))
    shape = tuple(data.draw(st.lists(st.integers(0, 6), min_size=src.ndim, max_size=src.ndim), label="shape"))
    kind = data.draw(st.sampled_from(["random", "zero", "full"]), label="contents")
    dtype = data.draw(st.sampled_from([np.float64, np.float32, np.int32, np.complex128]), label="dtype")
    x = rand_dense(shape, dtype, density={"random": 0.35, "zero": 0.0, "full": 1.0}[kind], seed=len(shape))
    if kind == "zero":
        x = np.zeros(shape, dtype)
    try:
        a = Tensor.from_dense(structured_fit(x, src), src)
    except StorageError:  # a unique level above a singleton holds one entry per coordinate
        reject()
    got = generated.written(a, dst)
    want = oracle(a, dst)
    if got is not None:
        assert_same_storage(got, want)
    converted = a.convert(dst)   # the NumPy route at this size: the same tensor
    assert_same_storage(converted, want)
    np.testing.assert_array_equal(converted.to_dense(), x)


@pytest.mark.parametrize("dst", [
    "(d0, d1, d2) -> (d0 : compressed, d1 : compressed(nonunique), d2 : compressed(nonunique)), crdWidth = 8",
    "(d0, d1, d2) -> (d0 : dense, d1 : compressed(nonunique), d2 : compressed)",
    "(d0, d1, d2) -> (d0 : compressed(nonunique), d1 : compressed(nonunique), d2 : singleton)",
    "(d0, d1, d2) -> (d0 : compressed(nonunique), d1 : singleton(nonunique), d2 : singleton)"])
def test_a_nonunique_level_shares_a_position_unless_singletons_follow(dst):
    """A compressed(nonunique) level whose child is not a singleton stores a repeated coordinate
    once (the pack oracle's one position per coordinate group); ahead of singletons (a COO
    region) every tuple keeps a position of its own. Found by Hypothesis: the writer gave an
    all-batch (1, 1, 4) source's level 1 pos [0, 2] against the oracle's [0, 1]."""
    src = "(d0, d1, d2) -> (d0 : batch, d1 : batch, d2 : batch), posWidth = 8, crdWidth = 32"
    dst = ustc.TensorFormat.parse(dst)
    for shape in [(1, 1, 4), (2, 3, 4)]:
        for density in (0.35, 1.0):
            x = rand_dense(shape, np.float64, density=density, seed=3)
            a = Tensor.from_dense(x, src)
            got = generated.written(a, dst)
            assert got is not None
            assert_same_storage(got, oracle(a, dst))
            np.testing.assert_array_equal(got.to_dense(), x)


SHAPES = [(0, 0), (1, 9), (9, 1), (7, 11), (5, 5)]


@pytest.mark.parametrize("dst", WRITABLE)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_registry_targets_from_csr_are_written_by_the_kernel(dst, shape):
    """Every registry format whose levels the kernel can append, from CSR, except compressed rows
    (CSR, CSC), which the row-parallel kernel writes; a column-major target has the CSR source
    transposed to CSC first (a counting transpose, then the writer)."""
    x = structured_fit(rand_dense(shape, np.float64, 0.4, seed=shape[0]), dst)
    a = Tensor.from_dense(x, F.CSR)
    got = generated.written(a, dst)
    assert (got is not None) == (not dst.compressed_rows)
    assert_same_storage(a.convert(dst), oracle(a, dst))
    if got is not None:
        assert_same_storage(got, oracle(a, dst))
        got.validate()


@pytest.mark.parametrize("dst", [pytest.param(ustc.TensorFormat.parse(t), id=t) for t in (
    "(i, j) -> (i : compressed, j : dense)", "(i, j) -> (i : dense, j : loose_compressed)",
    "(i, j) -> (i : compressed(nonunique), j : singleton(nonunique, soa))", "(i, j) -> (i : dense, j : delta(1))",
    "(i, j) -> (i : dense, j : delta(8, packed))", "(i, j) -> (i : loose_compressed, j : delta(2))")])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_level_types_outside_the_named_formats_are_written_by_the_kernel(dst, shape):
    x = rand_dense(shape, np.float64, 0.4, seed=shape[1])
    a = Tensor.from_dense(x, F.COO(2))
    got = generated.written(a, dst)
    assert got is not None
    assert_same_storage(got, oracle(a, dst))
    got.validate()


def test_every_registry_format_is_written_by_the_kernel():
    """The compiler writes every format: a registry format whose levels lack write hooks fails here."""
    assert [name for name, fmt in REGISTRY_2D.items() if not generated.writable(fmt)] == []


def test_duplicates_and_explicit_zeros_of_the_source_are_summed_and_dropped():
    """A COO source with repeated coordinates (summing to zero once) and an explicit zero."""
    rows, cols = np.array([0, 0, 1, 1, 2, 2]), np.array([3, 3, 0, 2, 1, 1])
    vals = np.array([1.0, 2.0, 5.0, 0.0, 4.0, -4.0])
    fmt = "(i, j) -> (i : compressed(nonunique), j : singleton(nonunique))"
    buffers = {(0, "pos"): np.array([0, 6]), (0, "crd"): rows, (1, "crd"): cols}
    a = Tensor(fmt, (3, 4), buffers, vals)
    expected = np.zeros((3, 4))
    expected[0, 3], expected[1, 0] = 3.0, 5.0
    for dst in (F.DCSR, F.COO(2), F.DELTA(1)):
        got = generated.written(a, dst)
        assert got is not None
        np.testing.assert_array_equal(got.to_dense(), expected)
        assert_same_storage(got, oracle(a, dst))
        if dst != F.DELTA(1):  # delta pads with zeros; the others store exactly the two nonzeros
            assert sorted(got.values.tolist()) == [3.0, 5.0]


def test_convert_takes_the_generated_kernel_and_keeps_the_input(monkeypatch):
    calls = []
    original = runtime.Run._written
    monkeypatch.setattr(runtime.Run, "_written", lambda self, *a: calls.append(1) or original(self, *a))
    x = rand_dense((300, 400), np.float64, 0.6, seed=3)
    a = Tensor.from_dense(x, F.CSR)
    assert generated.worth_compiling(a) and not generated.worth_compiling(Tensor.from_dense(x[:10], F.CSR))
    before = [b.copy() for b in a.buffers.values()], a.values.copy()
    for dst in (F.COO(2), F.DCSR, F.DELTA(3)):
        np.testing.assert_array_equal(a.convert(dst).to_dense(), x)
    assert len(calls) == 2  # CSR -> COO is the fused copy (fastpaths._coo_copied): DCSR and DELTA(3) are written
    dcsr = a.convert(F.DCSR)
    np.testing.assert_array_equal(dcsr.convert(F.COO(2)).to_dense(), x)
    assert len(calls) == 4  # CSR -> DCSR and DCSR -> COO are written
    for b, saved in zip(a.buffers.values(), before[0]):
        np.testing.assert_array_equal(b, saved)
    np.testing.assert_array_equal(a.values, before[1])


def test_a_result_over_the_memory_budget_is_refused_before_allocating(monkeypatch):
    import tracemalloc

    x = rand_dense((200, 300), np.float64, 0.5, seed=1)
    a = Tensor.from_dense(x, F.CSR)
    generated.written(a, F.DCSR)  # compile outside the measurement
    monkeypatch.setenv("USTC_MEMORY_BUDGET", "10000")
    tracemalloc.start()
    try:
        with pytest.raises(StorageError, match="memory budget of 10,000 bytes"):
            generated.written(a, F.DCSR)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200_000  # the counts and the empty counting buffers, never the result


def test_targets_the_walk_cannot_write_fall_back():
    x = structured_fit(rand_dense((6, 5), seed=2), F.Structured(2, 4))
    a = Tensor.from_dense(x, F.CSR)
    assert generated.written(a, F.CSC) is None           # compressed rows: the row-parallel kernel
    for dst in (F.CSC, F.Structured(2, 4)):
        np.testing.assert_array_equal(a.convert(dst).to_dense(), x)


@pytest.mark.parametrize("dst", REGISTRY_2D.values(), ids=REGISTRY_2D.keys())
def test_a_dense_tensor_converts_to_every_registry_format_as_the_oracle(dst):
    """``Tensor.from_package(dense).convert(fmt)``, the path the UST blog shows: CSR and COO take
    the parallel dense kernels, CSC those and a counting transpose, others the writer or NumPy."""
    x = structured_fit(rand_dense((290, 310), np.float64, 0.9, seed=11), dst)  # 81k entries: past COMPILE_FROM
    d = Tensor.from_package(x)
    got = d.convert(dst)
    assert_same_storage(got, oracle(d, dst))
    np.testing.assert_array_equal(got.to_dense(), x)


def test_a_bound_sparse_output_takes_the_written_storage_and_plus_equals_still_merges(tmp_path):
    kernel = tmp_path / "kernels_written.py"
    kernel.write_text("import ustc\n\n@ustc.jit\ndef scale(C, A):\n    C[i, j] = A[i, j] * 2.0\n\n"
                      "@ustc.jit\ndef add(C, A):\n    C[i, j] += A[i, j]\n")
    import importlib.util

    spec = importlib.util.spec_from_file_location("kernels_written", kernel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = rand_dense((20, 30), np.float64, 0.3, seed=4)
    a = Tensor.from_dense(x, F.CSR)
    for fmt in (F.COO(2), F.DCSR, F.DELTA(2)):
        c = Tensor.from_dense(np.zeros((20, 30)), fmt)
        assert module.scale(c, a) is c
        np.testing.assert_array_equal(c.to_dense(), 2 * x)
        assert module.add(c, a) is c
        np.testing.assert_array_equal(c.to_dense(), 3 * x)
        c.validate()


def test_a_padded_target_over_budget_names_the_width_that_fits(monkeypatch):
    """The writer refuses a delta target by its counts; convert then lets the pack hook refuse it
    too (before allocating), because only it can name the narrowest width that fits."""
    x = np.zeros((300, 4000))
    x[:, 0] = x[:, -1] = 1.0    # every row: a gap of 3998 columns
    a = Tensor.from_dense(x, F.CSR)
    big = Tensor.from_dense(np.tile(x, (250, 1)), F.CSR)  # 150k entries: convert takes the writer first
    monkeypatch.setenv("USTC_MEMORY_BUDGET", str(2_000_000))
    with pytest.raises(StorageError, match="memory budget"):
        generated.written(a, F.DELTA(1))
    with pytest.raises(StorageError, match="narrowest width that fits is b = "):
        big.convert(F.DELTA(1))


@pytest.mark.parametrize("dst", [F.COO(2), F.DCSR, F.DELTA(2)], ids=str)
def test_a_column_major_source_is_transposed_then_written_without_warnings(dst, recwarn):
    """CSC into a row-major target: the plan transposes the source by the counting kernel (the
    target's level order is a hard constraint of a conversion), then the writer runs; the
    conversion is internal, so convert warns about nothing."""
    x = rand_dense((370, 290), np.float64, 0.7, seed=12)   # 75k entries: past COMPILE_FROM
    a = Tensor.from_dense(x, F.CSC)
    got = generated.written(a, dst)
    assert got is not None
    assert_same_storage(got, oracle(a, dst))
    assert_same_storage(a.convert(dst), oracle(a, dst))
    assert not [w for w in recwarn if issubclass(w.category, ustc.ConversionWarning)]
