"""``optimize.overwrite_stores``: an output stored once per element by loops over its whole
index space is assigned, not accumulated, and the host skips zero-filling it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc.codegen import loopir as ir
from ustc.codegen import optimize
from ustc.codegen.compile import Operand, compile_program
from ustc.ops import library, runtime

F = ustc.formats


def plan_of(text: str, formats: dict, tuning=optimize.CPU):
    program = library.parse_program(text)
    st = program.statements[0]
    operands = {a.tensor: Operand(a.tensor, formats.get(a.tensor), len(a.indices), "float64")
                for a in [st.lhs, *st.rhs.accesses()]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ustc.ConversionWarning)
        return compile_program(program, operands, ("test",), tuning).meta["plan"][0]


@pytest.mark.parametrize("text, formats, expected", [
    ("y[i] = A[i,j] * x[j]", {"A": F.CSR}, True),           # every row stored once
    ("s[i] = A[i,j]", {"A": F.CSR}, True),
    ("y[i] = A[i,j] * x[j]", {"A": F.DCSR}, False),         # only rows that hold entries
    ("y[i] = A[i,j] * x[j]", {"A": F.CSC}, False),          # rows gathered column by column
    ("y[i] = A[i,j] * x[j]", {"A": F.DIAI}, False),         # every diagonal adds into y[i]
    ("C[i,k] = A[i,j] * B[j,k]", {"A": F.CSR}, False),      # C[i, k] added once per entry
    ("y[i] += A[i,j] * x[j]", {"A": F.CSR}, False),         # += keeps what y holds
    ("y[i] = A[i,j] * y[j]", {"A": F.CSR}, False),          # reads its own output
    ("C[i,j] = A[i,j] * B[i,j]", {}, True),                 # dense loops over both indices
])
def test_which_kernels_overwrite(text, formats, expected):
    assert plan_of(text, formats).overwrites is expected


def test_gpu_kernels_keep_accumulating_stores():
    assert plan_of("y[i] = A[i,j] * x[j]", {"A": F.CSR}, optimize.CUDA).overwrites is False


def test_a_store_under_a_condition_is_left_alone():
    store = ir.Store("y", (ir.Index(ir.Var("i")),), ir.Var("acc"), accumulate=True)
    guarded = [ir.For("i", ir.Const(0), ir.Var("n_i"), (ir.If(ir.Var("c"), (store,)),))]
    assert optimize.overwrite_stores(guarded, "y", ("i",), {"i": "n_i"}) == (guarded, False)
    partial = [ir.For("i", ir.Const(1), ir.Var("n_i"), (store,))]
    assert optimize.overwrite_stores(partial, "y", ("i",), {"i": "n_i"}) == (partial, False)
    body, done = optimize.overwrite_stores([ir.For("i", ir.Const(0), ir.Var("n_i"), (store,))], "y", ("i",),
                                           {"i": "n_i"})
    assert done and not body[0].body[0].accumulate


@pytest.mark.parametrize("fmt", [F.CSR, F.DCSR])
def test_stale_output_values_never_leak(fmt, rng=np.random.default_rng(3)):
    """The output buffer holds garbage before the call: overwritten or zero-filled, never added to."""
    a = sp.random(7, 5, density=0.4, format="lil", random_state=4)
    a[3, :] = 0  # an empty row: an overwriting kernel still stores 0 there
    a = a.tocsr()
    A = ustc.Tensor.from_package(sp.csr_array(a)).convert(tensor_format=fmt)
    x = rng.standard_normal(5)
    y = np.full(7, np.nan)
    runtime.execute(library.parse_program("y[i] = A[i,j] * x[j]"), {"A": A, "x": x, "y": y})
    np.testing.assert_allclose(y, a @ x)
    with ustc.Matmul(A, x) as mm:
        out = np.full(7, 1e300)
        np.testing.assert_allclose(mm.execute(out=out), a @ x)
        c = rng.standard_normal(7)
        expected = a @ x + 2 * c  # before the call: c is updated in place (nvmath-python's Matmul)
        np.testing.assert_allclose(ustc.matmul(A, x, c, beta=2.0), expected)
