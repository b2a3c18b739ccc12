"""Semirings, prologs and epilogs on the CUDA target without a GPU: every case of
``semiring_cuda_cases.py`` runs in Numba's CUDA simulator against NumPy (min-plus in CSR with the
warp-per-row schedule's min shuffles, CSC with ``cuda.atomic.min``, merge path, COO, padded BSR and
DIA, a user semiring as device functions, max-times, or-and over bools, prolog and epilog passes,
min-plus SpGEMM), and every kernel compiles to PTX for sm_90 and links to a cubin with nvJitLink
(device functions included). A process of its own per mode, as ``tests/cuda`` does it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cuda"))

from _spawn import assert_cubins, failures, run_matrix  # noqa: E402

CASES = Path(__file__).with_name("semiring_cuda_cases.py")
NAMES = {"minplus_spmv_csr", "minplus_spmv_csr_warp4", "minplus_spmv_csc_atomic_min", "minplus_spmv_coo",
         "minplus_spmv_bsr22_padding", "minplus_spmv_diai_padding", "minplus_spmv_csr_merge_path",
         "user_minplus_spmv_csr", "maxtimes_spmv_csr", "orand_spmv_csr_bool", "orand_spmv_csc_bool_serial",
         "spmm_csr_prolog_abs_epilog_relu_pass", "spmv_dcsr_epilog_pass", "minplus_spgemm_csr"}


def test_semiring_kernels_in_the_simulator(tmp_path):
    records = run_matrix("sim", tmp_path, simulator=True, script=CASES)
    assert {r["case"] for r in records} == NAMES
    assert all(r["ok"] for r in records), failures(records)
    by_case = {r["case"]: r for r in records}
    assert by_case["minplus_spmv_csr_warp4"]["schedules"][0].startswith("warp_per_row(width=4)")
    assert "atomic" in by_case["minplus_spmv_csc_atomic_min"]["schedules"][0]
    assert by_case["minplus_spmv_csr_merge_path"]["schedules"][0].startswith("merge_path")
    assert by_case["orand_spmv_csc_bool_serial"]["schedules"][0].startswith("serial")   # no atomic or
    assert len(by_case["spmv_dcsr_epilog_pass"]["schedules"]) == 2                      # kernel + epilog


def test_semiring_kernels_link_to_cubins(tmp_path):
    pytest.importorskip("numba.cuda")
    records = run_matrix("ptx", tmp_path, simulator=False, script=CASES)
    assert all(r["ok"] for r in records), failures(records)
    kernels = [k for r in records for k in r["kernels"]]
    assert {k["name"] for k in kernels} == {"kernel_0", "kernel_0_epilog"}
    assert_cubins(kernels)
