"""The writer's chunks in parallel (``codegen.writer``: a *split* kernel). COO, DCSR, CSF, block,
delta and batched outputs whose first level pins the walk's outer index are written by several
chunks at once, each starting where the chunks before it ended; every result is checked buffer
for buffer against the NumPy pack oracle, on the edge cases that move chunk borders: empty and
all-zero tensors, 1 x n and n x 1, one heavy row, duplicates in a COO source, 3-D and batched.

The host runs the parallel kernel here at any size (``runtime.SERIAL_WORK`` 0) with several
chunks per thread (``written.CHUNKS_PER_THREAD``), so tiny tensors cross chunk borders too."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, reject, settings
from hypothesis import strategies as st

from strategies import examples, formats
from ustc import Tensor
from ustc.codegen.plans import StatementPlan, plans_of
from ustc import formats as F
from ustc.errors import StorageError
from ustc.ops import convert as generated
from ustc.ops import runtime
from ustc.ops import written as written_host
from ustc.tensor.tensor import as_format

from fitting import structured_fit
from fresh_peak import fresh_peak, random_dense_source
from test_convert import rand_dense
from storage_oracle import assert_same_storage, oracle

REGISTRY = {nf.name: nf.format() for nf in F.NAMED}


@pytest.fixture(autouse=True)
def parallel_everywhere(monkeypatch):
    """The prange kernel at every size, five chunks per thread."""
    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)
    monkeypatch.setattr(written_host, "CHUNKS_PER_THREAD", 5)


def plan_of(a: Tensor, fmt) -> StatementPlan:
    """The plan of the conversion kernel ``B[...] = A[...]`` for ``a`` into ``fmt``."""
    run = runtime.prepare(generated.copy_program(a.ndim), {"B": as_format(fmt), "A": a}, "cpu")
    module, _ = run.load()
    return plans_of(module)[0]


def check(a: Tensor, fmt, split: bool | None = True) -> Tensor:
    """``a`` written into ``fmt`` by the generated kernel equals the oracle; ``split``: whether the
    kernel must be (True) or must not be (False) a split one (None: either)."""
    fmt = as_format(fmt)
    got = generated.written(a, fmt)
    assert got is not None
    assert_same_storage(got, oracle(a, fmt))
    if split is not None:
        assert plan_of(a, fmt).split == split
    return got


SPLIT_2D = ["COO", "DCSR", "BSR", "DELTA", "CROW", "DCSC", "CCOL", "BSC"]
# Every target takes the row walk of CSR and CSC (the one in the other order transposed first).
# The COO walk (deduplicated runs) and the unique-positions walk (DCSR / DCSC) write one target
# of each kind of level the writer splits differently: a singleton leaf (COO), blocks whose
# borders move to block-row starts (BSR), a delta leaf (DELTA), compressed under compressed in
# column order (DCSC). The other targets repeat those levels: DCSR is DCSC's in row order, CROW
# and CCOL a dense leaf under a compressed level as BSR, BSC is BSR column-major. (One kernel
# per source walk and target: 24 -> 16 compiles.)
WALKED_BY_EVERY_SOURCE = ("COO", "BSR", "DELTA", "DCSC")
SHAPES = [(0, 0), (0, 7), (7, 0), (1, 13), (13, 1), (9, 11), (16, 4)]


def heavy_row(shape, seed=0) -> np.ndarray:
    """Every entry of one row, a few elsewhere."""
    x = rand_dense(shape, np.float64, 0.05, seed=seed)
    if shape[0] and shape[1]:
        x[shape[0] // 2] = np.arange(1, shape[1] + 1)
    return x


@pytest.mark.parametrize("name", SPLIT_2D)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("contents", ["random", "zero", "heavy"])
def test_registry_targets_are_written_in_chunks_as_the_oracle(name, shape, contents):
    x = {"random": lambda: rand_dense(shape, np.float64, 0.3, seed=sum(shape)),
         "zero": lambda: np.zeros(shape),
         "heavy": lambda: heavy_row(shape)}[contents]()
    dst = REGISTRY[name]
    column_major = name in ("DCSC", "CCOL", "BSC")
    sources = (F.CSR, F.CSC)
    if name in WALKED_BY_EVERY_SOURCE:
        sources += (F.COO(2), F.DCSC if column_major else F.DCSR)
    for src in sources:
        a = Tensor.from_dense(x, src)
        got = check(a, dst)  # a source walked in the other order is transposed first (CSR <-> CSC)
        np.testing.assert_array_equal(got.to_dense(), x)


def test_which_kernels_split():
    """Chunks where the first level pins the outer loop and every level can be written in pieces;
    serial for diagonals (every row meets the root's coordinates), bit-packed delta (chunks share
    words) and the row kernel's compressed rows (not written by the writer)."""
    a = Tensor.from_dense(rand_dense((6, 8), np.float64, 0.4, seed=1), F.CSR)
    for name in SPLIT_2D:
        assert plan_of(a, REGISTRY[name]).split, name
    for fmt in ("DIAI", "DIAJ", "SkewDIAI", F.DELTA(4, True)):
        assert not plan_of(a, fmt).split, fmt
    assert not plan_of(a, "CSR").writer


