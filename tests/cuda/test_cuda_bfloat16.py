"""bfloat16 on the cuda target as the loop IR and the emitted source state it (``codegen.cuda_bfloat16``).

Kernels run in ``matrix.py`` (simulator, warp model, sm_90 cubins: ``test_simulator.py``,
``test_warp_model.py``, ``test_ptx.py``); this file checks, in process, that every read of a
bfloat16 array widens it, every write rounds it and none is atomic, and what the emitter writes.
"""

from __future__ import annotations

import warnings

import ml_dtypes  # noqa: F401 - registers the "bfloat16" dtype name with NumPy
import pytest

import ustc
from ustc.codegen import cuda_bfloat16 as bf
from ustc.codegen import loopir as ir
from ustc.codegen import optimize
from ustc.codegen.compile import Operand, compile_program
from ustc.codegen.cuda_schedule import choose_schedule, mapping
from ustc.codegen.emit_cuda import CudaEmitter
from ustc.codegen.plans import StatementPlan
from ustc.codegen.roles import Kind, Role
from ustc.ops import library

F = ustc.formats


def module(text: str, formats: dict, dtypes: dict):
    """The CUDA loop IR of ``text`` with each tensor's dtype from ``dtypes`` (default float32),
    bfloat16 made explicit."""
    program = library.parse_program(text)
    operands = {}
    for st in program.statements:
        for access in [st.lhs, *st.rhs.accesses()]:
            operands[access.tensor] = Operand(access.tensor, formats.get(access.tensor), len(access.indices),
                                              dtypes.get(access.tensor, "float32"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ustc.ConversionWarning)
        compiled = compile_program(program, operands, ("test",), optimize.CUDA)
    return bf.explicit(compiled, frozenset(t for t, d in dtypes.items() if d == "bfloat16"))


def loads(fn: ir.Function):
    """``(load, widened)`` for every load in ``fn``."""
    out = []

    def visit(e, widened):
        if isinstance(e, ir.Load):
            out.append((e, widened))
        for child in ir.children(e):
            visit(child, isinstance(e, ir.Call) and e.fn == bf.WIDEN)

    for s in ir.walk(fn.body):
        for e in ir.children(s):
            visit(e, False)
    return out


def stores(fn: ir.Function, array: str):
    return [s for s in ir.walk(fn.body) if isinstance(s, ir.Store) and s.array == array]


@pytest.mark.parametrize("fmt", [F.CSR, F.CSC, F.COO(2), F.BSR(2, 2), F.DELTA(4, True)],
                         ids=["csr", "csc", "coo", "bsr", "delta"])
def test_spmv_reads_every_bfloat16_value_widened_and_rounds_every_store(fmt):
    fn = module("y[i] = A[i,j] * x[j]", {"A": fmt}, {"A": "bfloat16", "x": "bfloat16", "y": "bfloat16"}).functions[0]
    narrow = bf.arrays(fn, frozenset("Axy"))
    assert narrow == {p.name for p in fn.params if p.role.kind in (Kind.VALS, Kind.ARRAY)}
    seen = loads(fn)
    assert {load.array for load, _ in seen} >= narrow
    assert all(widened for load, widened in seen if load.array in narrow)
    assert not any(widened for load, widened in seen if load.array not in narrow)   # coordinates stay integers
    (y,) = [p.name for p in fn.params if p.role == Role(Kind.ARRAY, "y")]
    assert stores(fn, y) and all(isinstance(s.value, ir.Call) and s.value.fn == bf.ROUND and not s.accumulate
                                 and not s.atomic for s in stores(fn, y))
    assert not mapping(fn).atomic        # no thread folds into a bfloat16 element another one writes


def test_a_bfloat16_output_of_float32_operands_only_rounds():
    fn = module("y[i] = A[i,j] * x[j]", {"A": F.CSR}, {"y": "bfloat16"}).functions[0]
    assert bf.bfloat16_arrays(fn) == {"y"}
    assert all(isinstance(s.value, ir.Call) and s.value.fn == bf.ROUND for s in stores(fn, "y"))
    assert not any(widened for load, widened in loads(fn) if load.array != "y")


def test_other_dtypes_are_left_alone():
    compiled = module("y[i] = A[i,j] * x[j]", {"A": F.CSC}, {"A": "float16"})
    assert bf.explicit(compiled, frozenset()) is compiled
    assert not bf.bfloat16_arrays(compiled.functions[0])
    text = CudaEmitter().emit(compiled)
    assert "int_as_float" not in text and ".view(np.uint16)" not in text


def test_the_emitter_views_bits_and_casts_them_once_per_access():
    compiled = module("y[i] = A[i,j] * x[j]", {"A": F.CSC}, {"A": "bfloat16", "x": "bfloat16", "y": "bfloat16"})
    fn = compiled.functions[0]
    text = CudaEmitter().emit(compiled, {fn.name: choose_schedule(fn)})
    assert "from numba.cuda.libdevice import float_as_int, int_as_float" in text
    launch = text[text.index("def launch_"):]
    for name in bf.bfloat16_arrays(fn):
        assert f"{name} = {name}.view(np.uint16)" in launch
    assert "cuda.atomic" not in text                       # CSC's conflicting rows: one thread, no atomics
    kernel = text[text.index("@cuda.jit"):text.index("def launch_")]
    assert kernel.count("int_as_float(") == 3               # A's value, x's and y's old value
    assert kernel.count("float_as_int(") == 1 and "0x7FFF" in kernel


def test_an_epilog_pass_over_a_bfloat16_output_widens_and_rounds_it():
    main = ir.Function("kernel_0", (ir.Param("C", Role(Kind.ARRAY, "C")), ir.Param("n", Role.of(Kind.EXTENT, "i"))),
                       (ir.For("i", ir.Const(0), ir.Var("n"),
                               (ir.Store("C", (ir.Index(ir.Var("i")),), ir.Const(1.0), accumulate=True),)),))
    at = (ir.Index(ir.Var("e")),)
    epilog = ir.Function("kernel_0_epilog", (ir.Param("vals", Role(Kind.OUT_FLAT)),),
                         (ir.For("e", ir.Const(0), ir.Call("len", (ir.Var("vals"),)),
                                 (ir.Store("vals", at, ir.Call("h", (ir.Load("vals", at),))),)),))
    plan = StatementPlan("kernel_0", (Role(Kind.ARRAY, "C"), Role.of(Kind.EXTENT, "i")), epilog="kernel_0_epilog")
    done = bf.explicit(ir.Module(("test",), (main, epilog), meta={"plan": [plan]}), frozenset({"C"}))
    assert {fn.name: bf.bfloat16_arrays(fn) for fn in done.functions} == {"kernel_0": {"C"},
                                                                           "kernel_0_epilog": {"vals"}}
    (store,) = stores(done.functions[1], "vals")
    assert store.value == ir.Call(bf.ROUND, (ir.Call("h", (ir.Call(bf.WIDEN, (ir.Load("vals", at),)),)),))
    (fold,) = stores(done.functions[0], "C")    # y += v becomes y = round(widen(y) + v)
    assert fold.value.args[0] == ir.Bin("+", ir.Call(bf.WIDEN, (ir.Load("C", (ir.Index(ir.Var("i")),)),)),
                                        ir.Const(1.0))
