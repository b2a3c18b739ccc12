"""Load intrinsics (``codegen.cuda_loads``): read-only and vector loads in PTX for sm_90, their
simulator and warp-model semantics (alignment, tails, no read-only load of a written array),
and the emitter reading every operand a kernel never writes through ``ldg``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ustc
from ustc.codegen import cuda_loads, warp_model
from ustc.codegen.cuda_loads import aligned, ldg, ldg2, ldg4, ldg8, vector_size
from ustc.codegen.cuda_machine import instructions
from ustc.codegen.cuda_schedule import Schedule, readonly_arrays
from ustc.codegen.emit_cuda import CudaEmitter
from ustc.codegen.warp_lanes import Memory, ModelError
from ustc.errors import KernelError
from _programs import functions

cuda = pytest.importorskip("numba.cuda")
F = ustc.formats


# -- PTX ------------------------------------------------------------------------------------------

def _ptx(kernel, sig) -> str:
    if cuda.compile_ptx is None:
        pytest.skip("the CUDA simulator is on (no NVVM)")
    return cuda.compile_ptx(kernel, sig, cc=(9, 0))[0]


def _loads(ptx: str) -> list[str]:
    return [line.split()[0] for line in ptx.splitlines() if line.strip().startswith("ld.global")]


def scalar(y, x, m):
    i = cuda.grid(1)
    y[i] = ldg(x, np.uintp(i)) + ldg(m, (i, 1))


def pair64(y, x):
    i = cuda.grid(1)
    a, b = ldg2(x, 2 * i)
    y[i] = a - b


def quad(y, x):
    i = cuda.grid(1)
    a, b, c, d = ldg4(x, 4 * i)
    y[i] = np.float64(a) + np.float64(b) + np.float64(c) + np.float64(d)


def octet(y, x):
    i = cuda.grid(1)
    v = ldg8(x, 8 * i)
    y[i] = np.float64(v[0]) + np.float64(v[3]) + np.float64(v[4]) + np.float64(v[7])


@pytest.mark.parametrize("kernel, dtype, want", [
    (pair64, "float64", "ld.global.nc.v2.f64"),      # 128-bit
    (quad, "float32", "ld.global.nc.v4.f32"),         # 128-bit
    (quad, "uint32", "ld.global.nc.v4.u32"),          # 128-bit packed gap words
    (octet, "float16", "ld.global.nc.v4.u32"),        # eight halves: 128 bits as four words
    (quad, "float16", "ld.global.nc.v2.u32"),         # four halves: 64-bit
    (octet, "uint8", "ld.global.nc.v2.u32"),          # 64-bit
])
def test_vector_loads_are_one_read_only_vector_instruction(kernel, dtype, want):
    from numba import types

    ptx = _ptx(kernel, (types.float64[:], types.Array(getattr(types, dtype), 1, "C")))
    assert _loads(ptx) == [want]
    counts = instructions(ptx)
    assert counts.vector_loads == counts.readonly_loads == counts.global_loads == 1


def flag(y, m):
    i = cuda.grid(1)
    if ldg(m, i):
        y[i] = 1.0


def test_a_boolean_array_loads_its_byte_read_only():
    """An or-and semiring reads boolean operands: one read-only byte load, tested for nonzero."""
    from numba import types

    ptx = _ptx(flag, (types.float64[:], types.boolean[:]))
    assert _loads(ptx) == ["ld.global.nc.u8"]


def test_scalar_read_only_loads_of_1d_and_2d_arrays():
    from numba import types

    ptx = _ptx(scalar, (types.float64[:], types.float64[:], types.float32[:, :]))
    assert sorted(_loads(ptx)) == ["ld.global.nc.f32", "ld.global.nc.f64"]


def test_vector_loads_refuse_what_they_cannot_load():
    from numba import types

    with pytest.raises(Exception, match="moves 32 bytes; vector loads move 8 or 16"):
        _ptx(quad, (types.float64[:], types.float64[:]))
    with pytest.raises(Exception, match="reads 1-D arrays"):
        _ptx(quad, (types.float64[:], types.float32[:, :]))


# -- plain Python (the simulator) and the warp model --------------------------------------------

def test_vector_sizes_and_alignment():
    assert [vector_size(s) for s in (1, 2, 4, 8, 16)] == [0, 8, 4, 2, 0]
    assert [vector_size(s, 8) for s in (1, 2, 4, 8)] == [8, 4, 2, 0]
    buffer = np.zeros(96, np.uint8)
    start = (-buffer.ctypes.data) % 16
    words = buffer[start:start + 64].view(np.float32)
    assert aligned(words, 4) and aligned(words[4:], 4) and not aligned(words[1:], 4) and aligned(words[2:], 2)
    assert not aligned(object(), 2)


def aligned_array(values: np.ndarray) -> np.ndarray:
    """A copy of ``values`` whose data starts at a multiple of 16 bytes."""
    buffer = np.zeros(values.nbytes + 16, np.uint8)
    start = (-buffer.ctypes.data) % 16
    out = buffer[start:start + values.nbytes].view(values.dtype)
    out[:] = values
    return out


def test_simulated_loads_check_alignment_and_tails():
    sim4 = cuda_loads._simulated_vector("ldg4", 4)
    x = aligned_array(np.arange(10.0, dtype=np.float32))
    assert sim4(x, 4) == (4.0, 5.0, 6.0, 7.0)
    with pytest.raises(KernelError, match=r"ldg4\(2\) on an array of 10 elements"):
        sim4(x, 2)
    with pytest.raises(KernelError, match="4 elements left"):
        sim4(x, 8)           # would read x[10], x[11]
    assert sim4(x[2:], 2) == (4.0, 5.0, 6.0, 7.0)   # aligned by address, not by index
    with pytest.raises(KernelError, match="aligned to 4 elements"):
        sim4(x[2:], 0)
    assert cuda_loads._simulated_address(x[3:]) % 4 == 3
    assert cuda_loads._simulated_ldg(x, 3) == 3.0


def _run_model(kernel, blocks, threads, *args):
    return warp_model.Kernel(kernel)[blocks, threads](*args)


def test_warp_model_runs_vector_loads_lane_by_lane():
    x = aligned_array(np.arange(64.0))
    y = np.zeros(32)
    _run_model(pair64, 1, 32, y, x)
    np.testing.assert_array_equal(y, x[0::2] - x[1::2])
    z = np.zeros(8)
    _run_model(quad, 1, 8, z, aligned_array(x[:32].astype(np.float32)))
    np.testing.assert_array_equal(z, x[:32].reshape(8, 4).sum(1))


def tail_past_end(y, x):
    i = cuda.grid(1)
    if i < y.shape[0]:
        a, b = ldg2(x, 2 * i)
        y[i] = a + b


def misaligned(y, x):
    i = cuda.grid(1)
    if i < y.shape[0]:
        a, b, c, d = ldg4(x, 4 * i + 1)
        y[i] = a + d


def written(y, x):
    i = cuda.grid(1)
    if i < y.shape[0]:
        y[i] = ldg(y, i) + x[i]


def test_warp_model_refuses_broken_load_contracts():
    with pytest.raises(ModelError, match=r"ldg2\(x, 6\) in thread 3: .* 2 elements left \(the array has 7\)"):
        _run_model(tail_past_end, 1, 32, np.zeros(4), aligned_array(np.arange(7.0)))
    _run_model(tail_past_end, 1, 32, np.zeros(3), aligned_array(np.arange(7.0)))  # the guard keeps thread 3 out
    with pytest.raises(ModelError, match="aligned to 4 elements"):
        _run_model(misaligned, 1, 32, np.zeros(2), aligned_array(np.arange(16.0, dtype=np.float32)))
    with pytest.raises(ModelError, match="aligned to 2 elements"):  # an index aligned, the buffer not
        _run_model(tail_past_end, 1, 32, np.zeros(2), aligned_array(np.arange(9.0))[1:])
    with pytest.raises(ModelError, match="the kernel writes y"):
        _run_model(written, 1, 32, np.zeros(4), np.arange(4.0))


def test_model_lanes_respect_the_mask():
    memory = Memory("x", aligned_array(np.arange(8.0, dtype=np.float32)), tracked=False)
    mask = np.zeros(32, bool)
    mask[:2] = True
    index = np.full(32, 99)
    index[:2] = [0, 4]
    first, *_ = ldg4.lanes(mask, memory, index)
    assert list(first[:2]) == [0.0, 4.0]


SIMULATED = textwrap.dedent("""
    import numpy as np
    from numba import cuda
    from ustc.codegen.cuda_loads import element_address, ldg, ldg4

    @cuda.jit
    def k(y, lead, x):
        i = cuda.grid(1)
        first = (-element_address(x)) % 4    # the first element a 16-byte load may start at
        if i == 0:
            lead[0] = first
        if i < y.shape[0]:
            a, b, c, d = ldg4(x, first + 4 * i)
            y[i] = a + d + ldg(x, 0)

    x = np.arange(20.0, dtype=np.float32)
    y, lead = np.zeros(4, np.float32), np.zeros(1, np.int64)
    k[1, 8](y, lead, x)
    f = int(lead[0])
    assert list(y) == [2 * f + 8 * i + 3 for i in range(4)], (y, f)
    try:
        k[1, 8](np.zeros(6, np.float32), lead, x)   # thread 5 would read past x[19]
    except Exception as exc:
        assert "on an array of 20 elements" in str(exc) and "4 elements left" in str(exc), exc
    else:
        raise AssertionError("a vector load past the end ran")
    print("ok")
