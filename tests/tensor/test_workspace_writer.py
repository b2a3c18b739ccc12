"""Outputs written through a workspace level (``codegen.writer.Strategy.WORKSPACE``): block, diagonal
and skew-diagonal targets whose coordinates a row walk meets out of order. Every registry format
that takes this path, from several source formats, shapes (empty, all-zero, 1 x n, n x 1,
non-square) and dtypes, is checked buffer for buffer against the NumPy pack/unpack oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ustc
from strategies import examples
from ustc import Tensor
from ustc import formats as F
from ustc.codegen.writer import Strategy, output_order, own_walk_strategies, write_strategies
from ustc.errors import StorageError
from ustc.ops import convert as generated
from ustc.tensor.tensor import as_format

from test_convert import rand_dense
from storage_oracle import assert_same_storage, oracle
from test_written_convert import REGISTRY_2D


def strategies_of(fmt) -> tuple[Strategy, ...] | None:
    return own_walk_strategies(fmt, tuple(f"i{d}" for d in range(fmt.ndim)))


WORKSPACE = [pytest.param(fmt, id=name) for name, fmt in REGISTRY_2D.items()
             if Strategy.WORKSPACE in (strategies_of(fmt) or ())]
SOURCES = {"CSR": F.CSR, "COO": F.COO(2), "DCSR": F.DCSR, "CSC": F.CSC, "dense": F.Dense(2)}
SHAPES = [(0, 0), (0, 5), (1, 9), (9, 1), (7, 11), (12, 5)]


def test_the_registry_has_block_and_diagonal_targets_written_through_a_workspace():
    names = {p.id for p in WORKSPACE}
    assert {"DIAI", "DIAJ", "SkewDIAI", "SkewDIAJ"} <= names
    assert any(n.startswith("BSR") for n in names) and any(n.startswith("BSC") for n in names)


@pytest.mark.parametrize("fmt, order, expected", [
    ("CSR", ("i", "j"), ("locate", "append")),
    ("COO", ("i", "j"), ("append", "append")),
    ("CSC", ("i", "j"), None),                      # a row walk cannot append columns' rows
    ("BSR(2, 3)", ("i", "j"), ("locate", "workspace", "locate", "locate")),
    ("BSR(2, 3)", ("j", "i"), None),                # block rows would not arrive together
    ("BSC(2, 2)", ("j", "i"), ("locate", "workspace", "locate", "locate")),
    ("DIAI", ("i", "j"), ("workspace", "locate")),
    ("DIAI", ("j", "i"), ("workspace", "locate")),  # one parent: any walk groups it
    ("(i, j) -> (i floordiv 2 : compressed, i mod 2 : dense, j : compressed)", ("i", "j"),
     ("append", "locate", "append")),
    ("(i, j) -> (i floordiv 2 : compressed, j : compressed, i mod 2 : dense)", ("i", "j"),
     ("append", "workspace", "locate")),        # row pairs: a column of the pair is one position
    ("(i, j) -> (i floordiv 2 : compressed, j : compressed, i mod 2 : compressed)", ("i", "j"), None),
    ("Structured(2, 4)", ("i", "j"), ("locate", "locate", "append")),  # n:m blocks: count, collect, place
    ("Structured(2, 4)", ("j", "i"), None),
])
def test_write_strategies(fmt, order, expected):
    got = write_strategies(as_format(fmt), ("i", "j"), order)
    assert (None if got is None else tuple(s.value for s in got)) == expected


def test_the_output_order_is_what_the_levels_ask_for():
    assert output_order(as_format("BSR(2, 2)"), ("i", "j")) == ("i", "j")
    assert output_order(as_format("BSC(2, 2)"), ("i", "j")) == ("j", "i")
    assert output_order(as_format("DIAI"), ("i", "j")) == ()
    assert output_order(as_format("Structured(2, 4)"), ("i", "j")) == ("i", "j")


def _source_pairs():
    """Every workspace target from CSR (the row walk) and from two of the other sources in turn,
    so each other source writes a third of the targets at least, a row-major source into a
    column-major target (NumPy's) included: one kernel per pair, not one per source and target."""
    others = [name for name in SOURCES if name != "CSR"]
    for t, dst in enumerate(WORKSPACE):
        for name in ("CSR", others[t % len(others)], others[(t + 1) % len(others)]):
            yield pytest.param(dst.values[0], SOURCES[name], id=f"{name}-{dst.id}")


@pytest.mark.parametrize("dst, src", list(_source_pairs()))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_registry_targets_are_written_through_the_workspace_as_the_oracle(dst, src, shape):
    x = rand_dense(shape, np.float64, 0.35, seed=sum(shape))
    a = Tensor.from_dense(x, src)
    got = generated.written(a, dst)
    if got is None:  # a column-major target from a row-major source other than CSR: no counting transpose
        assert output_order(dst, ("i0", "i1")) == ("i1", "i0") and not src.compressed_rows
        got = a.convert(dst)
    assert_same_storage(got, oracle(a, dst))
    got.validate()
    np.testing.assert_array_equal(got.to_dense(), x)


# each dtype on one kind of workspace (the registry test above writes every one in float64)
@pytest.mark.parametrize("dst, dtype", [("BSR(2, 3)", np.complex128), ("DIAI", np.float32), ("SkewDIAJ", np.int64)],
                         ids=["BSR(2, 3)-complex128", "DIAI-float32", "SkewDIAJ-int64"])
def test_dtypes_all_zero_and_explicit_zeros(dst, dtype):
    x = rand_dense((10, 13), dtype, 0.3, seed=4)
    x[3] = 0
    a = Tensor.from_dense(x, F.COO(2))
    for source in (a, Tensor.from_dense(np.zeros((10, 13), dtype), F.CSR)):
        got = generated.written(source, as_format(dst))
        assert_same_storage(got, oracle(source, dst))
        assert got.values.dtype == dtype


def test_duplicates_of_a_coo_source_are_summed_and_zero_sums_dropped():
    rows, cols = np.array([0, 0, 1, 1, 3, 3, 4]), np.array([3, 3, 0, 2, 1, 1, 4])
    vals = np.array([1.0, 2.0, 5.0, 0.0, 4.0, -4.0, 7.0])
    fmt = "(i, j) -> (i : compressed(nonunique), j : singleton(nonunique))"
    a = Tensor(fmt, (5, 6), {(0, "pos"): np.array([0, 7]), (0, "crd"): rows, (1, "crd"): cols}, vals)
    before = {k: v.copy() for k, v in a.buffers.items()}
    for dst in ("BSR(2, 2)", "DIAJ"):
        got = generated.written(a, as_format(dst))
        assert_same_storage(got, oracle(a, dst))
        dense = np.zeros((5, 6))
        np.add.at(dense, (rows, cols), vals)
        np.testing.assert_array_equal(got.to_dense(), dense)
    for key, buf in before.items():  # the source is not touched
        np.testing.assert_array_equal(a.buffers[key], buf)


@pytest.mark.parametrize("fmt, src", [   # the COO walk and the positions' walk (CSF) in turn, on 2-D and 3-D
    ("(i, j) -> (i floordiv 2 : dense, j floordiv 2 : loose_compressed, i mod 2 : dense, j mod 2 : dense)", "COO"),
    ("(i, j) -> (i floordiv 3 : compressed, j floordiv 2 : compressed, i mod 3 : dense, j mod 2 : dense)", "CSF"),
    ("(i, j, k) -> (i : dense, j floordiv 2 : dense, k : compressed, j mod 2 : dense)", "CSF"),
    ("(i, j, k) -> (i : dense, k - j : compressed, j : range)", "COO"),
])
def test_level_types_and_maps_outside_the_named_formats(fmt, src):
    fmt = as_format(fmt)
    assert Strategy.WORKSPACE in strategies_of(fmt)
    shape = (7, 9) if fmt.ndim == 2 else (5, 4, 6)
    x = rand_dense(shape, np.float64, 0.3, seed=9)
    a = Tensor.from_dense(x, F.COO(fmt.ndim) if src == "COO" else F.CSF(fmt.ndim))
    got = generated.written(a, fmt)
    assert got is not None
    assert_same_storage(got, oracle(a, fmt))
    np.testing.assert_array_equal(got.to_dense(), x)


def test_convert_takes_the_workspace_kernel_from_compile_size(monkeypatch):
    """``Tensor.from_package(x).convert(...)``, the user path, at a size where it compiles."""
    monkeypatch.setattr(generated, "COMPILE_FROM", 1)
    calls = []
    original = generated.written
    monkeypatch.setattr(generated, "written", lambda t, f: calls.append(f) or original(t, f))
    import scipy.sparse as sp

    a = sp.random(40, 50, density=0.2, format="csr", random_state=3)
    t = Tensor.from_package(a)
    got = t.convert("BSR(4, 5)")
    assert calls and got.to_package().blocksize == (4, 5)
    np.testing.assert_array_equal(got.to_package().toarray(), a.toarray())
    np.testing.assert_array_equal(t.convert("DIAJ").to_package().toarray(), a.toarray())


def test_einsum_products_into_block_and_diagonal_outputs():
    """A statement other than a copy writes through the workspace too (``A * B`` into DIA / BSR)."""
    x, y = rand_dense((11, 9), np.float64, 0.5, seed=1), rand_dense((11, 9), np.float64, 0.5, seed=2)
    A, B = Tensor.from_dense(x, F.CSR), Tensor.from_dense(y, F.DCSR)
    for out in ("DIAI", "BSR(3, 2)"):
        C = ustc.einsum("ij,ij->ij", A, B, out_format=out)
        assert C.format == as_format(out)
        np.testing.assert_allclose(C.to_dense(), x * y)
        assert_same_storage(C, oracle(Tensor.from_dense(x * y, F.CSR), out))


def test_a_result_over_the_memory_budget_is_refused_before_allocating(monkeypatch):
    monkeypatch.setenv("USTC_MEMORY_BUDGET", "15000")
    a = Tensor.from_dense(np.eye(300), F.CSR)
    with pytest.raises(StorageError, match="memory budget"):
        generated.written(a, as_format("BSR(8, 8)"))   # 38 blocks of 64 values: 19 kB of values alone


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_block_shapes_equal_the_oracle(data):
    bm, bn = data.draw(st.integers(1, 4), label="bm"), data.draw(st.integers(1, 4), label="bn")
    shape = tuple(data.draw(st.lists(st.integers(0, 9), min_size=2, max_size=2), label="shape"))
    density = data.draw(st.sampled_from([0.0, 0.2, 0.7]), label="density")
    x = rand_dense(shape, np.float64, density, seed=bm * 7 + bn)
    dst = as_format(data.draw(st.sampled_from([f"BSR({bm}, {bn})", f"BSC({bm}, {bn})", "DIAI", "SkewDIAI"])))
    a = Tensor.from_dense(x, data.draw(st.sampled_from(list(SOURCES.values())), label="source"))
    got = generated.written(a, dst) or a.convert(dst)  # (BSC from a row-major source but CSR: NumPy)
    assert_same_storage(got, oracle(a, dst))
