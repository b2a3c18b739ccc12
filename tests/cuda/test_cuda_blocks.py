"""Block shapes as compile-time constants on the cuda target (``codegen.cuda_blocks``) and block
rows read in vector loads (``cuda_schedule.block_row``): the sizes the format fixes, the
block row found in the loop IR, every alignment of the values in the lock-step warp model,
every block shape and dtype in the CUDA simulator (``blocks_cases.py``, a process of its
own), and 128-bit loads with zero spills in the sm_90 cubins."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ustc
from _programs import functions
from _spawn import failures, gpu_only, run_matrix
from ustc.codegen import cuda_blocks, cuda_loads, loopir as ir
from ustc.codegen.compile import Operand
from ustc.codegen.cuda_schedule import Schedule, block_row, choose_schedule, planned
from ustc.codegen.roles import Kind
from ustc.ops import cuda_host, library, runtime

cuda = pytest.importorskip("numba.cuda")
F = ustc.formats
SPMV = "y[i] = A[i,j] * x[j]"
CASES = Path(__file__).with_name("blocks_cases.py")


def _module(fmt, dtype="float64"):
    return functions(SPMV, {"A": fmt}, dtype)


def _operands(fmt, dtype="float64"):
    return {"A": Operand("A", fmt, 2, dtype), "x": Operand("x", None, 1, dtype), "y": Operand("y", None, 1, dtype)}


def _read(fn) -> set[str]:
    return {n for s in ir.walk(fn.body) for e in ir.children(s) for n in ir.variables(e)}


@pytest.mark.parametrize("fmt, fixed", [(F.BSR(2, 3), {("A", 2): 2, ("A", 3): 3}),
                                        (F.BSC(4, 1), {("A", 2): 4, ("A", 3): 1}),
                                        (F.Structured(2, 4), {("A", 2): 4}), (F.CSR, {}), (F.DIAI, {})])
def test_the_sizes_a_format_fixes_become_constants(fmt, fixed):
    module = _module(fmt)
    taken = {(p.role.tensor, p.role.level) for p in module.functions[0].params if p.role.kind is Kind.SIZE}
    found = cuda_host.fixed_sizes(module, _operands(fmt))
    assert found == {"kernel_0": {k: v for k, v in fixed.items() if k in taken}}
    special = cuda_blocks.constant_sizes(module, found)
    assert not _read(special.functions[0]) & {f"A_lvl{k}_size" for _, k in found["kernel_0"]}  # none read now
    assert (special is module) == (not found["kernel_0"])
    assert special.functions[0].params == module.functions[0].params       # the launch still passes them


def _special(fmt, dtype="float64"):
    module = _module(fmt, dtype)
    return cuda_blocks.constant_sizes(module, cuda_host.fixed_sizes(module, _operands(fmt, dtype))).functions[0]


def test_the_block_row_is_found_in_the_loop_ir():
    fn = _special(F.BSR(4, 4))
    schedule = choose_schedule(fn, lanes={("A", 2): 4, "i": 32, "j": 32})
    assert schedule.kind == "block_tile"
    found = block_row(fn, planned(fn, schedule))
    assert found.array == "A_vals" and found.length == 4 and found.row is not planned(fn, schedule).tile
    assert ir.variables(found.offset) == {"A_p2"}
    # run-time sizes (no constant stride), a CSR row, a dense SpMM loop: no block row
    plain = _module(F.BSR(4, 4)).functions[0]
    assert block_row(plain, planned(plain, schedule)) is None
    csr = _module(F.CSR).functions[0]
    assert block_row(csr, planned(csr, Schedule())) is None
    spmm = functions("C[i,k] = A[i,j] * B[j,k]", {"A": F.CSR}).functions[0]
    assert block_row(spmm, planned(spmm, Schedule())) is None


@pytest.mark.parametrize("shape, dtype, n", [((2, 2), "float64", 2), ((4, 4), "float32", 4), ((4, 4), "float64", 2),
                                             ((2, 2), "float32", 2), ((2, 4), "float16", 4), ((4, 4), "bfloat16", 4),
                                             ((3, 3), "float64", 0), ((2, 2), "float16", 0), ((4, 4), "complex128", 0)])
def test_vector_width_divides_the_block_row(shape, dtype, n):
    """16 bytes a load where they divide a block row, else 8; none for a width no vector divides,
    a 4-byte block row or 16-byte values."""
    fn = _special(F.BSR(*shape), dtype)
    chosen = choose_schedule(fn, lanes={("A", 2): shape[0], "i": 32, "j": 32},
                             dtypes={"A": dtype, "x": dtype, "y": dtype})
    assert chosen.vector == n, chosen.describe()


@pytest.mark.parametrize("shape, dtype, n", [((2, 2), np.float64, 2), ((4, 4), np.float32, 4),
                                             ((2, 4), np.float16, 4), ((1, 4), ml_dtypes.bfloat16, 4)])
def test_every_alignment_of_the_block_values_in_the_warp_model(model, monkeypatch, shape, dtype, n):
    """The values buffer pretends to start 0 .. n-1 elements past an aligned address: every
    shift gives the NumPy product (partial blocks at both edges), no vector load misaligned."""
    rng = np.random.default_rng(1)
    dense = (rng.integers(1, 9, (11, 13)) * (rng.random((11, 13)) < 0.4)).astype(dtype)
    A = ustc.Tensor.from_dense(dense, F.BSR(*shape))
    x = (np.arange(13) % 5 - 2).astype(dtype)
    program = library.parse_program([SPMV])
    want = dense.astype(np.float64) @ x.astype(np.float64)
    source = runtime.source(program, {"A": A, "x": x, "y": np.zeros(11, dtype)}, target="cuda")
    assert f"ldg{n}(A_vals, A_p2 * {shape[1]} + " in source and "vector loads" in source
    real = cuda_loads._simulated_address
    for shift in range(n):
        monkeypatch.setattr(cuda_loads, "_simulated_address", lambda a, s=shift: real(a) + s)
        got = runtime.execute(program, {"A": A, "x": x, "y": np.zeros(11, dtype)}, target="cuda")["y"]
        np.testing.assert_array_equal(np.asarray(got, np.float64), want)
    assert model


def test_every_block_shape_and_dtype_in_the_simulator(tmp_path):
    records = run_matrix("sim", tmp_path, simulator=True, script=CASES)
    assert len(records) == 30
    assert all(r["ok"] for r in records), failures(records)
    by_case = {r["case"]: r["schedules"][0] for r in records}
    assert "2 values of A_vals a 128-bit load" in by_case["spmv_bsr22_float64"]
    assert "4 values of A_vals a 128-bit load" in by_case["spmv_bsr44_float32"]
    assert "a 64-bit load" in by_case["spmv_bsr24_float16"]
    assert "load" not in by_case["spmv_bsr33_float64"]


@pytest.mark.gpu
@gpu_only()
def test_every_block_shape_and_dtype_on_a_gpu(tmp_path):
    records = run_matrix("gpu", tmp_path, simulator=False, script=CASES)
    assert len(records) == 30 and all(r["ok"] for r in records), failures(records)


def test_block_kernels_link_for_sm90_with_vector_loads(tmp_path, monkeypatch):
    from ustc.codegen import cuda_checks

    if cuda.compile_ptx is None:
        pytest.skip("the CUDA simulator is on (no NVVM)")
    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path / "cache"))
    program = library.parse_program([SPMV])
    rng = np.random.default_rng(3)
    for shape, dtype, vector in (((2, 2), np.float64, "ld.global.nc.v2.f64"),
                                 ((4, 4), np.float32, "ld.global.nc.v4.f32"),
                                 ((2, 4), np.float16, "ld.global.nc.v2.u32")):
        dense = (rng.integers(1, 9, (64, 64)) * (rng.random((64, 64)) < 0.3)).astype(dtype)
        A = ustc.Tensor.from_dense(dense, F.BSR(*shape))
        bindings = {"A": A, "x": np.ones(64, dtype), "y": np.zeros(64, dtype)}
        reports = cuda_checks.check_run(runtime.prepare(program, bindings, "cuda", None))
        assert len(reports) == 1 and reports[0].ok, reports[0].summary()
        report = reports[0]
        assert report.promise.vectors and report.promise.readonly, shape
        assert report.instructions.vector_loads >= 1 and vector in report.ptx, (shape, dtype)
        assert report.resources.spill_stores == report.resources.spill_loads == 0
        assert report.resources.registers <= report.promise.max_registers
