"""n:m (``structured[n, m]``) outputs written by the generated kernel in their own format.

The writer takes three passes of one walk (``Structured.collects``): count (refusing a block with
more than n nonzeros before anything is allocated), collect each block's coordinates, place them
(``finalize``: padding at the lowest unused coordinates), fill the values. Every result is
compared buffer for buffer with the NumPy pack hook (``storage.assemble``), the test oracle.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ustc
from ustc import cache
from fitting import structured_fit
from storage_oracle import assert_same_storage, oracle
from strategies import examples
from ustc import Tensor, TensorFormat
from ustc import formats as F
from ustc.codegen.plans import plans_of
from ustc.codegen.writer import output_order
from ustc.errors import StorageError
from ustc.format.levels.structured import Structured
from ustc.ops import convert as generated
from ustc.ops import runtime
from ustc.ops import written as written_host

from fresh_peak import fresh_peak, random_dense_source
from pairwise import pairwise
from test_golden import COPY, GOLDEN, emitted

TARGETS = {str(f): f for f in (F.Structured(2, 4), F.Structured(1, 4), F.Structured(2, 8), F.Structured(4, 4),
                               F.Structured(0, 4), F.Structured(3, 5))}
TARGETS["columns 2:4"] = TensorFormat.parse("(i, j) -> (j : dense, i floordiv 4 : dense, i mod 4 : structured[2, 4])")
TARGETS["8-bit 2:4"] = TensorFormat.parse(
    "(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[2, 4]), crdWidth = 8")
# every 2-D registry format a kernel walks with the output's indices as its loops (the others,
# read through derived indices, fall back to the NumPy pipeline, tested below)
SOURCES = {nf.name: nf.format() for nf in F.NAMED if nf.format().ndim == 2}
WALKED = ("Dense", "COO", "CSR", "CSC", "DCSR", "CROW", "CCOL", "DELTA")
SHAPES = [(0, 0), (0, 6), (4, 0), (1, 9), (1, 4), (7, 11), (5, 8), (6, 13), (3, 3)]
DTYPES = [np.float64, np.float32, np.int64, np.complex128]


def rand_dense(shape, dtype=np.float64, density=0.4, seed=0) -> np.ndarray:
    """Random values, about ``density`` of them nonzero."""
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < density
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        vals = rng.integers(1, 9, shape) + 1j * rng.integers(-5, 6, shape)
    elif dtype.kind == "f":
        vals = rng.standard_normal(shape) + 2.0
    else:
        vals = rng.integers(1, 100, shape)
    return np.where(mask, vals, 0).astype(dtype)


def fitted(x: np.ndarray, *fmts: TensorFormat) -> np.ndarray:
    for fmt in fmts:
        x = structured_fit(x, fmt)
    return x


def spy_on_the_writer(monkeypatch) -> list:
    """The statements whose output the writer kernel wrote in its own format."""
    calls: list = []
    original = runtime.Run._written
    monkeypatch.setattr(runtime.Run, "_written", lambda self, st_, fn, plan, *a: calls.append(plan)
                        or original(self, st_, fn, plan, *a))
    return calls


def check_written(a: Tensor, dst: TensorFormat, dense: np.ndarray) -> Tensor:
    got = generated.written(a, dst)
    assert got is not None, "the generated writer did not take the conversion"
    assert_same_storage(got, oracle(a, dst))
    np.testing.assert_array_equal(got.to_dense(), dense)
    got.validate()
    return got


# every (source, target) pair (a kernel each), every shape with every source and every target
WALKED_CASES = [pytest.param(shape, src, TARGETS[dst], id=f"{shape}-{src}-{dst}")
                for shape, src, dst in pairwise(SHAPES, WALKED, list(TARGETS))]


@pytest.mark.parametrize("shape, src, dst", WALKED_CASES)
def test_conversions_from_walked_sources_equal_the_pack_oracle(dst, src, shape):
    """Column-major targets from a row-major source: CSR and COO are transposed by the counting
    kernel first; DCSR and delta sources would need a generated conversion, and fall back."""
    x = fitted(rand_dense(shape, np.float64, 0.45, seed=sum(shape)), SOURCES[src], dst)
    a = Tensor.from_dense(x, SOURCES[src])
    if output_order(dst, ("i", "j")) == ("j", "i") and src in ("DCSR", "DELTA"):
        assert generated.written(a, dst) is None
        assert_same_storage(a.convert(dst), oracle(a, dst))
        return
    check_written(a, dst, x)


# every (dtype, source) pair (a kernel each), every contents with every dtype and every source
CONTENTS_CASES = [pytest.param(contents, dtype, src, id=f"{contents}-{np.dtype(dtype).name}-{src}")
                  for contents, dtype, src in pairwise(["random", "zero", "full"], DTYPES, ["CSR", "COO", "Dense"])]


@pytest.mark.parametrize("contents, dtype, src", CONTENTS_CASES)
def test_dtypes_all_zero_and_full_blocks(contents, dtype, src):
    """Full rows (every block holds exactly n: no padding), all-zero (every block padding only)."""
    dst = F.Structured(2, 4)
    x = {"random": rand_dense((9, 14), dtype, 0.5, seed=3), "zero": np.zeros((9, 14), dtype),
         "full": rand_dense((9, 14), dtype, 1.0, seed=4)}[contents]
    x = fitted(x, dst)
    got = check_written(Tensor.from_dense(x, SOURCES[src]), dst, x)
    assert got.values.dtype == np.dtype(dtype)


def test_explicit_zeros_and_duplicates_of_the_source_become_padding():
    """A COO source whose duplicates sum (one pair to zero) and an explicit zero: the zeros are
    not entries, so their blocks are padded, and a block of 3 stored coordinates with one zero
    sum fits 2:4."""
    rows, cols = np.array([0, 0, 0, 0, 1, 1]), np.array([0, 1, 1, 2, 5, 6])
    vals = np.array([1.0, 2.0, -2.0, 3.0, 0.0, 4.0])
    fmt = "(i, j) -> (i : compressed(nonunique), j : singleton(nonunique))"
    a = Tensor(fmt, (2, 8), {(0, "pos"): np.array([0, 6]), (0, "crd"): rows, (1, "crd"): cols}, vals)
    expected = np.zeros((2, 8))
    expected[0, 0], expected[0, 2], expected[1, 6] = 1.0, 3.0, 4.0
    got = check_written(a, F.Structured(2, 4), expected)
    assert got.buffers[(2, "crd")].tolist() == [0, 2, 0, 1, 0, 1, 0, 2]


def test_three_dimensional_targets():
    dst = TensorFormat.parse("(a, b, c) -> (a : dense, b : dense, c floordiv 4 : dense, c mod 4 : structured[2, 4])")
    for shape in [(3, 5, 10), (2, 1, 4), (0, 3, 8), (2, 3, 0)]:
        x = fitted(rand_dense(shape, np.float32, 0.5, seed=shape[0]), dst)
        for src in (F.CSF(3), F.COO(3), F.Dense(3)):
            check_written(Tensor.from_dense(x, src), dst, x)


@pytest.mark.parametrize("src", [name for name in SOURCES if name not in WALKED + ("Structured",)])
def test_sources_read_through_derived_indices_still_convert(src):
    """Block, diagonal and DCSC sources: the walk's loops are not the output's indices (or the
    source must be transposed by more than a counting kernel), so the pack hook builds it. (A 2:4
    source's ``j floordiv 4``, ``j mod 4`` loops walk ``j``: the kernel writes 2:4 from it,
    tests/codegen/test_convert_structured_product.py.)"""
    dst = F.Structured(2, 4)
    x = fitted(rand_dense((8, 12), np.float64, 0.5, seed=7), SOURCES[src], dst)
    a = Tensor.from_dense(x, SOURCES[src])
    assert generated.written(a, dst) is None
    assert_same_storage(a.convert(dst), oracle(a, dst))


def overfull() -> tuple[np.ndarray, int]:
    """A 6 x 13 matrix in 2:4 except one block (row 4, block 2) holding 3 nonzeros; its block
    position (blocks counted row by row, 4 per row)."""
    x = fitted(rand_dense((6, 13), np.float64, 0.5, seed=9), F.Structured(2, 4))
    x[4, 8:12] = [1.0, 0.0, 2.0, 3.0]
    x[5, 0:4] = [4.0, 5.0, 6.0, 7.0]   # a later block over-full too: the first is named
    return x, 4 * 4 + 2


def test_an_overfull_block_is_refused_by_name_before_allocating(monkeypatch):
    x, block = overfull()
    a = Tensor.from_dense(x, F.CSR)
    before = ([b.copy() for b in a.buffers.values()], a.values.copy())
    allocated = []
    original = written_host.BufferPlan.allocate
    monkeypatch.setattr(written_host.BufferPlan, "allocate", lambda self: allocated.append(1) or original(self))
    with pytest.raises(StorageError, match=rf"structured\[2, 4\]: block {block} .*more than 2 nonzeros"):
        generated.written(a, F.Structured(2, 4))
    assert not allocated   # refused from the counting pass: nothing written, no partial output
    for b, saved in zip(a.buffers.values(), before[0]):
        np.testing.assert_array_equal(b, saved)
    np.testing.assert_array_equal(a.values, before[1])


@pytest.mark.parametrize("rows", [(10, 40), (40, 10), (3, 60), (63, 62)], ids=str)
def test_the_first_overfull_block_in_walk_order_is_named_whichever_chunk_finds_it(rows):
    """Chunks of rows count in parallel; the refusal kept is the first chunk's."""
    x = fitted(rand_dense((64, 16), np.float64, 0.5, seed=8), F.Structured(2, 4))
    for r in rows:
        x[r, 4:8] = [1.0, 2.0, 3.0, 0.0]
    with pytest.raises(StorageError, match=rf"block {4 * min(rows) + 1} "):
        generated.written(Tensor.from_dense(x, F.CSR), F.Structured(2, 4))