""")


def test_the_simulator_runs_the_loads_and_checks_them():
    import os

    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    done = subprocess.run([sys.executable, "-c", SIMULATED], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


# -- the emitter's read-only loads ---------------------------------------------------------------

def test_readonly_arrays_are_the_operands_never_written():
    spmv = functions("y[i] = A[i,j] * x[j]", {"A": F.CSR}).functions[0]
    assert readonly_arrays(spmv) == {"A_lvl1_pos", "A_lvl1_crd", "A_vals", "x"}
    accumulate = functions("y[i] += A[i,j] * y[i]", {"A": F.CSR}).functions[0]
    assert "y" not in readonly_arrays(accumulate) and "A_vals" in readonly_arrays(accumulate)
    for fn in functions("C[i,j] = A[i,j] + B[i,j]", {"A": F.CSR, "B": F.COO(2), "C": F.CSR}).functions:
        params = {p.name: p.role.kind.value for p in fn.params}
        assert all(params[name] in ("pos", "crd", "vals", "array") for name in readonly_arrays(fn))


def test_emitted_kernels_read_operands_through_ldg_and_promise_it():
    module = functions("y[i] = A[i,j] * x[j]", {"A": F.DELTA(4, True)})
    name = module.functions[0].name
    text = CudaEmitter().emit(module)
    assert "from ustc.codegen.cuda_loads import ldg, ldg2, ldg4, ldg8" in text
    assert "ldg(A_vals, np.uintp(A_p1)) * ldg(x, np.uintp(j))" in text and "ldg(y" not in text
    assert "no atomics, read-only loads\n" in text
    plain = CudaEmitter().emit(module, {name: Schedule(readonly_loads=False)})
    assert "ldg(" not in plain.split("import ldg, ldg2, ldg4, ldg8", 1)[1]
    assert "no atomics, no read-only loads\n" in plain


def test_a_user_name_spelled_like_a_load_is_renamed():
    module = functions("y[i] = A[i,j] * ldg[j]", {"A": F.CSR})
    text = CudaEmitter().emit(module)
    assert "ldg(ldg_2, np.uintp(j))" in text  # the user's array, renamed, read through the intrinsic


def test_a_0d_operand_keeps_its_plain_load():
    from ustc.codegen import loopir as ir
    from ustc.codegen.roles import Kind, Role

    params = (ir.Param("y", Role(Kind.ARRAY, "y")), ir.Param("s", Role(Kind.ARRAY, "s")),
              ir.Param("x", Role(Kind.ARRAY, "x")))
    body = (ir.Store("y", (ir.Const(0),), ir.Bin("*", ir.Load("s", ()), ir.Load("x", (ir.Const(1),)))),)
    assert readonly_arrays(ir.Function("k", params, body)) == {"x"}   # ldg takes an index
