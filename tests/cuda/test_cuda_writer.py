"""The writer on the cuda target: sparse outputs written by the generated kernel in their own
format, a thread per chunk (``codegen.writer``, ``codegen.optimize.CUDA``'s ``gpu_writer``), and
``Tensor.convert`` of tensors on 'cuda' running that kernel on the device.

* ``writer_cases.py sim`` (one subprocess, ``NUMBA_ENABLE_CUDASIM=1``): every (source, target) pair
  of the registry, 2-D and 3-D, edge shapes, two dtypes, COO duplicates, einsum copies and
  products, each equal to the NumPy pack oracle buffer for buffer;
* ``writer_cases.py ptx`` (no simulator): every writer kernel of those pairs links for sm_90
  with zero spills and keeps its schedule's promises (no atomics, no shuffles);
* in process: what the lowering refuses (workspaces, collecting levels, unsplit writers) is
  decided from its own facts; the launch covers the table of counts; the host side of a device
  run brings only the counts and each level's ``pos`` to the host;
* on a real GPU (``@pytest.mark.gpu``): the sim cases with CuPy tensors.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import ustc
from _spawn import assert_cubins, failures, gpu_only, run_matrix
from storage_oracle import assert_same_storage, oracle
from ustc import Tensor
from ustc import formats as F
from ustc.codegen import loopir as ir
from ustc.codegen import optimize
from ustc.codegen.compile import Operand, compile_program
from ustc.codegen.cuda_schedule import choose_schedule
from ustc.codegen.emit_cuda import CudaEmitter
from ustc.ops import convert as generated
from ustc.ops import cuda_host, runtime
from ustc.ops import written as written_host

CASES = Path(__file__).with_name("writer_cases.py")
REGISTRY = {nf.name: nf.format() for nf in F.NAMED}


def lowered(source, target, tuning):
    """The module of ``B[...] = A[...]`` from ``source`` into ``target`` (codegen only)."""
    ndim = source.ndim
    ops = {"B": Operand("B", target, ndim, "float64"), "A": Operand("A", source, ndim, "float64")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ustc.ConversionWarning)
        return compile_program(generated.copy_program(ndim), ops, (), tuning)


def test_every_registry_pair_in_the_simulator(tmp_path):
    records = run_matrix("sim", tmp_path, simulator=True, script=CASES)
    assert not [r for r in records if not r["ok"]], failures(records)
    by_case = {r["case"]: r for r in records}
    pairs = [r for r in records if r["case"].startswith("convert_")]
    two_d = sum(f.ndim == 2 for f in REGISTRY.values())
    three_d = [f for f in REGISTRY.values() if f.ndim == 3] + [F.COO(3), None]  # + COO3 and a batched COO
    sources = sum(f is not None and not f.batch_levels for f in three_d)  # no batched tensor lives on a device
    assert len(pairs) == two_d ** 2 + sources * len(three_d)
    written = {r["case"] for r in pairs if r["written"]}
    assert len(written) >= 60
    for case in ("convert_COO_to_DCSR", "convert_CSR_to_COO", "convert_Dense_to_CSR", "convert_COO3_to_CSF",
                 "convert_DELTA_to_COO", "convert_CROW_to_CSC"):
        assert case in written and by_case[case]["expect"]
    for case in ("convert_CSR_to_BSR", "convert_CSR_to_DIAI", "convert_CSR_to_Structured", "convert_CSC_to_CSR",
                 "convert_CSF_to_BatchedCSR"):
        assert case not in written and ".to('cpu')" in by_case[case]["refusals"][0]
    assert len([r for r in records if r["case"].startswith("duplicates_")]) >= 5
    assert by_case["einsum_mul_into_DCSR"]["plans"] == [[2, True]]
    assert by_case["einsum_copy_into_BSR_falls_back"]["plans"] == []


def test_every_writer_kernel_links_for_sm90_without_spills(tmp_path):
    pytest.importorskip("numba.cuda")
    records = run_matrix("ptx", tmp_path, simulator=False, script=CASES)
    assert len(records) >= 45
    assert not [r for r in records if not r["ok"]], failures(records)
    kernels = [k for r in records for k in r["kernels"]]
    assert_cubins(kernels)
    assert not [(k["name"], k["problems"]) for k in kernels if k["problems"]]
    assert all(k["local_ops"] == 0 and k["stack"] == 0 and k["atomics"] == 0 == k["shuffles"] for k in kernels)


def test_the_cuda_lowering_writes_split_kernels_and_refuses_what_a_gpu_cannot_run():
    coo, dcsr = REGISTRY["COO"], REGISTRY["DCSR"]
    module = lowered(coo, dcsr, optimize.CUDA)
    plan, fn = module.meta["plan"][0], module.functions[0]
    assert plan.writer == 2 and plan.split
    assert isinstance(fn.body[-1], ir.For) and fn.body[-1].parallel  # the chunk loop ends the kernel
    cpu = lowered(coo, dcsr, optimize.CPU)
    assert isinstance(cpu.functions[0].body[-1], ir.Return)  # the CPU kernel keeps its return
    for name in ("BSR", "DIAI", "Structured"):  # workspaces, sorts, a collecting pass: the coordinate lists
        module = lowered(REGISTRY["CSR"], REGISTRY[name], optimize.CUDA)
        assert module.meta["plan"][0].writer == 0
        assert not [s for s in ir.walk(module.functions[0].body) if isinstance(s, (ir.Alloc, ir.Sort))]
        assert lowered(REGISTRY["CSR"], REGISTRY[name], optimize.CPU).meta["plan"][0].writer
    # compressed rows: the CPU keeps its row-parallel kernel, the GPU takes the writer
    assert lowered(coo, REGISTRY["CSR"], optimize.CPU).meta["plan"][0].writer == 0
    assert lowered(coo, REGISTRY["CSR"], optimize.CUDA).meta["plan"][0].split


def test_a_writer_kernel_is_a_thread_per_chunk_launched_over_the_table_of_counts():
    fn = lowered(REGISTRY["CSR"], REGISTRY["DCSR"], optimize.CUDA).functions[0]
    for override in (None, "warp_per_row", "block_tile:4"):
        schedule = choose_schedule(fn, None, override)
        assert schedule.kind == "thread_per_row" and "a thread per chunk" in schedule.reason
    module = lowered(REGISTRY["CSR"], REGISTRY["DCSR"], optimize.CUDA)
    text = CudaEmitter().emit(module, {fn.name: choose_schedule(fn)})
    assert "blocks = blocks_for(len(B_counts), 256, 4096)" in text
    assert "result" not in text.split("def launch_kernel_0")[1]  # no count comes back: no sync per launch


def test_chunks_suit_the_device_and_stay_within_the_loop(monkeypatch):
    monkeypatch.setattr(cuda_host, "simulator", lambda: True)
    assert [cuda_host.writer_chunks(n) for n in (0, 1, 2, 10**6)] == [1, 1, 2, cuda_host.SIMULATED_CHUNKS]
    with cuda_host.compile_only([]):
        assert cuda_host.writer_chunks(10**6) == 1  # nothing runs: the smallest table
    monkeypatch.setattr(cuda_host, "simulator", lambda: False)
    monkeypatch.setattr(cuda_host, "compute_capability", lambda: "none")  # a model of a GPU runs it
    assert cuda_host.writer_chunks(10**6) == cuda_host.NOMINAL_SMS * cuda_host.CHUNKS_PER_SM
    assert cuda_host.writer_chunks(77) == 77


def test_a_batched_output_on_a_device_is_refused_before_any_kernel_runs():
    plan = lowered(REGISTRY["CSF"], REGISTRY["BatchedCSR"], optimize.CPU).meta["plan"][0]
    calls = []
    with pytest.raises(ustc.DeviceError, match="batched storage lives on the host"):
        written_host.run(REGISTRY["BatchedCSR"], (2, 3, 4), np.float64, plan, calls.append,
                         written_host.Place(np, 2, device="cuda"))
    assert not calls


class _FakeDevice:
    """Stands in for CuPy: NumPy arrays, every transfer to the host logged (bytes)."""

    def __init__(self):
        self.to_host: list[int] = []

    zeros, empty = staticmethod(np.zeros), staticmethod(np.empty)

    def asnumpy(self, a):
        self.to_host.append(a.nbytes)
        return np.array(a)

    @staticmethod
    def asarray(a):
        return np.array(a)


def test_a_device_run_brings_only_the_counts_and_pos_to_the_host(monkeypatch):
    """The host side of a device run (``written.Place`` with a device array module), on the CPU
    kernel: the result is the oracle's; what came to the host is the table of counts and each
    level's pos, never coordinates or values."""
    fake, original = _FakeDevice(), written_host.run
    monkeypatch.setattr(written_host, "run", lambda fmt, shape, dtype, plan, call:
                        original(fmt, shape, dtype, plan, call, written_host.Place(fake, 4)))
    rng = np.random.default_rng(3)
    dense = np.round(rng.random((40, 30)) * 9) * (rng.random((40, 30)) < 0.3)
    a = Tensor.from_dense(dense, F.COO(2))
    got = generated.written(a, REGISTRY["DCSR"])
    assert_same_storage(got, oracle(a, REGISTRY["DCSR"]))
    counts = 4 * 2 * 8  # four chunks x two levels x int64
    pos = sum(b.nbytes for (k, name), b in got._buffers.items() if name == "pos")
    assert sorted(fake.to_host) == sorted([counts] + [b.nbytes for (k, name), b in got._buffers.items()
                                                      if name == "pos"])
    assert sum(fake.to_host) == counts + pos < got.nbytes // 2


@pytest.mark.gpu
@gpu_only()
def test_every_registry_pair_on_the_gpu(tmp_path):
    records = run_matrix("gpu", tmp_path, simulator=False, script=CASES)
    assert not [r for r in records if not r["ok"]], failures(records)


@pytest.mark.gpu
@gpu_only()
def test_convert_of_a_cupy_tensor_stays_on_the_device():
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(5)
    a = Tensor.from_dense(rng.random((300, 200)) * (rng.random((300, 200)) < 0.05), F.COO(2))
    got = a.to("cuda").convert(REGISTRY["DCSR"])
    assert got.device == "cuda" and all(isinstance(b, cupy.ndarray) for b in got._buffers.values())
    assert_same_storage(got.to("cpu"), oracle(a, REGISTRY["DCSR"]))