def test_structured_0_of_m_holds_only_zeros():
    dst = F.Structured(0, 4)
    check_written(Tensor.from_dense(np.zeros((3, 9)), F.CSR), dst, np.zeros((3, 9)))
    x = np.zeros((3, 9))
    x[1, 5] = 1.0
    with pytest.raises(StorageError, match=r"block 4 .*more than 0 nonzeros"):
        generated.written(Tensor.from_dense(x, F.CSR), dst)


def test_convert_takes_the_writer_and_prune_still_keeps_the_largest(monkeypatch):
    """At compile size ``convert`` takes the writer; an over-full block makes it refuse, then the
    pack hook names the block with its count; ``prune=True`` goes to the pack hook directly,
    which keeps the n largest."""
    monkeypatch.setattr(generated, "COMPILE_FROM", 1)
    calls = spy_on_the_writer(monkeypatch)
    x = fitted(rand_dense((20, 30), np.float64, 0.5, seed=2), F.Structured(2, 4))
    for src in (F.CSR, F.COO(2), F.CSC):
        assert_same_storage(Tensor.from_dense(x, src).convert(F.Structured(2, 4)),
                            oracle(Tensor.from_dense(x, F.COO(2)), F.Structured(2, 4)))
    assert len(calls) == 3 and all(plan.writer == 3 for plan in calls)
    y, block = overfull()
    a = Tensor.from_dense(y, F.CSR)
    with pytest.raises(StorageError, match=rf"block {block} holds 3 nonzeros"):
        a.convert(F.Structured(2, 4))
    tried = len(calls)
    pruned = a.convert(F.Structured(2, 4), prune=True)
    assert len(calls) == tried   # pruning expects over-full blocks: the pack hook, no writer first
    assert_same_storage(pruned, oracle(a, F.Structured(2, 4), prune=True))


