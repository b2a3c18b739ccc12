"""User tensors and indices spelled like the names the CUDA and CPU emitters write (``lane``,
``group``, ``i_base``, ``mp_*``, ``np``, ``cuda``, ``stream``, ``result``, ...) compute the right
numbers: in Numba's CUDA simulator (``names_cases.py sim``, a process of its own) and on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from _spawn import failures, run_matrix

CASES = Path(__file__).with_name("names_cases.py")


def test_colliding_names_in_the_simulator(tmp_path):
    records = run_matrix("sim", tmp_path, simulator=True, script=CASES)
    assert len(records) == 9
    assert all(r["ok"] for r in records), failures(records)
    schedules = " ".join(s for r in records for s in r["schedules"])
    for kind in ("warp_per_row(width=4)", "merge_path", "block_tile", "thread_per_row", "serial"):
        assert kind in schedules, kind  # every schedule that writes names of its own ran


def test_colliding_names_on_the_cpu(monkeypatch):
    import names_cases
    from ustc.ops import runtime

    monkeypatch.setattr(runtime, "SERIAL_WORK", 0)  # the parallel kernels (prange), not the serial twins
    for case in names_cases.cases():
        record = names_cases.run(case, "cpu")
        assert record["ok"], (case[0], record)


def test_a_parameter_named_like_a_module_import_is_renamed():
    """The emitter renames (roles tell the host what to pass, so the name is free to change)."""
    from ustc.codegen import loopir as ir
    from ustc.codegen.emit_cpu import CpuEmitter
    from ustc.codegen.emit_cuda import CudaEmitter
    from ustc.codegen.roles import Kind, Role

    store = ir.Store("np", (ir.Index(ir.Var("i")),), ir.Const(1.0))
    fn = ir.Function("kernel_0", (ir.Param("np", Role(Kind.ARRAY, "np")), ir.Param("n_i", Role(Kind.EXTENT, index="i"))),
                     (ir.For("i", ir.Const(0), ir.Var("n_i"), (store,)),))
    text = CpuEmitter().emit(ir.Module(("test",), (fn,)))
    assert "def kernel_0(np_2, n_i):" in text and "np_2[np.uintp(i)] = 1.0" in text
    cuda = CudaEmitter().emit(ir.Module(("test",), (ir.rename(fn, {"np": "stream"}),)))
    assert "def launch_kernel_0(stream_2, n_i, stream=0):" in cuda
    with pytest.raises(TypeError):
        ir.Param("np", ("array", "np"))
