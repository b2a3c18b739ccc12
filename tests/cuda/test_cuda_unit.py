"""The CUDA target's pieces that run in this process: schedules, thread mappings, devices, CLI.

Kernels themselves run in ``test_simulator.py`` / compile in ``test_ptx.py`` (subprocesses).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import ustc
from ustc.cli.main import main as cli_main
from ustc.codegen import optimize
from ustc.codegen import loopir as ir
from ustc.codegen.cuda_schedule import (Schedule, _linear, choose_schedule, lane_bucket, mapping, merge_rows, skewed,
                                         substitute, tile_loops, vector_width)
from ustc.codegen.emit_cuda import CudaEmitter
from ustc.ops import cuda_host, library, runtime

from _programs import functions

F = ustc.formats


def test_vector_width_by_mean_row_length():
    assert vector_width(1.5, 3) == 0          # short rows: a thread per row
    assert vector_width(4.0, 9) == 4
    assert vector_width(7.0, 7) == 8          # the 7-point stencil: 8 lanes
    assert vector_width(300.0, 900) == 32
    assert vector_width(2.0, 5000) == 32      # skewed: a warp per row


def test_schedule_heuristic_and_overrides():
    fn = functions("y[i] = A[i,j] * x[j]", {"A": F.CSR}).functions[0]
    assert choose_schedule(fn).kind == "thread_per_row"
    chosen = choose_schedule(fn, {("A", 1): 8})
    assert (chosen.kind, chosen.width) == ("warp_per_row", 8) and "mean row length" in chosen.reason
    assert choose_schedule(fn, {("A", 1): 8}, "thread_per_row").kind == "thread_per_row"
    assert choose_schedule(fn, None, "warp_per_row:16").width == 16
    assert choose_schedule(fn, None, Schedule("warp_per_row", 4, threads=128)).threads == 128
    sim = choose_schedule(fn, simulator=True)
    assert (sim.threads, sim.max_blocks) == (32, 2)
    spmm = functions("C[i,k] = A[i,j] * B[j,k]", {"A": F.CSR}).functions[0]
    fallback = choose_schedule(spmm, None, "warp_per_row")
    assert fallback.kind == "thread_per_row" and "no shared row reduction" in fallback.reason
    with pytest.raises(ValueError, match="unknown CUDA schedule"):
        Schedule("block_per_planet")
    with pytest.raises(ValueError, match="power of two"):
        Schedule("warp_per_row", 3)


def test_thread_mappings_follow_the_loop_ir():
    csr = functions("y[i] = A[i,j] * x[j]", {"A": F.CSR}).functions[0]
    assert mapping(csr).loop.parallel and not mapping(csr).atomic
    csc = functions("y[i] = A[i,j] * x[j]", {"A": F.CSC}).functions[0]
    assert mapping(csc).atomic and not mapping(csc).loop.parallel
    add = functions("C[i,j] = A[i,j] + B[i,j]", {"A": F.CSR, "B": F.DCSR, "C": F.CSR}).functions[0]
    assert mapping(add).loop is None  # entries appended one after another: one thread
    text = CudaEmitter().emit(functions("y[i] = A[i,j] * x[j]", {"A": F.CSC}))
    assert "cuda.atomic.add(y," in text and "prange" not in text
    assert "cuda.atomic" not in CudaEmitter().emit(functions("y[i] = A[i,j] * x[j]", {"A": F.CSR}))


def test_cuda_tuning_keeps_the_cpu_kernels():
    assert optimize.CPU == optimize.Tuning()
    text = CudaEmitter().emit(functions("y[i] = A[i,j] * x[j]", {"A": F.DIAI}))
    assert "i_tile" in text and "1024" not in text  # one row per thread, diagonals streamed


def test_mixing_devices_names_both():
    a = ustc.Tensor.from_package(sp.random(4, 4, density=0.5, format="csr", random_state=0))
    on_gpu = ustc.Tensor(a.format, a.shape, a._buffers, a.values, device="cuda")
    program = library.parse_program("y[i] = A[i,j] * x[j]")
    with pytest.raises(ustc.DeviceError, match="'A' is on cuda, 'x' is on cpu|'x' is on cpu.*'A' is on cuda"):
        runtime.execute(program, {"A": on_gpu, "x": ustc.Tensor.from_package(np.ones(4)), "y": np.zeros(4)})
    assert cuda_host.check_devices({"A": a, "x": np.ones(4)}) == "cpu"


@pytest.mark.skipif(cuda_host.simulator(), reason="checks the no-device error, not the simulator")
def test_running_without_a_device_says_how(monkeypatch):
    monkeypatch.setattr(cuda_host, "compute_capability", lambda: "none")
    a = ustc.Tensor.from_package(sp.random(4, 4, density=0.5, format="csr", random_state=0))
    program = library.parse_program("y[i] = A[i,j] * x[j]")
    with pytest.raises(ustc.DeviceError, match="NUMBA_ENABLE_CUDASIM=1"):
        runtime.execute(program, {"A": a, "x": np.ones(4), "y": np.zeros(4)}, target="cuda")


class _DeviceArray:
    """Stands in for a CuPy array: a ``__cuda_array_interface__`` naming a stream."""
    __cuda_array_interface__ = {"shape": (4,), "typestr": "<f8", "data": (0, False), "version": 3, "stream": 7}


def test_launches_on_a_stream_view_device_arrays_unsynchronised(monkeypatch):
    numba_cuda = pytest.importorskip("numba.cuda")
    seen, launched = [], []
    monkeypatch.setattr(numba_cuda, "as_cuda_array", lambda a, sync=True: seen.append(sync) or ("view", a))
    dev, numba_view = _DeviceArray(), type("Numba", (), {"__cuda_array_interface__": {}, "__cuda_ndarray__": True})()
    cuda_host.on_stream(lambda *a, stream: launched.append((a, stream)), "S", dev, numba_view, 3, np.float64(2))
    (args, stream), = launched
    assert stream == "S" and args == (("view", dev), numba_view, 3, np.float64(2))
    assert seen == [False]      # only the foreign device array is viewed, and without a stream wait


def test_import_ustc_does_not_import_numba_cuda():
    code = "import sys, ustc, ustc.ops.runtime; print('numba.cuda' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


@pytest.mark.skipif(cuda_host.simulator(), reason="PTX needs NVVM, not the simulator")
def test_cli_emits_cuda_source_and_ptx(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path))
    assert cli_main(["compile", "CSR", "--op", "spmv", "--target", "cuda", "--schedule", "warp_per_row:8"]) == 0
    source = capsys.readouterr().out
    assert "@cuda.jit(cache=True, **bounds(256, 2))" in source and "def launch_kernel_0(" in source
    assert "# promises: at most 128 registers a thread" in source
    assert "cuda.shfl_down_sync" in source and "A_lvl1_pos" in source
    assert cli_main(["compile", "COO", "--op", "spmv", "--target", "cuda", "--emit", "ptx", "--verbose"]) == 0
    ptx = capsys.readouterr().out
    assert ".target sm_90" in ptx and ".maxntid 256, 1, 1" in ptx and ".minnctapersm 2" in ptx
    assert " registers (budget 128), spills 0/0 bytes" in ptx and "// occupancy at 256 threads: " in ptx
    assert "// checks: ok" in ptx


def test_merge_path_needs_contiguous_row_segments_and_linear_stores():
    csr = functions("y[i] = A[i,j] * x[j]", {"A": F.CSR}).functions[0]
    m = mapping(csr, warp=True)
    assert merge_rows(csr, m)
    assert not merge_rows(*(lambda f: (f, mapping(f, warp=True)))(
        functions("y[i] = A[i,j] * x[j]", {"A": F.COO(2)}).functions[0]))  # no row reduction
    acc, alpha = ir.Var("acc"), ir.Var("alpha")
    assert _linear(acc, "acc") and _linear(ir.Bin("*", alpha, acc), "acc") and _linear(ir.Neg(acc), "acc")
    assert not _linear(ir.Bin("*", acc, acc), "acc") and not _linear(ir.add(acc, 1), "acc")
    bumped = substitute(m.warp.start, "i", ir.add(ir.Var("i"), 1))
    assert bumped == m.warp.stop  # stop(i) == start(i + 1): the segments tile the entries


def test_block_tile_loops_write_disjoint_outputs():
    def loops(text, fmt):
        fn = functions(text, {"A": fmt}).functions[0]
        return [s.var for s in tile_loops(mapping(fn))]

    assert loops("y[i] = A[i,j] * x[j]", F.CSR) == []            # one row sum: lanes would race
    dia = functions("y[i] = A[i,j] * x[j]", {"A": F.DIAI}).functions[0]
    assert loops("y[i] = A[i,j] * x[j]", F.DIAI) == ["i"]        # the row tile of one row ...
    assert choose_schedule(dia, lanes={"i": 32, "j": 32}).kind == "thread_per_row"  # ... is one lane's work
    assert loops("C[i,k] = A[i,j] * B[j,k]", F.CSR) == ["k"]
    assert loops("y[i] = A[i,j] * x[j]", F.BSR(2, 2)) == ["v_i_mod2"]
    assert loops("y[i] = A[i,j] * x[j]", F.BSC(2, 2)) == ["A_p1", "v_i_mod2"]  # atomic adds: any loop


def test_schedule_heuristic_for_skewed_rows_and_small_dense_loops():
    spmv = functions("y[i] = A[i,j] * x[j]", {"A": F.CSR}).functions[0]
    assert vector_width(2.0, 5000) == 32 and skewed(2.0, 5000) and not skewed(7.0, 7)
    chosen = choose_schedule(spmv, {("A", 1): 32}, skew=frozenset({("A", 1)}))
    assert chosen.kind == "merge_path" and "skewed" in chosen.reason
    spmm = functions("C[i,k] = A[i,j] * B[j,k]", {"A": F.CSR}).functions[0]
    assert choose_schedule(spmm, lanes={"k": 16}).describe().startswith("block_tile(width=16, loop=k)")
    assert choose_schedule(spmm, lanes={"k": 1}).kind == "thread_per_row"  # one column: nothing to share
    assert choose_schedule(spmm, None, "block_tile:8:k").width == 8
    assert "no shared row reduction" in choose_schedule(spmm, None, "merge_path").reason
    assert "no dense loop" in choose_schedule(spmv, None, "block_tile").reason
    coo = functions("y[i] = A[i,j] * x[j]", {"A": F.COO(2)}).functions[0]
    assert choose_schedule(coo, None, "merge_path").kind == "thread_per_row"
    assert [lane_bucket(n) for n in (0, 1, 2, 3, 16, 17, 10**6)] == [1, 1, 2, 4, 16, 32, 32]


def test_row_statistics_and_lane_buckets_key_the_kernel():
    rows = np.zeros((64, 400))
    rows[5, :300] = 1.0
    rows[np.arange(8, 60, 2), 3] = 2.0
    a = ustc.Tensor.from_package(sp.csr_array(rows))
    run = runtime.prepare(library.parse_program("C[i,k] = A[i,j] * B[j,k]"),
                          {"A": a, "B": np.ones((400, 5)), "C": np.zeros((64, 5))}, "cuda")
    widths, skew = cuda_host.row_statistics(run.tensors)
    assert skew == ["A:1"] and widths == {"A:1": 32}
    lanes = cuda_host.lane_buckets(run)
    assert lanes["k"] == 8 and lanes["i"] == 32 and lanes["A:1"] == 32
    assert {"widths", "skew", "lanes"} <= set(run.fields)