def test_einsum_outputs_are_written_in_n_m(monkeypatch):
    """A product whose walk runs over the output's indices (a CSR operand leads) writes its 2:4
    output by the kernel; ``ij->ij`` copies go through ``convert``."""
    calls = spy_on_the_writer(monkeypatch)
    dst = F.Structured(2, 4)
    x = fitted(rand_dense((12, 17), np.float64, 0.6, seed=5), dst)
    y = rand_dense((12, 17), np.float64, 0.7, seed=6)
    got = ustc.einsum("ij,ij->ij", Tensor.from_dense(y, F.CSR), Tensor.from_dense(x, dst), out_format=dst)
    assert calls and calls[-1].writer == 3
    assert_same_storage(got, Tensor.from_dense(x * y, dst))
    copied = ustc.einsum("ij->ij", Tensor.from_dense(x, F.CSR), out_format=dst)
    assert_same_storage(copied, Tensor.from_dense(x, dst))


def test_a_conversion_keeps_little_beside_the_output():
    """Peak traced memory of CSR -> 2:4 at compile size beyond the output (fresh interpreter): the
    count table and finalize's batch temporaries, never a coordinate list or a second copy."""
    setup = (random_dense_source((1500, 1600), "float32", 0.5, seed=3)
             + "from ustc import formats as F\nfrom fitting import structured_fit\n"
             + "x = structured_fit(x, F.Structured(2, 4))\na = Tensor.from_dense(x, F.CSR)\n"
             + "a.convert(F.Structured(2, 4))\nfrom ustc.format.levels.structured import FINALIZE_BLOCKS\n")
    got = fresh_peak(f"import sys\nsys.path.insert(0, {str(Path(__file__).parents[1])!r})\n" + setup,
                     "a.convert(F.Structured(2, 4))", "64 * 1024 + 13 * FINALIZE_BLOCKS")  # a batch: | of int32, mask, slots
    assert got["peak"] <= got["nbytes"] + got["allowed"], got


