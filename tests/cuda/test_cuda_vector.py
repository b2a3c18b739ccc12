"""Vector loads of a thread's row values (``codegen.cuda_vector``, ``Schedule.vector``): chosen
from the loop IR and the values' dtype, run head / whole vectors / tail in the lock-step warp
model for every alignment of the values buffer, and link for sm_90 with 128-bit loads."""

from __future__ import annotations

import numpy as np
import pytest

import ustc
from ustc.codegen import cuda_loads
from ustc.codegen.cuda_schedule import Schedule, choose_schedule, mapping, vector_row
from ustc.ops import library, runtime

from _programs import functions

cuda = pytest.importorskip("numba.cuda")
F = ustc.formats
SPMV = "y[i] = A[i,j] * x[j]"


def compiled(text: str, formats: dict, dtype="float64"):
    return functions(text, formats, dtype).functions


def test_the_row_loop_and_its_values_are_found_in_the_loop_ir():
    fn = compiled(SPMV, {"A": F.CSR})[0]
    found = vector_row(fn, mapping(fn))
    assert found.array == "A_vals" and found.row.step == 1 and not found.row.parallel
    assert found.at == found.row.var and found.length == 0     # values at the loop variable, rows of any length
    delta = compiled(SPMV, {"A": F.DELTA(4, True)})[0]
    assert vector_row(delta, mapping(delta)).array == "A_vals"
    spmm = compiled("C[i,k] = A[i,j] * B[j,k]", {"A": F.CSR})[0]
    assert vector_row(spmm, mapping(spmm)) is None          # a loop inside the row loop
    dia = compiled(SPMV, {"A": F.DIAI})[0]
    assert vector_row(dia, mapping(dia)) is None


@pytest.mark.parametrize("dtype, n", [("float64", 2), ("float32", 4), ("float16", 8), ("bfloat16", 8),
                                      ("complex128", 0)])
def test_vector_width_follows_the_values_dtype(dtype, n):
    fn = compiled(SPMV, {"A": F.CSR})[0]
    chosen = choose_schedule(fn, dtypes={"A": dtype, "x": dtype, "y": dtype})
    assert (chosen.kind, chosen.vector) == ("thread_per_row", n)
    assert ("128-bit load" in chosen.reason) == bool(n)


def test_vector_loads_only_where_a_thread_walks_the_row():
    fn = compiled(SPMV, {"A": F.CSR})[0]
    assert choose_schedule(fn).vector == 0                                   # no dtypes: none
    assert choose_schedule(fn, {("A", 1): 8}, dtypes={"A": "float32"}).vector == 0   # a warp per row
    assert choose_schedule(fn, None, "thread_per_row", dtypes={"A": "float32"}).vector == 4
    with pytest.raises(ValueError, match="thread_per_row or block_tile only"):
        Schedule("warp_per_row", 8, vector=4)
    with pytest.raises(ValueError, match="vector loads of 2, 4 or 8"):
        Schedule(vector=3)


def _matrix(rows, cols, dtype, seed):
    """Rows of every length from 0 to cols - 1 (heads, whole vectors and tails of each size)."""
    rng = np.random.default_rng(seed)
    dense = np.zeros((rows, cols))
    for r in range(rows):
        k = r % cols
        dense[r, np.sort(rng.choice(cols, k, replace=False))] = rng.integers(1, 9, k)
    return dense.astype(dtype)


@pytest.mark.parametrize("fmt, dtype", [(F.CSR, np.float64), (F.CSR, np.float32),
                                        (F.DELTA(4, True), np.float16), (F.DELTA(2), np.float32),
                                        (F.DELTA(3, True), np.float32), (F.DELTA(5, True), np.float64),
                                        (F.DELTA(6, True), np.float32), (F.DELTA(10, True), np.float16)])
def test_every_alignment_of_the_values_in_the_warp_model(model, monkeypatch, fmt, dtype):
    """The values buffer pretends to start 0 .. n-1 elements past a 16-byte boundary (the model
    and the vector loads' alignment check both see the shifted address): every shift gives
    the NumPy product, and no vector load is misaligned or runs past a row."""
    dense = _matrix(40, 19, dtype, seed=1)
    A = ustc.Tensor.from_dense(dense, fmt)
    x = np.arange(19, dtype=dtype) - 9
    program = library.parse_program([SPMV])
    want = dense.astype(np.float64) @ x.astype(np.float64)
    run = {"target": "cuda", "schedule": "thread_per_row"}   # CSR's rows would get warps
    source = runtime.source(program, {"A": A, "x": x, "y": np.zeros(40, dtype)}, **run)
    n = {np.float64: 2, np.float32: 4, np.float16: 8}[dtype]
    assert f"ldg{n}(A_vals, " in source and "vector loads" in source
    real = cuda_loads._simulated_address
    for shift in range(n):
        monkeypatch.setattr(cuda_loads, "_simulated_address", lambda a, s=shift: real(a) + s)
        got = runtime.execute(program, {"A": A, "x": x, "y": np.zeros(40, dtype)}, **run)["y"]
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-3)
    assert model and all(s.threads == 256 for s in model)


def test_vector_kernels_link_for_sm90_with_128_bit_loads(tmp_path, monkeypatch):
    from ustc.codegen import cuda_checks

    if cuda.compile_ptx is None:
        pytest.skip("the CUDA simulator is on (no NVVM)")
    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path / "cache"))
    program = library.parse_program([SPMV])
    for fmt, dtype, vector in ((F.DELTA(4, True), np.float16, "ld.global.nc.v4.u32"),
                               (F.DELTA(4, True), np.float32, "ld.global.nc.v4.f32"),
                               (F.DELTA(6, True), np.float32, "ld.global.nc.v4.f32"),   # 5 gaps a word
                               (F.CSR, np.float64, "ld.global.nc.v2.f64")):
        A = ustc.Tensor.from_dense(_matrix(8, 12, dtype, seed=2), fmt)
        bindings = {"A": A, "x": np.ones(12, dtype), "y": np.zeros(8, dtype)}
        reports = cuda_checks.check_run(runtime.prepare(program, bindings, "cuda", None))
        assert len(reports) == 1 and reports[0].ok, reports[0].summary()
        report = reports[0]
        assert report.promise.vectors and report.promise.readonly
        assert report.instructions.vector_loads >= 1 and vector in report.ptx
        assert report.resources.spill_stores == report.resources.spill_loads == 0
        assert report.resources.registers <= report.promise.max_registers