@pytest.mark.parametrize("fmt, split", [
    ("(i) -> (i : delta(2))", False),                          # a root delta's gaps cross chunk borders
    ("(i, j) -> (i : delta(3), j : compressed)", False),
    ("(i, j) -> (i : compressed, j : delta(2))", True),        # below its own rows: chunks
    ("(i) -> (i : compressed)", True),
])
def test_delta_levels_split_only_under_their_own_parents(fmt, split):
    fmt = as_format(fmt)
    shape = (50,) if fmt.ndim == 1 else (23, 40)
    x = rand_dense(shape, np.float64, 0.2, seed=14)
    a = Tensor.from_dense(x, F.CSR if fmt.ndim == 2 else "(i) -> (i : compressed)")
    check(a, fmt, split=split)
    check(Tensor.from_dense(x, F.COO(2) if fmt.ndim == 2 else "(i) -> (i : compressed(nonunique))"), fmt, split=split)


def test_duplicates_of_a_coo_source_in_chunks():
    """Repeated coordinates (one pair summing to zero) and an explicit zero, with chunk borders
    inside runs of a row: the runs move the borders, each row is one chunk's."""
    rows = np.array([0, 0, 0, 1, 1, 3, 3, 3, 3, 4, 6, 6])
    cols = np.array([3, 3, 5, 0, 2, 1, 1, 4, 4, 4, 0, 0])
    vals = np.array([1.0, 2.0, 3.0, 5.0, 0.0, 4.0, -4.0, 1.0, 1.0, 7.0, 2.0, 2.0])
    fmt = "(i, j) -> (i : compressed(nonunique), j : singleton(nonunique))"
    a = Tensor(fmt, (8, 6), {(0, "pos"): np.array([0, len(vals)]), (0, "crd"): rows, (1, "crd"): cols}, vals)
    dense = np.zeros((8, 6))
    np.add.at(dense, (rows, cols), vals)
    for dst in ("COO", "DCSR", "BSR(2, 2)", "BSR(4, 3)", "DELTA"):
        got = check(a, as_format(dst) if dst in ("BSR(2, 2)", "BSR(4, 3)") else REGISTRY[dst])
        np.testing.assert_array_equal(got.to_dense(), dense)


@pytest.mark.parametrize("shape", [(0, 3, 4), (1, 1, 9), (3, 4, 5), (6, 1, 2)], ids=str)
def test_three_dimensional_and_batched_outputs(shape):
    x = rand_dense(shape, np.float64, 0.3, seed=3)
    targets = [F.COO(3), F.CSF(3), REGISTRY["BatchedCSR"],
               "(i, j, k) -> (i : batch, j : compressed(nonunique), k : singleton)",
               "(i, j, k) -> (i : dense, j floordiv 2 : dense, k : compressed, j mod 2 : dense)",
               "(i, j, k) -> (i floordiv 2 : compressed, j : compressed, i mod 2 : dense, k : dense)"]
    sources = (F.COO(3), F.CSF(3), F.Dense(3))  # the deduplicated, the positions' and the dense walk
    # each target from one walk in turn (never its own format), each walk into two targets: the
    # 2-D registry test above crosses every walk with every kind of target level
    for k, dst in enumerate(targets):
        a = Tensor.from_dense(x, sources[(k + 1) % len(sources)])
        got = check(a, dst)
        assert_same_storage(got, oracle(a, dst))


