"""Workspace levels below a parent (BSR / BSC block columns) written in two passes: each
block column appended the first time its block row meets it, values written in meeting order,
and the block row's segment sorted with its values once complete (``workspace_append`` /
``workspace_close``). These cases reach what the registry tests do not: block rows longer than
the insertion sort's 32 (the library sort and long permutation cycles), meeting orders far
from sorted, and the one-thread writer of a reduction, whose workspace the host passes in and
the kernel clears between passes. Each is checked against the pack oracle or a dense product."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ustc
from strategies import examples
from ustc import Tensor
from ustc import formats as F
from ustc.codegen.writer import write_passes, own_walk_strategies
from ustc.ops import convert as generated
from ustc.tensor.tensor import as_format

from storage_oracle import assert_same_storage, oracle
from test_convert import rand_dense


def interleaved(shape: tuple[int, int], bn: int, seed: int) -> np.ndarray:
    """Rows of each pair on alternate block columns (row 0 on even ones, row 1 on odd ones), so a
    row walk meets a block row's columns as [0, 2, 4, ..., 1, 3, 5, ...]; other rows random."""
    x = rand_dense(shape, np.float64, 0.4, seed=seed)
    blocks = np.arange(shape[1]) // bn
    x[0::2, blocks % 2 == 1] = 0
    x[1::2, blocks % 2 == 0] = 0
    x[0::2][:, blocks % 2 == 0] += 1.0   # every even block column of an even row holds a value
    return x


def test_block_targets_take_two_passes_and_diagonals_three():
    def passes(fmt):
        fmt = as_format(fmt)
        return write_passes(fmt, own_walk_strategies(fmt, ("i0", "i1")))

    assert passes("BSR(2, 2)") == 2 and passes("BSC(2, 3)") == 2
    assert passes("DIAI") == 3   # one parent meets every diagonal: the collecting pass stays


@pytest.mark.parametrize("source", [F.CSR, F.COO(2)], ids=["CSR", "COO"])
def test_long_block_rows_met_out_of_order(source):
    x = interleaved((6, 301), 2, seed=5)     # ~75 block columns a block row, a ragged last one
    x[4, 7] = 0.0
    a = Tensor.from_dense(x, source)
    a.values[a.values == a.values.max()] = 0.0   # an explicit zero, dropped by the writer
    for dst in ("BSR(2, 2)", "BSR(2, 3)"):
        got = generated.written(a, as_format(dst))
        assert got is not None
        assert_same_storage(got, oracle(a, dst))


def test_one_thread_writer_of_a_reduction_clears_its_workspace_between_passes():
    """``ik,kj->ij`` into BSR: no chunks (a reduction workspace is open), the block columns'
    workspace comes from the host; the counting pass leaves positions in it that the filling
    pass must not read as block columns already met (block columns recur in many block rows)."""
    x = interleaved((8, 70), 2, seed=1)
    y = np.eye(70) + np.diag(np.full(69, 0.5), 1)
    A, B = Tensor.from_dense(x, F.CSR), Tensor.from_dense(y, F.CSR)
    C = ustc.einsum("ik,kj->ij", A, B, out_format="BSR(2, 2)")
    assert C.format == as_format("BSR(2, 2)")
    np.testing.assert_allclose(C.to_dense(), x @ y)
    assert_same_storage(C, oracle(Tensor.from_dense(x @ y, F.CSR), "BSR(2, 2)"))


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_wide_block_rows_equal_the_oracle(data):
    rows, cols = data.draw(st.integers(0, 7), label="rows"), data.draw(st.integers(0, 150), label="cols")
    density = data.draw(st.sampled_from([0.05, 0.3, 0.9]), label="density")
    x = rand_dense((rows, cols), np.float64, density, seed=rows * 151 + cols)
    if data.draw(st.booleans(), label="interleaved") and rows and cols:
        x = interleaved((rows, cols), 2, seed=cols)
    dst = data.draw(st.sampled_from(["BSR(2, 2)", "BSR(2, 3)"]), label="target")
    a = Tensor.from_dense(x, data.draw(st.sampled_from([F.CSR, F.COO(2)]), label="source"))
    got = generated.written(a, as_format(dst))
    assert_same_storage(got, oracle(a, dst))
    np.testing.assert_array_equal(got.to_dense(), x)