def test_the_kernel_collects_then_places():
    """The plan runs three passes; the source counts refusals, collects, then finds slots."""
    text = emitted(COPY, {"A": F.CSR, "B": F.Structured(2, 4)})
    assert "'writer': 3" in text
    assert "if emit == 2:" in text and "B_lvl2_crd[" in text


def test_golden_conversion_kernel(request):
    """``golden/convert_csr_structured24.py``; refresh with ``pytest tests/codegen --update-golden``."""
    text = emitted(COPY, {"A": F.CSR, "B": F.Structured(2, 4)})
    path = GOLDEN / "convert_csr_structured24.py"
    if request.config.getoption("--update-golden"):
        path.write_text(text)
    assert path.exists(), f"missing {path}; run pytest tests/codegen --update-golden"
    assert text == path.read_text(), "emitted source changed; review and run --update-golden"


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5])
def test_every_block_pattern_is_placed_as_pack_places_it(m):
    """One block per row, every pattern of at most n nonzeros of m, every n >= 1: the kernel's
    placement (collected coordinates moved up, padding below and between them) is pack's."""
    for n in range(1, m + 1):
        patterns = [p for p in range(1 << m) if bin(p).count("1") <= n]
        x = np.array([[((p >> c) & 1) * (c + 1.0) for c in range(m)] for p in patterns])
        check_written(Tensor.from_dense(x, F.CSR), F.Structured(n, m), x)


def test_finalize_pads_blocks_no_entry_reached_and_is_idempotent():
    level = Structured(n=3, m=5)
    crd = np.array([0, 0, 0, 1, 2, 4, 0, 0, 0, 0, 3, 4], dtype=np.int32)  # empty, placed, empty, placed
    placed = level.finalize({"crd": crd.copy()}, 4, 12)["crd"]
    assert placed.tolist() == [0, 1, 2, 1, 2, 4, 0, 1, 2, 0, 3, 4]
    assert level.finalize({"crd": placed.copy()}, 4, 12)["crd"].tolist() == placed.tolist()


@st.composite
def structured_targets(draw):
    """A 2-D or 3-D n:m format, its dense levels in a random order (orders the walk cannot write
    fall back), and a shape."""
    rank = draw(st.integers(2, 3))
    m = draw(st.integers(1, 8))
    n = draw(st.integers(0, m))
    dims = [f"d{k}" for k in range(rank)]
    w = draw(st.sampled_from(dims))
    outer = draw(st.permutations([d for d in dims if d != w] + [f"{w} floordiv {m}"]))
    levels = [f"{e} : dense" for e in outer] + [f"{w} mod {m} : structured[{n}, {m}]"]
    fmt = TensorFormat.parse(f"({', '.join(dims)}) -> ({', '.join(levels)})")
    shape = tuple(draw(st.lists(st.integers(0, 9), min_size=rank, max_size=rank)))
    return fmt, shape


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(target=structured_targets(), density=st.sampled_from([0.0, 0.3, 0.7, 1.0]),
       dtype=st.sampled_from([np.float64, np.float32, np.int32]), seed=st.integers(0, 2**16),
       source=st.sampled_from(["COO", "Dense", "CSR"]))
def test_random_n_m_patterns_equal_the_oracle(target, density, dtype, seed, source):
    dst, shape = target
    src = {"COO": F.COO(len(shape)), "Dense": F.Dense(len(shape)), "CSR": F.CSR if len(shape) == 2 else F.CSF(3)}[source]
    x = fitted(rand_dense(shape, dtype, density, seed=seed), dst)
    a = Tensor.from_dense(x, src)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ustc.ConversionWarning)
        got = generated.written(a, dst)
    indices = generated.copy_program(len(shape)).statements[0].lhs.indices
    if generated.writable(dst) and (source == "Dense" or output_order(dst, indices) == indices):
        assert got is not None   # the walk the target asks for is the source's own
    if got is not None:
        assert_same_storage(got, oracle(a, dst))
        got.validate()
    np.testing.assert_array_equal(a.convert(dst).to_dense(), x)


def test_the_plan_names_the_writer():
    """The compiled conversion's plan says which kernel writes the output (3 passes)."""
    a = Tensor.from_dense(fitted(rand_dense((4, 8), seed=1), F.Structured(2, 4)), F.CSR)
    run = runtime.prepare(generated.copy_program(2), {"B": F.Structured(2, 4), "A": a}, "cpu")
    module, _ = cache.load(run.fields, run.generate)
    (plan,) = plans_of(module)
    assert plan.writer == 3 and plan.sparse_output and plan.split   # chunks of rows in parallel
