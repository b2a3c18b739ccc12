"""How a sparse output is written: one appending pass where a capacity is known (serial kernels,
element-wise statements), count-then-fill otherwise, and a recount when a capacity was short."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from op_helpers import NAMED_2D, assert_matches, named_params, sparse
from ustc import Tensor
from ustc import formats as F
from ustc.codegen import notation as nt
from ustc.codegen.lower import APPEND, COUNT, FILL
from ustc.format import expr as fx
from ustc.ops.convert import writable
from ustc.ops import runtime

FORMATS = named_params(NAMED_2D)


@pytest.fixture
def passes(monkeypatch):
    """The ``emit`` mode of every generated-kernel call with a sparse output."""
    modes = []
    original = runtime.Run._arguments

    def recording(self, plan, views, out):
        if "emit" in out:
            modes.append(out["emit"])
        return original(self, plan, views, out)

    monkeypatch.setattr(runtime.Run, "_arguments", recording)
    return modes


def _pair(fmt, shape=(9, 7), seed=0):
    return sparse(fmt, shape, seed=seed), sparse(fmt, shape, seed=seed + 1)


@pytest.mark.parametrize("fmt", named_params({n: f for n, f in NAMED_2D.items() if not f.all_dense}))
def test_small_element_wise_output_passes(fmt, passes):
    """Compressed rows (CSR, CSC) take one appending pass; a format of one plain index per level
    that the kernel writes (codegen.writer) counts, then fills, each operator exactly twice. (Block
    and diagonal operands are walked by block and diagonal, so the output indices are derived
    and their outputs are assembled. All-dense formats are dense operands: NumPy computes them.)"""
    A, B = _pair(fmt, seed=3)
    ops = 0
    for op, expected in ((A + B, A.to_dense() + B.to_dense()), (A * B, A.to_dense() * B.to_dense()),
                         (A * 2.5, 2.5 * A.to_dense()), (-A, -A.to_dense())):
        assert isinstance(op, Tensor)
        op.validate()
        assert_matches(op, expected)
        ops += 1
    plain = all(isinstance(lv.expr, fx.Dimension) for lv in fmt.levels)
    if _walks_split_index(fmt) and writable(fmt):
        # n:m: the floordiv / mod levels walk j in order (codegen.writer.walked_indices), so the writer
        # writes the pattern-keeping operators, its collecting level in three passes (count, fill,
        # write); A + B leaves the n:m pattern and appends its result in one pass
        assert passes == [APPEND] + [COUNT, FILL, APPEND] * (ops - 1)
    elif not (plain and writable(fmt)) or fmt.compressed_rows:
        assert passes and set(passes) <= {APPEND, FILL} and COUNT not in passes
    else:
        assert passes == [COUNT, FILL] * ops


def _walks_split_index(fmt) -> bool:
    """Some index is stored as ``d floordiv m`` then, next, ``d mod m`` (an n:m format), every other
    level a plain index."""
    exprs = [lv.expr for lv in fmt.levels]
    pairs = [k for k in range(len(exprs) - 1) if isinstance(exprs[k], fx.FloorDiv) and isinstance(exprs[k + 1], fx.Mod)
             and exprs[k].operand == exprs[k + 1].operand and exprs[k].constant == exprs[k + 1].constant]
    rest = [e for k, e in enumerate(exprs) if not any(k in (p, p + 1) for p in pairs)]
    return bool(pairs) and all(isinstance(e, fx.Dimension) for e in rest)


def test_a_product_with_a_sum_over_an_index_counts_first(passes):
    A, B = sparse(F.CSR, (6, 5), seed=1), sparse(F.CSR, (5, 4), seed=2)
    C = ustc.einsum("ik,kj->ij", A, B, out_format=F.CSR)
    assert_matches(C, A.to_dense() @ B.to_dense())
    assert passes[:2] == [COUNT, FILL]


def test_a_short_capacity_is_detected_and_recounted(monkeypatch, passes):
    """The kernels write only below the arrays' length and keep counting, so a wrong bound
    costs a recount, never memory beyond the arrays."""
    monkeypatch.setattr(runtime, "output_bound", lambda statement, operands, extents: 3)
    A, B = _pair(F.CSR, (40, 30), seed=5)
    B = B.convert(F.DCSR)  # CSR + CSR takes the merge kernels (fastpaths.merge); CSR + DCSR the generated one
    C = A + B
    C.validate()
    assert_matches(C, A.to_dense() + B.to_dense())
    assert passes[0] in (APPEND, FILL) and passes[1:] == [COUNT, FILL] and C.nse > 3  # one pass, then recount


def test_a_result_much_smaller_than_its_capacity_is_copied_out():
    """An intersection of two 40%-dense patterns fills ~16% of its min(nse) capacity: the
    result's arrays are copied out rather than viewing (and holding) the capacity arrays."""
    A, B = sparse(F.CSR, (60, 50), seed=7), sparse(F.CSR, (60, 50), seed=8)
    C = A * B
    assert_matches(C, A.to_dense() * B.to_dense())
    assert 0 < C.nse < min(A.nse, B.nse) // 2
    for array in (C.values, C.crd(1)):
        assert array.base is None or array.base.size < 2 * C.nse


def test_output_bound():
    def access(name, *idx):
        return nt.Access(name, tuple(idx))

    A, B = sparse(F.CSR, (6, 5), seed=1), sparse(F.COO(), (6, 5), seed=2)
    x = sparse(F.CSF(1), (5,), seed=3)
    operands = {"A": A, "B": B, "x": x, "d": np.ones(5)}
    extents = {"i": 6, "j": 5, "k": 5}
    C = access("C", "i", "j")

    def bound(rhs, lhs=C):
        return runtime.output_bound(nt.Statement(lhs, rhs), operands, extents)

    assert bound(nt.Add(access("A", "i", "j"), access("B", "i", "j"))) == min(30, A.nse + B.nse)
    assert bound(nt.Mul(access("A", "i", "j"), access("B", "i", "j"))) == min(A.nse, B.nse)
    assert bound(nt.Mul(access("A", "i", "j"), access("d", "j"))) == A.nse
    assert bound(nt.Mul(access("A", "i", "j"), access("x", "j"))) == min(A.nse, 6 * x.nse)
    assert bound(nt.Neg(access("A", "j", "i")), access("C", "j", "i")) == A.nse
    assert bound(nt.Add(access("A", "i", "j"), nt.Literal(1))) == 30
    assert bound(nt.Mul(access("A", "i", "k"), access("B", "k", "j"))) is None  # k is summed


@pytest.mark.parametrize("src, dst", [(F.CSR, F.CSC), (F.CSC, F.CSR)], ids=["csr_to_csc", "csc_to_csr"])
def test_a_copy_into_compressed_rows_of_the_other_order_is_a_counting_transpose(src, dst, monkeypatch):
    """The kernel walks the source in its order; the host builds the target by one histogram and a
    counting transpose, never the generic sort."""
    from ustc.tensor import sort

    A = sparse(src, (40, 30), seed=9)
    expected = Tensor.from_dense(A.to_dense(), dst)
    monkeypatch.setattr(sort, "sort_entries", lambda *a, **k: pytest.fail("sorted on the host"))
    C = ustc.einsum("ij->ij", A, out_format=dst)
    C.validate()
    for key, buf in expected.buffers.items():
        np.testing.assert_array_equal(C.buffers[key], buf)
    np.testing.assert_array_equal(C.values, expected.values)