def test_a_heavy_row_in_a_large_matrix_through_convert(monkeypatch):
    """``Tensor.convert``, the user path, from compile size: one row holding most entries."""
    monkeypatch.setattr(generated, "COMPILE_FROM", 1)
    x = heavy_row((400, 300), seed=4)
    a = Tensor.from_dense(x, F.CSR)
    for name in ("COO", "DCSR", "BSR", "DELTA"):
        got = a.convert(REGISTRY[name])
        assert_same_storage(got, oracle(a, REGISTRY[name]))


@settings(max_examples=examples(20), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(src=formats(max_rank=3, allow_structured=False), dst=formats(max_rank=3, allow_structured=False),
       data=st.data())
def test_random_formats_split_or_not_equal_the_oracle(src, dst, data):
    assume(src.ndim == dst.ndim and generated.writable(dst))
    shape = tuple(data.draw(st.lists(st.integers(0, 7), min_size=src.ndim, max_size=src.ndim), label="shape"))
    kind = data.draw(st.sampled_from(["random", "zero", "heavy"]), label="contents")
    x = rand_dense(shape, np.float64, 0.3, seed=len(shape)) if kind != "zero" else np.zeros(shape)
    if kind == "heavy" and x.size:
        x.reshape(shape[0], -1)[0] = 1.0
    try:
        a = Tensor.from_dense(x, src)
        want = oracle(a, dst)
    except StorageError:
        reject()
    got = generated.written(a, dst)
    if got is not None:
        assert_same_storage(got, want)
        np.testing.assert_array_equal(got.to_dense(), x)


def test_the_count_table_has_a_row_per_chunk(monkeypatch):
    """The host sizes the table (threads x chunks per thread); the kernel runs at most that many
    chunks and at most one per outer iteration."""
    seen = []
    original = written_host.run

    def spy(fmt, shape, dtype, plan, call):
        def wrapped(state):
            seen.append(state["counts"].shape)
            return call(state)
        return original(fmt, shape, dtype, plan, wrapped)

    monkeypatch.setattr(written_host, "run", spy)
    a = Tensor.from_dense(rand_dense((5, 7), np.float64, 0.5, seed=2), F.CSR)
    check(a, REGISTRY["COO"])
    import numba

    assert seen and all(s == (numba.get_num_threads() * 5, 2) for s in seen)


@pytest.mark.parametrize("name", [n for n, f in REGISTRY.items() if f.ndim == 2 and generated.writable(f)
                                  and n not in ("Dense", "CSR", "CSC")])
def test_dense_sources_through_convert(name, monkeypatch):
    """A dense source at compile size: appended targets walk the array itself, three-pass targets
    (block, diagonal through a workspace; n:m) a 16-bit CSR selected first; both as the oracle."""
    monkeypatch.setattr(generated, "COMPILE_FROM", 1)
    x = structured_fit(rand_dense((37, 29), np.float32, 0.3, seed=11), REGISTRY[name])
    a = Tensor.from_dense(x, F.Dense(2))
    got = a.convert(REGISTRY[name])
    assert_same_storage(got, oracle(Tensor.from_dense(x, F.COO(2)), REGISTRY[name]))
    staged = generated.staged_rows(a.format, a.shape, REGISTRY[name])
    assert (staged is not None) == (name in ("BSR", "BSC", "DIAI", "DIAJ", "SkewDIAI", "SkewDIAJ", "Structured"))
    assert staged is None or staged.crd_width == 16


@pytest.mark.parametrize("name", ["DCSR", "COO", "BSR"])
def test_dense_sources_keep_little_beside_the_output(name):
    """Peak traced memory of a dense source's conversion beyond the output: nothing for appended
    targets; for block targets the 16-bit staging CSR (2-byte coordinates, float32 values) and
    the per-thread workspaces."""
    setup = (random_dense_source((3000, 2000), "float32", 0.05, seed=12)
             + "from ustc import formats as F\nimport numba\n"
             + f"target = {{nf.name: nf.format() for nf in F.NAMED}}[{name!r}]\n"
             + "a = Tensor.from_package(x)\na.convert(target)\n")
    beside = "0" if name != "BSR" else \
        "np.count_nonzero(x) * 6 + 4 * (x.shape[0] + 1) + numba.get_num_threads() * 8 * (x.shape[1] // 2)"
    got = fresh_peak(setup, "a.convert(target)", beside)
    assert got["peak"] <= got["nbytes"] + got["allowed"] + 64 * 1024, got
