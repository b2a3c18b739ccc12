"""An n:m output written by the generated kernel when the walk runs over the n:m operands' own
loops: ``A * B`` of two 2:4 matrices walks ``i``, ``j floordiv 4``, ``j mod 4`` (``j`` derived),
which ``writer.walked_indices`` reads as the walk of ``(i, j)``, so the 2:4 result is written in
its own format (no coordinate lists assembled on the host) and equals the pack oracle buffer for
buffer; so is a 2:4 -> 2:4 conversion. ``walked_indices`` merges only adjacent ``floordiv`` / ``mod`` loops: a block walk
(BSR's ``i floordiv 2, j floordiv 2, i mod 2, j mod 2``) is not the walk of ``(i, j)``."""

from __future__ import annotations

import numpy as np
import pytest

from storage_oracle import assert_same_storage, oracle
from ustc import Tensor
from ustc import formats as F
from ustc.codegen.space import Derived, LoopVar
from ustc.codegen.writer import walked_indices
from ustc.codegen import loopir as ir
from ustc.format import expr as fx
from ustc.ops import convert as generated
from ustc.ops import runtime


def _derived(name: str, outer: str, inner: str, c: int) -> Derived:
    return Derived(name, fx.Add(fx.Mul(c, fx.Dimension(outer)), fx.Dimension(inner)), 0)


def _loopvars(**moduli) -> dict:
    return {v: LoopVar(v, ir.Const(8), ir.Const(0), m) for v, m in moduli.items()}


def test_walked_indices_merges_adjacent_block_loops_only():
    nm = {"j": _derived("j", "jb", "jr", 4)}
    assert walked_indices(("i", "jb", "jr"), nm, _loopvars(i=0, jb=0, jr=4)) == ("i", "j")
    assert walked_indices(("jb", "i", "jr"), nm, _loopvars(i=0, jb=0, jr=4)) == ("jb", "i", "jr")
    bsr = {"i": _derived("i", "ib", "ir", 2), "j": _derived("j", "jb", "jr", 2)}
    lv = _loopvars(ib=0, jb=0, ir=2, jr=2)
    assert walked_indices(("ib", "jb", "ir", "jr"), bsr, lv) == ("ib", "jb", "ir", "jr")
    assert walked_indices(("ib", "ir", "jb", "jr"), bsr, lv) == ("i", "j")
    assert walked_indices(("i", "jb", "jr"), nm, _loopvars(i=0, jb=0, jr=3)) == ("i", "jb", "jr")  # not [0, 4)


def _two_four(shape, seed: int, empty_rows: bool = False) -> np.ndarray:
    """A random matrix with at most 2 nonzeros, at random slots, in each block of 4 columns of a row."""
    rng = np.random.default_rng(seed)
    x = np.zeros(shape)
    for r in range(shape[0]):
        for b0 in range(0, shape[1], 4):
            slots = b0 + rng.permutation(4)[:2]
            slots = slots[slots < shape[1]]
            x[r, slots] = rng.integers(-4, 5, len(slots))
    if empty_rows:
        x[::2] = 0
    return x


@pytest.mark.parametrize("shape", [(0, 8), (1, 8), (6, 12), (9, 10), (16, 32)], ids=str)
def test_two_four_product_is_written_in_its_own_format(shape, monkeypatch):
    def no_lists(*args, **kwargs):
        raise AssertionError("A * B into 2:4 went through coordinate lists")

    monkeypatch.setattr(runtime, "assemble", no_lists)
    x, y = _two_four(shape, 1), _two_four(shape, 2, empty_rows=True)
    a, b = Tensor.from_dense(x, F.Structured(2, 4)), Tensor.from_dense(y, F.Structured(2, 4))
    saved = (a.values.copy(), b.values.copy())
    got = a * b
    assert got.format == F.Structured(2, 4)
    assert_same_storage(got, oracle(Tensor.from_dense(x * y, F.COO(2)), F.Structured(2, 4)))
    got.validate()
    np.testing.assert_array_equal(a.values, saved[0])
    np.testing.assert_array_equal(b.values, saved[1])


def test_two_four_source_converts_to_two_four_by_the_kernel():
    x = _two_four((7, 14), 3, empty_rows=True)
    a = Tensor.from_dense(x, F.Structured(2, 4))
    got = generated.written(a, F.Structured(2, 4))
    assert got is not None
    assert_same_storage(got, oracle(a, F.Structured(2, 4)))
